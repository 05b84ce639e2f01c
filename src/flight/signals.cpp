// SIGTERM (the launcher stopping the job) and SIGABRT (an abort, e.g. an
// uncaught exception) dump the ring before they take their course: the
// handler that was installed before ours runs next, or the default action.
#include "flight/ring.h"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <utility>

namespace ddp::detail::flight {
namespace {

struct sigaction previous_term, previous_abort;
std::atomic<Recorder*> installed{nullptr};
std::atomic<bool> dumping{false};  // lock-free: safe in a handler
static_assert(std::atomic<Recorder*>::is_always_lock_free && std::atomic<bool>::is_always_lock_free,
              "a signal handler may only touch lock-free atomics");

void on_signal(int sig) {
  const int saved_errno = errno;
  Recorder* r = installed.load();
  if (r && !dumping.exchange(true)) {
    char path[kPathSize];
    write_dump(*r, r->dir, sig == SIGTERM ? "signal SIGTERM" : "signal SIGABRT", path,
               sizeof(path));
  }
  // Hand the signal on: restore the handler that was there and raise again.
  sigaction(sig, sig == SIGTERM ? &previous_term : &previous_abort, nullptr);
  raise(sig);
  errno = saved_errno;
}

}  // namespace

// A signal the program ignores stays ignored.
void install_signal_handlers(Recorder* r) {
  installed.store(r);
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_handler = on_signal;
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  for (auto [sig, previous] : {std::pair{SIGTERM, &previous_term}, {SIGABRT, &previous_abort}}) {
    if (sigaction(sig, nullptr, previous) == 0 && previous->sa_handler != SIG_IGN) {
      sigaction(sig, &action, nullptr);
    }
  }
}

}  // namespace ddp::detail::flight
