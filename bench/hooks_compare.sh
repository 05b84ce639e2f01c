#!/usr/bin/env bash
# Communication hooks: ddp's (`ddp_bench train --hook H`) against PyTorch's
# DDP with the same hook (bench/pytorch_ddp_train.py --hook H), same models,
# 2 ranks, Gloo, alternated run by run (round 1: ours, PyTorch; round 2:
# PyTorch, ours; ...), for every model x hook. Only the DDP iteration is run
# (--impls ddp / pytorch_ddp). Each rank reads the tx_bytes counter of its
# own veth (/sys/class/net/<DDP_SOCKET_IFNAME|GLOO_SOCKET_IFNAME>/statistics)
# before and after the timed iterations: the bytes per iteration are what
# really left the rank (payload plus TCP/IP headers, both sides alike). On
# loopback no bytes are measured.
#
#   bench/hooks_compare.sh --link 1gbit
#   bench/hooks_compare.sh --link 1gbit --models mlp --hooks none,powersgd4
#
# Output: <out>/hooks-runs/<link>/*.json (each run), <out>/hooks-<link>.json (every run's rows, pooled results),
# <out>/hooks-<link>.md (the table), <out>/hooks-<link>.txt (the log).
# PyTorch 1.13's batched_powerSGD_hook cannot run (its _orthogonalize asserts
# a 3-D input; docs/hooks.md): it is not run unless --try-pytorch-batched,
# and is reported as "fails in PyTorch 1.13". Any run that fails or times out
# is recorded as failed, and the others go on.
set -u -o pipefail

usage() {
  cat <<'EOF2'
usage: bench/hooks_compare.sh [--link loopback|RATE] [--models LIST] [--hooks LIST]
                              [--rounds R] [--iters K] [--warmup W] [--timeout S]
                              [--out DIR] [--build DIR] [--python PATH]
                              [--try-pytorch-batched]

  --link L       loopback (default) or a tc rate (1gbit) or preset (1g): bench/netem, 2 ranks
  --models LIST  mlp,resnet18 (default both)
  --hooks LIST   none,fp16,bf16,powersgd1,powersgd2,powersgd4,batched_powersgd1 (default all)
  --rounds R     alternating rounds per model and hook (default 2)
  --iters K      timed iterations per run (default 8)
  --warmup W     untimed iterations first (default 3; PowerSGD starts at iteration 2)
  --timeout S    per run (default 40 s): a run past it is recorded as failed,
                 and that model x hook x side is not run again in later rounds
EOF2
}
die() { echo "hooks_compare.sh: $*" >&2; exit 2; }

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
link=loopback
models=mlp,resnet18
hooks=none,fp16,bf16,powersgd1,powersgd2,powersgd4,batched_powersgd1
rounds=2
iters=8
warmup=3
timeout_s=40
out="$repo/bench/results"
build="$repo/build"
python=/usr/bin/python3
try_batched=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --link) link="${2:?}"; shift 2 ;;
    --models) models="${2:?}"; shift 2 ;;
    --hooks) hooks="${2:?}"; shift 2 ;;
    --rounds) rounds="${2:?}"; shift 2 ;;
    --iters) iters="${2:?}"; shift 2 ;;
    --warmup) warmup="${2:?}"; shift 2 ;;
    --timeout) timeout_s="${2:?}"; shift 2 ;;
    --out) out="${2:?}"; shift 2 ;;
    --build) build="${2:?}"; shift 2 ;;
    --python) python="${2:?}"; shift 2 ;;
    --try-pytorch-batched) try_batched=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument '$1'" ;;
  esac
done
((warmup >= 3)) || die "--warmup must be >= 3 (PowerSGD compresses from iteration 2 on)"
bench="$build/bench/ddp_bench"
ddprun="$build/tools/ddprun/ddprun"
[[ -x "$bench" && -x "$ddprun" ]] || die "build ddp_bench and ddprun in $build first"

