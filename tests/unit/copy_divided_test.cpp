// The Reducer's averaging copy (reducer/copy_divided.h) writes exactly what
// at::div_out writes, on either of its paths: streamed (large contiguous
// float and double) or libtorch's (the rest), at every alignment.
#include "reducer/copy_divided.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>

namespace ddp::detail {
namespace {

// Copies src / divisor into a slice of a larger buffer that starts
// `offset` elements in (so unaligned), and checks it bit for bit against
// at::div_out, and that nothing around the slice changed.
void expect_as_div_out(at::ScalarType dtype, int64_t n, int64_t offset, double divisor) {
  SCOPED_TRACE(std::string(c10::toString(dtype)) + " n=" + std::to_string(n) +
               " offset=" + std::to_string(offset) + " divisor=" + std::to_string(divisor));
  const at::Tensor src = at::randn({n}, at::TensorOptions().dtype(dtype)) * 1e3;
  at::Tensor buffer = at::full({n + offset + 5}, 7, at::TensorOptions().dtype(dtype));
  at::Tensor dst = buffer.narrow(0, offset, n);
  const at::Tensor d = at::scalar_tensor(divisor, at::kDouble);
  copy_divided(dst, src, d);
  at::Tensor want = at::empty_like(src);
  at::div_out(want, src, d);
  EXPECT_TRUE(at::equal(dst, want));
  EXPECT_TRUE(at::equal(buffer.narrow(0, 0, offset), at::full({offset}, 7, buffer.options())));
  EXPECT_TRUE(at::equal(buffer.narrow(0, offset + n, 5), at::full({5}, 7, buffer.options())));
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
