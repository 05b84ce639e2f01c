// The nccl backend's group: collectives enqueued on the group's stream after
// the caller's, Works completed by a watchdog that polls their end events,
// NCCL's asynchronous errors and their deadlines.
#include <ddp/backends/nccl.h>

#include <ddp/device.h>
#include <ddp/errors.h>

#include "base/arrival.h"
#include "base/mutex.h"
#include "collectives/dtypes.h"
#include "collectives/error_text.h"
#include "collectives/nccl/communicator.h"
#include "collectives/nccl/version_gate.h"
#include "collectives/work_detail.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <map>
#include <deque>
#include <sstream>
#include <thread>

namespace ddp {
namespace {

using detail::nccl::Clock;

// How long the watchdog sleeps between two looks at a running collective.
constexpr std::chrono::microseconds kWatchdogPoll(20);

// The live groups' shutdowns, run at the process's exit by an std::atexit
// handler that the first group registers, after CUDA's runtime registered its
// own teardown, so that it runs before: watchdogs stop and communicators are
// aborted while CUDA and NCCL still work. A group destroyed later (the
// default group is a static) then has nothing left to do; left running, its
// NCCL threads crash the exit.
// The registry is never destroyed: groups may outlive static destruction.
struct LiveGroups {
  Mutex mutex;
  std::map<const void*, std::function<void()>> shutdowns DDP_GUARDED_BY(mutex);
};
LiveGroups& live_groups() {
  static auto* live = new LiveGroups;
  return *live;
}

void shut_down_live_groups() {
  std::map<const void*, std::function<void()>> shutdowns;
  {
    MutexLock lock(live_groups().mutex);
    shutdowns.swap(live_groups().shutdowns);
  }
  for (auto& [group, shutdown] : shutdowns) shutdown();
}

// `group` with `operation` (ProcessGroup::error_context(operation)).
ErrorContext with_operation(ErrorContext group, std::string operation) {
  group.operation = std::move(operation);
  return group;
}

int choose_device(const NcclOptions& options, const ErrorContext& group) {
  const int count = c10::cuda::device_count();
  if (count == 0) {
    throw InvalidArgument(group,
                          "the nccl backend needs a GPU and this process sees none "
                          "(check CUDA_VISIBLE_DEVICES and the driver); use shm or gloo, "
                          "which stage CUDA tensors through host memory");
  }
  if (options.device() >= count || options.device() < -1) {
    throw InvalidArgument(group, "NcclOptions::device is " + std::to_string(options.device()) +
                                     " but this process sees " + std::to_string(count) +
                                     " GPU(s) (indices 0-" + std::to_string(count - 1) +
                                     "); -1 picks LOCAL_RANK's");
  }
  return options.device() >= 0 ? options.device() : local_device().index();
}

std::string host_name() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return name;
}

// The GPU's UUID: the same GPU whatever index CUDA_VISIBLE_DEVICES gives it
// in each process.
std::string gpu_uuid(int device) {
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) return "";
  return detail::nccl::hex(prop.uuid.bytes, sizeof prop.uuid.bytes);
}

// Every rank's "<GPU UUID> <host> cuda:<device>", then rank 0's NCCL id,
// through the store. Ranks sharing a GPU are refused on every rank, naming
// both, unless the loaded NCCL accepts them (version_gate.h).
std::string exchange_id(const StorePtr& store, int rank, int size, int device,
                        std::chrono::milliseconds timeout, const ErrorContext& group) {
  const std::string uuid = gpu_uuid(device);
  const std::string mine = uuid + " " + host_name() + " cuda:" + std::to_string(device);
  auto all = detail::allgather_on_store(store, "nccl_gpu/", rank, size, mine, timeout,
                                        "nccl: the ranks' GPUs", "; see their output.");
  const std::string refusal = detail::nccl::shared_gpu_refusal(
      detail::nccl::loaded_version_code(), std::getenv(detail::nccl::kMultiRankGpuVariable));
  for (int r = 0; r < size && !refusal.empty(); ++r) {
    if (r != rank && !uuid.empty() && all[r].substr(0, uuid.size() + 1) == uuid + " ") {
      // About the other rank on this GPU.
      throw InvalidArgument(with_operation(group, "nccl").about({r}),
                            "ranks " + std::to_string(std::min(r, rank)) + " and " +
                                std::to_string(std::max(r, rank)) + " both use GPU " + mine +
                                "; " + refusal);
    }
  }
  auto ids = detail::allgather_on_store(store, "nccl_id/", rank, size,
                                        rank == 0 ? detail::nccl::new_unique_id() : "", timeout,
                                        "nccl: rank 0's NCCL id", "; see their output.");
  return ids[0];
}

}  // namespace

