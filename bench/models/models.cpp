#include "models.h"

#include "bert.h"
#include "mlp.h"
#include "resnet.h"

#include <torch/torch.h>

#include <algorithm>
#include <stdexcept>

namespace ddp_bench {
namespace {

struct ModelInfo {
  const char* name;
  int64_t batch, image_size, seq_len;  // defaults (0: not applicable)
};

// Keep in step with DEFAULTS in bench/models/models.py.
const ModelInfo kModels[] = {
    {"mlp", 32, 0, 0},         {"resnet18", 8, 32, 0},   {"resnet50", 8, 128, 0},
    {"bert_small", 8, 0, 128}, {"bert_base", 2, 0, 128}, {"mlp4096", 256, 0, 0},
};

// The mlps' width: 1024, or 4096 for mlp4096 (the GPU benchmark's).
int64_t mlp_width(const std::string& name) { return name == "mlp4096" ? 4096 : 1024; }
bool is_mlp(const std::string& name) { return name == "mlp" || name == "mlp4096"; }

bool is_resnet(const std::string& name) { return name == "resnet18" || name == "resnet50"; }
bool is_bert(const std::string& name) { return name == "bert_small" || name == "bert_base"; }

models::BertConfig bert_config(const std::string& name) {
  return name == "bert_base" ? models::BertConfig::base() : models::BertConfig::small();
}

int64_t resnet_classes(const std::string& name) { return name == "resnet50" ? 1000 : 10; }

const ModelInfo& info(const std::string& name) {
  for (const auto& m : kModels) {
    if (name == m.name) return m;
  }
  std::string known;
  for (const auto& n : model_names()) known += (known.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown model '" + name + "' (known: " + known + ")");
}

}  // namespace

const std::vector<std::string>& model_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& m : kModels) v.emplace_back(m.name);
    return v;
  }();
  return names;
}

ModelOptions with_defaults(ModelOptions o) {
  const ModelInfo& m = info(o.name);
  auto fill = [&](int64_t& field, int64_t def, const char* what) {
    if (field < 0) {
      throw std::invalid_argument(o.name + ": " + what + " must be positive, got " +
                                  std::to_string(field));
    }
    if (field == 0) field = def;
  };
  fill(o.batch, m.batch, "batch");
  fill(o.image_size, m.image_size, "image_size");
  fill(o.seq_len, m.seq_len, "seq_len");
  if (is_bert(o.name) && o.seq_len > bert_config(o.name).max_positions) {
    throw std::invalid_argument(o.name + ": seq_len " + std::to_string(o.seq_len) +
                                " exceeds its " +
                                std::to_string(bert_config(o.name).max_positions) + " positions");
  }
  return o;
}

torch::nn::AnyModule make_model(const ModelOptions& options) {
  const ModelOptions o = with_defaults(options);
  torch::manual_seed(static_cast<uint64_t>(o.seed));
  if (is_mlp(o.name)) return torch::nn::AnyModule(models::Mlp(16, mlp_width(o.name)));
  if (o.name == "resnet18") return torch::nn::AnyModule(models::ResNet18(resnet_classes(o.name)));
  if (o.name == "resnet50") return torch::nn::AnyModule(models::ResNet50(resnet_classes(o.name)));
  return torch::nn::AnyModule(models::BertForSequenceClassification(bert_config(o.name)));
}

ModelBatch make_batch(const ModelOptions& options, uint64_t data_seed) {
  const ModelOptions o = with_defaults(options);
  torch::manual_seed(data_seed);
  ModelBatch b;
  if (is_mlp(o.name)) {
    b.input = torch::randn({o.batch, mlp_width(o.name)});
    b.target = torch::randn({o.batch, mlp_width(o.name)});
  } else if (is_resnet(o.name)) {
    b.input = torch::randn({o.batch, 3, o.image_size, o.image_size});
    b.target = torch::randint(0, resnet_classes(o.name), {o.batch}, torch::kLong);
  } else {
    const auto c = bert_config(o.name);
    b.input = torch::randint(0, c.vocab_size, {o.batch, o.seq_len}, torch::kLong);
    b.target = torch::randint(0, c.classes, {o.batch}, torch::kLong);
  }
  return b;
}

torch::Tensor model_loss(const ModelOptions& options, const torch::Tensor& output,
                         const torch::Tensor& target) {
  if (is_mlp(options.name)) return torch::mse_loss(output, target);
  info(options.name);  // unknown name: the same error as everywhere
  return torch::nn::functional::cross_entropy(output, target);
}

std::string describe(const ModelOptions& options) {
  const ModelOptions o = with_defaults(options);
  std::string s = o.name + ", batch " + std::to_string(o.batch) + "/rank, ";
  if (is_mlp(o.name)) return s + std::to_string(mlp_width(o.name)) + " features";
  if (is_resnet(o.name)) {
    const auto n = std::to_string(o.image_size);
    return s + "3x" + n + "x" + n + " images";
  }
  return s + std::to_string(o.seq_len) + " tokens";
}

}  // namespace ddp_bench
