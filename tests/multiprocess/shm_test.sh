#!/usr/bin/env bash
# The shm backend in real processes: every collective through ddprun for
# world sizes 1-8, then the faults (an exception on one rank, kill -9 and
# SIGSTOP of a rank mid-collective, ddprun stopped with SIGTERM), each with
# its time bound, and /dev/shm left without a segment of the job after each.
# The faults and the two hosts mostly wait: they run side by side
# (concurrent.sh), and /dev/shm is checked once all of them have ended.
#   shm_test.sh BUILD_DIR
set -uo pipefail
export DDP_BACKEND=shm
build=$1
ddprun=$build/tools/ddprun/ddprun
job=$build/tests/multiprocess/shm_job
tmp=$(mktemp -d)
pids=()
trap 'kill -KILL "${pids[@]}" 2>/dev/null; rm -rf "$tmp"' EXIT
. "$(dirname "$0")/../support/tap.sh"
. "$(dirname "$0")/../support/concurrent.sh"

# Segments of this machine; "clean" passes when none appeared since the start.
segments() { ls /dev/shm 2>/dev/null | grep '^ddp-shm-' | sort; }
segments >"$tmp/before"
clean() {
  local extra
  extra=$(segments | comm -13 "$tmp/before" - | tr '\n' ' ')
  if [ -n "$extra" ]; then not_ok "$1: /dev/shm keeps $extra"; else ok "$1: /dev/shm clean"; fi
}

# Until process $1 is gone, at most $2 seconds; its status in $status (255: still running).
wait_bounded() {
  local pid=$1 limit=$(( $2 * 10 )) i
  for (( i = 0; i < limit; i++ )); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then status=255; return; fi
  wait "$pid"; status=$?
}

# --- every collective, world sizes 1-8, through ddprun
for n in 1 2 3 4 5 6 7 8; do
  timeout -s KILL 120 "$ddprun" --nproc-per-node "$n" "$job" >"$tmp/out" 2>&1
  got=$?
  if [ "$got" -eq 0 ] && grep -q "rank $((n - 1)) of $n \[shm\]: every collective correct" "$tmp/out"; then
    ok "ddprun, $n rank(s): every collective correct"
  else
    not_ok "ddprun, $n rank(s) (exit $got)"; head -20 "$tmp/out"
  fi
done
clean "after normal exits"

# --- faults: each rank its own process (a launcher would stop the survivors
# itself). fault N FAULT VICTIM TIMEOUT_S BOUND_S TYPE: every survivor must
# exit 3 with a CommunicationError about the victim (among its peers, with
# the rank that found it where that was another) showing the victim's pid,
# after waiting at most BOUND_S seconds in the collective that failed (as it
# reports); the rank that found the fault raises a TYPE about the victim
# alone.
fault() {
  local n=$1 kind=$2 victim=$3 t=$4 bound=$5 type=$6 port r waited d=$tmp/$2.$1.$3
  mkdir -p "$d"
  port=$(free_port)
  local -a ranks=()
  for (( r = 0; r < n; r++ )); do
    env RANK=$r WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" \
      "$job" --fault "$kind" --victim "$victim" --timeout-s "$t" >"$d/rank$r" 2>&1 &
    ranks+=($!); pids+=($!)
  done
  for (( r = 0; r < n; r++ )); do
    [ "$r" -eq "$victim" ] && continue
    wait_bounded "${ranks[$r]}" $(( bound + 30 ))
    waited=$(sed -n 's/.*failed after \([0-9]*\) ms of waiting.*/\1/p' "$d/rank$r")
    if [ "$status" -ne 3 ]; then
      not_ok "$kind: survivor rank $r exited $status, expected 3"; cat "$d/rank$r"
    elif ! ddp_error "$d/rank$r" is=CommunicationError "rank=$r" "world=$n" backend=shm "peers~$victim" \
           "shows=(pid ${ranks[$victim]})"; then
      not_ok "$kind: survivor rank $r: no CommunicationError about rank $victim (pid ${ranks[$victim]})"
      cat "$d/rank$r"
    elif [ -z "$waited" ] || [ "$waited" -gt $(( bound * 1000 )) ]; then
      not_ok "$kind: survivor rank $r waited '${waited}' ms (bound ${bound} s)"
    else
      ok "$kind: survivor rank $r failed after waiting ${waited} ms, naming rank $victim"
    fi
  done
  local found=""
  for (( r = 0; r < n; r++ )); do
    [ "$r" -ne "$victim" ] && [ -n "$(ddp_error_facts "$d/rank$r" "type=$type" "peers=$victim")" ] && found=$r
  done
  if [ -n "$found" ]; then ok "$kind: survivor rank $found found it: a $type about rank $victim"; else
    not_ok "$kind: no survivor raised a $type about rank $victim alone"; cat "$d"/rank*; fi
  kill -KILL "${ranks[$victim]}" 2>/dev/null  # the stopped one
  wait_bounded "${ranks[$victim]}" 10
}

