#!/usr/bin/env bash
# Training iterations: ddp::DistributedDataParallel (`ddp_bench train`)
# against PyTorch's DDP (bench/pytorch_ddp_train.py, Debian's python3-torch),
# same models, same ranks, same backend (Gloo), alternated run by run:
#
#   round 1: ours, PyTorch; round 2: PyTorch, ours; round 3: ours, PyTorch; ...
#
# Each run launches its ranks (ddprun on loopback, bench/netem on a shaped
# veth link), does --warmup iterations, then --iters timed ones. The C++ run
# also measures the limit in the same run (local compute alone, the allreduce
# of all gradient bytes alone). bench/train_summary.py then pools the rounds,
# checks that both sides hold the same parameters (names, shapes, order), and
# prints the tables that docs/benchmarks.md shows.
#
#   bench/train_compare.sh --link loopback
#   bench/train_compare.sh --link 1gbit          # root + ip netns; else loopback, with a note
#
# Output: <out>/train-<link>.json (every run's rows and samples, combined),
# <out>/train-<link>.md (the tables), <out>/train-<link>.txt (the log, rank 0's
# lines); with --keep-runs also each run's own JSON under <out>/train-runs/<link>/.
set -u -o pipefail

usage() {
  cat <<'EOF'
usage: bench/train_compare.sh [--link loopback|RATE] [--models LIST] [--rounds R]
                              [--iters K] [--warmup W] [--bucket-cap-mb X]
                              [--world-size N] [--out DIR] [--build DIR]

  --link L          loopback (default), or a tc rate such as 1gbit or 10gbit:
                    2 ranks in network namespaces joined by a veth pair shaped
                    to that rate (bench/netem; presets 1g, 10g, 25g too)
  --models LIST     mlp,resnet18 (default both)
  --rounds R        alternating rounds per model (default 8)
  --iters K         timed iterations per run (default 10)
  --warmup W        untimed iterations per run first (default 2)
  --bucket-cap-mb X DDP bucket size on both sides (default 25)
  --world-size N    ranks (default 2; a shaped link takes exactly 2)
  --out DIR         where results go (default bench/results)
  --build DIR       the CMake build directory (default build)
  --python PATH     the Python with torch (default /usr/bin/python3)
  --malloc M        fixed (default): both sides run with
                    MALLOC_MMAP_THRESHOLD_=32 MiB and MALLOC_TRIM_THRESHOLD_=1 GiB;
                    default: glibc's own (dynamic) thresholds, see below
  --ddp-args "A"    extra arguments for `ddp_bench train` (word-split), e.g.
                    "--first-bucket-cap-mb 4.0016" or "--gloo-threads 2"
  --pytorch-args "A" extra arguments for bench/pytorch_ddp_train.py
  --keep-runs       keep each run's JSON under <out>/train-runs/<link>/
EOF
}

die() { echo "train_compare.sh: $*" >&2; exit 2; }

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
link=loopback
models=mlp,resnet18
rounds=8
iters=10
warmup=2
bucket=25
world=2
out="$repo/bench/results"
build="$repo/build"
python=/usr/bin/python3
ddp_args=""
pytorch_args=""
malloc=fixed
keep_runs=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --link) link="${2:?--link needs a value}"; shift 2 ;;
    --models) models="${2:?--models needs a value}"; shift 2 ;;
    --rounds) rounds="${2:?--rounds needs a value}"; shift 2 ;;
    --iters) iters="${2:?--iters needs a value}"; shift 2 ;;
    --warmup) warmup="${2:?--warmup needs a value}"; shift 2 ;;
    --bucket-cap-mb) bucket="${2:?--bucket-cap-mb needs a value}"; shift 2 ;;
    --world-size) world="${2:?--world-size needs a value}"; shift 2 ;;
    --out) out="${2:?--out needs a value}"; shift 2 ;;
    --build) build="${2:?--build needs a value}"; shift 2 ;;
    --python) python="${2:?--python needs a value}"; shift 2 ;;
    --keep-runs) keep_runs=1; shift ;;
    --malloc) malloc="${2:?--malloc needs a value}"; shift 2 ;;
    --ddp-args) ddp_args="${2?--ddp-args needs a value}"; shift 2 ;;
    --pytorch-args) pytorch_args="${2?--pytorch-args needs a value}"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument '$1'" ;;
  esac
done
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || die "--rounds expects a positive integer, got '$rounds'"
[[ "$world" =~ ^[1-9][0-9]*$ ]] || die "--world-size expects a positive integer, got '$world'"
[[ "$malloc" == fixed || "$malloc" == default ]] || die "--malloc expects fixed or default, got '$malloc'"
bench="$build/bench/ddp_bench"
ddprun="$build/tools/ddprun/ddprun"
[[ -x "$bench" ]] || die "'$bench' not found: cmake --build $build --target ddp_bench"
[[ -x "$ddprun" ]] || die "'$ddprun' not found: cmake --build $build --target ddprun"
"$python" -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null ||
  die "'$python' cannot import torch with Gloo (Debian's python3-torch is /usr/bin/python3)"

