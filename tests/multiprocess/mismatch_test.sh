#!/usr/bin/env bash
# Collectives that disagree across ranks (docs/errors.md, "Collectives that
# disagree, per backend"), in real processes: at its third allreduce rank 1
# issues another kind, element count, dtype of the same size, wider dtype,
# reduce op or root. Every rank must fail with an error (fault_rank exits
# 3); none may finish with a wrong result or hang. (A rank that skips a
# collective is a hang, not a disagreement: flight_test.sh.)
#   mismatch_test.sh BUILD_DIR shm|gloo|mpi|nccl
# shm checks always; gloo, mpi and nccl with DDP_DEBUG=detail (gloo also
# catches a different byte count without it, at the group's timeout: the
# "count" case). nccl: CUDA tensors on one GPU per rank, or on one GPU
# shared (NCCL 2.30 and later, NCCL_MULTI_RANK_GPU_ENABLE=1; tests/gpu).
set -uo pipefail
build=$1 backend=$2
job=$build/tests/multiprocess/fault_rank
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
. "$(dirname "$0")/../support/tap.sh"
# Each rank finds the disagreement itself: no need to linger for the others.
args=(--victim 1 --after 2 --iterations 6 --elements 1024 --timeout-s 3 --linger-s 0)
declare -A fault=([kind]=op [count]=shape [dtype]=dtype [wide]=wide [reduce]=reduce [root]=root)

# run CASE DEBUG: both ranks' output in $tmp/CASE.log; the ranks' exit statuses in $tmp/CASE.status
run() {
  local name=$1 debug=$2 log=$tmp/$1.log
  if [ "$backend" = mpi ]; then
    # Each rank's output in a file of its own (the two would interleave).
    timeout -s KILL 60 mpirun -np 2 --allow-run-as-root --oversubscribe -x DDP_BACKEND=mpi \
      -x DDP_DEBUG="$debug" --output-filename "$tmp/$name.mpi" \
      "$job" "${args[@]}" --fault "${fault[$name]}" >"$log.mpirun" 2>&1
    echo "mpirun $?" >"$tmp/$name.status"
    cat "$tmp/$name.mpi"/*/rank.*/std* >"$log" 2>/dev/null
    return
  fi
  local port; port=$(free_port)
  for r in 0 1; do
    ( DDP_BACKEND=$backend DDP_DEBUG=$debug MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=$r WORLD_SIZE=2 \
        timeout -s KILL 60 "$job" "${args[@]}" --fault "${fault[$name]}" >"$log.$r" 2>&1
      echo "rank $r exit $?" >>"$tmp/$name.status" ) &
  done
  wait
  cat "$log.0" "$log.1" >"$log"
}
# expect CASE DEBUG: every rank failed with an error and said so: a
# CollectiveMismatch where the disagreement is checked (shm; DDP_DEBUG=detail),
# rank 0's about rank 1; else (gloo's other byte count) a timeout.
expect() {
  local name=$1 debug=$2
  run "$name" "$debug"
  local errors; errors=$(grep -c "^survivor rank [01] failed" "$tmp/$name.log")
  local bad_exit; bad_exit=$(grep -v -E "exit 3$|^mpirun [1-9]" "$tmp/$name.status")
  local type=type=CollectiveMismatch about=peers~1 facts=0
  [ "$backend" = gloo ] && [ "$debug" = off ] && type=is=CommunicationError about=world=2
  ddp_error "$tmp/$name.log" "$type" rank=0 world=2 "$about" && facts=$((facts + 1))
  ddp_error "$tmp/$name.log" "$type" rank=1 world=2 && facts=$((facts + 1))
  if [ "$errors" -eq 2 ] && [ -z "$bad_exit" ] && [ "$facts" -eq 2 ]; then
    ok "$backend, DDP_DEBUG=$debug: rank 1's $name mismatch fails every rank (${type#*=})"
    grep -m1 "^survivor rank 0" "$tmp/$name.log" | cut -c1-240 | sed 's/^/#   /'
  else
    not_ok "$backend, DDP_DEBUG=$debug: $name ($errors ranks failed, $facts with a ${type#*=}; $(tr '\n' ' ' <"$tmp/$name.status"))" \
      "$tmp/$name.log"
  fi
}

case $backend in
shm) debug=off ;;
gloo | mpi) debug=detail ;;
nccl)
  debug=detail
  args+=(--device cuda)
  ;;
*) echo "unknown backend $backend" >&2; exit 2 ;;
esac
for name in kind count dtype wide reduce root; do expect "$name" "$debug"; done
[ "$backend" = gloo ] && expect count off
exit $failed
