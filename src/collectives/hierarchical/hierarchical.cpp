// The hierarchical group (include/ddp/backends/hierarchical.h).
//
// An all-reduce is a chain of stages, each on its own group, each issued
// from the completion callback of the stage before. A group's Works complete
// in issue order, so every group receives its stages in the order the
// all-reduces were issued, on every rank: that is what makes the chain safe
// to pipeline. The outer Works complete in issue order (issue_order.h).
#include <ddp/backends/hierarchical.h>

#include <ddp/errors.h>

#include "base/arrival.h"
#include "base/env.h"
#include "base/mutex.h"
#include "collectives/error_text.h"
#include "collectives/hierarchical/topology.h"
#include "collectives/issue_order.h"
#include "collectives/work_detail.h"

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <algorithm>

namespace ddp {

std::string resolve_cross_backend(const HierarchicalOptions& options) {
  if (!options.cross_backend().empty()) return options.cross_backend();
  return detail::env_string("DDP_CROSS_BACKEND").value_or("gloo");
}

namespace {

HierarchicalOptions with_cross_backend_resolved(HierarchicalOptions options) {
  options.cross_backend(resolve_cross_backend(options));
  return options;
}

}  // namespace

class HierarchicalProcessGroup::Impl {
 public:
  Impl(HierarchicalProcessGroup& owner, const BackendSetup& setup,
       const std::vector<std::string>& host_of_rank, HierarchicalOptions options)
      : owner_(owner),
        options_(with_cross_backend_resolved(std::move(options))),
        topology_(detail::topology_of(host_of_rank, setup.rank)) {
    const Backend& local = find_backend(options_.local_backend(), detail::kLocalBackendChosenBy);
    const Backend& cross = find_backend(options_.cross_backend(), detail::kCrossBackendChosenBy);
    agree_on_parts(setup);
    // A part that knows its world from its launcher (MPI) starts here, on
    // every rank at once: its first group may involve only some of them.
    if (local.world) local.world();
    if (cross.world) cross.world();
    const auto& t = topology_;
    const std::string host = std::to_string(t.host_index);
    std::vector<int> everyone(setup.world_size);
    for (int r = 0; r < setup.world_size; ++r) everyone[r] = r;
    // Every rank builds its groups in this order (each build waits for the
    // group's other members), so no two ranks wait on each other crosswise.
    first_local_ = build(local, setup, options_.local_options(), "local_a/" + host, t.host_ranks);
    second_local_ = build(local, setup, options_.local_options(), "local_b/" + host, t.host_ranks);
    if (t.uniform) {
      cross_ = build(cross, setup, options_.cross_options(),
                     "cross/" + std::to_string(t.local_rank), t.peers);
    } else if (t.local_rank == 0) {
      cross_ = build(cross, setup, options_.cross_options(), "leaders", t.leaders);
    }
    flat_ = build(cross, setup, options_.cross_options(), "flat", everyone);
  }

  // Waits (bounded) for the operations in flight, then closes: stages that
  // would follow fail instead of issuing, and the sub-groups finish what
  // they hold while this object (and its mutexes) still exist.
  ~Impl() {
    WorkPtr last;
    {
      MutexLock lock(mutex_);
      last = last_;
    }
    try {
      if (last) last->wait();
    } catch (...) {  // a failure went to its Work; a timeout: closing fails the rest
    }
    {
      RecursiveMutexLock lock(stage_mutex_);
      closing_ = true;
    }
    first_local_.reset();
    cross_.reset();
    second_local_.reset();
    flat_.reset();
  }

  std::string name() const {
    return "hierarchical(" + options_.local_backend() + "+" + options_.cross_backend() + ")";
  }

  std::string unsupported_reason(const at::Tensor& t) const {
    std::string why = first_local_->unsupported_reason(t);
    return why.empty() ? flat_->unsupported_reason(t) : why;
  }

  const detail::Topology& topology() const { return topology_; }

