#!/usr/bin/env bash
# The job secret (DDP_JOB_SECRET, docs/security.md) in real processes: ranks
# prove it at the rendezvous; a wrong, missing or one-sided secret is a clear
# error on every rank within the rendezvous timeout; a foreign process that
# connects to the store mid-job is refused and the job is unharmed.
#   secret_test.sh BUILD_DIR CASE
# CASE: ddprun | wrong | missing | rank0_without | short | foreign
set -uo pipefail
case=$2
. "$(dirname "$0")/../support/scratch.sh" "$1"
demo=$build/examples/collectives
job=$build/tests/multiprocess/fault_rank
# The ranks still in the background stopped, then scratch.sh's.
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
# expect_exit NAME FILE STATUS PATTERN: the process logged to FILE exited
# STATUS (its last line is "exit N") and said PATTERN.
expect_exit() {
  local name=$1 file=$2 status=$3 pattern=$4
  if ! grep -qx "exit $status" "$file"; then not_ok "$name (got $(tail -1 "$file"), expected exit $status)" "$file"; return; fi
  if ! grep -q -E -- "$pattern" "$file"; then not_ok "$name (no '$pattern')" "$file"; return; fi
  ok "$name"
}
# expect_error NAME FILE STATUS CHECK...: the process logged to FILE exited
# STATUS with a ddp error passing every CHECK (tap.sh's ddp_error: the facts
# fault_rank prints after it, names and values it shows).
expect_error() {
  local name=$1 file=$2 status=$3
  shift 3
  if ! grep -qx "exit $status" "$file"; then not_ok "$name (got $(tail -1 "$file"), expected exit $status)" "$file"; return; fi
  if ! ddp_error "$file" "$@"; then not_ok "$name (no error with $*)" "$file"; return; fi
  ok "$name"
}
# The ranks whose admission fails are fault_rank (which prints its error's
# facts), as are the job's; its processes name themselves host:pid.
host=$(hostname)
port=$(free_port)
export MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=2 DDP_RENDEZVOUS_TIMEOUT_S=4
secret=0123456789abcdef0123456789abcdef
# rank R SECRET LOG PROGRAM...: one rank in the background ("-" for no secret).
rank() {
  local r=$1 s=$2 log=$3; shift 3
  (
    if [ "$s" = - ]; then unset DDP_JOB_SECRET; else export DDP_JOB_SECRET=$s; fi
    start=$(date +%s%N)
    RANK=$r timeout -s KILL 60 "$@" >"$log" 2>&1
    status=$?
    echo "took $(( ($(date +%s%N) - start) / 1000000 )) ms" >>"$log"
    echo "exit $status" >>"$log"
  ) &
}
# within LOG MS: the rank's error came within MS milliseconds.
within() {
  local ms; ms=$(sed -n 's/^took \([0-9]*\) ms$/\1/p' "$1")
  if [ "${ms:-999999}" -le "$2" ]; then ok "$3 within $2 ms ($ms ms)"; else not_ok "$3 took ${ms:-?} ms (limit $2)" "$1"; fi
}
# refused NAME CHECK...: rank 1 (r1.log) was refused, an InvalidArgument
# naming rank 0 and DDP_JOB_SECRET (and passing every CHECK), before the 4 s
# rendezvous timeout.
refused() {
  local name=$1
  shift
  expect_error "$name" "$tmp/r1.log" 1 type=InvalidArgument rank=1 peers=0 "$@" shows=DDP_JOB_SECRET
  within "$tmp/r1.log" 3500 "its error (before the 4 s timeout)"
}
# rank0_timed_out NAME: rank 0 (r0.log) timed out at the rendezvous naming
# rank 1, its own host and DDP_JOB_SECRET.
rank0_timed_out() {
  expect_error "$1" "$tmp/r0.log" 1 \
    type=TimeoutError rank=0 world=2 peers=1 "shows=$host:" shows=DDP_JOB_SECRET
}

