#!/usr/bin/env bash
# Runs a GPU test, or reports it skipped (exit 77, CTest's SKIP_RETURN_CODE)
# when libtorch sees no GPU here, so that it is never counted as passed.
# With --nccl-ranks N, also skipped unless N ranks can run nccl here (a GPU
# each, or NCCL 2.30+ with NCCL_MULTI_RANK_GPU_ENABLE=1 to share: nccl_probe).
#   skip_without_gpu.sh GPU_PROBE [--nccl-ranks N NCCL_PROBE] COMMAND [ARGS...]
probe=$1
shift
if ! "$probe"; then
  echo "skipped: libtorch sees no GPU on this machine (scripts/test-gpu.sh runs these on one)"
  exit 77
fi
if [[ ${1:-} == --nccl-ranks ]]; then
  ranks=$2 nccl_probe=$3
  shift 3
  if ! "$nccl_probe" "$ranks"; then
    echo "skipped: $ranks ranks cannot run nccl on this machine's GPUs (see nccl_probe's reason;"
    echo "scripts/gpu-session.sh loads a built NCCL 2.30: scripts/build-nccl.sh)"
    exit 77
  fi
fi
exec "$@"
