#!/usr/bin/env bash
# Two "nodes" in two network namespaces joined by a veth pair, one ddprun in
# each (--nnodes 2), 2 ranks per node: rendezvous and every collective across
# a real link, on the default backend (hierarchical: shm inside a node, Gloo
# across). Exits 77 (skipped) where `ip netns` is not permitted.
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

# No DDP_SOCKET_IFNAME: each node must bind where the master is reachable.
run_node() {
  timeout -s KILL 120 ip netns exec "$1" "$ddprun" --nnodes 2 --node-rank "$2" \
    --master-addr 10.78.0.1 --master-port 29611 --nproc-per-node 2 "$demo"
}
run_node "$a" 0 >"$tmp/a" 2>&1 &
node_a=$!
run_node "$b" 1 >"$tmp/b" 2>&1
status_b=$?
wait $node_a
status_a=$?
cat "$tmp/a" "$tmp/b"
correct=$(cat "$tmp/a" "$tmp/b" | grep -c -E "rank [0-3] of 4 \[hierarchical\(shm\+gloo\)\].*all correct")
if [ "$status_a" -eq 0 ] && [ "$status_b" -eq 0 ] && [ "$correct" -eq 4 ]; then
  echo "ok - two nodes over a veth link: 4 ranks, every collective correct"
  exit 0
fi
echo "not ok - two nodes over a veth link (node exits $status_a/$status_b, $correct of 4 ranks correct)"
exit 1
