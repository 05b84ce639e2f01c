// ddprun: launches the ranks of a ddp (distributed data-parallel) program on
// one node, like `torchrun --no_python`, without needing Python.
//
// main() parses the arguments (bad ones: one-line error, exit 2), picks a
// free rendezvous port when none was given on a single-node run, and hands
// over to the launcher, whose result is ddprun's exit status.
#include "free_port.h"
#include "launcher.h"
#include "options.h"

#include <cstdio>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  const ddprun::parse_result parsed = ddprun::parse_options(args);
  switch (parsed.outcome) {
    case ddprun::parse_outcome::help:
      std::fputs(ddprun::usage_text().c_str(), stdout);
      return 0;
    case ddprun::parse_outcome::error:
      std::fprintf(stderr, "ddprun: %s; see ddprun --help\n", parsed.error.c_str());
      return 2;
    case ddprun::parse_outcome::run:
      break;
  }
  const ddprun::options& opts = parsed.opts;

  int master_port = 0;
  if (opts.master_port) {
    master_port = *opts.master_port;
  } else {
    std::string error;
    const auto port = ddprun::find_free_port(opts.master_addr, error);
    if (!port) {
      std::fprintf(stderr, "ddprun: cannot pick a free port on --master-addr %s (%s); pass "
                   "--master-port P\n", opts.master_addr.c_str(), error.c_str());
      return 1;
    }
    master_port = *port;
  }
  std::fflush(stdout);  // ddprun writes its own output with write(2) from here on
  return ddprun::run_launcher(opts, master_port);
}
