// The models of the evaluation harness, by name: construction, synthetic
// data, loss and a one-line description. The Python twin,
// bench/models/models.py, defines the same models identically (same
// parameter names, shapes and order; same default-initialization order, so
// the same seed gives the same weights); `bench/evaluate.py models` checks
// both against each other.
//
//   mlp         16 x Linear(1024, 1024), ReLU between; MSE against a
//               [batch, 1024] target                      (bench/models/mlp.h)
//   resnet18    ResNet-18, CIFAR stem, 10 classes          (bench/models/resnet.h)
//   resnet50    torchvision's ResNet-50, ImageNet stem, 1000 classes
//   bert_small  BERT encoder + pooler + 2-class classifier: 4 layers, hidden
//               256, 4 heads, FFN 1024, vocab 30522        (bench/models/bert.h)
//   bert_base   the same at BERT-base size: 12 layers, hidden 768, 12 heads,
//               FFN 3072; dropout 0 (see bert.h)
//   mlp4096     16 x Linear(4096, 4096), ReLU between; MSE: the GPU benchmark's
//               model (batch 256)
//
// All but mlp train with cross-entropy. Defaults per rank, and one local
// zero_grad + forward + backward + SGD step on one intra-op thread of the
// 2-core development machine (`ddp_bench models --time`, median of 7; the
// same step in PyTorch, `bench/models/models.py --time`):
//
//   mlp         batch 32                     ~50 ms   (Python ~50 ms)
//   resnet18    batch 8, 3 x 32 x 32         ~0.22 s  (~0.20 s)
//   resnet50    batch 8, 3 x 128 x 128       ~0.75 s  (~0.65 s)
//   bert_small  batch 8, 128 tokens          ~0.23 s  (~0.24 s)
//   bert_base   batch 2, 128 tokens          ~1.45 s  (~1.55 s)
#pragma once

#include <torch/nn/modules/container/any.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ddp_bench {

struct ModelOptions {
  std::string name;        // mlp, resnet18, resnet50, bert_small, bert_base
  int64_t batch = 0;       // samples per rank; 0 = the model's default
  int64_t image_size = 0;  // resnets: input 3 x S x S; 0 = default
  int64_t seq_len = 0;     // berts: tokens per sample; 0 = default
  int64_t seed = 0;        // weights: torch::manual_seed(seed) before construction
};

struct ModelBatch {
  torch::Tensor input, target;
};

// The known names, in the order above.
const std::vector<std::string>& model_names();

// Fills the zeros with the model's defaults (fields that do not apply to the
// model stay as given). std::invalid_argument naming the known models for an
// unknown name, or naming the field for a negative size or a BERT sequence
// longer than its 512 positions.
ModelOptions with_defaults(ModelOptions options);

// torch::manual_seed(options.seed), then the model, in training mode.
// forward(Tensor) -> Tensor: outputs (mlp) or logits.
torch::nn::AnyModule make_model(const ModelOptions& options);

// torch::manual_seed(data_seed), then one batch (defaults filled in):
//   mlp     input randn [batch, W], target randn [batch, W] (W 1024; 4096 for mlp4096)
//   resnet  input randn [batch, 3, S, S], target randint [batch] in [0, classes)
//           (10 classes for resnet18, 1000 for resnet50)
//   bert    input randint int64 token ids [batch, seq] in [0, 30522),
//           target randint [batch] in {0, 1}
ModelBatch make_batch(const ModelOptions& options, uint64_t data_seed);

// MSE for mlp, cross-entropy (mean over the batch) for the others.
torch::Tensor model_loss(const ModelOptions& options, const torch::Tensor& output,
                         const torch::Tensor& target);

// One line, defaults filled in: "resnet50, batch 4/rank, 3x64x64 images".
std::string describe(const ModelOptions& options);

}  // namespace ddp_bench
