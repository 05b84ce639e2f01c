// Every collective, swept over world sizes 1, 2, 3, 4 and 7, element counts 0..1<<20,
// every dtype and every ReduceOp, each result checked against an expectation
// computed locally (common/expectations.h).
#include "spawn.h"
#include "support/raised.h"
#include "common/expectations.h"

#include <ddp/ddp.h>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

namespace ddp::testing {
namespace {

void expect_close(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  const std::string diff = mismatch(got, want);
  ASSERT_TRUE(diff.empty()) << what << ": " << diff;
}

// Parameters: backend name, world size.
class Sweep : public ::testing::TestWithParam<std::tuple<std::string, int>> {
 protected:
  const std::string& backend() const { return std::get<0>(GetParam()); }
  int world() const { return std::get<1>(GetParam()); }
  ProcessGroupPtr group(StorePtr store, int rank) const {
    return make_group(backend(), std::move(store), rank, world());
  }
  // Runs `body` on every rank, each with its group of this backend and size.
  void on_every_rank(const std::function<void(int rank, ProcessGroupPtr pg)>& body) const {
    spawn(world(), [&](int rank, StorePtr store) { body(rank, group(store, rank)); });
  }
};

TEST_P(Sweep, AllreduceEveryDtypeOpAndCount) {
  const int size = world();
  on_every_rank([&](int rank, ProcessGroupPtr pg) {
    for (int64_t n : kCounts) {
      for (auto dtype : kDtypes) {
        for (auto op : kOps) {
          if (op == ReduceOp::AVG && !at::isFloatingType(dtype)) continue;
          at::Tensor t = input(dtype, rank, n);
          pg->allreduce(t, op)->wait();
          expect_close(t, expected(op, dtype, size, n), label(to_string(op), size, rank, dtype, n));
        }
      }
    }
  });
}

TEST_P(Sweep, AvgOnIntegersIsRejected) {
  on_every_rank([&](int rank, ProcessGroupPtr pg) {
    at::Tensor t = input(at::kInt, rank, 3);
    Raised r = raised([&] { pg->allreduce(t, ReduceOp::AVG); });
    ASSERT_TRUE(r) << "AVG on int32: " << r;
    EXPECT_TRUE(r.on(*pg)) << r;
    EXPECT_EQ(r.context.operation, "allreduce") << r;
    // The op and the dtype it refuses.
    EXPECT_TRUE(r.mentions("AVG")) << r;
    EXPECT_TRUE(r.mentions("Int")) << r;
  });
}

TEST_P(Sweep, CoalescedBroadcastAllgatherReduceScatterBarrier) {
  const int size = world();
  on_every_rank([&](int rank, ProcessGroupPtr pg) {
    for (int64_t n : kCounts) {
      for (auto dtype : kDtypes) {
        const auto what = [&](const char* op) { return label(op, size, rank, dtype, n); };
        // Coalesced: three tensors of different shapes, one collective.
        std::vector<at::Tensor> parts = {input(dtype, rank, n), input(dtype, rank, 3, n),
                                         input(dtype, rank, n / 2, n + 3).view({-1, 1})};
        pg->allreduce_coalesced(parts, ReduceOp::SUM)->wait();
        expect_close(parts[0], expected(ReduceOp::SUM, dtype, size, n), what("coalesced[0]"));
        expect_close(parts[1], expected(ReduceOp::SUM, dtype, size, 3, n), what("coalesced[1]"));
        expect_close(parts[2], expected(ReduceOp::SUM, dtype, size, n / 2, n + 3),
                     what("coalesced[2]"));
        // Broadcast from the last rank: everyone ends with its input.
        const int root = size - 1;
        at::Tensor b = input(dtype, rank, n);
        pg->broadcast(b, root)->wait();
        expect_close(b, input(dtype, root, n), what("broadcast"));
        // Allgather: slot r holds rank r's input.
        std::vector<at::Tensor> gathered;
        for (int r = 0; r < size; ++r) gathered.push_back(at::full({n}, 7, dtype));
        pg->allgather(gathered, input(dtype, rank, n))->wait();
        for (int r = 0; r < size; ++r)
          expect_close(gathered[r], input(dtype, r, n), what("allgather"));
        // Reduce-scatter: rank r gets the sum over ranks of their chunk r;
        // rank q's chunk r is input(q, n, salt r*n).
        std::vector<at::Tensor> chunks;
        for (int r = 0; r < size; ++r) chunks.push_back(input(dtype, rank, n, r * n));
        at::Tensor out = at::full({n}, 7, dtype);
        pg->reduce_scatter(out, chunks, ReduceOp::SUM)->wait();
        expect_close(out, expected(ReduceOp::SUM, dtype, size, n, rank * n),
                     what("reduce_scatter"));
      }
    }
    pg->barrier()->wait();
  });
}

TEST_P(Sweep, ReduceScatterEveryOp) {
  const int size = world();
  on_every_rank([&](int rank, ProcessGroupPtr pg) {
    for (auto op : kOps) {
      const int64_t n = 1001;
      std::vector<at::Tensor> chunks;
      for (int r = 0; r < size; ++r) chunks.push_back(input(at::kDouble, rank, n, r * n));
      at::Tensor out = at::empty({n}, at::kDouble);
      pg->reduce_scatter(out, chunks, op)->wait();
      expect_close(out, expected(op, at::kDouble, size, n, rank * n),
                   label(to_string(op), size, rank, at::kDouble, n));
    }
  });
}

// One rank, two, an odd size, four, and 7 (odd, not a power of two, more
// threads than this machine's 2 cores). 5, 6 and 8 cost about 3 minutes of
// each CI tier for nothing these do not cover.
INSTANTIATE_TEST_SUITE_P(WorldSizes, Sweep,
                         ::testing::Combine(::testing::Values("gloo", "shm"),
                                            ::testing::Values(1, 2, 3, 4, 7)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_world" +
                                  std::to_string(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace ddp::testing
