#!/usr/bin/env bash
# DDP training on 2 nodes x 2 ranks over a shaped link: ddp's default backend
# (hierarchical: shared memory inside a node, Gloo across), ddp's flat Gloo
# ring (DDP_BACKEND=gloo) and PyTorch's DDP (Gloo), alternated run by run
# (the order rotates every round), each run a fresh job under bench/netem.
#
#   bench/hierarchical_compare.sh [--rate 1g] [--model mlp] [--rounds 3] [--iters 10]
#
# Output: <out>/hierarchical-<rate>-<model>.json (every run's rows and the
# bytes each node sent over the link) and .md (medians, paired ratios).
set -u -o pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
rate=1g model=mlp rounds=3 iters=10 warmup=2 out="$repo/bench/results" build="$repo/build"
while [ $# -gt 0 ]; do
  case $1 in
    --rate) rate=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    *) echo "usage: $0 [--rate R] [--model M] [--rounds N] [--iters K] [--warmup W] [--out DIR] [--build DIR]" >&2; exit 2 ;;
  esac
done
runs=$(mktemp -d)
trap 'rm -rf "$runs"' EXIT
common=(--model "$model" --world-size 4 --iters "$iters" --warmup "$warmup")
run_side() {  # SIDE ROUND
  local side=$1 round=$2 json="$runs/$1-r$2.json" cmd
  case $side in
    hierarchical) cmd=(env DDP_BACKEND=auto "$build/bench/ddp_bench" train "${common[@]}" --impls ddp) ;;
    gloo) cmd=(env DDP_BACKEND=gloo "$build/bench/ddp_bench" train "${common[@]}" --impls ddp) ;;
    pytorch) cmd=(/usr/bin/python3 "$repo/bench/pytorch_ddp_train.py" "${common[@]}" --impls pytorch_ddp) ;;
  esac
  echo "round $round: $side (load $(cut -d' ' -f1 /proc/loadavg))" >&2
  timeout -s KILL 600 "$repo/bench/netem" --nodes 2 --nproc-per-node 2 --rate "$rate" \
    --ddprun "$build/tools/ddprun/ddprun" -- "${cmd[@]}" --json "$json" >"$runs/$side-r$round.log" 2>&1 ||
    { echo "$side round $round failed:" >&2; tail -5 "$runs/$side-r$round.log" >&2; }
}
sides=(hierarchical gloo pytorch)
for ((r = 1; r <= rounds; r++)); do
  for ((k = 0; k < 3; k++)); do run_side "${sides[$(((r + k) % 3))]}" "$r"; done
done
mkdir -p "$out"
/usr/bin/python3 - "$runs" "$out/hierarchical-$rate-$model" "$rate" "$model" <<'PY'
import glob, json, os, re, statistics, sys
runs, base, rate, model = sys.argv[1:]
sides = ["hierarchical", "gloo", "pytorch"]
per = {s: {} for s in sides}  # side -> round -> median ms
sent = {s: [] for s in sides}  # bytes sent by the nodes over the link, per run
for s in sides:
    for path in glob.glob(os.path.join(runs, s + "-r*.json")):
        rnd = int(re.search(r"-r(\d+)\.json$", path).group(1))
        doc = json.load(open(path))
        rows = [r for r in doc["rows"] if r["impl"] in ("ddp", "pytorch_ddp")]
        if rows:
            per[s][rnd] = rows[0]["median_ms"]
        log = open(path[:-5] + ".log").read()
        sent[s].append(sum(int(b) for b in re.findall(r"(\d+) bytes sent", log)))
med = {s: statistics.median(v.values()) for s, v in per.items() if v}
def paired(a, b):
    rs = [per[a][r] / per[b][r] for r in per[a] if r in per[b]]
    return statistics.median(rs) if rs else None
lines = ["# DDP training, 2 nodes x 2 ranks, link %s, model %s" % (rate, model), "",
         "| side | median ms per iteration (median of runs) | runs | link bytes per run (both nodes, tc) |",
         "|---|---:|---:|---:|"]
for s in sides:
    if s in med:
        lines.append("| %s | %.1f | %d | %s |" % (s, med[s], len(per[s]),
                     "%.0f MB" % (statistics.median(sent[s]) / 1e6) if sent[s] else "-"))
for a, b in [("hierarchical", "gloo"), ("hierarchical", "pytorch"), ("gloo", "pytorch")]:
    p = paired(a, b)
    if p is not None:
        lines.append("")
        lines.append("%s / %s: %.3f (median of per-round ratios)" % (a, b, p))
open(base + ".md", "w").write("\n".join(lines) + "\n")
json.dump({"rate": rate, "model": model, "median_ms": per, "link_bytes": sent},
          open(base + ".json", "w"), indent=1)
print("\n".join(lines))
PY
