// Bucket autotuning (ReducerOptions::autotune_caps_bytes; the schedule and
// the decision are reducer/bucket_tuner.h's). The first synchronized
// iteration runs on bucket_cap_bytes and is not measured (it pays for
// first-touch memory and the gradient-order rebuild); the second creates
// the tuner and runs its first trial; from the third on, each iteration's
// start all-reduces the time since the previous one's start
// (MAX: the slowest rank's) with whether that iteration failed on any rank,
// and the tuner names the next iteration's bucket size. Once it settles,
// no collective is added.
#include "reducer/reducer_impl.h"

#include <ddp/bucket.h>
#include <ddp/errors.h>

#include <ATen/ATen.h>

#include <algorithm>

namespace ddp {
namespace {

// Another size replaces bucket_cap_bytes only if faster by more than this.
constexpr double kMargin = 0.02;

// The sizes to try: autotune_caps_bytes and bucket_cap_bytes, sorted, once each.
std::vector<int64_t> candidate_caps(const ReducerOptions& options) {
  std::vector<int64_t> caps = options.autotune_caps_bytes();
  caps.push_back(options.bucket_cap_bytes());
  std::sort(caps.begin(), caps.end());
  caps.erase(std::unique(caps.begin(), caps.end()), caps.end());
  return caps;
}

}  // namespace

void Reducer::Impl::check_autotune_options() const {
  if (!autotuning()) return;
  const ErrorContext context = group_->error_context("ReducerOptions");
  const std::vector<int64_t> caps = candidate_caps(options_);
  if (caps.front() < 0) {
    throw InvalidArgument(context,
                          "bucket sizes must be >= 0, got " + std::to_string(caps.front()));
  }
  if (options_.autotune_iterations() < 2 * static_cast<int>(caps.size())) {
    throw InvalidArgument(context, "autotune_iterations " +
                                       std::to_string(options_.autotune_iterations()) +
                                       " cannot try " + std::to_string(caps.size()) +
                                       " bucket sizes (two iterations each); allow at least " +
                                       std::to_string(2 * caps.size()));
  }
}

int64_t Reducer::Impl::next_bucket_cap(const std::vector<size_t>& sequence) {
  if (!last_begin_) return options_.bucket_cap_bytes();  // the first iteration
  if (!tuner_) {
    tuner_.emplace(distinct_caps(sequence), options_.bucket_cap_bytes(),
                   options_.autotune_iterations(), kMargin);
    return tuner_->next(std::nullopt);
  }
  if (tuner_->settled()) return tuner_->chosen();
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - *last_begin_).count();
  at::Tensor slowest = at::tensor({ms, last_ended_ ? 0.0 : 1.0}, at::kDouble);
  group_->allreduce(slowest, ReduceOp::MAX)->wait();
  const double* got = slowest.data_ptr<double>();
  return tuner_->next(got[1] == 0 ? std::optional<double>(got[0]) : std::nullopt);
}

// The candidate sizes that cut `sequence` differently, smallest first; of
// sizes that cut it alike, bucket_cap_bytes if among them, else the
// smallest.
std::vector<int64_t> Reducer::Impl::distinct_caps(const std::vector<size_t>& sequence) const {
  std::vector<int64_t> out;
  std::vector<std::vector<std::vector<size_t>>> layouts;
  for (int64_t cap : candidate_caps(options_)) {
    auto layout = assign_buckets(as_constructed(), sequence, bucket_caps(cap));
    auto same = std::find(layouts.begin(), layouts.end(), layout);
    if (same == layouts.end()) {
      out.push_back(cap);
      layouts.push_back(std::move(layout));
    } else if (cap == options_.bucket_cap_bytes()) {
      out[same - layouts.begin()] = cap;
    }
  }
  return out;
}

void Reducer::Impl::record_bucket_tuning() {
  BucketTuning& t = stats_pending_.bucket_tuning;
  t.cap_bytes = bucket_cap_;
  if (!tuner_) {
    t.phase = BucketTuning::Phase::kTrial;  // the first iteration, before any trial
    return;
  }
  t.phase = tuner_->settled() ? BucketTuning::Phase::kSettled : BucketTuning::Phase::kTrial;
  for (const auto& s : tuner_->samples()) t.samples.emplace_back(s.cap_bytes, s.ms);
  t.trial_iterations = tuner_->trial_iterations();
}

}  // namespace ddp
