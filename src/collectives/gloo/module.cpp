// Why Gloo lives in a module, and why these dlopen flags.
//
// pytorch.org's and pip's libtorch link their own Gloo statically into
// libtorch_cpu.so and export its symbols. That library comes before
// libgloo.so in the process's global symbol scope, so with ddp linked
// against libgloo.so as usual, ddp's Gloo calls (and libgloo's calls to
// itself) would bind into libtorch's copy: another Gloo version, another
// object layout, a crash. So every call into Gloo is in libddp_gloo.so,
// loaded here with RTLD_DEEPBIND: the module and what is loaded with it
// (libgloo.so) look symbols up in their own dependencies first, where
// libgloo.so leads (it is the module's first DT_NEEDED). RTLD_LOCAL keeps
// both out of the global scope, so libtorch's own Gloo users (PyTorch's
// ProcessGroupGloo in the same process) are untouched. After loading, the
// module reports where its Gloo calls really go (ddp_gloo_binding_error),
// so a case the flags do not cover is refused with a reason instead of
// crashing later. docs/architecture.md ("Gloo next to libtorch's own Gloo")
// gives the alternatives and the limits.
#include "collectives/gloo/module.h"

#include <ddp/errors.h>

#include <dlfcn.h>

namespace ddp::detail {
namespace {

struct Loaded {
  GlooModule module;
  std::string error;  // "" when loaded and safe
};

// Sanitizer runtimes refuse RTLD_DEEPBIND (they interpose malloc and
// friends); there the module is loaded without it and the binding check
// decides.
[[maybe_unused]] bool under_sanitizer() {
  for (const char* init : {"__asan_init", "__tsan_init", "__msan_init", "__hwasan_init"}) {
    if (dlsym(RTLD_DEFAULT, init)) return true;
  }
  return false;
}

template <typename Fn>
[[maybe_unused]] Fn entry(void* handle, const char* name) {
  return reinterpret_cast<Fn>(dlsym(handle, name));
}

Loaded load() {
  Loaded out;
#ifdef DDP_GLOO_UNAVAILABLE  // the build could not make the module (cmake/gloo_module.cmake)
  out.error = DDP_GLOO_UNAVAILABLE;
#else
  const std::string path = gloo_module_path();
  int flags = RTLD_NOW | RTLD_LOCAL;
#ifdef RTLD_DEEPBIND
  if (!under_sanitizer()) flags |= RTLD_DEEPBIND;
#endif
  void* handle = dlopen(path.c_str(), flags);  // never closed: engines may outlive main
  if (!handle) {
    const char* why = dlerror();
    out.error = "cannot load its module: " + std::string(why ? why : path);
    return out;
  }
  auto build_id = entry<decltype(&ddp_gloo_build_id)>(handle, "ddp_gloo_build_id");
  auto binding_error = entry<decltype(&ddp_gloo_binding_error)>(handle, "ddp_gloo_binding_error");
  out.module.create_engine =
      entry<decltype(&ddp_gloo_create_engine)>(handle, "ddp_gloo_create_engine");
  if (!build_id || !binding_error || !out.module.create_engine) {
    out.error = path + " is not ddp's Gloo module (its entry points are missing)";
  } else if (std::string(build_id()) != DDP_GLOO_BUILD_ID) {
    out.error = path + " comes from another build (" + build_id() +
                "; this libddp: " DDP_GLOO_BUILD_ID "): install ddp again";
  } else {
    out.error = binding_error();
  }
#endif
  return out;
}

}  // namespace

std::string gloo_module_path() {
  Dl_info self{};
  const std::string name = "libddp_gloo.so";
  if (dladdr(reinterpret_cast<void*>(&gloo_module_path), &self) == 0 || !self.dli_fname) {
    return name;
  }
  std::string library = self.dli_fname;
  auto slash = library.rfind('/');
  return slash == std::string::npos ? name : library.substr(0, slash + 1) + name;
}

const GlooModule& gloo_module(const ErrorContext& context) {
  static const Loaded loaded = load();  // thread-safe, once per process
  if (!loaded.error.empty()) {
    throw InvalidArgument(
        context,
        "the gloo backend cannot be used in this process: " + loaded.error +
            ". Use a backend that needs no Gloo: shm (ranks on one host) or mpi (under mpirun), "
            "through InitOptions::backend or DDP_BACKEND");
  }
  return loaded.module;
}

}  // namespace ddp::detail
