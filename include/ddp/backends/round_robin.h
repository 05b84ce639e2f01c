// RoundRobinProcessGroup (paper §3.3, §5.4): composes K process groups of
// the same ranks and dispatches successive collectives to them in turn, so
// that K collectives travel at once on K sets of connections.
//
// Contract
// - All member groups have the same rank and size (InvalidArgument otherwise).
// - Works complete in issue order, whatever order the members finish in.
// - The composite's timeout is the members' largest.
#pragma once

#include <ddp/process_group.h>

#include <memory>
#include <vector>

namespace ddp {

class RoundRobinProcessGroup : public ProcessGroup {
 public:
  explicit RoundRobinProcessGroup(std::vector<ProcessGroupPtr> groups);
  ~RoundRobinProcessGroup() override;

  std::string backend_name() const override;
  // The members' rule (they are of one backend).
  std::string unsupported_reason(const at::Tensor& tensor) const override;
  const std::vector<ProcessGroupPtr>& groups() const { return groups_; }
  void abort(const std::string& reason) override;  // every member's

 protected:
  WorkPtr do_allreduce(at::Tensor tensor, ReduceOp op) override;
  WorkPtr do_allreduce_coalesced(std::vector<at::Tensor> tensors, ReduceOp op) override;
  WorkPtr do_broadcast(at::Tensor tensor, int root) override;
  WorkPtr do_allgather(std::vector<at::Tensor> outputs, at::Tensor input) override;
  WorkPtr do_reduce_scatter(at::Tensor output, std::vector<at::Tensor> inputs,
                            ReduceOp op) override;
  WorkPtr do_barrier() override;

 private:
  // Picks the next member and chains the Work after the previous one.
  template <typename Issue>
  WorkPtr dispatch(Issue&& issue);

  const std::vector<ProcessGroupPtr> groups_;
  // Whose turn it is, and the last Work returned, under a lock
  // (round_robin.cpp).
  struct Turn;
  const std::unique_ptr<Turn> turn_;
};

}  // namespace ddp
