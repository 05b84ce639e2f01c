#!/usr/bin/env bash
# Runs a GPU test, or reports it skipped (exit 77, CTest's SKIP_RETURN_CODE)
# when libtorch sees no GPU here, so that it is never counted as passed.
#   skip_without_gpu.sh GPU_PROBE COMMAND [ARGS...]
probe=$1
shift
if ! "$probe"; then
  echo "skipped: libtorch sees no GPU on this machine (scripts/test-gpu.sh runs these on one)"
  exit 77
fi
exec "$@"
