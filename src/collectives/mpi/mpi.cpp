// The MPI backend.
//
// Each collective is a task of the group's ordered queue (one worker thread):
// the worker issues MPI's nonblocking collective on the group's own
// communicator and polls MPI_Test until it completes or the group's timeout
// passes. Blocking calls would be simpler, but a blocked worker could honour
// no timeout. A small collective issued while the queue is idle is started
// and polled a little on the caller's thread (run_small); the worker polls
// on if it is not done by then. Half and BFloat16 travel as 2-byte words
// reduced by ddp's kernels (runtime.cpp); AVG is SUM, then a division.
#include <ddp/backends/mpi.h>

#include <ddp/errors.h>

#include "base/mutex.h"
#include "collectives/cpu_tensors.h"
#include "collectives/error_text.h"
#include "collectives/mpi/runtime.h"
#include "collectives/task_queue.h"
#include "collectives/work_detail.h"

#include <ATen/ATen.h>

#include <climits>
#include <cstdint>
#include <functional>
#include <optional>
#include <thread>

namespace ddp {

namespace mpi = detail::mpi;

namespace {

// One collective: `start` issues it, `done` runs once MPI has completed it
// (copies out, divides for AVG). Both own the tensors MPI reads and writes,
// so that an abandoned collective's buffers stay alive.
struct Op {
  const char* call;  // "MPI_Iallreduce", for errors
  std::function<int(MPI_Request*)> start;
  std::function<void()> done;
};

void* data(const at::Tensor& t) { return t.numel() ? t.data_ptr() : nullptr; }

// MPI_TAG_UB: the largest tag this MPI takes (at least 32767).
int highest_tag() {
  int* value = nullptr;
  int found = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &value, &found);
  return found && value ? *value : 32767;
}

// A flat copy of `tensors`, in order.
at::Tensor flatten(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> views;
  for (const auto& t : tensors) views.push_back(t.view(-1));
  return at::cat(views);
}

// Copies consecutive slices of `flat` back into `tensors`.
void unflatten(const at::Tensor& flat, const std::vector<at::Tensor>& tensors) {
  int64_t offset = 0;
  for (const auto& t : tensors) {
    t.view(-1).copy_(flat.narrow(0, offset, t.numel()));
    offset += t.numel();
  }
}

}  // namespace

class MpiProcessGroup::Impl {
 public:
  Impl(MpiProcessGroup& owner, MpiOptions options, int index, const std::vector<int>& world_ranks)
      : owner_(owner),
        options_(std::move(options)),
        queue_(owner.error_context(), owner.timeout(), /*threads=*/1) {
    // Every member creates its groups in the same order.
    std::string name = "ddp/group" + std::to_string(index);
    if (world_ranks.empty()) {
      MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
    } else {
      // Collective over the members alone. Its messages travel on
      // MPI_COMM_WORLD under `tag`: the top of MPI's tag range, away from a
      // program's own. A failure is MPI_COMM_WORLD's to handle (fatal by
      // default: mpirun reports it and ends the job).
      MPI_Group world_group = MPI_GROUP_NULL, members = MPI_GROUP_NULL;
      MPI_Comm_group(MPI_COMM_WORLD, &world_group);
      MPI_Group_incl(world_group, static_cast<int>(world_ranks.size()), world_ranks.data(),
                     &members);
      MPI_Comm_create_group(MPI_COMM_WORLD, members, highest_tag() - index, &comm_);
      MPI_Group_free(&members);
      MPI_Group_free(&world_group);
      name += "/ranks" + std::to_string(world_ranks.front());
      if (world_ranks.size() > 1) {  // MPI keeps MPI_MAX_OBJECT_NAME characters
        name += (world_ranks.size() > 2 ? ",...," : ",") + std::to_string(world_ranks.back()) +
                "(" + std::to_string(world_ranks.size()) + ")";
      }
    }
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_set_name(comm_, name.c_str());
  }

  ~Impl() {
    queue_.stop();
    MutexLock lock(mutex_);
    int finalized = 0;
    MPI_Finalized(&finalized);
    // An abandoned collective still uses the communicator: leave it.
    if (!finalized && abandoned_.empty()) MPI_Comm_free(&comm_);
  }

  const MpiOptions& options() const { return options_; }
  MPI_Comm comm() const { return comm_; }

  // Checks MPI's `int` counts before anything is queued.
  void check_count(const char* kind, int64_t count) const {
    if (count > INT_MAX) {
      throw InvalidArgument(owner_.error_context(kind),
                            std::to_string(count) + " elements exceed MPI's limit of " +
                                std::to_string(INT_MAX) + " per call; split the tensor");
    }
  }

