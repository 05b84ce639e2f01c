#!/usr/bin/env bash
# Checks that the C++ and Python definitions of the evaluation harness's
# models agree: for each model, runs
#
#   build/bench/ddp_bench models --print NAME --seed S
#   /usr/bin/python3 bench/models/models.py --print NAME --seed S
#
# and compares parameter names, shapes and order (must be equal: exit 1
# naming the first difference), then reports whether the initial weights are
# equal too (the per-parameter float64 sums, compared as printed, %.9e).
# Different weights are reported, not an error, unless --same-weights.
#
#   bench/models/check_models.sh                  # all models, seed 0
#   bench/models/check_models.sh --seed 3 resnet50 bert_small
set -u -o pipefail

usage() {
  cat <<'EOF'
usage: bench/models/check_models.sh [--seed S] [--build DIR] [--python PATH]
                                    [--same-weights] [MODEL ...]
  MODEL ...       any of mlp resnet18 resnet50 bert_small bert_base (default all;
                  a comma-separated list works too)
  --seed S        the weights' seed on both sides (default 0)
  --build DIR     the CMake build directory holding bench/ddp_bench (default build)
  --ddp-bench P   the ddp_bench binary itself (default DIR/bench/ddp_bench)
  --python PATH   the Python with torch (default /usr/bin/python3)
  --same-weights  also exit 1 when the initial weights differ
EOF
}

die() { echo "check_models.sh: $*" >&2; exit 2; }

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
seed=0
build="$repo/build"
bench=""
python=/usr/bin/python3
strict=0
models=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --seed) seed="${2:?--seed needs a value}"; shift 2 ;;
    --build) build="${2:?--build needs a value}"; shift 2 ;;
    --ddp-bench) bench="${2:?--ddp-bench needs a value}"; shift 2 ;;
    --python) python="${2:?--python needs a value}"; shift 2 ;;
    --same-weights) strict=1; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) usage >&2; die "unknown option '$1'" ;;
    *) IFS=, read -r -a more <<<"$1"; models+=("${more[@]}"); shift ;;
  esac
done
[[ ${#models[@]} -gt 0 ]] || models=(mlp resnet18 resnet50 bert_small bert_base)
bench="${bench:-$build/bench/ddp_bench}"
[[ -x "$bench" ]] || die "no $bench: build it (cmake --build build --target ddp_bench) or pass --ddp-bench"
[[ -x "$python" ]] || die "no $python (Debian's python3-torch: --python PATH)"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

weights_differ=0
for m in "${models[@]}"; do
  "$bench" models --print "$m" --seed "$seed" >"$tmp/cpp" 2>"$tmp/cpp.err" ||
    die "$m: ddp_bench models --print failed: $(head -1 "$tmp/cpp.err")"
  "$python" "$repo/bench/models/models.py" --print "$m" --seed "$seed" >"$tmp/py" 2>"$tmp/py.err" ||
    die "$m: models.py --print failed: $(tail -1 "$tmp/py.err")"
  # The structure of a line is all but its checksum (the last field); the
  # "total" line is all structure.
  result="$(awk '
    function structure(line,   n, f) {
      if (line ~ /^total /) return line
      n = split(line, f, " ")
      sub(/ [^ ]+$/, "", line)
      return line
    }
    function checksum(line,   n, f) {
      if (line ~ /^total /) return ""
      n = split(line, f, " ")
      return f[n]
    }
    NR == FNR { cpp[FNR] = $0; ncpp = FNR; next }
    { py[FNR] = $0; npy = FNR }
    END {
      n = ncpp > npy ? ncpp : npy
      for (i = 1; i <= n; ++i) {
        a = (i in cpp) ? structure(cpp[i]) : "(nothing)"
        b = (i in py) ? structure(py[i]) : "(nothing)"
        if (a != b) {
          printf "DIFF line %d: C++ \"%s\" vs Python \"%s\"\n", i, a, b
          exit
        }
      }
      same = 0; tensors = 0; first = ""
      for (i = 1; i <= n; ++i) {
        if (cpp[i] ~ /^total /) { total = cpp[i]; continue }
        ++tensors
        if (checksum(cpp[i]) == checksum(py[i])) { ++same; continue }
        if (first == "") {
          split(cpp[i], f, " ")
          first = sprintf("first: %s %s (C++ %s, Python %s)", f[1], f[2],
                          checksum(cpp[i]), checksum(py[i]))
        }
      }
      sub(/^total /, "", total)
      if (same == tensors) {
        printf "SAME %s; initial weights equal (all %d checksums)\n", total, tensors
      } else {
        printf "WEIGHTS %s; initial weights differ: %d of %d checksums, %s\n", total,
               tensors - same, tensors, first
      }
    }' "$tmp/cpp" "$tmp/py")"
  case "$result" in
    DIFF*)
      echo "check_models.sh: $m (seed $seed): names/shapes/order differ at ${result#DIFF }" >&2
      exit 1 ;;
    SAME*)
      echo "$m (seed $seed): names, shapes and order equal: ${result#SAME }" ;;
    WEIGHTS*)
      weights_differ=1
      echo "$m (seed $seed): names, shapes and order equal: ${result#WEIGHTS }" ;;
    *) die "$m: could not compare ($result)" ;;
  esac
done
if [[ $weights_differ -ne 0 && $strict -ne 0 ]]; then
  echo "check_models.sh: initial weights differ (--same-weights)" >&2
  exit 1
fi
exit 0
