// An elastic ZeRO's state across a change of membership. Each member keeps
// the optimizer state of its shard and a replica of the next member's
// (zero/replica.cpp), as of its last commit and of its last full copy. A new
// generation picks the latest step whose state its members hold in full,
// takes the module and counters from one member at that step and each
// parameter's state from one member that keeps it, and re-partitions: the
// new owner and the new replica's keeper receive it. The result is the
// state a fresh ZeRO over the new world would load from a consolidated
// checkpoint of that step.
#include <ddp/elastic.h>

#include "checkpoint/checkpoint_archive.h"
#include "compat/torch_compat.h"
#include "zero/zero_impl.h"

#include <ddp/errors.h>

#include <ATen/ATen.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <cstring>
#include <map>
#include <sstream>

namespace ddp {
namespace {

using Impl = detail::ZeroAccess::Impl;

// What one member offers: the step its current state is at, the step of its
// full copy, and per parameter whether it keeps the state now (bit 0) and in
// the full copy (bit 1).
struct Offer {
  int64_t now = -1, copy = -1;
  std::vector<int64_t> kept;
};

std::vector<Offer> exchange_offers(ProcessGroup& group, const Offer& mine) {
  const int64_t n = 2 + static_cast<int64_t>(mine.kept.size());
  at::Tensor local = at::empty({n}, at::kLong);
  auto* p = local.data_ptr<int64_t>();
  p[0] = mine.now;
  p[1] = mine.copy;
  std::copy(mine.kept.begin(), mine.kept.end(), p + 2);
  std::vector<at::Tensor> all;
  for (int r = 0; r < group.size(); ++r) all.push_back(at::empty({n}, at::kLong));
  group.allgather(all, local)->wait();
  std::vector<Offer> offers(group.size());
  for (int r = 0; r < group.size(); ++r) {
    const auto* q = all[r].data_ptr<int64_t>();
    offers[r].now = q[0];
    offers[r].copy = q[1];
    offers[r].kept.assign(q + 2, q + n);
  }
  return offers;
}

// Whether member `o` holds parameter #i's state at step `at`: now, or in
// its full copy, which it then restores (the copy's split is the current one).
bool holds(const Offer& o, size_t i, int64_t at) {
  return o.now == at ? (o.kept[i] & 1) != 0 : o.copy == at && (o.kept[i] & 2) != 0;
}

// Per parameter, the lowest rank holding its state at `at`; -1 where none does.
std::vector<int> sources_at(const std::vector<Offer>& offers, int64_t at) {
  std::vector<int> source(offers.front().kept.size(), -1);
  for (size_t i = 0; i < source.size(); ++i) {
    for (size_t r = 0; r < offers.size() && source[i] < 0; ++r) {
      if (holds(offers[r], i, at)) source[i] = static_cast<int>(r);
    }
  }
  return source;
}

void append_int(std::string& out, int64_t v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}
int64_t read_int(const char*& p) {
  int64_t v;
  std::memcpy(&v, p, sizeof v);
  p += sizeof v;
  return v;
}

// The param groups' options (learning rates a schedule changed), as bytes.
std::string options_to_bytes(const torch::optim::Optimizer& optimizer) {
  torch::serialize::OutputArchive archive;
  const auto& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    torch::serialize::OutputArchive options;
    groups[g].options().serialize(options);
    archive.write("group_" + std::to_string(g), options);
  }
  std::ostringstream bytes;
  archive.save_to(bytes);
  return bytes.str();
}

std::vector<std::unique_ptr<torch::optim::OptimizerOptions>> options_from_bytes(
    const std::string& bytes, const Impl& m, size_t groups) {
  std::istringstream stream(bytes);
  torch::serialize::InputArchive archive;
  archive.load_from(stream);
  std::vector<std::unique_ptr<torch::optim::OptimizerOptions>> out;
  for (size_t g = 0; g < groups; ++g) {
    torch::serialize::InputArchive options;
    archive.read("group_" + std::to_string(g), options);
    out.push_back(m.wrapped.make_options());
    out.back()->serialize(options);
  }
  return out;
}

}  // namespace