class NcclProcessGroup::Impl {
 public:
  Impl(const StorePtr& store, int rank, int size, std::chrono::milliseconds timeout,
       const NcclOptions& options, ErrorContext context)
      : context_(std::move(context)),
        timeout_(timeout),
        device_(choose_device(options, context_)),
        stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/false,
                                             static_cast<c10::DeviceIndex>(device_))) {
    static const bool at_exit = (std::atexit(shut_down_live_groups), true);
    (void)at_exit;
    const auto deadline = Clock::now() + timeout;
    detail::nccl::check_loaded_version(with_operation(context_, "nccl"));
    const std::string id = exchange_id(store, rank, size, device_, timeout, context_);
    comm_ = std::make_unique<detail::nccl::Communicator>(detail::nccl::unique_id_from(id), rank,
                                                         size, device_, deadline,
                                                         with_operation(context_, "nccl"));
    watchdog_ = std::thread([this] { watch(); });
    MutexLock lock(live_groups().mutex);
    live_groups().shutdowns[this] = [this] { shut_down(/*abandon_pending=*/true); };
  }

  ~Impl() {
    {
      MutexLock lock(live_groups().mutex);
      live_groups().shutdowns.erase(this);
    }
    shut_down(/*abandon_pending=*/false);
  }

  // Stops the watchdog, after the pending collectives ended or timed out
  // (or at once, failing them, when `abandon_pending`), then aborts the
  // communicator. Idempotent.
  void shut_down(bool abandon_pending) {
    {
      MutexLock lock(mutex_);
      if (stopping_) return;
      stopping_ = true;
    }
    if (abandon_pending) {
      const CommunicationError exiting(with_operation(context_, "nccl"), "the process is exiting");
      fail_all(std::make_exception_ptr(exiting));
    }
    cv_.notify_all();
    watchdog_.join();
    comm_->abort();
  }

  c10::Device device() const {
    return {c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device_)};
  }

  void abort(const std::string& reason) {
    fail_all(std::make_exception_ptr(CommunicationError(with_operation(context_, "nccl"), reason)));
  }

  ncclComm_t comm() const { return comm_->get(); }
  cudaStream_t stream() const { return stream_.stream(); }

  // Enqueues `calls` (NCCL calls on stream()) after the work queued on the
  // caller's current stream, then `after` (tensor ops, run with stream() as
  // the current stream, once NCCL has enqueued its calls); `keep` are the
  // tensors the stream reads or writes, kept from the caching allocator
  // until it has.
  WorkPtr enqueue(const char* kind, const std::string& detail, std::vector<at::Tensor> outputs,
                  const std::vector<at::Tensor>& keep, const std::function<ncclResult_t()>& calls,
                  const std::function<void()>& after = {}) {
    MutexLock issue(issue_mutex_);
    const uint32_t tag = next_tag_++;
    ErrorContext operation = context_;
    operation.operation = std::string(kind) + " #" + std::to_string(tag) + " (" + detail + ")";
    auto work = std::make_shared<Work>(std::move(operation), timeout_, std::move(outputs));
    {
      MutexLock lock(mutex_);
      if (!broken_.empty() || stopping_) {
        work->finish(std::make_exception_ptr(CommunicationError(
            work->context(), broken_.empty()
                                 ? "the group is shut down (the process is exiting)"
                                 : "the group is broken by an earlier failure: " + broken_)));
        return work;
      }
    }
    const auto deadline = Clock::now() + timeout_;
    Pending pending{work, std::make_shared<at::cuda::CUDAEvent>(), deadline};
    try {
      c10::cuda::CUDAGuard guard(device());
      at::cuda::CUDAEvent ready;
      ready.record(c10::cuda::getCurrentCUDAStream(device_));
      ready.block(stream_);
      comm_->run(calls, work->description(), deadline);
      if (after) {
        c10::cuda::CUDAStreamGuard on_stream(stream_);
        after();
      }
      for (const auto& t : keep) {
        if (t.defined() && t.numel() > 0) {
          c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), stream_);
        }
      }
      pending.end->record(stream_);
      work->mark_started();  // its kernels are queued
    } catch (...) {
      fail_all(std::current_exception());
      work->finish(std::current_exception());
      return work;
    }
    std::string failed_meanwhile;  // failed or shut down while this one was enqueued
    {
      MutexLock lock(mutex_);
      if (broken_.empty() && !stopping_) {
        pending_.push_back(std::move(pending));
      } else {
        failed_meanwhile = broken_.empty() ? std::string("the process is exiting") : broken_;
      }
    }
    if (!failed_meanwhile.empty()) {
      work->finish(std::make_exception_ptr(
          CommunicationError(work->context(), "the group failed meanwhile: " + failed_meanwhile)));
      return work;
    }
    cv_.notify_all();
    return work;
  }

 private:
  struct Pending {
    WorkPtr work;
    std::shared_ptr<at::cuda::CUDAEvent> end;  // recorded on the group's stream
    Clock::time_point deadline;
  };

  // The watchdog: completes Works in issue order as their end events fire;
  // on NCCL's asynchronous error or a passed deadline, aborts the
  // communicator and fails every pending Work.
  void watch() {
    c10::cuda::CUDAGuard guard(device());
    MutexLock lock(mutex_);
    for (;;) {
      cv_.wait(mutex_, [&]() DDP_REQUIRES(mutex_) { return stopping_ || !pending_.empty(); });
      if (pending_.empty()) return;  // stopping, nothing left
      Pending front = pending_.front();
      lock.unlock();
      bool done = false;
      try {
        done = front.end->query();
      } catch (const std::exception& e) {  // a CUDA error (e.g. an illegal access)
        CommunicationError error(front.work->context(), std::string("CUDA reported an error: ") +
                                                            e.what() +
                                                            "; the communicator is aborted.");
        fail_all(std::make_exception_ptr(error));
        lock.lock();
        continue;
      }
      if (done) {
        {
          // fail_all may have emptied the queue meanwhile.
          MutexLock relock(mutex_);
          if (!pending_.empty() && pending_.front().work == front.work) pending_.pop_front();
        }
        front.work->finish();
      } else if (std::string error = comm_->async_error(); !error.empty()) {
        CommunicationError failure(
            front.work->context(),
            "nccl reported an error: " + error +
                "; the communicator is aborted. A peer may have failed; see its output.");
        fail_all(std::make_exception_ptr(failure));
      } else if (Clock::now() >= front.deadline) {
        TimeoutError timeout(
            front.work->context(),
            "not complete after " + std::to_string(timeout_.count()) +
                " ms (the group's timeout); the communicator is aborted. A peer may be stuck or "
                "issuing a different collective; run with DDP_DEBUG=detail to compare "
                "collectives across ranks.");
        fail_all(std::make_exception_ptr(timeout));
      } else {
        std::this_thread::sleep_for(kWatchdogPoll);
      }
      lock.lock();
    }
  }

  // Breaks the group: aborts the communicator, fails every pending Work
  // with `error` (a std::exception), and keeps its text for later calls.
  void fail_all(std::exception_ptr error) {
    std::string reason;
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      reason = detail::cited(e);
    } catch (...) {
      reason = "an error that is not a std::exception";
    }
    std::deque<Pending> failed;
    {
      MutexLock lock(mutex_);
      if (broken_.empty()) broken_ = reason;
      failed.swap(pending_);
    }
    comm_->abort();
    for (auto& p : failed) p.work->finish(error);
  }

  const ErrorContext context_;  // this rank's: rank 1 of 2 [nccl]
  const std::chrono::milliseconds timeout_;
  const int device_;
  const c10::cuda::CUDAStream stream_;
  std::unique_ptr<detail::nccl::Communicator> comm_;

  Mutex issue_mutex_;  // one enqueue at a time: NCCL calls in issue order
  uint32_t next_tag_ DDP_GUARDED_BY(issue_mutex_) = 0;

  Mutex mutex_;
  CondVar cv_;                                          // signalled on enqueue and stop
  std::deque<Pending> pending_ DDP_GUARDED_BY(mutex_);  // enqueued, not complete, in issue order
  std::string broken_ DDP_GUARDED_BY(mutex_);           // "" while healthy
  bool stopping_ DDP_GUARDED_BY(mutex_) = false;
  std::thread watchdog_;
};

