#!/usr/bin/env bash
# The default backend across hosts: N "nodes" (network namespaces joined by
# a bridge, bench/netem's layout) of 2 ranks each must choose the
# hierarchical group (shared memory inside a node, Gloo across) and get every
# collective right. Exits 77 (skipped) where `ip netns` is not permitted.
#   hierarchical_netns_test.sh BUILD_DIR NODES
set -uo pipefail
build=$1 nodes=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
probe=ddpt-probe-$$
if ! ip netns add "$probe" 2>/dev/null; then
  echo "SKIP: cannot create network namespaces here (needs root and 'ip netns'); test skipped"
  exit 77
fi
ip netns del "$probe"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
timeout -s KILL 180 "$root/bench/netem" --nodes "$nodes" --nproc-per-node 2 --bridge --rate 10g \
  --ddprun "$build/tools/ddprun/ddprun" -- "$build/examples/collectives" >"$out" 2>&1
status=$?
cat "$out"
ranks=$((nodes * 2))
correct=$(grep -c -E "rank [0-9]+ of $ranks \[hierarchical\(shm\+gloo\)\].*all correct" "$out")
if [ "$status" -eq 0 ] && [ "$correct" -eq "$ranks" ]; then
  echo "ok - $nodes nodes x 2 ranks: hierarchical, every collective correct"
  exit 0
fi
echo "not ok - $nodes nodes x 2 ranks (exit $status, $correct of $ranks ranks correct and hierarchical)"
exit 1
