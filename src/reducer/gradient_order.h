// Bucket order from gradient order (paper §6.2.1): the order in which
// gradients became ready in the first synchronized iteration, on rank 0,
// becomes every rank's bucket order once, so that buckets fill in the order
// backward produces gradients.
#pragma once

#include <ddp/process_group.h>

#include <cstddef>
#include <vector>

namespace ddp::detail {

class GradientOrder {
 public:
  // `rebuild` false (find_unused_parameters: the order changes between
  // iterations) records nothing worth rebuilding for.
  explicit GradientOrder(bool rebuild) : rebuild_(rebuild) {}

  // A synchronized iteration begins: recorded until one completes.
  void begin_iteration() {
    recording_ = !recorded_;
    if (recording_) order_.clear();
  }
  // Parameter i's gradient went into its bucket.
  void note_ready(size_t i) {
    if (recording_) order_.push_back(i);
  }
  // The iteration completed (its checks passed): the first one's order is
  // final, parameters that never got a gradient at its end.
  void end_iteration(size_t params);

  // The buckets are due to be rebuilt (once, before the second iteration).
  bool rebuild_due() const { return rebuild_due_; }
  // Rank 0's order, on every rank (a broadcast over `group`); not due after.
  std::vector<size_t> take_rank0_order(ProcessGroup& group);
  // The buckets were given their order (a checkpoint's): nothing to record
  // or rebuild.
  void settle() {
    recorded_ = true;
    recording_ = rebuild_due_ = false;
  }

 private:
  const bool rebuild_;
  bool recording_ = false, recorded_ = false, rebuild_due_ = false;
  std::vector<size_t> order_;
};

}  // namespace ddp::detail
