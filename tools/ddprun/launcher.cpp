// Supervision of the ranks: the heart of ddprun.
//
// One single-threaded poll loop watches the signal self-pipe and every
// rank's stdout/stderr pipe, with a timeout of at most kTickMs, and on each
// wake-up: handles received signals (SIGINT/SIGTERM are forwarded to every
// running rank's process group), reaps exited ranks (the first rank that
// fails, or ddprun's first signal, decides the exit status; a failure stops
// the others with SIGTERM), sends SIGKILL to ranks still running a grace
// period after they were told to stop, and copies output through the line
// prefixers. When every rank is reaped the pipes get a short, bounded time to
// reach EOF (a rank's leftover background process may hold them open).
//
// With --elastic, ddp-store (next to ddprun) holds the job's store from
// before the first rank starts until after the last one ended, and a rank
// that fails is reported without stopping the others while at least MIN of
// them run: the ranks re-form among themselves (ddp/elastic.h).
#include "launcher.h"

#include "child_process.h"
#include "line_prefixer.h"
#include "rank_environment.h"
#include "signal_pipe.h"

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

extern char** environ;

namespace ddprun {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kTickMs = 200;
constexpr auto kPipeDrainTime = std::chrono::milliseconds(1000);
constexpr std::size_t kReadChunk = 64 * 1024;

// One output pipe of a rank, read by ddprun and written out prefixed.
struct OutputStream {
  int fd = -1;
  std::unique_ptr<LinePrefixer> prefixer;
};

struct RankProcess {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  bool exec_failed = false;
  OutputStream out;
  OutputStream err;
};

void say(const std::string& message) {
  const std::string line = "ddprun: " + message + "\n";
  write_all(STDERR_FILENO, line.data(), line.size());
}

std::string signal_name(int sig) {
  if (sig == SIGINT) return "SIGINT";
  if (sig == SIGTERM) return "SIGTERM";
  return "signal " + std::to_string(sig);
}

std::string format_seconds(double s) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%g", s);
  return buffer;
}

class Supervisor {
 public:
  Supervisor(const Options& opts, int master_port, int restart_count)
      : opts_(opts), master_port_(master_port), restart_count_(restart_count) {}

  LaunchResult run() {
    if (opts_.elastic_min > 0 && !opts_.join) start_store();
    if (!stopping_) start_ranks();
    for (;;) {
      handle_signals();
      reap();
      enforce_grace_deadline();
      if (running_count() == 0) {
        if (open_stream_count() == 0) break;
        if (!drain_deadline_) drain_deadline_ = Clock::now() + kPipeDrainTime;
        if (Clock::now() >= *drain_deadline_) break;
      }
      poll_once();
    }
    for (RankProcess& r : ranks_) {
      drain(r.out);
      drain(r.err);
      close_stream(r.out);
      close_stream(r.err);
    }
    stop_store();
    LaunchResult result;
    result.status = decided_status_.value_or(0);
    result.interrupted = interrupted_;
    result.exec_failed = exec_failed_;
    result.failure = failure_;
    return result;
  }

