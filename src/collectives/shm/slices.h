// How the shm all-reduces split m elements among the ranks: each rank
// reduces one slice, made of whole 64-byte units so that no two ranks write
// one cache line.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace ddp::detail::shm {

class Slices {
 public:
  Slices(int64_t m, int world, size_t element_size)
      : m_(m), unit_(std::max<int64_t>(1, 64 / static_cast<int64_t>(element_size))) {
    const int64_t units = (m + unit_ - 1) / unit_;
    per_rank_ = (units + world - 1) / world * unit_;
  }
  // Rank q's slice is elements [lo(q), lo(q) + len(q)).
  int64_t lo(int q) const { return std::min(m_, q * per_rank_); }
  int64_t len(int q) const { return lo(q + 1) - lo(q); }

 private:
  int64_t m_, unit_, per_rank_ = 0;
};

}  // namespace ddp::detail::shm
