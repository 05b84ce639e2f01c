// Collectives on CUDA tensors in one process, as GoogleTest (world 1, and a
// 2-rank communicator that never fills): every op and dtype over nccl, the
// same over shm's host staging, stream order, and the nccl backend's
// failures. Run through skip_without_gpu.sh; each TEST also skips itself
// where libtorch sees no GPU.
#include "support/raised.h"

#include <ddp/backends/shm.h>
#include <ddp/ddp.h>
#include <ddp/errors.h>
#ifdef DDP_WITH_NCCL
#include <ddp/backends/nccl.h>

#include "collectives/nccl/communicator.h"
#endif

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/torch.h>

#include <chrono>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

namespace ddp::testing {
namespace {

using std::chrono::milliseconds;

const std::vector<at::ScalarType> kDtypes = {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16,
                                             at::kInt,   at::kLong,   at::kByte};

// The GPU every TEST uses; skips the TEST where there is none.
class CudaCollectives : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "libtorch sees no GPU";
  }
  const torch::Device device{torch::kCUDA, 0};
};

// At world 1 every collective leaves its data as it was (and AVG, MIN, MAX,
// PRODUCT of one value is that value): checks each op and dtype on the GPU.
void every_op_and_dtype(ProcessGroup& pg, const torch::Device& device) {
  for (auto dtype : kDtypes) {
    SCOPED_TRACE(pg.backend_name() + " " + c10::toString(dtype));
    const auto options = torch::TensorOptions().dtype(dtype).device(device);
    at::Tensor want = torch::arange(1, 10, options);
    std::vector<ReduceOp> ops = {ReduceOp::SUM, ReduceOp::MIN, ReduceOp::MAX, ReduceOp::PRODUCT};
    if (at::isFloatingType(dtype)) ops.push_back(ReduceOp::AVG);
    for (ReduceOp op : ops) {
      at::Tensor t = want.clone();
      pg.allreduce(t, op)->wait();
      EXPECT_TRUE(torch::equal(t, want) && t.device() == device) << "allreduce " << to_string(op);
    }
    std::vector<at::Tensor> ts = {want.clone(), want.clone() * 2};
    pg.allreduce_coalesced(ts)->wait();
    EXPECT_TRUE(torch::equal(ts[0], want) && torch::equal(ts[1], want * 2))
        << "allreduce_coalesced";
    at::Tensor b = want.clone();
    pg.broadcast(b, 0)->wait();
    EXPECT_TRUE(torch::equal(b, want)) << "broadcast";
    std::vector<at::Tensor> gathered = {torch::zeros_like(want)};
    pg.allgather(gathered, want)->wait();
    EXPECT_TRUE(torch::equal(gathered[0], want)) << "allgather";
    at::Tensor scattered = torch::zeros_like(want);
    pg.reduce_scatter(scattered, {want})->wait();
    EXPECT_TRUE(torch::equal(scattered, want)) << "reduce_scatter";
  }
  pg.barrier()->wait();
}

// A collective is ordered after what the caller's current stream queued
// before it: a large fill on a side stream, then allreduce from that stream.
void follows_the_callers_stream(ProcessGroup& pg, const torch::Device& device) {
  auto side = c10::cuda::getStreamFromPool(false, device.index());
  at::Tensor t;
  {
    c10::cuda::CUDAStreamGuard guard(side);
    t = torch::zeros({1 << 24}, torch::TensorOptions().device(device));
    for (int i = 0; i < 20; ++i) t.add_(1);  // queued, not yet run
    pg.allreduce(t)->wait();
  }
  EXPECT_EQ(t.min().item<float>(), 20);
  EXPECT_EQ(t.max().item<float>(), 20);
}

std::shared_ptr<ShmProcessGroup> shm_world1() {
  return std::make_shared<ShmProcessGroup>(c10::make_intrusive<c10d::HashStore>(), 0, 1);
}

TEST_F(CudaCollectives, ShmStagingEveryOpAndDtype) { every_op_and_dtype(*shm_world1(), device); }

TEST_F(CudaCollectives, ShmStagingFollowsTheCallersStream) {
  follows_the_callers_stream(*shm_world1(), device);
}

#ifdef DDP_WITH_NCCL
std::shared_ptr<NcclProcessGroup> nccl_world1(const torch::Device& device) {
  return std::make_shared<NcclProcessGroup>(c10::make_intrusive<c10d::HashStore>(), 0, 1,
                                            kDefaultTimeout, NcclOptions().device(device.index()));
}

// Raised by rank 0 of a group of `world` ranks of the nccl backend.
bool from_nccl_rank0(const Raised& r, int world) {
  return r && r.context.rank == 0 && r.context.world_size == world && r.context.backend == "nccl";
}

TEST_F(CudaCollectives, NcclEveryOpAndDtype) {
  std::cout << "nccl " << NcclProcessGroup::nccl_version() << " on " << device.str() << std::endl;
  every_op_and_dtype(*nccl_world1(device), device);
}

TEST_F(CudaCollectives, NcclFollowsTheCallersStream) {
  follows_the_callers_stream(*nccl_world1(device), device);
}

TEST_F(CudaCollectives, NcclStagesACpuTensorThroughTheGpu) {
  at::Tensor on_cpu = torch::arange(6, torch::kLong);
  nccl_world1(device)->allreduce(on_cpu)->wait();
  EXPECT_TRUE(torch::equal(on_cpu, torch::arange(6, torch::kLong)));
}

TEST_F(CudaCollectives, NcclRefusesABadDeviceIndex) {
  Raised r = raised<InvalidArgument>([&] {
    NcclProcessGroup(c10::make_intrusive<c10d::HashStore>(), 0, 1, milliseconds(5000),
                     NcclOptions().device(99));
  });
  EXPECT_TRUE(from_nccl_rank0(r, 1) && r.mentions("NcclOptions::device") && r.mentions("99")) << r;
}

TEST_F(CudaCollectives, NcclRefusesAnUnsupportedDtype) {
  auto pg = nccl_world1(device);
  Raised r = raised<InvalidArgument>(
      [&] { pg->allreduce(torch::ones({4}, torch::dtype(torch::kBool).device(device))); });
  EXPECT_TRUE(from_nccl_rank0(r, 1) && r.context.operation == "allreduce" && r.mentions("Bool"))
      << r;
}

// A communicator of 2 ranks that only this one joins: NCCL's non-blocking
// initialisation is polled to its deadline, then aborted; the error carries
// the context the communicator was given.
TEST_F(CudaCollectives, NcclPeerThatNeverJoinsTimesOut) {
  const auto start = std::chrono::steady_clock::now();
  Raised r = raised<TimeoutError>([&] {
    detail::nccl::Communicator comm(
        detail::nccl::unique_id_from(detail::nccl::new_unique_id()), 0, 2, device.index(),
        std::chrono::steady_clock::now() + milliseconds(3000), ErrorContext{0, 2, "nccl", "", {}});
  });
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_TRUE(from_nccl_rank0(r, 2)) << r;
  EXPECT_LT(waited, 30) << "seconds until the communicator gave up";
}
#endif

}  // namespace
}  // namespace ddp::testing