  WorkPtr enqueue(const char* kind, const std::string& detail, std::vector<at::Tensor> outputs,
                  Op op) {
    auto shared = std::make_shared<Op>(std::move(op));
    return queue_.enqueue(kind, detail, std::move(outputs),
                          [this, shared](uint32_t, const Work& work) {
                            return guarded(work, [&] {
                              MPI_Request request = MPI_REQUEST_NULL;
                              const int rc = shared->start(&request);
                              if (rc != MPI_SUCCESS) return mpi_error(work, shared->call, rc);
                              return *poll(shared, request, work, deadline_from_now(), -1);
                            });
                          });
  }

  // A collective of at most MpiOptions::inline_bytes: when the queue is idle
  // the calling thread starts it and polls it for up to kInlinePolls; if MPI
  // has not completed it by then (a peer not there yet), the worker polls on.
  WorkPtr run_small(const char* kind, const std::string& detail, std::vector<at::Tensor> outputs,
                    int64_t bytes, Op op) {
    if (options_.inline_bytes() == 0 || bytes > options_.inline_bytes()) {
      return enqueue(kind, detail, std::move(outputs), std::move(op));
    }
    // Everything that can throw is made before the claim: nothing stands
    // between a claim and its end.
    auto shared = std::make_shared<Op>(op);
    auto request = std::make_shared<MPI_Request>(MPI_REQUEST_NULL);
    const auto deadline = deadline_from_now();
    // The worker's part: polls on, still counted as a running collective
    // (the count taken before the hand-off) so that MPI is not finalized
    // under it.
    detail::TaskQueue::Body rest = [this, shared, request, deadline](uint32_t, const Work& w) {
      auto error = guarded(w, [&] { return *poll(shared, *request, w, deadline, -1); });
      mpi::collective_ended();
      return error;
    };
    auto claim = queue_.claim(kind, detail, outputs);
    if (!claim) return enqueue(kind, detail, std::move(outputs), std::move(op));
    WorkPtr work = claim->work;
    bool not_yet = false;
    const std::exception_ptr error = guarded(*work, [&]() -> std::exception_ptr {
      const int rc = shared->start(request.get());
      if (rc != MPI_SUCCESS) return mpi_error(*work, shared->call, rc);
      auto outcome = poll(shared, *request, *work, deadline, kInlinePolls);
      not_yet = !outcome;
      if (not_yet) mpi::collective_started();  // held until `rest` ends
      return outcome.value_or(nullptr);
    });
    if (not_yet) {
      queue_.hand_off_claim(std::move(*claim), std::move(rest));
      return work;
    }
    queue_.finish_claim(std::move(*claim), error);
    return work;
  }

 private:
  static constexpr int kInlinePolls = 2000;  // MPI_Test calls: tens of microseconds

  std::chrono::steady_clock::time_point deadline_from_now() const {
    return std::chrono::steady_clock::now() + owner_.timeout();
  }

  // Runs `body` (which returns the operation's error) counted as a running
  // collective; an exception it throws becomes the error.
  template <typename Body>
  std::exception_ptr guarded(const Work& work, Body&& body) {
    mpi::collective_started();
    std::exception_ptr error;
    try {
      error = body();
    } catch (const std::exception& e) {
      error = std::make_exception_ptr(detail::failure_in(work.context(), e));
    }
    mpi::collective_ended();
    return error;
  }

  // Polls `request` until MPI completes it (then `op->done()`), until
  // `deadline` (then abandons it: TimeoutError), or, when `polls` >= 0, for
  // that many MPI_Test calls (then nullopt: not complete yet). The
  // operation's error, null on success.
  std::optional<std::exception_ptr> poll(const std::shared_ptr<Op>& op, MPI_Request& request,
                                         const Work& work,
                                         std::chrono::steady_clock::time_point deadline,
                                         int polls) {
    const auto pause = options_.poll_interval();
    for (uint32_t n = 1;; ++n) {  // wraps harmlessly when polls < 0
      int done = 0;
      const int rc = MPI_Test(&request, &done, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) return mpi_error(work, "MPI_Test", rc);
      if (done) break;
      if (polls >= 0 && n >= static_cast<uint32_t>(polls)) return std::nullopt;
      // The clock every 64 polls (or every sleeping one): a poll is ~0.1 us.
      if ((n % 64 == 0 || pause.count() > 0) && std::chrono::steady_clock::now() >= deadline) {
        return abandon(op, request, work);
      }
      if (pause.count() > 0 && polls < 0) std::this_thread::sleep_for(pause);
    }
    op->done();
    return nullptr;
  }

