// The hand-over of a staged collective's input copies to the backend: while
// a PendingGate lives on the issuing thread, the operation the backend
// queues there (TaskQueue::enqueue) takes the gate, and the worker that runs
// it waits for the copies before the body reads them. So the caller's
// thread (autograd's, for DDP's buckets) never waits for a copy, and
// operations still run in issue order. A queue with a gate pending refuses
// claims (the caller would run the body itself).
//
// Only groups whose every operation goes through their TaskQueue take
// gates (ProcessGroup::reads_inputs_on_queue); for the others, staging
// waits for the copies on the caller's thread before the backend call.
#pragma once

#include "collectives/fence.h"

#include <memory>

namespace ddp::detail {

struct StagingGate {
  Fence copied;  // the input copies to the host are done
};
using GatePtr = std::shared_ptr<const StagingGate>;

class PendingGate {
 public:
  explicit PendingGate(GatePtr gate);
  // A gate still pending here was not taken: the backend queued nothing.
  ~PendingGate();
  PendingGate(const PendingGate&) = delete;
  PendingGate& operator=(const PendingGate&) = delete;

  // Whether an operation took it.
  bool taken() const;

 private:
  const StagingGate* const mine_;
  GatePtr previous_;
};

// The calling thread's pending gate, now no longer pending; null if none.
GatePtr take_pending_gate();
// Whether the calling thread has one.
bool gate_pending();

}  // namespace ddp::detail
