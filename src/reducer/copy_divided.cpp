#include "reducer/copy_divided.h"

#include <ATen/ATen.h>

#include <cstdint>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define DDP_STREAMED_COPY 1
#endif

namespace ddp::detail {
namespace {

#ifdef DDP_STREAMED_COPY
bool has_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}

// dst[i] = src[i] / d: element by element until dst is 32-byte aligned,
// then 32 bytes a store, past the caches; the fence orders those stores
// before whatever this thread publishes next (the bucket's launch).
__attribute__((target("avx2"))) void stream_divided(float* dst, const float* src, int64_t n,
                                                    float d) {
  int64_t i = 0;
  for (; i < n && reinterpret_cast<uintptr_t>(dst + i) % 32 != 0; ++i) dst[i] = src[i] / d;
  const __m256 vd = _mm256_set1_ps(d);
  for (; i + 8 <= n; i += 8) {
    _mm256_stream_ps(dst + i, _mm256_div_ps(_mm256_loadu_ps(src + i), vd));
  }
  for (; i < n; ++i) dst[i] = src[i] / d;
  _mm_sfence();
}

__attribute__((target("avx2"))) void stream_divided(double* dst, const double* src, int64_t n,
                                                    double d) {
  int64_t i = 0;
  for (; i < n && reinterpret_cast<uintptr_t>(dst + i) % 32 != 0; ++i) dst[i] = src[i] / d;
  const __m256d vd = _mm256_set1_pd(d);
  for (; i + 4 <= n; i += 4) {
    _mm256_stream_pd(dst + i, _mm256_div_pd(_mm256_loadu_pd(src + i), vd));
  }
  for (; i < n; ++i) dst[i] = src[i] / d;
  _mm_sfence();
}

bool streams(const at::Tensor& dst, const at::Tensor& src) {
  const auto dtype = dst.scalar_type();
  return has_avx2() && dst.device().is_cpu() && src.device().is_cpu() &&
         src.scalar_type() == dtype && (dtype == at::kFloat || dtype == at::kDouble) &&
         dst.sizes() == src.sizes() && dst.is_contiguous() && src.is_contiguous() &&
         dst.nbytes() >= static_cast<size_t>(kStreamedCopyBytes) && !src.is_same(dst);
}
#endif

}  // namespace

void copy_divided(at::Tensor& dst, const at::Tensor& src, const at::Tensor& divisor) {
#ifdef DDP_STREAMED_COPY
  if (streams(dst, src)) {
    const double d = divisor.item<double>();
    if (dst.scalar_type() == at::kFloat) {
      stream_divided(dst.data_ptr<float>(), src.data_ptr<float>(), dst.numel(),
                     static_cast<float>(d));
    } else {
      stream_divided(dst.data_ptr<double>(), src.data_ptr<double>(), dst.numel(), d);
    }
    return;
  }
#endif
  at::div_out(dst, src, divisor);
}

}  // namespace ddp::detail
