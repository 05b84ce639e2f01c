#include "collectives/nccl/communicator.h"

#include "base/mutex.h"
#include "collectives/nccl/version_gate.h"

#include <ddp/errors.h>

#include <c10/cuda/CUDAGuard.h>

#include <dlfcn.h>

#include <cstdio>
#include <thread>
#include <utility>

namespace ddp::detail::nccl {
namespace {

// How long a poll of NCCL's state sleeps between two looks.
constexpr std::chrono::microseconds kPollInterval(50);

// The context of errors raised away from a communicator: operation "nccl",
// on `rank` when known.
ErrorContext nccl_context(int rank = -1) { return ErrorContext{rank, 0, "", "nccl", {}}; }

}  // namespace

ncclDataType_t data_type(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
      return ncclFloat32;
    case at::kDouble:
      return ncclFloat64;
    case at::kHalf:
      return ncclFloat16;
    case at::kBFloat16:
      return ncclBfloat16;
    case at::kInt:
      return ncclInt32;
    case at::kLong:
      return ncclInt64;
    case at::kByte:
      return ncclUint8;
    default:
      throw InvalidArgument(nccl_context(),
                            std::string("no NCCL type for dtype ") + c10::toString(dtype));
  }
}

ncclRedOp_t red_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM:
      return ncclSum;
    case ReduceOp::AVG:
      return ncclAvg;
    case ReduceOp::MIN:
      return ncclMin;
    case ReduceOp::MAX:
      return ncclMax;
    case ReduceOp::PRODUCT:
      return ncclProd;
  }
  return ncclSum;
}

int loaded_version_code() {
  int v = 0;
  ncclGetVersion(&v);
  return v;
}

std::string version() { return version_text(loaded_version_code()); }

std::string loaded_path() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&ncclGetVersion), &info) == 0 || info.dli_fname == nullptr) {
    return "an unknown file";
  }
  return info.dli_fname;
}

void check_loaded_version(const ErrorContext& context) {
  const std::string mismatch =
      loaded_version_mismatch(loaded_version_code(), loaded_path(), NCCL_VERSION_CODE);
  if (!mismatch.empty()) throw InvalidArgument(context, mismatch);
}

std::string new_unique_id() {
  ncclUniqueId id;
  ncclResult_t r = ncclGetUniqueId(&id);
  if (r != ncclSuccess) {
    throw CommunicationError(nccl_context(0),
                             std::string("ncclGetUniqueId failed: ") + ncclGetErrorString(r));
  }
  return hex(id.internal, sizeof id.internal);
}

std::string hex(const void* bytes, size_t n) {
  std::string text;
  char digits[3];
  for (size_t i = 0; i < n; ++i) {
    std::snprintf(digits, sizeof digits, "%02x", static_cast<const unsigned char*>(bytes)[i]);
    text += digits;
  }
  return text;
}

ncclUniqueId unique_id_from(const std::string& hex) {
  ncclUniqueId id;
  if (hex.size() != 2 * sizeof id.internal) {
    throw InvalidArgument(nccl_context(),
                          "rank 0's NCCL id in the store is " + std::to_string(hex.size()) +
                              " characters, expected " + std::to_string(2 * sizeof id.internal) +
                              ": another program shares the store's prefix");
  }
  for (size_t i = 0; i < sizeof id.internal; ++i) {
    id.internal[i] = static_cast<char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  }
  return id;
}

Communicator::Communicator(const ncclUniqueId& id, int rank, int size, int device,
                           Clock::time_point deadline, ErrorContext context)
    : context_(std::move(context)) {
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // init and calls return at once; settle() polls them
  ncclResult_t r;
  {
    MutexLock lock(mutex_);
    r = ncclCommInitRankConfig(&comm_, size, id, rank, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      const std::string text = error_text(r);
      abort_locked();
      throw CommunicationError(context_, "ncclCommInitRankConfig failed: " + text);
    }
  }
  try {
    r = settle(deadline, "making the communicator (the other ranks did not all join)");
  } catch (...) {
    abort();
    throw;
  }
  if (r != ncclSuccess) {
    MutexLock lock(mutex_);
    const std::string text = error_text(r);
    abort_locked();
    throw CommunicationError(context_, "making the communicator failed: " + text);
  }
}

Communicator::~Communicator() { abort(); }

void Communicator::run(const std::function<ncclResult_t()>& calls, const std::string& what,
                       Clock::time_point deadline) {
  ncclResult_t r;
  {
    MutexLock lock(mutex_);
    if (aborted_) {
      throw CommunicationError(context_,
                               what + ": the communicator was aborted by an earlier failure");
    }
    r = calls();
  }
  if (r == ncclInProgress) r = settle(deadline, what);
  if (r != ncclSuccess) {
    MutexLock lock(mutex_);
    throw CommunicationError(context_, what + " failed: " + error_text(r));
  }
}

ncclResult_t Communicator::settle(Clock::time_point deadline, const std::string& what) {
  for (;;) {
    {
      MutexLock lock(mutex_);
      if (aborted_) return ncclInvalidUsage;  // error_text says it was aborted
      ncclResult_t state = ncclSuccess;
      ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
      if (r != ncclSuccess) return r;
      if (state != ncclInProgress) return state;
    }
    if (Clock::now() >= deadline) {
      throw TimeoutError(context_,
                         what +
                             ": not done within the group's timeout; the communicator is "
                             "aborted. A peer may have died or not started; see its output.");
    }
    std::this_thread::sleep_for(kPollInterval);
  }
}

std::string Communicator::async_error() const {
  MutexLock lock(mutex_);
  if (aborted_) return "the communicator was aborted";
  ncclResult_t state = ncclSuccess;
  ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
  if (r != ncclSuccess) return error_text(r);
  if (state != ncclSuccess && state != ncclInProgress) return error_text(state);
  return "";
}

void Communicator::abort() {
  MutexLock lock(mutex_);
  abort_locked();
}

void Communicator::abort_locked() {
  if (comm_ == nullptr || aborted_) return;
  aborted_ = true;
  ncclCommAbort(comm_);
}

std::string Communicator::error_text(ncclResult_t result) const {
  if (aborted_) return "the communicator was aborted by an earlier failure";
  std::string text = ncclGetErrorString(result);
  if (comm_ != nullptr && !aborted_) {
    const char* last = ncclGetLastError(comm_);
    if (last != nullptr && *last != '\0') text += " (" + std::string(last) + ")";
  }
  return text;
}

}  // namespace ddp::detail::nccl
