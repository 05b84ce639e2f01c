// Inputs and locally computed expectations for collective sweeps, shared by
// the thread-per-rank sweep (multirank/collectives_test.cpp) and the
// process-per-rank MPI tests (mpi/mpi_backend_test.cpp). Inputs are small integers
// periodic in the index, so the expectation is exact in every dtype and
// cheap: a table of 15 values (lcm of the periods 5 and 3).
#pragma once

#include <ddp/process_group.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <string>
#include <vector>

namespace ddp::testing {

constexpr int64_t kPeriod = 5;
inline const std::vector<int64_t> kCounts = {0, 1, 7, 1000, 1 << 20};
inline const std::vector<at::ScalarType> kDtypes = {
    at::kFloat, at::kDouble, at::kHalf, at::kBFloat16, at::kInt, at::kLong, at::kByte};
inline const std::vector<ReduceOp> kOps = {ReduceOp::SUM, ReduceOp::AVG, ReduceOp::MIN,
                                           ReduceOp::MAX, ReduceOp::PRODUCT};

// Rank r's value at index i: in {-2..2}, or {0..2} for uint8.
inline int64_t value(at::ScalarType dtype, int rank, int64_t i) {
  return dtype == at::kByte ? (i + rank) % 3 : (i + rank) % kPeriod - 2;
}

inline at::Tensor input(at::ScalarType dtype, int rank, int64_t n, int64_t salt = 0) {
  at::Tensor idx = at::arange(n, at::kLong) + salt;
  at::Tensor v = dtype == at::kByte ? (idx + rank) % 3 : (idx + rank) % kPeriod - 2;
  return v.to(dtype);
}

inline double reduce(ReduceOp op, const std::vector<int64_t>& xs, at::ScalarType dtype) {
  double acc = static_cast<double>(xs[0]);
  int64_t product = xs[0];
  for (size_t k = 1; k < xs.size(); ++k) {
    double x = static_cast<double>(xs[k]);
    switch (op) {
      case ReduceOp::SUM:
      case ReduceOp::AVG:
        acc += x;
        break;
      case ReduceOp::MIN:
        acc = std::min(acc, x);
        break;
      case ReduceOp::MAX:
        acc = std::max(acc, x);
        break;
      case ReduceOp::PRODUCT:
        product *= xs[k];
        break;
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
inline at::Tensor expected(ReduceOp op, at::ScalarType dtype, int size, int64_t n,
                           int64_t salt = 0) {
  std::vector<double> table;
  for (int64_t i = 0; i < 15; ++i) {
    std::vector<int64_t> xs;
    for (int r = 0; r < size; ++r) xs.push_back(value(dtype, r, i));
    table.push_back(reduce(op, xs, dtype));
  }
  at::Tensor lut = at::tensor(table, at::kDouble);
  return lut.index_select(0, (at::arange(n, at::kLong) + salt) % 15);
}

// "" when `got` matches `want` (within 1e-2 for Half/BFloat16, 1e-6
// otherwise); else what differs.
inline std::string mismatch(const at::Tensor& got, const at::Tensor& want) {
  if (got.numel() != want.numel()) {
    return std::to_string(got.numel()) + " elements, expected " + std::to_string(want.numel());
  }
  if (got.numel() == 0) return "";
  const bool low = got.scalar_type() == at::kHalf || got.scalar_type() == at::kBFloat16;
  const double tol = low ? 1e-2 : 1e-6;
  at::Tensor g = got.to(at::kDouble).view(-1);
  at::Tensor w = want.to(at::kDouble).view(-1);
  if (at::allclose(g, w, tol, tol)) return "";
  return "max |diff| " + std::to_string((g - w).abs().max().item<double>());
}

inline std::string label(const char* op, int size, int rank, at::ScalarType dtype, int64_t n) {
  return std::string(op) + " world " + std::to_string(size) + " rank " + std::to_string(rank) +
         " " + c10::toString(dtype) + " n=" + std::to_string(n);
}

}  // namespace ddp::testing
