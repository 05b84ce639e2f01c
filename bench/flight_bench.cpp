// flight_bench: what the flight recorder costs a collective, in one process
// (no peers: the collectives complete at once, so that what is timed is the
// issue path and nothing else).
//
//   flight_bench [--rounds R] [--ops N]
//
// Three measurements, each the median over R rounds of N operations:
// - ring: the recorder alone, per collective: its issue, start and
//   completion records (src/flight/recorder.h), as a group and its backend
//   make them (the completion's time is the one Work::finish reads anyway);
// - pending: what a group that does not record still pays, the hand-over of
//   a record to the backend's Work (PendingRecord of 0, taken by the Work);
// - group: ProcessGroup::allreduce on a backend whose Work is started and
//   finished at once, on a group that records (record_flights) and on one
//   that does not, alternated round by round; the difference is what a
//   user's collective pays for the recorder, clocks included.
#include <ddp/process_group.h>

#include "flight/clock.h"
#include "flight/recorder.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

// A backend whose collectives complete as soon as they are issued, as a
// backend's worker would start and finish them.
class InstantGroup : public ddp::ProcessGroup {
 public:
  InstantGroup() : ProcessGroup(0, 2, std::chrono::seconds(60)) {}
  std::string backend_name() const override { return "instant"; }

 protected:
  ddp::WorkPtr instant() {
    auto work = std::make_shared<ddp::Work>("instant", timeout());
    work->mark_started();
    work->finish();
    return work;
  }
  ddp::WorkPtr do_allreduce(at::Tensor, ddp::ReduceOp) override { return instant(); }
  ddp::WorkPtr do_allreduce_coalesced(std::vector<at::Tensor>, ddp::ReduceOp) override {
    return instant();
  }
  ddp::WorkPtr do_broadcast(at::Tensor, int) override { return instant(); }
  ddp::WorkPtr do_allgather(std::vector<at::Tensor>, at::Tensor) override { return instant(); }
  ddp::WorkPtr do_reduce_scatter(at::Tensor, std::vector<at::Tensor>, ddp::ReduceOp) override {
    return instant();
  }
  ddp::WorkPtr do_barrier() override { return instant(); }
};

// Nanoseconds per call of `op`, over `ops` calls.
double ns_per_op(int ops, const std::function<void()>& op) {
  const auto start = Clock::now();
  for (int i = 0; i < ops; ++i) op();
  return std::chrono::duration<double, std::nano>(Clock::now() - start).count() / ops;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 11, ops = 200000;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--rounds")) rounds = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--ops")) ops = std::atoi(argv[i + 1]);
  }
  namespace flight = ddp::detail::flight;
  InstantGroup recorded, plain;
  recorded.record_flights("bench");
  const int group = flight::add_group("ring-only", 0, 2, "none");
  if (group < 0) {
    std::fprintf(stderr, "flight_bench: recording is off (DDP_FLIGHT_RECORDER_SIZE=0)\n");
    return 1;
  }
  at::Tensor tensor = at::ones({1024});
  std::vector<double> ring, pending, on, off;
  auto work = std::make_shared<ddp::Work>("held", std::chrono::seconds(1));
  uint64_t seq = 0;
  for (int r = 0; r < rounds; ++r) {
    ring.push_back(ns_per_op(ops, [&] {
      flight::Issue issue;
      issue.group = group;
      issue.seq = seq++;
      issue.count = 1024;
      issue.issued_ticks = flight::now_ticks();
      const uint64_t record = flight::issue(issue);
      flight::started(record, flight::now_ticks());
      flight::finished(record, nullptr, issue.issued_ticks);
    }));
    pending.push_back(ns_per_op(ops, [&] {
      flight::PendingRecord none(0);
      flight::take_pending_record();
      none.settle(work);
    }));
    on.push_back(ns_per_op(ops, [&] { recorded.allreduce(tensor); }));
    off.push_back(ns_per_op(ops, [&] { plain.allreduce(tensor); }));
  }
  std::printf("flight recorder cost, %d rounds of %d operations, medians (ns per collective)\n",
              rounds, ops);
  std::printf("| measure | ns |\n|---|---:|\n");
  std::printf("| ring alone: issue + start + completion records | %.1f |\n", median(ring));
  std::printf("| hand-over on a group that does not record | %.1f |\n", median(pending));
  std::printf("| allreduce on a recording group | %.1f |\n", median(on));
  std::printf("| allreduce on a group that does not record | %.1f |\n", median(off));
  std::vector<double> diff;
  for (int r = 0; r < rounds; ++r) diff.push_back(on[r] - off[r]);
  std::printf("| recording − not, paired by round | %.1f |\n", median(diff));
  return 0;
}