 private:
  void start_ranks() {
    const int n = opts_.nproc_per_node;
    const bool stdin_is_tty = isatty(STDIN_FILENO) != 0;
    for (int local = 0; local < n && !stopping_; ++local) {
      RankIdentity id;
      id.rank = opts_.node_rank * n + local;
      id.world_size = opts_.nnodes * n;
      id.local_rank = local;
      id.local_world_size = n;
      id.node_rank = opts_.node_rank;
      id.nnodes = opts_.nnodes;
      id.master_addr = opts_.master_addr;
      id.master_port = master_port_;
      id.restart_count = restart_count_;
      id.flight_recorder_dir = opts_.flight_recorder_dir;
      id.elastic_min = opts_.elastic_min;
      id.elastic_max = opts_.elastic_max;
      id.joiner = opts_.join;

      ChildSpec spec;
      spec.command = opts_.command;
      spec.environment = rank_environment(environ, id);
      spec.capture_output = opts_.prefix_output;
      // Ranks run in their own process groups: reading a terminal there
      // would stop them (SIGTTIN), so they get /dev/null instead.
      spec.stdin_from_dev_null = stdin_is_tty;
      SpawnedChild child = spawn_child(spec);
      if (child.pid < 0) {
        failure_ = "cannot start rank " + std::to_string(id.rank) + ": " + child.error;
        say(failure_);
        exec_failed_ = true;
        decide(1);
        stop_all(SIGTERM);
        break;
      }
      RankProcess r;
      r.rank = id.rank;
      r.pid = child.pid;
      r.running = true;
      const std::string prefix =
          (opts_.join ? "[join " + std::to_string(local) : "[rank " + std::to_string(id.rank)) +
          "] ";
      r.out.fd = child.stdout_fd;
      r.err.fd = child.stderr_fd;
      if (r.out.fd >= 0) r.out.prefixer = std::make_unique<LinePrefixer>(prefix, STDOUT_FILENO);
      if (r.err.fd >= 0) r.err.prefixer = std::make_unique<LinePrefixer>(prefix, STDERR_FILENO);
      ranks_.push_back(std::move(r));
      if (child.exec_errno != 0) {
        ranks_.back().exec_failed = true;
        failure_ = "cannot execute '" + opts_.command[0] + "': " + std::strerror(child.exec_errno);
        say(failure_);
        exec_failed_ = true;
        decide(exec_failure_status(child.exec_errno));
        stop_all(SIGTERM);
        break;
      }
      handle_signals();  // a Ctrl-C while starting stops the start-up
    }
  }

  void handle_signals() {
    for (const int sig : drain_signal_pipe()) {
      if (sig != SIGINT && sig != SIGTERM) continue;  // SIGCHLD: reap() runs anyway
      if (!decided_status_) interrupted_ = true;
      decide(128 + sig);
      const int count = running_count();
      if (count > 0) {
        say("received " + signal_name(sig) + "; forwarding it to " + std::to_string(count) +
            " running rank(s)");
      }
      stop_all(sig);
    }
  }

  void reap() {
    for (RankProcess& r : ranks_) {
      if (!r.running) continue;
      int status = 0;
      pid_t got;
      do {
        got = waitpid(r.pid, &status, WNOHANG);
      } while (got < 0 && errno == EINTR);
      if (got == 0) continue;
      r.running = false;
      if (got < 0) continue;  // ECHILD: cannot happen for our own child
      const bool failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
      if (!failed && opts_.elastic_min > 0) finishing();
      if (!failed || r.exec_failed || decided_status_) continue;
      // Show the rank's last words before ddprun's verdict about it.
      drain(r.out);
      drain(r.err);
      const int others = running_count();
      std::string message =
          "rank " + std::to_string(r.rank) + " (pid " + std::to_string(r.pid) + ")";
      if (WIFSIGNALED(status)) {
        const int sig = WTERMSIG(status);
        message += " was killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
        decide(128 + sig);
      } else {
        message += " exited with status " + std::to_string(WEXITSTATUS(status));
        decide(WEXITSTATUS(status));
      }
      failure_ = message;
      if (opts_.elastic_min > 0 && (opts_.join || finishing_ || others >= opts_.elastic_min)) {
        // Elastic: the others re-form without it. Not decisive unless it
        // left too few (or, joining, it is this ddprun's own failure), nor
        // once the job has finished.
        if (opts_.join) failed_status_ = failed_status_.value_or(*decided_status_);
        decided_status_.reset();
        say(message + "; elastic: " + std::to_string(others) + " rank(s) of this ddprun go on" +
            (opts_.join ? "" : " (minimum " + std::to_string(opts_.elastic_min) + ")"));
        continue;
      }
      if (opts_.elastic_min > 0)
        message +=
            "; fewer than the minimum of " + std::to_string(opts_.elastic_min) + " rank(s) left";
      if (others > 0) message += "; stopping the other " + std::to_string(others) + " rank(s)";
      say(message);
      stop_all(SIGTERM);
    }
    if (running_count() == 0 && !decided_status_ && failed_status_) decide(*failed_status_);
    reap_store();
  }

