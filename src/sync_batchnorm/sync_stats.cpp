// SyncBatchNorm's statistics and the autograd Function (see sync_stats.h).
// Sums are taken in float64 whatever the input dtype: float32 sums of a large
// batch lose digits, and E[x^2] - mean^2 magnifies that loss.
#include "sync_batchnorm/sync_stats.h"

#include <ddp/errors.h>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/custom_class.h>

#include <sstream>
#include <vector>

namespace ddp::detail {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// (1, C, 1): broadcasts a per-channel vector over an (N, C, L) tensor.
at::Tensor per_channel(const at::Tensor& v) { return v.reshape({1, -1, 1}); }

// Carries the group from forward to backward through ctx->saved_data.
struct GroupCapsule : torch::CustomClassHolder {
  explicit GroupCapsule(ProcessGroupPtr g) : group(std::move(g)) {}
  ProcessGroupPtr group;
};

struct SyncBatchNormFunction : torch::autograd::Function<SyncBatchNormFunction> {
  // weight and bias are optional: undefined tensors cannot be Function inputs.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input,
                            const c10::optional<at::Tensor>& weight_or_none,
                            const c10::optional<at::Tensor>& bias_or_none, const at::Tensor& mean,
                            const at::Tensor& invstd, double count, ProcessGroupPtr group,
                            bool contribute) {
    const at::Tensor weight = weight_or_none.value_or(at::Tensor());
    const at::Tensor bias = bias_or_none.value_or(at::Tensor());
    // y = x * alpha + beta per channel, as ATen's CPU batch norm computes it.
    at::Tensor alpha = weight.defined() ? invstd * weight.to(at::kDouble) : invstd;
    at::Tensor beta = -mean * alpha;
    if (bias.defined()) beta = beta + bias.to(at::kDouble);
    const auto dtype = input.scalar_type();
    at::Tensor out = at::addcmul(per_channel(beta.to(dtype)), input, per_channel(alpha.to(dtype)));
    ctx->save_for_backward({input, weight, mean, invstd});
    ctx->saved_data["count"] = count;
    ctx->saved_data["contribute"] = contribute;
    ctx->saved_data["group"] =
        c10::IValue::make_capsule(c10::make_intrusive<GroupCapsule>(std::move(group)));
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& input = saved[0];
    const at::Tensor& weight = saved[1];
    const at::Tensor& mean = saved[2];
    const at::Tensor& invstd = saved[3];
    const double count = ctx->saved_data["count"].toDouble();
    const int64_t c = input.size(1);
    at::Tensor dy =
        grads[0].defined() ? grads[0].to(at::kDouble) : at::zeros_like(input, at::kDouble);
    at::Tensor xmu = input.to(at::kDouble) - per_channel(mean);

    // This rank's sums: they give the parameter gradients (kept local; DDP
    // averages them) and, summed over ranks, the input gradient.
    const std::vector<int64_t> dims = {0, 2};
    const at::Tensor sum_dy = dy.sum(dims);
    const at::Tensor sum_dy_xmu = (dy * xmu).sum(dims);

    at::Tensor grad_input, grad_weight, grad_bias;
    if (weight.defined() && ctx->needs_input_grad(1)) {
      grad_weight = (sum_dy_xmu * invstd).to(weight.scalar_type());
    }
    if (weight.defined() && ctx->needs_input_grad(2)) grad_bias = sum_dy.to(weight.scalar_type());
    if (ctx->needs_input_grad(0)) {
      at::Tensor global = at::cat({sum_dy, sum_dy_xmu});
      if (!ctx->saved_data["contribute"].toBool()) global.zero_();
      auto capsule = ctx->saved_data["group"].toCapsule();
      allreduce_batch_stats(*static_cast<GroupCapsule*>(capsule.get())->group, global);
      at::Tensor mean_dy = global.narrow(0, 0, c) / count;
      at::Tensor mean_dy_xmu = global.narrow(0, c, c) / count;
      at::Tensor scale = weight.defined() ? invstd * weight.to(at::kDouble) : invstd;
      // dx = (dy - mean(dy) - (x - mean) * invstd^2 * mean(dy * (x - mean))) * invstd * w
      at::Tensor proj = per_channel(invstd * invstd * mean_dy_xmu);
      grad_input =
          ((dy - per_channel(mean_dy) - xmu * proj) * per_channel(scale)).to(input.scalar_type());
    }
    return {grad_input,   grad_weight,  grad_bias,    at::Tensor(),
            at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

void allreduce_batch_stats(ProcessGroup& group, const at::Tensor& stats) {
  group.allreduce(stats, ReduceOp::SUM)->wait();
}

BatchStats global_batch_stats(ProcessGroup& group, const at::Tensor& input,
                              const std::string& layer, bool contribute) {
  const int64_t c = input.size(1);
  at::Tensor x = input.detach().to(at::kDouble);
  const std::vector<int64_t> dims = {0, 2};
  const double count = static_cast<double>(input.size(0) * input.size(2));
  at::Tensor stats = at::cat({x.sum(dims), (x * x).sum(dims), at::full({1}, count, x.options())});
  if (!contribute) stats.zero_();
  allreduce_batch_stats(group, stats);

  BatchStats out;
  out.count = stats[2 * c].item<double>();
  if (out.count <= 1) {
    std::ostringstream msg;
    msg << "expected more than 1 value per channel over all ranks when training, got " << out.count
        << " (this rank's input has shape " << input.sizes()
        << " as (N, C, L)); ranks may hold empty batches, but the global batch needs at least "
           "two values per channel (or call eval())";
    throw InvalidArgument(group.error_context(layer), msg.str());
  }
  out.mean = stats.narrow(0, 0, c) / out.count;
  out.var = (stats.narrow(0, c, c) / out.count - out.mean * out.mean).clamp_min(0);
  return out;
}

at::Tensor sync_batch_norm(const at::Tensor& input, const at::Tensor& weight,
                           const at::Tensor& bias, const at::Tensor& mean, const at::Tensor& invstd,
                           double count, ProcessGroupPtr group, bool contribute) {
  const auto optional = [](const at::Tensor& t) {
    return t.defined() ? c10::optional<at::Tensor>(t) : c10::nullopt;
  };
  return SyncBatchNormFunction::apply(input, optional(weight), optional(bias), mean, invstd, count,
                                      std::move(group), contribute);
}

}  // namespace ddp::detail
