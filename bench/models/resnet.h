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

// What the residual blocks share: the shortcut, a 1x1 conv and BN
// ("downsample", registered after the block's own layers) where the block
// changes the shape, else the identity.
class ResidualBlockImpl : public torch::nn::Module {
 protected:
  void register_downsample(int64_t in, int64_t out, int64_t stride) {
    if (stride == 1 && in == out) return;
    torch::nn::Conv2d conv(torch::nn::Conv2dOptions(in, out, 1).stride(stride).bias(false));
    torch::nn::BatchNorm2d bn(out);
    downsample_ = register_module("downsample", torch::nn::Sequential(conv, bn));
  }
  // The block's output: ReLU of its last layer's `out` plus the shortcut of `x`.
  torch::Tensor add_shortcut(const torch::Tensor& out, const torch::Tensor& x) {
    return torch::relu(out + (downsample_ ? downsample_->forward(x) : x));
  }

 private:
  torch::nn::Sequential downsample_{nullptr};
};

class BasicBlockImpl : public ResidualBlockImpl {
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
    register_downsample(in, out, stride);
  }

  torch::Tensor forward(torch::Tensor x) {
    auto out = torch::relu(bn1_->forward(conv1_->forward(x)));
    return add_shortcut(bn2_->forward(conv2_->forward(out)), x);
  }

 private:
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr}, bn2_{nullptr};
};
TORCH_MODULE(BasicBlock);

// torchvision's Bottleneck: 1x1 (in -> width), 3x3 (stride), 1x1 (width ->
// 4 * width), each followed by BN; ReLU after the sum with the shortcut.
class BottleneckImpl : public ResidualBlockImpl {
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
    register_downsample(in, out, stride);
  }

  torch::Tensor forward(torch::Tensor x) {
    auto out = torch::relu(bn1_->forward(conv1_->forward(x)));
    out = torch::relu(bn2_->forward(conv2_->forward(out)));
    return add_shortcut(bn3_->forward(conv3_->forward(out)), x);
  }

 private:
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr}, conv3_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr}, bn2_{nullptr}, bn3_{nullptr};
};
TORCH_MODULE(Bottleneck);

// What the ResNets share: the stem (conv1 from 3 to kStemChannels channels,
// bn1, ReLU; then a 3x3/2 max-pool where `max_pool`), four stages
// layer1..layer4 of kWidths that the subclass registers, global average
// pooling and the classifier fc.
class ResNetImpl : public torch::nn::Module {
 public:
  static constexpr int64_t kStemChannels = 64;
  static constexpr int64_t kWidths[4] = {64, 128, 256, 512};

  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(bn1_->forward(conv1_->forward(x)));
    if (max_pool_) {
      x = torch::max_pool2d(x, /*kernel_size=*/{3, 3}, /*stride=*/{2, 2}, /*padding=*/{1, 1});
    }
    for (auto& layer : layers_) x = layer->forward(x);
    x = torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1);
    return fc_->forward(x);
  }

 protected:
  // Registers the stem's conv1 (kernel x kernel, `stride`, `padding`) and bn1.
  ResNetImpl(int64_t kernel, int64_t stride, int64_t padding, bool max_pool) : max_pool_(max_pool) {
    conv1_ = register_module("conv1",
                             torch::nn::Conv2d(torch::nn::Conv2dOptions(3, kStemChannels, kernel)
                                                   .stride(stride)
                                                   .padding(padding)
                                                   .bias(false)));
    bn1_ = register_module("bn1", torch::nn::BatchNorm2d(kStemChannels));
  }

  torch::nn::Sequential layers_[4] = {nullptr, nullptr, nullptr, nullptr};
  torch::nn::Linear fc_{nullptr};

 private:
  bool max_pool_;
  torch::nn::Conv2d conv1_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr};
};

class ResNet18Impl : public ResNetImpl {
 public:
  explicit ResNet18Impl(int64_t classes = 10)
      : ResNetImpl(/*kernel=*/3, /*stride=*/1, /*padding=*/1, /*max_pool=*/false) {
    int64_t in = kStemChannels;
    for (int i = 0; i < 4; ++i) {
      const int64_t c = kWidths[i];
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
};
TORCH_MODULE(ResNet18);

class ResNet50Impl : public ResNetImpl {
 public:
  explicit ResNet50Impl(int64_t classes = 1000)
      : ResNetImpl(/*kernel=*/7, /*stride=*/2, /*padding=*/3, /*max_pool=*/true) {
    const int blocks[] = {3, 4, 6, 3};
    int64_t in = kStemChannels;
    for (int i = 0; i < 4; ++i) {
      torch::nn::Sequential layer;
      for (int b = 0; b < blocks[i]; ++b) {
        layer->push_back(Bottleneck(in, kWidths[i], b == 0 && i > 0 ? 2 : 1));
        in = kWidths[i] * BottleneckImpl::kExpansion;
      }
      layers_[i] = register_module("layer" + std::to_string(i + 1), layer);
    }
    fc_ = register_module("fc", torch::nn::Linear(512 * BottleneckImpl::kExpansion, classes));
  }
};
TORCH_MODULE(ResNet50);

}  // namespace models
}  // namespace ddp_bench