  // Elastic: a rank ended well, so the job is done. A rank left behind
  // (stopped, or a spare) is continued to see that and end on its own
  // within the grace period, then killed.
  void finishing() {
    if (finishing_) return;
    finishing_ = true;
    for (const RankProcess& r : ranks_) {
      if (r.running) signal_rank(r, SIGCONT);
    }
    if (!kill_deadline_ && running_count() > 0) {
      kill_deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                          std::chrono::duration<double>(opts_.grace_period_s));
    }
  }

  // The store must outlive the ranks: if it ends first, so does the job.
  void reap_store() {
    if (store_pid_ <= 0) return;
    int status = 0;
    if (waitpid(store_pid_, &status, WNOHANG) != store_pid_) return;
    store_pid_ = -1;
    if (running_count() == 0 || stopping_) return;
    failure_ =
        "ddp-store (the elastic job's store) ended " +
        std::string(WIFSIGNALED(status) ? "by signal " + std::to_string(WTERMSIG(status))
                                        : "with status " + std::to_string(WEXITSTATUS(status))) +
        " while ranks ran; stopping them";
    say(failure_);
    decide(1);
    stop_all(SIGTERM);
  }

  // ddp-store on the rendezvous port, its output straight to ddprun's.
  void start_store() {
    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    std::string dir = n > 0 ? std::string(self, static_cast<std::size_t>(n)) : std::string();
    dir = dir.substr(0, dir.rfind('/') + 1);
    ChildSpec spec;
    spec.command = {
        dir + "ddp-store", "--host",      opts_.master_addr, "--port", std::to_string(master_port_),
        "--report",        "--report-as", "ddprun"};
    for (char** e = environ; e && *e; ++e) spec.environment.emplace_back(*e);
    spec.capture_output = false;
    spec.stdin_from_dev_null = true;
    SpawnedChild child = spawn_child(spec);
    if (child.pid < 0 || child.exec_errno != 0) {
      failure_ = "--elastic: cannot start " + spec.command[0] + ": " +
                 (child.pid < 0 ? child.error : std::strerror(child.exec_errno)) +
                 " (it is built and installed next to ddprun)";
      say(failure_);
      exec_failed_ = true;
      decide(1);
      stopping_ = true;
      if (child.pid > 0) waitpid(child.pid, nullptr, 0);
      return;
    }
    store_pid_ = child.pid;
  }

  // After the last rank: SIGTERM, then SIGKILL if it has not gone in 2 s.
  void stop_store() {
    if (store_pid_ <= 0) return;
    kill(store_pid_, SIGTERM);
    const auto deadline = Clock::now() + std::chrono::seconds(2);
    while (waitpid(store_pid_, nullptr, WNOHANG) == 0) {
      if (Clock::now() >= deadline) {
        kill(store_pid_, SIGKILL);
        waitpid(store_pid_, nullptr, 0);
        break;
      }
      usleep(10 * 1000);
    }
    store_pid_ = -1;
  }

  // Sends `sig` to every running rank (its whole process group) and starts
  // the grace period after which the remaining ones get SIGKILL.
  void stop_all(int sig) {
    stopping_ = true;
    for (const RankProcess& r : ranks_) {
      if (r.running) signal_rank(r, sig);
    }
    if (!kill_deadline_) {
      kill_deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                          std::chrono::duration<double>(opts_.grace_period_s));
    }
  }

  void enforce_grace_deadline() {
    if (!kill_deadline_ || killed_ || Clock::now() < *kill_deadline_) return;
    killed_ = true;
    for (const RankProcess& r : ranks_) {
      if (!r.running) continue;
      say("rank " + std::to_string(r.rank) + " (pid " + std::to_string(r.pid) + ") still running " +
          format_seconds(opts_.grace_period_s) + " s after being told to stop; sending SIGKILL");
      signal_rank(r, SIGKILL);
    }
  }

  static void signal_rank(const RankProcess& r, int sig) {
    if (kill(-r.pid, sig) != 0) kill(r.pid, sig);  // no group (setpgid failed): the rank alone
  }

  void decide(int status) {
    if (!decided_status_) decided_status_ = status;
  }

  void poll_once() {
    std::vector<pollfd> fds;
    std::vector<OutputStream*> streams;
    fds.push_back({signal_pipe_fd(), POLLIN, 0});
    for (RankProcess& r : ranks_) {
      for (OutputStream* s : {&r.out, &r.err}) {
        if (s->fd < 0) continue;
        fds.push_back({s->fd, POLLIN, 0});
        streams.push_back(s);
      }
    }
    const int ready = poll(fds.data(), fds.size(), timeout_ms());
    if (ready <= 0) return;  // timeout or EINTR: the loop re-checks everything
    for (std::size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents != 0) read_once(*streams[i - 1]);
    }
  }

  // Milliseconds until the next thing that is due, at most kTickMs.
  int timeout_ms() const {
    auto next = Clock::now() + std::chrono::milliseconds(kTickMs);
    if (kill_deadline_ && !killed_ && *kill_deadline_ < next) next = *kill_deadline_;
    if (drain_deadline_ && *drain_deadline_ < next) next = *drain_deadline_;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now()).count();
    return left < 0 ? 0 : static_cast<int>(left) + 1;
  }

  // One read; returns false once the stream is closed.
  bool read_once(OutputStream& s) {
    if (s.fd < 0) return false;
    char buffer[kReadChunk];
    const ssize_t n = read(s.fd, buffer, sizeof(buffer));
    if (n > 0) {
      s.prefixer->feed(buffer, static_cast<std::size_t>(n));
      return true;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return false;
    close_stream(s);  // EOF or error
    return false;
  }

  // Reads what is in the pipe right now (bounded), without waiting.
  void drain(OutputStream& s) {
    for (int i = 0; i < 64 && read_once(s); ++i) {}
  }

  static void close_stream(OutputStream& s) {
    if (s.fd < 0) return;
    s.prefixer->finish();
    close(s.fd);
    s.fd = -1;
  }

  int running_count() const {
    int count = 0;
    for (const RankProcess& r : ranks_) count += r.running ? 1 : 0;
    return count;
  }

  int open_stream_count() const {
    int count = 0;
    for (const RankProcess& r : ranks_) count += (r.out.fd >= 0) + (r.err.fd >= 0);
    return count;
  }

  const Options& opts_;
  const int master_port_;
  const int restart_count_;
  std::vector<RankProcess> ranks_;
  std::optional<int> decided_status_;
  std::optional<int> failed_status_;  // --join: the first failure, decided once all ended
  pid_t store_pid_ = -1;              // ddp-store, with --elastic
  bool finishing_ = false;  // --elastic: a rank ended well, the others are given their grace
  bool interrupted_ = false, exec_failed_ = false;
  std::string failure_;  // the deciding failure, for a restart's report
  bool stopping_ = false;
  bool killed_ = false;
  std::optional<Clock::time_point> kill_deadline_;
  std::optional<Clock::time_point> drain_deadline_;
};

}  // namespace

bool install_launcher_signals(std::string& error) { return install_signal_pipe(error); }

LaunchResult run_launcher(const Options& opts, int master_port, int restart_count) {
  Supervisor s(opts, master_port, restart_count);
  return s.run();
}

}  // namespace ddprun