case $case in
ddprun)
  # One ddprun, one fresh secret for all its ranks; the ranks meet with it.
  env -u DDP_JOB_SECRET "$ddprun" --nproc-per-node 2 sh -c 'echo "secret=$DDP_JOB_SECRET"' >"$tmp/a.log" 2>&1
  env -u DDP_JOB_SECRET "$ddprun" --nproc-per-node 2 sh -c 'echo "secret=$DDP_JOB_SECRET"' >"$tmp/b.log" 2>&1
  a=$(sed -n 's/.*secret=//p' "$tmp/a.log" | sort -u); b=$(sed -n 's/.*secret=//p' "$tmp/b.log" | sort -u)
  if [[ "$a" =~ ^[0-9a-f]{32}$ && "$b" =~ ^[0-9a-f]{32}$ && "$a" != "$b" ]]; then
    ok "ddprun gives every rank of a job one fresh 32-hex secret, another per job"
  else
    not_ok "ddprun's secrets: '$a' and '$b'"
  fi
  DDP_JOB_SECRET=$secret "$ddprun" --nproc-per-node 2 sh -c 'echo "secret=$DDP_JOB_SECRET"' >"$tmp/c.log" 2>&1
  if [ "$(sed -n 's/.*secret=//p' "$tmp/c.log" | sort -u)" = "$secret" ]; then
    ok "ddprun keeps the user's DDP_JOB_SECRET"
  else
    not_ok "ddprun replaced the user's secret" "$tmp/c.log"
  fi
  env -u DDP_JOB_SECRET "$ddprun" --nproc-per-node 2 "$demo" >"$tmp/d.log" 2>&1; echo "exit $?" >>"$tmp/d.log"
  expect_exit "ranks under ddprun are admitted and run" "$tmp/d.log" 0 "rank 1 of 2.*all correct"
  ;;
wrong)
  rank 0 "$secret" "$tmp/r0.log" "$job"
  rank 1 "${secret/0123/9999}" "$tmp/r1.log" "$job"
  wait
  refused "the rank with another secret is refused by rank 0" "shows=$host:"
  rank0_timed_out "rank 0 names the refused rank"
  within "$tmp/r0.log" 8000 "rank 0's error (rendezvous timeout 4 s, plus the process's start)"
  ;;
missing)
  rank 0 "$secret" "$tmp/r0.log" "$job"
  rank 1 - "$tmp/r1.log" "$job"
  wait
  refused "the rank without a secret says so"
  rank0_timed_out "rank 0 names it"
  within "$tmp/r0.log" 8000 "rank 0's error"
  ;;
rank0_without)
  rank 0 - "$tmp/r0.log" "$job"
  rank 1 "$secret" "$tmp/r1.log" "$job"
  wait
  refused "a rank with a secret refuses a rank 0 without"
  rank0_timed_out "rank 0 names it"
  ;;
short)
  rank 0 abc "$tmp/r0.log" "$job"
  wait
  # Before the rendezvous: no rank known yet; the length and the minimum.
  expect_error "a short secret is refused before the rendezvous" "$tmp/r0.log" 1 \
    type=InvalidArgument rank=-1 peers=none shows=DDP_JOB_SECRET "shows= 3 " "shows= 16 "
  if grep -q abc "$tmp/r0.log"; then not_ok "the error shows the secret" "$tmp/r0.log"; else ok "the error does not show the secret"; fi
  ;;
foreign)
  # A job of several seconds on gloo (its pairs meet through the store's
  # keys); while it runs, three strangers come to its store.
  export DDP_BACKEND=gloo
  # exited LOG: the process logged to LOG has ended.
  exited() { grep -q "^exit" "$1" 2>/dev/null; }
  py=${DDP_REFERENCE_PYTHON:-/usr/bin/python3}
  if "$py" -c "import torch.distributed" 2>/dev/null; then
    # A bare store client (PyTorch's own, imported before the job starts):
    # the rendezvous's key names without the job's prefix hold nothing, and
    # what it writes there touches nothing.
    ( "$py" - >"$tmp/bare.log" 2>&1 <<PY; echo "exit $?" >>"$tmp/bare.log" ) &
