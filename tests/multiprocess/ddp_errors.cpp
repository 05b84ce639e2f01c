// The DdpBadInput checks of ddp_equivalence (one process per rank): ranks that
// do not run the same iteration, and bad input. Each must give a clear error
// on every rank, never a hang, and its facts (ddp/errors.h) must say what
// happened: the ranks at fault, and the names and values at issue.
#include "ddp_errors.h"

#include "ddp_models.h"
#include "support/raised.h"
#include "support/rank_gtest.h"

#include <ddp/ddp.h>

#include <torch/torch.h>

#include <algorithm>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace ddp::testing {
namespace {

// "" when `f` returns; else what it threw.
std::string thrown_by(const std::function<void()>& f) {
  Raised r = raised<Error>(f);
  return r.wrong == "no error" ? "" : r ? r.what : r.wrong;
}

// "[0, 2]": ranks, for failure output.
std::string show(const std::vector<int>& ranks) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < ranks.size(); ++i) out << (i ? ", " : "") << ranks[i];
  out << "]";
  return out.str();
}

bool names_rank(const std::vector<int>& peers, int rank) {
  return std::find(peers.begin(), peers.end(), rank) != peers.end();
}

// Raised `r` as an InvalidArgument of this rank's group about exactly `peers`.
bool raised_here_about(const Raised& r, const ProcessGroupPtr& pg, const std::vector<int>& peers) {
  return r && r.on(*pg) && r.context.peers == peers;
}

std::string facts(const Raised& r) {
  return r ? show(r.context.peers) + " at fault in: " + r.what : r.wrong;
}

// The peers of a model check where rank 1 alone differs: on rank 1 every
// other rank, elsewhere rank 1.
std::vector<int> rank_one_differs(const ProcessGroupPtr& pg) {
  if (pg->rank() != 1) return {1};
  std::vector<int> others;
  for (int r = 0; r < pg->size(); ++r) {
    if (r != 1) others.push_back(r);
  }
  return others;
}

// Ranks that do not run the same iteration: every rank raises in the
// backward where it shows, naming the rank and what it did; afterwards the
// ranks are in step again and training goes on.
void misuse_in_training(const ProcessGroupPtr& pg) {
  const int rank = pg->rank();
  DistributedDataParallel model(ShuffledMlp(), DistributedDataParallelOptions().process_group(pg));
  auto x = torch::randn({4, 8});
  auto step = [&] { model->forward(x).sum().backward(); };
  auto next_runs = [&](const std::string& what) {
    std::string e = thrown_by(step);
    check(e.empty(), what + ": the next iteration runs", e);
  };
  step();
  Raised r = raised<InvalidArgument>([&] {
    if (rank == 1) model->forward(x);  // its backward() skipped
    step();
  });
  check(raised_here_about(r, pg, {1}),
        "a backward() skipped on rank 1: every rank raises, naming it", facts(r));
  next_runs("skipped backward()");
  r = raised<InvalidArgument>([&] {
    if (rank == 1) model->no_sync(step);  // an extra micro-step
    step();
  });
  check(raised_here_about(r, pg, {1}),
        "an extra no_sync micro-step on rank 1: every rank raises, naming it", facts(r));
  next_runs("extra micro-step");
  r = raised<InvalidArgument>([&] {
    auto loss = model->forward(x).sum();
    loss.backward({}, /*retain_graph=*/true);
    if (rank == 1) loss.backward();  // twice after one forward
    step();
  });
  check(raised_here_about(r, pg, {1}),
        "backward() twice after one forward on rank 1: every rank raises, naming it", facts(r));
  next_runs("backward() twice");
}

// Collectives issued outside DDP that disagree across ranks. shm finds them
// in the collective itself, on every rank, and its group is broken from then
// on (so this runs last); the other backends complete some of them, and
// DDP's per-iteration tally raises on every rank in the next backward.
void mismatched_collectives(const ProcessGroupPtr& pg) {
  const int rank = pg->rank();
  DistributedDataParallel model(ShuffledMlp(), DistributedDataParallelOptions().process_group(pg));
  auto x = torch::randn({4, 8});
  auto step = [&] { model->forward(x).sum().backward(); };
  step();
  if (pg->backend_name() == "shm") {
    std::string outcome = "no error";
    try {
      auto t = torch::ones({16});
      pg->allreduce(t, rank == 1 ? ReduceOp::MAX : ReduceOp::SUM)->wait();
    } catch (const TimeoutError& e) {
      outcome = std::string("the timeout: ") + e.what();
    } catch (const CollectiveMismatch& e) {  // about the other side
      outcome = names_rank(e.context().peers, rank == 1 ? 0 : 1) ? "" : e.what();
    } catch (const CommunicationError& e) {  // the group broken by another rank
      outcome = e.context().peers.empty() ? e.what() : "";
    }
    check(outcome.empty(), "shm: an allreduce with another op on rank 1 fails on every rank",
          outcome);
    return;
  }
  auto next_runs = [&](const std::string& what) {
    std::string e = thrown_by(step);
    check(e.empty(), what + ": the next iteration runs", e);
  };
  // Rank 1's tally differs from the others': it is the one at fault.
  Raised r = raised<CollectiveMismatch>([&] {
    auto t = torch::ones({16});
    pg->allreduce(t, rank == 1 ? ReduceOp::MAX : ReduceOp::SUM)->wait();
    step();
  });
  check(raised_here_about(r, pg, {1}) && r.mentions("DDP_DEBUG=detail"),
        "an allreduce with another op on rank 1: every rank raises in the next backward", facts(r));
  next_runs("different ops");
  r = raised<CollectiveMismatch>([&] {
    auto t = rank == 1 ? torch::ones({16}, torch::kInt) : torch::ones({16});
    pg->allreduce(t)->wait();
    step();
  });
  check(raised_here_about(r, pg, {1}),
        "an allreduce of another dtype of the same size on rank 1: every rank raises", facts(r));
  next_runs("different dtypes");
}

}  // namespace

