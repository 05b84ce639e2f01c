#include "timeline/chrome_trace.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace ddp {
namespace {

// `us` with three decimals (ns), as integers: printf's %f costs more than
// the rest of a span together, and this runs for every span.
void append_micros(std::string& out, double us) {
  long long ns = std::llround(us * 1000);
  if (ns < 0) {
    out += '-';
    ns = -ns;
  }
  char buf[32];
  auto end = std::to_chars(buf, buf + sizeof buf, ns / 1000).ptr;
  const int frac = static_cast<int>(ns % 1000);
  *end++ = '.';
  *end++ = static_cast<char>('0' + frac / 100);
  *end++ = static_cast<char>('0' + frac / 10 % 10);
  *end++ = static_cast<char>('0' + frac % 10);
  out.append(buf, end);
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

std::string& TraceText::next() {
  if (any) text += ",\n";
  any = true;
  return text;
}

void TraceText::append(const std::string& object) { next() += object; }

void append_json_string(std::string& out, const std::string& s) {
  out += '"';
  for (const char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
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
  out += '"';
}

std::string json_string(const std::string& s) {
  std::string out;
  append_json_string(out, s);
  return out;
}

ChromeTraceEncoder::ChromeTraceEncoder(int pid, std::string process_name)
    : pid_(pid), process_name_(std::move(process_name)) {}

void ChromeTraceEncoder::thread_metadata(TraceText& out, int tid, const std::string& name) const {
  const std::string ids = ",\"pid\":" + std::to_string(pid_) + ",\"tid\":" + std::to_string(tid);
  out.append("{\"name\":\"thread_name\",\"ph\":\"M\"" + ids +
             ",\"args\":{\"name\":" + json_string(name) + "}}");
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
  if (lane != "compute") {
    auto& rows = rows_[lane];
    auto row =
        std::find_if(rows.begin(), rows.end(), [&](const Row& r) { return r.end_us <= start_us; });
    if (row == rows.end()) {
      rows.push_back({next_tid_++, end_us});
      row = rows.end() - 1;
      const size_t n = rows.size();
      thread_metadata(out, row->tid, n == 1 ? lane : lane + " " + std::to_string(n));
    }
    row->end_us = end_us;
    tid = row->tid;
  }
  // Written in place: this runs on the training thread for every span.
  std::string& t = out.next();
  t += "{\"name\":";
  append_json_string(t, name);
  t += ",\"cat\":";
  append_json_string(t, lane);
  t += ",\"ph\":\"X\",\"pid\":";
  t += std::to_string(pid_);
  t += ",\"tid\":";
  t += std::to_string(tid);
  t += ",\"ts\":";
  append_micros(t, start_us);
  t += ",\"dur\":";
  append_micros(t, std::max(0.0, end_us - start_us));
  const bool comm = tid != 0;
  if (comm || !extra_args.empty()) {
    t += ",\"args\":{";
    if (comm) t += blocking ? "\"blocking\":true" : "\"blocking\":false";
    if (comm && !extra_args.empty()) t += ',';
    t += extra_args;
    t += '}';
  }
  t += '}';
}

}  // namespace ddp
