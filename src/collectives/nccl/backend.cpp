// The registry's entry for NCCL: an NcclProcessGroup on the rendezvous store.
#include <ddp/backends/nccl.h>

#include "collectives/builtin_backends.h"

#include <torch/csrc/distributed/c10d/Store.hpp>

namespace ddp::detail {

Backend nccl_backend() {
  Backend b;
  b.name = "nccl";
  b.summary = "NCCL on CUDA tensors, one GPU per rank";
  b.needs_store = true;
  b.create = [](const BackendSetup& setup) -> ProcessGroupPtr {
    return std::make_shared<NcclProcessGroup>(
        setup.store, setup.rank, setup.world_size, setup.timeout,
        options_for<NcclOptions>(setup, "nccl", "NcclOptions"));
  };
  return b;
}

}  // namespace ddp::detail
