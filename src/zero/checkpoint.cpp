// ZeRO checkpoints: consolidate_state_dict gathers each rank's shard as
// bytes (one libtorch archive per parameter state, framed by #i), save()
// writes them keyed by #i, load() picks this rank's. Keyed by #i and not by
// rank, a checkpoint does not depend on the split: it loads at any world size.
#include "zero/zero_impl.h"

#include "compat/torch_compat.h"

#include <ddp/errors.h>

#include <ATen/ATen.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <cstring>
#include <sstream>

namespace ddp {
namespace {

constexpr int64_t kFormat = 1;

at::Tensor bytes_tensor(const std::string& bytes) {
  at::Tensor t = at::empty({static_cast<int64_t>(bytes.size())}, at::kByte);
  if (!bytes.empty()) std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  return t;
}

}  // namespace

namespace detail {

void append_state_entry(std::string& blob, size_t index, const std::string& bytes) {
  for (int64_t v : {static_cast<int64_t>(index), static_cast<int64_t>(bytes.size())}) {
    blob.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  blob += bytes;
}

void for_each_state_entry(const char* blob, size_t size,
                          const std::function<void(size_t, std::string)>& f) {
  for (const char *p = blob, *end = blob + size; p < end;) {
    int64_t index, length;
    std::memcpy(&index, p, sizeof index);
    std::memcpy(&length, p + sizeof index, sizeof length);
    p += sizeof index + sizeof length;
    f(static_cast<size_t>(index), std::string(p, static_cast<size_t>(length)));
    p += length;
  }
}

}  // namespace detail

void ZeroRedundancyOptimizer::consolidate_state_dict(int to_rank) {
  Impl& m = *impl_;
  m.check_sharded();
  ProcessGroup& group = *m.group;
  if (to_rank < 0 || to_rank >= group.size()) {
    throw InvalidArgument(m.context("ZeroRedundancyOptimizer::consolidate_state_dict"),
                          "to_rank " + std::to_string(to_rank) + " is not a rank of the group");
  }
  // This rank's shard: [#i][length][archive bytes] per parameter with state.
  std::string blob;
  for (const auto& indices : m.local) {
    for (size_t i : indices) {
      const auto* state = m.state_of(i);
      if (!state) continue;
      detail::append_state_entry(blob, i, Impl::state_to_bytes(*state));
    }
  }
  at::Tensor length = at::tensor({static_cast<int64_t>(blob.size())}, at::kLong);
  std::vector<at::Tensor> lengths;
  for (int r = 0; r < group.size(); ++r) lengths.push_back(at::empty({1}, at::kLong));
  group.allgather(lengths, length)->wait();

  m.states.clear();
  m.consolidated = false;
  for (int r = 0; r < group.size(); ++r) {
    at::Tensor buffer =
        r == group.rank() ? bytes_tensor(blob) : at::empty({lengths[r].item<int64_t>()}, at::kByte);
    group.broadcast(buffer, r)->wait();
    if (group.rank() != to_rank) continue;
    detail::for_each_state_entry(
        static_cast<const char*>(buffer.data_ptr()), static_cast<size_t>(buffer.numel()),
        [&](size_t i, std::string bytes) { m.states[i] = std::move(bytes); });
  }
  m.consolidated = group.rank() == to_rank;
  m.consolidated_at = m.steps;
}

void ZeroRedundancyOptimizer::save(torch::serialize::OutputArchive& archive) const {
  const Impl& m = *impl_;
  if (!m.consolidated || m.consolidated_at != m.steps) {
    throw InvalidArgument(
        m.context("ZeroRedundancyOptimizer::save"),
        std::string(m.consolidated ? "the state was consolidated before the last step()"
                                   : "this rank holds only its shard of the state") +
            "; call consolidate_state_dict(to_rank) on every rank after the last step, then save "
            "on to_rank");
  }
  archive.write("zero_format", c10::IValue(kFormat));
  archive.write("optimizer", c10::IValue(m.wrapped.name));
  archive.write("num_params", c10::IValue(static_cast<int64_t>(m.params.size())));
  std::vector<int64_t> sizes(param_groups_.size(), 0);
  for (size_t g : m.group_of) ++sizes[g];
  archive.write("group_sizes", at::tensor(sizes, at::kLong));
  for (size_t g = 0; g < param_groups_.size(); ++g) {
    torch::serialize::OutputArchive options;
    param_groups_[g].options().serialize(options);
    archive.write("group_" + std::to_string(g), options);
  }
  for (const auto& [index, bytes] : m.states) {
    archive.write("state_" + std::to_string(index), bytes_tensor(bytes));
  }
}

void ZeroRedundancyOptimizer::load(torch::serialize::InputArchive& archive) {
  Impl& m = *impl_;
  const ErrorContext context = m.context("ZeroRedundancyOptimizer::load");  // sharded
  c10::IValue value;
  if (!archive.try_read("zero_format", value)) {
    throw InvalidArgument(context,
                          "not a ZeroRedundancyOptimizer checkpoint (no zero_format); "
                          "save it with torch::save(zero_optimizer, ...) after "
                          "consolidate_state_dict");
  }
  archive.read("optimizer", value);
  if (value.toStringRef() != m.wrapped.name) {
    throw InvalidArgument(context, "the checkpoint holds " + value.toStringRef() +
                                       " state but this optimizer wraps " + m.wrapped.name);
  }
  at::Tensor sizes;
  archive.read("group_sizes", sizes);
  std::vector<int64_t> mine(param_groups_.size(), 0);
  for (size_t g : m.group_of) ++mine[g];
  if (!sizes.equal(at::tensor(mine, at::kLong))) {
    const std::vector<int64_t> theirs(sizes.data_ptr<int64_t>(),
                                      sizes.data_ptr<int64_t>() + sizes.numel());
    throw InvalidArgument(
        context, "the checkpoint's param groups hold " + c10::str(c10::IntArrayRef(theirs)) +
                     " parameters but this optimizer's hold " + c10::str(c10::IntArrayRef(mine)) +
                     "; load it into an optimizer over the same parameters and groups");
  }
  for (size_t g = 0; g < param_groups_.size(); ++g) {
    torch::serialize::InputArchive options;
    archive.read("group_" + std::to_string(g), options);
    auto loaded = m.wrapped.make_options();
    loaded->serialize(options);
    param_groups_[g].set_options(std::move(loaded));
  }
  // This rank's shard, and (elastic) its replica of the next rank's.
  m.optimizer->state().clear();
  if (m.replica_optimizer) m.replica_optimizer->state().clear();
  std::vector<size_t> kept = m.replica;
  for (const auto& indices : m.local) kept.insert(kept.end(), indices.begin(), indices.end());
  for (size_t i : kept) {
    at::Tensor bytes;
    if (!archive.try_read("state_" + std::to_string(i), bytes)) continue;
    auto loaded = m.state_from_bytes(std::string(static_cast<const char*>(bytes.data_ptr()),
                                                 static_cast<size_t>(bytes.numel())));
    for (const auto& t : m.wrapped.state_tensors(*loaded)) {
      if (t.defined() && t.numel() != m.params[i].numel()) {
        throw InvalidArgument(context, "the state of parameter #" + std::to_string(i) + " has " +
                                           std::to_string(t.numel()) +
                                           " elements but the parameter has " +
                                           std::to_string(m.params[i].numel()));
      }
    }
    auto [map, key] = m.home_of(i);
    (*map)[compat::optimizer_state_key(*map, key)] = std::move(loaded);
  }
}

}  // namespace ddp
