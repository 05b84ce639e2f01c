#include "collectives/shm/peers.h"

#include <cerrno>
#include <ctime>
#include <fstream>
#include <sstream>

#include <signal.h>
#include <unistd.h>

namespace ddp::detail::shm {

std::string pid_namespace() {
  char buf[128] = {};
  ssize_t n = readlink("/proc/self/ns/pid", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

ProcessState process_state(int32_t pid) {
  if (pid <= 0) return ProcessState::UNKNOWN;
  if (kill(pid, 0) != 0 && errno == ESRCH) return ProcessState::DEAD;
  // /proc/<pid>/stat: "pid (comm) S ...": the state follows the last ')'.
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return ProcessState::DEAD;
  auto close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return ProcessState::UNKNOWN;
  switch (line[close + 2]) {
    case 'Z':
    case 'X':
    case 'x':
      return ProcessState::DEAD;
    case 'T':
    case 't':
      return ProcessState::STOPPED;
    default:
      return ProcessState::RUNNING;
  }
}

const char* to_string(ProcessState state) {
  switch (state) {
    case ProcessState::RUNNING:
      return "running";
    case ProcessState::STOPPED:
      return "stopped (SIGSTOP or a debugger)";
    case ProcessState::DEAD:
      return "dead";
    case ProcessState::UNKNOWN:
      return "unknown";
  }
  return "?";
}

int64_t monotonic_ms() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

}  // namespace ddp::detail::shm
