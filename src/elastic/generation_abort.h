// The elastic runner's seam between the heartbeat and a generation's group:
// when the heartbeat finds a member of the generation gone, whoever waits on
// it fails now rather than at the group's timeout. The runner arms it twice:
// while the group is being made, with the cancelling of the set-up's waits
// (base/setup_cancel.h: the others would wait for a member that died before
// it arrived, published its address or mapped shm's segment); once made,
// with ProcessGroup::abort (the nccl backend needs it: a dead peer's NCCL
// collective waits; the others notice a dead peer themselves, and their
// abort does nothing).
#pragma once

#include "base/mutex.h"

#include <cstdint>
#include <functional>
#include <string>

namespace ddp::detail::elastic {

class GenerationAbort {
 public:
  using Abort = std::function<void(const std::string& reason)>;

  // The runner: what ends `generation`'s group, or its set-up.
  void arm(int64_t generation, Abort abort);
  // The runner, when the generation ends (normally or not): nothing left to end.
  void disarm();
  // The heartbeat: `member` of `generation` is gone. Calls the armed abort,
  // outside the lock, once per armed generation and only for that one;
  // returns whether it called it.
  bool member_gone(int64_t generation, int member);

 private:
  Mutex mutex_;
  int64_t generation_ DDP_GUARDED_BY(mutex_) = -1;
  Abort abort_ DDP_GUARDED_BY(mutex_);
};

}  // namespace ddp::detail::elastic
