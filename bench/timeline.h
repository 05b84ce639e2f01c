// What happened when inside training iterations (micro-batches), as
// intervals on two lanes, and the blog's summary of it
// (the blog named in bench/variants.h: compute %, non-compute %, idle %,
// overlap %, communication overhead %, allreduce calls and ms). No libtorch
// here, like bench_util.
//
//   Timeline timeline;
//   timeline.begin_iteration();
//   timeline.add("compute", "forward", t0, t1);
//   timeline.add("comm", "allreduce bucket 0", launched, work->completion_time());
//   timeline.add("comm", "allreduce fc.weight", call, ret, /*blocking=*/true);
//   timeline.end_iteration();
//   TimelineMetrics m = timeline_metrics(timeline.iterations());
//
// Lanes
//   "compute"  work of the training thread: forward (with the loss),
//              backward, optimizer step, zero_grad, copies and divisions of
//              gradients. An interval may contain waits that are recorded as
//              blocking communication (a blocking allreduce in a backward
//              hook lies inside "backward").
//   "comm"     one collective, from its launch (the call) to its completion:
//              for an asynchronous one the Work's completion time (or the
//              timestamp DDP's statistics give), for a blocking one the
//              call's return. `blocking` marks a collective the training
//              thread waited in (call to return): no compute happens then.
//
// Definitions (the Python twin for PyTorch's row must match these exactly).
// Per iteration k, of duration T_k (begin_iteration to end_iteration), every
// event clipped to [0, T_k], times relative to the iteration's start; |X| is
// the total length of a set of intervals X (a union counts overlapping time
// once):
//   C  = union of the "compute" intervals
//   B  = union of the "comm" intervals with blocking = true
//   M  = union of all "comm" intervals (blocking or not)
//   C* = C minus B                      (the training thread computing)
// Summed over the iterations (Σ over k of each quantity):
//   total          = Σ T_k
//   compute        = Σ |C*|
//   non_compute    = Σ |M minus C*|     (communication with no compute beside it)
//   idle           = total − compute − non_compute
//                  = Σ |[0, T_k] minus (C ∪ M)|
//   overlap        = Σ |C* ∩ M|         (communication hidden behind compute)
//   comm           = Σ |M|
//   compute %      = 100 · compute / total
//   non_compute %  = 100 · non_compute / total
//   idle %         = 100 · idle / total        (the three add up to 100)
//   overlap %      = 100 · overlap / comm      (0 when comm = 0)
//   comm_overhead % = 100 · comm / total
//   allreduce calls per iteration = (number of "comm" events whose name
//                    starts with "allreduce") / number of iterations
//   allreduce ms per iteration    = (sum of those events' durations
//                    end − start, unclipped, overlapping ones each counted)
//                    / 1000 / number of iterations. An asynchronous
//                    collective's duration includes its wait in the
//                    group's queue behind earlier ones (launch to
//                    completion), so many small async ones add up to more
//                    than the wall time they cover.
// Other collectives (e.g. DDP's "broadcast buffers") count in M but not in
// the allreduce columns.
#pragma once

#include "bench_util.h"

#include <ddp/statistics.h>

#include <ddp/chrome_trace.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace ddp_bench {

struct TimelineEvent {
  std::string lane;                 // "compute" or "comm"
  std::string name;                 // e.g. "forward", "allreduce bucket 0 (24.0M)"
  double start_us = 0, end_us = 0;  // relative to the iteration's start
  bool blocking = false;            // comm only: the training thread waited
};

struct TimelineIteration {
  int64_t iteration = 0;  // 0, 1, ... in recording order
  Clock::time_point start;
  double duration_us = 0;
  std::vector<TimelineEvent> events;  // sorted by start
};

