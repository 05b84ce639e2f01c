// What a DistributedDataParallel module puts on its rank's DDP_TIMELINE
// (include/ddp/timeline.h): its forwards and buffer broadcasts as they
// happen, and each synchronized backward from the Reducer's statistics once
// they are complete (at the next forward, or when the module goes).
#pragma once

#include <ddp/reducer.h>

#include "timeline/rank_timeline.h"

#include <memory>
#include <string>
#include <vector>

namespace ddp::detail {

// DDP's part of a synchronized iteration, from its statistics: "backward"
// compute from backward's start to the last gradient hook, one
// "<comm> bucket K (size)" comm span per bucket from its launch to its
// completion (comm: "allreduce", or "comm hook" when a hook replaced it), and
// "finalize (copy back)" compute from the last completion to
// `backward_returned` (the averaged gradients written back, with the small
// status allreduce). Nothing when backward never started.
std::vector<TraceSpan> backward_spans(const IterationStats& stats,
                                      TraceClock::time_point backward_returned,
                                      const std::string& comm = "allreduce");

class ModuleTimeline {
 public:
  // `reducer` must outlive this object.
  ModuleTimeline(std::shared_ptr<RankTimeline> timeline, const Reducer& reducer);
  // The last backward, then the file is written.
  ~ModuleTimeline();
  ModuleTimeline(const ModuleTimeline&) = delete;
  ModuleTimeline& operator=(const ModuleTimeline&) = delete;

  // At the start of every forward (on the training thread): the previous
  // backward, and this thread's TimelineSpans go to this timeline.
  // `comm_hook`: buckets go through a communication hook.
  void before_forward(bool comm_hook);
  void broadcast_buffers(TraceClock::time_point start, TraceClock::time_point end);
  // `kind`: "forward", "forward (no_sync)", "forward (no grad)".
  void forward(const char* kind, TraceClock::time_point start, TraceClock::time_point end);

 private:
  void add_new_backward();
  void add_bucket_tuning(const IterationStats& stats, TraceClock::time_point returned);

  std::shared_ptr<RankTimeline> timeline_;
  const Reducer& reducer_;
  int64_t traced_ = 0;  // the last iteration (IterationStats::iteration) written
  bool comm_hook_ = false;
  bool tuning_shown_settled_ = false;
};

}  // namespace ddp::detail
