// The DDP communication thread: runs communication hooks one at a time, in
// submission (bucket) order, so that collectives a hook issues come in the
// same order on every rank, while backward goes on on the autograd thread.
#pragma once

#include <ddp/comm_hook.h>

#include "base/mutex.h"

#include <chrono>
#include <deque>
#include <functional>
#include <thread>

namespace ddp::detail {

class HookRunner {
 public:
  explicit HookRunner(CommHook hook);
  ~HookRunner();  // runs what is queued, then joins
  HookRunner(const HookRunner&) = delete;
  HookRunner& operator=(const HookRunner&) = delete;

  // Queues the hook on `bucket`; the future completes with the hook's
  // result, or its error (a throwing hook included).
  FuturePtr submit(GradBucket bucket);

 private:
  void loop();

  const CommHook hook_;
  Mutex mutex_;
  CondVar cv_;  // signalled on submit and stop
  std::deque<std::pair<GradBucket, FuturePtr>> queue_ DDP_GUARDED_BY(mutex_);
  bool stopping_ DDP_GUARDED_BY(mutex_) = false;
  std::thread thread_;
};

// Waits for `future` at most `group`'s timeout: TimeoutError naming `what`
// (on this rank of `group`) after that; rethrows the future's error.
at::Tensor wait_for(const FuturePtr& future, const ProcessGroup& group, const std::string& what);

}  // namespace ddp::detail
