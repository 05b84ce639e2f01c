// Every collective, swept over world sizes 1..8, element counts 0..1<<20,
// every dtype and every ReduceOp, each result checked against an expectation
// computed locally. Inputs are small integers periodic in the index, so the
// expectation is exact in every dtype and cheap: a table of `kPeriod` values.
#include "spawn.h"

#include <ddp/ddp.h>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

namespace ddp::testing {
namespace {

constexpr int64_t kPeriod = 5;
const std::vector<int64_t> kCounts = {0, 1, 7, 1000, 1 << 20};
const std::vector<at::ScalarType> kDtypes = {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16,
                                             at::kInt,   at::kLong,   at::kByte};
const std::vector<ReduceOp> kOps = {ReduceOp::SUM, ReduceOp::AVG, ReduceOp::MIN, ReduceOp::MAX,
                                    ReduceOp::PRODUCT};

// Rank r's value at index i: in {-2..2}, or {0..2} for uint8.
int64_t value(at::ScalarType dtype, int rank, int64_t i) {
  return dtype == at::kByte ? (i + rank) % 3 : (i + rank) % kPeriod - 2;
}

at::Tensor input(at::ScalarType dtype, int rank, int64_t n, int64_t salt = 0) {
  at::Tensor idx = at::arange(n, at::kLong) + salt;
  at::Tensor v = dtype == at::kByte ? (idx + rank) % 3 : (idx + rank) % kPeriod - 2;
  return v.to(dtype);
}

double reduce(ReduceOp op, const std::vector<int64_t>& xs, at::ScalarType dtype) {
  double acc = static_cast<double>(xs[0]);
  int64_t product = xs[0];
  for (size_t k = 1; k < xs.size(); ++k) {
    double x = static_cast<double>(xs[k]);
    switch (op) {
      case ReduceOp::SUM: case ReduceOp::AVG: acc += x; break;
      case ReduceOp::MIN: acc = std::min(acc, x); break;
      case ReduceOp::MAX: acc = std::max(acc, x); break;
      case ReduceOp::PRODUCT: product *= xs[k]; break;
    }
  }
  if (op == ReduceOp::PRODUCT) {
    // uint8 arithmetic wraps modulo 256, as the collective's does.
    return dtype == at::kByte ? static_cast<double>(static_cast<uint8_t>(product))
                              : static_cast<double>(product);
  }
  return op == ReduceOp::AVG ? acc / static_cast<double>(xs.size()) : acc;
}

// The reduction over `size` ranks of input(dtype, r, n, salt).
at::Tensor expected(ReduceOp op, at::ScalarType dtype, int size, int64_t n, int64_t salt = 0) {
  std::vector<double> table;
  for (int64_t i = 0; i < 15; ++i) {  // lcm of the periods 5 and 3
    std::vector<int64_t> xs;
    for (int r = 0; r < size; ++r) xs.push_back(value(dtype, r, i));
    table.push_back(reduce(op, xs, dtype));
  }
  at::Tensor lut = at::tensor(table, at::kDouble);
  return lut.index_select(0, (at::arange(n, at::kLong) + salt) % 15);
}

void expect_close(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  const bool low = got.scalar_type() == at::kHalf || got.scalar_type() == at::kBFloat16;
  const double tol = low ? 1e-2 : 1e-6;
  ASSERT_EQ(got.numel(), want.numel()) << what;
  if (got.numel() == 0) return;
  at::Tensor g = got.to(at::kDouble).view(-1);
  at::Tensor w = want.to(at::kDouble).view(-1);
  ASSERT_TRUE(at::allclose(g, w, tol, tol))
      << what << ": max |diff| " << (g - w).abs().max().item<double>();
}

std::string label(const char* op, int size, int rank, at::ScalarType dtype, int64_t n) {
  return std::string(op) + " world " + std::to_string(size) + " rank " + std::to_string(rank) +
         " " + c10::toString(dtype) + " n=" + std::to_string(n);
}

class Sweep : public ::testing::TestWithParam<int> {};

TEST_P(Sweep, AllreduceEveryDtypeOpAndCount) {
  const int size = GetParam();
  spawn(size, [&](int rank, StorePtr store) {
    auto pg = make_group(store, rank, size);
    for (int64_t n : kCounts) {
      for (auto dtype : kDtypes) {
        for (auto op : kOps) {
          if (op == ReduceOp::AVG && !at::isFloatingType(dtype)) continue;
          at::Tensor t = input(dtype, rank, n);
          pg->allreduce(t, op)->wait();
          expect_close(t, expected(op, dtype, size, n),
                       label(to_string(op), size, rank, dtype, n));
        }
      }
    }
  });
}

TEST_P(Sweep, AvgOnIntegersIsRejected) {
  const int size = GetParam();
  spawn(size, [&](int rank, StorePtr store) {
    auto pg = make_group(store, rank, size);
    at::Tensor t = input(at::kInt, rank, 3);
    try {
      pg->allreduce(t, ReduceOp::AVG);
      FAIL() << "AVG on int32 was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("AVG is defined for floating dtypes"),
                std::string::npos) << e.what();
    }
  });
}

TEST_P(Sweep, CoalescedBroadcastAllgatherReduceScatterBarrier) {
  const int size = GetParam();
  spawn(size, [&](int rank, StorePtr store) {
    auto pg = make_group(store, rank, size);
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
        for (int r = 0; r < size; ++r) expect_close(gathered[r], input(dtype, r, n), what("allgather"));
        // Reduce-scatter: rank r gets the sum over ranks of their chunk r;
        // rank q's chunk r is input(q, n, salt r*n).
        std::vector<at::Tensor> chunks;
        for (int r = 0; r < size; ++r) chunks.push_back(input(dtype, rank, n, r * n));
        at::Tensor out = at::full({n}, 7, dtype);
        pg->reduce_scatter(out, chunks, ReduceOp::SUM)->wait();
        expect_close(out, expected(ReduceOp::SUM, dtype, size, n, rank * n), what("reduce_scatter"));
      }
    }
    pg->barrier()->wait();
  });
}

TEST_P(Sweep, ReduceScatterEveryOp) {
  const int size = GetParam();
  spawn(size, [&](int rank, StorePtr store) {
    auto pg = make_group(store, rank, size);
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

INSTANTIATE_TEST_SUITE_P(WorldSizes, Sweep, ::testing::Range(1, 9),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

}  // namespace
}  // namespace ddp::testing