NcclProcessGroup::NcclProcessGroup(StorePtr store, int rank, int size,
                                   std::chrono::milliseconds timeout, NcclOptions options)
    : ProcessGroup(rank, size, timeout) {
  if (!store) throw InvalidArgument(error_context(), "the nccl backend needs a store");
  impl_ = std::make_unique<Impl>(store, rank, size, timeout, options, error_context());
}

NcclProcessGroup::~NcclProcessGroup() = default;

std::string NcclProcessGroup::nccl_version() { return detail::nccl::version(); }

c10::Device NcclProcessGroup::device() const { return impl_->device(); }

void NcclProcessGroup::abort(const std::string& reason) { impl_->abort(reason); }

bool NcclProcessGroup::handles_device(c10::DeviceType type) const {
  return type == c10::DeviceType::CUDA;
}

c10::Device NcclProcessGroup::staging_device() const { return device(); }

std::string NcclProcessGroup::unsupported_reason(const at::Tensor& t) const {
  // CPU tensors are staged through the group's GPU (ProcessGroup does it, so
  // a group that wraps this one may pass them on).
  if (t.device() != device() && !t.device().is_cpu()) {
    return "is on " + t.device().str() + "; this rank's nccl group takes CUDA tensors on " +
           device().str() + " (NcclOptions::device; move it with .to(" + device().str() + "))";
  }
  return detail::dtype_unsupported_reason(t.scalar_type(), "nccl");
}

