#include "checkpoint/checkpoint_archive.h"

#include <ddp/distributed_data_parallel.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <c10/util/Exception.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <cstring>
#include <map>
#include <mutex>
#include <sstream>

namespace ddp::checkpoint_detail {
namespace {

using torch::serialize::InputArchive;
using torch::serialize::OutputArchive;

// Tensors are stored under generated keys ("t0", "t1", ...) with their names
// in a list beside them: a libtorch archive key cannot hold the dots of
// "fc1.weight".
void write_named(OutputArchive& archive,
                 const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
  c10::List<std::string> names;
  for (size_t i = 0; i < tensors.size(); ++i) {
    names.push_back(tensors[i].first);
    archive.write("t" + std::to_string(i), tensors[i].second.detach(), /*is_buffer=*/true);
  }
  archive.write("names", c10::IValue(names));
}

std::vector<std::pair<std::string, at::Tensor>> read_named(InputArchive& archive) {
  c10::IValue names;
  archive.read("names", names);
  std::vector<std::pair<std::string, at::Tensor>> out;
  const auto list = names.toListRef();
  for (size_t i = 0; i < list.size(); ++i) {
    at::Tensor t;
    archive.read("t" + std::to_string(i), t, /*is_buffer=*/true);
    out.emplace_back(list[i].toStringRef(), t);
  }
  return out;
}

template <typename Dict>
std::vector<std::pair<std::string, at::Tensor>> entries(const Dict& dict) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& item : dict) out.emplace_back(item.key(), item.value());
  return out;
}

std::string describe(const at::Tensor& t) {
  std::ostringstream out;
  out << t.scalar_type() << " " << t.sizes();
  return out.str();
}

int64_t read_int(InputArchive& archive, const std::string& key) {
  c10::IValue value;
  archive.read(key, value);
  return value.toInt();
}

// Checks one kind ("parameter", "buffer") of the module's tensors against the
// saved ones and queues the copies; the differences go to `problems`, the
// module's order first, then what only the checkpoint has.
void match(const char* kind, const std::vector<std::pair<std::string, at::Tensor>>& model,
           const std::vector<std::pair<std::string, at::Tensor>>& saved,
           std::vector<std::pair<at::Tensor, at::Tensor>>& copies,
           std::vector<std::string>& problems) {
  std::map<std::string, const at::Tensor*> by_name;
  for (const auto& [name, t] : saved) by_name[name] = &t;
  for (const auto& [name, t] : model) {
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      problems.push_back(std::string("the model's ") + kind + " '" + name + "' (" + describe(t) +
                         ") is not in the checkpoint");
      continue;
    }
    const at::Tensor& value = *it->second;
    if (value.sizes() != t.sizes() || value.scalar_type() != t.scalar_type()) {
      problems.push_back(std::string(kind) + " '" + name + "' is " + describe(value) +
                         " in the checkpoint but " + describe(t) + " in the model");
    } else {
      copies.emplace_back(t, value);
    }
    by_name.erase(it);
  }
  for (const auto& [name, t] : saved) {
    if (by_name.count(name)) {
      problems.push_back(std::string("the checkpoint's ") + kind + " '" + name + "' (" +
                         describe(t) + ") is not in the model");
    }
  }
}

std::vector<std::pair<std::string, at::Tensor>> as_list(
    const std::map<std::string, at::Tensor>& tensors) {
  return {tensors.begin(), tensors.end()};
}

std::map<std::string, at::Tensor> as_map(std::vector<std::pair<std::string, at::Tensor>> list) {
  return {std::make_move_iterator(list.begin()), std::make_move_iterator(list.end())};
}

std::string bytes_of(OutputArchive& archive) {
  std::string bytes;
  archive.save_to([&bytes](const void* data, size_t size) {
    bytes.append(static_cast<const char*>(data), size);
    return size;
  });
  return bytes;
}

void write_ddp_part(OutputArchive& archive, const DdpPart& ddp) {
  OutputArchive part(archive.compilation_unit());
  part.write("bucket_order", at::tensor(ddp.layout.order, at::kLong), /*is_buffer=*/true);
  part.write("bucket_cap", c10::IValue(ddp.layout.cap_bytes));
  part.write("bucket_rebuilds", c10::IValue(ddp.layout.rebuilds));
  if (ddp.hook) {
    OutputArchive shared(archive.compilation_unit());
    write_named(shared, as_list(ddp.hook->shared));
    part.write("hook_shared", shared);
    part.write("hook_ranks", c10::IValue(static_cast<int64_t>(ddp.hook_per_rank.size())));
    for (size_t r = 0; r < ddp.hook_per_rank.size(); ++r) {
      OutputArchive mine(archive.compilation_unit());
      write_named(mine, as_list(ddp.hook_per_rank[r]));
      part.write("hook_rank" + std::to_string(r), mine);
    }
  }
  archive.write("ddp", part);
}

