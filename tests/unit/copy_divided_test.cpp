// The Reducer's averaging copy (reducer/copy_divided.h) writes exactly what
// at::div_out writes, on either of its paths: streamed (large contiguous
// float and double) or libtorch's (the rest), at every alignment.
#include "reducer/copy_divided.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>

namespace ddp::detail {
namespace {

// The same bits: equal as integers of the element's width.
bool same_bits(const at::Tensor& a, const at::Tensor& b) {
  const auto as_int = [](const at::Tensor& t) {
    switch (t.element_size()) {
      case 8:
        return t.view(at::kLong);
      case 4:
        return t.view(at::kInt);
      default:
        return t.view(at::kShort);
    }
  };
  return at::equal(as_int(a), as_int(b));
}

// Copies src / divisor into a slice of a larger buffer that starts
// `offset` elements in (so unaligned), and checks it bit for bit against
// at::div_out, and that nothing around the slice changed. The source holds
// infinities, a NaN, -0 and a subnormal besides normal values.
void expect_as_div_out(at::ScalarType dtype, int64_t n, int64_t offset, double divisor) {
  SCOPED_TRACE(std::string(c10::toString(dtype)) + " n=" + std::to_string(n) +
               " offset=" + std::to_string(offset) + " divisor=" + std::to_string(divisor));
  at::Tensor src = at::randn({n}, at::TensorOptions().dtype(dtype)) * 1e3;
  const double specials[] = {INFINITY, -INFINITY, NAN, -0.0, 1e-40, -1e-310};
  for (int64_t i = 0; i < n && i < 6; ++i) src[n - 1 - 7 * i % n].fill_(specials[i]);
  at::Tensor buffer = at::full({n + offset + 5}, 7, at::TensorOptions().dtype(dtype));
  at::Tensor dst = buffer.narrow(0, offset, n);
  const at::Tensor d = at::scalar_tensor(divisor, at::kDouble);
  copy_divided(dst, src, d);
  at::Tensor want = at::empty_like(src);
  at::div_out(want, src, d);
  EXPECT_TRUE(same_bits(dst, want));
  EXPECT_TRUE(at::equal(buffer.narrow(0, 0, offset), at::full({offset}, 7, buffer.options())));
  EXPECT_TRUE(at::equal(buffer.narrow(0, offset + n, 5), at::full({5}, 7, buffer.options())));
}

// The streamed loop is taken for a large contiguous float or double copy
// wherever the CPU has AVX2 (else there is nothing to compare).
TEST(CopyDivided, LargeFloatAndDoubleStreamWhereTheCpuHasAvx2) {
#if defined(__x86_64__)
  if (!__builtin_cpu_supports("avx2")) GTEST_SKIP() << "no AVX2 on this CPU";
  for (auto dtype : {at::kFloat, at::kDouble}) {
    const at::Tensor t = at::empty({kStreamedCopyBytes / 4}, at::TensorOptions().dtype(dtype));
    EXPECT_TRUE(copy_divided_streams(at::empty_like(t), t)) << c10::toString(dtype);
    EXPECT_FALSE(copy_divided_streams(t, t)) << "a copy onto itself";
    EXPECT_FALSE(copy_divided_streams(at::empty_like(t).narrow(0, 0, 8), t.narrow(0, 0, 8)))
        << "a small copy";
  }
  const at::Tensor half = at::empty({kStreamedCopyBytes}, at::kHalf);
  EXPECT_FALSE(copy_divided_streams(at::empty_like(half), half)) << "Half";
#else
  GTEST_SKIP() << "not x86-64";
#endif
}

TEST(CopyDivided, LargeFloatAndDoubleAsDivOutAtEveryAlignment) {
  for (auto dtype : {at::kFloat, at::kDouble}) {
    const int64_t n = kStreamedCopyBytes / at::elementSize(dtype) + 13;  // streamed, a tail
    for (int64_t offset = 0; offset < 9; ++offset) {
      for (double divisor : {1.0, 2.0, 3.0, 7.0}) expect_as_div_out(dtype, n, offset, divisor);
    }
  }
}

TEST(CopyDivided, SmallAndOtherDtypesAsDivOut) {
  for (auto dtype : {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16}) {
    for (int64_t n : {0, 1, 7, 8, 9, 1000}) expect_as_div_out(dtype, n, 3, 3.0);
  }
}

TEST(CopyDivided, NonContiguousSourceAsDivOut) {
  const at::Tensor src = at::randn({1024, 512}).t();  // 2 MiB, transposed
  at::Tensor dst = at::empty({512, 1024});
  const at::Tensor d = at::scalar_tensor(3.0, at::kDouble);
  copy_divided(dst, src, d);
  EXPECT_TRUE(at::equal(dst, src / d));
}

}  // namespace
}  // namespace ddp::detail
