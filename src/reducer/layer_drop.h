// Layer-drop hints (ReducerOptions::layer_drop_hints, Reducer::hint_unused):
// the parameters every rank declared, before its forward, to get no
// gradient in this iteration (stochastic depth with a shared seed, frozen
// branches, experts no token was routed to). The Reducer leaves them out:
// no graph walk, no wait, no bytes sent (reducer.cpp).
//
// Under no_sync a synchronized iteration reduces what several passes
// accumulated: a parameter is left out only when every pass since the last
// synchronized iteration hinted it (a pass without a hint hints nothing).
//
// Agreement: each synchronized iteration begins with one small allreduce
// (SUM) of an int32 tensor, a count per parameter of the ranks that hint it,
// then a slot per rank (marker, joined, count). A rank that joined (Join)
// hints nothing and learns the others' set from it, so that it sends the
// same bytes. Ranks that disagree raise InvalidArgument on every rank
// before any bucket is sent, naming a parameter they disagree on.
#pragma once

#include <ddp/process_group.h>

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace ddp::detail {

class LayerDrop {
 public:
  explicit LayerDrop(const std::vector<at::Tensor>& params) : params_(params) {}

  // The parameters (each one of `params`, by identity) that the next pass
  // leaves without gradient. InvalidArgument names a tensor that is not one.
  void hint_next(const std::vector<at::Tensor>& unused, const std::vector<std::string>& names,
                 const ProcessGroup& group);
  // A forward pass begins: the last hint (or none) is its hint.
  void begin_pass();
  // Parameter i got a gradient in this pass; true when it was hinted
  // unused (remembered for the status: take_violations).
  bool got_gradient(size_t i);

  // Collective, at the start of every synchronized iteration, joined ranks
  // included: agrees on the parameters left out (dropped()) and starts a
  // new accumulation cycle.
  void agree(ProcessGroup& group, bool joined, const std::vector<std::string>& names);
  const std::vector<bool>& dropped() const { return dropped_; }
  // Hinted by this pass, though not by every pass of the cycle: no
  // gradient comes now, what earlier passes accumulated is still reduced.
  bool hinted_in_pass(size_t i) const { return !pass_.empty() && pass_[i]; }
  // Hinted parameters that got a gradient since the last call.
  std::vector<size_t> take_violations();

 private:
  const std::vector<at::Tensor>& params_;
  std::optional<std::vector<bool>> next_;  // hint_next's, for the next pass
  std::vector<bool> pass_;                 // this pass's hint
  std::vector<bool> cycle_;                // hinted by every pass of this cycle
  bool cycle_open_ = false;                // a pass ran since the last agree()
  std::vector<bool> dropped_;              // agreed, this synchronized iteration
  std::vector<size_t> violations_;
};

}  // namespace ddp::detail
