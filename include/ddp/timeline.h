// The timeline: with DDP_TIMELINE=path in the environment, every rank writes
// a Chrome trace of its training (open it in chrome://tracing or
// ui.perfetto.dev): each forward, backward's compute, each bucket's
// allreduce or communication hook from launch to completion, the
// copy-back at the end of backward, the buffer broadcasts, and whatever
// the program marks with a TimelineSpan:
//
//   loss.backward();
//   {
//     ddp::TimelineSpan span("optimizer step");
//     optimizer.step();
//   }
//
// Contract
// - Files: one per rank, named from DDP_TIMELINE (docs/ddp.md, "Timeline"):
//   "{rank}" in it is replaced by the rank; a directory gets
//   timeline.rank<R>.json; else ".rank<R>" is inserted before ".json" (or
//   ".rank<R>.json" appended). /tmp/t.json -> /tmp/t.rank0.json, ...
// - Written by DistributedDataParallel: the file is opened when the module
//   is constructed (an unwritable path: InvalidArgument naming the variable
//   and the file on the rank that cannot write it, one naming that rank on
//   the others); events are buffered and written every second, when the
//   module is destroyed and at exit. The file is valid JSON after every
//   write; a later write error is reported once on stderr and stops the
//   timeline, never the training.
// - Backward and its buckets come from the module's statistics
//   (IterationStats) and are written at the next forward or when the module
//   is destroyed; backward passes under no_sync are not shown.
// - Timestamps are µs of the host's monotonic clock: the files of ranks on
//   one host line up when loaded together (concatenate their arrays, or
//   scripts/timeline_plot.py draws them together).
#pragma once

#include <chrono>
#include <memory>
#include <string>

namespace ddp {

namespace detail {
class RankTimeline;
}

// Marks the time from its construction to its destruction (or end()) as a
// span named `name` on the "compute" row of the timeline of the
// DistributedDataParallel module last constructed or run (forward) on this
// thread. Without DDP_TIMELINE, or before any module on this thread, it
// does nothing (a thread-local check).
class TimelineSpan {
 public:
  explicit TimelineSpan(std::string name);
  ~TimelineSpan();
  TimelineSpan(const TimelineSpan&) = delete;
  TimelineSpan& operator=(const TimelineSpan&) = delete;
  // Ends the span now (the destructor then does nothing).
  void end();

 private:
  std::shared_ptr<detail::RankTimeline> timeline_;
  std::string name_;
  std::chrono::steady_clock::time_point start_;
};

// Whether this thread's TimelineSpans are recorded (see above).
bool timeline_active();

}  // namespace ddp
