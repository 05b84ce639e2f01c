// Checkpoint and resume: everything a training job needs to go on
// after a failure exactly where it was, in one file that only rank 0 writes
// and reads.
//
//   ddp::TrainingState state;  // epoch 0, iteration 0: a fresh start
//   if (auto resumed = ddp::load_checkpoint(path, *model, opt)) state = *resumed;
//   for (; state.epoch < epochs; ++state.epoch, state.epoch_samples = 0) {
//     DistributedRandomSampler shard(size, world, rank);
//     shard.set_epoch(state.epoch);
//     auto loader = torch::data::make_data_loader(data,
//         ddp::ResumingSampler<DistributedRandomSampler>(std::move(shard), state.epoch_samples),
//         batch_size);
//     for (auto& batch : *loader) {
//       ...forward, backward, opt.step()...
//       ++state.iteration;
//       state.epoch_samples += batch.data.size(0);
//       if (state.iteration % every == 0) ddp::save_checkpoint(path, *model, opt, state);
//     }
//   }
//
// Contract
// - What is saved: the module's parameters and buffers by name (a
//   DistributedDataParallel is saved as the module it wraps, so the file
//   loads into either), the optimizer's state (Optimizer::save: momentum
//   buffers, step counts, learning rates), the TrainingState, and, unless
//   CheckpointOptions::rng_state is false, every rank's default CPU generator
//   state (each rank gets its own back: dropout masks continue as if never
//   interrupted). The module and optimizer are rank 0's: under DDP every
//   rank holds the same ones.
// - Given a DistributedDataParallel, also its buckets' layout and its
//   communication hook's state, when the hook's state class has a
//   state_dict (comm_hook.h; PowerSGDState): rank 0's shared part and every
//   rank's own (error feedback). Loaded into a DistributedDataParallel with
//   the same hook registered and no iteration run yet, a job with PowerSGD
//   goes on bit-identically: its first iteration reduces the same buckets
//   with the same memories as the uninterrupted job's would. In another
//   world size each rank's own part comes back empty (error feedback starts
//   afresh). A plain module ignores that part, and a DistributedDataParallel
//   that trained already keeps its buckets. Bucket autotuning starts over.
// - Both calls are collective: every rank of the group calls them at the same
//   point of its program (they issue collectives on the group); inside a
//   ddp::Join a rank that ran out of inputs no longer does: save after the
//   Join. `path` is used on rank 0 only: the file need only be on rank 0's
//   disk.
// - save_checkpoint returns on every rank once rank 0's file is durable. It
//   writes `path`.tmp in the same directory, fsyncs it, renames it over
//   `path` and fsyncs the directory: a crash at any moment leaves the
//   previous checkpoint or the new one, never a torn file.
// - load_checkpoint returns std::nullopt on every rank when rank 0 has no
//   file at `path` (nothing to resume: start from scratch), else the saved
//   TrainingState, after copying the saved values into the module's tensors
//   (in place: the optimizer's references stay valid), loading the
//   optimizer's state and restoring this rank's generator. Call it after
//   constructing the optimizer over the module's parameters, before or after
//   wrapping the module in DistributedDataParallel.
// - Errors: CheckpointError on every rank, never a hang (ranks learn rank 0's
//   outcome from a broadcast): rank 0 cannot write or read `path` (the OS's
//   reason), a file that is not a ddp checkpoint, truncated or corrupt (names
//   the path), a model that differs from the saved one (names the first
//   parameter or buffer that is missing, extra or of another shape or dtype),
//   optimizer state that does not fit the optimizer, or RNG states saved by
//   a job of another world size. A rank that alone cannot load (it built
//   another model) makes the others raise too, naming it. After a failed
//   load no rank's module or generator has changed (an optimizer may hold
//   the saved state: build a new one to go on without the checkpoint). A
//   failed save leaves the previous checkpoint in place. A peer that dies
//   raises CommunicationError as in any collective.
// - Not thread-safe with training: call from the training thread, between
//   steps, with no backward in flight.
#pragma once

#include <ddp/errors.h>
#include <ddp/process_group.h>

#include <ATen/core/Tensor.h>
#include <torch/arg.h>
#include <torch/data/samplers/base.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace torch::nn {
class Module;
}
namespace torch::optim {
class Optimizer;
}

namespace ddp {

// Where training stands: the counters a loop needs to go on, and the data
// position. Under DDP every rank's is the same; rank 0's is saved.
struct TrainingState {
  // The epoch in progress (0-based).
  int64_t epoch = 0;
  // Optimizer steps taken since the start of training.
  int64_t iteration = 0;
  // Samples of `epoch` each rank has already trained on: the position of
  // every rank's sampler (see ResumingSampler).
  int64_t epoch_samples = 0;
  // Anything else the loop wants back (a scheduler's step, the best loss so
  // far, ...): tensors by name, rank 0's, loaded on every rank.
  std::map<std::string, at::Tensor> extra;
};

struct CheckpointOptions {
  // The group whose ranks save and load together. Default:
  // ddp::default_process_group().
  TORCH_ARG(ProcessGroupPtr, process_group) = nullptr;
  // Save every rank's default CPU generator state, and restore it on load
  // (which then needs the same world size). Default true.
  TORCH_ARG(bool, rng_state) = true;
};

// Saves `module`, `optimizer`, `state` (and the ranks' RNG states) to `path`
// on rank 0. Collective; see the contract above.
void save_checkpoint(const std::string& path, const torch::nn::Module& module,
                     const torch::optim::Optimizer& optimizer, const TrainingState& state,
                     const CheckpointOptions& options = {});

// Loads the checkpoint rank 0 has at `path` into `module` and `optimizer` on
// every rank; std::nullopt when there is none. Collective; see above.
std::optional<TrainingState> load_checkpoint(const std::string& path, torch::nn::Module& module,
                                             torch::optim::Optimizer& optimizer,
                                             const CheckpointOptions& options = {});

// A sampler that resumes an epoch mid-way: it yields what `inner` yields,
// less the first `skip` indices of its first pass (after its first reset(),
// which a DataLoader's begin() calls, or at its first next()); later passes
// are not skipped. With a DistributedRandomSampler set to state.epoch and
// skip = state.epoch_samples, each rank trains on exactly the samples of the
// epoch it had not trained on yet, in the same order as without the
// interruption. save()/load() are inner's.
template <typename Inner>
class ResumingSampler : public torch::data::samplers::Sampler<> {
 public:
  ResumingSampler(Inner inner, int64_t skip) : inner_(std::move(inner)), skip_(skip) {
    if (skip < 0) {
      throw InvalidArgument(ErrorContext{-1, 0, "", "ResumingSampler", {}},
                            "skip must be >= 0, got " + std::to_string(skip));
    }
  }

  // c10::optional: libtorch's Sampler interface (std::optional from 2.x on).
  void reset(c10::optional<size_t> new_size = c10::nullopt) override {
    inner_.reset(new_size);
    skip_once();
  }
  c10::optional<std::vector<size_t>> next(size_t batch_size) override {
    skip_once();
    return inner_.next(batch_size);
  }
  void save(torch::serialize::OutputArchive& archive) const override { inner_.save(archive); }
  void load(torch::serialize::InputArchive& archive) override { inner_.load(archive); }

  Inner& inner() { return inner_; }

 private:
  void skip_once() {
    if (skipped_) return;
    skipped_ = true;
    if (skip_ > 0) inner_.next(static_cast<size_t>(skip_));
  }

  Inner inner_;
  int64_t skip_;
  bool skipped_ = false;
};

}  // namespace ddp
