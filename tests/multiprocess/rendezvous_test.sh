#!/usr/bin/env bash
# Real ranks in real processes: rendezvous through ddprun, tcp://, file://,
# torchrun and mpirun; bad environments; a rank killed mid-collective.
#   rendezvous_test.sh BUILD_DIR
set -uo pipefail
. "$(dirname "$0")/../support/scratch.sh" "$1"
. "$(dirname "$0")/../support/concurrent.sh"
demo=$build/examples/collectives
fault=$build/tests/multiprocess/fault_rank
# scratch.sh's, and the ranks still in the background stopped.
trap 'rm -rf "$tmp"; kill $(jobs -p) 2>/dev/null' EXIT
# A failed check shows the last command's output.
not_ok_run() { fail "$1"; echo "--- output:"; cat "$tmp/out" "$tmp/err" 2>/dev/null | head -40; }
# expect NAME STATUS PATTERN -- command...: runs it (bounded), checks status and stdout+stderr.
expect() {
  local name=$1 status=$2 pattern=$3; shift 4
  timeout -s KILL 120 "$@" >"$tmp/out" 2>"$tmp/err"
  local got=$?
  if [ "$got" -ne "$status" ]; then not_ok_run "$name (exit $got, expected $status)"; return; fi
  if ! cat "$tmp/out" "$tmp/err" | grep -q -E -- "$pattern"; then not_ok_run "$name (no '$pattern')"; return; fi
  ok "$name"
}
# expect_error NAME STATUS CHECK... -- command...: runs it (bounded), checks its
# status, and that its output shows a ddp error passing every CHECK (tap.sh's
# ddp_error: the facts fault_rank prints after it, names and values it shows).
expect_error() {
  local name=$1 status=$2 checks=()
  shift 2
  while [[ $1 != -- ]]; do checks+=("$1"); shift; done
  shift
  timeout -s KILL 120 "$@" >"$tmp/out" 2>"$tmp/err"
  local got=$?
  if [ "$got" -ne "$status" ]; then not_ok_run "$name (exit $got, expected $status)"; return; fi
  cat "$tmp/out" "$tmp/err" >"$tmp/all"
  if ! ddp_error "$tmp/all" "${checks[@]}"; then not_ok_run "$name (no error with ${checks[*]})"; return; fi
  ok "$name"
}

expect "ddprun, 2 ranks, the default backend (one host: shm)" 0 "rank 1 of 2 \[shm\].*all correct" -- "$ddprun" --nproc-per-node 2 "$demo"
expect "ddprun, 2 ranks, DDP_BACKEND=gloo" 0 "rank 1 of 2 \[gloo\].*all correct" -- env DDP_BACKEND=gloo "$ddprun" --nproc-per-node 2 "$demo"
expect "ddprun, 3 ranks, 3 round-robin gloo groups, 2 threads" 0 "rank 2 of 3 \[round_robin\(3xgloo\)\].*all correct" \
  -- env DDP_BACKEND=gloo "$ddprun" --nproc-per-node 3 "$demo" --round-robin 3 --threads 2
expect "ddprun, 3 ranks, 2 round-robin groups of the default backend" 0 "rank 2 of 3 \[round_robin\(2xshm\)\].*all correct" \
  -- "$ddprun" --nproc-per-node 3 "$demo" --round-robin 2
expect "DDP_DEBUG=detail" 0 "shm\+checked.*all correct" -- env DDP_DEBUG=detail "$ddprun" --nproc-per-node 2 "$demo"

port=$(free_port)
( "$demo" --init-method "tcp://127.0.0.1:$port" --rank 1 --world-size 2 >"$tmp/r1" 2>&1 & )
expect "tcp://host:port" 0 "rank 0 of 2.*all correct" -- "$demo" --init-method "tcp://127.0.0.1:$port" --rank 0 --world-size 2

( "$demo" --init-method "file://$tmp/store" --rank 1 --world-size 2 >"$tmp/r1" 2>&1 & )
expect "file:///path" 0 "rank 0 of 2.*all correct" -- "$demo" --init-method "file://$tmp/store" --rank 0 --world-size 2

# torchrun --standalone's own store: PyTorch >= 2.4 starts it on libuv, which
# Debian 13's build lacks, and its c10d rendezvous ignores USE_LIBUV.
torchrun_store_ok() {
  /usr/bin/python3 -c "from torch.distributed import TCPStore; TCPStore('127.0.0.1', 0, is_master=True)" \
    >/dev/null 2>&1
}
if [ -x /usr/bin/torchrun ] && ! torchrun_store_ok; then
  echo "ok - torchrun --no_python # SKIP this PyTorch's TCPStore cannot start (no libuv in its build)"
