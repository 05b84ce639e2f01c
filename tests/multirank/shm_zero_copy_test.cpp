// The shm backend's zero-copy memory (ProcessGroup::allocate_zero_copy):
// tensors carved from it are reduced where they lie, on every slice
// boundary and dtype, mixed with ordinary collectives; a rank that reduces
// something else fails the group on every rank; nothing stays in /dev/shm;
// DDP's buckets use it and train as on the copying path.
#include "shm_fixtures.h"
#include "spawn.h"
#include "support/raised.h"

#include <ddp/backends/shm.h>
#include <ddp/ddp.h>

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <functional>

namespace ddp::testing {
namespace {

// A tensor of `n` elements of `dtype` at byte `offset` of `region`.
at::Tensor carve(const at::Tensor& region, int64_t offset, int64_t n, at::ScalarType dtype) {
  return region.narrow(0, offset, n * c10::elementSize(dtype)).view(dtype);
}

TEST(ShmZeroCopy, ReducesInPlaceOnEveryBoundaryAndDtype) {
  const std::vector<int64_t> counts = {1, 15, 16, 17, 255, 1025, 100003};
  for (int size : {1, 2, 3, 4}) {
    spawn(size, [&](int rank, StorePtr store) {
      auto pg = shm_group(store, rank, size);
      at::Tensor region = pg->allocate_zero_copy(1 << 20);
      ASSERT_TRUE(region.defined());
      EXPECT_EQ(region.numel(), 1 << 20);
      EXPECT_TRUE(at::all(region == 0).item<bool>()) << "fresh memory is zeros";
      for (int64_t n : counts) {
        for (auto dtype :
             {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16, at::kInt, at::kByte}) {
          const std::string what = "world " + std::to_string(size) + " n=" + std::to_string(n) +
                                   " " + c10::toString(dtype);
          at::Tensor idx = at::arange(n, at::kLong);
          // At an offset that is not a multiple of 64: slices are cut within the tensor.
          at::Tensor t = carve(region, 128 + 8, n, dtype);
          t.copy_((idx + rank) % 3);
          pg->allreduce(t, ReduceOp::SUM)->wait();
          at::Tensor want = at::zeros({n}, at::kLong);
          for (int r = 0; r < size; ++r) want += (idx + r) % 3;
          ASSERT_TRUE(at::equal(t.to(at::kLong), want)) << "SUM " << what;

          t.copy_((idx * (rank + 1)) % 5);
          pg->allreduce(t, ReduceOp::MAX)->wait();
          at::Tensor best = at::zeros({n}, at::kLong);
          for (int r = 0; r < size; ++r) best = at::maximum(best, (idx * (r + 1)) % 5);
          ASSERT_TRUE(at::equal(t.to(at::kLong), best)) << "MAX " << what;
          // An ordinary collective between two zero-copy ones keeps its order.
          at::Tensor plain = at::full({n}, static_cast<double>(rank));
          pg->allreduce(plain)->wait();
          ASSERT_TRUE(at::all(plain == size * (size - 1) / 2.0).item<bool>()) << what;
        }
      }
      at::Tensor avg = carve(region, 0, 1000, at::kDouble);
      avg.fill_(rank);
      pg->allreduce(avg, ReduceOp::AVG)->wait();
      EXPECT_TRUE(at::allclose(avg, at::full({1000}, (size - 1) / 2.0, at::kDouble)));
    });
  }
}

// Many in flight at once, from two regions and outside them, complete in
// issue order with the same bits on every rank.
TEST(ShmZeroCopy, ManyInFlightFromTwoRegionsAndOutside) {
  const int size = 3;
  std::vector<at::Tensor> results(size);
  spawn(size, [&](int rank, StorePtr store) {
    auto pg = shm_group(store, rank, size);
    at::Tensor a = pg->allocate_zero_copy(400000);
    at::Tensor b = pg->allocate_zero_copy(4000);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(99 + rank);
    std::vector<at::Tensor> ts;
    std::vector<WorkPtr> works;
    for (int i = 0; i < 60; ++i) {
      at::Tensor t = i % 3 == 0   ? carve(a, 8192 * (i / 3), 2000, at::kFloat)
                     : i % 3 == 1 ? carve(b, 192 * (i / 3), 40, at::kFloat)
                                  : at::empty({3000}, at::kFloat);
      t.copy_(at::randn(t.sizes(), gen) + rank);
      ts.push_back(t);
      works.push_back(pg->allreduce(t));
    }
    for (auto& w : works) w->wait();
    std::vector<at::Tensor> flat;
    for (const auto& t : ts) flat.push_back(t.view(-1));
    results[rank] = at::cat(flat);
  });
  for (int r = 1; r < size; ++r) EXPECT_TRUE(at::equal(results[0], results[r])) << "rank " << r;
  // Each rank added its rank to N(0, 1) samples: the sums are centred on 0 + 1 + 2.
  EXPECT_NEAR(results[0].mean().item<double>(), 3.0, 0.2);
}

// Rank 1 reduces a tensor outside its zero-copy memory where rank 0 reduces
// one inside: the group fails on both, naming the rank, instead of mixing.
// What a rank that disagrees gets: a CollectiveMismatch on the rank that
// found it (about the peer, naming both operations), a CommunicationError
// citing it on the other (about the peer that found it); never a result,
// never the timeout. `fact`: what differs, as both operations show it.
void expect_refused(int rank, const std::function<void()>& collective, const std::string& fact) {
  std::exception_ptr error;
  try {
    collective();
  } catch (...) {
    error = std::current_exception();
  }
  const auto rethrow = [&] {
    if (error) std::rethrow_exception(error);
  };
  const Raised timeout = raised<TimeoutError>(rethrow);
  EXPECT_FALSE(timeout) << "rank " << rank << ": waited for the timeout: " << timeout;
  const Raised mismatch = raised<CollectiveMismatch>(rethrow);
  const Raised r = mismatch ? mismatch : raised<CommunicationError>(rethrow);
  ASSERT_TRUE(r) << "rank " << rank << ": " << r;
  EXPECT_EQ(r.context.peers, std::vector<int>{1 - rank}) << r;
  EXPECT_TRUE(r.mentions(fact)) << r;
}

// Zero-copy memory on one rank, a private tensor on the other.
TEST(ShmZeroCopy, RanksReducingDifferentMemoryFailOnEveryRank) {
  spawn(2, [](int rank, StorePtr store) {
    auto pg = shm_group(store, rank, 2);
    at::Tensor region = pg->allocate_zero_copy(1 << 16);
    at::Tensor t = rank == 0 ? carve(region, 0, 4096, at::kFloat) : at::ones({4096});
    expect_refused(
        rank, [&] { pg->allreduce(t)->wait(); }, "zero-copy");
  });
}

// Other parts of the region on each rank.
TEST(ShmZeroCopy, RanksReducingDifferentPartsFailOnEveryRank) {
  spawn(2, [](int rank, StorePtr store) {
    auto pg = shm_group(store, rank, 2);
    at::Tensor region = pg->allocate_zero_copy(1 << 16);
    at::Tensor t = carve(region, rank * 4096, 1024, at::kFloat);
    expect_refused(
        rank, [&] { pg->allreduce(t)->wait(); }, "offset 4096");
  });
}

// The same bytes, reduced with another op on one rank: refused as well.
TEST(ShmZeroCopy, RanksReducingWithDifferentOpsFailOnEveryRank) {
  spawn(2, [](int rank, StorePtr store) {
    auto pg = shm_group(store, rank, 2);
    at::Tensor t = carve(pg->allocate_zero_copy(1 << 16), 0, 4096, at::kFloat);
    expect_refused(
        rank, [&] { pg->allreduce(t, rank == 0 ? ReduceOp::SUM : ReduceOp::MAX)->wait(); }, "MAX");
  });
}

TEST(ShmZeroCopy, NothingStaysInDevShm) {
  spawn(3, [](int rank, StorePtr store) {
    auto pg = shm_group(store, rank, 3);
    {
      at::Tensor region = pg->allocate_zero_copy(1 << 20);
      EXPECT_EQ(own_segments(), 0) << "the name is removed once every rank mapped it";
    }
    pg->barrier()->wait();
    EXPECT_EQ(own_segments(), 0);
  });
  EXPECT_EQ(own_segments(), 0);
}

// More than /dev/shm can hold (Docker's is 64 MiB): no zero-copy memory on
// any rank, said once, and the group goes on (DDP then keeps private buckets).
TEST(ShmZeroCopy, NoRoomInDevShmMeansNoneOnEveryRank) {
  spawn(2, [](int rank, StorePtr store) {
    auto pg = shm_group(store, rank, 2);
    EXPECT_FALSE(pg->allocate_zero_copy(int64_t{1} << 44).defined()) << "rank " << rank;
    EXPECT_EQ(own_segments(), 0);
    at::Tensor t = at::ones({5000});
    pg->allreduce(t)->wait();
    EXPECT_TRUE(at::all(t == 2).item<bool>());
    EXPECT_TRUE(pg->allocate_zero_copy(4096).defined());
  });
}

// Other backends have no zero-copy memory: DDP's buckets stay ordinary.
TEST(ShmZeroCopy, OtherBackendsHaveNone) {
  spawn(2, [](int rank, StorePtr store) {
    auto pg = make_group("gloo", store, rank, 2);
    EXPECT_FALSE(pg->allocate_zero_copy(1024).defined());
  });
}

// DDP with buckets in zero-copy memory trains to the same parameters as on
// the copying path, bit for bit (float64, 2 ranks, so that a sum's order
// cannot differ; rebuilt buckets, several of them, with and without
// gradient_as_bucket_view), and both as one process that averages the two
// ranks' gradients itself (g0 / 2 + g1 / 2, as DDP does). Compared after
// every step, so that a failure names the path and the first step it parts.
TEST(ShmZeroCopy, DdpBucketsTrainAsOnTheCopyingPath) {
  // Two ranks: g0 / 2 + g1 / 2 is exact whatever the order of the sum.
  constexpr int size = 2;
  const int steps = 6;
  const torch::nn::Sequential initial = small_mlp(3);
  for (bool bucket_view : {false, true}) {
    // [zero_copy][rank][step]: the parameters, flattened into one tensor.
    std::vector<std::vector<std::vector<at::Tensor>>> after(
        2, std::vector<std::vector<at::Tensor>>(size));
    for (int zero_copy = 0; zero_copy < 2; ++zero_copy) {
      spawn(size, [&](int rank, StorePtr store) {
        after[zero_copy][rank] = ddp_steps(initial,
                                           DistributedDataParallelOptions()
                                               .process_group(shm_group(store, rank, size))
                                               .bucket_cap_mb(0.01)
                                               .first_bucket_cap_mb(0.01)
                                               .gradient_as_bucket_view(bucket_view)
                                               .zero_copy_buckets(zero_copy == 1),
                                           rank, steps);
      });
    }
    // The one-process oracle.
    torch::nn::Sequential local(
        std::dynamic_pointer_cast<torch::nn::SequentialImpl>(initial->clone()));
    torch::optim::SGD opt(local->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
    std::vector<at::Generator> gens;
    for (int rank = 0; rank < size; ++rank) {
      gens.push_back(at::make_generator<at::CPUGeneratorImpl>(7 + rank));
    }
    const char* path[] = {"copying", "zero-copy"};
    for (int step = 0; step < steps; ++step) {
      std::vector<at::Tensor> sum(local->parameters().size());
      for (int rank = 0; rank < size; ++rank) {
        opt.zero_grad();
        at::Tensor x = at::randn({8, 16}, gens[rank], at::kDouble);
        torch::mse_loss(local->forward(x), x.sum(1, true)).backward();
        auto params = local->parameters();
        for (size_t i = 0; i < params.size(); ++i) {
          at::Tensor share = params[i].grad() / size;
          sum[i] = rank == 0 ? share : sum[i] + share;
        }
      }
      auto params = local->parameters();
      for (size_t i = 0; i < params.size(); ++i) params[i].mutable_grad() = sum[i];
      opt.step();
      const at::Tensor expected = torch::nn::utils::parameters_to_vector(params).detach();
      for (int zero_copy = 0; zero_copy < 2; ++zero_copy) {
        for (int rank = 0; rank < size; ++rank) {
          const at::Tensor& got = after[zero_copy][rank][step];
          ASSERT_TRUE(at::equal(got, expected))
              << "gradient_as_bucket_view " << bucket_view << ", " << path[zero_copy]
              << " path, rank " << rank << ": parts from one process at step " << step
              << ", max |difference| " << (got - expected).abs().max().item<double>()
              << ", first at element " << (got != expected).nonzero()[0].item<int64_t>();
        }
      }
    }
  }
}

}  // namespace
}  // namespace ddp::testing
