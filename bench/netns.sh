#!/usr/bin/env bash
# Runs a ddp program as two "nodes" (one rank each) in two network namespaces
# joined by a veth pair whose ends are shaped with tc's token bucket filter,
# so that loopback's unrealistic speed is replaced by a link of known rate.
#
#   bench/netns.sh --rate 1gbit -- build/bench/ddp_bench collectives --json out.json
#
# Layout (names carry this script's PID, so concurrent runs do not collide):
#   namespace ddpb<PID>a: veth vb<PID>a 10.77.0.1/24, rank 0 (and the store)
#   namespace ddpb<PID>b: veth vb<PID>b 10.77.0.2/24, rank 1
#   both ends: tc qdisc add dev X root tbf rate R burst B latency L
# Each namespace runs `ddprun --nnodes 2 --node-rank K --master-addr 10.77.0.1
# --master-port P --nproc-per-node 1 -- program...` with DDP_SOCKET_IFNAME and
# GLOO_SOCKET_IFNAME set to its veth, and DDP_BENCH_LINK /
# DDP_BENCH_LINK_RATE_BPS describing the link (ddp_bench records them). The
# program can be anything that reads the launcher's RANK, WORLD_SIZE,
# MASTER_ADDR and MASTER_PORT, e.g. a PyTorch script:
#   bench/netns.sh -- /usr/bin/python3 bench/pytorch_ddp_train.py --model mlp --world-size 2
# (GLOO_SOCKET_IFNAME makes PyTorch's Gloo bind the veth.) Everything is
# removed afterwards, also on failure or Ctrl-C. `netem` (delay, loss) is not
# used: this kernel lacks it.
#
# Needs root and a working `ip netns`; without them it says so and runs both
# ranks on loopback (unshaped) instead.
set -u -o pipefail

usage() {
  cat <<'EOF'
usage: bench/netns.sh [--rate R] [--burst B] [--latency L] [--port P]
                      [--ddprun PATH] [--loopback] -- program [args...]

  --rate R      link rate per direction, tc units: 1gbit, 10gbit, 500mbit
                (default 1gbit)
  --burst B     tbf bucket size, tc units (default: 1 ms at the rate, at least 32kb)
  --latency L   tbf queueing limit (default 20ms)
  --port P      rendezvous port of rank 0 inside its namespace (default 29500)
  --ddprun PATH the launcher (default: $DDPRUN, else build/tools/ddprun/ddprun
                next to this script's repository)
  --loopback    skip the namespaces: both ranks on loopback, unshaped
EOF
}

die() { echo "netns.sh: $*" >&2; exit 2; }

rate=1gbit
burst=""
latency=20ms
port=29500
ddprun="${DDPRUN:-}"
force_loopback=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rate) rate="${2:?--rate needs a value}"; shift 2 ;;
    --burst) burst="${2:?--burst needs a value}"; shift 2 ;;
    --latency) latency="${2:?--latency needs a value}"; shift 2 ;;
    --port) port="${2:?--port needs a value}"; shift 2 ;;
    --ddprun) ddprun="${2:?--ddprun needs a value}"; shift 2 ;;
    --loopback) force_loopback=1; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    *) usage >&2; die "unknown argument '$1' (put the program after --)" ;;
  esac
done
[[ $# -gt 0 ]] || { usage >&2; die "no program given after --"; }

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[[ -n "$ddprun" ]] || ddprun="$repo/build/tools/ddprun/ddprun"
[[ -x "$ddprun" ]] || die "launcher '$ddprun' not found: build it (cmake --build build --target ddprun) or pass --ddprun PATH"
ddprun="$(cd "$(dirname "$ddprun")" && pwd)/$(basename "$ddprun")"

# "1gbit" -> 1000000000 (bits per second); tc's bit units only.
rate_bps="$(awk -v r="$rate" 'BEGIN {
  if (match(r, /^[0-9]+(\.[0-9]+)?/) == 0) exit 1
  n = substr(r, 1, RLENGTH); u = tolower(substr(r, RLENGTH + 1))
  m = (u == "bit") ? 1 : (u == "kbit") ? 1e3 : (u == "mbit") ? 1e6 : (u == "gbit") ? 1e9 : (u == "tbit") ? 1e12 : 0
  if (m == 0) exit 1
  printf "%.0f", n * m }')" || die "--rate '$rate' is not a tc bit rate like 1gbit, 10gbit or 500mbit"
if [[ -z "$burst" ]]; then
  # 1 ms worth of tokens, but at least 32 KiB (several 1500-byte frames).
  burst="$(awk -v b="$rate_bps" 'BEGIN { x = b / 8 / 1000; if (x < 32768) x = 32768; printf "%.0f", x }')"
fi

prog=("$@")

# Both ranks on this machine's loopback, unshaped; $1 says why.
run_loopback() {
  DDP_BENCH_LINK="loopback ($1)" exec "$ddprun" --nproc-per-node 2 -- "${prog[@]}"
}

ns_a="ddpb$$a" ns_b="ddpb$$b"
veth_a="vb$$a" veth_b="vb$$b"
made_a=0 made_b=0
pids=()

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null; done
  # Anything of ours still inside the namespaces (started by this run only).
  for ns in "$ns_a" "$ns_b"; do
    ip netns pids "$ns" 2>/dev/null | while read -r p; do kill -KILL "$p" 2>/dev/null; done
  done
  ip link del "$veth_a" 2>/dev/null  # if setup failed before the move
  ((made_a)) && ip netns del "$ns_a" 2>/dev/null
  ((made_b)) && ip netns del "$ns_b" 2>/dev/null
  exit "$rc"
}