import datetime, os, time, torch.distributed as dist
print("ready", flush=True)
while not os.path.exists("$tmp/go"):
    time.sleep(0.05)
s = dist.TCPStore("127.0.0.1", $port, is_master=False, timeout=datetime.timedelta(seconds=10))
def present(key):
    # Without blocking, on 1.13 too (its binding has no check()): on a
    # missing key, compare_set with a non-empty expected value changes
    # nothing and returns that value.
    probe = b"ddp-test-probe"
    return s.compare_set(key, probe, b"unused") != probe
print("control: the public challenge key is", "found" if present("ddp/admission/challenge") else "missing")
for key in ["ddp/rendezvous/arrived/count", "generation1/group0/0", "ddp_groups_built/rank0"]:
    print("read" if present(key) else "hidden", key)
    s.set(key, "junk")
PY
    for _ in $(seq 600); do grep -q ready "$tmp/bare.log" && break; exited "$tmp/bare.log" && break; sleep 0.1; done
  fi
  rank 0 "$secret" "$tmp/r0.log" "$job" --victim 9 --iterations 800 --elements 262144
  rank 1 "$secret" "$tmp/r1.log" "$job" --victim 9 --iterations 800 --elements 262144
  sleep 1
  # The job's rank 1, which the twin below finds in the job.
  member=""
  for p in $(pgrep -x fault_rank); do
    env_of=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null)
    grep -qx "RANK=1" <<<"$env_of" && grep -qx "MASTER_PORT=$port" <<<"$env_of" && member=$p
  done
  rank 1 "${secret/0123/9999}" "$tmp/wrong.log" "$job"
  rank 1 "$secret" "$tmp/twin.log" "$job"
  until { exited "$tmp/wrong.log" && exited "$tmp/twin.log"; } || exited "$tmp/r0.log"; do sleep 0.1; done
  touch "$tmp/go"
  if [ -f "$tmp/bare.log" ]; then
    until exited "$tmp/bare.log" || exited "$tmp/r0.log"; do sleep 0.1; done
  fi
  if exited "$tmp/r0.log"; then
    not_ok "the job ended before the strangers were done (it is too short for this machine)" "$tmp/r0.log"
  else
    ok "the strangers came while the job ran"
  fi
  wait
  expect_error "a process with another secret is refused mid-job" "$tmp/wrong.log" 1 \
    type=InvalidArgument rank=1 peers=0 "shows=$host:" shows=DDP_JOB_SECRET
  # Naming the job's rank 1 by its host:pid.
  expect_error "a second process with the secret claiming rank 1 is refused" "$tmp/twin.log" 1 \
    type=InvalidArgument rank=1 peers=0 "shows=($host:${member:-none})"
  if [ -f "$tmp/bare.log" ]; then
    expect_exit "a bare store client sees the public key (the probe works)" "$tmp/bare.log" 0 "challenge key is found"
    expect_exit "a bare store client finds none of the job's keys" "$tmp/bare.log" 0 "hidden ddp/rendezvous/arrived/count"
    if grep -q "^read " "$tmp/bare.log"; then not_ok "the bare client read a job key" "$tmp/bare.log"; fi
  else
    echo "ok - a bare store client # SKIP $py cannot import torch.distributed"
  fi
  expect_exit "the job is unharmed (rank 0)" "$tmp/r0.log" 0 ""
  expect_exit "the job is unharmed (rank 1)" "$tmp/r1.log" 0 ""
  ;;
*)
  echo "unknown case $case" >&2
  exit 2
  ;;
esac
exit $failed
