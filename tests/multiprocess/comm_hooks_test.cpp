// Communication hooks on real ranks, one process each (GoogleTest,
// support/rank_gtest.h): ddprun --nproc-per-node N comm_hooks_test
// With --device cuda the hooks' gradient checks (CommHooks.Default*,
// CommHooks.PowerSgd*) run on the GPU.
#include "support/bitwise.h"
#include "support/raised.h"
#include "support/rank_gtest.h"

#include <ddp/ddp.h>

#include <torch/torch.h>

namespace ddp::testing {
namespace {

using Hooked = std::function<void(DistributedDataParallel&)>;

torch::nn::Sequential mlp(std::vector<int64_t> widths, bool bias = true) {
  torch::nn::Sequential net;
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    net->push_back(
        torch::nn::Linear(torch::nn::LinearOptions(widths[i], widths[i + 1]).bias(bias)));
    if (i + 2 < widths.size()) net->push_back(torch::nn::Tanh());
  }
  return net;
}

// Gradients after one backward of `net` wrapped in DDP (hooked by `hook`)
// on this rank's inputs, for `steps` steps of SGD.
std::vector<torch::Tensor> gradients(const ProcessGroupPtr& pg, torch::nn::Sequential net,
                                     const Hooked& hook, const torch::Tensor& x, int steps = 3,
                                     at::ScalarType dtype = at::kDouble) {
  net->to(this_rank().device, dtype);
  DistributedDataParallel model(net, DistributedDataParallelOptions().process_group(pg));
  if (hook) hook(model);
  torch::optim::SGD opt(model->parameters(), 0.1);
  std::vector<torch::Tensor> grads;
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    model->forward(x.to(this_rank().device, dtype) * (s + 1)).pow(2).sum().backward();
    grads.clear();
    for (auto& p : model->parameters()) grads.push_back(p.grad().clone());
    opt.step();
  }
  return grads;
}

double max_relative(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    double scale = std::max(b[i].abs().max().item<double>(), 1e-12);
    worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>() / scale);
  }
  return worst;
}

// Same values on every rank?
bool agree_across_ranks(const ProcessGroupPtr& pg, const torch::Tensor& t) {
  std::vector<torch::Tensor> all;
  for (int r = 0; r < pg->size(); ++r) all.push_back(torch::empty_like(t));
  pg->allgather(all, t.contiguous())->wait();
  for (auto& other : all) {
    if (!torch::equal(other, t)) return false;
  }
  return true;
}

std::string num(double v) { return std::to_string(v); }

void default_hooks(const ProcessGroupPtr& pg) {
  const int rank = pg->rank();
  torch::manual_seed(7 + rank);
  auto x = torch::randn({6, 16});
  auto fresh = [] {
    torch::manual_seed(1);
    return mlp({16, 32, 32, 4});
  };
  auto exact = gradients(pg, fresh(), {}, x);
  auto with_allreduce = gradients(
      pg, fresh(), [&](auto& m) { m->register_comm_hook(pg, allreduce_hook); }, x);
  check(bitwise_equal(with_allreduce, exact), "allreduce_hook gives the same gradients as no hook");
  auto fp16 = gradients(
      pg, fresh(), [&](auto& m) { m->register_comm_hook(pg, fp16_compress_hook); }, x);
  auto bf16 = gradients(
      pg, fresh(), [&](auto& m) { m->register_comm_hook(pg, bf16_compress_hook); }, x);
  check(max_relative(fp16, exact) < 2e-3, "fp16_compress_hook within float16 precision",
        num(max_relative(fp16, exact)));
  check(max_relative(bf16, exact) < 2e-2, "bf16_compress_hook within bfloat16 precision",
        num(max_relative(bf16, exact)));
  auto fp16_wrapped = gradients(
      pg, fresh(),
      [&](auto& m) { m->register_comm_hook(pg, fp16_compress_wrapper(allreduce_hook)); }, x);
  auto bf16_wrapped = gradients(
      pg, fresh(),
      [&](auto& m) { m->register_comm_hook(pg, bf16_compress_wrapper(allreduce_hook)); }, x);
  check(bitwise_equal(fp16_wrapped, fp16),
        "fp16_compress_wrapper(allreduce_hook) == fp16_compress_hook");
  check(bitwise_equal(bf16_wrapped, bf16),
        "bf16_compress_wrapper(allreduce_hook) == bf16_compress_hook");
  auto noop = gradients(
      pg, fresh(), [&](auto& m) { m->register_comm_hook(pg, noop_hook); }, x, 1);
  auto local = gradients(
      pg, fresh(), [&](auto& m) { m->register_comm_hook(pg, noop_hook); }, x, 1);
  torch::manual_seed(1);
  auto alone = mlp({16, 32, 32, 4});
  alone->to(this_rank().device, at::kDouble);
  alone->forward(x.to(this_rank().device, at::kDouble)).pow(2).sum().backward();
  std::vector<torch::Tensor> own;
  for (auto& p : alone->parameters()) own.push_back(p.grad());
  check(max_relative(noop, own) < 1e-12 && bitwise_equal(noop, local),
        "noop_hook leaves each rank its own gradients");
}

