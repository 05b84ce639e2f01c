// The ResNets of the evaluation harness (twins: BasicBlock, ResNet18,
// Bottleneck, ResNet50 in bench/models/models.py). Same modules, same
// registration order (so the same parameter names, shapes and order), same
// construction order (so, from one seed, the same default-initialized weights).
//
//   resnet18  ResNet-18 (BasicBlocks [2, 2, 2, 2], channels 64-512,
//             BatchNorm, 1x1-conv downsample) with a CIFAR-style stem (3x3
//             conv, stride 1, no max-pool) for 3 x S x S images, 10 classes.
//   resnet50  torchvision's resnet50() structure and parameter names
//             (Bottleneck [3, 4, 6, 3], expansion 4, stride on the 3x3 conv
//             ("ResNet v1.5"), ImageNet stem: 7x7/2 conv, BN, ReLU, 3x3/2
//             max-pool; 1000 classes): 25,557,032 parameters. Initialization
//             is the modules' defaults (kaiming_uniform(a=sqrt(5)) for convs,
//             BN weight 1 / bias 0), not torchvision's kaiming_normal re-init,
//             and each block builds its downsample after its own layers
//             (torchvision builds it first): only the draws differ, not the
//             structure.
#pragma once

#include <torch/torch.h>

#include <string>

namespace ddp_bench {
namespace models {

class BasicBlockImpl : public torch::nn::Module {
 public:
  BasicBlockImpl(int64_t in, int64_t out, int64_t stride) {
    using torch::nn::Conv2dOptions;
    conv1_ = register_module(
        "conv1",
        torch::nn::Conv2d(Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false)));
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
      layers_[i] =
          register_module("layer" + std::to_string(i + 1), torch::nn::Sequential(first, second));
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

// torchvision's Bottleneck: 1x1 (in -> width), 3x3 (stride), 1x1 (width ->
// 4 * width), each followed by BN; ReLU after the sum with the shortcut.
class BottleneckImpl : public torch::nn::Module {
 public:
  static constexpr int64_t kExpansion = 4;

  BottleneckImpl(int64_t in, int64_t width, int64_t stride) {
    using torch::nn::Conv2dOptions;
    const int64_t out = width * kExpansion;
    conv1_ = register_module("conv1", torch::nn::Conv2d(Conv2dOptions(in, width, 1).bias(false)));
    bn1_ = register_module("bn1", torch::nn::BatchNorm2d(width));
    conv2_ = register_module(
        "conv2",
        torch::nn::Conv2d(Conv2dOptions(width, width, 3).stride(stride).padding(1).bias(false)));
    bn2_ = register_module("bn2", torch::nn::BatchNorm2d(width));
    conv3_ = register_module("conv3", torch::nn::Conv2d(Conv2dOptions(width, out, 1).bias(false)));
    bn3_ = register_module("bn3", torch::nn::BatchNorm2d(out));
    if (stride != 1 || in != out) {
      torch::nn::Conv2d conv(Conv2dOptions(in, out, 1).stride(stride).bias(false));
      torch::nn::BatchNorm2d bn(out);
      downsample_ = register_module("downsample", torch::nn::Sequential(conv, bn));
    }
  }

  torch::Tensor forward(torch::Tensor x) {
    auto out = torch::relu(bn1_->forward(conv1_->forward(x)));
    out = torch::relu(bn2_->forward(conv2_->forward(out)));
    out = bn3_->forward(conv3_->forward(out));
    return torch::relu(out + (downsample_ ? downsample_->forward(x) : x));
  }

 private:
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr}, conv3_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr}, bn2_{nullptr}, bn3_{nullptr};
  torch::nn::Sequential downsample_{nullptr};
};
TORCH_MODULE(Bottleneck);

class ResNet50Impl : public torch::nn::Module {
 public:
  explicit ResNet50Impl(int64_t classes = 1000) {
    using torch::nn::Conv2dOptions;
    conv1_ = register_module(
        "conv1", torch::nn::Conv2d(Conv2dOptions(3, 64, 7).stride(2).padding(3).bias(false)));
    bn1_ = register_module("bn1", torch::nn::BatchNorm2d(64));
    const int64_t widths[] = {64, 128, 256, 512};
    const int blocks[] = {3, 4, 6, 3};
    int64_t in = 64;
    for (int i = 0; i < 4; ++i) {
      torch::nn::Sequential layer;
      for (int b = 0; b < blocks[i]; ++b) {
        layer->push_back(Bottleneck(in, widths[i], b == 0 && i > 0 ? 2 : 1));
        in = widths[i] * BottleneckImpl::kExpansion;
      }
      layers_[i] = register_module("layer" + std::to_string(i + 1), layer);
    }
    fc_ = register_module("fc", torch::nn::Linear(512 * BottleneckImpl::kExpansion, classes));
  }

  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(bn1_->forward(conv1_->forward(x)));
    x = torch::max_pool2d(x, /*kernel_size=*/{3, 3}, /*stride=*/{2, 2}, /*padding=*/{1, 1});
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
TORCH_MODULE(ResNet50);

}  // namespace models
}  // namespace ddp_bench