  // All-reduces `flat` (a contiguous 1-d view); `epilogue` runs on the
  // result before the Work completes (copy-backs of coalesced tensors).
  WorkPtr allreduce(const std::string& what, std::vector<at::Tensor> outputs, at::Tensor flat,
                    ReduceOp op, std::function<void()> epilogue = nullptr) {
    auto [outer, previous] = issue("allreduce", what, std::move(outputs));
    if (auto error = broken()) {
      detail::finish_after(previous, outer, error);
      return outer;
    }
    auto op_state = std::make_shared<Reduction>();
    op_state->outer = outer;
    op_state->previous = previous;
    op_state->flat = flat;
    op_state->op = op;
    op_state->epilogue = std::move(epilogue);
    try {
      if (flat.numel() == 0) {
        finish(op_state, nullptr);
      } else if (topology_.uniform) {
        start_sliced(op_state);
      } else {
        start_leaders(op_state);
      }
    } catch (...) {  // a stage refused on this thread: the Work says so, in order
      finish(op_state, std::current_exception());
    }
    return outer;
  }

  // Runs `issue` on the flat group; its Work completes in issue order.
  WorkPtr on_flat(const char* kind, const std::function<WorkPtr(ProcessGroup&)>& issue_on) {
    WorkPtr inner = issue_on(*flat_);
    auto [outer, previous] = issue(kind, "", inner->result());
    inner->on_complete([inner, outer = outer, previous = previous] {
      detail::finish_after(previous, outer, inner->exception());
    });
    return outer;
  }

 private:
  struct Reduction {
    WorkPtr outer, previous;
    at::Tensor flat;    // the caller's elements
    at::Tensor padded;  // flat, padded to a multiple of local_size (may alias flat)
    at::Tensor slice;   // this rank's slice (stages 1-3 of the sliced path)
    ReduceOp op;
    std::function<void()> epilogue;
  };

  // A group of `backend` over `members` (ranks of this group, ascending),
  // under its own store prefix; BackendSetup::world_ranks says which ranks
  // of the job's world they are.
  static ProcessGroupPtr build(const Backend& backend, const BackendSetup& setup,
                               const BackendOptionsPtr& options, const std::string& prefix,
                               const std::vector<int>& members) {
    BackendSetup sub = setup;
    sub.store = c10::make_intrusive<c10d::PrefixStore>("hierarchical/" + prefix, setup.store);
    sub.rank =
        static_cast<int>(std::find(members.begin(), members.end(), setup.rank) - members.begin());
    sub.world_size = static_cast<int>(members.size());
    sub.world_ranks.clear();
    for (int r : members) {
      sub.world_ranks.push_back(setup.world_ranks.empty() ? r : setup.world_ranks.at(r));
    }
    sub.options = options;
    ProcessGroupPtr group = backend.create(sub);
    if (group->rank() != sub.rank || group->size() != sub.world_size) {
      throw InvalidArgument(
          ErrorContext{setup.rank, setup.world_size, "", "", {}},
          "backend '" + backend.name + "' built rank " + std::to_string(group->rank()) + " of " +
              std::to_string(group->size()) + " for the hierarchical group's part '" + prefix +
              "', not rank " + std::to_string(sub.rank) + " of " + std::to_string(sub.world_size) +
              ": it does not honour BackendSetup::world_ranks");
    }
    return group;
  }

  // Every rank must compose the same parts: one choosing another cross-host
  // backend (DDP_CROSS_BACKEND set on some ranks only) would wait in a group
  // its peers never build.
  void agree_on_parts(const BackendSetup& setup) const {
    const std::string mine = options_.local_backend() + "+" + options_.cross_backend();
    auto all = detail::allgather_on_store(
        setup.store, "hierarchical/parts/", setup.rank, setup.world_size, mine, setup.timeout,
        "agreeing on the hierarchical group's parts",
        ": they did not build the hierarchical group (DDP_BACKEND must be the same on every "
        "rank) or failed since; see their output.");
    for (int r = 0; r < setup.world_size; ++r) {
      if (all[r] != mine) {
        throw InvalidArgument(ErrorContext{setup.rank, setup.world_size, "", "", {r}},
                              "the hierarchical group's parts differ across ranks: this rank "
                              "composes " +
                                  mine + ", rank " + std::to_string(r) + " composes " + all[r] +
                                  ". Set DDP_CROSS_BACKEND (or HierarchicalOptions) the "
                                  "same on every rank (mpirun -x DDP_CROSS_BACKEND)");
      }
    }
  }

