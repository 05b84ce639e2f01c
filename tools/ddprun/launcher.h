#pragma once

#include "options.h"

namespace ddprun {

// How one start of the job ended.
struct LaunchResult {
  int status = 0;            // ddprun's exit status for it (see `ddprun --help`)
  bool interrupted = false;  // ddprun got SIGINT/SIGTERM: never restarted
  bool exec_failed = false;  // the program could not be started: never restarted
  std::string failure;       // the first failure, as ddprun reported it ("" if none)
};

// Routes ddprun's signals (signal_pipe.h); once, before the first launch.
bool install_launcher_signals(std::string& error);

// Starts opts.nproc_per_node ranks of opts.command with the rendezvous at
// opts.master_addr:master_port (DDP_RESTART_COUNT = restart_count) and
// supervises them until all have ended.
LaunchResult run_launcher(const Options& opts, int master_port, int restart_count);

}  // namespace ddprun