void ElasticState::synchronize_zero(const ProcessGroupPtr& group, const std::string& where) {
  Impl& m = detail::ZeroAccess::of(*zero_);
  const int rank = group->rank(), world = group->size();
  const size_t count = m.params.size();
  // The same optimizer over the same parameters on every member (a joiner's too).
  detail::check_same_on_every_rank(*group, m.wrapped.name, m.params, m.group_of, "");

  Offer mine{committed_iteration(), full_copy_iteration(), std::vector<int64_t>(count, 0)};
  const auto now = kept_states(false), copy = kept_states(true);
  for (size_t i = 0; i < count; ++i) mine.kept[i] = (now[i] ? 1 : 0) | (copy[i] ? 2 : 0);
  const std::vector<Offer> offers = exchange_offers(*group, mine);

  // The latest step whose state the members hold in full (the same choice on
  // every member). Step -1 (nothing committed: a fresh optimizer) only when
  // no member committed anything, so that a joiner's fresh state never
  // stands in for a job's lost one.
  std::vector<int64_t> steps;
  bool fresh = true;
  for (const auto& o : offers) {
    fresh = fresh && o.now < 0;
    for (int64_t s : {o.now, o.copy}) {
      if (s >= 0) steps.push_back(s);
    }
  }
  if (fresh) steps.push_back(-1);
  std::sort(steps.rbegin(), steps.rend());
  int64_t at = -2;
  std::vector<int> source;
  for (int64_t candidate : steps) {
    source = sources_at(offers, candidate);
    if (std::find(source.begin(), source.end(), -1) == source.end()) {
      at = candidate;
      break;
    }
  }
  if (at == -2) {
    source = sources_at(offers, steps.front());
    const size_t lost =
        static_cast<size_t>(std::find(source.begin(), source.end(), -1) - source.begin());
    throw Error(where + "the ZeroRedundancyOptimizer state of parameter #" + std::to_string(lost) +
                " (of " + std::to_string(count) + ") is kept by no member left, at step " +
                std::to_string(steps.front()) +
                " or any other: its owner and the member keeping its replica (the next rank) "
                "were lost together. The job ends here; restart from an on-disk checkpoint "
                "(consolidate_state_dict, then save_checkpoint).");
  }
  if (mine.now != at && mine.copy == at) restore_full();

  // The module and counters, and the param groups' options, from the lowest rank at `at`.
  int base = 0;
  while (offers[base].now != at && offers[base].copy != at) ++base;
  const std::string bytes =
      checkpoint_detail::broadcast_bytes(*group, base, rank == base ? serialize() : "");
  const std::string options = checkpoint_detail::broadcast_bytes(
      *group, base, rank == base ? options_to_bytes(optimizer_) : "");
  if (rank != base) load(bytes, *group);
  auto group_options = options_from_bytes(options, m, optimizer_.param_groups().size());
  for (size_t g = 0; g < group_options.size(); ++g) {
    optimizer_.param_groups()[g].set_options(group_options[g]->clone());
  }

  // Each state to its new owner and to the member that will keep its replica.
  std::vector<int64_t> numels;
  for (const auto& p : m.params) numels.push_back(p.numel());
  const std::vector<int> owner = detail::partition_by_size(numels, world);
  auto keeper = [&](size_t i) { return world > 1 ? (owner[i] + world - 1) % world : owner[i]; };
  auto wanted_by = [&](size_t i, int r) { return owner[i] == r || keeper(i) == r; };
  auto state_bytes = [&](size_t i) -> std::string {  // "" when the parameter has no state
    auto [map, key] = m.home_of(i);
    if (!map) return "";  // not sharded yet: no state
    auto found = map->find(compat::optimizer_state_key(*map, key));
    return found == map->end() ? "" : Impl::state_to_bytes(*found->second);
  };
  std::map<size_t, Impl::StatePtr> states;
  for (int from = 0; from < world; ++from) {
    // What `from` sends: [#i][length][state bytes] per state another member needs.
    bool sends = false;
    for (size_t i = 0; i < count && !sends; ++i) {
      sends = source[i] == from && !(owner[i] == from && keeper(i) == from);
    }
    std::string blob;
    for (size_t i = 0; i < count; ++i) {
      if (source[i] != from || rank != from) continue;
      const std::string one = state_bytes(i);
      if (wanted_by(i, rank)) states[i] = one.empty() ? nullptr : m.state_from_bytes(one);
      if (!sends || (owner[i] == from && keeper(i) == from)) continue;
      append_int(blob, static_cast<int64_t>(i));
      append_int(blob, static_cast<int64_t>(one.size()));
      blob += one;
    }
    if (!sends) continue;
    const std::string received = checkpoint_detail::broadcast_bytes(*group, from, blob);
    if (rank == from) continue;
    for (const char *p = received.data(), *end = p + received.size(); p < end;) {
      const auto i = static_cast<size_t>(read_int(p));
      const auto length = static_cast<size_t>(read_int(p));
      if (wanted_by(i, rank)) {
        states[i] = length == 0 ? nullptr : m.state_from_bytes(std::string(p, length));
      }
      p += length;
    }
  }
  m.shard(group, group_options, std::move(states));
  commit(/*full=*/true);  // the copy's shards are the new split's from here on
}

}  // namespace ddp
