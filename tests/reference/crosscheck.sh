#!/usr/bin/env bash
# Cross-check against PyTorch's own DDP: the same model, initial weights and
# data on both sides (exchanged through files), PyTorch's DDP
# ($DDP_REFERENCE_PYTHON's torch, Gloo) and ddp each on 2 ranks; every parameter after every
# step must agree within 1e-5 relative (hook modes: gradients too, at the
# hook's tolerance; see pytorch_ddp.py). Exits 77 (skip) without python3-torch.
#
#   crosscheck.sh DDPRUN DDP_SIDE MODE DTYPE WORKDIR
#   MODE: plain | no_sync | find_unused | no_sync_find_unused | hook_fp16 |
#         hook_powersgd_r1 | hook_powersgd_r2 | hook_batched_powersgd_r1
#   DTYPE: float64 | float32
set -euo pipefail
if [[ $# -ne 5 ]]; then
  echo "usage: $0 DDPRUN DDP_SIDE MODE DTYPE WORKDIR" >&2
  exit 2
fi
ddprun=$1 side=$2 mode=$3 dtype=$4 work=$5
here=$(cd "$(dirname "$0")" && pwd)
# The build's reference Python (CMake's DDP_REFERENCE_PYTHON); Debian's by default.
python=${DDP_REFERENCE_PYTHON:-/usr/bin/python3}

rm -rf "$work"
mkdir -p "$work"
export OMP_NUM_THREADS=1
# Exits 77 (skip) when that Python has no torch.distributed over Gloo.
"$python" "$here/pytorch_ddp.py" run "$work" --mode "$mode" --dtype "$dtype"
"$ddprun" --nproc-per-node 2 "$side" "$work"
"$python" "$here/pytorch_ddp.py" compare "$work"