elif [ -x /usr/bin/torchrun ]; then
  # --redirects/--tee 1: Debian's torchrun 1.13 on Python 3.11 cannot parse
  # the default "0" (its Std enum lost NONE from iteration in 3.11).
  # --monitor_interval: 1.13's agent looks at its workers every 5 s by default.
  expect "torchrun --no_python" 0 "rank 1 of 2.*all correct" \
    -- /usr/bin/torchrun --standalone --nproc_per_node 2 --redirects 1 --tee 1 --log_dir "$tmp/torchrun" \
    --monitor_interval 0.5 --no_python "$demo"
else
  echo "ok - torchrun --no_python # SKIP /usr/bin/torchrun not installed"
fi
# torchrun of the build's own PyTorch (DDP_REFERENCE_PYTHON, set by CTest):
# from 2.x its agent hosts the store (TORCHELASTIC_USE_AGENT_STORE=True) and
# every rank must join it as a client.
ref_python=${DDP_REFERENCE_PYTHON:-/usr/bin/python3}
if [ "$ref_python" = /usr/bin/python3 ]; then
  echo "ok - torchrun of the build's PyTorch # SKIP the build's Python is Debian's (above)"
elif "$ref_python" -c "import torch.distributed.run" >/dev/null 2>&1; then
  # With a job secret: rank 0 answers admissions on a second connection to
  # the agent's store, under the agent store's prefix (docs/security.md).
  expect "torchrun of the build's PyTorch (agent store, a job secret) --no-python" 0 "rank 1 of 2.*all correct" \
    -- env DDP_JOB_SECRET=0123456789abcdef0123456789abcdef \
    "$ref_python" -m torch.distributed.run --standalone --nproc-per-node 2 --no-python "$demo"
else
  echo "ok - torchrun of the build's PyTorch # SKIP $ref_python cannot import torch.distributed.run"
fi
if command -v mpirun >/dev/null; then
  expect "mpirun" 0 "rank 1 of 2.*all correct" -- mpirun -np 2 --allow-run-as-root --oversubscribe \
    -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT="$(free_port)" "$demo"
else
  echo "ok - mpirun # SKIP mpirun not installed"
fi

# Bad environments: a clear error naming the variable, never a hang. The
# ranks are fault_rank, which prints each error's facts; it exits 1 when it
# cannot join the group.
expect_error "missing MASTER_ADDR" 1 type=InvalidArgument "operation=init_process_group(env://)" \
  shows=MASTER_ADDR -- env -u MASTER_ADDR RANK=0 WORLD_SIZE=1 MASTER_PORT=1234 "$fault"
expect_error "malformed MASTER_PORT" 1 type=InvalidArgument "shows=MASTER_PORT='http'" \
  -- env RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=http "$fault"
expect_error "rank outside the world" 1 type=InvalidArgument shows=RANK=2 shows=WORLD_SIZE=2 \
  -- env RANK=2 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=1234 "$fault"
expect_error "RANK without WORLD_SIZE" 1 type=InvalidArgument shows=RANK shows=WORLD_SIZE \
  -- env -u WORLD_SIZE RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=1234 "$fault"
expect_error "unknown DDP_BACKEND" 1 type=InvalidArgument "shows='bogus'" shows=DDP_BACKEND shows=gloo \
  -- env DDP_BACKEND=bogus RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT="$(free_port)" "$fault"
expect_error "bad DDP_DEBUG" 1 type=InvalidArgument "shows=DDP_DEBUG='loud'" shows=off shows=info shows=detail \
  -- env DDP_DEBUG=loud RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT="$(free_port)" "$fault"
# The cases below mostly wait (a rendezvous timeout, a silent store, a
# stopped rank, a survivor's linger): they run side by side (concurrent.sh),
# each with its own port and scratch folder (case NAME: in its subshell).
case_tmp() { tmp=$tmp/$1; mkdir -p "$tmp"; }
# hold PORT [silent]: a program on PORT that listens (silent: accepts one
# connection and never answers) for 60 s; its pid in $holder. Returns once
# it listens (at most 10 s).
hold() {
  local ready=$tmp/held.$1
  python3 -c 'import socket,sys,time
s=socket.socket(); s.bind(("127.0.0.1",int(sys.argv[1]))); s.listen(); open(sys.argv[2],"w").close()
if sys.argv[3] == "silent": c=s.accept()
time.sleep(60)' "$1" "$ready" "${2:-listen}" &
  holder=$!
  for _ in $(seq 200); do [ -e "$ready" ] && return; sleep 0.05; done
}

