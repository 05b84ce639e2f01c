// The MLP of the evaluation harness (twin: make_mlp in bench/models/models.py).
//
//   mlp  16 x Linear(1024, 1024), ReLU between (not after the last);
//        input [batch, 1024], MSE loss against a [batch, 1024] target.
//
// Parameters are named as PyTorch's nn.Sequential(Linear, ReLU, Linear, ...)
// names them: "0.weight", "0.bias", "2.weight", ... (torch::nn::Sequential
// itself has a template forward, which AnyModule, and so
// DistributedDataParallel, cannot hold). Default initialization, in layer
// order, draws exactly as PyTorch's does.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

namespace ddp_bench {
namespace models {

class MlpImpl : public torch::nn::Module {
 public:
  explicit MlpImpl(int layers = 16, int64_t width = 1024) {
    for (int i = 0; i < layers; ++i) {
      layers_.push_back(register_module(std::to_string(2 * i), torch::nn::Linear(width, width)));
    }
  }

  torch::Tensor forward(torch::Tensor x) {
    for (size_t i = 0; i < layers_.size(); ++i) {
      x = layers_[i]->forward(x);
      if (i + 1 < layers_.size()) x = torch::relu(x);
    }
    return x;
  }

 private:
  std::vector<torch::nn::Linear> layers_;
};
TORCH_MODULE(Mlp);

}  // namespace models
}  // namespace ddp_bench
