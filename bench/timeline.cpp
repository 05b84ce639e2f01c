// Timelines of training iterations as the library's Chrome trace events
// (timeline.h).
#include "timeline.h"

#include <algorithm>

namespace ddp_bench {

void Timeline::begin_iteration() {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto now = Clock::now();
  if (open_) close(now);
  if (!events_.any) encoder_.metadata(events_);
  start_ = now;
  open_ = true;
}

void Timeline::add(const std::string& lane, const std::string& name, Clock::time_point start,
                   Clock::time_point end, bool blocking) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (open_) spans_.push_back({lane, name, start, end, blocking});
}

void Timeline::add_ddp_backward(const ddp::IterationStats& stats,
                                Clock::time_point backward_returned) {
  for (const auto& span : ddp::detail::backward_spans(stats, backward_returned)) {
    add(span.lane, span.name, span.start, span.end, span.blocking);
  }
}

void Timeline::end_iteration() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (open_) close(Clock::now());
}

void Timeline::close(Clock::time_point end) {
  // The encoder puts overlapping spans of a lane on rows of their own when
  // it meets them in order of their start.
  spans_.insert(spans_.begin(), {"iteration", "iteration", start_, end, false});
  std::stable_sort(
      spans_.begin(), spans_.end(),
      [](const ddp::TraceSpan& a, const ddp::TraceSpan& b) { return a.start < b.start; });
  const std::string args = "\"iteration\":" + std::to_string(iterations_);
  for (const auto& s : spans_) {
    encoder_.span(events_, s.lane, s.name, ddp::trace_micros(s.start), ddp::trace_micros(s.end),
                  s.blocking, args);
  }
  spans_.clear();
  ++iterations_;
  open_ = false;
}

std::string Timeline::trace_events() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return "[\n" + events_.text + "\n]";
}

}  // namespace ddp_bench
