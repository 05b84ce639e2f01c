#include "module/module_timeline.h"

#include <algorithm>
#include <iostream>
#include <sstream>

namespace ddp::detail {
namespace {

TraceClock::time_point plus_ms(TraceClock::time_point t, double ms) {
  return t + std::chrono::duration_cast<TraceClock::duration>(
                 std::chrono::duration<double, std::milli>(ms));
}

}  // namespace

std::vector<TraceSpan> backward_spans(const IterationStats& stats,
                                      TraceClock::time_point backward_returned,
                                      const std::string& comm) {
  std::vector<TraceSpan> out;
  if (stats.backward_start == TraceClock::time_point{}) return out;
  auto at = [&](double ms) { return plus_ms(stats.backward_start, ms); };
  const auto compute_end = at(stats.backward_compute_ms);
  out.push_back({"compute", "backward", stats.backward_start, compute_end});
  auto last_done = compute_end;
  for (size_t b = 0; b < stats.bucket_timings.size(); ++b) {
    const auto& t = stats.bucket_timings[b];
    out.push_back({"comm",
                   comm + " bucket " + std::to_string(b) + " (" + trace_bytes(t.bytes) + ")",
                   at(t.launch_ms), at(t.done_ms)});
    last_done = std::max(last_done, at(t.done_ms));
  }
  if (backward_returned > last_done) {
    out.push_back({"compute", "finalize (copy back)", last_done, backward_returned});
  }
  return out;
}

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
  add_bucket_tuning(stats, returned);
}

// Bucket autotuning: each trial iteration's size over its backward, and the
// choice on the first iteration that runs it.
void ModuleTimeline::add_bucket_tuning(const IterationStats& stats,
                                       TraceClock::time_point returned) {
  const BucketTuning& t = stats.bucket_tuning;
  if (t.phase == BucketTuning::Phase::kOff || tuning_shown_settled_) return;
  if (stats.backward_start == TraceClock::time_point{}) return;  // no backward ran
  std::ostringstream name;
  name << (t.phase == BucketTuning::Phase::kTrial ? "trying " : "settled on ")
       << t.cap_bytes / 1048576.0 << " MiB buckets";
  if (t.phase == BucketTuning::Phase::kSettled) {
    tuning_shown_settled_ = true;
    name << " after " << t.trial_iterations << " trial iterations";
  }
  timeline_->add({"autotune", name.str(), stats.backward_start, returned}, stats.iteration);
}

}  // namespace ddp::detail
