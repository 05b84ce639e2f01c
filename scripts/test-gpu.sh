#!/usr/bin/env bash
# The tests labelled gpu, on a machine with a GPU: builds as scripts/test.sh
# does (pip's torch, which must be a CUDA build), then runs them. Elsewhere
# they report themselves skipped. On a machine without this project's
# install script (a GPU machine lent for a session), point DDP_PYTHON at a
# Python with torch 2.11 and set DDP_SKIP_INSTALL=1.
#   scripts/test-gpu.sh [CTEST ARGS...]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$(scripts/build.sh)
ctest --test-dir "$dir" -L gpu --output-on-failure "$@"
