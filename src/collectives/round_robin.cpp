#include <ddp/backends/round_robin.h>

#include <ddp/errors.h>

#include "base/mutex.h"
#include "collectives/issue_order.h"

#include <algorithm>
#include <atomic>
#include <functional>

namespace ddp {
namespace {

const ProcessGroup& first_of(const std::vector<ProcessGroupPtr>& groups) {
  if (groups.empty() || !groups[0]) {
    throw InvalidArgument("RoundRobinProcessGroup needs at least one group");
  }
  return *groups[0];
}

std::chrono::milliseconds largest_timeout(const std::vector<ProcessGroupPtr>& groups) {
  auto timeout = std::chrono::milliseconds(0);
  for (const auto& g : groups) {
    if (g) timeout = std::max(timeout, g->timeout());
  }
  return timeout;
}

}  // namespace

struct RoundRobinProcessGroup::Turn {
  Mutex mutex;
  size_t next DDP_GUARDED_BY(mutex) = 0;  // index of the next member
  WorkPtr last DDP_GUARDED_BY(mutex);     // the last Work returned
};

RoundRobinProcessGroup::RoundRobinProcessGroup(std::vector<ProcessGroupPtr> groups)
    : ProcessGroup(first_of(groups).rank(), first_of(groups).size(), largest_timeout(groups)),
      groups_(std::move(groups)),
      turn_(std::make_unique<Turn>()) {
  for (size_t i = 0; i < groups_.size(); ++i) {
    const auto& g = groups_[i];
    if (!g || g->rank() != rank() || g->size() != size()) {
      throw InvalidArgument(
          ErrorContext{-1, 0, "", "RoundRobinProcessGroup", {}},
          "group " + std::to_string(i) +
              (g ? " is rank " + std::to_string(g->rank()) + " of " + std::to_string(g->size())
                 : std::string(" is null")) +
              " but group 0 is rank " + std::to_string(rank()) + " of " + std::to_string(size()) +
              "; compose groups of the same ranks");
    }
  }
}

RoundRobinProcessGroup::~RoundRobinProcessGroup() = default;

void RoundRobinProcessGroup::abort(const std::string& reason) {
  for (const auto& group : groups_) group->abort(reason);
}

std::string RoundRobinProcessGroup::backend_name() const {
  return "round_robin(" + std::to_string(groups_.size()) + "x" + groups_[0]->backend_name() + ")";
}

std::string RoundRobinProcessGroup::unsupported_reason(const at::Tensor& tensor) const {
  return groups_[0]->unsupported_reason(tensor);
}

template <typename Issue>
WorkPtr RoundRobinProcessGroup::dispatch(Issue&& issue) {
  Turn& turn = *turn_;
  MutexLock lock(turn.mutex);
  WorkPtr inner = issue(*groups_[turn.next]);
  turn.next = (turn.next + 1) % groups_.size();
  auto outer = std::make_shared<Work>(inner->context(), timeout(), inner->result());
  outer->mark_started();  // handed to its member
  // Complete `outer` once `inner` and every earlier Work have completed.
  inner->on_complete([inner, outer, previous = turn.last] {
    detail::finish_after(previous, outer, inner->exception());
  });
  turn.last = outer;
  return outer;
}

WorkPtr RoundRobinProcessGroup::do_allreduce(at::Tensor tensor, ReduceOp op) {
  return dispatch([&](ProcessGroup& g) { return g.allreduce(tensor, op); });
}

WorkPtr RoundRobinProcessGroup::do_allreduce_coalesced(std::vector<at::Tensor> tensors,
                                                       ReduceOp op) {
  return dispatch([&](ProcessGroup& g) { return g.allreduce_coalesced(tensors, op); });
}

WorkPtr RoundRobinProcessGroup::do_broadcast(at::Tensor tensor, int root) {
  return dispatch([&](ProcessGroup& g) { return g.broadcast(tensor, root); });
}

WorkPtr RoundRobinProcessGroup::do_allgather(std::vector<at::Tensor> outputs, at::Tensor input) {
  return dispatch([&](ProcessGroup& g) { return g.allgather(outputs, input); });
}

WorkPtr RoundRobinProcessGroup::do_reduce_scatter(at::Tensor output, std::vector<at::Tensor> inputs,
                                                  ReduceOp op) {
  return dispatch([&](ProcessGroup& g) { return g.reduce_scatter(output, inputs, op); });
}

WorkPtr RoundRobinProcessGroup::do_barrier() {
  // A barrier must order against every member's traffic: pass it through all.
  Turn& turn = *turn_;
  MutexLock lock(turn.mutex);
  std::vector<WorkPtr> inner;
  for (auto& g : groups_) inner.push_back(g->barrier());
  auto outer = std::make_shared<Work>(inner[0]->context(), timeout());
  outer->mark_started();  // handed to every member
  auto remaining = std::make_shared<std::atomic<size_t>>(inner.size());
  auto previous = turn.last;
  for (auto& w : inner) {
    w->on_complete([w, outer, remaining, previous, inner_works = inner] {
      if (--*remaining != 0) return;
      detail::after(previous, [outer, inner_works] {
        std::exception_ptr error;
        for (auto& x : inner_works) {
          if (!error) error = x->exception();
        }
        outer->finish(error);
      });
    });
  }
  turn.last = outer;
  return outer;
}

}  // namespace ddp
