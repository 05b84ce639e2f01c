// another_libtorch LIBC10: loads another libtorch's libc10 (RTLD_LOCAL, so
// that the process survives it), then makes a group. ddp must refuse with
// ddp::InvalidArgument, naming both libtorchs' folders: exit 3.
#include <ddp/errors.h>
#include <ddp/init.h>

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: another_libtorch LIBC10\n");
    return 2;
  }
  if (!dlopen(argv[1], RTLD_NOW | RTLD_LOCAL)) {
    std::fprintf(stderr, "dlopen %s: %s\n", argv[1], dlerror());
    return 2;
  }
  try {
    ddp::init_process_group();
  } catch (const ddp::InvalidArgument& e) {
    std::printf("refused: %s\n", e.what());
    std::fflush(stdout);
    // Not return: the other libc10's static destructors would free the
    // first's objects at exit (the process is broken; ddp refused to use it).
    std::_Exit(3);
  }
  std::printf("init_process_group made a group in a process with two libtorchs\n");
  return 1;
}
