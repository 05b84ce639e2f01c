// static_graph (paper §6.2.1 and PyTorch's option): the graph is the same
// every iteration, so the first synchronized iteration only observes —
// which parameters get gradients, how many times each (a parameter used in
// a reentrant backward gets several), in what order — and later iterations
// know when a parameter is complete without walking the graph.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace ddp {
class ProcessGroup;
}  // namespace ddp

namespace ddp::detail {

class StaticGraph {
 public:
  bool learned() const { return learned_; }

  // Before learning: a gradient hook call for parameter i, its `arrivals`th
  // in this iteration.
  void observe(size_t i, int arrivals) {
    if (arrivals == 1) arrival_order_.push_back(i);
  }
  // At the end of the first iteration, from its arrival counts.
  void learn(const std::vector<int>& arrivals);
  // The first iteration's order of first arrivals, and the parameters that
  // got no gradient in it (ready at once in every later iteration).
  const std::vector<size_t>& arrival_order() const { return arrival_order_; }
  const std::vector<size_t>& unused() const { return unused_; }

  // After learning: whether parameter i (named `name`, on this rank of
  // `group`) got all its gradients with this arrival; InvalidArgument on one
  // too many.
  bool complete(size_t i, int arrivals, const std::string& name, const ProcessGroup& group) const;

 private:
  bool learned_ = false;
  std::vector<int> expected_arrivals_;
  std::vector<size_t> arrival_order_;
  std::vector<size_t> unused_;
};

}  // namespace ddp::detail
