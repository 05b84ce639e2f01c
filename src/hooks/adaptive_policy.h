// The rule of the adaptive compression hook (include/ddp/hooks/
// adaptive_compression.h), apart from tensors and ranks: Accordion's
// detection of a critical regime, and the move along the ladder it causes.
#pragma once

#include <cmath>
#include <cstddef>

namespace ddp::detail {

struct LevelDecision {
  size_t level = 0;
  bool critical = false;
  double norm_change = 0;  // |previous - current| / previous (0 when previous is 0)
};

// The level of a bucket for the next window, from the norms of its gradient
// accumulated over the last two windows: critical (a relative change of at
// least `threshold`, or `marked`) -> level 0; otherwise one level more
// compressed, at most `levels - 1`.
inline LevelDecision next_level(size_t level, size_t levels, double previous_norm, double norm,
                                double threshold, bool marked) {
  LevelDecision d;
  if (previous_norm > 0) {
    d.norm_change = std::fabs(previous_norm - norm) / previous_norm;
  } else if (norm > 0) {
    d.norm_change = INFINITY;  // from nothing to something: as abrupt as it gets
  }
  d.critical = marked || d.norm_change >= threshold;
  d.level = d.critical ? 0 : (level + 1 < levels ? level + 1 : level);
  return d;
}

}  // namespace ddp::detail
