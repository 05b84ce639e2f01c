// A socket write to a peer that has closed raises SIGPIPE, whose default
// action ends the process: a dead peer would be a crash instead of a
// CommunicationError that names it. ddp leaves the process's signal handling
// alone; the threads it starts (collective workers, and Gloo's loop thread,
// started inside CreateDevice) begin with SIGPIPE blocked instead, so such a
// write fails with EPIPE and the backend reports it.
//
//   { detail::SigpipeBlockedForNewThreads scope; workers_.emplace_back(...); }
#pragma once

#include <pthread.h>
#include <signal.h>

namespace ddp::detail {

// While alive, the calling thread blocks SIGPIPE, so threads it starts
// inherit the block; its own mask is restored after.
class SigpipeBlockedForNewThreads {
 public:
  SigpipeBlockedForNewThreads() {
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe, &previous_);
  }
  ~SigpipeBlockedForNewThreads() { pthread_sigmask(SIG_SETMASK, &previous_, nullptr); }
  SigpipeBlockedForNewThreads(const SigpipeBlockedForNewThreads&) = delete;
  SigpipeBlockedForNewThreads& operator=(const SigpipeBlockedForNewThreads&) = delete;

 private:
  sigset_t previous_;
};

}  // namespace ddp::detail
