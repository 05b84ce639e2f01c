// Cancelling the group set-ups in progress in this process: the elastic
// runner's heartbeat, finding a member of the generation being formed gone,
// ends the set-up's waits at once (a CommunicationError naming the member)
// rather than at the group's timeout (DDP_TIMEOUT, 30 minutes by default),
// which is what the others would wait for a member that died before it
// arrived, published its address or mapped shm's segment. Every wait of a
// set-up on the store (base/arrival.h, shm's, Gloo's rendezvous) checks it
// at each poll; outside a SetupWindow nothing is ever cancelled.
//
// It is process-wide: a group that another thread of an elastic member sets
// up during a formation is cancelled with the generation's.
#pragma once

#include <string>

namespace ddp::detail {

// While one lives, cancel_group_setups() applies. Not nested.
class SetupWindow {
 public:
  SetupWindow();
  ~SetupWindow();
  SetupWindow(const SetupWindow&) = delete;
  SetupWindow& operator=(const SetupWindow&) = delete;
};

// From now until the window closes, every set-up wait throws
// CommunicationError with `reason`. Ignored outside a window.
void cancel_group_setups(const std::string& reason);

// What the waits call at each poll; one relaxed atomic load when nothing
// was cancelled.
void throw_if_setup_cancelled();

}  // namespace ddp::detail
