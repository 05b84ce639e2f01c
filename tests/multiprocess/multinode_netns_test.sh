#!/usr/bin/env bash
# Two "nodes" in two network namespaces joined by a veth pair, one ddprun in
# each (--nnodes 2), 2 ranks per node: rendezvous and every collective across
# a real link, on the default backend (hierarchical: shm inside a node, Gloo
# across); then a link that goes down mid-training. Exits 77 (skipped) where
# `ip netns` is not permitted.
#   multinode_netns_test.sh BUILD_DIR
set -uo pipefail
build=$1
ddprun=$build/tools/ddprun/ddprun
demo=$build/examples/collectives
id=$$
a=ddpt-a-$id b=ddpt-b-$id
probe=ddpt-probe-$id
# Both halves: a chroot whose / is no mount point can add a namespace but
# not enter one (ip netns exec remounts /).
if ! ip netns add "$probe" 2>/dev/null; then
  echo "SKIP: cannot create network namespaces here (needs root and 'ip netns'); multi-node test skipped"
  exit 77
fi
if ! ip netns exec "$probe" true 2>/dev/null; then
  ip netns del "$probe"
  echo "SKIP: cannot enter network namespaces here ('ip netns exec' fails); multi-node test skipped"
  exit 77
fi
ip netns del "$probe"
. "$(dirname "$0")/../support/tap.sh"
tmp=$(mktemp -d)
cleanup() {
  ip netns del "$a" 2>/dev/null
  ip netns del "$b" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT INT TERM
set -e
ip netns add "$a"
ip netns add "$b"
ip link add "va$id" netns "$a" type veth peer name "vb$id" netns "$b"
ip -n "$a" addr add 10.78.0.1/24 dev "va$id"
ip -n "$b" addr add 10.78.0.2/24 dev "vb$id"
for ns in "$a" "$b"; do
  ip -n "$ns" link set lo up
done
ip -n "$a" link set "va$id" up
ip -n "$b" link set "vb$id" up
set +e

# Runs `$@` as node 0 in $a and node 1 in $b ("NODE_RANK" in the arguments
# becomes each node's rank), and checks that 4 ranks, named by the pattern
# `$backend`, got every collective right. Prints ok/not ok; returns 1 if not.
run_both_nodes() {
  local label=$1 backend=$2
  shift 2
  local a_args=("${@//NODE_RANK/0}") b_args=("${@//NODE_RANK/1}")
  timeout -s KILL 120 ip netns exec "$a" "${a_args[@]}" >"$tmp/a" 2>&1 &
  local node_a=$!
  timeout -s KILL 120 ip netns exec "$b" "${b_args[@]}" >"$tmp/b" 2>&1
  local status_b=$?
  wait $node_a
  local status_a=$?
  cat "$tmp/a" "$tmp/b"
  local correct
  correct=$(cat "$tmp/a" "$tmp/b" | grep -c -E "rank [0-3] of 4 $backend.*all correct")
  if [ "$status_a" -eq 0 ] && [ "$status_b" -eq 0 ] && [ "$correct" -eq 4 ]; then
    echo "ok - $label: 4 ranks, every collective correct"
    return 0
  fi
  echo "not ok - $label (node exits $status_a/$status_b, $correct of 4 ranks correct)"
  return 1
}

# No DDP_SOCKET_IFNAME: each node must bind where the master is reachable.
# One job secret for both nodes, as a user sets it (docs/security.md).
failed=0
run_both_nodes "two nodes over a veth link (ddprun, one DDP_JOB_SECRET)" "\[hierarchical\(shm\+gloo\)\]" \
  env DDP_JOB_SECRET=0123456789abcdef0123456789abcdef \
  "$ddprun" --nnodes 2 --node-rank NODE_RANK --master-addr 10.78.0.1 --master-port 29611 \
  --nproc-per-node 2 "$demo" || failed=1

# torchrun of the build's own PyTorch 2.x (DDP_REFERENCE_PYTHON, set by
# CTest): node 0's agent hosts the store (TORCHELASTIC_USE_AGENT_STORE) and
# the ranks of both nodes join it. The namespaces share the host name, so the
# backend chosen may differ from ddprun's: any is fine if it is right.
python=${DDP_REFERENCE_PYTHON:-/usr/bin/python3}
if [ "$python" != /usr/bin/python3 ] && "$python" -c "import torch.distributed.run" 2>/dev/null; then
  run_both_nodes "two nodes over a veth link (torchrun of the build's PyTorch)" "" \
    "$python" -m torch.distributed.run --nnodes 2 --node-rank NODE_RANK \
    --master-addr 10.78.0.1 --master-port 29612 --nproc-per-node 2 --no-python "$demo" ||
    failed=1
else
  echo "ok - two nodes with torchrun # SKIP the build's Python ($python) has no PyTorch 2.x torchrun"
fi

# The link goes down mid-training (Gloo, a rank on each side, a 5 s timeout):
# every rank fails with a TimeoutError (Gloo's "Timed out") within the
# timeout plus 2 s of it, the one cut off from rank 0's store included.
fault=$build/tests/multiprocess/fault_rank
for r in 0 1; do
  ns=$a
  [ "$r" = 1 ] && ns=$b
  ( timeout -s KILL 60 ip netns exec "$ns" env DDP_BACKEND=gloo MASTER_ADDR=10.78.0.1 MASTER_PORT=29613 \
      RANK=$r WORLD_SIZE=2 "$fault" --victim 9 --iterations 100000000 --elements 1024 \
      --timeout-s 5 --linger-s 0 >"$tmp/down$r" 2>&1
    echo "exit $? at $(date +%s%N)" >>"$tmp/down$r" ) &
done
sleep 3
down=$(( $(date +%s%N) / 1000000 ))
ip -n "$a" link set "va$id" down
wait
for r in 0 1; do
  error_at=$(sed -n 's/^survivor rank .*error came at unix ms \([0-9]*\)$/\1/p' "$tmp/down$r")
  ms=$(( ${error_at:-0} - down ))
  if grep -q "^exit 3 at" "$tmp/down$r" && grep -q "Timed out" "$tmp/down$r" &&
     ddp_error "$tmp/down$r" type=TimeoutError "rank=$r" world=2 backend=gloo && [ -n "$error_at" ] &&
     [ "$ms" -ge 0 ] && [ "$ms" -le 7000 ]; then
    echo "ok - link down: rank $r failed $ms ms after it (timeout 5 s, at most 7 s), and exited"
  else
    echo "not ok - link down: rank $r (its error ${ms} ms after it, limit 7000)"
    head -c 1500 "$tmp/down$r"
    failed=1
  fi
done
exit $failed
