// A deterministic, learnable stand-in for MNIST: `classes` fixed random
// patterns (one per class, 1 x side x side "images"), each sample its class's
// pattern times `signal` plus unit Gaussian noise. The patterns come from
// `pattern_seed`, labels and noise from `noise_seed`: two splits with the same
// pattern seed and different noise seeds are a training set and a held-out
// set of the same task. Every rank builds the same data; a sampler shards it.
//
//   SyntheticDataset train(12000, /*noise_seed=*/1), test(2000, /*noise_seed=*/2);
//   auto loader = torch::data::make_data_loader(
//       train.map(torch::data::transforms::Stack<>()), sampler, 64);
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <cstdint>

class SyntheticDataset : public torch::data::datasets::Dataset<SyntheticDataset> {
 public:
  explicit SyntheticDataset(int64_t size, uint64_t noise_seed, uint64_t pattern_seed = 7,
                            int64_t classes = 10, int64_t side = 16, double signal = 0.22) {
    auto patterns_gen = at::detail::createCPUGenerator(pattern_seed);
    auto patterns = torch::randn({classes, 1, side, side}, patterns_gen);
    auto gen = at::detail::createCPUGenerator(noise_seed);
    targets_ = torch::randint(classes, {size}, gen, torch::kLong);
    images_ =
        signal * patterns.index_select(0, targets_) + torch::randn({size, 1, side, side}, gen);
  }

  torch::data::Example<> get(size_t index) override { return {images_[index], targets_[index]}; }
  c10::optional<size_t> size() const override { return static_cast<size_t>(targets_.size(0)); }

  // All samples, [size, 1, side, side] float32, and their labels, [size] int64.
  const torch::Tensor& images() const { return images_; }
  const torch::Tensor& targets() const { return targets_; }

 private:
  torch::Tensor images_, targets_;
};
