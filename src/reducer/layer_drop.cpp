#include "reducer/layer_drop.h"

#include <ddp/errors.h>

#include <ATen/ATen.h>

#include <utility>

namespace ddp::detail {
namespace {

constexpr int64_t kSlots = 3;            // per rank: marker, joined, count
constexpr int32_t kMarker = 0x4444524c;  // "DDRL"

}  // namespace

void LayerDrop::hint_next(const std::vector<at::Tensor>& unused,
                          const std::vector<std::string>& names, const ProcessGroup& group) {
  std::vector<bool> hint(params_.size(), false);
  for (size_t k = 0; k < unused.size(); ++k) {
    // Frozen ones (a block's parameters()) get no gradient anyway.
    if (unused[k].defined() && !unused[k].requires_grad()) continue;
    size_t i = 0;
    while (i < params_.size() && !params_[i].is_same(unused[k])) ++i;
    if (i == params_.size()) {
      throw InvalidArgument(
          group.error_context("hint_unused_parameters"),
          "tensor #" + std::to_string(k) + " of " + std::to_string(unused.size()) +
              (unused[k].defined() ? " (shape " + std::string(c10::str(unused[k].sizes())) + ")"
                                   : " (undefined)") +
              " is not a parameter that DDP synchronizes (not the wrapped module's, or in "
              "parameters_to_ignore): hint only the module's own trainable parameters (" +
              std::to_string(names.size()) + " of them, e.g. '" + (names.empty() ? "" : names[0]) +
              "')");
    }
    hint[i] = true;
  }
  next_ = std::move(hint);
}

void LayerDrop::begin_pass() {
  pass_ = next_ ? std::move(*next_) : std::vector<bool>(params_.size(), false);
  next_.reset();
  if (!cycle_open_) {
    cycle_ = pass_;
    cycle_open_ = true;
    return;
  }
  for (size_t i = 0; i < cycle_.size(); ++i) cycle_[i] = cycle_[i] && pass_[i];
}

bool LayerDrop::got_gradient(size_t i) {
  if (pass_.empty() || !pass_[i]) return false;
  pass_[i] = false;  // reported once
  violations_.push_back(i);
  return true;
}

void LayerDrop::agree(ProcessGroup& group, bool joined, const std::vector<std::string>& names) {
  const int64_t n = static_cast<int64_t>(params_.size());
  const int rank = group.rank(), size = group.size();
  std::vector<bool> mine = cycle_open_ && !joined ? cycle_ : std::vector<bool>(n, false);
  cycle_open_ = false;
  at::Tensor tally = at::zeros({n + kSlots * size}, at::kInt);
  int32_t* t = tally.data_ptr<int32_t>();
  int32_t count = 0;
  for (int64_t i = 0; i < n; ++i) count += (t[i] = mine[i] ? 1 : 0);
  int32_t* slot = t + n + kSlots * rank;
  slot[0] = kMarker;
  slot[1] = joined ? 1 : 0;
  slot[2] = count;
  group.allreduce(tally)->wait();

  int32_t training = 0;
  std::string counts;
  for (int r = 0; r < size; ++r) {
    const int32_t* s = t + n + kSlots * r;
    if (s[0] != kMarker) {
      throw CommunicationError(
          group.error_context().about({r}),
          "the layer-drop hints' exchange came back garbled (rank " + std::to_string(r) +
              "'s part): on some rank it met a different collective, so the ranks' collectives are "
              "out of step. Restart the job, with DDP_DEBUG=detail to find the first difference.");
    }
    if (s[1]) continue;
    ++training;
    counts += "\n  rank " + std::to_string(r) + ": " + std::to_string(s[2]) + " parameters";
  }
  std::vector<bool> dropped(n, false);
  for (int64_t i = 0; i < n; ++i) {
    if (t[i] == 0) continue;
    if (t[i] != training) {
      throw InvalidArgument(
          group.error_context(),
          "the layer-drop hints differ across ranks: parameter #" + std::to_string(i) + " '" +
              names[i] + "' is hinted unused on " + std::to_string(t[i]) + " of " +
              std::to_string(training) + " training ranks. Hinted per rank:" + counts +
              "\nNo bucket of this iteration was sent. Every rank must hint the same parameters "
              "before the same forward (draw dropped layers from a seed every rank shares, or "
              "broadcast the decision).");
    }
    dropped[i] = true;
  }
  dropped_ = std::move(dropped);
}

std::vector<size_t> LayerDrop::take_violations() { return std::exchange(violations_, {}); }

}  // namespace ddp::detail
