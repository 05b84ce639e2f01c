// Starting one rank process (fork + execvp).
//
// Everything the child needs (argv, envp) is built before fork(), so the
// child only makes async-signal-safe calls: setpgid (its own process group,
// so ddprun can signal the rank with everything it started, and a terminal's
// Ctrl-C reaches ddprun alone, which forwards it once), prctl(PDEATHSIG) plus
// a getppid() re-check (the rank dies with ddprun), signal reset, dup2 of
// the output pipes, execvp. A close-on-exec pipe reports the exec result:
// EOF means exec succeeded, an errno value means it failed.
#include "child_process.h"

#include "signal_pipe.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include <cerrno>
#include <csignal>
#include <cstring>

extern char** environ;

namespace ddprun {
namespace {

constexpr int kExecReportTimeoutMs = 10 * 1000;

void close_fd(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

// In the child: make `fd` become `target` without close-on-exec.
void move_fd(int fd, int target) {
  if (fd == target) {
    fcntl(fd, F_SETFD, 0);
  } else {
    dup2(fd, target);
  }
}

[[noreturn]] void run_child(const ChildSpec& spec, pid_t parent, const sigset_t& old_mask,
                            char** argv, char** envp, int out_w, int err_w, int dev_null,
                            int report_w) {
  setpgid(0, 0);
#ifdef __linux__
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(1);  // ddprun died before prctl took effect
#else
  (void)parent;
#endif
  reset_signals_in_child(old_mask);
  if (dev_null >= 0) move_fd(dev_null, STDIN_FILENO);
  if (spec.capture_output) {
    move_fd(out_w, STDOUT_FILENO);
    move_fd(err_w, STDERR_FILENO);
  }
  environ = envp;
  execvp(argv[0], argv);
  const int err = errno;
  [[maybe_unused]] const ssize_t n = write(report_w, &err, sizeof(err));
  _exit(exec_failure_status(err));
}

// Reads the exec report: 0 when exec succeeded (EOF), else the errno.
int read_exec_report(int report_r) {
  int waited_ms = 0;
  while (waited_ms < kExecReportTimeoutMs) {
    pollfd pfd{report_r, POLLIN, 0};
    const int ready = poll(&pfd, 1, 100);
    if (ready == 0 || (ready < 0 && errno == EINTR)) {
      waited_ms += 100;
      continue;
    }
    int err = 0;
    ssize_t n;
    do {
      n = read(report_r, &err, sizeof(err));
    } while (n < 0 && errno == EINTR);
    return n == static_cast<ssize_t>(sizeof(err)) ? err : 0;
  }
  return 0;  // no verdict in time: treat as started; supervision takes over
}

}  // namespace

int exec_failure_status(int exec_errno) {
  return (exec_errno == ENOENT || exec_errno == ENOTDIR) ? 127 : 126;
}

SpawnedChild spawn_child(const ChildSpec& spec) {
  SpawnedChild result;
  int out_pipe[2] = {-1, -1};
  int err_pipe[2] = {-1, -1};
  int report[2] = {-1, -1};
  int dev_null = -1;
  auto close_all = [&] {
    for (int* fd : {&out_pipe[0], &out_pipe[1], &err_pipe[0], &err_pipe[1], &report[0], &report[1],
                    &dev_null}) {
      close_fd(*fd);
    }
  };
  if (pipe2(report, O_CLOEXEC) != 0 || (spec.capture_output && (pipe2(out_pipe, O_CLOEXEC) != 0 ||
                                                                pipe2(err_pipe, O_CLOEXEC) != 0))) {
    result.error = std::string("pipe2: ") + std::strerror(errno);
    close_all();
    return result;
  }
  if (spec.stdin_from_dev_null) dev_null = open("/dev/null", O_RDONLY | O_CLOEXEC);

  std::vector<char*> argv;
  for (const std::string& arg : spec.command) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const std::string& var : spec.environment) envp.push_back(const_cast<char*>(var.c_str()));
  envp.push_back(nullptr);

  const pid_t parent = getpid();
  sigset_t old_mask;
  block_handled_signals(old_mask);
  const pid_t pid = fork();
  if (pid == 0) {
    run_child(spec, parent, old_mask, argv.data(), envp.data(), out_pipe[1], err_pipe[1], dev_null,
              report[1]);
  }
  const int fork_errno = errno;
  restore_signal_mask(old_mask);
  if (pid < 0) {
    result.error = std::string("fork: ") + std::strerror(fork_errno);
    close_all();
    return result;
  }
  setpgid(pid, pid);  // also here, so the group exists before we may signal it

  close_fd(out_pipe[1]);
  close_fd(err_pipe[1]);
  close_fd(report[1]);
  close_fd(dev_null);
  result.pid = pid;
  result.exec_errno = read_exec_report(report[0]);
  close_fd(report[0]);
  if (spec.capture_output) {
    fcntl(out_pipe[0], F_SETFL, fcntl(out_pipe[0], F_GETFL) | O_NONBLOCK);
    fcntl(err_pipe[0], F_SETFL, fcntl(err_pipe[0], F_GETFL) | O_NONBLOCK);
    result.stdout_fd = out_pipe[0];
    result.stderr_fd = err_pipe[0];
  }
  return result;
}

}  // namespace ddprun
