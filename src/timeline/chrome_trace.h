// The Chrome trace encoder (Trace Event Format, opened by chrome://tracing
// and ui.perfetto.dev) behind DDP_TIMELINE's files (ddp/timeline.h): how
// intervals become trace events on rows (ChromeTraceEncoder). Private; the
// bench's traces use it too (bench/timeline.h, through ddp::internal). No
// libtorch and nothing of DDP here, so that any layer may draw on a timeline;
// nothing here is thread-safe (one encoder and its TraceText per thread, or
// a lock around them).
#pragma once

#include <cstdint>
#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace ddp {

using TraceClock = std::chrono::steady_clock;

// One interval on a lane of a rank's trace.
struct TraceSpan {
  std::string lane;  // "compute" (the training thread) or "comm" (a collective)
  std::string name;
  TraceClock::time_point start, end;
  bool blocking = false;  // comm only: the training thread waited in it
};

// "1.5K", "24.0M": a bucket's size in its span's name.
std::string trace_bytes(int64_t bytes);

// Microseconds of `t` on the steady clock (the same clock in every process of
// a host, so ranks' files line up when shown together).
double trace_micros(TraceClock::time_point t);

// A JSON array of trace events under construction: objects separated by
// commas. `text` may be handed on (written out) and cleared between
// appends: `any` remembers that a comma is due.
struct TraceText {
  std::string text;
  bool any = false;
  void append(const std::string& object);
  // The text to append one object to, its comma already there.
  std::string& next();
};

// The events of one process (pid = rank): "compute" spans on tid 0; every
// other lane on rows of its own (tids 1, 2, ...), a new row when a span
// starts before the previous one on every row has ended, so that
// overlapping collectives never share a row; "X" complete events with ts
// and dur in µs, args {"blocking": ...} on non-compute spans plus the
// caller's, and process and thread names as "M" metadata events.
class ChromeTraceEncoder {
 public:
  ChromeTraceEncoder(int pid, std::string process_name);
  // process_name, and the compute row's name and order: once, first.
  void metadata(TraceText& out) const;
  // `extra_args`: JSON members added to the event's args, e.g.
  // "\"iteration\":3" (empty: none).
  void span(TraceText& out, const std::string& lane, const std::string& name, double start_us,
            double end_us, bool blocking, const std::string& extra_args = "");

 private:
  struct Row {
    int tid;
    double end_us;
  };
  void thread_metadata(TraceText& out, int tid, const std::string& name) const;

  int pid_;
  std::string process_name_;
  std::map<std::string, std::vector<Row>> rows_;  // per non-compute lane
  int next_tid_ = 1;
};

// `s` as a JSON string literal, quotes included.
std::string json_string(const std::string& s);
void append_json_string(std::string& out, const std::string& s);

}  // namespace ddp
