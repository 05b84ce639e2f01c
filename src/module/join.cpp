// Join (join.h): which ranks still train is one allreduce of a flag per
// rank at the start of each synchronized iteration. Ranks that train call it
// from the first joinable's iteration (the DDP forward); ranks that joined
// call it from join()'s loop and then shadow the iteration. Every rank sees
// every exchange, in the same order, so all agree on the divisor, the
// buffers' source, and the rank whose model is final.
#include <ddp/join.h>

#include <ddp/errors.h>

#include <ATen/ATen.h>

#include <exception>
#include <string>
#include <utility>

namespace ddp {
namespace {

std::string ranks_where(const JoinIteration& it, bool training) {
  std::string out;
  int count = 0;
  for (size_t r = 0; r < it.training.size(); ++r) {
    if (it.training[r] != training) continue;
    out += (count++ ? ", " : "") + std::to_string(r);
  }
  return (count == 1 ? "rank " : "ranks ") + out;
}

EarlyTermination early_termination(const JoinIteration& it, const ProcessGroup& group) {
  // About the ranks out of inputs.
  ErrorContext context = group.error_context("Join(throw_on_early_termination)");
  for (size_t r = 0; r < it.training.size(); ++r) {
    if (!it.training[r]) context.peers.push_back(static_cast<int>(r));
  }
  return EarlyTermination(
      std::move(context),
      ranks_where(it, false) + " ran out of inputs while " + ranks_where(it, true) +
          " still had some; every rank raises this in the same iteration. To let the others "
          "finish their inputs, use a Join without throw_on_early_termination (the ranks out of "
          "inputs then shadow their collectives).");
}

}  // namespace

int JoinIteration::lowest_training_rank() const {
  for (size_t r = 0; r < training.size(); ++r) {
    if (training[r]) return static_cast<int>(r);
  }
  return -1;
}

Joinable::~Joinable() = default;

Join::Join(std::vector<std::reference_wrapper<Joinable>> joinables, JoinOptions options)
    : joinables_(std::move(joinables)),
      options_(options),
      group_(joinables_.empty() ? nullptr : joinables_.front().get().join_process_group()),
      exceptions_at_start_(std::uncaught_exceptions()) {
  if (joinables_.empty()) {
    throw InvalidArgument(ErrorContext{-1, 0, "", "Join", {}},
                          "no joinable given; pass the DDP module, e.g. "
                          "ddp::Join join({*model})");
  }
  if (!options_.enable()) return;
  // Every check before any registration: a refused Join leaves no joinable
  // pointing at it.
  for (size_t i = 0; i < joinables_.size(); ++i) {
    Joinable& j = joinables_[i].get();
    bool twice = false;
    for (size_t k = 0; k < i; ++k) twice = twice || &joinables_[k].get() == &j;
    if (j.join_ || twice) {
      throw InvalidArgument(group_->error_context("Join"),
                            "a joinable is already in another Join (or listed twice); "
                            "a joinable takes part in one Join at a time");
    }
    j.check_join_options(options_);
  }
  for (auto& j : joinables_) j.get().join_ = this;
}

Join::~Join() noexcept(false) {
  const bool unwinding = std::uncaught_exceptions() > exceptions_at_start_;
  if (!options_.enable() || joined_ || unwinding) {
    leave();
    return;
  }
  join();
}

void Join::leave() {
  for (auto& j : joinables_) {
    if (j.get().join_ == this) j.get().join_ = nullptr;
  }
}

void Join::join() {
  if (!options_.enable() || joined_) return;
  joined_ = true;  // first: after an error the destructor does not try again
  struct Leave {
    Join& join;
    ~Leave() { join.leave(); }
  } leave_at_exit{*this};
  while (true) {
    const JoinIteration it = exchange(/*training=*/false);
    if (it.training_ranks == 0) break;
    if (options_.throw_on_early_termination()) throw early_termination(it, *group_);
    for (auto& j : joinables_) j.get().shadow_iteration(it);
  }
  const int last = last_rank_ >= 0 ? last_rank_ : 0;  // none trained: any rank's state will do
  for (auto& j : joinables_) j.get().finish_join(last);
}

JoinIteration Join::notify(Joinable& joinable) {
  if (&joinable != &joinables_.front().get()) {
    // Another joinable's iteration starts before the first's has: the first
    // does not start iterations (an optimizer listed before the module).
    if (current_.training.empty()) {
      throw InvalidArgument(group_->error_context("Join"),
                            "list the DDP module first (ddp::Join join({*model, "
                            "...})): its forward starts each iteration of the Join");
    }
    return current_;
  }
  const JoinIteration it = exchange(/*training=*/true);
  if (options_.throw_on_early_termination() && it.training_ranks < group_->size()) {
    throw early_termination(it, *group_);
  }
  return it;
}

JoinIteration Join::exchange(bool training) {
  at::Tensor flags = at::zeros({group_->size()}, at::kInt);
  if (training) flags[group_->rank()] = 1;
  group_->allreduce(flags)->wait();
  JoinIteration it;
  const int32_t* f = flags.data_ptr<int32_t>();
  for (int r = 0; r < group_->size(); ++r) {
    it.training.push_back(f[r] != 0);
    if (f[r] != 0) {
      ++it.training_ranks;
      last_rank_ = r;
    }
  }
  current_ = it;
  return it;
}

}  // namespace ddp
