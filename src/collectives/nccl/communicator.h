// NCCL's C API, as the nccl backend uses it: one non-blocking communicator,
// whose initialisation and calls are polled against a deadline, and the
// mapping of ddp's dtypes and ops onto NCCL's.
#pragma once

#include <ddp/errors.h>
#include <ddp/process_group.h>

#include "base/mutex.h"

#include <c10/core/ScalarType.h>
#include <nccl.h>

#include <chrono>
#include <functional>
#include <string>

namespace ddp::detail::nccl {

using Clock = std::chrono::steady_clock;

// NCCL's type for one of the collective dtypes (collectives/dtypes.h).
ncclDataType_t data_type(at::ScalarType dtype);
ncclRedOp_t red_op(ReduceOp op);
// The NCCL this process loaded: its version code (NCCL_VERSION_CODE's
// form), as text ("2.28.9"), and the file it came from.
int loaded_version_code();
std::string version();
std::string loaded_path();
// InvalidArgument in `context` unless the loaded NCCL serves the headers ddp
// was compiled with (version_gate.h's loaded_version_mismatch).
void check_loaded_version(const ErrorContext& context);

// `n` bytes as lowercase hex, two digits a byte: ids for the store.
std::string hex(const void* bytes, size_t n);

// The unique id rank 0 makes, as text for the store (hex), and back.
std::string new_unique_id();
ncclUniqueId unique_id_from(const std::string& hex);

class Communicator {
 public:
  // Joins the communicator of `size` ranks named by `id` on CUDA device
  // `device`. Blocks until every rank has joined; at `deadline`, aborts and
  // raises TimeoutError. `context` is this rank's in errors (operation "nccl").
  Communicator(const ncclUniqueId& id, int rank, int size, int device, Clock::time_point deadline,
               ErrorContext context);
  ~Communicator();  // aborts: never waits for a peer
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  // Runs NCCL calls (`calls` returns the last one's result), then waits while
  // NCCL reports them in progress (connections being made). CommunicationError
  // naming `what` on an error or once the communicator is aborted;
  // TimeoutError at `deadline`. Thread-safe with abort(): NCCL calls on the
  // communicator and its abort never overlap.
  void run(const std::function<ncclResult_t()>& calls, const std::string& what,
           Clock::time_point deadline);
  // "" while healthy; else NCCL's asynchronous error (a peer failed, a
  // network error). Thread-safe.
  std::string async_error() const;
  // Ends every pending operation; the communicator is unusable after it.
  // Thread-safe; idempotent.
  void abort();

  ncclComm_t get() const { return comm_; }

 private:
  // Polls ncclCommGetAsyncError until NCCL is no longer in progress, taking
  // mutex_ for each look (so that an abort can come between two).
  ncclResult_t settle(Clock::time_point deadline, const std::string& what);
  std::string error_text(ncclResult_t result) const DDP_REQUIRES(mutex_);
  void abort_locked() DDP_REQUIRES(mutex_);

  const ErrorContext context_;
  mutable Mutex mutex_;  // held across every NCCL call on comm_, and its abort
  // Set in the constructor; NCCL calls on it with mutex_ held; freed by the abort.
  ncclComm_t comm_ = nullptr;
  bool aborted_ DDP_GUARDED_BY(mutex_) = false;
};

}  // namespace ddp::detail::nccl
