// The shm backend's group: set-up (setup.h), one progress thread running the
// operations in issue order (detail::TaskQueue with one worker), each one a
// sequence of Channel steps (collectives.h). Small operations issued while
// the group is idle may run on the caller's thread instead (run_small).
//
// A failure inside a step leaves the ranks out of step with each other, so
// every error of an operation breaks the group: it becomes a
// CommunicationError (which breaks the queue) and is marked in the segment.
#include <ddp/backends/shm.h>

#include <ddp/errors.h>

#include "base/mutex.h"
#include "collectives/cpu_tensors.h"
#include "collectives/error_text.h"
#include "collectives/shm/channel.h"
#include "collectives/shm/collectives.h"
#include "collectives/shm/setup.h"
#include "collectives/shm/zero_copy.h"
#include "collectives/task_queue.h"
#include "collectives/work_detail.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <memory>
#include <utility>

namespace ddp {

namespace shm = detail::shm;

namespace {

void validate(const ShmOptions& o) {
  auto bad = [](const std::string& what) { throw InvalidArgument("ShmOptions::" + what); };
  if (o.chunk_bytes() < 4096 || o.chunk_bytes() % 64 != 0 || o.chunk_bytes() > (1ll << 30)) {
    bad("chunk_bytes must be a multiple of 64 in [4096, 1 GiB], got " +
        std::to_string(o.chunk_bytes()));
  }
  if (o.slots() < 2 || o.slots() > 1024) {
    bad("slots must be in [2, 1024], got " + std::to_string(o.slots()));
  }
  if (o.small_bytes() < 0 || o.small_bytes() > o.chunk_bytes()) {
    bad("small_bytes must be in [0, chunk_bytes = " + std::to_string(o.chunk_bytes()) + "], got " +
        std::to_string(o.small_bytes()));
  }
  if (o.inline_bytes() < 0) {
    bad("inline_bytes must be >= 0, got " + std::to_string(o.inline_bytes()));
  }
  if (o.spin_iterations() < 0) {
    bad("spin_iterations must be >= 0, got " + std::to_string(o.spin_iterations()));
  }
  if (o.liveness_interval().count() < 1) {
    bad("liveness_interval must be >= 1 ms, got " + std::to_string(o.liveness_interval().count()));
  }
}

}  // namespace

class ShmProcessGroup::Impl {
 public:
  Impl(ShmProcessGroup& owner, const StorePtr& store, ShmOptions options)
      : owner_(owner),
        options_(std::move(options)),
        channel_(make_channel(store)),
        queue_(owner.error_context(), owner.timeout(), 1) {}

  ~Impl() {
    queue_.stop();     // runs what is queued
    channel_.leave();  // then peers waiting on this rank fail at once
  }

  WorkPtr enqueue(const char* kind, const std::string& detail, std::vector<at::Tensor> outputs,
                  std::function<void(shm::Channel&)> body) {
    const auto deadline = deadline_from_now();
    return queue_.enqueue(kind, detail, std::move(outputs),
                          [this, deadline, body = std::move(body)](uint32_t, const Work& work) {
                            return run(work, deadline, body);
                          });
  }

  // An operation of at most ShmOptions::inline_bytes: when the group is
  // idle and every peer has begun it too (or does within
  // Channel::kArrivalPolls), the calling thread runs it, with no hand-off to
  // the progress thread; its peers are inside it, so it waits for nobody who
  // is not running. Otherwise the progress thread runs it, or the rest of it.
  WorkPtr run_small(const char* kind, const std::string& detail, std::vector<at::Tensor> outputs,
                    int64_t bytes, std::function<void(shm::Channel&)> body) {
    if (options_.inline_bytes() == 0 || bytes > options_.inline_bytes()) {
      return enqueue(kind, detail, std::move(outputs), std::move(body));
    }
    // The rest of the operation, for the progress thread, made before the
    // claim: nothing that can throw stands between a claim and its end.
    detail::TaskQueue::Body rest = [this, body](uint32_t, const Work& w) { return guarded(w, body); };
    auto claim = queue_.claim(kind, detail, outputs);
    if (!claim) return enqueue(kind, detail, std::move(outputs), std::move(body));
    WorkPtr work = claim->work;
    const auto deadline = deadline_from_now();
    std::exception_ptr error =
        guarded(*work, [&](shm::Channel& ch) { ch.begin_op(work->context(), deadline); });
    if (!error && !channel_.peers_began_op()) {
      queue_.hand_off_claim(std::move(*claim), std::move(rest));
      return work;
    }
    if (!error) error = guarded(*work, body);
    queue_.finish_claim(std::move(*claim), error);
    return work;
  }