void registration_errors(const ProcessGroupPtr& pg) {
  DistributedDataParallel model(mlp({4, 4}), DistributedDataParallelOptions().process_group(pg));
  model->register_comm_hook(pg, allreduce_hook);
  // A refused registration: this rank's group, the call named.
  auto refused = [&](const Raised& r) {
    return r && r.on(*pg) && r.context.operation == "register_comm_hook";
  };
  Raised r = raised<InvalidArgument>([&] { model->register_comm_hook(pg, allreduce_hook); });
  check(refused(r), "a second registration is an error", r.text());
  DistributedDataParallel trained(mlp({4, 4}), DistributedDataParallelOptions().process_group(pg));
  trained->forward(torch::ones({2, 4})).sum().backward();
  r = raised<InvalidArgument>([&] { trained->register_comm_hook(pg, allreduce_hook); });
  check(refused(r), "registering after training started is an error", r.text());
  r = raised<InvalidArgument>([&] { PowerSGDState(pg, 1, 1); });
  check(r && r.context.operation == "PowerSGDState" && r.mentions("start_powerSGD_iter"),
        "PowerSGDState: start_powerSGD_iter 1 with error feedback is rejected, naming it",
        r.text());
  r = raised<InvalidArgument>([&] { PowerSGDState(pg, 0, 10); });
  check(r && r.context.operation == "PowerSGDState" && r.mentions("matrix_approximation_rank"),
        "PowerSGDState: rank 0 is rejected, naming matrix_approximation_rank", r.text());
  r = raised<InvalidArgument>([&] { PowerSGDState(pg, 1, 1, 2, false, false); });
  check(r.wrong == "no error",
        "PowerSGDState: start 1 is fine without error feedback and warm start", r.text());
}

