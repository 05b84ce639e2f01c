#include "collectives/staging_gate.h"

#include <utility>

namespace ddp::detail {

namespace {
thread_local GatePtr pending_gate;
}  // namespace

PendingGate::PendingGate(GatePtr gate)
    : mine_(gate.get()), previous_(std::exchange(pending_gate, std::move(gate))) {}

PendingGate::~PendingGate() { pending_gate = std::move(previous_); }

bool PendingGate::taken() const { return pending_gate.get() != mine_; }

GatePtr take_pending_gate() { return std::exchange(pending_gate, nullptr); }

bool gate_pending() { return pending_gate != nullptr; }

}  // namespace ddp::detail