  // The outer Work of a new operation, and the one issued before it.
  std::pair<WorkPtr, WorkPtr> issue(const char* kind, const std::string& what,
                                    std::vector<at::Tensor> outputs) {
    MutexLock lock(mutex_);
    auto work = std::make_shared<Work>(
        owner_.error_context(std::string(kind) + " #" + std::to_string(next_++) +
                             (what.empty() ? "" : " (" + what + ")")),
        owner_.timeout(), std::move(outputs));
    work->mark_started();  // its stages are issued next
    WorkPtr previous = last_;
    last_ = work;
    return {work, previous};
  }

  std::exception_ptr broken() {
    MutexLock lock(mutex_);
    return broken_;
  }

  // Completes the all-reduce; an error breaks the group, so that no later
  // all-reduce issues a stage its peers will never match.
  void finish(const std::shared_ptr<Reduction>& r, std::exception_ptr error) {
    if (!error) {
      try {
        if (r->padded.defined() && !r->padded.is_same(r->flat)) {
          r->flat.copy_(r->padded.narrow(0, 0, r->flat.numel()));
        }
        if (r->op == ReduceOp::AVG) r->flat.div_(owner_.size());
        if (r->epilogue) r->epilogue();
      } catch (const std::exception& e) {
        error = std::make_exception_ptr(detail::failure_in(r->outer->context(), e));
      }
    } else {
      MutexLock lock(mutex_);
      if (!broken_) broken_ = error;
    }
    detail::finish_after(r->previous, r->outer, error);
  }

  // Runs `next` once `stage` completed, or finishes `r` with its error.
  void then(const std::shared_ptr<Reduction>& r, const WorkPtr& stage, std::function<void()> next) {
    stage->on_complete([this, r, stage, next = std::move(next)] {
      if (auto error = stage->exception()) return finish(r, error);
      // Held while the next stage is issued (re-entered when that stage
      // completes at once): the destructor's closing waits for it.
      RecursiveMutexLock lock(stage_mutex_);
      if (closing_) {
        return finish(r, std::make_exception_ptr(CommunicationError(
                             r->outer->context(),
                             "the group was destroyed before the operation finished")));
      }
      if (auto error = broken()) return finish(r, error);  // an earlier all-reduce failed
      try {
        next();
      } catch (...) {
        finish(r, std::current_exception());
      }
    });
  }

  static ReduceOp partial_op(ReduceOp op) { return op == ReduceOp::AVG ? ReduceOp::SUM : op; }

  // Reduce-scatter in the host, all-reduce of the slice across hosts,
  // all-gather in the host.
  void start_sliced(const std::shared_ptr<Reduction>& r) {
    const int64_t n = r->flat.numel(), parts = topology_.local_size;
    const int64_t per = (n + parts - 1) / parts;
    if (per * parts == n) {
      r->padded = r->flat;
    } else {
      r->padded = at::zeros({per * parts}, r->flat.options());
      r->padded.narrow(0, 0, n).copy_(r->flat);
    }
    r->slice = at::empty({per}, r->flat.options());
    std::vector<at::Tensor> slices;
    for (int64_t j = 0; j < parts; ++j) slices.push_back(r->padded.narrow(0, j * per, per));
    const ReduceOp op = partial_op(r->op);
    WorkPtr scattered = first_local_->reduce_scatter(r->slice, slices, op);
    then(r, scattered, [this, r, op, slices] {
      WorkPtr crossed = cross_->allreduce(r->slice, op);
      then(r, crossed, [this, r, slices] {
        WorkPtr gathered = second_local_->allgather(slices, r->slice);
        gathered->on_complete([this, r, gathered] { finish(r, gathered->exception()); });
      });
    });
  }

  // Hosts of different sizes: all-reduce in the host, the first ranks of
  // the hosts all-reduce across, broadcast in the host.
  void start_leaders(const std::shared_ptr<Reduction>& r) {
    const ReduceOp op = partial_op(r->op);
    auto broadcast = [this, r] {
      WorkPtr shared = second_local_->broadcast(r->flat, 0);
      shared->on_complete([this, r, shared] { finish(r, shared->exception()); });
    };
    WorkPtr local = first_local_->allreduce(r->flat, op);
    then(r, local, [this, r, op, broadcast] {
      if (!cross_) return broadcast();
      WorkPtr crossed = cross_->allreduce(r->flat, op);
      then(r, crossed, broadcast);
    });
  }

  HierarchicalProcessGroup& owner_;
  const HierarchicalOptions options_;
  const detail::Topology topology_;
  ProcessGroupPtr first_local_;   // stage 1: reduce-scatter (or all-reduce)
  ProcessGroupPtr second_local_;  // stage 3: all-gather (or broadcast)
  ProcessGroupPtr cross_;         // stage 2; null on non-first ranks of uneven hosts
  ProcessGroupPtr flat_;          // every rank: the other collectives