rendezvous_timeout() {
  case_tmp rendezvous_timeout
  local port
  port=$(free_port)
  expect_error "rendezvous timeout names the rank that did not arrive" 1 \
    type=TimeoutError rank=0 world=2 operation=rendezvous peers=1 \
    -- env RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" DDP_RENDEZVOUS_TIMEOUT_S=2 "$fault"
}
# (1.13's client gives up at once on a refused connection; 2.x's retries,
# and the rendezvous's own bound may end it first: either names the store.)
unreachable_master() {
  case_tmp unreachable_master
  local port
  port=$(free_port)  # nothing listens there
  expect_error "unreachable master" 1 is=CommunicationError rank=1 world=2 operation=rendezvous "shows=127.0.0.1:$port" \
    shows=MASTER_ADDR shows=MASTER_PORT \
    -- env RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" DDP_RENDEZVOUS_TIMEOUT_S=2 "$fault"
}
port_in_use() {
  case_tmp port_in_use
  local port holder
  port=$(free_port)
  hold "$port"
  expect_error "port in use" 1 type=CommunicationError rank=0 world=1 "shows=127.0.0.1:$port" shows=MASTER_PORT \
    -- env RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" "$fault"
  kill $holder 2>/dev/null
}
# A MASTER_PORT held by a program that accepts and never answers, and a
# MASTER_ADDR that does not resolve: the true cause, within seconds. The
# store's handshake has 5 s (or what is left of a shorter rendezvous
# timeout), whatever the rendezvous timeout (60 s here).
silent_port() {
  local timeout_s=$1 port holder start
  case_tmp "silent_port_$timeout_s"
  port=$(free_port)
  hold "$port" silent
  start=$SECONDS
  expect_error "a port that accepts and never answers (rendezvous timeout $timeout_s s)" 1 \
    type=CommunicationError rank=1 world=2 "shows=127.0.0.1:$port" shows=MASTER_PORT \
    -- env RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" DDP_RENDEZVOUS_TIMEOUT_S=$timeout_s "$fault"
  [ $((SECONDS - start)) -le 10 ] && ok "... within 10 s" || not_ok_run "silent port took $((SECONDS - start)) s"
  kill $holder 2>/dev/null
}