  std::exception_ptr mpi_error(const Work& work, const char* call, int rc) const {
    return std::make_exception_ptr(
        CommunicationError(work.context(), std::string(call) + ": " + mpi::error_string(rc) +
                           ". The group is broken; see MPI's messages on the other ranks."));
  }

  // MPI cannot cancel a collective: keep its request and buffers for good.
  std::exception_ptr abandon(const std::shared_ptr<Op>& op, MPI_Request request, const Work& work) {
    mpi::collective_abandoned();
    {
      MutexLock lock(mutex_);
      abandoned_.push_back({op, request});
    }
    return std::make_exception_ptr(TimeoutError(
        work.context(), std::string(op->call) + " not complete after " +
        std::to_string(owner_.timeout().count()) +
        " ms (the group's timeout). A rank may be stuck, dead, or issuing a different "
        "collective (DDP_DEBUG=detail compares collectives across ranks). MPI collectives "
        "cannot be cancelled: the group is broken and this process should exit."));
  }

  struct Abandoned {
    std::shared_ptr<Op> op;  // owns the buffers MPI may still write
    MPI_Request request;
  };

  MpiProcessGroup& owner_;
  const MpiOptions options_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  Mutex mutex_;
  std::vector<Abandoned> abandoned_ DDP_GUARDED_BY(mutex_);
  detail::TaskQueue queue_;  // last: stopped first, before comm_ is freed
};

namespace {

// This process's rank in the group of `world_ranks` (all of MPI_COMM_WORLD
// when empty); InvalidArgument when they are not a group this process is in.
int group_rank(const std::vector<int>& world_ranks) {
  const BackendWorld world = mpi::world();
  if (world_ranks.empty()) return world.rank;
  std::vector<bool> seen(world.world_size);
  int mine = -1;
  for (size_t i = 0; i < world_ranks.size(); ++i) {
    const int r = world_ranks[i];
    if (r < 0 || r >= world.world_size || seen[r]) {
      throw InvalidArgument(
          ErrorContext{-1, 0, "", "MpiProcessGroup", {}},
          "world_ranks[" + std::to_string(i) + "] = " + std::to_string(r) + " is " +
              (r < 0 || r >= world.world_size
                   ? "outside MPI_COMM_WORLD's " + std::to_string(world.world_size) + " ranks"
                   : std::string("listed twice")));
    }
    seen[r] = true;
    if (r == world.rank) mine = static_cast<int>(i);
  }
  if (mine < 0) {
    throw InvalidArgument(ErrorContext{-1, 0, "", "MpiProcessGroup", {}},
                          "MPI rank " + std::to_string(world.rank) +
                              " is not among the group's world_ranks; only members build a group");
  }
  return mine;
}

int group_size(const std::vector<int>& world_ranks) {
  return world_ranks.empty() ? mpi::world().world_size : static_cast<int>(world_ranks.size());
}

}  // namespace

MpiProcessGroup::MpiProcessGroup(std::chrono::milliseconds timeout, MpiOptions options, int index,
                                 std::vector<int> world_ranks)
    : ProcessGroup(group_rank(world_ranks), group_size(world_ranks), timeout) {
  if (options.poll_interval().count() < 0) {
    throw InvalidArgument("MpiOptions::poll_interval must be >= 0, got " +
                          std::to_string(options.poll_interval().count()) + " us");
  }
  if (options.inline_bytes() < 0) {
    throw InvalidArgument("MpiOptions::inline_bytes must be >= 0, got " +
                          std::to_string(options.inline_bytes()));
  }
  impl_ = std::make_unique<Impl>(*this, std::move(options), index, world_ranks);
}

MpiProcessGroup::~MpiProcessGroup() = default;

const MpiOptions& MpiProcessGroup::options() const { return impl_->options(); }

std::string MpiProcessGroup::unsupported_reason(const at::Tensor& tensor) const {
  return detail::cpu_tensor_unsupported_reason(tensor, "mpi");
}

