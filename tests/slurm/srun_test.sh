#!/usr/bin/env bash
# ddp under Slurm, for real: a one-node cluster of Debian's slurmctld and
# slurmd (cluster.sh) runs the job's tasks; ranks meet through the variables
# srun sets, with no MASTER_ADDR or MASTER_PORT.
#   srun_test.sh BUILD_DIR CASE
# CASE:
#   equivalence N [mpi]  srun -n N of ddp_equivalence (DDP equals one process),
#                        on the default backend, or on mpi (srun --mpi=pmix)
#   task_killed          srun -n 3 of fault_rank: task 1 is killed mid-allreduce;
#                        the others fail naming rank 1, srun exits non-zero
#   task_missing         task 1 never starts its rank: rank 0's rendezvous says
#                        rank 1 did not arrive, within the rendezvous timeout
#   sbatch_train         sbatch of examples/train.sbatch (the main job, 1 epoch)
# Exit 77 (skipped, saying why) where this host cannot run the daemons.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "$1" && pwd)
case_name=$2
shift 2
. "$here/../support/tap.sh"

# Nothing of an allocation this test may itself run in: its own cluster only.
unset $(compgen -e | grep '^SLURM_') MASTER_ADDR MASTER_PORT RANK WORLD_SIZE LOCAL_RANK DDP_BACKEND
tmp=$(mktemp -d /tmp/ddp-srun.XXXXXX)
trap 'bash "$here/cluster.sh" stop "$tmp/cluster"; rm -rf "$tmp"' EXIT
bash "$here/cluster.sh" start "$tmp/cluster" || exit $?
. "$tmp/cluster/env"
log=$tmp/job.log

case $case_name in
equivalence)
  n=$1 backend=${2:-default}
  args=(--ntasks "$n" --kill-on-bad-exit=1)
  [[ $backend == mpi ]] && args+=(--mpi=pmix --export=ALL,DDP_BACKEND=mpi)
  timeout 600 srun "${args[@]}" "$build/tests/multiprocess/ddp_equivalence" \
    --gtest_filter='DdpEquivalence.*' >"$log" 2>&1
  status=$?
  worlds=$(grep -c "^rank [0-9]* of $n on cpu over" "$log")
  [[ $status -eq 0 && $worlds -eq $n ]]
  check $? "srun -n $n ($backend backend): $worlds of $n ranks in one world, DDP equals one process" "$log"
  if [[ $backend == mpi ]]; then
    grep -q "of $n on cpu over mpi" "$log"
    check $? "srun -n $n --mpi=pmix: the ranks are MPI's" "$log"
  fi
  ;;
task_killed)
  start=$(date +%s)
  timeout 120 srun --ntasks 3 --kill-on-bad-exit=0 "$build/tests/multiprocess/fault_rank" \
    --victim 1 --after 3 --timeout-s 20 --fault kill --elements 65536 >"$log" 2>&1
  status=$?
  elapsed=$(($(date +%s) - start))
  [[ $status -ne 0 ]]
  check $? "srun exits non-zero ($status) when a task is killed" "$log"
  for r in 0 2; do
    grep -q "survivor rank $r failed after " "$log" &&
      ddp_error "$log" type=CommunicationError "rank=$r" world=3 peers~1
    check $? "rank $r fails with an error about rank 1" "$log"
  done
  [[ $elapsed -lt 60 ]]
  check $? "the job ends in ${elapsed}s, within the 20 s timeout plus set-up" "$log"
  ;;
task_missing)
  # Task 1 runs, but not ddp: rank 0 waits for it as for a node that is gone.
  timeout 120 srun --ntasks 2 --kill-on-bad-exit=0 --export=ALL,DDP_RENDEZVOUS_TIMEOUT_S=5 \
    bash -c '[[ $SLURM_PROCID == 1 ]] && exit 0; exec "$0"' \
    "$build/tests/multiprocess/ddp_equivalence" >"$log" 2>&1
  status=$?
  [[ $status -ne 0 ]] && ddp_error "$log" type=TimeoutError rank=0 world=2 operation=rendezvous peers=1
  check $? "task 1 never joins: rank 0's rendezvous error is about rank 1 and srun fails" "$log"
  ;;
sbatch_train)
  cd "$tmp"
  ln -s "$build" build
  out=$tmp/train.out
  XDG_CACHE_HOME=$tmp/cache timeout 600 sbatch --wait --output="$out" \
    "$here/../../examples/train.sbatch" --epochs 1 --log-every 100000 >"$log" 2>&1
  status=$?
  accuracy=$(sed -n 's/.*accuracy \([0-9.]*\)%.*/\1/p' "$out" 2>/dev/null)
  [[ $status -eq 0 && -n $accuracy ]]
  check $? "sbatch examples/train.sbatch: the main job ends with held-out accuracy ${accuracy:-?}%" "$out"
  grep -q "^train: 2 ranks" "$out"
  check $? "the batch job trained on 2 ranks" "$out"
  ;;
*)
  echo "srun_test.sh: unknown case '$case_name'" >&2
  exit 2
  ;;
esac
exit $failed
