// What a checkpoint holds, as a libtorch archive (the file's payload): the
// module's tensors by name, the optimizer's state, the TrainingState and the
// ranks' generator states. Loading is in two phases so that every rank can
// learn whether all of them could load before any rank changes its module.
#pragma once

#include <ddp/checkpoint.h>
#include <ddp/reducer.h>

#include <ATen/core/Tensor.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ddp {
class DistributedDataParallelImpl;
}

namespace ddp::checkpoint_detail {

// A DistributedDataParallel's own part of a checkpoint: its buckets'
// layout and its hook's state, with every rank's per-rank part (rank r's at
// hook_per_rank[r]).
struct DdpPart {
  Reducer::BucketLayout layout;
  std::optional<HookStateDict> hook;  // its per_rank left empty
  std::vector<std::map<std::string, at::Tensor>> hook_per_rank;
};

// `module` as a DistributedDataParallel; null when it is not one.
const DistributedDataParallelImpl* as_ddp(const torch::nn::Module& module);
DistributedDataParallelImpl* as_ddp(torch::nn::Module& module);

// A map of named tensors as bytes and back (each rank's part of a hook's
// state travels so to rank 0).
std::string serialize_tensors(const std::map<std::string, at::Tensor>& tensors);
std::map<std::string, at::Tensor> parse_tensors(const std::string& bytes);

// The module a checkpoint is about: a DistributedDataParallel's wrapped one.
const torch::nn::Module& unwrapped(const torch::nn::Module& module);
torch::nn::Module& unwrapped(torch::nn::Module& module);

// `rng_states`: [world size, state bytes] uint8, or undefined to leave out;
// `optimizer` null: its state left out (an elastic ZeRO's travels by shard).
// `ddp`: a DistributedDataParallel's part, or null to leave out.
std::string serialize_checkpoint(const torch::nn::Module& module,
                                 const torch::optim::Optimizer* optimizer,
                                 const TrainingState& state, const at::Tensor& rng_states,
                                 const DdpPart* ddp = nullptr);

// A checkpoint read, checked against the module and with the optimizer's
// state loaded; apply() then changes the module and this rank's generator.
struct PendingLoad {
  TrainingState state;
  std::vector<std::pair<at::Tensor, at::Tensor>> copies;  // (module's tensor, saved value)
  at::Tensor rng_state;                                   // this rank's; undefined: none
  // When the module is a DistributedDataParallel and the checkpoint holds
  // one's part: its layout and its hook's state (this rank's per_rank,
  // empty in another world size).
  DistributedDataParallelImpl* ddp = nullptr;
  std::optional<Reducer::BucketLayout> layout;
  std::optional<HookStateDict> hook;

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
