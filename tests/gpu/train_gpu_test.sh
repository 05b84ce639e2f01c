#!/usr/bin/env bash
# The main job on a GPU (examples/train --device): --device auto takes the
# GPU and says why; one rank per GPU goes over nccl; ranks sharing the GPU go
# over shm's staging; --zero, --uneven, --compress and --elastic train there
# too; the held-out accuracy is the CPU's, within 5 points.
# Run through skip_without_gpu.sh (CTest label gpu).
#   train_gpu_test.sh BUILD_DIR
set -uo pipefail
. "$(dirname "$0")/../support/scratch.sh" "$1"

# job NAME RANKS FLAGS...: a short synthetic run, output in $tmp/NAME.log.
job() {
  local name=$1 ranks=$2
  shift 2
  timeout 300 "$ddprun" --nproc-per-node "$ranks" "$train" --data synthetic --train-size 4096 \
    --epochs 2 --log-every 100000 "$@" >"$tmp/$name.log" 2>&1
}
accuracy_of() { sed -n 's/.*accuracy \([0-9.]*\)%.*/\1/p' "$tmp/$1.log"; }
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)

job one 1
check $? "1 rank, --device auto: trains" "$tmp/one.log"
grep -q "train: device cuda:0 (.*), backend nccl" "$tmp/one.log"
check $? "  on cuda:0 over nccl, saying why" "$tmp/one.log"

job shared 2
check $? "2 ranks, --device auto: trains" "$tmp/shared.log"
if [[ $gpus -lt 2 ]]; then
  grep -q "train: device cuda:0 (1 GPU(s) for 2 rank(s) on this host: shared), backend auto" \
    "$tmp/shared.log"
  check $? "  the ranks share cuda:0 over auto (shm's staging), saying why" "$tmp/shared.log"
fi

job cpu 2 --device cpu
check $? "2 ranks, --device cpu: trains" "$tmp/cpu.log"
awk -v g="$(accuracy_of shared)" -v c="$(accuracy_of cpu)" \
  'BEGIN { d = g - c; exit !(g > 0 && d < 5 && d > -5) }'
check $? "  held-out accuracy on the GPU $(accuracy_of shared)% vs the CPU $(accuracy_of cpu)%"

for flags in "--zero" "--uneven" "--compress fp16" "--find-unused"; do
  name=${flags//[- ]/}
  # shellcheck disable=SC2086  # the flags are words
  job "$name" 2 --device cuda $flags
  check $? "2 ranks on the GPU with $flags" "$tmp/$name.log"
done

timeout 300 "$ddprun" --nproc-per-node 2 --elastic 1:2 "$train" --elastic --device cuda \
  --data synthetic --train-size 4096 --epochs 1 --log-every 100000 >"$tmp/elastic.log" 2>&1
status=$?
[[ $status -eq 0 ]] && grep -q "train: device cuda:0" "$tmp/elastic.log"
check $? "--elastic on the GPU" "$tmp/elastic.log"
finish