  // Lock order: stage_mutex_, then mutex_, then a sub-group's own (taken by
  // the stage then() issues, and by Works completing). then() holds
  // stage_mutex_ while it issues the next stage, and takes it again on the
  // same thread when that stage completes at once: hence recursive. mutex_
  // is held only for a few fields and never while anything else is taken.
  RecursiveMutex stage_mutex_ DDP_ACQUIRED_BEFORE(mutex_);
  bool closing_ DDP_GUARDED_BY(stage_mutex_) = false;  // the destructor has begun

  Mutex mutex_;
  uint64_t next_ DDP_GUARDED_BY(mutex_) = 0;          // the next operation's number
  WorkPtr last_ DDP_GUARDED_BY(mutex_);               // the last outer Work issued
  std::exception_ptr broken_ DDP_GUARDED_BY(mutex_);  // the first stage failure
};

HierarchicalProcessGroup::HierarchicalProcessGroup(const BackendSetup& setup,
                                                   std::vector<std::string> host_of_rank,
                                                   HierarchicalOptions options)
    : ProcessGroup(setup.rank, setup.world_size, setup.timeout) {
  if (static_cast<int>(host_of_rank.size()) != setup.world_size) {
    throw InvalidArgument(ErrorContext{-1, 0, "", "HierarchicalProcessGroup", {}},
                          std::to_string(host_of_rank.size()) + " host labels for " +
                              std::to_string(setup.world_size) + " ranks");
  }
  impl_ = std::make_unique<Impl>(*this, setup, host_of_rank, std::move(options));
}

HierarchicalProcessGroup::~HierarchicalProcessGroup() = default;

std::string HierarchicalProcessGroup::backend_name() const { return impl_->name(); }

std::string HierarchicalProcessGroup::unsupported_reason(const at::Tensor& tensor) const {
  return impl_->unsupported_reason(tensor);
}

int HierarchicalProcessGroup::local_rank() const { return impl_->topology().local_rank; }
int HierarchicalProcessGroup::local_size() const { return impl_->topology().local_size; }
int HierarchicalProcessGroup::host_index() const { return impl_->topology().host_index; }
int HierarchicalProcessGroup::host_count() const { return impl_->topology().host_count; }

WorkPtr HierarchicalProcessGroup::do_allreduce(at::Tensor tensor, ReduceOp op) {
  return impl_->allreduce(detail::tensor_detail(tensor, to_string(op)), {tensor}, tensor.view(-1),
                          op);
}

WorkPtr HierarchicalProcessGroup::do_allreduce_coalesced(std::vector<at::Tensor> tensors,
                                                         ReduceOp op) {
  std::vector<at::Tensor> flats;
  for (const auto& t : tensors) flats.push_back(t.view(-1));
  at::Tensor joined = at::cat(flats);
  auto copy_back = [tensors, joined] {
    int64_t at = 0;
    for (const auto& t : tensors) {
      t.view(-1).copy_(joined.narrow(0, at, t.numel()));
      at += t.numel();
    }
  };
  const std::string what = detail::coalesced_detail(tensors, op);
  return impl_->allreduce(what, tensors, joined, op, copy_back);
}

WorkPtr HierarchicalProcessGroup::do_broadcast(at::Tensor tensor, int root) {
  return impl_->on_flat("broadcast", [&](ProcessGroup& g) { return g.broadcast(tensor, root); });
}

WorkPtr HierarchicalProcessGroup::do_allgather(std::vector<at::Tensor> outputs, at::Tensor input) {
  return impl_->on_flat("allgather", [&](ProcessGroup& g) { return g.allgather(outputs, input); });
}

WorkPtr HierarchicalProcessGroup::do_reduce_scatter(at::Tensor output,
                                                    std::vector<at::Tensor> inputs, ReduceOp op) {
  return impl_->on_flat("reduce_scatter",
                        [&](ProcessGroup& g) { return g.reduce_scatter(output, inputs, op); });
}

WorkPtr HierarchicalProcessGroup::do_barrier() {
  return impl_->on_flat("barrier", [](ProcessGroup& g) { return g.barrier(); });
}

}  // namespace ddp
