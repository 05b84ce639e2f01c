// What a rank knows of its peers' processes: on which host they run, and
// whether they still run.
#pragma once

#include <cstdint>
#include <string>

namespace ddp::detail::shm {

// The PID namespace of this process ("pid:[4026531836]"): peers' process ids
// mean something here only when it is the same.
std::string pid_namespace();

enum class ProcessState { RUNNING, STOPPED, DEAD, UNKNOWN };

// The state of process `pid` on this host: DEAD when it is gone or a zombie
// (killed, not yet reaped), STOPPED when stopped (SIGSTOP, a debugger).
ProcessState process_state(int32_t pid);

// "running", "stopped (SIGSTOP or a debugger)", "dead", "unknown".
const char* to_string(ProcessState state);

// CLOCK_MONOTONIC in milliseconds: the same clock in every process of a host.
int64_t monotonic_ms();

}  // namespace ddp::detail::shm
