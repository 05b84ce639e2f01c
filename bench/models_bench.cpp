// `ddp_bench models`: the models of bench/models/models.h, alone, in one
// process (no launcher): --print lists a model's parameters with a checksum of
// their initial values, in the format of `bench/models/models.py --print`
// (`bench/evaluate.py models` diffs the two).
#include "models/models.h"
#include "subcommands.h"

#include <torch/torch.h>

#include <cstdio>

namespace ddp_bench {

const char* const kModelsUsage = R"(usage: ddp_bench models --print NAME [--seed S]
The models of the evaluation harness (bench/models/models.h), in one process,
no launcher: one line per parameter, "index name [d0, d1, ...] checksum"
(checksum: the sum of its initial values in float64, %.9e), then "total N
parameters in T tensors"; the same format as `python3 bench/models/models.py
--print NAME` (`bench/evaluate.py models` compares the two).

  --seed S       weights: torch::manual_seed(S) before construction (default 0)
models: mlp, resnet18, resnet50, bert_small, bert_base
)";

namespace {

int print_params(const ModelOptions& o) {
  torch::NoGradGuard no_grad;
  auto model = make_model(o);
  int64_t index = 0, total = 0;
  for (const auto& item : model.ptr()->named_parameters()) {
    const auto& p = item.value();
    std::string shape;
    for (auto d : p.sizes()) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
    std::printf("%lld %s [%s] %.9e\n", static_cast<long long>(index++), item.key().c_str(),
                shape.c_str(), p.to(torch::kFloat64).sum().item<double>());
    total += p.numel();
  }
  std::printf("total %lld parameters in %lld tensors\n", static_cast<long long>(total),
              static_cast<long long>(index));
  return 0;
}

}  // namespace

ModelOptions take_model_options(Args& args, const std::string& default_name) {
  ModelOptions o;
  o.name = args.take("--model").value_or(default_name);
  if (o.name.empty()) throw UsageError("--model is required, e.g. --model mlp");
  o.batch = args.take_int("--batch", 1, 1 << 20).value_or(0);
  o.image_size = args.take_int("--image-size", 8, 4096).value_or(0);
  o.seq_len = args.take_int("--seq-len", 1, 1 << 20).value_or(0);
  o.seed = args.take_int("--seed", 0, int64_t{1} << 40).value_or(0);
  try {
    return with_defaults(o);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
}

int run_models(Args args) {
  ModelOptions o;
  o.name = args.take("--print").value_or("");
  o.seed = args.take_int("--seed", 0, int64_t{1} << 40).value_or(0);
  args.expect_empty();
  if (o.name.empty()) throw UsageError("--print NAME is required");
  torch::set_num_threads(1);
  limit_openblas_threads(1);
  try {
    return print_params(with_defaults(o));
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
}

}  // namespace ddp_bench
