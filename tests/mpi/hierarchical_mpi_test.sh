#!/usr/bin/env bash
# The hierarchical group with MPI across hosts (DDP_CROSS_BACKEND=mpi) under
# mpirun: every collective right on every rank (examples/collectives), and
# DDP equal to local training on it (ddp_equivalence).
#   hierarchical_mpi_test.sh BUILD_DIR MPIRUN loopback NP HOSTS
#       one machine; rank r counts as host r % HOSTS (as_hosts.sh)
#   hierarchical_mpi_test.sh BUILD_DIR MPIRUN netns NODES
#       NODES network namespaces x 2 ranks, one mpirun across them
#       (bench/netem --mpirun); exits 77 (skipped) without `ip netns`, or
#       when bench/netem cannot build the namespaces
set -uo pipefail
usage="usage: $0 BUILD_DIR MPIRUN loopback NP HOSTS | BUILD_DIR MPIRUN netns NODES"
build=${1:?$usage} mpirun=${2:?$usage} mode=${3:?$usage}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
export DDP_BACKEND=hierarchical DDP_CROSS_BACKEND=mpi
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# Each launch is bounded; TERM first, so that netem removes its namespaces.
bounded() { timeout -k 15 240 "$@"; }
case "$mode" in
  loopback)
    ranks=${4:?$usage} hosts=${5:?$usage}
    launch() {
      MASTER_ADDR=127.0.0.1 MASTER_PORT=$(free_port) bounded "$mpirun" --allow-run-as-root \
        --oversubscribe -np "$ranks" -x DDP_BACKEND -x DDP_CROSS_BACKEND -x MASTER_ADDR \
        -x MASTER_PORT "$here/as_hosts.sh" "$hosts" "$@"
    }
    what="$ranks ranks on $hosts hosts (DDP_HOST_ID)"
    ;;
  netns)
    nodes=${4:?$usage} ranks=$((${4:?$usage} * 2))
    probe=ddpt-probe-$$
    if ! ip netns add "$probe" 2>/dev/null; then
      echo "SKIP: cannot create network namespaces here (needs root and 'ip netns'); test skipped"
      exit 77
    fi
    ip netns del "$probe"
    launch() {
      bounded "$root/bench/netem" --mpirun "$mpirun" --nodes "$nodes" --nproc-per-node 2 \
        --bridge --rate 10g -- "$@"
    }
    what="$nodes nodes x 2 ranks (network namespaces)"
    ;;
  *) echo "$usage" >&2; exit 2 ;;
esac

failed=0
out=$(mktemp)
trap 'rm -f "$out"' EXIT
launch "$build/examples/collectives" >"$out" 2>&1
status=$?
cat "$out"
if grep -q "on loopback instead" "$out"; then
  echo "SKIP: bench/netem could not build the namespaces here (see above); test skipped"
  exit 77
fi
correct=$(grep -c -E "rank [0-9]+ of $ranks \[hierarchical\(shm\+mpi\)\].*all correct" "$out")
if [ "$status" -eq 0 ] && [ "$correct" -eq "$ranks" ]; then
  echo "ok - $what: hierarchical(shm+mpi), every collective correct"
else
  echo "not ok - $what: collectives (exit $status, $correct of $ranks ranks correct on hierarchical(shm+mpi))"
  failed=1
fi

launch "$build/tests/multiprocess/ddp_equivalence" --gtest_filter='DdpEquivalence.*' >"$out" 2>&1
status=$?
cat "$out"
# Each rank names its world first, then GoogleTest its verdict.
worlds=$(grep -c -E "rank [0-9]+ of $ranks on cpu over hierarchical\(shm\+mpi\)" "$out")
passed=$(grep -c "PASSED  \]" "$out")
if [ "$status" -eq 0 ] && [ "$worlds" -eq "$ranks" ] && [ "$passed" -eq "$ranks" ]; then
  echo "ok - $what: DDP equals local training on hierarchical(shm+mpi)"
else
  echo "not ok - $what: DDP equivalence (exit $status, $worlds of $ranks ranks on hierarchical(shm+mpi), $passed passed)"
  failed=1
fi
exit "$failed"