void powersgd(const ProcessGroupPtr& pg) {
  const int rank = pg->rank();
  // Rank-1 gradients on purpose: every input lies on one direction u, so
  // each rank's weight gradient, and their sum, is (something) u^T.
  torch::manual_seed(3);
  auto u = torch::randn({1, 16});
  torch::manual_seed(11 + rank);
  auto x = torch::randn({5, 1}) * u;
  auto fresh = [] {
    torch::manual_seed(1);
    return mlp({16, 8}, /*bias=*/false);
  };
  auto exact = gradients(pg, fresh(), {}, x);
  std::shared_ptr<PowerSGDState> state;
  auto compressed = gradients(
      pg, fresh(),
      [&](auto& m) {
        state = m->register_comm_hook(PowerSGDState(pg, 1, 0, 2, false, false), powerSGD_hook);
      },
      x);
  check(max_relative(compressed, exact) < 1e-9,
        "powerSGD_hook, rank 1 on rank-1 gradients: the exact average",
        num(max_relative(compressed, exact)));
  check(state->compression_stats().numel_after == 3 * (16 + 8) &&
            state->compression_stats().numel_before == 3 * 16 * 8,
        "compression statistics count what was sent");

  // Batched PowerSGD at full rank (side x side) is exact too.
  auto fresh_small = [] {
    torch::manual_seed(1);
    return mlp({16, 4});  // 64 + 4 = 68 elements: a 9 x 9 matrix
  };
  torch::manual_seed(21 + rank);
  auto x_small = torch::randn({5, 16});
  auto exact_small = gradients(pg, fresh_small(), {}, x_small);
  auto batched = gradients(
      pg, fresh_small(),
      [&](auto& m) {
        m->register_comm_hook(PowerSGDState(pg, 9, 0, 2, false, false), batched_powerSGD_hook);
      },
      x_small);
  check(max_relative(batched, exact_small) < 1e-9,
        "batched_powerSGD_hook at full rank: the exact average",
        num(max_relative(batched, exact_small)));

  // min_compression_rate 2, rank 1: a 4 x 3 weight goes uncompressed
  // ((4 + 3) * 2 >= 12: exact), a 64 x 4 one compressed ((64 + 4) * 2 < 256).
  auto fresh_mixed = [] {
    torch::manual_seed(1);
    torch::nn::Sequential net;
    net->push_back(torch::nn::Linear(torch::nn::LinearOptions(3, 4).bias(false)));
    net->push_back(torch::nn::Linear(torch::nn::LinearOptions(4, 64).bias(false)));
    return net;
  };
  torch::manual_seed(31 + rank);
  auto x3 = torch::randn({4, 3});
  auto exact_mixed = gradients(pg, fresh_mixed(), {}, x3, 1);
  auto mixed = gradients(
      pg, fresh_mixed(),
      [&](auto& m) {
        state = m->register_comm_hook(PowerSGDState(pg, 1, 0, 2, false, false), powerSGD_hook);
      },
      x3, 1);
  auto stats = state->compression_stats();
  check(stats.numel_before == 12 + 256 && stats.numel_after == 12 + 68,
        "min_compression_rate: only the 64 x 4 weight is compressed",
        std::to_string(stats.numel_before) + " -> " + std::to_string(stats.numel_after));
  check(max_relative({mixed[0]}, {exact_mixed[0]}) < 1e-12,
        "uncompressed tensors get the exact average");

  // Error feedback: sum of applied gradients + final error == sum of true
  // gradients (e_t = g_t + e_{t-1} - applied_t), on every rank.
  torch::manual_seed(41 + rank);
  auto xr = torch::randn({6, 16});
  torch::manual_seed(1);
  auto net = mlp({16, 32, 4});
  net->to(at::kDouble);
  torch::manual_seed(1);
  auto twin = mlp({16, 32, 4});  // same weights, no DDP: the true local gradients
  twin->to(at::kDouble);
  DistributedDataParallel model(net, DistributedDataParallelOptions().process_group(pg));
  state = model->register_comm_hook(PowerSGDState(pg, 1, 2, 2, true, true), powerSGD_hook);
  std::vector<torch::Tensor> applied, truth;
  torch::Tensor q_before;
  const void* q_storage = nullptr;
  bool warm_reused = true;
  for (int step = 0; step < 8; ++step) {
    for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();
    for (auto& p : twin->parameters()) p.mutable_grad() = torch::Tensor();
    auto input = xr.to(at::kDouble) * (1 + 0.1 * step);
    model->forward(input).pow(2).sum().backward();
    twin->forward(input).pow(2).sum().backward();
    auto params = model->parameters();
    auto twin_params = twin->parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      if (step < 2) continue;  // vanilla allreduce before start_powerSGD_iter
      if (applied.size() <= i) {
        applied.push_back(torch::zeros_like(params[i]));
        truth.push_back(torch::zeros_like(params[i]));
      }
      applied[i] += params[i].grad();
      truth[i] += twin_params[i].grad();
    }
    if (step >= 2) {
      auto& q = state->q_memory().begin()->second;
      if (q_storage && q.data_ptr() != q_storage) warm_reused = false;
      q_storage = q.data_ptr();
      check(agree_across_ranks(pg, q),
            "step " + std::to_string(step) + ": every rank has the same Q");
    }
  }
  check(warm_reused, "warm start keeps reusing the same Q memory");
  check(state->iter() == 8, "PowerSGDState counts iterations", std::to_string(state->iter()));
  // Mean over ranks of (truth - error) must equal the applied sum.
  torch::Tensor flat_truth =
      torch::cat({truth[0].view(-1), truth[1].view(-1), truth[2].view(-1), truth[3].view(-1)});
  torch::Tensor flat_applied = torch::cat(
      {applied[0].view(-1), applied[1].view(-1), applied[2].view(-1), applied[3].view(-1)});
  // The bucket holds parameters in reverse order; its error is laid out so.
  torch::Tensor error = state->error_memory().begin()->second;
  std::vector<torch::Tensor> error_parts;
  int64_t offset = 0;
  std::vector<torch::Tensor> reversed_params = {truth[3], truth[2], truth[1], truth[0]};
  std::vector<torch::Tensor> errors_in_param_order(4);
  for (int k = 0; k < 4; ++k) {
    errors_in_param_order[3 - k] = error.narrow(0, offset, reversed_params[k].numel()).view(-1);
    offset += reversed_params[k].numel();
  }
  torch::Tensor flat_error = torch::cat(errors_in_param_order);
  torch::Tensor residual = flat_truth - flat_error;
  pg->allreduce(residual)->wait();
  residual /= pg->size();
  double diff = (residual - flat_applied).abs().max().item<double>() /
                flat_applied.abs().max().item<double>();
  check(diff < 1e-9, "error feedback: applied updates + final error == true gradients", num(diff));
}

