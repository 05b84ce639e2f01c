#include "module/module_timeline.h"

#include <iostream>

namespace ddp::detail {
namespace {

TraceClock::time_point plus_ms(TraceClock::time_point t, double ms) {
  return t + std::chrono::duration_cast<TraceClock::duration>(
                 std::chrono::duration<double, std::milli>(ms));
}

}  // namespace

ModuleTimeline::ModuleTimeline(std::shared_ptr<RankTimeline> timeline, const Reducer& reducer)
    : timeline_(std::move(timeline)), reducer_(reducer) {
  RankTimeline::make_current(timeline_);
}

ModuleTimeline::~ModuleTimeline() {
  try {
    add_new_backward();
    timeline_->flush();
  } catch (const std::exception& e) {  // a destructor: report, never throw
    std::cerr << "ddp[rank " << timeline_->rank() << "]: DDP_TIMELINE: the last iteration was "
              << "not written: " << e.what() << std::endl;
  }
}

void ModuleTimeline::before_forward(bool comm_hook) {
  comm_hook_ = comm_hook;
  RankTimeline::make_current(timeline_);
  add_new_backward();
}

void ModuleTimeline::broadcast_buffers(TraceClock::time_point start, TraceClock::time_point end) {
  timeline_->add({"comm", "broadcast buffers", start, end, /*blocking=*/true}, traced_ + 1);
}

void ModuleTimeline::forward(const char* kind, TraceClock::time_point start,
                             TraceClock::time_point end) {
  timeline_->add({"compute", kind, start, end}, traced_ + 1);
}

// The statistics of a synchronized backward are complete once it returned;
// IterationStats::iteration tells whether they are new.
void ModuleTimeline::add_new_backward() {
  const IterationStats stats = reducer_.stats();
  if (stats.iteration <= traced_) return;
  traced_ = stats.iteration;
  const auto returned =
      plus_ms(stats.backward_start, stats.backward_compute_ms + stats.finalize_ms);
  for (const auto& span : backward_spans(stats, returned, comm_hook_ ? "comm hook" : "allreduce")) {
    timeline_->add(span, stats.iteration);
  }
}

}  // namespace ddp::detail
