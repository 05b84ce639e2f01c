#include "timeline.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>

namespace ddp_bench {

// --- intervals ----------------------------------------------------------------

namespace intervals {

Set make_union(std::vector<Interval> v) {
  v.erase(
      std::remove_if(v.begin(), v.end(), [](const Interval& i) { return !(i.first < i.second); }),
      v.end());
  std::sort(v.begin(), v.end());
  Set out;
  for (const auto& i : v) {
    if (!out.empty() && i.first <= out.back().second) {
      out.back().second = std::max(out.back().second, i.second);
    } else {
      out.push_back(i);
    }
  }
  return out;
}

Set difference(const Set& a, const Set& b) {
  Set out;
  size_t j = 0;
  for (auto [lo, hi] : a) {
    while (j < b.size() && b[j].second <= lo) ++j;  // b's intervals wholly before this one
    double cur = lo;
    for (size_t k = j; k < b.size() && b[k].first < hi; ++k) {
      if (b[k].first > cur) out.push_back({cur, b[k].first});
      cur = std::max(cur, b[k].second);
      if (cur >= hi) break;
    }
    if (cur < hi) out.push_back({cur, hi});
  }
  return out;
}

Set intersection(const Set& a, const Set& b) {
  Set out;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const double lo = std::max(a[i].first, b[j].first);
    const double hi = std::min(a[i].second, b[j].second);
    if (lo < hi) out.push_back({lo, hi});
    (a[i].second < b[j].second) ? ++i : ++j;
  }
  return out;
}

Set clip(const Set& a, double lo, double hi) { return intersection(a, Set{{lo, hi}}); }

double measure(const Set& a) {
  double m = 0;
  for (const auto& i : a) m += i.second - i.first;
  return m;
}

}  // namespace intervals

// --- recording ------------------------------------------------------------------

void Timeline::begin_iteration() {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto now = Clock::now();
  if (open_) {
    current_.duration_us = micros_between(current_.start, now);
    done_.push_back(std::move(current_));
  }
  current_ = TimelineIteration{};
  current_.iteration = static_cast<int64_t>(done_.size());
  current_.start = now;
  open_ = true;
}

void Timeline::add(const std::string& lane, const std::string& name, Clock::time_point start,
                   Clock::time_point end, bool blocking) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!open_) return;
  current_.events.push_back({lane, name, micros_between(current_.start, start),
                             micros_between(current_.start, end), blocking});
}

void Timeline::end_iteration() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!open_) return;
  current_.duration_us = micros_between(current_.start, Clock::now());
  std::stable_sort(
      current_.events.begin(), current_.events.end(),
      [](const TimelineEvent& a, const TimelineEvent& b) { return a.start_us < b.start_us; });
  done_.push_back(std::move(current_));
  current_ = TimelineIteration{};
  open_ = false;
}

bool Timeline::recording() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return open_;
}

std::vector<TimelineIteration> Timeline::iterations() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

void Timeline::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  done_.clear();
  current_ = TimelineIteration{};
  open_ = false;
}

Json Timeline::to_json() const {
  Json out = Json::array();
  for (const auto& it : iterations()) {
    Json events = Json::array();
    for (const auto& e : it.events) {
      Json j = Json::object();
      j.set("lane", e.lane).set("name", e.name).set("start_us", e.start_us);
      j.set("end_us", e.end_us).set("blocking", e.blocking);
      events.push(std::move(j));
    }
    Json j = Json::object();
    j.set("iteration", it.iteration).set("duration_us", it.duration_us);
    j.set("events", std::move(events));
    out.push(std::move(j));
  }
  return out;
}

// --- metrics (definitions in timeline.h) ------------------------------------------

