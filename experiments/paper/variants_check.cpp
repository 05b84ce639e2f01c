// The check of `paper_bench variants`: after training, every variant's
// parameters must be the same on every rank, and the accumulating variants'
// the same as simple_ga's (the same arithmetic up to summation order).
#include "variants_bench.h"

#include <algorithm>

namespace ddp_bench {
namespace {

// Per parameter tensor: sum, sum of squares, and sum of p[i]·(i mod 13 + 1)
// (a permutation of elements changes it), in float64.
at::Tensor checksums(const std::vector<torch::Tensor>& params) {
  std::vector<at::Tensor> parts;
  torch::NoGradGuard no_grad;
  for (const auto& p : params) {
    at::Tensor x = p.detach().flatten().to(torch::kDouble);
    at::Tensor w = torch::arange(x.numel(), torch::kLong).remainder(13).add(1).to(torch::kDouble);
    parts.push_back(torch::stack({x.sum(), (x * x).sum(), (x * w).sum()}));
  }
  return torch::cat(parts).contiguous();
}

}  // namespace

void check_final_parameters(ddp::ProcessGroup& pg, const ModelOptions& model,
                            std::vector<std::unique_ptr<VariantRun>>& runs) {
  const VariantRun* ref = nullptr;
  for (auto& run : runs) {
    if (run->name == "simple_ga") ref = run.get();
  }
  // How far training moved simple_ga's parameters: the scale of a real
  // difference (the initial ones again from the same seed).
  double trained = 0;
  if (ref) {
    torch::NoGradGuard no_grad;
    torch::nn::AnyModule initial = make_model(model);
    const auto& now = ref->variant->parameters();
    size_t i = 0;
    for (const auto& item : initial.ptr()->named_parameters()) {
      if (!item.value().requires_grad()) continue;
      trained = std::max(trained, (now[i++] - item.value()).abs().max().item<double>());
    }
  }
  for (auto& run : runs) {
    at::Tensor c = checksums(run->variant->parameters());
    at::Tensor hi = c.clone(), lo = c.clone();
    pg.allreduce(hi, ddp::ReduceOp::MAX)->wait();
    pg.allreduce(lo, ddp::ReduceOp::MIN)->wait();
    run->ranks_agree = torch::equal(hi, lo);
    run->checksum_spread = (hi - lo).abs().max().item<double>();
    if (ref && run->name != "simple") {
      torch::NoGradGuard no_grad;
      double diff = 0;
      const auto& mine = run->variant->parameters();
      const auto& theirs = ref->variant->parameters();
      for (size_t i = 0; i < mine.size(); ++i) {
        diff = std::max(diff, (mine[i] - theirs[i]).abs().max().item<double>());
      }
      at::Tensor d = torch::tensor({diff, trained}, torch::kDouble);
      pg.allreduce(d, ddp::ReduceOp::MAX)->wait();
      run->diff_vs_ref = d[0].item<double>();
      run->ref_scale = d[1].item<double>();
    }
  }
}

}  // namespace ddp_bench
