#!/bin/bash
# ZeRO against unsharded Adam, ours (bench/zero_bench.cpp) and PyTorch's
# (bench/pytorch_zero.py), with and without overlap_with_ddp, on loopback with
# Gloo on both sides, interleaved: per world size and round, the five runs in
# one order, the next round in the reverse order. Writes
# bench/results/zero-loopback.jsonl and prints the table of docs/benchmarks.md
# ("ZeRO").
#
#   bench/zero_compare.sh [--build build] [--worlds "2 4"] [--rounds 3] [--iters 10]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build=$repo/build worlds="2 4" rounds=3 iters=10
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --worlds) worlds=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    *) echo "usage: $0 [--build DIR] [--worlds \"2 4\"] [--rounds N] [--iters N]" >&2; exit 2 ;;
  esac
done
ddprun=$build/tools/ddprun/ddprun
bench=$build/bench/zero_bench
for f in "$ddprun" "$bench"; do
  [[ -x $f ]] || { echo "$0: '$f' not found: cmake --build $build --target zero_bench ddprun" >&2; exit 1; }
done
out=$repo/bench/results/zero-loopback.jsonl
: > "$out"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 DDP_BACKEND=gloo
export USE_LIBUV=0  # PyTorch >= 2.4: TCPStore on libuv by default, absent from Debian 13's build
run() {  # world kind optimizer
  if [[ $2 == ddp ]]; then
    "$ddprun" --nproc-per-node "$1" -- "$bench" --optimizer "$3" --iters "$iters"
  else
    "$ddprun" --nproc-per-node "$1" -- /usr/bin/python3 "$repo/bench/pytorch_zero.py" \
      --optimizer "$3" --iters "$iters"
  fi | sed -n 's/^\[rank 0\] //p' | grep '^{' | tee -a "$out"
}
for world in $worlds; do
  for ((round = 0; round < rounds; ++round)); do
    # PyTorch's overlap_with_ddp refuses Gloo ("requires NCCL/HCCL backend to
    # avoid hangs", 1.13): no pytorch zero-overlap run.
    order=("ddp adam" "ddp zero" "ddp zero-overlap" "pytorch adam" "pytorch zero")
    if ((round % 2)); then
      order=("pytorch zero" "pytorch adam" "ddp zero-overlap" "ddp zero" "ddp adam")
    fi
    for item in "${order[@]}"; do run "$world" $item; done
  done
done
python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
keys = sorted({(r["world"], r["impl"], r["optimizer"]) for r in rows})
print("| world | side | optimizer | state MiB per rank (max; each) | vs unsharded | iteration ms (median of rounds) |")
print("| --- | --- | --- | --- | --- | --- |")
for world, impl, opt in keys:
    sel = [r for r in rows if (r["world"], r["impl"], r["optimizer"]) == (world, impl, opt)]
    state = sel[0]["state_bytes"]
    plain = [r for r in rows if (r["world"], r["impl"], r["optimizer"]) == (world, impl, "adam")]
    ratio = max(state) / max(plain[0]["state_bytes"]) if plain else float("nan")
    ms = statistics.median(r["iter_ms_median"] for r in sel)
    each = ", ".join(f"{b / 2**20:.1f}" for b in state)
    print(f"| {world} | {impl} | {opt} | {max(state) / 2**20:.1f} ({each}) | {ratio:.3f} | {ms:.1f} |")
PY