TimelineMetrics timeline_metrics(const std::vector<TimelineIteration>& iterations) {
  using namespace intervals;
  TimelineMetrics m;
  int64_t calls = 0;
  double call_us = 0;
  for (const auto& it : iterations) {
    std::vector<Interval> compute, blocking, comm;
    for (const auto& e : it.events) {
      const Interval i{e.start_us, e.end_us};
      if (e.lane == "compute") {
        compute.push_back(i);
      } else if (e.lane == "comm") {
        comm.push_back(i);
        if (e.blocking) blocking.push_back(i);
        if (e.name.rfind("allreduce", 0) == 0) {
          ++calls;
          call_us += e.end_us - e.start_us;
        }
      }
    }
    const double t = it.duration_us;
    const Set c = clip(make_union(compute), 0, t);
    const Set b = clip(make_union(blocking), 0, t);
    const Set mset = clip(make_union(comm), 0, t);
    const Set cstar = difference(c, b);
    const double busy = measure(cstar), non_compute = measure(difference(mset, cstar));
    m.total_us += t;
    m.compute_us += busy;
    m.non_compute_us += non_compute;
    m.idle_us += t - busy - non_compute;
    m.overlap_us += measure(intersection(cstar, mset));
    m.comm_us += measure(mset);
  }
  m.iterations = static_cast<int64_t>(iterations.size());
  if (m.total_us > 0) {
    m.compute_pct = 100 * m.compute_us / m.total_us;
    m.non_compute_pct = 100 * m.non_compute_us / m.total_us;
    m.idle_pct = 100 * m.idle_us / m.total_us;
    m.comm_overhead_pct = 100 * m.comm_us / m.total_us;
  }
  if (m.comm_us > 0) m.overlap_pct = 100 * m.overlap_us / m.comm_us;
  if (m.iterations > 0) {
    m.allreduce_calls_per_iteration = static_cast<double>(calls) / m.iterations;
    m.allreduce_ms_per_iteration = call_us / 1000 / m.iterations;
  }
  return m;
}

Json to_json(const TimelineMetrics& m) {
  Json j = Json::object();
  j.set("compute_pct", m.compute_pct).set("non_compute_pct", m.non_compute_pct);
  j.set("idle_pct", m.idle_pct).set("overlap_pct", m.overlap_pct);
  j.set("comm_overhead_pct", m.comm_overhead_pct);
  j.set("allreduce_calls_per_iteration", m.allreduce_calls_per_iteration);
  j.set("allreduce_ms_per_iteration", m.allreduce_ms_per_iteration);
  j.set("iterations", m.iterations).set("total_ms", m.total_us / 1000);
  j.set("compute_ms", m.compute_us / 1000).set("non_compute_ms", m.non_compute_us / 1000);
  j.set("idle_ms", m.idle_us / 1000).set("overlap_ms", m.overlap_us / 1000);
  j.set("comm_ms", m.comm_us / 1000);
  return j;
}

// --- Chrome trace (the library's encoder: ddp/chrome_trace.h) ------------

std::string chrome_trace(const std::vector<RankIteration>& ranks, const std::string& title) {
  ddp::TraceText events;
  for (const auto& r : ranks) {
    ddp::ChromeTraceEncoder encoder(r.rank, "rank " + std::to_string(r.rank));
    encoder.metadata(events);
    for (const auto& e : r.iteration.events) {
      encoder.span(events, e.lane, e.name, e.start_us + r.offset_us, e.end_us + r.offset_us,
                   e.blocking);
    }
  }
  return "{\"traceEvents\": [\n" + events.text + "\n],\n\"displayTimeUnit\": \"ms\",\n" +
         "\"otherData\": {\"title\": " + ddp::json_string(title) + "}}\n";
}

// --- text form ------------------------------------------------------------------

std::string serialize(const TimelineIteration& it) {
  std::ostringstream out;
  out.precision(15);
  out << it.iteration << '\t' << it.duration_us << '\n';
  for (const auto& e : it.events) {
    out << e.lane << '\t' << e.name << '\t' << e.start_us << '\t' << e.end_us << '\t'
        << (e.blocking ? 1 : 0) << '\n';
  }
  return out.str();
}

TimelineIteration deserialize(const std::string& text) {
  TimelineIteration it;
  std::istringstream in(text);
  std::string line;
  if (!std::getline(in, line)) return it;
  {
    std::istringstream head(line);
    head >> it.iteration >> it.duration_us;
  }
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::vector<std::string> f;
    std::string field;
    std::istringstream fields(line);
    while (std::getline(fields, field, '\t')) f.push_back(field);
    if (f.size() != 5) throw std::runtime_error("timeline: malformed event line '" + line + "'");
    it.events.push_back({f[0], f[1], std::stod(f[2]), std::stod(f[3]), f[4] == "1"});
  }
  return it;
}

void add_ddp_backward(Timeline& timeline, const ddp::IterationStats& stats,
                      Clock::time_point backward_returned) {
  for (const auto& span : ddp::backward_spans(stats, backward_returned)) {
    timeline.add(span.lane, span.name, span.start, span.end, span.blocking);
  }
}

}  // namespace ddp_bench