  const ShmOptions& options() const { return options_; }

  // Collective (issued in order like any operation): a new region, handed
  // out as a tensor on this rank's part that keeps the mapping alive.
  at::Tensor allocate_region(int64_t bytes) {
    if (bytes < 0) {
      throw InvalidArgument(
          owner_.error_context("allocate_zero_copy(" + std::to_string(bytes) + ")"),
          "bytes must be >= 0");
    }
    // Parts start on pages of their own.
    const size_t per_rank = (static_cast<size_t>(std::max<int64_t>(bytes, 1)) + 4095) / 4096 * 4096;
    const uint64_t id = ++regions_made_;
    auto made = std::make_shared<std::shared_ptr<shm::Region>>();
    enqueue(
        "allocate_zero_copy", std::to_string(bytes) + " bytes", {},
        [made, id, per_rank](shm::Channel& ch) { *made = shm::allocate_region(ch, id, per_rank); })
        ->wait();
    std::shared_ptr<shm::Region> region = *made;
    if (!region) return at::Tensor();  // no room in /dev/shm (said on stderr)
    {
      MutexLock lock(regions_mutex_);
      regions_.erase(std::remove_if(regions_.begin(), regions_.end(),
                                    [](const auto& r) { return r.expired(); }),
                     regions_.end());
      regions_.push_back(region);
    }
    return at::from_blob(
        region->part(owner_.rank()), {bytes}, [region](void*) {},
        at::TensorOptions().dtype(at::kByte));
  }

  // The live region whose part on this rank holds all of `t`, and `t`'s
  // offset there; null when none does.
  std::pair<std::shared_ptr<shm::Region>, size_t> region_of(const at::Tensor& t) {
    MutexLock lock(regions_mutex_);
    const char* begin = static_cast<const char*>(t.data_ptr());
    for (const auto& weak : regions_) {
      auto region = weak.lock();
      if (!region) continue;
      const char* part = region->part(owner_.rank());
      if (begin >= part && begin + t.nbytes() <= part + region->per_rank()) {
        return {region, static_cast<size_t>(begin - part)};
      }
    }
    return {nullptr, 0};
  }

 private:
  shm::Channel make_channel(const StorePtr& store) {
    shm::Attached a =
        shm::attach(store, owner_.rank(), owner_.size(), options_, owner_.error_context());
    shm::Channel::Config c;
    c.rank = owner_.rank();
    c.spin_iterations = options_.spin_iterations();
    c.liveness_interval = options_.liveness_interval();
    c.check_pids = a.same_pid_namespace;
    return shm::Channel(std::move(a.segment), c);
  }

  // The operation's own deadline runs from its issue, a little short of
  // the timeout (a tenth, at most 200 ms): Work::wait(), started later,
  // then sees the backend's error naming the peer rather than its own
  // generic timeout. Capped at a year so that the sum cannot overflow.
  std::chrono::steady_clock::time_point deadline_from_now() const {
    const auto timeout =
        std::min<std::chrono::milliseconds>(owner_.timeout(), std::chrono::hours(24 * 365));
    return std::chrono::steady_clock::now() + timeout -
           std::min<std::chrono::milliseconds>(timeout / 10, std::chrono::milliseconds(200));
  }

  std::exception_ptr run(const Work& work, std::chrono::steady_clock::time_point deadline,
                         const std::function<void(shm::Channel&)>& body) {
    return guarded(work, [&](shm::Channel& ch) {
      ch.begin_op(work.context(), deadline);
      body(ch);
    });
  }

  // Runs `body` on the channel; its error, as the Work's (a failure inside a
  // step breaks the group).
  std::exception_ptr guarded(const Work& work, const std::function<void(shm::Channel&)>& body) {
    try {
      body(channel_);
      return nullptr;
    } catch (const CommunicationError&) {
      return std::current_exception();  // the channel marked the segment already
    } catch (const CollectiveMismatch&) {
      return std::current_exception();  // so did it for this
    } catch (const std::exception& e) {
      CommunicationError error = detail::failure_in<CommunicationError>(work.context(), e);
      channel_.mark_broken(detail::cited(error));
      return std::make_exception_ptr(error);
    }
  }

