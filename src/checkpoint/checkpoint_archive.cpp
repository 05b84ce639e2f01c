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

}  // namespace

const torch::nn::Module& unwrapped(const torch::nn::Module& module) {
  if (auto* ddp = dynamic_cast<const DistributedDataParallelImpl*>(&module)) return *ddp->module();
  return module;
}
torch::nn::Module& unwrapped(torch::nn::Module& module) {
  if (auto* ddp = dynamic_cast<DistributedDataParallelImpl*>(&module)) return *ddp->module();
  return module;
}

std::string serialize_checkpoint(const torch::nn::Module& module,
                                 const torch::optim::Optimizer* optimizer,
                                 const TrainingState& state, const at::Tensor& rng_states) {
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

  std::string bytes;
  archive.save_to([&bytes](const void* data, size_t size) {
    bytes.append(static_cast<const char*>(data), size);
    return size;
  });
  return bytes;
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
  at::NoGradGuard no_grad;
  for (const auto& [tensor, value] : copies) tensor.copy_(value);
  if (rng_state.defined()) {
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(rng_state);
  }
}

}  // namespace ddp::checkpoint_detail
