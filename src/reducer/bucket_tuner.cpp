#include "reducer/bucket_tuner.h"

#include <ddp/errors.h>

#include <algorithm>
#include <string>

namespace ddp::detail {

BucketTuner::BucketTuner(std::vector<int64_t> caps, int64_t preferred, int budget, double margin)
    : preferred_(preferred), budget_(budget), margin_(margin) {
  if (std::find(caps.begin(), caps.end(), preferred) == caps.end()) {
    throw InvalidArgument(ErrorContext{-1, 0, "", "BucketTuner", {}},
                          "the preferred cap " + std::to_string(preferred) + " is not a candidate");
  }
  if (budget < 2 * static_cast<int>(caps.size())) {
    throw InvalidArgument(ErrorContext{-1, 0, "", "BucketTuner", {}},
                          "a budget of " + std::to_string(budget) +
                              " trial iterations cannot try " + std::to_string(caps.size()) +
                              " caps (two iterations each)");
  }
  if (caps.size() == 1) {
    settled_ = true;
    chosen_ = preferred;
    return;
  }
  plan_round(caps);
}

// Each cap settles for an iteration, then is measured; the one that ran
// last (if still in) goes first and is measured at once: its buckets are
// already in place.
void BucketTuner::plan_round(std::vector<int64_t> caps) {
  steps_.clear();
  std::optional<int64_t> in_place;
  auto last = std::find(caps.begin(), caps.end(), last_cap_);
  if (started_ && last != caps.end()) {
    std::rotate(caps.begin(), last, last + 1);
    in_place = caps.front();
    steps_.push_back({*in_place, true});
  }
  for (int64_t cap : caps) {
    if (cap == in_place) continue;
    steps_.push_back({cap, false});
    steps_.push_back({cap, true});
  }
  round_caps_ = std::move(caps);
  at_ = 0;
}

int64_t BucketTuner::next(std::optional<double> previous_ms) {
  if (settled_) return chosen_;
  if (!started_) {
    started_ = true;
  } else {
    const Step& ran = steps_[at_];
    if (ran.measured && !previous_ms && repeated_ < budget_) {
      ++repeated_;  // run it again, unless the budget is out
    } else {
      if (ran.measured && previous_ms) samples_.push_back({ran.cap_bytes, *previous_ms});
      ++at_;
    }
    if (spent_ >= budget_) {
      settle();
      return chosen_;
    }
    if (at_ == steps_.size()) {
      const std::vector<int64_t> next_round = survivors();
      if (next_round.size() < 2) {
        settle();
        return chosen_;
      }
      plan_round(next_round);
    }
  }
  ++spent_;
  last_cap_ = steps_[at_].cap_bytes;
  return last_cap_;
}

// The faster half of this round's caps (rounded up, at least two) with the
// preferred one among them, as many as the budget left can try (each two
// iterations, one less for the cap already in place); fewer than two: no
// round worth running.
std::vector<int64_t> BucketTuner::survivors() const {
  std::vector<int64_t> ranked;
  for (int64_t cap : round_caps_) {
    if (best_ms(cap)) ranked.push_back(cap);
  }
  std::stable_sort(ranked.begin(), ranked.end(),
                   [&](int64_t a, int64_t b) { return *best_ms(a) < *best_ms(b); });
  size_t keep = std::max<size_t>(2, (round_caps_.size() + 1) / 2);
  keep = std::min<size_t>(keep, static_cast<size_t>(budget_ - spent_ + 1) / 2);
  ranked.resize(std::min(keep, ranked.size()));
  const bool preferred_measured = best_ms(preferred_).has_value();
  if (!ranked.empty() && preferred_measured &&
      std::find(ranked.begin(), ranked.end(), preferred_) == ranked.end()) {
    ranked.back() = preferred_;
  }
  // The cap in place skips settling only if it is kept: else every cap
  // costs two, and the slowest other than the preferred one goes.
  auto cost = [&] {
    const bool in_place = std::find(ranked.begin(), ranked.end(), last_cap_) != ranked.end();
    return 2 * static_cast<int>(ranked.size()) - (in_place ? 1 : 0);
  };
  while (ranked.size() >= 2 && cost() > budget_ - spent_) {
    auto slowest = std::find_if(ranked.rbegin(), ranked.rend(),
                                [&](int64_t cap) { return cap != preferred_; });
    ranked.erase(std::next(slowest).base());
  }
  return ranked;
}

std::optional<double> BucketTuner::best_ms(int64_t cap) const {
  std::optional<double> best;
  for (const Sample& s : samples_) {
    if (s.cap_bytes == cap && (!best || s.ms < *best)) best = s.ms;
  }
  return best;
}

// The fastest by best sample, if it beats the preferred cap by more than
// the margin and by more than the preferred cap's own samples vary (the
// noise of this machine, seen in every round).
void BucketTuner::settle() {
  settled_ = true;
  chosen_ = preferred_;
  std::optional<double> fastest, preferred_best, preferred_worst;
  for (const Sample& s : samples_) {
    if (!fastest || s.ms < *fastest) {
      fastest = s.ms;
      chosen_ = s.cap_bytes;
    }
    if (s.cap_bytes != preferred_) continue;
    if (!preferred_best || s.ms < *preferred_best) preferred_best = s.ms;
    if (!preferred_worst || s.ms > *preferred_worst) preferred_worst = s.ms;
  }
  if (!preferred_best) return;
  const double noise = (*preferred_worst - *preferred_best) / *preferred_worst;
  if (*fastest >= (1 - std::max(margin_, noise)) * *preferred_best) chosen_ = preferred_;
}

}  // namespace ddp::detail