if ((force_loopback)); then
  echo "netns.sh: --loopback: both ranks on loopback, unshaped" >&2
  run_loopback "netns.sh --loopback"
fi
if [[ "$(id -u)" != 0 ]]; then
  reason="not root (network namespaces need root)"
elif ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
  reason="'ip' or 'tc' (iproute2) is not installed"
elif ! ip netns add "$ns_a" 2>/dev/null; then
  reason="'ip netns add' failed here (no network namespace support?)"
else
  reason=""
  made_a=1
fi
if [[ -n "$reason" ]]; then
  echo "netns.sh: $reason: running both ranks on loopback instead, WITHOUT shaping (results are not for a ${rate} link)" >&2
  run_loopback "netns.sh fallback: $reason"
fi

trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

setup() {
  ip netns add "$ns_b" && made_b=1 &&
    ip link add "$veth_a" type veth peer name "$veth_b" &&
    ip link set "$veth_a" netns "$ns_a" &&
    ip link set "$veth_b" netns "$ns_b" &&
    ip -n "$ns_a" addr add 10.77.0.1/24 dev "$veth_a" &&
    ip -n "$ns_b" addr add 10.77.0.2/24 dev "$veth_b" &&
    ip -n "$ns_a" link set lo up && ip -n "$ns_b" link set lo up &&
    ip -n "$ns_a" link set "$veth_a" up && ip -n "$ns_b" link set "$veth_b" up &&
    tc -n "$ns_a" qdisc add dev "$veth_a" root tbf rate "$rate" burst "$burst" latency "$latency" &&
    tc -n "$ns_b" qdisc add dev "$veth_b" root tbf rate "$rate" burst "$burst" latency "$latency"
}
setup || die "setting up the namespaces failed (see above)"

link="veth between 2 network namespaces, tbf rate $rate burst $burst latency $latency on both ends"
echo "netns.sh: $link; rank 0 in $ns_a (10.77.0.1, $veth_a), rank 1 in $ns_b (10.77.0.2, $veth_b)" >&2

ip netns exec "$ns_a" env DDP_SOCKET_IFNAME="$veth_a" GLOO_SOCKET_IFNAME="$veth_a" \
  DDP_BENCH_LINK="$link" DDP_BENCH_LINK_RATE_BPS="$rate_bps" \
  "$ddprun" --nnodes 2 --node-rank 0 --master-addr 10.77.0.1 --master-port "$port" \
  --nproc-per-node 1 -- "${prog[@]}" &
pids+=($!)
ip netns exec "$ns_b" env DDP_SOCKET_IFNAME="$veth_b" GLOO_SOCKET_IFNAME="$veth_b" \
  DDP_BENCH_LINK="$link" DDP_BENCH_LINK_RATE_BPS="$rate_bps" \
  "$ddprun" --nnodes 2 --node-rank 1 --master-addr 10.77.0.1 --master-port "$port" \
  --nproc-per-node 1 -- "${prog[@]}" &
pids+=($!)

# The first node to fail stops the other (it would otherwise wait for its
# peer until the collective timeout).
status=0
remaining=2
declare -A done_pids=()
while ((remaining > 0)); do
  running=()
  for pid in "${pids[@]}"; do [[ -z "${done_pids[$pid]:-}" ]] && running+=("$pid"); done
  wait -n -p finished "${running[@]}"
  rc=$?
  done_pids[$finished]=1
  ((remaining--))
  if ((rc != 0 && status == 0)); then
    status=$rc
    echo "netns.sh: node with pid $finished exited with status $rc; stopping the other" >&2
    for pid in "${pids[@]}"; do [[ "$pid" != "$finished" ]] && kill -TERM "$pid" 2>/dev/null; done
  fi
done
pids=()

for end in "$ns_a:$veth_a" "$ns_b:$veth_b"; do
  stats="$(tc -s -n "${end%%:*}" qdisc show dev "${end#*:}" | awk '/Sent/ { print $2 " bytes sent, dropped " $7 " overlimits " $9 }' | tr -d ',)')"
  echo "netns.sh: ${end#*:}: $stats" >&2
done
exit "$status"
