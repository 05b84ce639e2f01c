// The models of `ddp_bench train`, defined exactly as in
// bench/pytorch_ddp_train.py: same modules, same registration order (so the
// same parameter names, shapes and order), same default initialization, so
// that with the same seed both sides start from the same weights.
//
//   mlp      16 x Linear(1024, 1024), ReLU between (not after the last);
//            input [batch, 1024], MSE loss against a [batch, 1024] target.
//   resnet18 ResNet-18 (BasicBlocks [2, 2, 2, 2], channels 64-512,
//            BatchNorm, 1x1-conv downsample) with a CIFAR-style stem (3x3
//            conv, stride 1, no max-pool) for 3 x S x S images, 10 classes;
//            cross-entropy loss.
#pragma once

#include <torch/torch.h>

#include <string>

namespace ddp_bench {

class BasicBlockImpl : public torch::nn::Module {
 public:
  BasicBlockImpl(int64_t in, int64_t out, int64_t stride) {
    using torch::nn::Conv2dOptions;
    conv1_ = register_module(
        "conv1", torch::nn::Conv2d(Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false)));
    bn1_ = register_module("bn1", torch::nn::BatchNorm2d(out));
    conv2_ = register_module(
        "conv2", torch::nn::Conv2d(Conv2dOptions(out, out, 3).stride(1).padding(1).bias(false)));
    bn2_ = register_module("bn2", torch::nn::BatchNorm2d(out));
    if (stride != 1 || in != out) {
      torch::nn::Conv2d conv(Conv2dOptions(in, out, 1).stride(stride).bias(false));
      torch::nn::BatchNorm2d bn(out);
      downsample_ = register_module("downsample", torch::nn::Sequential(conv, bn));
    }
  }

  torch::Tensor forward(torch::Tensor x) {
    auto out = torch::relu(bn1_->forward(conv1_->forward(x)));
    out = bn2_->forward(conv2_->forward(out));
    return torch::relu(out + (downsample_ ? downsample_->forward(x) : x));
  }

 private:
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr}, bn2_{nullptr};
  torch::nn::Sequential downsample_{nullptr};
};
TORCH_MODULE(BasicBlock);

class ResNet18Impl : public torch::nn::Module {
 public:
  explicit ResNet18Impl(int64_t classes = 10) {
    using torch::nn::Conv2dOptions;
    conv1_ = register_module(
        "conv1", torch::nn::Conv2d(Conv2dOptions(3, 64, 3).stride(1).padding(1).bias(false)));
    bn1_ = register_module("bn1", torch::nn::BatchNorm2d(64));
    const int64_t channels[] = {64, 128, 256, 512};
    int64_t in = 64;
    for (int i = 0; i < 4; ++i) {
      const int64_t c = channels[i];
      // One after the other: the initialization draws from the generator in
      // construction order (function arguments have no evaluation order).
      BasicBlock first(in, c, i == 0 ? 1 : 2);
      BasicBlock second(c, c, 1);
      layers_[i] = register_module("layer" + std::to_string(i + 1),
                                   torch::nn::Sequential(first, second));
      in = c;
    }
    fc_ = register_module("fc", torch::nn::Linear(512, classes));
  }

  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(bn1_->forward(conv1_->forward(x)));
    for (auto& layer : layers_) x = layer->forward(x);
    x = torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1);
    return fc_->forward(x);
  }

 private:
  torch::nn::Conv2d conv1_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr};
  torch::nn::Sequential layers_[4] = {nullptr, nullptr, nullptr, nullptr};
  torch::nn::Linear fc_{nullptr};
};
TORCH_MODULE(ResNet18);

// Named as PyTorch's nn.Sequential(Linear, ReLU, Linear, ...) names them:
// "0.weight", "0.bias", "2.weight", ... (torch::nn::Sequential itself has a
// template forward, which AnyModule, and so DistributedDataParallel, cannot
// hold).
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

}  // namespace ddp_bench
