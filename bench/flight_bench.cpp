// flight_bench: what the flight recorder costs a collective, in one process
// (no peers: the collectives complete at once, so that what is timed is the
// issue path and nothing else).
//
//   flight_bench [--rounds R] [--ops N]
//
// ProcessGroup::allreduce on a backend whose Work is started and finished
// at once, on a group that records (record_flights) and on one that does
// not, alternated round by round, each the median over R rounds of N
// operations; the difference, paired by round, is what a user's collective
// pays for the recorder, clocks included. Public API only: the recorder's
// parts (the ring's records, the hand-over of a record to a Work) are
// timed by nothing here.
#include "bench_util.h"

#include <ddp/flight_recorder.h>
#include <ddp/process_group.h>

#include <ATen/ATen.h>

#include <chrono>
#include <cstdio>
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

double median(const std::vector<double>& v) { return ddp_bench::summarize(v).median; }

const char* const kUsage = "usage: flight_bench [--rounds R] [--ops N]   (one process)\n";

int run(ddp_bench::Args args) {
  const int rounds = static_cast<int>(args.take_int("--rounds", 1, 100000).value_or(11));
  const int ops = static_cast<int>(args.take_int("--ops", 1, 1 << 30).value_or(200000));
  args.expect_empty();
  InstantGroup recorded, plain;
  recorded.record_flights("bench");
  at::Tensor tensor = at::ones({1024});
  recorded.allreduce(tensor);
  if (ddp::flight_records().empty()) {
    std::fprintf(stderr, "flight_bench: recording is off (DDP_FLIGHT_RECORDER_SIZE=0)\n");
    return 1;
  }
  std::vector<double> on, off;
  for (int r = 0; r < rounds; ++r) {
    on.push_back(ns_per_op(ops, [&] { recorded.allreduce(tensor); }));
    off.push_back(ns_per_op(ops, [&] { plain.allreduce(tensor); }));
  }
  std::printf("flight recorder cost, %d rounds of %d operations, medians (ns per collective)\n",
              rounds, ops);
  std::printf("| measure | ns |\n|---|---:|\n");
  std::printf("| allreduce on a recording group | %.1f |\n", median(on));
  std::printf("| allreduce on a group that does not record | %.1f |\n", median(off));
  std::vector<double> diff;
  for (int r = 0; r < rounds; ++r) diff.push_back(on[r] - off[r]);
  std::printf("| recording − not, paired by round | %.1f |\n", median(diff));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return ddp_bench::run_main("flight_bench", {argv + 1, argv + argc}, kUsage, run);
}
