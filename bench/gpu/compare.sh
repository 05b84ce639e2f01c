#!/usr/bin/env bash
# ddp against PyTorch's DDP on a GPU machine, in one run (docs/benchmarks.md,
# "On a GPU"). The two sides alternate, ROUNDS times:
#   world 1 over NCCL: the 16 x 4096 MLP (mlp4096, batch 256) and ResNet-50
#     (batch 32, 224 x 224): ddp and local training (ddp_bench train),
#     PyTorch's DDP and local training (bench/pytorch_ddp_train.py);
#   world 2 on the one GPU: ddp over shm (CUDA tensors staged through host
#     memory) against PyTorch's DDP over Gloo with CUDA tensors (the MLP).
# Then the bound that staging imposes on mlp4096-w2 (bench/gpu/staging_bound.py).
# Writes OUT/<case>-<side>-<round>.json, OUT/bound/ and OUT/summary.md
# (summary.py).
#   bench/gpu/compare.sh BUILD_DIR OUT [ROUNDS]    (default 2 rounds)
set -euo pipefail
build=$(cd "$1" && pwd)
mkdir -p "$2"
out=$(cd "$2" && pwd)
rounds=${3:-2}
here=$(cd "$(dirname "$0")" && pwd)
python=${DDP_PYTHON:-python3}
ddprun=$build/tools/ddprun/ddprun
bench=$build/bench/ddp_bench
export OMP_NUM_THREADS=1

# case: name, world size, ddp's backend, PyTorch's backend, iterations, model arguments
cases=(
  "mlp4096-w1|1|nccl|nccl|30|--model mlp4096"
  "resnet50-w1|1|nccl|nccl|30|--model resnet50 --batch 32 --image-size 224"
  "mlp4096-w2|2|shm|gloo|8|--model mlp4096"
)
for round in $(seq 1 "$rounds"); do
  for c in "${cases[@]}"; do
    IFS='|' read -r name world ours theirs iters model <<<"$c"
    sides=(ddp pytorch)
    [ $((round % 2)) -eq 0 ] && sides=(pytorch ddp)
    for side in "${sides[@]}"; do
      json=$out/$name-$side-$round.json
      impls=ddp,local
      [ "$world" -gt 1 ] && impls=ddp
      echo "== round $round: $name, $side" >&2
      if [ "$side" = ddp ]; then
        DDP_BACKEND=$ours "$ddprun" --nproc-per-node "$world" "$bench" train $model \
          --world-size "$world" --device cuda --impls "$impls" --iters "$iters" --warmup 3 \
          --json "$json" --tag "round $round"
      else
        "$python" -m torch.distributed.run --standalone --nproc-per-node "$world" \
          "$here/../pytorch_ddp_train.py" $model --world-size "$world" --device cuda \
          --backend "$theirs" --impls "pytorch_${impls//,/,pytorch_}" --iters "$iters" \
          --warmup 3 --json "$json" --tag "round $round"
      fi
    done
  done
done
# The bound that staging imposes on mlp4096-w2 (its 1 GiB of gradients per
# rank): the copies to and from pinned memory, 2 ranks at once, and shm's
# allreduce of 1 GiB at 2 ranks. Not fatal: the table stands without it.
mkdir -p "$out/bound"
echo "== the staging bound of mlp4096-w2" >&2
"$python" "$here/staging_bound.py" --world-size 2 --bytes 1G --json "$out/bound/copies.json" &&
  "$ddprun" --nproc-per-node 2 "$bench" collectives --impls shm --sizes 1G --iters 5 --warmup 1 \
    --json "$out/bound/shm.json" >&2 ||
  echo "compare.sh: the staging bound was not measured" >&2
"$python" "$here/summary.py" "$out" | tee "$out/summary.md"
