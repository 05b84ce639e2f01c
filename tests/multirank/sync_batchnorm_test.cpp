// SyncBatchNorm on N ranks equals BatchNorm in one process on the
// concatenated batch: outputs, input gradients, parameter gradients (summed
// over ranks) and running statistics, over several steps; world 1-4, uneven
// batches including empty ones, 1d/2d/3d, float64 and float32.
#include "spawn.h"

#include <ddp/ddp.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <numeric>

namespace ddp::testing {
namespace {

double tolerance(torch::Dtype dtype) { return dtype == torch::kFloat64 ? 1e-10 : 1e-5; }

void expect_close(const torch::Tensor& got, const torch::Tensor& want, double tol,
                  const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  if (got.numel() == 0) return;
  const double diff = (got.to(torch::kDouble) - want.to(torch::kDouble)).abs().max().item<double>();
  EXPECT_LE(diff, tol) << what;
}

std::vector<torch::Tensor> defined(const std::vector<torch::Tensor>& ts) {
  std::vector<torch::Tensor> out;
  for (const auto& t : ts) {
    if (t.defined()) out.push_back(t);
  }
  return out;
}

// Input shape for `n` samples of a BatchNorm of `dims` (1 with a length).
std::vector<int64_t> shape(int dims, int64_t n, int64_t c) {
  switch (dims) {
    case 1:
      return {n, c, 3};
    case 2:
      return {n, c, 3, 2};
    default:
      return {n, c, 2, 2, 2};
  }
}

std::shared_ptr<torch::nn::Module> batchnorm(int dims, const torch::nn::BatchNormOptions& o) {
  if (dims == 1) return torch::nn::BatchNorm1d(o).ptr();
  if (dims == 2) return torch::nn::BatchNorm2d(o).ptr();
  return torch::nn::BatchNorm3d(o).ptr();
}

struct Case {
  std::vector<int64_t> split;  // samples per rank
  int dims;
  torch::Dtype dtype;
  c10::optional<double> momentum;
  bool affine;
};

std::string name_of(const Case& c) {
  std::string s =
      std::to_string(c.dims) + "d " + (c.dtype == torch::kFloat64 ? "f64" : "f32") + " split";
  for (auto n : c.split) s += " " + std::to_string(n);
  return s + (c.momentum ? "" : " cumulative") + (c.affine ? "" : " no-affine");
}

void run_case(const Case& c) {
  const int world = static_cast<int>(c.split.size());
  const int64_t channels = 3, steps = 3;
  const int64_t total = std::accumulate(c.split.begin(), c.split.end(), int64_t{0});
  const auto options = torch::nn::BatchNormOptions(channels).momentum(c.momentum).affine(c.affine);
  const auto topt = torch::TensorOptions().dtype(c.dtype);

  // The reference: one BatchNorm on the whole batch, loss sum(y * g).
  torch::manual_seed(7);
  auto reference = batchnorm(c.dims, options);
  reference->to(c.dtype);
  if (c.affine) {
    torch::NoGradGuard g;
    reference->named_parameters()["weight"].uniform_(0.5, 1.5);
    reference->named_parameters()["bias"].uniform_(-0.5, 0.5);
  }
  const auto initial = reference->named_parameters();
  std::vector<torch::Tensor> xs, gs, ys, dxs;
  std::vector<std::vector<torch::Tensor>> param_grads, buffers;
  for (int64_t s = 0; s < steps; ++s) {
    auto x = (torch::randn(shape(c.dims, total, channels), topt) * 2 + 3).requires_grad_();
    auto g = torch::randn(shape(c.dims, total, channels), topt);
    torch::Tensor y;
    if (c.dims == 1)
      y = std::dynamic_pointer_cast<torch::nn::BatchNorm1dImpl>(reference)->forward(x);
    if (c.dims == 2)
      y = std::dynamic_pointer_cast<torch::nn::BatchNorm2dImpl>(reference)->forward(x);
    if (c.dims == 3)
      y = std::dynamic_pointer_cast<torch::nn::BatchNorm3dImpl>(reference)->forward(x);
    for (auto& p : defined(reference->parameters())) p.mutable_grad() = torch::Tensor();
    (y * g).sum().backward();
    xs.push_back(x.detach());
    gs.push_back(g);
    ys.push_back(y.detach());
    dxs.push_back(x.grad());
    std::vector<torch::Tensor> pg;
    for (auto& p : defined(reference->parameters())) pg.push_back(p.grad().clone());
    param_grads.push_back(pg);
    std::vector<torch::Tensor> b;
    for (auto& t : reference->buffers()) b.push_back(t.clone());
    buffers.push_back(b);
  }

  spawn(world, [&](int rank, StorePtr store) {
    auto pg = make_group(store, rank, world);
    SyncBatchNorm bn(std::make_shared<SyncBatchNormImpl>(options, pg, c.dims));
    bn->to(c.dtype);
    {
      torch::NoGradGuard g;
      for (auto& item : initial) {
        if (item.value().defined()) bn->named_parameters()[item.key()].copy_(item.value());
      }
    }
    const int64_t begin = std::accumulate(c.split.begin(), c.split.begin() + rank, int64_t{0});
    const int64_t n = c.split[rank];
    const auto where = name_of(c) + ", rank " + std::to_string(rank);
    for (int64_t s = 0; s < steps; ++s) {
      auto x = xs[s].narrow(0, begin, n).clone().requires_grad_();
      auto y = bn(x);
      for (auto& p : defined(bn->parameters())) p.mutable_grad() = torch::Tensor();
      (y * gs[s].narrow(0, begin, n)).sum().backward();
      const auto tol = tolerance(c.dtype);
      const auto at = where + ", step " + std::to_string(s);
      expect_close(y, ys[s].narrow(0, begin, n), tol, at + ": output");
      expect_close(x.grad(), dxs[s].narrow(0, begin, n), tol, at + ": input gradient");
      const auto params = defined(bn->parameters());
      ASSERT_EQ(params.size(), param_grads[s].size());
      for (size_t i = 0; i < params.size(); ++i) {
        auto sum = params[i].grad().clone();
        pg->allreduce(sum)->wait();
        // Summed over up to 4 ranks: the float32 sums' rounding grows with them.
        expect_close(sum, param_grads[s][i], tol * 4,
                     at + ": parameter gradient " + std::to_string(i));
      }
      const auto bufs = bn->buffers();
      ASSERT_EQ(bufs.size(), buffers[s].size());
      for (size_t i = 0; i < bufs.size(); ++i) {
        expect_close(bufs[i], buffers[s][i], tol, at + ": buffer " + std::to_string(i));
      }
    }
  });
}

TEST(SyncBatchNorm, EqualsBatchNormOnTheConcatenatedBatch) {
  const std::vector<std::vector<int64_t>> splits = {{6}, {2, 5}, {0, 6}, {3, 0, 4}, {1, 2, 0, 4}};
  for (const auto& split : splits) {
    for (int dims : {1, 2, 3}) {
      for (auto dtype : {torch::kFloat64, torch::kFloat32}) {
        run_case({split, dims, dtype, 0.1, true});
      }
    }
    run_case({split, 2, torch::kFloat64, c10::nullopt, true});
    run_case({split, 1, torch::kFloat32, 0.3, false});
  }
}

}  // namespace
}  // namespace ddp::testing