// Records iterations. add() may be called from any thread (e.g. a Work's
// completion callback); events added while no iteration is open are dropped,
// so untimed iterations cost nothing. An event may start before its
// iteration or end after it: it is kept as given and clipped only by the
// metrics.
class Timeline {
 public:
  void begin_iteration();  // now; closes an open one first
  void add(const std::string& lane, const std::string& name, Clock::time_point start,
           Clock::time_point end, bool blocking = false);
  void end_iteration();  // now
  bool recording() const;
  // The finished iterations.
  std::vector<TimelineIteration> iterations() const;
  // [{"iteration": k, "duration_us": T, "events": [{"lane", "name",
  //   "start_us", "end_us", "blocking"}, ...]}, ...]
  Json to_json() const;
  void clear();

 private:
  mutable std::mutex mutex_;
  bool open_ = false;                    // guarded by mutex_
  TimelineIteration current_;            // guarded by mutex_
  std::vector<TimelineIteration> done_;  // guarded by mutex_
};

struct TimelineMetrics {
  int64_t iterations = 0;
  double total_us = 0, compute_us = 0, non_compute_us = 0, idle_us = 0, overlap_us = 0, comm_us = 0;
  double compute_pct = 0, non_compute_pct = 0, idle_pct = 0, overlap_pct = 0, comm_overhead_pct = 0;
  double allreduce_calls_per_iteration = 0, allreduce_ms_per_iteration = 0;
};

// The definitions above.
TimelineMetrics timeline_metrics(const std::vector<TimelineIteration>& iterations);
// {"compute_pct", "non_compute_pct", "idle_pct", "overlap_pct",
//  "comm_overhead_pct", "allreduce_calls_per_iteration",
//  "allreduce_ms_per_iteration", "iterations", "total_ms", "compute_ms",
//  "non_compute_ms", "idle_ms", "overlap_ms", "comm_ms"}
Json to_json(const TimelineMetrics& m);

// A Chrome trace (Trace Event Format; chrome://tracing, ui.perfetto.dev) of
// one iteration per rank, as JSON text {"traceEvents": [...],
// "displayTimeUnit": "ms", "otherData": {"title": ...}}; the events are the
// library's (ddp/chrome_trace.h, also DDP_TIMELINE's): pid = rank,
// one tid per lane ("compute" = 0; "comm" events on tids 1, 2, ... so that
// overlapping collectives never share a row), "X" complete events with
// ts/dur in µs shifted by the rank's offset_us, args {"blocking": ...} on
// comm events, and process/thread names as metadata.
struct RankIteration {
  int rank = 0;
  double offset_us = 0;  // added to every event's start
  TimelineIteration iteration;
};
std::string chrome_trace(const std::vector<RankIteration>& ranks, const std::string& title);

// DDP's part of a synchronizing iteration, from its statistics
// (ddp::IterationStats: backward_start, backward_compute_ms, bucket_timings),
// as DDP_TIMELINE shows it (ddp::backward_spans): "backward" compute
// from backward's start to the last gradient hook, one "allreduce bucket K
// (size)" per bucket from launch to completion, and from the last completion
// to `backward_returned` "finalize (copy back)" compute (the averaged
// gradients written back; it includes the small status allreduce). The same
// for ddp_bench train and variants.
void add_ddp_backward(Timeline& timeline, const ddp::IterationStats& stats,
                      Clock::time_point backward_returned);

// One iteration as plain text and back (to gather ranks' iterations over a
// process group as bytes). Names must not contain tabs or newlines.
std::string serialize(const TimelineIteration& iteration);
TimelineIteration deserialize(const std::string& text);

// Interval arithmetic on sorted, disjoint [start, end) lists.
namespace intervals {
using Interval = std::pair<double, double>;
using Set = std::vector<Interval>;
Set make_union(std::vector<Interval> v);  // any order, overlaps merged, empty ones dropped
Set difference(const Set& a, const Set& b);
Set intersection(const Set& a, const Set& b);
Set clip(const Set& a, double lo, double hi);
double measure(const Set& a);
}  // namespace intervals

}  // namespace ddp_bench
