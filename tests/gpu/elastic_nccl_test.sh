#!/usr/bin/env bash
# Elastic recovery over nccl (examples/train --elastic --device cuda, 3
# ranks under ddprun --elastic 2:3, DDP_BACKEND=nccl): a rank killed
# (SIGKILL) while training; the heartbeat aborts the old communicator, the
# survivors form generation 1 with a new one and finish at world 2. Prints
# the failure-to-next-generation time that rank 0 reports.
# Run through skip_without_gpu.sh --nccl-ranks 3.
#   elastic_nccl_test.sh BUILD_DIR
set -uo pipefail
. "$(dirname "$0")/../support/scratch.sh" "$1"

out=$tmp/train.out
(cd "$tmp" && DDP_BACKEND=nccl DDP_TIMEOUT=60 timeout -s KILL 240 "$ddprun" --nproc-per-node 3 \
   --elastic 2:3 "$train" --elastic --device cuda --data synthetic --train-size 3000 --epochs 2 \
   --batch-size 32 --log-every 10 >"$out" 2>&1 </dev/null) &
job=$!
for _ in $(seq 1 600); do grep -q "step 20 |" "$out" 2>/dev/null && break; sleep 0.1; done
killed_at=$(date +%s.%N)
pkill -KILL -n -f "^$train --elastic" 2>/dev/null
rc=0
wait "$job" || rc=$?
if [[ $rc -eq 0 ]] && grep -q "ddprun: elastic: generation 1: world 2" "$out" &&
   grep -q "final: held-out loss .* 2 ranks at the end" "$out"; then
  ok "nccl, a rank of 3 killed: the job ends at world 2: $(grep -o 'final: held-out.*' "$out" | head -1)"
  grep "re-forming\|generation 1" "$out" | head -4 | cut -c1-240 | sed 's/^/#   /'
  echo "#   killed at $killed_at (unix s)"
else
  not_ok "nccl, a rank of 3 killed (exit $rc)" "$out"
fi
finish