WorkPtr MpiProcessGroup::do_allreduce(at::Tensor tensor, ReduceOp op) {
  impl_->check_count("allreduce", tensor.numel());
  MPI_Comm comm = impl_->comm();
  const int n = static_cast<int>(tensor.numel()), ranks = size();
  Op call{"MPI_Iallreduce",
          [=](MPI_Request* r) {
            return MPI_Iallreduce(MPI_IN_PLACE, data(tensor), n,
                                  mpi::datatype(tensor.scalar_type()),
                                  mpi::reduce_op(tensor.scalar_type(), op), comm, r);
          },
          [=] {
            if (op == ReduceOp::AVG) tensor.div_(ranks);
          }};
  return impl_->run_small("allreduce", detail::tensor_detail(tensor, to_string(op)), {tensor},
                          static_cast<int64_t>(tensor.nbytes()), std::move(call));
}

WorkPtr MpiProcessGroup::do_allreduce_coalesced(std::vector<at::Tensor> tensors, ReduceOp op) {
  int64_t total = 0;
  for (const auto& t : tensors) total += t.numel();
  impl_->check_count("allreduce_coalesced", total);
  MPI_Comm comm = impl_->comm();
  const at::ScalarType dtype = tensors[0].scalar_type();
  const int ranks = size();
  auto flat = std::make_shared<at::Tensor>();
  Op call{"MPI_Iallreduce",
          [=](MPI_Request* r) {
            *flat = flatten(tensors);
            return MPI_Iallreduce(MPI_IN_PLACE, data(*flat), static_cast<int>(flat->numel()),
                                  mpi::datatype(dtype), mpi::reduce_op(dtype, op), comm, r);
          },
          [=] {
            if (op == ReduceOp::AVG) flat->div_(ranks);
            unflatten(*flat, tensors);
          }};
  const std::string what = detail::coalesced_detail(tensors, op);
  return impl_->enqueue("allreduce_coalesced", what, tensors, std::move(call));
}

WorkPtr MpiProcessGroup::do_broadcast(at::Tensor tensor, int root) {
  impl_->check_count("broadcast", tensor.numel());
  MPI_Comm comm = impl_->comm();
  Op call{"MPI_Ibcast",
          [=](MPI_Request* r) {
            return MPI_Ibcast(data(tensor), static_cast<int>(tensor.numel()),
                              mpi::datatype(tensor.scalar_type()), root, comm, r);
          },
          [] {}};
  return impl_->run_small("broadcast",
                          detail::tensor_detail(tensor) + ", root " + std::to_string(root),
                          {tensor}, static_cast<int64_t>(tensor.nbytes()), std::move(call));
}

WorkPtr MpiProcessGroup::do_allgather(std::vector<at::Tensor> outputs, at::Tensor input) {
  impl_->check_count("allgather", input.numel() * size());
  MPI_Comm comm = impl_->comm();
  // MPI gathers into one buffer; the outputs are separate tensors.
  auto flat = std::make_shared<at::Tensor>();
  Op call{"MPI_Iallgather",
          [=](MPI_Request* r) {
            const int n = static_cast<int>(input.numel());
            *flat = at::empty({n * static_cast<int64_t>(outputs.size())}, input.options());
            MPI_Datatype type = mpi::datatype(input.scalar_type());
            return MPI_Iallgather(data(input), n, type, data(*flat), n, type, comm, r);
          },
          [=] { unflatten(*flat, outputs); }};
  return impl_->enqueue("allgather", detail::tensor_detail(input), outputs, std::move(call));
}

WorkPtr MpiProcessGroup::do_reduce_scatter(at::Tensor output, std::vector<at::Tensor> inputs,
                                           ReduceOp op) {
  impl_->check_count("reduce_scatter", output.numel() * size());
  MPI_Comm comm = impl_->comm();
  const int ranks = size();
  auto flat = std::make_shared<at::Tensor>();
  Op call{"MPI_Ireduce_scatter_block",
          [=](MPI_Request* r) {
            *flat = flatten(inputs);
            const at::ScalarType dtype = output.scalar_type();
            return MPI_Ireduce_scatter_block(data(*flat), data(output),
                                             static_cast<int>(output.numel()), mpi::datatype(dtype),
                                             mpi::reduce_op(dtype, op), comm, r);
          },
          [=] {
            if (op == ReduceOp::AVG) output.div_(ranks);
          }};
  return impl_->enqueue("reduce_scatter", detail::tensor_detail(output, to_string(op)), {output},
                        std::move(call));
}

WorkPtr MpiProcessGroup::do_barrier() {
  MPI_Comm comm = impl_->comm();
  Op call{"MPI_Ibarrier", [=](MPI_Request* r) { return MPI_Ibarrier(comm, r); }, [] {}};
  return impl_->enqueue("barrier", "", {}, std::move(call));
}

bool MpiProcessGroup::reads_inputs_on_queue() const { return true; }

}  // namespace ddp
