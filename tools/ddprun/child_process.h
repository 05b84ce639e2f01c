#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace ddprun {

struct ChildSpec {
  std::vector<std::string> command;      // program (looked up in PATH) and arguments
  std::vector<std::string> environment;  // complete environment, "NAME=value"
  bool capture_output = true;            // stdout/stderr through pipes to ddprun
  bool stdin_from_dev_null = false;      // instead of inheriting ddprun's stdin
};

struct SpawnedChild {
  pid_t pid = -1;      // -1: nothing was started, see `error`
  int stdout_fd = -1;  // read ends (non-blocking, close-on-exec) when captured
  int stderr_fd = -1;
  int exec_errno = 0;  // != 0: exec failed; the child exits with exec_failure_status
  std::string error;   // why fork/pipe failed
};

// Starts one rank: fork, own process group, SIGKILL when ddprun dies
// (PR_SET_PDEATHSIG), default signal dispositions, then execvp. Waits
// (bounded) until the exec succeeded or failed, so a missing program is
// reported at once.
SpawnedChild spawn_child(const ChildSpec& spec);

// The exit status used for a failed exec: 127 when the program was not
// found, 126 when it was found but could not be executed (as in sh).
int exec_failure_status(int exec_errno);

}  // namespace ddprun