// The DDP part of `archive`, if any, into `out` for `ddp` (rank `rank` of
// `world_size`): its layout checked against ddp's parameters.
void read_ddp_part(InputArchive& archive, DistributedDataParallelImpl& ddp, int rank,
                   int world_size, PendingLoad& out) {
  InputArchive part;
  if (!archive.try_read("ddp", part)) return;  // saved from a plain module
  out.ddp = &ddp;
  Reducer::BucketLayout layout;
  at::Tensor order;
  part.read("bucket_order", order, /*is_buffer=*/true);
  layout.order.assign(order.data_ptr<int64_t>(), order.data_ptr<int64_t>() + order.numel());
  layout.cap_bytes = read_int(part, "bucket_cap");
  layout.rebuilds = read_int(part, "bucket_rebuilds");
  const size_t params = ddp.reducer().bucket_layout().order.size();
  std::vector<bool> seen(params);
  bool fits = layout.order.size() == params;
  for (int64_t i : layout.order) {
    fits = fits && i >= 0 && static_cast<size_t>(i) < params && !seen[i];
    if (fits) seen[i] = true;
  }
  if (!fits) {
    throw CheckpointError("the checkpoint's bucket layout orders " +
                          std::to_string(layout.order.size()) +
                          " parameters, this "
                          "DistributedDataParallel synchronizes " +
                          std::to_string(params) + ": was it saved with other ignored parameters?");
  }
  out.layout = layout;
  InputArchive shared;
  if (!part.try_read("hook_shared", shared)) return;
  HookStateDict hook;
  hook.shared = as_map(read_named(shared));
  if (read_int(part, "hook_ranks") == world_size) {
    InputArchive mine;
    part.read("hook_rank" + std::to_string(rank), mine);
    hook.per_rank = as_map(read_named(mine));
  }
  out.hook = std::move(hook);
}

}  // namespace

const DistributedDataParallelImpl* as_ddp(const torch::nn::Module& module) {
  return dynamic_cast<const DistributedDataParallelImpl*>(&module);
}
DistributedDataParallelImpl* as_ddp(torch::nn::Module& module) {
  return dynamic_cast<DistributedDataParallelImpl*>(&module);
}

std::string serialize_tensors(const std::map<std::string, at::Tensor>& tensors) {
  OutputArchive archive;
  write_named(archive, as_list(tensors));
  return bytes_of(archive);
}

std::map<std::string, at::Tensor> parse_tensors(const std::string& bytes) {
  InputArchive archive;
  archive.load_from(bytes.data(), bytes.size());
  return as_map(read_named(archive));
}

const torch::nn::Module& unwrapped(const torch::nn::Module& module) {
  if (auto* ddp = as_ddp(module)) return *ddp->module();
  return module;
}
torch::nn::Module& unwrapped(torch::nn::Module& module) {
  if (auto* ddp = as_ddp(module)) return *ddp->module();
  return module;
}

std::string serialize_checkpoint(const torch::nn::Module& module,
                                 const torch::optim::Optimizer* optimizer,
                                 const TrainingState& state, const at::Tensor& rng_states,
                                 const DdpPart* ddp) {
  const torch::nn::Module& target = unwrapped(module);
  OutputArchive archive;
  OutputArchive parameters(archive.compilation_unit()), buffers(archive.compilation_unit());
  write_named(parameters, entries(target.named_parameters(/*recurse=*/true)));
  write_named(buffers, entries(target.named_buffers(/*recurse=*/true)));
  archive.write("parameters", parameters);
  archive.write("buffers", buffers);

  if (optimizer) {
    OutputArchive optimizer_state(archive.compilation_unit());
    optimizer->save(optimizer_state);
    archive.write("optimizer", optimizer_state);
  }

  archive.write("epoch", c10::IValue(state.epoch));
  archive.write("iteration", c10::IValue(state.iteration));
  archive.write("epoch_samples", c10::IValue(state.epoch_samples));
  OutputArchive extra(archive.compilation_unit());
  write_named(extra, {state.extra.begin(), state.extra.end()});
  archive.write("extra", extra);
  if (rng_states.defined()) archive.write("rng_states", rng_states, /*is_buffer=*/true);
  if (ddp) write_ddp_part(archive, *ddp);
  return bytes_of(archive);
}

