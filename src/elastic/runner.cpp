// ElasticRunner: the loop of generations. Each one: a process group of its
// members, the state synchronized (ElasticState::synchronize), a
// DistributedDataParallel, then steps until a failure (restore, re-form),
// a wanted change (re-form at the step boundary) or the end.
#include <ddp/elastic.h>

#include "base/env.h"
#include "base/setup_cancel.h"
#include "elastic/membership.h"
#include "elastic/record.h"

#include <ddp/backend.h>
#include <ddp/errors.h>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <cstdio>

namespace ddp {
namespace {

using Clock = std::chrono::steady_clock;

// "elastic member 3 (rank 1 of 2, generation 4)": the operation of this
// member's errors in a generation (its rank is the generation's, said
// within it, not the rank of a group the error is raised about).
std::string member(const ElasticWorld& w, int id) {
  return "elastic member " + std::to_string(id) + " (rank " + std::to_string(w.rank) + " of " +
         std::to_string(w.world_size) + ", generation " + std::to_string(w.generation) + ")";
}

}  // namespace

struct ElasticRunner::Impl {
  ElasticOptions options;
  std::function<void(const ElasticWorld&, const ElasticWorld&)> on_world_change;
};

ElasticRunner::ElasticRunner(ElasticOptions options) : impl_(std::make_unique<Impl>()) {
  if (auto s = detail::env_int("DDP_TIMEOUT", 1, 1 << 24)) {
    options.init().timeout(std::chrono::seconds(*s));
  }
  if (auto s = detail::env_int("DDP_RENDEZVOUS_TIMEOUT_S", 1, 1 << 24)) {
    options.reform_timeout(std::chrono::seconds(*s));
  }
  // ddprun --elastic MIN:MAX: the launcher's bounds win, as DDP_TIMEOUT does.
  if (auto n = detail::env_int("DDP_ELASTIC_MIN_WORLD_SIZE", 1, 1 << 20)) {
    options.min_world_size(static_cast<int>(*n));
  }
  if (auto n = detail::env_int("DDP_ELASTIC_MAX_WORLD_SIZE", 1, 1 << 20)) {
    options.max_world_size(static_cast<int>(*n));
  }
  const std::string backend = resolve_backend_name(options.init().backend());
  if (!find_backend(backend).needs_store) {
    throw InvalidArgument("elastic training needs a backend that forms its groups on a store; " +
                          backend +
                          " takes its world from its own launcher. Use gloo, shm, nccl or auto.");
  }
  const int lo = options.min_world_size(), hi = options.max_world_size(),
            initial = options.initial_world_size();
  if (lo < 1 || options.commit_every() < 1 || (hi > 0 && hi < lo) ||
      (initial > 0 && (initial < lo || (hi > 0 && initial > hi)))) {
    throw InvalidArgument(ErrorContext{-1, 0, "", "ElasticOptions", {}},
                          "need 1 <= min_world_size <= initial_world_size (or -1) <= "
                          "max_world_size (or 0) and commit_every >= 1, got min " +
                              std::to_string(lo) + ", initial " + std::to_string(initial) +
                              ", max " + std::to_string(hi) + ", commit_every " +
                              std::to_string(options.commit_every()));
  }
  impl_->options = std::move(options);
}

ElasticRunner::~ElasticRunner() = default;

ElasticRunner& ElasticRunner::on_world_change(
    std::function<void(const ElasticWorld& previous, const ElasticWorld& now)> callback) {
  impl_->on_world_change = std::move(callback);
  return *this;
}

ElasticWorld ElasticRunner::run(ElasticState& state,
                                const std::function<bool(ElasticStep&)>& step) {
  const ElasticOptions& o = impl_->options;
  detail::elastic::Membership membership(o);
  ElasticWorld previous;
  ElasticWorld world = membership.form(previous);
  while (world.generation >= 0) {
    try {
      if (run_generation(state, step, membership, previous, world)) {
        membership.finish();
        return world;
      }
    } catch (const CommunicationError& e) {
      std::fprintf(stderr, "ddp: %s: a collective failed, re-forming: %s\n",
                   member(world, membership.id()).c_str(), e.what());
      state.restore();
    }
    previous = world;
    world = membership.form(previous);
  }
  return world;  // the job ended without this process
}

bool ElasticRunner::run_generation(ElasticState& state,
                                   const std::function<bool(ElasticStep&)>& step,
                                   detail::elastic::Membership& membership,
                                   const ElasticWorld& previous, const ElasticWorld& world) {
  const ElasticOptions& o = impl_->options;
  const auto decided = Clock::now();
  struct Disarm {
    detail::elastic::GenerationAbort& armed;
    ~Disarm() { armed.disarm(); }
  } disarm{membership.generation_abort()};
  membership.watch(world);
  // A member the heartbeat finds gone while the group is being made cancels
  // the set-up's waits here (the others would wait for it until the
  // group's timeout); once made, it ends the generation's collectives at
  // once (nccl's would wait as long).
  ProcessGroupPtr group;
  {
    detail::SetupWindow window;
    membership.generation_abort().arm(world.generation, [](const std::string& reason) {
      detail::cancel_group_setups(reason);
    });
    group = new_process_group(
        c10::make_intrusive<c10d::PrefixStore>(
            detail::elastic::generation_key(world.generation, "group"), membership.connect()),
        world.rank, world.world_size, o.init());
  }
  membership.generation_abort().arm(
      world.generation, [group](const std::string& reason) { group->abort(reason); });
  state.synchronize(group, member(world, membership.id()));
  // What was synchronized is a boundary of its own: a failure before the
  // generation's full copy below (in making the DDP, say) comes back here,
  // not to an older full copy (the load moved what restore() checks), which
  // would redo steps every member had passed.
  state.commit(/*full=*/false);
  if (impl_->on_world_change) impl_->on_world_change(previous, world);
  // synchronize() made every member's state the same: DDP need not check
  // and broadcast it again (DDP_DEBUG=detail still checks every value).
  auto ddp_options = o.ddp();
  DistributedDataParallel model =
      state.make_model(ddp_options.process_group(group).init_sync(false));
  state.commit(/*full=*/true);
  if (world.rank == 0) {
    std::fprintf(stderr,
                 "ddp: elastic: generation %lld: %d member(s) (%s), at step %lld, ready %.3f s "
                 "after its decision\n",
                 static_cast<long long>(world.generation), world.world_size,
                 detail::elastic::GenerationRecord::join(world.members).c_str(),
                 static_cast<long long>(state.training.iteration),
                 std::chrono::duration<double>(Clock::now() - decided).count());
  }
  ElasticStep context(world, group, model);
  for (int since_full = 1;; ++since_full) {
    const bool more = step(context);
    state.commit(/*full=*/false);
    // The step boundary every member passes together: does one want to
    // stop, does a process wait to join?
    at::Tensor flags =
        at::tensor({membership.change_wanted() ? 1L : 0L, more ? 0L : 1L}, at::kLong);
    group->allreduce(flags)->wait();
    state.passed_boundary(/*full=*/since_full % o.commit_every() == 0);
    const int64_t change = flags[0].item<int64_t>(), done = flags[1].item<int64_t>();
    if (done == world.world_size) return true;
    if (done != 0) {
      throw InvalidArgument(ErrorContext{-1, 0, "", member(world, membership.id()), {}},
                            "the step returned false on " + std::to_string(done) + " of " +
                                std::to_string(world.world_size) +
                                " members: every member must end at the same step");
    }
    if (change) return false;
  }
}

}  // namespace ddp
