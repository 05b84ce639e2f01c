#include "elastic/generation_abort.h"

#include <utility>

namespace ddp::detail::elastic {

// The replaced abort is destroyed outside the lock: it may hold the last
// reference to a group, whose teardown must not block the heartbeat.
void GenerationAbort::arm(int64_t generation, Abort abort) {
  Abort replaced;
  MutexLock lock(mutex_);
  generation_ = generation;
  replaced.swap(abort_);
  abort_ = std::move(abort);
  lock.unlock();
}

void GenerationAbort::disarm() {
  Abort replaced;
  MutexLock lock(mutex_);
  generation_ = -1;
  replaced.swap(abort_);
  lock.unlock();
}

bool GenerationAbort::member_gone(int64_t generation, int member) {
  Abort abort;
  {
    MutexLock lock(mutex_);
    if (generation < 0 || generation != generation_ || !abort_) return false;
    abort.swap(abort_);  // once: later news of this generation finds nothing armed
  }
  abort("member " + std::to_string(member) + " of generation " + std::to_string(generation) +
        " is gone (the elastic heartbeat found it dead or silent); re-forming");
  return true;
}

}  // namespace ddp::detail::elastic
