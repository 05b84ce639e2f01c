#!/usr/bin/env bash
# The flight recorder in real jobs: 3 ranks under ddprun --flight-recorder,
# one of them faulty (fault_rank's faults); after the failed job ddprun's
# one line, and ddp-flight's, must name the faulty rank and the collective,
# on shm (the default on one host) and on Gloo. A directory the ranks cannot
# write loses the dump, not the job's own error.
#   flight_test.sh BUILD_DIR [BACKEND...]
# BACKENDs: default shm and gloo, then the unwritable directory; nccl (CUDA
# tensors, tests/gpu) runs the faults alone. The jobs mostly wait (for the
# group's timeout, the survivors' linger, ddprun's grace period), so on the
# CPU backends they run side by side (concurrent.sh); nccl's one at a time.
set -uo pipefail
build=$1
ddprun=$build/tools/ddprun/ddprun
flight=$build/tools/flight/ddp-flight
job=$build/tests/multiprocess/fault_rank
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/../support/tap.sh"
. "$(dirname "$0")/../support/concurrent.sh"

# run BACKEND FAULT PATTERN: 12 allreduces, the victim is rank 1, faulty at
# the 5th (#4 of the group, counted from 0 as in the backends' errors: the
# job issues nothing else on it); PATTERN is what ddprun's line, and
# ddp-flight's first, must match after their "ddprun: flight recorder: " and
# "ddp-flight: ".
run() {
  local backend=$1 fault=$2 pattern=$3 dir=$tmp/$1-$2 log=$tmp/$1-$2.log
  local device=cpu
  [[ $backend == nccl ]] && device=cuda
  DDP_BACKEND=$backend timeout 120 "$ddprun" --nproc-per-node 3 --grace-period-s 1 \
    --flight-recorder "$dir" "$job" --victim 1 --after 4 --timeout-s 5 --fault "$fault" \
    --iterations 12 --elements 1024 --device "$device" >"$log" 2>&1
  local status=$? line
  line=$(grep '^ddprun: flight recorder: ' "$log")
  line=${line#ddprun: flight recorder: }
  if [[ $status -ne 0 && $line =~ $pattern ]]; then
    ok "$backend, $fault: ddprun says: $line"
  else
    not_ok "$backend, $fault (status $status): ddprun's line '$line' does not match /$pattern/" "$log"
  fi
  line=$("$flight" "$dir" | head -1)
  line=${line#ddp-flight: }
  if [[ $line =~ $pattern ]]; then
    ok "$backend, $fault: ddp-flight says the same"
  else
    not_ok "$backend, $fault: ddp-flight's line '$line' does not match /$pattern/" "$log"
  fi
}

group=generation1
# A victim killed or stopped just after issuing #4 may have done its part of
# it already (its worker runs on): the others are then in #5.
allreduce4or5="allreduce #[45] \(SUM, Float, 1024 elements\) of group $group"
backends=("${@:2}")
[[ ${#backends[@]} -gt 0 ]] || backends=(shm gloo)
# Up to 4 cases at once on the CPU backends (each: 3 ranks, mostly idle).
if [[ " ${backends[*]} " == *" nccl "* ]]; then concurrent_start "$tmp" 1; else concurrent_start "$tmp" 4; fi
for backend in "${backends[@]}"; do
  concurrently "$backend, kill" run "$backend" kill "^rank 1 left no dump .* while ranks 0, 2 were in $allreduce4or5"
  concurrently "$backend, stop" run "$backend" stop "^rank 1 left no dump .* while ranks 0, 2 were in $allreduce4or5"
  concurrently "$backend, skip" run "$backend" skip "^rank 1 never issued allreduce #11 \(SUM, Float, 1024 elements\) of group $group \(last: #10, completed\), which ranks 0, 2 issued"
  concurrently "$backend, shape" run "$backend" shape "^rank 1 issued allreduce \(SUM, Float, 1025 elements\) as collective #4 of group $group where ranks 0, 2 issued allreduce \(SUM, Float, 1024 elements\)"
  concurrently "$backend, op" run "$backend" op "^rank 1 issued broadcast \(root 0, Float, 1024 elements\) as collective #4 of group $group where ranks 0, 2 issued allreduce"
done

# An unwritable directory: the job's own error still ends it, with one line
# saying the dump was not written. (ddprun would refuse the directory: the
# ranks are started by hand.)
unwritable() {
  touch "$tmp/a-file"
  local port rank log
  port=$(free_port)
  for rank in 0 1; do
    DDP_FLIGHT_RECORDER_DIR=$tmp/a-file/dumps MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=$rank \
      WORLD_SIZE=2 timeout 60 "$job" --victim 1 --after 2 --timeout-s 5 --fault shape \
      --iterations 6 --elements 64 >"$tmp/unwritable.$rank.log" 2>&1 &
  done
  wait
  for rank in 0 1; do
    log=$tmp/unwritable.$rank.log
    # The job's error: rank 1's other element count, on shm (one host).
    if grep -q "^ddp: flight recorder: cannot write $tmp/a-file/dumps/rank$rank.flight: Not a directory" "$log" &&
      grep -q "^survivor rank $rank failed after .* ms: ddp: " "$log" &&
      ddp_error "$log" type=CollectiveMismatch "rank=$rank" world=2 backend=shm; then
      ok "rank $rank, an unwritable directory: one line says so, the job's error is kept"
    else
      not_ok "rank $rank, an unwritable directory" "$log"
    fi
  done
}
[[ $# -gt 1 ]] || concurrently "an unwritable directory" unwritable  # backends named: their faults alone
concurrent_wait
exit $failed
