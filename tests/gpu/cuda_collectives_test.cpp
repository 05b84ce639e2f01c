// Collectives on CUDA tensors in one process (world 1, and a 2-rank
// communicator that never fills): every op and dtype over nccl, the same
// over shm's host staging, stream order, and the nccl backend's failures.
// Prints "ok - ..." / "not ok - ..."; exits 1 if any check failed.
#include "support/raised.h"
#include "support/tap.h"

#include <ddp/backends/shm.h>
#include <ddp/ddp.h>
#include <ddp/errors.h>
#ifdef DDP_WITH_NCCL
#include <ddp/backends/nccl.h>

#include "collectives/nccl/communicator.h"
#endif

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/torch.h>

#include <chrono>
#include <sstream>

namespace ddp::testing {
namespace {

using std::chrono::milliseconds;

const std::vector<at::ScalarType> kDtypes = {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16,
                                             at::kInt,   at::kLong,   at::kByte};

std::string name_of(const ProcessGroup& pg, at::ScalarType dtype, const char* op) {
  return pg.backend_name() + " " + op + " " + c10::toString(dtype);
}

// At world 1 every collective leaves its data as it was (and AVG, MIN, MAX,
// PRODUCT of one value is that value): checks each op and dtype on the GPU.
void every_op_and_dtype(Tap& tap, ProcessGroup& pg, const torch::Device& device) {
  for (auto dtype : kDtypes) {
    const auto options = torch::TensorOptions().dtype(dtype).device(device);
    at::Tensor want = torch::arange(1, 10, options);
    std::vector<ReduceOp> ops = {ReduceOp::SUM, ReduceOp::MIN, ReduceOp::MAX, ReduceOp::PRODUCT};
    if (at::isFloatingType(dtype)) ops.push_back(ReduceOp::AVG);
    bool ok = true;
    for (ReduceOp op : ops) {
      at::Tensor t = want.clone();
      pg.allreduce(t, op)->wait();
      ok = ok && torch::equal(t, want) && t.device() == device;
    }
    tap.check(ok, name_of(pg, dtype, "allreduce (every op)"));
    std::vector<at::Tensor> ts = {want.clone(), want.clone() * 2};
    pg.allreduce_coalesced(ts)->wait();
    tap.check(torch::equal(ts[0], want) && torch::equal(ts[1], want * 2),
              name_of(pg, dtype, "allreduce_coalesced"));
    at::Tensor b = want.clone();
    pg.broadcast(b, 0)->wait();
    tap.check(torch::equal(b, want), name_of(pg, dtype, "broadcast"));
    std::vector<at::Tensor> gathered = {torch::zeros_like(want)};
    pg.allgather(gathered, want)->wait();
    tap.check(torch::equal(gathered[0], want), name_of(pg, dtype, "allgather"));
    at::Tensor scattered = torch::zeros_like(want);
    pg.reduce_scatter(scattered, {want})->wait();
    tap.check(torch::equal(scattered, want), name_of(pg, dtype, "reduce_scatter"));
  }
  pg.barrier()->wait();
  tap.pass(pg.backend_name() + " barrier");
}

// A collective is ordered after what the caller's current stream queued
// before it: a large fill on a side stream, then allreduce from that stream.
void stream_order(Tap& tap, ProcessGroup& pg, const torch::Device& device) {
  auto side = c10::cuda::getStreamFromPool(false, device.index());
  at::Tensor t;
  {
    c10::cuda::CUDAStreamGuard guard(side);
    t = torch::zeros({1 << 24}, torch::TensorOptions().device(device));
    for (int i = 0; i < 20; ++i) t.add_(1);  // queued, not yet run
    pg.allreduce(t)->wait();
  }
  tap.check(t.min().item<float>() == 20 && t.max().item<float>() == 20,
            pg.backend_name() + ": the collective saw the caller's stream's work before it");
}

#ifdef DDP_WITH_NCCL
// What was raised, or why not: a failed check's detail.
std::string shown(const Raised& r) {
  std::ostringstream out;
  out << r;
  return out.str();
}

// Raised by rank 0 of a group of `world` ranks of the nccl backend.
bool from_nccl_rank0(const Raised& r, int world) {
  return r && r.context.rank == 0 && r.context.world_size == world && r.context.backend == "nccl";
}

void nccl_failures(Tap& tap, const torch::Device& device) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  Raised r = raised<InvalidArgument>(
      [&] { NcclProcessGroup(store, 0, 1, milliseconds(5000), NcclOptions().device(99)); });
  tap.check(from_nccl_rank0(r, 1) && r.mentions("NcclOptions::device") && r.mentions("99"),
            "nccl: a bad device index is an InvalidArgument naming it", shown(r));

  NcclProcessGroup pg(c10::make_intrusive<c10d::HashStore>(), 0, 1, milliseconds(5000),
                      NcclOptions().device(device.index()));
  r = raised<InvalidArgument>(
      [&] { pg.allreduce(torch::ones({4}, torch::dtype(torch::kBool).device(device))); });
  tap.check(from_nccl_rank0(r, 1) && r.context.operation == "allreduce" && r.mentions("Bool"),
            "nccl: an unsupported dtype is an InvalidArgument naming it", shown(r));
  at::Tensor on_cpu = torch::arange(6, torch::kLong);
  pg.allreduce(on_cpu)->wait();
  tap.check(torch::equal(on_cpu, torch::arange(6, torch::kLong)),
            "nccl: a CPU tensor is staged through the GPU");

  // A communicator of 2 ranks that only this one joins: NCCL's
  // non-blocking initialisation is polled to its deadline, then aborted.
  const auto start = std::chrono::steady_clock::now();
  r = raised<TimeoutError>([&] {
    detail::nccl::Communicator comm(
        detail::nccl::unique_id_from(detail::nccl::new_unique_id()), 0, 2, device.index(),
        std::chrono::steady_clock::now() + milliseconds(3000), ErrorContext{0, 2, "nccl", "", {}});
  });
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // The communicator's error carries the context it was given.
  tap.check(
      from_nccl_rank0(r, 2) && waited < 30,
      "nccl: a peer that never joins times out and is aborted (" + std::to_string(waited) + " s)",
      shown(r));
  tap.pass("nccl " + NcclProcessGroup::nccl_version() + " on " + device.str());
}
#endif

}  // namespace
}  // namespace ddp::testing

int main() {
  using namespace ddp::testing;
  Tap tap(0);
  const torch::Device device(torch::kCUDA, 0);
  {
    auto shm = std::make_shared<ddp::ShmProcessGroup>(c10::make_intrusive<c10d::HashStore>(), 0, 1);
    every_op_and_dtype(tap, *shm, device);
    stream_order(tap, *shm, device);
  }
#ifdef DDP_WITH_NCCL
  {
    ddp::NcclProcessGroup nccl(c10::make_intrusive<c10d::HashStore>(), 0, 1);
    every_op_and_dtype(tap, nccl, device);
    stream_order(tap, nccl, device);
  }
  nccl_failures(tap, device);
#else
  tap.pass("this build has no nccl backend: staging alone");
#endif
  return tap.finish();
}
