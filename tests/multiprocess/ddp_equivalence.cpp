// The paper's first challenge as a test: N ranks each on B/N samples give,
// step after step, the parameters one process computes on all B samples.
// Run one process per rank (GoogleTest, support/rank_gtest.h):
//   ddprun --nproc-per-node N ddp_equivalence --gtest_filter='DdpEquivalence.*'
// Every rank computes the single-process reference itself and compares.
// DdpBadInput.* checks misuse and bad input instead (ddp_errors.cpp),
// DdpStatistics.* the statistics and the DDP_DEBUG log. With --device cuda
// the models, data and reference live on the GPU (LOCAL_RANK's, modulo the
// GPUs seen): over nccl, or staged through host memory over the CPU backends.
#include "ddp_errors.h"
#include "ddp_models.h"
#include "support/rank_gtest.h"

#include <ddp/ddp.h>

#include <torch/torch.h>

#include <string>
#include <type_traits>

namespace ddp::testing {
namespace {

constexpr int64_t kBatch = 12;  // divisible by 1, 2, 3 and 4
constexpr int kSteps = 5;

enum class Optim { SGD, ADAM };

struct Variant {
  at::ScalarType dtype = at::kDouble;
  Optim optim = Optim::SGD;
  int micro_batches = 1;  // >1: all but the last under no_sync
  double tolerance = 0;   // relative; 0: 1e-10 for double, 1e-5 for float
};

std::string label(const std::string& name, const Variant& v) {
  return name + " [" + c10::toString(v.dtype) + ", " + (v.optim == Optim::SGD ? "SGD" : "Adam") +
         "]";
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(Optim kind,
                                                        std::vector<torch::Tensor> params) {
  if (kind == Optim::SGD) {
    return std::make_unique<torch::optim::SGD>(params,
                                               torch::optim::SGDOptions(0.05).momentum(0.9));
  }
  return std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(0.01));
}

torch::Tensor shard(const torch::Tensor& t, int rank, int size) {
  const int64_t per = t.size(0) / size;
  return t.narrow(0, rank * per, per);
}

void perturb(torch::nn::Module& m, int rank) {
  torch::NoGradGuard no_grad;
  for (auto& p : m.parameters()) p.add_(0.1 * (rank + 1));
  for (auto& b : m.buffers()) {
    if (b.is_floating_point()) b.add_(0.5 * (rank + 1));
  }
}

double relative_difference(const torch::Tensor& got, const torch::Tensor& want) {
  const double scale = std::max(want.abs().max().item<double>(), 1e-6);
  return (got - want).abs().max().item<double>() / scale;
}

// Runs kSteps steps of the reference and of DDP and compares parameters
// after each. `make()` builds the model (same seed on every rank); `fwd(m,
// x, rank, step, micro)` runs a forward on model or DDP module; `each_step`
// may check more after each DDP step.
template <typename Make, typename Forward>
void run_case(
    const ProcessGroupPtr& pg, const std::string& name, Make make, Forward fwd,
    DistributedDataParallelOptions options, Variant v,
    std::function<void(int step, DistributedDataParallel&)> each_step = {},
    std::function<void(int step, decltype(make())&, decltype(make())&)> each_forward = {}) {
  SCOPED_TRACE(label(name, v));
  const int rank = pg->rank(), n = pg->size();
  const double tol = v.tolerance > 0 ? v.tolerance : v.dtype == at::kDouble ? 1e-10 : 1e-5;
  torch::manual_seed(1);
  auto ref = make();
  ref->to(this_rank().device, v.dtype);
  torch::manual_seed(1);
  auto local = make();
  local->to(this_rank().device, v.dtype);
  if (rank != 0) perturb(*local, rank);  // the construction broadcast must undo this
  DistributedDataParallel model(local, options.process_group(pg));
  auto ref_opt = make_optimizer(v.optim, ref->parameters());
  auto opt = make_optimizer(v.optim, model->parameters());

  for (int step = 0; step < kSteps; ++step) {
    ref_opt->zero_grad();
    opt->zero_grad();
    for (int m = 0; m < v.micro_batches; ++m) {
      torch::manual_seed(1000 * step + m);
      auto x = torch::randn({kBatch, 8}, v.dtype).to(this_rank().device);
      auto y = torch::randn({kBatch, 4}, v.dtype).to(this_rank().device);
      // Reference: every rank's shard from the same starting buffers
      // (BatchNorm); rank 0's buffers survive, as DDP's broadcast does.
      std::vector<torch::Tensor> start, after_rank0;
      for (auto& b : ref->buffers()) start.push_back(b.clone());
      for (int r = 0; r < n; ++r) {
        {
          torch::NoGradGuard no_grad;
          auto buffers = ref->buffers();
          for (size_t i = 0; i < buffers.size(); ++i) buffers[i].copy_(start[i]);
        }
        auto loss = torch::mse_loss(fwd(ref, shard(x, r, n), r, step, m), shard(y, r, n)) / n;
        loss.backward();
        if (r == 0) {
          for (auto& b : ref->buffers()) after_rank0.push_back(b.clone());
        }
      }
      {
        torch::NoGradGuard no_grad;
        auto buffers = ref->buffers();
        for (size_t i = 0; i < buffers.size(); ++i) buffers[i].copy_(after_rank0[i]);
      }
      auto ddp_step = [&] {
        auto out = fwd(model, shard(x, rank, n), rank, step, m);
        if (each_forward) each_forward(step, ref, local);
        // (to: mixed_precision computes in another dtype)
        torch::mse_loss(out.to(v.dtype), shard(y, rank, n)).backward();
      };
      if (m + 1 < v.micro_batches) {
        if (m % 2 == 0) {
          auto guard = model->no_sync();
          ddp_step();
        } else {
          model->no_sync(ddp_step);
        }
      } else {
        ddp_step();
      }
    }
    ref_opt->step();
    opt->step();
    auto ref_params = ref->named_parameters();
    auto ddp_params = local->named_parameters();
    for (const auto& item : ref_params) {
      double diff = relative_difference(ddp_params[item.key()], item.value());
      if (diff > tol) {
        ADD_FAILURE() << label(name, v) + " step " + std::to_string(step) + " parameter " +
                             item.key() + ": relative difference " + std::to_string(diff) + " > " +
                             std::to_string(tol);
        return;
      }
    }
    if (each_step) each_step(step, model);
  }
}

// A run_case `each_step` check: `what` gives `buckets` buckets after the
// first step.
std::function<void(int, DistributedDataParallel&)> expect_buckets(const std::string& what,
                                                                  size_t buckets) {
  return [what, buckets](int step, DistributedDataParallel& model) {
    if (step == 0 && model->stats().bucket_count() != buckets) {
      ADD_FAILURE() << what + " gave " + std::to_string(model->stats().bucket_count()) +
                           " buckets, expected " + std::to_string(buckets);
    }
  };
}

// A case's name, saying so when it runs `micro_batches` > 1 under no_sync.
std::string under_no_sync(const std::string& name, int micro_batches) {
  if (micro_batches == 1) return name;
  return name + " under no_sync (" + std::to_string(micro_batches) + " micro-batches)";
}

void equivalence(const ProcessGroupPtr& pg) {
  auto mlp = [] { return ShuffledMlp(); };
  auto plain_fwd = [](auto& m, torch::Tensor x, int, int, int) { return m->forward(x); };
  for (auto dtype : {at::kDouble, at::kFloat}) {
    for (auto optim : {Optim::SGD, Optim::ADAM}) {
      Variant v{dtype, optim, 1};
      // Plain, with forwards that must not disturb training: in eval mode,
      // under NoGradGuard, and a forward whose output is dropped.
      auto disturbing_fwd = [](auto& m, torch::Tensor x, int, int step, int) {
        if (step == 2) {
          m->eval();
          m->forward(x);
          m->train();
          torch::NoGradGuard no_grad;
          m->forward(x);
        }
        if (step == 3) m->forward(x * 2);
        return m->forward(x);
      };
      run_case(pg, "plain (+ eval, no-grad and dropped forwards)", mlp, disturbing_fwd,
               DistributedDataParallelOptions(), v, [&](int step, DistributedDataParallel& model) {
                 auto s = model->stats();
                 if (s.iteration != step + 1 || s.buckets_rebuilt != (step == 1) ||
                     s.bucket_count() == 0) {
                   ADD_FAILURE() << "stats after step " + std::to_string(step) + ": " + s.summary();
                 }
               });
      run_case(pg, "tiny bucket cap (a bucket per parameter)", mlp, plain_fwd,
               DistributedDataParallelOptions().bucket_cap_mb(1e-6).first_bucket_cap_mb(1e-6), v,
               expect_buckets("tiny cap", 6));
      // A cap per bucket: the first bucket alone, the rest two by two.
      run_case(pg, "bucket_cap_mb_list (a cap per bucket)", mlp, plain_fwd,
               DistributedDataParallelOptions().bucket_cap_mb_list({1e-6, 1}), v,
               expect_buckets("bucket_cap_mb_list {1e-6, 1}", 2));
      run_case(pg, "bucket rebuild in gradient order", mlp, plain_fwd,
               DistributedDataParallelOptions().bucket_cap_mb(1e-6).first_bucket_cap_mb(1e-6), v,
               [&](int step, DistributedDataParallel& model) {
                 // Registered b (0, 1), c (2, 3), a (4, 5): reverse order puts a
                 // first; gradients arrive from c first and from a last.
                 auto buckets = model->reducer().bucket_indices();
                 std::vector<size_t> order;
                 for (auto& b : buckets) order.push_back(b[0]);
                 const bool gradient_order =
                     order.size() == 6 && order[0] >= 2 && order[0] <= 3 && order[5] >= 4;
                 const bool initial = order == std::vector<size_t>{5, 4, 3, 2, 1, 0};
                 if (step == 0 ? !initial : !gradient_order) {
                   ADD_FAILURE() << "bucket order after step " + std::to_string(step) +
                                        " is not the " + (step == 0 ? "initial" : "gradient") +
                                        " order";
                 }
               });
      run_case(pg, "gradient_as_bucket_view", mlp, plain_fwd,
               DistributedDataParallelOptions().gradient_as_bucket_view(true).bucket_cap_mb(1e-3),
               v);
      // Each bucket filled in two calls when its last gradient is ready.
      run_case(pg, "batched_grad_copy", mlp, plain_fwd,
               DistributedDataParallelOptions().batched_grad_copy(true).bucket_cap_mb_list(
                   {1e-6, 1}),
               Variant{dtype, optim, 3});
      run_case(pg, "batched_grad_copy, gradient_as_bucket_view", mlp, plain_fwd,
               DistributedDataParallelOptions().batched_grad_copy(true).gradient_as_bucket_view(
                   true),
               v);
      // Computing in float, reducing in double, against the double
      // reference: within float's precision.
      if (dtype == at::kDouble) {
        run_case(pg, "mixed_precision: float compute, double reduction", mlp, plain_fwd,
                 DistributedDataParallelOptions().mixed_precision(
                     MixedPrecision{at::kFloat, at::kDouble, std::nullopt}),
                 Variant{dtype, optim, 2, 1e-5});
      }
      run_case(pg, "no_sync accumulation (3 micro-batches)", mlp, plain_fwd,
               DistributedDataParallelOptions(), Variant{dtype, optim, 3});
      auto branchy = [] { return Branchy(); };
      // Branches differ by rank and by step; with 3 branches one or more is
      // unused by every rank in each step.
      run_case(
          pg, "find_unused_parameters, branches by rank and step", branchy,
          [](auto& m, torch::Tensor x, int rank, int step, int) {
            return m->forward(x, static_cast<int64_t>((rank + step) % 3));
          },
          DistributedDataParallelOptions().find_unused_parameters(true), v);
      // PyTorch #69031: a branch used only in the no_sync micro-batches must
      // still be reduced at the synchronizing one.
      run_case(
          pg, "no_sync + find_unused: parameters used only while accumulating", branchy,
          [](auto& m, torch::Tensor x, int, int, int micro) {
            return m->forward(x, static_cast<int64_t>(micro < 2 ? 0 : 1));
          },
          DistributedDataParallelOptions().find_unused_parameters(true), Variant{dtype, optim, 3});
      // Stochastic depth with a seed every rank shares, its dropped blocks
      // hinted: left out of the buckets, the rest exact; under no_sync only
      // blocks dropped in every micro-batch are left out.
      auto drop = [](int step, int micro) { return int64_t{(step * 5 + micro * 3 + 1) % 16}; };
      // After step `step`: `left_out` parameters (`what`) must be those of
      // the blocks that every micro-batch dropped.
      auto expect_left_out = [drop](const std::string& what, int64_t left_out, int step,
                                    int micro_batches) {
        int64_t all = 0xf;
        for (int m = 0; m < micro_batches; ++m) all &= drop(step, m);
        const int64_t expected = 2 * __builtin_popcountll(all);
        if (left_out != expected) {
          ADD_FAILURE() << what + " step " + std::to_string(step) + ": " +
                               std::to_string(left_out) + " parameters left out, expected " +
                               std::to_string(expected);
        }
      };
      auto depth_fwd = [drop](auto& m, torch::Tensor x, int, int step, int micro) {
        const int64_t mask = drop(step, micro);
        if constexpr (std::is_same_v<std::decay_t<decltype(m)>, DistributedDataParallel>) {
          std::vector<torch::Tensor> hinted;
          for (const auto& item : m->named_parameters()) {
            for (int k = 0; k < StochasticDepthImpl::kBlocks; ++k) {
              const std::string block = "blocks." + std::to_string(k) + ".";
              if ((mask >> k & 1) && item.key().find(block) != std::string::npos) {
                hinted.push_back(item.value());
              }
            }
          }
          m->hint_unused_parameters(hinted);
        }
        return m->forward(x, mask);
      };
      for (int micro_batches : {1, 3}) {
        run_case(
            pg, under_no_sync("layer-drop hints, stochastic depth", micro_batches),
            [] { return StochasticDepth(); }, depth_fwd,
            DistributedDataParallelOptions().layer_drop_hints(true),
            Variant{dtype, optim, micro_batches},
            [&](int step, DistributedDataParallel& model) {
              expect_left_out("layer-drop", model->stats().dropped_parameters, step, micro_batches);
            });
      }
      // The same stochastic depth without hints: find_unused_parameters
      // finds the dropped blocks (the same on every rank) and
      // skip_all_reduce_unused_params leaves them out; under no_sync only
      // those no micro-batch used.
      auto depth_unhinted = [drop](auto& m, torch::Tensor x, int, int step, int micro) {
        return m->forward(x, drop(step, micro));
      };
      for (int micro_batches : {1, 3}) {
        run_case(
            pg, under_no_sync("skip_all_reduce_unused_params, stochastic depth", micro_batches),
            [] { return StochasticDepth(); }, depth_unhinted,
            DistributedDataParallelOptions()
                .find_unused_parameters(true)
                .skip_all_reduce_unused_params(true),
            Variant{dtype, optim, micro_batches},
            [&](int step, DistributedDataParallel& model) {
              expect_left_out("skip_all_reduce_unused_params", model->stats().skipped_parameters,
                              step, micro_batches);
            });
      }
      run_case(
          pg, "static_graph, shared weight arriving twice (checkpointing)",
          [] { return SharedCheckpointed(); }, plain_fwd,
          DistributedDataParallelOptions().static_graph(true), v);
      run_case(
          pg, "BatchNorm: rank 0's statistics before every forward", [] { return BnNet(); },
          plain_fwd, DistributedDataParallelOptions(), v, {},
          [&](int step, BnNet& ref, BnNet& local) {
            // Each reference forward started from rank 0's buffers.
            if (!torch::allclose(local->mean_at_entry, ref->mean_at_entry)) {
              ADD_FAILURE() << "BatchNorm step " + std::to_string(step) +
                                   ": forward did not start from rank 0's running mean";
            }
          });
    }
  }
}

// Two iterations with a branch no rank uses, for the DDP_DEBUG log (the
// ctest entry matches the log lines); checks the statistics themselves.
void statistics_log(const ProcessGroupPtr& pg) {
  DistributedDataParallel model(
      Branchy(), DistributedDataParallelOptions().process_group(pg).find_unused_parameters(true));
  for (int step = 0; step < 2; ++step) {
    model->forward(torch::randn({4, 8}), int64_t{0}).sum().backward();
  }
  auto s = model->stats();
  check(s.iteration == 2 && s.unused_parameters == 4 && s.bucket_count() >= 1 && s.forward_ms > 0 &&
            s.backward_compute_ms > 0,
        "statistics: iterations, unused parameters, buckets and times", s.summary());
  bool timings_ok = s.bucket_timings.size() == s.bucket_count();
  for (size_t b = 0; timings_ok && b < s.bucket_timings.size(); ++b) {
    const auto& t = s.bucket_timings[b];
    timings_ok = t.bytes == s.bucket_bytes[b] && t.launch_ms >= 0 && t.done_ms >= t.launch_ms &&
                 (b == 0 || t.launch_ms >= s.bucket_timings[b - 1].launch_ms);
  }
  check(timings_ok && s.backward_start.time_since_epoch().count() != 0,
        "statistics: each bucket's launch and completion after backward start, in order",
        s.summary());
}

}  // namespace
}  // namespace ddp::testing

namespace ddp::testing {
namespace {

TEST(DdpEquivalence, EveryCaseEqualsOneProcessOnTheWholeBatch) { equivalence(this_rank().group); }

// Misuse and bad input: ddp_errors.cpp.
TEST(DdpBadInput, EveryRankRaisesAndTheRanksAreInStepAfterwards) { bad_input(this_rank().group); }

// The ctest entry (ddp_debug_log) also matches the DDP_DEBUG log lines.
TEST(DdpStatistics, TwoIterationsWithUnusedParameters) { statistics_log(this_rank().group); }

}  // namespace
}  // namespace ddp::testing