# A rank killed with SIGKILL mid-allreduce: the others fail, naming it (among
# the error's peers). Gloo names peers from its connections (shm_test.sh
# covers shm's own naming).
kill_mid_collective() {
  case_tmp kill_mid_collective
  export DDP_BACKEND=gloo
  local port start elapsed r
  port=$(free_port)
  start=$(date +%s)
  for r in 1 2; do
    ( env RANK=$r WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$fault" --victim 1 --after 3 --timeout-s 20 >"$tmp/fault$r" 2>&1 & )
  done
  expect_error "kill -9 mid-collective: rank 0 names rank 1" 3 \
    type=CommunicationError rank=0 world=3 backend=gloo peers~1 \
    -- env RANK=0 WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$fault" --victim 1 --after 3 --timeout-s 20
  for _ in $(seq 50); do grep -q "ddp error facts" "$tmp/fault2" 2>/dev/null && break; sleep 0.2; done
  if ddp_error "$tmp/fault2" type=CommunicationError rank=2 world=3 backend=gloo peers~1; then
    ok "kill -9 mid-collective: rank 2 names rank 1"
  else
    fail "kill -9 mid-collective: rank 2 names rank 1"; cat "$tmp/fault2"
  fi
  elapsed=$(( $(date +%s) - start ))
  if [ "$elapsed" -lt 20 ]; then ok "survivors failed within the timeout (${elapsed}s < 20s)"; else
    fail "survivors took ${elapsed}s"; fi
}
# Rank 0, the store's host, stopped (SIGSTOP) rather than dead: the others
# fail after DDP_TIMEOUT (overriding the program's 600 s), name the
# unresponsive store host, and exit promptly (a store call without deadline
# used to block their failure handling and teardown forever). "Timed out" is
# Gloo's; rank 0 is named in the message, not among the error's peers (Gloo's
# timeout cites no connection).
stopped_rank0() {
  case_tmp stopped_rank0
  export DDP_BACKEND=gloo
  local port stopped start
  port=$(free_port)
  env RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$fault" --victim 0 --after 3 --timeout-s 600 --fault stop >"$tmp/stopped0" 2>&1 &
  stopped=$!
  start=$SECONDS
  expect_error "SIGSTOP of rank 0: rank 1 names it and exits" 3 \
    type=TimeoutError rank=1 world=2 backend=gloo "shows=Timed out" "shows=rank 0" \
    -- env RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port DDP_TIMEOUT=3 "$fault" --victim 0 --after 3 --timeout-s 600 --fault stop
  [ $((SECONDS - start)) -le 25 ] && ok "... within 25 s ($((SECONDS - start)) s)" || not_ok_run "stopped rank 0: rank 1 took $((SECONDS - start)) s"
  { kill -KILL $stopped && wait $stopped; } 2>/dev/null
}
# Rank 1 of 3 stopped: the others name it as the rank that does not respond
# (rank 2 times out, or first loses rank 0, which timed out before it).
stopped_rank1() {
  case_tmp stopped_rank1
  export DDP_BACKEND=gloo
  local port start r p
  port=$(free_port)
  for r in 0 1; do
    env RANK=$r WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port DDP_TIMEOUT=3 "$fault" --victim 1 --after 3 --timeout-s 600 --fault stop >"$tmp/stop$r" 2>&1 &
  done
  start=$SECONDS
  expect_error "SIGSTOP of rank 1: rank 2 names it" 3 is=CommunicationError rank=2 world=3 backend=gloo peers~1 \
    -- env RANK=2 WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port DDP_TIMEOUT=3 "$fault" --victim 1 --after 3 --timeout-s 600 --fault stop
  [ $((SECONDS - start)) -le 25 ] && ok "... within 25 s ($((SECONDS - start)) s)" || not_ok_run "stopped rank 1: rank 2 took $((SECONDS - start)) s"
  for p in $(jobs -p); do { kill -KILL $p && wait $p; } 2>/dev/null; done
}
# A rank that finished normally is not said to have been killed.
returned_from_main() {
  case_tmp returned_from_main
  export DDP_BACKEND=gloo
  local port
  port=$(free_port)
  env RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$fault" --victim 1 --after 3 --timeout-s 20 --fault exit >"$tmp/exit1" 2>&1 &
  expect_error "a rank that returned from main: named" 3 type=CommunicationError rank=0 world=2 backend=gloo peers=1 \
    -- env RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$fault" --victim 1 --after 3 --timeout-s 20 --fault exit
  if grep -q "killed" "$tmp/out" "$tmp/err"; then not_ok_run "a rank that returned from main was said to be killed"; else ok "... and not said to be killed"; fi
}
ddprun_names_killed() {
  case_tmp ddprun_names_killed
  export DDP_BACKEND=gloo
  expect "ddprun names the killed rank and exits 137" 137 "ddprun: rank 1 \(pid [0-9]+\) was killed by signal 9" \
    -- "$ddprun" --nproc-per-node 3 "$fault" --victim 1 --after 3 --timeout-s 20
}

# Unresolvable: quick, one at a time before the rest.
for r in 0 1; do
  start=$SECONDS
  expect_error "rank $r: MASTER_ADDR that does not resolve" 1 type=CommunicationError rank=$r world=2 \
    "shows=MASTER_ADDR='no-such-host.invalid'" \
    -- env RANK=$r WORLD_SIZE=2 MASTER_ADDR=no-such-host.invalid MASTER_PORT="$(free_port)" DDP_RENDEZVOUS_TIMEOUT_S=3 "$fault"
  [ $((SECONDS - start)) -le 10 ] && ok "... within 10 s" || not_ok_run "unresolvable took $((SECONDS - start)) s"
done

# The longest first; 4 at a time, their starts 1 s apart.
concurrent_start "$tmp" 4 200 1
concurrently "SIGSTOP of rank 0" stopped_rank0
concurrently "SIGSTOP of rank 1" stopped_rank1
concurrently "silent port, 60 s" silent_port 60
concurrently "kill -9 mid-collective" kill_mid_collective
concurrently "silent port, 3 s" silent_port 3
concurrently "returned from main" returned_from_main
concurrently "rendezvous timeout" rendezvous_timeout
concurrently "unreachable master" unreachable_master
concurrently "port in use" port_in_use
concurrently "ddprun, a rank killed" ddprun_names_killed
concurrent_wait

finish