// Bad input: each gives a clear error on every rank, and its facts say what.
void bad_input(const ProcessGroupPtr& pg) {
  const int rank = pg->rank(), n = pg->size();
  auto options = DistributedDataParallelOptions().process_group(pg);
  if (n > 1) {
    Raised r = raised<InvalidArgument>(
        [&] { DistributedDataParallel m(ShuffledMlp(8, rank == 1 ? 17 : 16), options); });
    check(raised_here_about(r, pg, rank_one_differs(pg)) && r.mentions("#0") &&
              r.mentions("'b.weight'") && r.mentions("Float [16, 16]") &&
              r.mentions("Float [17, 17]"),
          "models of different shapes: error on every rank, naming the parameter and its shapes",
          facts(r));
    r = raised<InvalidArgument>([&] {
      if (rank == 1) {
        DistributedDataParallel m(Branchy(), options);
      } else {
        DistributedDataParallel m(ShuffledMlp(), options);
      }
    });
    check(raised_here_about(r, pg, rank_one_differs(pg)) && r.mentions(" 10 ") && r.mentions(" 6 "),
          "models of different sizes: error on every rank, with rank 1's 10 parameters and the "
          "others' 6",
          facts(r));
    r = raised<InvalidArgument>([&] { DistributedDataParallel m(TwinLayers(rank == 1), options); });
    check(raised_here_about(r, pg, rank_one_differs(pg)) && r.mentions("#0") &&
              r.mentions("'p.weight'") && r.mentions("'q.weight'") && r.mentions("Float [16, 16]"),
          "two same-sized layers registered in a different order: error on every rank, naming both",
          facts(r));
    misuse_in_training(pg);
  }
  {
    DistributedDataParallel model(Branchy(), options);
    auto x = torch::randn({4, 8});
    std::vector<int> every_rank;
    for (int r = 0; r < n; ++r) every_rank.push_back(r);
    Raised r = raised<InvalidArgument>([&] { model->forward(x, int64_t{0}).sum().backward(); });
    check(raised_here_about(r, pg, every_rank) && r.mentions("#4 'branches.1.weight'") &&
              r.mentions("find_unused_parameters(true)"),
          "unused parameter without find_unused_parameters: backward() throws, naming it",
          facts(r));
    if (n > 1) {
      r = raised<InvalidArgument>(
          [&] { model->forward(x, int64_t{rank == 1 ? 0 : -1}).sum().backward(); });
      // Rank 1 names its parameter; the others, its count of them.
      const bool named = rank == 1 ? r.mentions("#6 'branches.2.weight'") : r.mentions("(4)");
      check(raised_here_about(r, pg, {1}) && named,
            "a parameter unused on rank 1 only: every rank throws, naming rank 1", facts(r));
    }
    std::string e = thrown_by([&] { model->forward(x, int64_t{-1}).sum().backward(); });
    check(e.empty(), "the next iteration after the error runs", e);
  }
  {
    torch::nn::Linear frozen(4, 4);
    for (auto& p : frozen->parameters()) p.requires_grad_(false);
    Raised r = raised<InvalidArgument>([&] { DistributedDataParallel m(frozen, options); });
    check(raised_here_about(r, pg, {}) && r.mentions("requires_grad"),
          "a module with no trainable parameter", facts(r));
  }
  Raised r = raised<InvalidArgument>([&] {
    DistributedDataParallel m(
        ShuffledMlp(),
        DistributedDataParallelOptions(options).parameters_to_ignore({"nonexistent.weight"}));
  });
  check(raised_here_about(r, pg, {}) && r.mentions("parameters_to_ignore") &&
            r.mentions("'nonexistent.weight'"),
        "parameters_to_ignore with an unknown name", facts(r));
  if (n > 1) {
    // Rank 1 alone: it raises its error, the others one naming it, and
    // none waits for it in the construction's collectives.
    r = raised<InvalidArgument>([&] {
      DistributedDataParallel m(ShuffledMlp(),
                                DistributedDataParallelOptions(options).parameters_to_ignore(
                                    rank == 1 ? std::vector<std::string>{"nonexistent.weight"}
                                              : std::vector<std::string>{}));
    });
    check(rank == 1 ? raised_here_about(r, pg, {}) && r.mentions("'nonexistent.weight'")
                    : raised_here_about(r, pg, {1}),
          "parameters_to_ignore with an unknown name on rank 1 only: every rank throws, naming "
          "rank 1",
          facts(r));
    mismatched_collectives(pg);
  }
}

}  // namespace ddp::testing
