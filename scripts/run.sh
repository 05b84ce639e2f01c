#!/usr/bin/env bash
# The main job, from a fresh Debian 12 machine: install, build what the job
# needs (the library, ddprun, examples/train; scripts/test.sh builds the
# rest), then a 2-rank run on this machine through ddprun.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$(DDP_BUILD_TARGETS=${DDP_BUILD_TARGETS:-ddprun train} scripts/build.sh)
exec "$dir"/tools/ddprun/ddprun --nproc-per-node 2 "$dir"/examples/train
