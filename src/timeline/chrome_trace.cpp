#include "timeline/chrome_trace.h"

#include <algorithm>
#include <cstdio>

namespace ddp::detail {
namespace {

TraceClock::time_point plus_ms(TraceClock::time_point t, double ms) {
  return t + std::chrono::duration_cast<TraceClock::duration>(
                 std::chrono::duration<double, std::milli>(ms));
}

std::string micros_text(double us) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.3f", us);
  return buf;
}

}  // namespace

std::string trace_bytes(int64_t bytes) {
  const char* units[] = {"G", "M", "K"};
  const int shifts[] = {30, 20, 10};
  for (int i = 0; i < 3; ++i) {
    const int64_t unit = int64_t{1} << shifts[i];
    if (bytes >= unit && bytes % unit == 0) return std::to_string(bytes / unit) + units[i];
  }
  return std::to_string(bytes);
}

double trace_micros(TraceClock::time_point t) {
  return std::chrono::duration<double, std::micro>(t.time_since_epoch()).count();
}

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
    out.push_back({"comm", comm + " bucket " + std::to_string(b) + " (" + trace_bytes(t.bytes) + ")",
                   at(t.launch_ms), at(t.done_ms)});
    last_done = std::max(last_done, at(t.done_ms));
  }
  if (backward_returned > last_done) {
    out.push_back({"compute", "finalize (copy back)", last_done, backward_returned});
  }
  return out;
}

void TraceText::append(const std::string& object) {
  if (any) text += ",\n";
  text += object;
  any = true;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

ChromeTraceEncoder::ChromeTraceEncoder(int pid, std::string process_name)
    : pid_(pid), process_name_(std::move(process_name)) {}

void ChromeTraceEncoder::thread_metadata(TraceText& out, int tid, const std::string& name) const {
  const std::string ids = ",\"pid\":" + std::to_string(pid_) + ",\"tid\":" + std::to_string(tid);
  out.append("{\"name\":\"thread_name\",\"ph\":\"M\"" + ids + ",\"args\":{\"name\":" +
             json_string(name) + "}}");
  out.append("{\"name\":\"thread_sort_index\",\"ph\":\"M\"" + ids +
             ",\"args\":{\"sort_index\":" + std::to_string(tid) + "}}");
}

void ChromeTraceEncoder::metadata(TraceText& out) const {
  out.append("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + std::to_string(pid_) +
             ",\"args\":{\"name\":" + json_string(process_name_) + "}}");
  thread_metadata(out, 0, "compute");
}

void ChromeTraceEncoder::span(TraceText& out, const std::string& lane, const std::string& name,
                              double start_us, double end_us, bool blocking,
                              const std::string& extra_args) {
  int tid = 0;
  std::string args;
  if (lane != "compute") {
    auto& rows = rows_[lane];
    auto row = std::find_if(rows.begin(), rows.end(), [&](const Row& r) { return r.end_us <= start_us; });
    if (row == rows.end()) {
      rows.push_back({next_tid_++, end_us});
      row = rows.end() - 1;
      const size_t n = rows.size();
      thread_metadata(out, row->tid, n == 1 ? lane : lane + " " + std::to_string(n));
    }
    row->end_us = end_us;
    tid = row->tid;
    args = std::string("\"blocking\":") + (blocking ? "true" : "false");
  }
  if (!extra_args.empty()) args += (args.empty() ? "" : ",") + extra_args;
  std::string event = "{\"name\":" + json_string(name) + ",\"cat\":" + json_string(lane) +
                      ",\"ph\":\"X\",\"pid\":" + std::to_string(pid_) + ",\"tid\":" +
                      std::to_string(tid) + ",\"ts\":" + micros_text(start_us) +
                      ",\"dur\":" + micros_text(std::max(0.0, end_us - start_us));
  if (!args.empty()) event += ",\"args\":{" + args + "}";
  out.append(event + "}");
}

}  // namespace ddp::detail