// Many buckets in flight, many iterations: chained collectives must come in
// the same order on every rank (PyTorch 1.13 aborts here over Gloo).
void many_buckets(const ProcessGroupPtr& pg) {
  torch::manual_seed(1);
  auto net = mlp({64, 256, 256, 256, 256, 256, 256, 10});
  DistributedDataParallel model(
      net,
      DistributedDataParallelOptions().process_group(pg).bucket_cap_mb(0.1).first_bucket_cap_mb(
          0.1));
  model->register_comm_hook(PowerSGDState(pg, 2, 2), powerSGD_hook);
  torch::optim::SGD opt(model->parameters(), 0.01);
  torch::manual_seed(5 + pg->rank());
  for (int step = 0; step < 30; ++step) {
    opt.zero_grad();
    model->forward(torch::randn({16, 64})).pow(2).mean().backward();
    opt.step();
  }
  bool same = true;
  for (auto& p : model->parameters()) same = same && agree_across_ranks(pg, p.detach());
  check(same && model->stats().bucket_count() > 4,
        "PowerSGD with " + std::to_string(model->stats().bucket_count()) +
            " buckets for 30 iterations: no abort, parameters identical on every rank");
}

// A small real task: PowerSGD ranks 2 and 4 and both compress hooks end
// within 5% of uncompressed DDP's loss after the same steps.
void convergence(const ProcessGroupPtr& pg) {
  const int rank = pg->rank(), n = pg->size();
  torch::manual_seed(100);
  auto centers = torch::randn({10, 32}) * 0.3;  // overlapping classes: loss stays well above 0
  auto train = [&](const std::string& name, const Hooked& hook) {
    torch::manual_seed(1);
    auto net = mlp({32, 64, 64, 10});
    DistributedDataParallel model(net, DistributedDataParallelOptions().process_group(pg));
    if (hook) hook(model);
    torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
    double loss_sum = 0;
    const int steps = 120, tail = 20;
    for (int step = 0; step < steps; ++step) {
      auto gen = at::make_generator<at::CPUGeneratorImpl>(1000 + step * n + rank);
      auto labels = torch::randint(0, 10, {32}, gen);
      auto x = centers.index_select(0, labels) + torch::randn({32, 32}, gen);
      opt.zero_grad();
      auto loss = torch::cross_entropy_loss(model->forward(x), labels);
      loss.backward();
      opt.step();
      if (step >= steps - tail) loss_sum += loss.item<double>();
    }
    at::Tensor mean = torch::tensor({loss_sum / tail}, at::kDouble);
    pg->allreduce(mean, ReduceOp::AVG)->wait();
    (void)name;
    return mean.item<double>();
  };
  double plain = train("plain", {});
  struct Case {
    std::string name;
    Hooked hook;
  };
  std::vector<Case> cases = {
      {"fp16_compress_hook", [&](auto& m) { m->register_comm_hook(pg, fp16_compress_hook); }},
      {"bf16_compress_hook", [&](auto& m) { m->register_comm_hook(pg, bf16_compress_hook); }},
      {"powerSGD rank 2",
       [&](auto& m) { m->register_comm_hook(PowerSGDState(pg, 2, 10), powerSGD_hook); }},
      {"powerSGD rank 4",
       [&](auto& m) { m->register_comm_hook(PowerSGDState(pg, 4, 10), powerSGD_hook); }},
  };
  for (auto& c : cases) {
    double loss = train(c.name, c.hook);
    check(loss <= 1.05 * plain,
          "convergence: " + c.name + " final loss " + num(loss) + " vs uncompressed " + num(plain));
  }
}

TEST(CommHooks, DefaultHooksGiveTheirGradients) { default_hooks(this_rank().group); }
TEST(CommHooks, RegistrationErrors) { registration_errors(this_rank().group); }
TEST(CommHooks, PowerSgdLowRankAndErrorFeedback) { powersgd(this_rank().group); }
TEST(CommHooks, ManyBucketsInFlightStayInOrder) { many_buckets(this_rank().group); }
TEST(CommHooks, CompressedTrainingConverges) { convergence(this_rank().group); }

}  // namespace
}  // namespace ddp::testing
