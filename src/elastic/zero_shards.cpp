// An elastic ZeRO's state across a change of membership. Each member keeps
// the optimizer state of its shard and a replica of the next member's
// (zero/replica.cpp), as of its last commit and of its last full copy, and
// (until the generation's first boundary) the states it held at the last
// handover. A new generation picks the latest step whose state its members
// hold in full, takes the module and counters from one member at that step
// and each parameter's state from one member that keeps it, and
// re-partitions: the new owner and the new replica's keeper receive it. The
// result is the state a fresh ZeRO over the new world would load from a
// consolidated checkpoint of that step.
#include <ddp/elastic.h>

#include "base/fault_point.h"
#include "checkpoint/checkpoint_archive.h"
#include "compat/torch_compat.h"
#include "elastic/zero_handover.h"
#include "zero/zero_impl.h"

#include <ddp/errors.h>

#include <ATen/ATen.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <algorithm>
#include <map>
#include <sstream>

namespace ddp {
namespace {

using Impl = detail::ZeroAccess::Impl;

// What one member offers: the step its current state is at, the step of its
// full copy and of its last handover's states (-2: none), and per parameter
// whether it keeps the state now (bit 0), in the full copy (bit 1) and from
// the last handover (bit 2).
struct Offer {
  int64_t now = -1, copy = -1, handover = -2;
  std::vector<int64_t> kept;
};

std::vector<Offer> exchange_offers(ProcessGroup& group, const Offer& mine) {
  const int64_t n = 3 + static_cast<int64_t>(mine.kept.size());
  at::Tensor local = at::empty({n}, at::kLong);
  auto* p = local.data_ptr<int64_t>();
  p[0] = mine.now;
  p[1] = mine.copy;
  p[2] = mine.handover;
  std::copy(mine.kept.begin(), mine.kept.end(), p + 3);
  std::vector<at::Tensor> all;
  for (int r = 0; r < group.size(); ++r) all.push_back(at::empty({n}, at::kLong));
  group.allgather(all, local)->wait();
  std::vector<Offer> offers(group.size());
  for (int r = 0; r < group.size(); ++r) {
    const auto* q = all[r].data_ptr<int64_t>();
    offers[r] = Offer{q[0], q[1], q[2], std::vector<int64_t>(q + 3, q + n)};
  }
  return offers;
}

enum Holding { kNone = 0, kNow = 1, kCopy = 2, kHandover = 4 };

// Where member `o` holds parameter #i's state at step `at`: now; in its
// full copy, which it then restores (the copy's split is the current one);
// or among its last handover's states.
Holding holding(const Offer& o, size_t i, int64_t at) {
  if (o.now == at && (o.kept[i] & kNow)) return kNow;
  if (o.now != at && o.copy == at && (o.kept[i] & kCopy)) return kCopy;
  if (o.handover == at && (o.kept[i] & kHandover)) return kHandover;
  return kNone;
}

// Per parameter, the lowest rank holding its state at `at`; -1 where none does.
std::vector<int> sources_at(const std::vector<Offer>& offers, int64_t at) {
  std::vector<int> source(offers.front().kept.size(), -1);
  for (size_t i = 0; i < source.size(); ++i) {
    for (size_t r = 0; r < offers.size() && source[i] < 0; ++r) {
      if (holding(offers[r], i, at) != kNone) source[i] = static_cast<int>(r);
    }
  }
  return source;
}

// The steps a handover may go back to, latest first. Step -1 (a fresh
// optimizer: nothing committed) only while the job has not passed its first
// step boundary, so that a joiner's fresh state never stands in for a
// job's lost one.
std::vector<int64_t> candidate_steps(const std::vector<Offer>& offers) {
  std::vector<int64_t> steps;
  bool fresh = true;
  for (const auto& o : offers) {
    fresh = fresh && (o.now < 0 || o.handover == -1);
    for (int64_t s : {o.now, o.copy, o.handover}) {
      if (s >= 0) steps.push_back(s);
    }
  }
  if (fresh) steps.push_back(-1);
  std::sort(steps.rbegin(), steps.rend());
  steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
  return steps;
}

// Why no step can be handed over: a parameter no member keeps at any step,
// or else that no one step is kept in full; and what each member holds.
std::string nothing_to_hand_over(const std::vector<Offer>& offers,
                                 const std::vector<int64_t>& steps, size_t count) {
  std::string why;
  for (size_t i = 0; i < count && why.empty(); ++i) {
    bool somewhere = false;
    for (int64_t s : steps) somewhere = somewhere || sources_at(offers, s)[i] >= 0;
    if (!somewhere) {
      why = "the ZeroRedundancyOptimizer state of parameter #" + std::to_string(i) + " (of " +
            std::to_string(count) +
            ") is kept by no member left: its owner and the member keeping its replica (the "
            "rank before it) were lost together";
    }
  }
  if (why.empty()) {
    why = "no step's ZeroRedundancyOptimizer state is kept in full by the members left";
  }
  std::string held;
  for (size_t r = 0; r < offers.size(); ++r) {
    held += (r ? "; rank " : "rank ") + std::to_string(r) + " is at step " +
            std::to_string(offers[r].now) + ", full copy " + std::to_string(offers[r].copy);
  }
  return why + " (" + held +
         "). The job ends here; restart from an on-disk checkpoint (load it inside the step, "
         "then ElasticState::commit(true)).";
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

  ZeroHandover& last = *zero_handover_;
  Offer mine{committed_iteration(), full_copy_iteration(), last.step,
             std::vector<int64_t>(count, 0)};
  const auto now = kept_states(false), copy = kept_states(true);
  for (size_t i = 0; i < count; ++i) {
    mine.kept[i] =
        (now[i] ? kNow : 0) | (copy[i] ? kCopy : 0) | (last.states.count(i) ? kHandover : 0);
  }
  const std::vector<Offer> offers = exchange_offers(*group, mine);

  // The latest step whose state the members hold in full (the same choice on every member).
  const std::vector<int64_t> steps = candidate_steps(offers);
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
    // `where`: the runner's name of this member ("elastic member 3 (rank 1
    // of 2, generation 4)"), the operation of its errors.
    throw Error(ErrorContext{-1, 0, "", where, {}}, nothing_to_hand_over(offers, steps, count));
  }
  if (at >= 0 && mine.now != at && mine.copy == at) restore_full();  // now at `at`

