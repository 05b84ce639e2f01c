// save_checkpoint / load_checkpoint: the collectives around rank 0's file.
// Every outcome that decides what the other ranks do (saved or not, found or
// not, readable or not) travels in a broadcast from rank 0, so that no rank
// waits for a collective another rank will never issue.
#include <ddp/checkpoint.h>

#include <ddp/distributed_data_parallel.h>

#include "checkpoint/checkpoint_archive.h"
#include "checkpoint/checkpoint_file.h"
#include "collectives/flagged_ranks.h"
#include "rendezvous/default_group.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/Exception.h>

#include <cstring>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

namespace ddp {
namespace {

using checkpoint_detail::FileRead;

// The group's context (rank, size, backend), `operation` and the ranks the
// error is about.
ErrorContext context_of(const ProcessGroup& pg, std::string operation = {},
                        std::vector<int> peers = {}) {
  return pg.error_context(std::move(operation)).about(std::move(peers));
}

// [world size, state bytes]: every rank's default CPU generator state.
at::Tensor gather_rng_states(ProcessGroup& pg) {
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  at::Tensor mine;
  {
    std::lock_guard<std::mutex> lock(generator.mutex());
    mine = generator.get_state().contiguous();
  }
  // The sizes first: a different size on some rank (another libtorch) is an
  // error on every rank, not a mismatched allgather.
  at::Tensor size = at::tensor({mine.numel()}, at::kLong);
  std::vector<at::Tensor> sizes;
  for (int r = 0; r < pg.size(); ++r) sizes.push_back(at::empty({1}, at::kLong));
  pg.allgather(sizes, size)->wait();
  for (int r = 0; r < pg.size(); ++r) {
    if (sizes[r].item<int64_t>() != mine.numel()) {
      throw CheckpointError(context_of(pg, "save_checkpoint", {r}),
                            "rank " + std::to_string(r) + "'s RNG state has " +
                                std::to_string(sizes[r].item<int64_t>()) + " bytes, this rank's " +
                                std::to_string(mine.numel()) +
                                " (different libtorch versions?); set "
                                "CheckpointOptions::rng_state(false) to save without them");
    }
  }
  at::Tensor all = at::empty({pg.size(), mine.numel()}, at::kByte);
  std::vector<at::Tensor> rows;
  for (int r = 0; r < pg.size(); ++r) rows.push_back(all[r]);
  pg.allgather(rows, mine)->wait();
  return all;
}

// A DistributedDataParallel's part (its layout, its hook's state with
// every rank's per-rank part, which each rank sends in turn); nullopt for a
// plain module. Collective when the hook has a state to save.
std::optional<checkpoint_detail::DdpPart> gather_ddp_part(const torch::nn::Module& module,
                                                          ProcessGroup& pg) {
  const DistributedDataParallelImpl* ddp = checkpoint_detail::as_ddp(module);
  if (!ddp) return std::nullopt;
  checkpoint_detail::DdpPart part;
  part.layout = ddp->reducer().bucket_layout();
  part.hook = ddp->reducer().hook_state();
  if (part.hook) {
    const std::string mine = checkpoint_detail::serialize_tensors(part.hook->per_rank);
    part.hook->per_rank.clear();
    for (int r = 0; r < pg.size(); ++r) {
      const std::string bytes = checkpoint_detail::broadcast_bytes(pg, r, mine);
      if (pg.rank() == 0) part.hook_per_rank.push_back(checkpoint_detail::parse_tensors(bytes));
    }
  }
  return part;
}

std::string message_of(const std::exception& e) {
  if (auto* error = dynamic_cast<const Error*>(&e)) {  // its sentence, without "ddp: "
    return error->remedy().empty() ? error->problem() : error->problem() + " " + error->remedy();
  }
  if (auto* c10_error = dynamic_cast<const c10::Error*>(&e)) {
    return c10_error->what_without_backtrace();  // libtorch's what() carries a backtrace
  }
  return e.what();
}

}  // namespace

void save_checkpoint(const std::string& path, const torch::nn::Module& module,
                     const torch::optim::Optimizer& optimizer, const TrainingState& state,
                     const CheckpointOptions& options) {
  const ProcessGroupPtr pg = detail::group_or_default(options.process_group());
  const at::Tensor rng_states = options.rng_state() ? gather_rng_states(*pg) : at::Tensor();
  const auto ddp_part = gather_ddp_part(module, *pg);
  std::string failure;
  if (pg->rank() == 0) {
    try {
      checkpoint_detail::write_checkpoint_file(
          path, checkpoint_detail::serialize_checkpoint(module, &optimizer, state, rng_states,
                                                        ddp_part ? &*ddp_part : nullptr));
    } catch (const std::exception& e) {
      failure = message_of(e);
    }
  }
  failure = checkpoint_detail::broadcast_bytes(*pg, 0, failure);
  if (!failure.empty()) {
    throw CheckpointError(context_of(*pg, "", {0}),
                          "save_checkpoint failed on rank 0: " + failure +
                              ". The previous checkpoint, if any, is unchanged.");
  }
}

std::optional<TrainingState> load_checkpoint(const std::string& path, torch::nn::Module& module,
                                             torch::optim::Optimizer& optimizer,
                                             const CheckpointOptions& options) {
  const ProcessGroupPtr pg = detail::group_or_default(options.process_group());
  // Rank 0's outcome first, so that every rank knows whether data follows.
  FileRead file;
  if (pg->rank() == 0) file = checkpoint_detail::read_checkpoint_file(path);
  at::Tensor status = at::tensor({static_cast<int64_t>(file.status)}, at::kLong);
  pg->broadcast(status, 0)->wait();
  const auto outcome = static_cast<FileRead::Status>(status.item<int64_t>());
  if (outcome == FileRead::Status::kMissing) return std::nullopt;
  if (outcome == FileRead::Status::kError) {
    throw CheckpointError(context_of(*pg, "", {0}),
                          "load_checkpoint failed on rank 0: " +
                              checkpoint_detail::broadcast_bytes(*pg, 0, file.error) +
                              ". Fix or remove the file (no file: the job starts afresh).");
  }
  const std::string payload = checkpoint_detail::broadcast_bytes(*pg, 0, file.payload);
  file.payload.clear();

  // Everything that can fail happens before any rank changes its module, and
  // every rank learns whether all could load.
  std::optional<checkpoint_detail::PendingLoad> pending;
  std::string failure;
  try {
    pending =
        checkpoint_detail::parse_checkpoint(payload.data(), payload.size(), module, &optimizer,
                                            options.rng_state(), pg->rank(), pg->size());
  } catch (const std::exception& e) {
    failure = message_of(e);
  }
  const std::vector<int> failed = detail::ranks_flagging(*pg, !failure.empty());
  const std::string source =
      "the checkpoint rank 0 read" + (pg->rank() == 0 ? " ('" + path + "')" : std::string());
  if (!failure.empty()) {
    throw CheckpointError(context_of(*pg, "load_checkpoint"),
                          source + " does not load: " + failure);
  }
  if (!failed.empty()) {
    throw CheckpointError(context_of(*pg, "load_checkpoint", failed),
                          source + " loads here but not on rank(s) " + detail::rank_list(failed) +
                              " (see their errors): do the ranks build different models?");
  }
  pending->apply();
  return pending->state;
}

}  // namespace ddp
