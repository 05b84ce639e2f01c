// The loops are plain so that the compiler vectorizes them for float, double
// and the integer types; Half and BFloat16 go through float, as c10's own
// arithmetic on them does. Outputs may alias an input (Gloo reduces in place).
#include "collectives/reduce_kernels.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>

namespace ddp::detail {
namespace {

struct Sum {
  template <typename T>
  static T apply(T a, T b) {
    return a + b;
  }
};
struct Product {
  template <typename T>
  static T apply(T a, T b) {
    return a * b;
  }
};
struct Min {
  template <typename T>
  static T apply(T a, T b) {
    return std::min(a, b);
  }
};
struct Max {
  template <typename T>
  static T apply(T a, T b) {
    return std::max(a, b);
  }
};

template <typename T, typename Op>
void kernel(void* c, const void* a, const void* b, size_t n) {
  auto* out = static_cast<T*>(c);
  const auto* x = static_cast<const T*>(a);
  const auto* y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<T>(Op::apply(x[i], y[i]));
}

// Half and BFloat16: compute in float.
template <typename T, typename Op>
void kernel_via_float(void* c, const void* a, const void* b, size_t n) {
  auto* out = static_cast<T*>(c);
  const auto* x = static_cast<const T*>(a);
  const auto* y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) {
    out[i] = static_cast<T>(Op::apply(static_cast<float>(x[i]), static_cast<float>(y[i])));
  }
}

template <typename Op>
ReduceKernel for_dtype(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
      return &kernel<float, Op>;
    case at::kDouble:
      return &kernel<double, Op>;
    case at::kHalf:
      return &kernel_via_float<c10::Half, Op>;
    case at::kBFloat16:
      return &kernel_via_float<c10::BFloat16, Op>;
    case at::kInt:
      return &kernel<int32_t, Op>;
    case at::kLong:
      return &kernel<int64_t, Op>;
    case at::kByte:
      return &kernel<uint8_t, Op>;
    default:
      throw std::logic_error(std::string("ddp: no reduce kernel for dtype ") +
                             c10::toString(dtype));
  }
}

}  // namespace

ReduceKernel reduce_kernel(at::ScalarType dtype, ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM:
    case ReduceOp::AVG:
      return for_dtype<Sum>(dtype);
    case ReduceOp::PRODUCT:
      return for_dtype<Product>(dtype);
    case ReduceOp::MIN:
      return for_dtype<Min>(dtype);
    case ReduceOp::MAX:
      return for_dtype<Max>(dtype);
  }
  throw std::logic_error("ddp: unknown ReduceOp");
}

}  // namespace ddp::detail
