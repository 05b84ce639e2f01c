#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine: install, build, ctest.
# Against pip's torch (the primary tier); DDP_LIBTORCH=debian runs it against
# Debian's libtorch 1.13. Tests labelled gpu report themselves skipped where
# no GPU is visible (scripts/test-gpu.sh runs them on one).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$(scripts/build.sh)
ctest --test-dir "$dir" --output-on-failure "$@"
