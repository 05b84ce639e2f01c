// Bucket autotuning's schedule and decision (paper §6.1: the best bucket
// size depends on the model and the network), apart from any collective so
// that it is deterministic given the timings: every rank feeds it the same
// all-reduced numbers and so takes the same steps.
//
// Successive halving over the candidate caps (each giving a different
// bucket layout). A round runs every surviving candidate for one iteration
// that settles it (new buffers: page faults, a collective allocation) and
// one that is measured (the cap already in place skips settling); the next
// round keeps the faster half (at least two, by each one's best sample so
// far) with the preferred cap (the default, 25 MiB) among them, until the
// trial budget is spent: with two left, each round adds a sample of both.
// The choice is the fastest by best sample, unless it is not faster than
// the preferred one by more than `margin`, or than the preferred one's
// samples vary among themselves (the machine's noise): then the preferred
// one stays.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace ddp::detail {

class BucketTuner {
 public:
  struct Sample {
    int64_t cap_bytes = 0;
    double ms = 0;  // the slowest rank's iteration
  };

  // `caps`: distinct candidates; `preferred` must be one of them. `budget`:
  // the most trial iterations (settling ones included), at least
  // 2 * caps.size() (each is tried once).
  BucketTuner(std::vector<int64_t> caps, int64_t preferred, int budget, double margin);

  // The cap the coming iteration runs with. `previous_ms`: the slowest
  // rank's time of the iteration just ended, nullopt if it does not count
  // (none yet, or it failed on some rank); a measured step whose time does
  // not count is run again (at most `budget` times in all).
  int64_t next(std::optional<double> previous_ms);

  bool settled() const { return settled_; }
  // The choice, once settled.
  int64_t chosen() const { return chosen_; }
  // Trial iterations so far (settling ones included).
  int trial_iterations() const { return spent_; }
  // Every sample taken, in order.
  const std::vector<Sample>& samples() const { return samples_; }

 private:
  struct Step {
    int64_t cap_bytes;
    bool measured;
  };
  void plan_round(std::vector<int64_t> caps);
  std::vector<int64_t> survivors() const;
  std::optional<double> best_ms(int64_t cap) const;
  void settle();

  const int64_t preferred_;
  const int budget_;
  const double margin_;
  std::vector<int64_t> round_caps_;
  std::vector<Step> steps_;  // this round's
  size_t at_ = 0;            // steps_[at_] runs in the coming iteration
  bool started_ = false;
  int64_t last_cap_ = -1;  // the cap of the last step run
  int spent_ = 0;          // trial iterations run
  int repeated_ = 0;       // measured steps run again
  bool settled_ = false;
  int64_t chosen_ = 0;
  std::vector<Sample> samples_;
};

}  // namespace ddp::detail
