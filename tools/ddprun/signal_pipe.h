#pragma once

#include <signal.h>

#include <string>
#include <vector>

namespace ddprun {

// Routes SIGINT, SIGTERM and SIGCHLD into a non-blocking self-pipe that the
// supervision loop polls, and ignores SIGPIPE (a closed stdout must not kill
// ddprun while it still has ranks to stop). Call once, before any fork.
bool install_signal_pipe(std::string& error);

// The read end of the self-pipe, for poll().
int signal_pipe_fd();

// The signals received since the last call, oldest first (never blocks).
std::vector<int> drain_signal_pipe();

// Blocks the handled signals around fork(); `old_mask` receives the mask to
// restore (in the parent with restore_signal_mask, in the child through
// reset_signals_in_child).
void block_handled_signals(sigset_t& old_mask);
void restore_signal_mask(const sigset_t& old_mask);

// In a forked child before exec: back to default dispositions for every
// signal ddprun changed, then `old_mask`. Async-signal-safe.
void reset_signals_in_child(const sigset_t& old_mask);

}  // namespace ddprun
