// What an elastic ZeRO member keeps of its last handover (zero_shards.cpp):
// the optimizer states it held at that step, by parameter (null: a parameter
// without state), until the generation's first step boundary has passed.
// A failure during a handover can leave some members re-partitioned and
// others not; with these, every state of that step is still somewhere.
#pragma once

#include <ddp/elastic.h>

#include <torch/optim/optimizer.h>

#include <cstdint>
#include <map>
#include <memory>

namespace ddp {

struct ElasticState::ZeroHandover {
  int64_t step = -2;  // -2: none kept
  std::map<size_t, std::unique_ptr<torch::optim::OptimizerParamState>> states;
};

}  // namespace ddp
