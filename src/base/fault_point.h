// Places in the middle of a protocol where a test can make this process die
// on cue (SIGKILL), to check that the others recover from a failure there:
// a death between two transfers of an elastic ZeRO handover, say, which no
// outside signal can time. A point costs one relaxed atomic load per pass
// while nothing is armed.
//
// The points: "elastic.zero_handover.transfer", at the start of each
// member's turn to send its states in a ZeRO handover
// (src/elastic/zero_shards.cpp).
//
// A process is armed from the start by $DDP_FAULT_POINT="NAME:PASS" (read
// when libddp loads), as arm_fault_point(NAME, PASS) would.
#pragma once

#include <string>

namespace ddp::detail {

// This process passes `name` (a string literal).
void fault_point(const char* name);

// From now on, the `pass`-th pass (1: the next) through `name` kills this
// process with SIGKILL, after a line on stderr. One point armed at a time.
void arm_fault_point(const std::string& name, int pass);

}  // namespace ddp::detail
