#!/usr/bin/env bash
# examples/train --uneven on 3 real processes: rank r trains (100 - 10 r)% of
# each epoch's steps inside a ddp::Join. In float64 the job must end with
# bit-identical parameters whether SGD's momentum is kept whole on every rank
# (an OptimizerJoinable brings the ranks that finished early in step) or
# sharded by a ZeroRedundancyOptimizer (listed in the Join: a rank out of
# steps still steps its shard), and both must finish.
#   train_uneven_test.sh BUILD_DIR
set -uo pipefail
build=$1
ddprun=$build/tools/ddprun/ddprun
train=$build/examples/train
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0

# run NAME FLAGS...: prints the final parameters' hash, or nothing on failure.
run() {
  local name=$1
  shift
  if ! timeout 240 "$ddprun" --nproc-per-node 3 "$train" --data synthetic --uneven --float64 --epochs 2 \
      --train-size 3000 --log-every 1000 --checkpoint "$tmp/$name.pt" "$@" >"$tmp/$name.log" 2>&1; then
    echo "not ok - $name: the job failed:" >&2
    tail -5 "$tmp/$name.log" >&2
    return
  fi
  sed -n 's/.*final: parameters fnv1a64 \([0-9a-f]*\).*/\1/p' "$tmp/$name.log"
}

whole=$(run sgd)
sharded=$(run zero --zero)
if [[ -n "$whole" && "$whole" == "$sharded" ]]; then
  echo "ok - --uneven with and without --zero end with the same parameters ($whole)"
else
  echo "not ok - --uneven: parameters '$whole' (SGD) against '$sharded' (--zero)"
  failed=1
fi
exit $failed
