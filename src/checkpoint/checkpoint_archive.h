// What a checkpoint holds, as a libtorch archive (the file's payload): the
// module's tensors by name, the optimizer's state, the TrainingState and the
// ranks' generator states. Loading is in two phases so that every rank can
// learn whether all of them could load before any rank changes its module.
#pragma once

#include <ddp/checkpoint.h>

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

namespace ddp::checkpoint_detail {

// The module a checkpoint is about: a DistributedDataParallel's wrapped one.
const torch::nn::Module& unwrapped(const torch::nn::Module& module);
torch::nn::Module& unwrapped(torch::nn::Module& module);

// `rng_states`: [world size, state bytes] uint8, or undefined to leave out;
// `optimizer` null: its state left out (an elastic ZeRO's travels by shard).
std::string serialize_checkpoint(const torch::nn::Module& module,
                                 const torch::optim::Optimizer* optimizer,
                                 const TrainingState& state, const at::Tensor& rng_states);

// A checkpoint read, checked against the module and with the optimizer's
// state loaded; apply() then changes the module and this rank's generator.
struct PendingLoad {
  TrainingState state;
  std::vector<std::pair<at::Tensor, at::Tensor>> copies;  // (module's tensor, saved value)
  at::Tensor rng_state;                                   // this rank's; undefined: none

  void apply() const;
};

// Throws CheckpointError (or c10::Error from libtorch's reader) naming what
// does not fit: the first parameter or buffer that differs, the optimizer's
// state, the RNG states' world size. `rank`/`world_size`: this process's.
// `root`'s `bytes` on every rank of `pg` (the others' argument is
// ignored): its size, then its bytes. How a checkpoint travels from rank 0,
// and an elastic job's state from the member furthest ahead.
std::string broadcast_bytes(ProcessGroup& pg, int root, const std::string& bytes);

// `optimizer` null: the checkpoint's optimizer state, if any, is not read.
PendingLoad parse_checkpoint(const char* bytes, size_t size, torch::nn::Module& module,
                             torch::optim::Optimizer* optimizer, bool restore_rng, int rank,
                             int world_size);

}  // namespace ddp::checkpoint_detail
