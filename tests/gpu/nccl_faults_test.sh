#!/usr/bin/env bash
# A rank of 2 or 3 killed (SIGKILL) or stopped (SIGSTOP) inside an nccl
# allreduce of CUDA tensors (fault_rank --device cuda): every survivor ends
# with an error within the group's timeout plus 2 s, naming the collective;
# none hangs (each process is killed at 60 s, which fails the check).
# Run with DDP_BACKEND=nccl through skip_without_gpu.sh --nccl-ranks 3.
#   nccl_faults_test.sh BUILD_DIR
set -uo pipefail
. "$(dirname "$0")/../support/scratch.sh" "$1"
job=$build/tests/multiprocess/fault_rank
timeout_s=5

# run WORLD FAULT: rank 1 faulty at its 4th allreduce; prints each rank's output to $tmp/W-F.R.
run() {
  local world=$1 fault=$2 port r pids=()
  port=$(free_port)
  for ((r = 0; r < world; r++)); do
    DDP_BACKEND=nccl MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=$r WORLD_SIZE=$world \
      timeout -s KILL 60 "$job" --victim 1 --after 3 --timeout-s "$timeout_s" --fault "$fault" \
      --iterations 50 --elements 1048576 --linger-s 1 --device cuda >"$tmp/$world-$fault.$r" 2>&1 &
    pids+=($!)
  done
  # The stopped victim never ends by itself: the survivors' ends are what count.
  for ((r = 0; r < world; r++)); do
    [[ $r -eq 1 ]] || wait "${pids[r]}" 2>/dev/null
  done
  pkill -KILL -P "${pids[1]}" 2>/dev/null
  kill -KILL "${pids[1]}" 2>/dev/null
  wait 2>/dev/null
}

for world in 2 3; do
  for fault in kill stop; do
    run "$world" "$fault"
    for ((r = 0; r < world; r++)); do
      [[ $r -eq 1 ]] && continue
      log=$tmp/$world-$fault.$r
      ms=$(sed -n "s/^survivor rank $r failed after \([0-9]*\) ms: .*/\1/p" "$log")
      if [[ -n $ms && $ms -le $(((timeout_s + 2) * 1000)) ]] && grep -q "allreduce" "$log"; then
        ok "world $world, rank 1 ${fault}ed: rank $r failed after $ms ms, naming the allreduce"
        grep -m1 "^survivor rank $r" "$log" | cut -c1-240 | sed 's/^/#   /'
      else
        not_ok "world $world, rank 1 ${fault}ed: rank $r (after ${ms:-no error} ms)" "$log"
      fi
    done
  done
done
finish
