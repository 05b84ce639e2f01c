#include <ddp/elastic.h>

#include <ddp/errors.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>

namespace ddp {

ElasticSampler::ElasticSampler(int64_t dataset_size, int64_t batch_size, bool shuffle,
                               uint64_t seed)
    : size_(dataset_size), batch_(batch_size), shuffle_(shuffle), seed_(seed) {
  if (dataset_size < 1 || batch_size < 1) {
    throw InvalidArgument(ErrorContext{-1, 0, "", "ElasticSampler", {}},
                          "dataset_size and batch_size must be >= 1, got " +
                              std::to_string(dataset_size) + " and " + std::to_string(batch_size));
  }
}

std::vector<int64_t> ElasticSampler::indices(const TrainingState& state, int rank, int world_size) {
  const int64_t left = size_ - state.epoch_samples;
  if (left < world_size) return {};  // the epoch is consumed (what is left cannot feed every rank)
  if (order_epoch_ != state.epoch) {
    at::Tensor order;
    if (shuffle_) {
      at::Generator generator =
          at::detail::createCPUGenerator(seed_ + static_cast<uint64_t>(state.epoch));
      order = at::randperm(size_, generator, at::kLong);
    } else {
      order = at::arange(size_, at::kLong);
    }
    order_.assign(order.data_ptr<int64_t>(), order.data_ptr<int64_t>() + size_);
    order_epoch_ = state.epoch;
  }
  const int64_t global = std::min(left, batch_ * world_size);
  const int64_t begin = state.epoch_samples + global * rank / world_size;
  const int64_t end = state.epoch_samples + global * (rank + 1) / world_size;
  return {order_.begin() + begin, order_.begin() + end};
}

void ElasticSampler::advance(TrainingState& state, int world_size) const {
  state.epoch_samples += std::min(size_ - state.epoch_samples, batch_ * world_size);
  ++state.iteration;
}

int64_t ElasticSampler::next_epoch(TrainingState& state) const {
  state.epoch_samples = 0;
  return ++state.epoch;
}

}  // namespace ddp
