#include "base/setup_cancel.h"

#include "base/mutex.h"

#include <ddp/errors.h>

#include <atomic>

namespace ddp::detail {
namespace {

std::atomic<bool> cancelled{false};
Mutex mutex;
bool window_open DDP_GUARDED_BY(mutex) = false;
std::string cancel_reason DDP_GUARDED_BY(mutex);

}  // namespace

SetupWindow::SetupWindow() {
  MutexLock lock(mutex);
  window_open = true;
  cancel_reason.clear();
  cancelled.store(false, std::memory_order_relaxed);
}

SetupWindow::~SetupWindow() {
  MutexLock lock(mutex);
  window_open = false;
  cancel_reason.clear();
  cancelled.store(false, std::memory_order_relaxed);
}

void cancel_group_setups(const std::string& reason) {
  MutexLock lock(mutex);
  if (!window_open) return;
  cancel_reason = reason;
  cancelled.store(true, std::memory_order_relaxed);
}

void throw_if_setup_cancelled() {
  if (!cancelled.load(std::memory_order_relaxed)) return;
  std::string reason;
  {
    MutexLock lock(mutex);
    if (!window_open || cancel_reason.empty()) return;
    reason = cancel_reason;
  }
  throw CommunicationError("the group's set-up was cancelled: " + reason);
}

}  // namespace ddp::detail