WorkPtr NcclProcessGroup::do_allreduce(at::Tensor t, ReduceOp op) {
  ncclComm_t comm = impl_->comm();
  cudaStream_t stream = impl_->stream();
  return impl_->enqueue("allreduce", detail::tensor_detail(t, to_string(op)), {t}, {t}, [=] {
    return ncclAllReduce(t.data_ptr(), t.data_ptr(), t.numel(),
                         detail::nccl::data_type(t.scalar_type()), detail::nccl::red_op(op), comm,
                         stream);
  });
}

WorkPtr NcclProcessGroup::do_allreduce_coalesced(std::vector<at::Tensor> ts, ReduceOp op) {
  ncclComm_t comm = impl_->comm();
  cudaStream_t stream = impl_->stream();
  return impl_->enqueue("allreduce_coalesced", detail::coalesced_detail(ts, op), ts, ts, [=] {
    ncclGroupStart();
    for (const auto& t : ts) {
      ncclResult_t r = ncclAllReduce(t.data_ptr(), t.data_ptr(), t.numel(),
                                     detail::nccl::data_type(t.scalar_type()),
                                     detail::nccl::red_op(op), comm, stream);
      if (r != ncclSuccess) {
        ncclGroupEnd();
        return r;
      }
    }
    return ncclGroupEnd();
  });
}

WorkPtr NcclProcessGroup::do_broadcast(at::Tensor t, int root) {
  ncclComm_t comm = impl_->comm();
  cudaStream_t stream = impl_->stream();
  return impl_->enqueue(
      "broadcast", detail::tensor_detail(t) + ", root " + std::to_string(root), {t}, {t}, [=] {
        return ncclBroadcast(t.data_ptr(), t.data_ptr(), t.numel(),
                             detail::nccl::data_type(t.scalar_type()), root, comm, stream);
      });
}

WorkPtr NcclProcessGroup::do_allgather(std::vector<at::Tensor> outputs, at::Tensor input) {
  ncclComm_t comm = impl_->comm();
  cudaStream_t stream = impl_->stream();
  // NCCL gathers into one flat buffer; the copies out of it follow on the
  // group's stream.
  const int64_t n = input.numel();
  at::Tensor flat = at::empty({n * static_cast<int64_t>(outputs.size())}, input.options());
  std::vector<at::Tensor> keep = outputs;
  keep.push_back(input);
  keep.push_back(flat);
  return impl_->enqueue(
      "allgather", detail::tensor_detail(input), outputs, keep,
      [=] {
        return ncclAllGather(input.data_ptr(), flat.data_ptr(), n,
                             detail::nccl::data_type(input.scalar_type()), comm, stream);
      },
      [=] {
        for (size_t i = 0; i < outputs.size(); ++i) {
          outputs[i].view({-1}).copy_(flat.narrow(0, static_cast<int64_t>(i) * n, n), true);
        }
      });
}

WorkPtr NcclProcessGroup::do_reduce_scatter(at::Tensor output, std::vector<at::Tensor> inputs,
                                            ReduceOp op) {
  ncclComm_t comm = impl_->comm();
  cudaStream_t stream = impl_->stream();
  // One flat input, made on the caller's stream, after the inputs' producers.
  std::vector<at::Tensor> flat_inputs;
  for (const auto& t : inputs) flat_inputs.push_back(t.view({-1}));
  at::Tensor flat = at::cat(flat_inputs);
  return impl_->enqueue("reduce_scatter", detail::tensor_detail(output, to_string(op)), {output},
                        {output, flat}, [=] {
                          return ncclReduceScatter(flat.data_ptr(), output.data_ptr(),
                                                   output.numel(),
                                                   detail::nccl::data_type(output.scalar_type()),
                                                   detail::nccl::red_op(op), comm, stream);
                        });
}

WorkPtr NcclProcessGroup::do_barrier() {
  ncclComm_t comm = impl_->comm();
  cudaStream_t stream = impl_->stream();
  at::Tensor one = at::zeros({1}, at::TensorOptions().dtype(at::kFloat).device(device()));
  return impl_->enqueue("barrier", "", {}, {one}, [=] {
    return ncclAllReduce(one.data_ptr(), one.data_ptr(), 1, ncclFloat32, ncclSum, comm, stream);
  });
}

}  // namespace ddp
