// The DdpBadInput checks of ddp_equivalence (one process per rank): ranks that
// do not run the same iteration, and bad input. Each must give a clear error
// on every rank, never a hang, and the text must say what happened.
#include "ddp_errors.h"

#include "ddp_models.h"
#include "support/error_of.h"
#include "support/rank_gtest.h"

#include <ddp/ddp.h>

#include <torch/torch.h>

#include <functional>
#include <string>

namespace ddp::testing {
namespace {

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
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
    std::string e = error_of(step);
    check(e == "no error", what + ": the next iteration runs", e);
  };
  step();
  std::string e = error_of([&] {
    if (rank == 1) model->forward(x);  // its backward() skipped
    step();
  });
  check(has(e, "different numbers of forward passes") &&
            has(e, "rank 1 ran a forward whose backward() was skipped"),
        "a backward() skipped on rank 1: every rank raises, naming it", e);
  next_runs("skipped backward()");
  e = error_of([&] {
    if (rank == 1) model->no_sync(step);  // an extra micro-step
    step();
  });
  check(has(e, "different numbers of forward passes") && has(e, "rank 1 ran"),
        "an extra no_sync micro-step on rank 1: every rank raises, naming it", e);
  next_runs("extra micro-step");
  e = error_of([&] {
    auto loss = model->forward(x).sum();
    loss.backward({}, /*retain_graph=*/true);
    if (rank == 1) loss.backward();  // twice after one forward
    step();
  });
  check(has(e, "rank 1 ran a backward() that no DDP forward prepared") &&
            has(e, "after its forward pass #"),
        "backward() twice after one forward on rank 1: every rank raises, naming it", e);
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
    } catch (const CollectiveMismatch& e) {
      outcome = has(e.what(), rank == 1 ? "rank 0" : "rank 1") ? "" : e.what();  // the other side
    } catch (const CommunicationError& e) {
      outcome = has(e.what(), "broken by rank") ? "" : e.what();
    }
    check(outcome.empty(), "shm: an allreduce with another op on rank 1 fails on every rank",
          outcome);
    return;
  }
  auto next_runs = [&](const std::string& what) {
    std::string e = error_of(step);
    check(e == "no error", what + ": the next iteration runs", e);
  };
  std::string e = error_of([&] {
    auto t = torch::ones({16});
    pg->allreduce(t, rank == 1 ? ReduceOp::MAX : ReduceOp::SUM)->wait();
    step();
  });
  check(has(e, "the ranks issued different collectives") && has(e, "DDP_DEBUG=detail"),
        "an allreduce with another op on rank 1: every rank raises in the next backward", e);
  next_runs("different ops");
  e = error_of([&] {
    auto t = rank == 1 ? torch::ones({16}, torch::kInt) : torch::ones({16});
    pg->allreduce(t)->wait();
    step();
  });
  check(has(e, "the ranks issued different collectives"),
        "an allreduce of another dtype of the same size on rank 1: every rank raises", e);
  next_runs("different dtypes");
}

}  // namespace

// Bad input: each gives a clear error on every rank, and the text says what.
void bad_input(const ProcessGroupPtr& pg) {
  const int rank = pg->rank(), n = pg->size();
  auto options = DistributedDataParallelOptions().process_group(pg);
  if (n > 1) {
    std::string e =
        error_of([&] { DistributedDataParallel m(ShuffledMlp(8, rank == 1 ? 17 : 16), options); });
    check(has(e, "parameters #0 ('b.weight' here) differs across ranks") &&
              has(e, "rank 0: Float [16, 16]") && has(e, "rank 1: Float [17, 17]"),
          "models of different shapes: error on every rank", e);
    e = error_of([&] {
      if (rank == 1) {
        DistributedDataParallel m(Branchy(), options);
      } else {
        DistributedDataParallel m(ShuffledMlp(), options);
      }
    });
    check(has(e, "different numbers of parameters") && has(e, "rank 1: 10 parameters"),
          "models of different sizes: error on every rank", e);
    e = error_of([&] { DistributedDataParallel m(TwinLayers(rank == 1), options); });
    check(has(e, "parameters #0 ('" + std::string(rank == 1 ? "q" : "p") +
                     ".weight' here) differs across ranks") &&
              has(e, "rank 0: Float [16, 16] 'p.weight'") &&
              has(e, "rank 1: Float [16, 16] 'q.weight'"),
          "two same-sized layers registered in a different order: error on every rank", e);
    misuse_in_training(pg);
  }
  {
    DistributedDataParallel model(Branchy(), options);
    auto x = torch::randn({4, 8});
    std::string e = error_of([&] { model->forward(x, int64_t{0}).sum().backward(); });
    check(has(e, "got no gradient on rank(s) ") && has(e, "#4 'branches.1.weight'") &&
              has(e, "find_unused_parameters(true)"),
          "unused parameter without find_unused_parameters: backward() throws", e);
    if (n > 1) {
      e = error_of([&] { model->forward(x, int64_t{rank == 1 ? 0 : -1}).sum().backward(); });
      const bool named = rank == 1 ? has(e, "#6 'branches.2.weight'") : has(e, "on rank(s) 1 (4)");
      check(named, "a parameter unused on rank 1 only: every rank throws", e);
    }
    e = error_of([&] { model->forward(x, int64_t{-1}).sum().backward(); });
    check(e == "no error", "the next iteration after the error runs", e);
  }
  {
    torch::nn::Linear frozen(4, 4);
    for (auto& p : frozen->parameters()) p.requires_grad_(false);
    std::string e = error_of([&] { DistributedDataParallel m(frozen, options); });
    check(has(e, "no parameter that requires grad"), "a module with no trainable parameter", e);
  }
  std::string e = error_of([&] {
    DistributedDataParallel m(
        ShuffledMlp(),
        DistributedDataParallelOptions(options).parameters_to_ignore({"nonexistent.weight"}));
  });
  check(has(e, "parameters_to_ignore names 'nonexistent.weight'"),
        "parameters_to_ignore with an unknown name", e);
  if (n > 1) mismatched_collectives(pg);
}

}  // namespace ddp::testing
