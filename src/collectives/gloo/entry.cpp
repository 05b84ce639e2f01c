// The Gloo module's entry points besides ddp_gloo_create_engine (gloo.cpp):
// its build id and the check that its Gloo calls reach its own libgloo.
#include "collectives/gloo/engine.h"

#include <gloo/allreduce.h>
#include <gloo/transport/tcp/device.h>

#include <dlfcn.h>

#include <string>

namespace {

// Where `resolved` (an address this module calls) lives; `want` is the same
// function in the libgloo this module was linked with.
std::string check(const char* function, void* resolved, void* want) {
  if (resolved == want) return "";
  Dl_info in{};
  const std::string file = dladdr(resolved, &in) && in.dli_fname ? in.dli_fname : "an unknown file";
  return std::string("its calls into Gloo (") + function + ") resolve into " + file +
         ", not into " DDP_GLOO_SONAME
         ": another Gloo is loaded in this process (a libtorch "
         "with its own Gloo?) and ddp's Gloo module could not be isolated from it";
}

std::string binding_error() {
  void* gloo = dlopen(DDP_GLOO_SONAME, RTLD_NOW | RTLD_NOLOAD);  // loaded as our dependency
  if (!gloo) return std::string("cannot find the loaded " DDP_GLOO_SONAME ": ") + dlerror();
  // Taking a function's address in position-independent code reads the
  // same GOT entry the calls use: this is where the calls go.
  std::string error = check("gloo::transport::tcp::CreateDevice",
                            reinterpret_cast<void*>(&gloo::transport::tcp::CreateDevice),
                            dlsym(gloo, "_ZN4gloo9transport3tcp12CreateDeviceERKNS1_4attrE"));
  if (error.empty()) {
    void (*allreduce)(const gloo::AllreduceOptions&) = &gloo::allreduce;
    error = check("gloo::allreduce", reinterpret_cast<void*>(allreduce),
                  dlsym(gloo, "_ZN4gloo9allreduceERKNS_16AllreduceOptionsE"));
  }
  dlclose(gloo);  // drops only the reference NOLOAD took
  return error;
}

}  // namespace

extern "C" const char* ddp_gloo_binding_error() {
  static const std::string error = binding_error();
  return error.c_str();
}

extern "C" const char* ddp_gloo_build_id() { return DDP_GLOO_BUILD_ID; }