# Run a snapshot of ddp_bench, libddp and ddprun: a rebuild of $build while
# the rounds run (other work in the same tree) must not change the code under
# test halfway. LD_LIBRARY_PATH comes before the binary's RUNPATH.
snap="$(mktemp -d "${TMPDIR:-/tmp}/train_compare.XXXXXX")" || die "mktemp failed"
trap 'rm -rf "$snap"' EXIT
libddp="$(ldd "$bench" | awk '$1 ~ /^libddp/ { print $1 " " $3; exit }')"
{ cp "$bench" "$snap/ddp_bench" && cp "$ddprun" "$snap/ddprun"; } || die "cannot copy the binaries to $snap"
if [[ -n "$libddp" ]]; then
  cp "${libddp#* }" "$snap/${libddp%% *}" || die "cannot copy ${libddp#* } to $snap"
fi
export LD_LIBRARY_PATH="$snap${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
bench="$snap/ddp_bench"
ddprun="$snap/ddprun"

if [[ "$link" == loopback ]]; then
  launch=("$ddprun" --nproc-per-node "$world" --)
else
  [[ "$world" == 2 ]] || die "a shaped link (--link $link) runs exactly 2 ranks, one per namespace"
  launch=("$repo/bench/netem" --rate "$link" --ddprun "$ddprun" --)
fi

if ((keep_runs)); then runs="$out/train-runs/$link"; else runs="$snap/runs"; fi
mkdir -p "$out" "$runs" || die "cannot create '$runs'"
rm -f "$runs"/*.json
log="$out/train-$link.txt"
: >"$log"
say() { echo "train_compare.sh: $*" | tee -a "$log" >&2; }

say "code under test: $("$bench" --help >/dev/null 2>&1 && echo "ddp_bench and libddp copied from $build at $(date -u -r "${libddp#* }" +%FT%TZ 2>/dev/null || echo '?')"); git $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo '?') with $(git -C "$repo" status --short -- src include 2>/dev/null | wc -l) uncommitted change(s) under src/ and include/"
# glibc's mmap threshold adapts to a process's history of frees, and it
# settles differently in the Python process than in ours: on ResNet-18 the
# Python ranks took 3x the page faults (897K against 300K for the same 24
# iterations), about 25 ms per iteration that have nothing to do with DDP.
# Fixed thresholds give both sides the same allocator behaviour.
if [[ "$malloc" == fixed ]]; then
  export MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=1073741824
  malloc_note="both sides with MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=1073741824"
else
  malloc_note="glibc's default malloc thresholds"
fi
say "allocator: $malloc_note"
common=(--world-size "$world" --iters "$iters" --warmup "$warmup" --bucket-cap-mb "$bucket")
start=$SECONDS
IFS=, read -r -a model_list <<<"$models"
for model in "${model_list[@]}"; do
  for ((r = 1; r <= rounds; ++r)); do
    if ((r % 2)); then sides=(ddp pytorch); else sides=(pytorch ddp); fi
    for side in "${sides[@]}"; do
      json="$runs/$model-$side-r$r.json"
      if [[ "$side" == ddp ]]; then
        # shellcheck disable=SC2206 # word-split on purpose
        cmd=("$bench" train --model "$model" "${common[@]}" --tag "round $r" --json "$json"
             $ddp_args)
      else
        # shellcheck disable=SC2206
        cmd=("$python" "$repo/bench/pytorch_ddp_train.py" --model "$model" "${common[@]}"
             --tag "round $r" --json "$json" $pytorch_args)
      fi
      say "$model round $r/$rounds: $side (load average $(cut -d' ' -f1-3 /proc/loadavg))"
      # Everything on the terminal; rank 0's lines and the launchers' in the log.
      "${launch[@]}" "${cmd[@]}" 2>&1 | tee >(grep -v '^\[rank [1-9]' >>"$log")
      status=${PIPESTATUS[0]}
      ((status == 0)) || die "$model round $r ($side) failed with status $status; see $log"
      [[ -s "$json" ]] || die "$model round $r ($side) wrote no '$json'"
    done
  done
done
say "all runs took $((SECONDS - start)) s (load average now $(cut -d' ' -f1-3 /proc/loadavg))"

"$python" "$repo/bench/train_summary.py" --link "$link" --json "$out/train-$link.json" \
  --note "$rounds rounds x $iters timed iterations (after $warmup warm-up) per side; $malloc_note${ddp_args:+; ddp_bench train $ddp_args}${pytorch_args:+; pytorch_ddp_train.py $pytorch_args}" \
  "$runs"/*.json | tee "$out/train-$link.md" | tee -a "$log"
exit "${PIPESTATUS[0]}"