  // The states this member holds at `at` (kept as the next handover's), as
  // bytes; "" for a parameter without state.
  auto state_bytes = [&](size_t i) -> std::string {
    if (holding(mine, i, at) == kHandover) {
      const auto& state = last.states.at(i);
      return state ? Impl::state_to_bytes(*state) : "";
    }
    auto [map, key] = m.home_of(i);
    if (!map) return "";  // not sharded yet: no state
    auto found = map->find(compat::optimizer_state_key(*map, key));
    return found == map->end() ? "" : Impl::state_to_bytes(*found->second);
  };
  auto parse = [&](const std::string& bytes) {
    return bytes.empty() ? nullptr : m.state_from_bytes(bytes);
  };

  // Nothing changes here until every transfer arrived: a failure on the way
  // leaves this member as it was (its offers still true). First the module
  // and counters, and the param groups' options, from the lowest rank at `at`.
  int base = 0;
  auto holds_any = [&](int r) {
    for (size_t i = 0; i < count; ++i) {
      if (holding(offers[r], i, at) != kNone) return true;
    }
    return false;
  };
  while (!holds_any(base)) ++base;
  const std::string module_bytes =
      checkpoint_detail::broadcast_bytes(*group, base, rank == base ? serialize() : "");
  const std::string options = checkpoint_detail::broadcast_bytes(
      *group, base, rank == base ? options_to_bytes(optimizer_) : "");
  auto group_options = options_from_bytes(options, m, optimizer_.param_groups().size());

  // Each state to its new owner and to the member that will keep its replica.
  std::vector<int64_t> numels;
  for (const auto& p : m.params) numels.push_back(p.numel());
  const std::vector<int> owner = detail::partition_by_size(numels, world);
  auto keeper = [&](size_t i) { return world > 1 ? (owner[i] + world - 1) % world : owner[i]; };
  auto wanted_by = [&](size_t i, int r) { return owner[i] == r || keeper(i) == r; };
  std::map<size_t, Impl::StatePtr> states;
  for (int from = 0; from < world; ++from) {
    detail::fault_point("elastic.zero_handover.transfer");
    // What `from` sends: [#i][length][state bytes] per state another member needs.
    bool sends = false;
    for (size_t i = 0; i < count && !sends; ++i) {
      sends = source[i] == from && !(owner[i] == from && keeper(i) == from);
    }
    std::string blob;
    for (size_t i = 0; i < count; ++i) {
      if (source[i] != from || rank != from) continue;
      const std::string one = state_bytes(i);
      if (wanted_by(i, rank)) states[i] = parse(one);
      if (sends && !(owner[i] == from && keeper(i) == from)) {
        detail::append_state_entry(blob, i, one);
      }
    }
    if (!sends) continue;
    const std::string received = checkpoint_detail::broadcast_bytes(*group, from, blob);
    if (rank == from) continue;
    detail::for_each_state_entry(received.data(), received.size(), [&](size_t i, std::string one) {
      if (wanted_by(i, rank)) states[i] = parse(one);
    });
  }

  // Everything arrived: the new split, and what this member held at `at`
  // kept until the generation's first boundary.
  ZeroHandover next;
  next.step = at;
  for (size_t i = 0; i < count; ++i) {
    if (holding(mine, i, at) != kNone) next.states[i] = parse(state_bytes(i));
  }
  if (rank != base) load(module_bytes, *group);
  for (size_t g = 0; g < group_options.size(); ++g) {
    optimizer_.param_groups()[g].set_options(group_options[g]->clone());
  }
  m.shard(group, group_options, std::move(states));
  last = std::move(next);
  commit(/*full=*/true);  // the copy's shards are the new split's from here on
}

}  // namespace ddp