  ShmProcessGroup& owner_;
  const ShmOptions options_;
  uint64_t regions_made_ = 0;  // caller threads, in collective order
  Mutex regions_mutex_;
  std::vector<std::weak_ptr<shm::Region>> regions_ DDP_GUARDED_BY(regions_mutex_);
  // Used by one thread at a time: the progress thread, or a caller that
  // claimed the idle queue (run_small), then by ~Impl.
  shm::Channel channel_;
  detail::TaskQueue queue_;  // last: its worker uses channel_
};

ShmProcessGroup::ShmProcessGroup(StorePtr store, int rank, int size, ShmOptions options)
    : ProcessGroup(rank, size, options.timeout()) {
  validate(options);
  impl_ = std::make_unique<Impl>(*this, store, std::move(options));
}

ShmProcessGroup::~ShmProcessGroup() = default;

const ShmOptions& ShmProcessGroup::options() const { return impl_->options(); }

std::string ShmProcessGroup::unsupported_reason(const at::Tensor& t) const {
  return detail::cpu_tensor_unsupported_reason(t, "shm");
}

at::Tensor ShmProcessGroup::allocate_zero_copy(int64_t bytes) {
  return impl_->allocate_region(bytes);
}

WorkPtr ShmProcessGroup::do_allreduce(at::Tensor tensor, ReduceOp op) {
  if (auto [region, offset] = impl_->region_of(tensor); region) {
    return impl_->enqueue("allreduce", detail::tensor_detail(tensor, to_string(op)) + ", zero-copy",
                          {tensor},
                          [tensor, op, region = region, offset = offset](shm::Channel& ch) {
                            shm::allreduce_in_region(ch, *region, offset, tensor, op);
                          });
  }
  const int64_t small = impl_->options().small_bytes();
  return impl_->run_small(
      "allreduce", detail::tensor_detail(tensor, to_string(op)), {tensor},
      static_cast<int64_t>(tensor.nbytes()),
      [tensor, op, small](shm::Channel& ch) { shm::allreduce(ch, tensor, op, small); });
}

WorkPtr ShmProcessGroup::do_allreduce_coalesced(std::vector<at::Tensor> tensors, ReduceOp op) {
  const std::string what = detail::coalesced_detail(tensors, op);
  const int64_t small = impl_->options().small_bytes();
  return impl_->enqueue("allreduce_coalesced", what, tensors,
                        [tensors, op, small](shm::Channel& ch) {
                          constexpr OpKind kind = OpKind::ALLREDUCE_COALESCED;
                          std::vector<int64_t> numels;
                          for (const auto& t : tensors) numels.push_back(t.numel());
                          ch.describe_tensors(numels);
                          if (tensors.size() == 1) {
                            return shm::allreduce(ch, tensors[0], op, small, kind);
                          }
                          std::vector<at::Tensor> flat;
                          for (const auto& t : tensors) flat.push_back(t.view(-1));
                          at::Tensor all = at::cat(flat);
                          shm::allreduce(ch, all, op, small, kind);
                          int64_t offset = 0;
                          for (const auto& t : tensors) {
                            t.view(-1).copy_(all.narrow(0, offset, t.numel()));
                            offset += t.numel();
                          }
                        });
}

WorkPtr ShmProcessGroup::do_broadcast(at::Tensor tensor, int root) {
  return impl_->run_small("broadcast",
                          detail::tensor_detail(tensor) + ", root " + std::to_string(root),
                          {tensor}, static_cast<int64_t>(tensor.nbytes()),
                          [tensor, root](shm::Channel& ch) { shm::broadcast(ch, tensor, root); });
}

WorkPtr ShmProcessGroup::do_allgather(std::vector<at::Tensor> outputs, at::Tensor input) {
  return impl_->enqueue("allgather", detail::tensor_detail(input), outputs,
                        [outputs, input](shm::Channel& ch) { shm::allgather(ch, outputs, input); });
}

WorkPtr ShmProcessGroup::do_reduce_scatter(at::Tensor output, std::vector<at::Tensor> inputs,
                                           ReduceOp op) {
  return impl_->enqueue(
      "reduce_scatter", detail::tensor_detail(output, to_string(op)), {output},
      [output, inputs, op](shm::Channel& ch) { shm::reduce_scatter(ch, output, inputs, op); });
}

WorkPtr ShmProcessGroup::do_barrier() {
  return impl_->run_small("barrier", "", {}, 0, [](shm::Channel& ch) { shm::barrier(ch); });
}

bool ShmProcessGroup::reads_inputs_on_queue() const { return true; }

}  // namespace ddp
