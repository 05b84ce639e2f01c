// ddp's Gloo backend next to another Gloo in the process: libfake_gloo.so
// (fake_gloo.cpp) is linked first, so its aborting Gloo functions come first
// in the global symbol scope, as a libtorch with its own Gloo does.
//   ddprun --nproc-per-node 2 gloo_clash   a 2-rank allreduce and a DDP step
//                                          over gloo: must pass
//   gloo_clash --plain-load                the control: ddp's Gloo module
//                                          loaded without isolation must see
//                                          the fake (else this test is blind)
#include <ddp/ddp.h>

#include "collectives/gloo/engine.h"
#include "collectives/gloo/module.h"

#include <torch/torch.h>

#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

namespace {

const char* const kFaked[] = {
    "_ZN4gloo10rendezvous7ContextC1Eiii",
    "_ZN4gloo10rendezvous7Context15connectFullMeshERNS0_5StoreERSt10shared_ptrINS_"
    "9transport6DeviceEE",
    "_ZN4gloo9transport3tcp12CreateDeviceERKNS1_4attrE",
    "_ZN4gloo9allreduceERKNS_16AllreduceOptionsE",
    "_ZN4gloo9broadcastERNS_16BroadcastOptionsE",
    "_ZN4gloo9allgatherERNS_16AllgatherOptionsE",
    "_ZN4gloo7barrierERNS_14BarrierOptionsE",
    "_ZN4gloo14BarrierOptionsC1ERKSt10shared_ptrINS_7ContextEE",
    "_ZN4gloo7Context16closeConnectionsEv",
};

void require(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("gloo_clash: " + what);
}

// The clash is set up: every faked name resolves into the fake first.
void require_fake_first() {
  for (const char* name : kFaked) {
    Dl_info info{};
    void* at = dlsym(RTLD_DEFAULT, name);
    require(at && dladdr(at, &info) && info.dli_fname &&
                std::strstr(info.dli_fname, "libfake_gloo") != nullptr,
            std::string(name) +
                " does not resolve into libfake_gloo first; the test sets "
                "up no clash (link order?)");
  }
}

int plain_load() {
  require_fake_first();
  const std::string path = ddp::detail::gloo_module_path();
  void* module = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);  // no RTLD_DEEPBIND
  if (!module) require(false, "cannot load " + path + ": " + dlerror());
  auto binding_error =
      reinterpret_cast<decltype(&ddp_gloo_binding_error)>(dlsym(module, "ddp_gloo_binding_error"));
  require(binding_error != nullptr, path + " has no ddp_gloo_binding_error");
  const std::string error = binding_error();
  std::printf("without isolation, the module reports: %s\n", error.c_str());
  require(error.find("libfake_gloo") != std::string::npos,
          "loaded without isolation, the module does not see the fake Gloo");
  return 0;
}

int two_ranks() {
  require_fake_first();
  auto group = ddp::init_process_group(ddp::InitOptions().backend("gloo"));
  const int rank = group->rank(), size = group->size();
  require(size == 2, "run with ddprun --nproc-per-node 2");

  auto t = torch::full({5}, rank + 1.0);
  group->allreduce(t)->wait();
  require(torch::equal(t, torch::full({5}, 3.0)), "allreduce gave a wrong sum");

  torch::manual_seed(0);
  torch::nn::Linear net(3, 1);
  ddp::DistributedDataParallel model(net);
  model->forward(torch::full({1, 3}, rank + 1.0)).sum().backward();
  require(torch::allclose(net->weight.grad(), torch::full({1, 3}, 1.5)),
          "the DDP step gave wrong gradients");
  std::printf("rank %d: allreduce and DDP step over gloo ok beside the fake Gloo\n", rank);
  ddp::destroy_process_group();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc > 1 && std::string(argv[1]) == "--plain-load") return plain_load();
    return two_ranks();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