# A snapshot of the code under test (as bench/train_compare.sh).
snap="$(mktemp -d "${TMPDIR:-/tmp}/hooks_compare.XXXXXX")" || die "mktemp failed"
trap 'rm -rf "$snap"' EXIT
libddp="$(ldd "$bench" | awk '$1 ~ /^libddp/ { print $1 " " $3; exit }')"
cp "$bench" "$snap/ddp_bench" && cp "$ddprun" "$snap/ddprun" || die "cannot copy binaries"
[[ -n "$libddp" ]] && { cp "${libddp#* }" "$snap/${libddp%% *}" || die "cannot copy libddp"; }
export LD_LIBRARY_PATH="$snap${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=1073741824
if [[ "$link" == loopback ]]; then
  launch=("$snap/ddprun" --nproc-per-node 2 --)
else
  launch=("$repo/bench/netem" --rate "$link" --ddprun "$snap/ddprun" --)
fi
runs="$out/hooks-runs/$link"  # each run's JSON, kept
mkdir -p "$out" "$runs" || die "cannot create $runs"
rm -f "$runs"/*.json "$runs"/run.log
log="$out/hooks-$link.txt"
: >"$log"
say() { echo "hooks_compare.sh: $*" | tee -a "$log" >&2; }
say "git $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo '?'), $(git -C "$repo" status --short -- src include 2>/dev/null | wc -l) uncommitted change(s) under src/ and include/; link $link; $rounds rounds x $iters timed iterations after $warmup warm-up"
common=(--world-size 2 --iters "$iters" --warmup "$warmup")
start=$SECONDS
IFS=, read -r -a model_list <<<"$models"
IFS=, read -r -a hook_list <<<"$hooks"
for model in "${model_list[@]}"; do
  for hook in "${hook_list[@]}"; do
    for ((r = 1; r <= rounds; ++r)); do
      if ((r % 2)); then sides=(ddp pytorch); else sides=(pytorch ddp); fi
      for side in "${sides[@]}"; do
        json="$runs/$model-$hook-$side-r$r.json"
        if [[ "$side" == pytorch && "$hook" == batched_powersgd1 && $try_batched == 0 ]]; then
          printf '{"side": "pytorch", "model": "%s", "hook": "%s", "failed": "fails in PyTorch 1.13 (batched_powerSGD_hook: _orthogonalize asserts a 3-D input); not run"}\n' \
            "$model" "$hook" >"$json"
          continue
        fi
        prev="$(ls "$runs/$model-$hook-$side"-r*.json 2>/dev/null | head -1)"
        if [[ -n "$prev" ]] && grep -q '"failed"' "$prev"; then
          say "$model $hook round $r/$rounds: $side skipped (failed in an earlier round)"
          continue
        fi
        if [[ "$side" == ddp ]]; then
          cmd=("$snap/ddp_bench" train --model "$model" "${common[@]}" --impls ddp --hook "$hook"
               --tag "round $r" --json "$json")
        else
          cmd=("$python" "$repo/bench/pytorch_ddp_train.py" --model "$model" "${common[@]}"
               --impls pytorch_ddp --hook "$hook" --tag "round $r" --json "$json")
        fi
        say "$model $hook round $r/$rounds: $side ($((SECONDS - start)) s so far)"
        timeout "$timeout_s" "${launch[@]}" "${cmd[@]}" >"$runs/run.log" 2>&1
        status=$?
        grep -v '^\[rank [1-9]' "$runs/run.log" >>"$log"
        if ((status != 0)) || [[ ! -s "$json" ]]; then
          reason="exit status $status$( ((status == 124)) && echo " (timed out after $timeout_s s)")"
          ((status == 124)) && ! grep -q 'warm-up' "$runs/run.log" && reason="$reason, not through its warm-up"
          err="$(grep -m1 -E 'Error|error|Assert|terminate' "$runs/run.log" | cut -c1-300 | tr -d '"\\%\t\r')"
          say "  FAILED: $reason: $err"
          printf '{"side": "%s", "model": "%s", "hook": "%s", "failed": "%s: %s"}\n' \
            "$side" "$model" "$hook" "$reason" "$err" >"$json"
        fi
      done
    done
  done
done
say "all runs took $((SECONDS - start)) s"
"$python" "$repo/bench/hooks_summary.py" --link "$link" --json "$out/hooks-$link.json" \
  --note "$rounds rounds x $iters timed iterations (after $warmup warm-up) per side, hook and model; DDP iteration only; MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=1073741824" \
  "$runs"/*-r*.json | tee "$out/hooks-$link.md" | tee -a "$log"