PendingLoad parse_checkpoint(const char* bytes, size_t size, torch::nn::Module& module,
                             torch::optim::Optimizer* optimizer, bool restore_rng, int rank,
                             int world_size) {
  torch::nn::Module& target = unwrapped(module);
  InputArchive archive;
  archive.load_from(bytes, size);

  PendingLoad out;
  std::vector<std::string> problems;
  for (const char* kind : {"parameter", "buffer"}) {
    const bool is_parameter = kind[0] == 'p';
    InputArchive saved;
    archive.read(is_parameter ? "parameters" : "buffers", saved);
    match(
        kind,
        is_parameter ? entries(target.named_parameters(true)) : entries(target.named_buffers(true)),
        read_named(saved), out.copies, problems);
  }
  if (!problems.empty()) {
    std::string more = problems.size() > 1
                           ? " (and " + std::to_string(problems.size() - 1) + " more differences)"
                           : "";
    throw CheckpointError("the checkpoint was saved from a different model: " + problems[0] + more +
                          ". Load it into the model it was saved from, or move it away "
                          "to start afresh.");
  }

  if (restore_rng) {
    at::Tensor states;
    if (archive.try_read("rng_states", states, /*is_buffer=*/true)) {
      if (states.size(0) != world_size) {
        throw CheckpointError("the checkpoint holds the RNG states of " +
                              std::to_string(states.size(0)) + " ranks; this job has " +
                              std::to_string(world_size) +
                              ". Resume with the same number of "
                              "ranks, or set CheckpointOptions::rng_state(false) to resume "
                              "without them.");
      }
      out.rng_state = states[rank].clone();
      at::Generator generator = at::detail::getDefaultCPUGenerator();
      at::Tensor now;
      {
        std::lock_guard<std::mutex> lock(generator.mutex());
        now = generator.get_state();
      }
      if (out.rng_state.numel() != now.numel()) {
        throw CheckpointError("the checkpoint's RNG state has " +
                              std::to_string(out.rng_state.numel()) + " bytes, this libtorch's " +
                              std::to_string(now.numel()) +
                              " (saved by another libtorch "
                              "version?); set CheckpointOptions::rng_state(false) to resume "
                              "without it.");
      }
    }
  }

  if (optimizer) {
    InputArchive optimizer_state;
    archive.read("optimizer", optimizer_state);
    try {
      optimizer->load(optimizer_state);
    } catch (const c10::Error& e) {
      throw CheckpointError(std::string("the optimizer's saved state does not fit this "
                                        "optimizer (") +
                            e.what_without_backtrace() +
                            "): was it saved with another optimizer or over other parameters?");
    }
  }

  if (auto* ddp = as_ddp(module)) read_ddp_part(archive, *ddp, rank, world_size, out);

  out.state.epoch = read_int(archive, "epoch");
  out.state.iteration = read_int(archive, "iteration");
  out.state.epoch_samples = read_int(archive, "epoch_samples");
  InputArchive extra;
  archive.read("extra", extra);
  for (auto& [name, t] : read_named(extra)) out.state.extra[name] = t;
  return out;
}

std::string broadcast_bytes(ProcessGroup& pg, int root, const std::string& bytes) {
  at::Tensor size = at::tensor({static_cast<int64_t>(bytes.size())}, at::kLong);
  pg.broadcast(size, root)->wait();
  const int64_t n = size.item<int64_t>();
  if (n == 0) return {};
  at::Tensor data = at::empty({n}, at::kByte);
  if (pg.rank() == root) std::memcpy(data.data_ptr(), bytes.data(), bytes.size());
  pg.broadcast(data, root)->wait();
  return std::string(static_cast<const char*>(data.data_ptr()), static_cast<size_t>(n));
}

void PendingLoad::apply() const {
  // The hook's state first: a dict it refuses leaves everything unchanged.
  if (ddp && hook) ddp->reducer().load_hook_state(*hook);
  if (ddp && layout) ddp->reducer().restore_bucket_layout(*layout);  // false once trained
  at::NoGradGuard no_grad;
  for (const auto& [tensor, value] : copies) tensor.copy_(value);
  if (rng_state.defined()) {
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(rng_state);
  }
}

}  // namespace ddp::checkpoint_detail