# --- ranks on two hosts (DDP_HOST_ID splits them): every rank refuses, about
# the rank on the other host, naming both hosts.
two_hosts() {
  local port other first r got
  port=$(free_port)
  env RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" DDP_HOST_ID=b "$job" >"$tmp/host1" 2>&1 &
  other=$!; pids+=($other)
  env RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" DDP_HOST_ID=a \
    timeout -s KILL 60 "$job" >"$tmp/host0" 2>&1
  first=$?
  wait_bounded "$other" 30
  for r in 0 1; do
    got=$([ "$r" -eq 0 ] && echo "$first" || echo "$status")
    if [ "$got" -eq 1 ] && ddp_error "$tmp/host$r" type=InvalidArgument "rank=$r" world=2 "peers=$((1 - r))" \
         shows=id:a shows=id:b; then
      ok "two hosts: rank $r refuses, naming both"
    else
      not_ok "two hosts: rank $r (exit $got)"; cat "$tmp/host$r"
    fi
  done
}

# Side by side, the longest first (each case's files in a folder of its own).
concurrent_start "$tmp" 5 120 1
# A stopped rank is alive: the others fail at the timeout (3 s), naming it
# (the one that found it with a TimeoutError).
concurrently stop fault 3 stop 2 3 5 TimeoutError
# The thrower closes its group, then exits: a survivor may see either first.
concurrently throw fault 3 throw 1 20 3 CommunicationError
concurrently "kill, 3 ranks" fault 3 kill 1 20 3 CommunicationError
concurrently "kill, 2 ranks" fault 2 kill 0 20 3 CommunicationError
concurrently "two hosts" two_hosts
concurrent_wait
# Every rank of them has ended (the victims killed): no segment of theirs left.
clean "after the faults and the two hosts"

# --- ddprun stopped with SIGTERM mid-job: it forwards the signal, every rank
# ends, nothing is left. Mid-job: once its 3 ranks have mapped the job's
# segment and its name is gone (shm's set-up done, they are in collectives).
"$ddprun" --nproc-per-node 3 --grace-period-s 5 "$job" --fault loop >"$tmp/out" 2>&1 &
launcher=$!; pids+=($launcher)
for (( i = 0; i < 300; i++ )); do
  running=0
  for p in $(pgrep -P "$launcher"); do
    grep -q 'ddp-shm-.* (deleted)$' "/proc/$p/maps" 2>/dev/null && running=$((running + 1))
  done
  [ "$running" -eq 3 ] && break
  sleep 0.1
done
[ "$running" -eq 3 ] || echo "# ddprun's 3 ranks not all in the job after 30 s; stopping it anyway"
sleep 0.5
kill -TERM "$launcher"
wait_bounded "$launcher" 20
if [ "$status" -eq 143 ]; then ok "ddprun stopped by SIGTERM exits 143"; else
  not_ok "ddprun stopped by SIGTERM exited $status, expected 143"; head -20 "$tmp/out"; fi
clean "ddprun SIGTERM"

[ "$failed" -eq 0 ] && echo "all checks passed"
exit $failed
