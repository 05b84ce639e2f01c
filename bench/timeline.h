// Timelines of training iterations in the library's format: every recorded
// interval becomes a Chrome trace event of src/timeline/chrome_trace.h (the events
// DDP_TIMELINE writes: "X" events with cat = lane, ts/dur in µs of the
// steady clock, args {"blocking", "iteration"}), and each iteration one
// more event on the "iteration" lane, from begin_iteration to
// end_iteration. A result row keeps them as its "timeline" (a JSON array
// of trace events, itself a Chrome trace);
// experiments/paper/eval/timeline.py defines the blog's columns over them
// and cuts one iteration out as a trace.
//
//   Timeline timeline;
//   timeline.begin_iteration();
//   timeline.add("compute", "forward", t0, t1);
//   timeline.add("comm", "allreduce fc.weight", call, ret, /*blocking=*/true);
//   timeline.add_ddp_backward(ddp_model->stats(), backward_returned);
//   timeline.end_iteration();
//   row.set("timeline", Json::raw(timeline.trace_events()));
//
// Lanes: "compute" (the training thread's work; an interval may contain a
// blocking collective) and "comm" (one collective from launch to
// completion; `blocking`: the training thread waited in it).
#pragma once

#include "bench_util.h"

#include "module/module_timeline.h"  // backward_spans
#include "timeline/chrome_trace.h"
#include <ddp/statistics.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace ddp_bench {

// add() may be called from any thread (a Work's completion callback);
// events added while no iteration is open are dropped, so untimed
// iterations cost nothing.
class Timeline {
 public:
  void begin_iteration();  // now; closes an open one first
  void add(const std::string& lane, const std::string& name, Clock::time_point start,
           Clock::time_point end, bool blocking = false);
  // DDP's part of a synchronizing iteration, as DDP_TIMELINE shows it
  // (ddp::backward_spans of its statistics).
  void add_ddp_backward(const ddp::IterationStats& stats, Clock::time_point backward_returned);
  void end_iteration();  // now
  // The finished iterations' events, as a JSON array (rank 0's rows).
  std::string trace_events() const;

 private:
  void close(Clock::time_point end);  // with mutex_ held

  mutable std::mutex mutex_;
  bool open_ = false;                             // guarded by mutex_
  int64_t iterations_ = 0;                        // guarded by mutex_
  Clock::time_point start_;                       // guarded by mutex_
  std::vector<ddp::TraceSpan> spans_;             // guarded by mutex_: the open iteration's
  ddp::ChromeTraceEncoder encoder_{0, "rank 0"};  // guarded by mutex_
  ddp::TraceText events_;                         // guarded by mutex_
};

}  // namespace ddp_bench
