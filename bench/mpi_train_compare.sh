#!/usr/bin/env bash
# DDP training with ddp's mpi backend (under mpirun) against PyTorch's DDP
# (Gloo, under ddprun), MLP and ResNet-18, 2 ranks, 3 rounds alternating which
# side goes first; prints per-round medians and the paired ratios.
#   bench/mpi_train_compare.sh [OUT_DIR]
cd "$(dirname "$0")/.."
out=${1:-bench/results/train-mpi-runs}; mkdir -p "$out"
for model in mlp resnet18; do
  for r in 1 2 3; do
    for side in $( ((r % 2)) && echo "mpi pytorch" || echo "pytorch mpi"); do
      if [ $side = mpi ]; then
        timeout 300 mpirun -np 2 --allow-run-as-root --oversubscribe --bind-to none -x DDP_BACKEND=mpi \
          -x MALLOC_MMAP_THRESHOLD_=33554432 -x MALLOC_TRIM_THRESHOLD_=1073741824 \
          build/bench/ddp_bench train --model $model --world-size 2 --impls ddp,local --iters 10 --warmup 2 \
          --json $out/$model-mpi-r$r.json > $out/$model-mpi-r$r.log 2>&1
      else
        MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=1073741824 timeout 300 build/tools/ddprun/ddprun --nproc-per-node 2 \
          /usr/bin/python3 bench/pytorch_ddp_train.py --model $model --world-size 2 --impls pytorch_ddp --iters 10 --warmup 2 \
          --json $out/$model-pytorch-r$r.json > $out/$model-pytorch-r$r.log 2>&1
      fi
      echo "$model $side r$r exit $?"
    done
  done
done
/usr/bin/python3 - "$out" <<'PY'
import json, glob, statistics, re, sys
out = sys.argv[1]
for model in ["mlp", "resnet18"]:
    per = {}
    for side in ["mpi", "pytorch"]:
        for p in glob.glob("%s/%s-%s-r*.json" % (out, model, side)):
            r = int(re.search(r"-r(\d)\.json", p).group(1))
            rows = {x["impl"]: x["median_ms"] for x in json.load(open(p))["rows"]}
            per.setdefault(side, {})[r] = rows
    ratios = [per["mpi"][r]["ddp"] / per["pytorch"][r]["pytorch_ddp"] for r in per["mpi"] if r in per.get("pytorch", {})]
    print(model, "mpi ddp", [round(per["mpi"][r]["ddp"],1) for r in sorted(per["mpi"])],
          "local", [round(per["mpi"][r]["local"],1) for r in sorted(per["mpi"])],
          "pytorch", [round(per["pytorch"][r]["pytorch_ddp"],1) for r in sorted(per["pytorch"])],
          "paired ratio median", round(statistics.median(ratios),3), [round(x,3) for x in ratios])
PY
