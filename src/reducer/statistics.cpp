#include <ddp/statistics.h>

#include "reducer/iteration_stats.h"

#include <algorithm>
#include <cstdio>

namespace ddp {

std::string IterationStats::summary() const {
  char head[256];
  std::snprintf(head, sizeof(head),
                "iteration %lld: forward %.2f ms, backward compute %.2f ms, communication %.2f ms "
                "(%.2f ms overlapped), finalize %.2f ms, %zu buckets",
                static_cast<long long>(iteration), forward_ms, backward_compute_ms,
                communication_ms, overlapped_ms, finalize_ms, bucket_count());
  std::string out = head;
  if (!bucket_bytes.empty()) {
    out += " [";
    for (size_t b = 0; b < bucket_bytes.size(); ++b) {
      char size[32];
      std::snprintf(size, sizeof(size), "%s%.2f MB", b ? ", " : "", bucket_bytes[b] / 1e6);
      out += size;
    }
    out += "]";
  }
  if (buckets_rebuilt) out += ", buckets rebuilt";
  if (bucket_tuning.phase != BucketTuning::Phase::kOff) {
    char tuning[96];
    const double mib = bucket_tuning.cap_bytes / 1048576.0;
    if (bucket_tuning.phase == BucketTuning::Phase::kTrial) {
      std::snprintf(tuning, sizeof(tuning), ", autotune: trying %g MiB", mib);
    } else {
      std::snprintf(tuning, sizeof(tuning),
                    ", autotune: settled on %g MiB after %lld trial iterations", mib,
                    static_cast<long long>(bucket_tuning.trial_iterations));
    }
    out += tuning;
  }
  out += ", " + std::to_string(unused_parameters) + " unused parameters";
  for (size_t i = 0; i < unused_parameter_names.size(); ++i) {
    out += (i ? ", " : ": ") + unused_parameter_names[i];
  }
  if (dropped_parameters > 0) out += ", " + std::to_string(dropped_parameters) + " hinted unused";
  if (skipped_parameters > 0) {
    out += ", " + std::to_string(skipped_parameters) + " unused and not sent";
  }
  return out;
}

}  // namespace ddp

namespace ddp::detail {
namespace {

double ms(Iteration::Clock::time_point from, Iteration::Clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

}  // namespace

void record_timings(IterationStats& s, const Iteration& it, const BucketSet& buckets,
                    Iteration::Clock::time_point compute_end,
                    Iteration::Clock::time_point comm_end) {
  const auto now = Iteration::Clock::now();
  const auto backward_start = it.backward_start.value_or(Iteration::Clock::time_point{});
  s.backward_compute_ms = it.backward_start ? ms(backward_start, compute_end) : 0;
  s.finalize_ms = ms(compute_end, now);
  if (it.comm_start) {
    s.communication_ms = ms(*it.comm_start, comm_end);
    s.overlapped_ms = std::max(0.0, ms(*it.comm_start, std::min(comm_end, compute_end)));
  }
  s.backward_start = backward_start;
  for (const auto& b : buckets.all()) {
    const int64_t bytes = b.live_numel * b.flat.element_size();  // sent
    s.bucket_bytes.push_back(bytes);
    s.bucket_timings.push_back({bytes, ms(backward_start, b.launched), ms(backward_start, b.done)});
  }
}

}  // namespace ddp::detail
