#include "reducer/copy_divided.h"

#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/Parallel.h>

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

// Split over libtorch's intra-op threads as at::div_out would be, in
// chunks of at least libtorch's own grain (at::internal::GRAIN_SIZE); each
// chunk fences its own stores before its thread reports it done.
constexpr int64_t kElementsPerChunk = 32768;

template <typename T>
void stream_divided_in_parallel(at::Tensor& dst, const at::Tensor& src, double divisor) {
  T* out = dst.data_ptr<T>();
  const T* in = src.data_ptr<T>();
  const T d = static_cast<T>(divisor);
  at::parallel_for(0, dst.numel(), kElementsPerChunk, [&](int64_t begin, int64_t end) {
    stream_divided(out + begin, in + begin, end - begin, d);
  });
}
#endif

}  // namespace

bool copy_divided_streams(const at::Tensor& dst, const at::Tensor& src) {
#ifdef DDP_STREAMED_COPY
  const auto dtype = dst.scalar_type();
  return has_avx2() && dst.device().is_cpu() && src.device().is_cpu() &&
         dst.layout() == at::kStrided && src.layout() == at::kStrided &&
         src.scalar_type() == dtype && (dtype == at::kFloat || dtype == at::kDouble) &&
         dst.sizes() == src.sizes() && dst.is_contiguous() && src.is_contiguous() &&
         dst.nbytes() >= static_cast<size_t>(kStreamedCopyBytes) &&
         at::get_overlap_status(dst, src) == at::MemOverlapStatus::No;
#else
  return false;
#endif
}

void copy_divided(at::Tensor& dst, const at::Tensor& src, const at::Tensor& divisor) {
#ifdef DDP_STREAMED_COPY
  if (copy_divided_streams(dst, src)) {
    const double d = divisor.item<double>();
    if (dst.scalar_type() == at::kFloat) {
      stream_divided_in_parallel<float>(dst, src, d);
    } else {
      stream_divided_in_parallel<double>(dst, src, d);
    }
    return;
  }
#endif
  at::div_out(dst, src, divisor);
}

}  // namespace ddp::detail
