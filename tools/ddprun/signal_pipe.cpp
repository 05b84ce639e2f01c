// Signal handling for ddprun through a self-pipe.
//
// The handlers for SIGINT, SIGTERM and SIGCHLD only write the signal number
// (one byte) into a non-blocking, close-on-exec pipe; the supervision loop
// polls the read end together with the ranks' output pipes, so signals and
// child exits wake it immediately and all real work happens outside signal
// context. SIGPIPE is ignored in ddprun and restored to the default in the
// ranks, as are the other handled signals, before exec.
#include "signal_pipe.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ddprun {
namespace {

int g_pipe_read = -1;
int g_pipe_write = -1;

constexpr int kHandled[] = {SIGINT, SIGTERM, SIGCHLD};

extern "C" void on_signal(int sig) {
  const int saved_errno = errno;
  const unsigned char byte = static_cast<unsigned char>(sig);
  // A full pipe drops the byte: the loop reaps on every wake-up anyway, and
  // a pending forwarded signal is already in the pipe.
  [[maybe_unused]] const ssize_t n = write(g_pipe_write, &byte, 1);
  errno = saved_errno;
}

}  // namespace

bool install_signal_pipe(std::string& error) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    error = std::string("pipe2: ") + std::strerror(errno);
    return false;
  }
  g_pipe_read = fds[0];
  g_pipe_write = fds[1];

  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  for (const int sig : kHandled) {
    if (sigaction(sig, &action, nullptr) != 0) {
      error = std::string("sigaction: ") + std::strerror(errno);
      return false;
    }
  }
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  sigaction(SIGPIPE, &ignore, nullptr);
  return true;
}

int signal_pipe_fd() { return g_pipe_read; }

std::vector<int> drain_signal_pipe() {
  std::vector<int> received;
  unsigned char buffer[64];
  for (;;) {
    const ssize_t n = read(g_pipe_read, buffer, sizeof(buffer));
    if (n > 0) {
      received.insert(received.end(), buffer, buffer + n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break;  // EAGAIN: empty
  }
  return received;
}

void block_handled_signals(sigset_t& old_mask) {
  sigset_t block;
  sigemptyset(&block);
  for (const int sig : kHandled) sigaddset(&block, sig);
  sigprocmask(SIG_BLOCK, &block, &old_mask);
}

void restore_signal_mask(const sigset_t& old_mask) { sigprocmask(SIG_SETMASK, &old_mask, nullptr); }

void reset_signals_in_child(const sigset_t& old_mask) {
  struct sigaction action {};
  action.sa_handler = SIG_DFL;
  sigemptyset(&action.sa_mask);
  for (const int sig : kHandled) sigaction(sig, &action, nullptr);
  sigaction(SIGPIPE, &action, nullptr);
  sigprocmask(SIG_SETMASK, &old_mask, nullptr);
}

}  // namespace ddprun
