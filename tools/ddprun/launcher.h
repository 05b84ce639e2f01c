#pragma once

#include "options.h"

namespace ddprun {

// Starts opts.nproc_per_node ranks of opts.command with the rendezvous at
// opts.master_addr:master_port, supervises them until all have ended, and
// returns ddprun's exit status (see `ddprun --help`). Installs ddprun's
// signal handling; call once.
int run_launcher(const options& opts, int master_port);

}  // namespace ddprun
