#!/usr/bin/env bash
# Tests of the ddprun launcher, with small `sh -c` programs as ranks.
# Usage: launcher_test.sh PATH/TO/ddprun
# Prints "ok - NAME" or "not ok - NAME" (with what was seen) per check and
# exits non-zero if any check failed. Every wait is bounded by `timeout`.
set -euo pipefail

if [[ $# -ne 1 || ! -x "$1" ]]; then
  echo "usage: $0 PATH/TO/ddprun" >&2
  exit 2
fi
DDPRUN=$1
WORK=$(mktemp -d "${TMPDIR:-/tmp}/ddprun-test.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
OUT=$WORK/out
ERR=$WORK/err
LIMIT=30  # seconds any single ddprun run may take before the test kills it

. "$(dirname "$0")/../support/tap.sh"
# A failed check shows the last ddprun run: its exit status and output.
fail_check() {
  fail "$@" "exit status: ${RC:-?}" \
    "stdout: $(head -c 2000 "$OUT" 2>/dev/null | sed 's/^/|/' | tr '\n' ' ')" \
    "stderr: $(head -c 2000 "$ERR" 2>/dev/null | sed 's/^/|/' | tr '\n' ' ')"
}

# Runs ddprun with the given arguments, stdout/stderr to $OUT/$ERR, status in
# $RC, wall time in whole seconds in $ELAPSED.
run_ddprun() {
  local start=$SECONDS
  RC=0
  timeout --foreground -s KILL "$LIMIT" "$DDPRUN" "$@" >"$OUT" 2>"$ERR" </dev/null || RC=$?
  ELAPSED=$((SECONDS - start))
}

# Starts ddprun in the background (pid of its `timeout` wrapper in $BG_PID;
# with --foreground, timeout forwards the signals it gets to ddprun only).
start_ddprun() {
  BG_START=$SECONDS
  # Emptied here, not by the background job's redirection (which may come
  # late under load): wait_for_lines must not see the previous run's lines.
  : >"$OUT"
  : >"$ERR"
  timeout --foreground -s KILL "$LIMIT" "$DDPRUN" "$@" >>"$OUT" 2>>"$ERR" </dev/null &
  BG_PID=$!
}

# Waits for the background ddprun; status in $RC, wall time in $ELAPSED.
wait_ddprun() {
  RC=0
  wait "$BG_PID" || RC=$?
  ELAPSED=$((SECONDS - BG_START))
}

# Waits (at most 10 s) until FILE has at least COUNT lines containing TEXT.
wait_for_lines() {
  local file=$1 text=$2 count=$3 i
  for ((i = 0; i < 100; i++)); do
    if [[ $(grep -cF -- "$text" "$file" || true) -ge $count ]]; then return 0; fi
    sleep 0.1
  done
  return 1
}

has() { grep -qF -- "$2" "$1"; }

# ---------------------------------------------------------------- 1. env
run_ddprun --nproc-per-node 2 sh -c \
  'echo "$RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR $MASTER_PORT"'
port0=$(sed -n 's/^\[rank 0\] 0 2 0 2 127\.0\.0\.1 \([0-9][0-9]*\)$/\1/p' "$OUT")
port1=$(sed -n 's/^\[rank 1\] 1 2 1 2 127\.0\.0\.1 \([0-9][0-9]*\)$/\1/p' "$OUT")
if [[ $RC -eq 0 && $(wc -l <"$OUT") -eq 2 && -n $port0 && $port0 == "$port1" && $port0 -gt 0 ]]; then
  pass "two ranks get RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT"
else
  fail_check "two ranks get RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT" \
    "expected '[rank R] R 2 R 2 127.0.0.1 PORT' for R = 0, 1 with one PORT > 0, exit 0"
fi

# ---------------------------------------------------------- 2. multi-node
run_ddprun --nnodes 2 --node-rank 1 --master-addr 127.0.0.1 --master-port 29999 \
  --nproc-per-node 2 sh -c \
  'echo "$RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $NODE_RANK $GROUP_RANK $MASTER_ADDR $MASTER_PORT"'
expected=$'[rank 2] 2 4 0 2 1 1 127.0.0.1 29999\n[rank 3] 3 4 1 2 1 1 127.0.0.1 29999'
if [[ $RC -eq 0 && $(sort "$OUT") == "$expected" ]]; then
  pass "node rank 1 of 2 gets RANK 2 and 3, WORLD_SIZE 4"
else
  fail_check "node rank 1 of 2 gets RANK 2 and 3, WORLD_SIZE 4" "expected: $expected"
fi

# ----------------------------------------------------- --flag=value forms
run_ddprun --nproc-per-node=2 --master-port=29876 --master-addr=localhost -- sh -c \
  'echo "$MASTER_ADDR:$MASTER_PORT"'
if [[ $RC -eq 0 && $(sort "$OUT") == $'[rank 0] localhost:29876\n[rank 1] localhost:29876' ]]; then
  pass "--flag=value forms"
else
  fail_check "--flag=value forms" "expected two lines 'localhost:29876'"
fi

# --------------------------------------------------------- 3. rank fails
# check_rank1_failure NAME STATUS TEXT COMMAND: rank 1 runs COMMAND (which
# ends it) while rank 0 sleeps; ddprun stops rank 0 and exits STATUS within
# 8 s, its stderr naming rank 1 and TEXT.
check_rank1_failure() {
  local name=$1 status=$2 text=$3 command=$4
  run_ddprun --nproc-per-node 2 sh -c "if [ \"\$RANK\" = 1 ]; then $command; fi; sleep 60"
  if [[ $RC -eq $status && $ELAPSED -le 8 ]] && has "$ERR" "rank 1 (pid" && has "$ERR" "$text"; then
    pass "$name (${ELAPSED}s)"
  else
    fail_check "$name" \
      "expected exit $status within 8 s (took ${ELAPSED}s), stderr naming rank 1 and '$text'"
  fi
}
check_rank1_failure "rank 1 exits 3: ddprun stops rank 0 and exits 3" 3 "exited with status 3" 'exit 3'

# ------------------------------------------ the first failure decides
run_ddprun --nproc-per-node 2 sh -c \
  'if [ "$RANK" = 0 ]; then sleep 0.3; exit 5; fi; trap "exit 7" TERM; while :; do sleep 0.1; done'
if [[ $RC -eq 5 ]] && has "$ERR" "rank 0 (pid" && ! has "$ERR" "status 7"; then
  pass "the first failing rank decides the exit status"
else
  fail_check "the first failing rank decides the exit status" "expected exit 5 (rank 1 exits 7 only when stopped)"
fi

# ------------------------------------------------------ 4. rank killed
check_rank1_failure "rank 1 killed by signal 9: ddprun exits 137" 137 "signal 9" 'kill -9 $$'

# ------------------------------------------------- 5. SIGTERM forwarding
# Sends SIGTERM to the background ddprun once both ranks printed "ready"
# (SIGKILL if they never do), then waits for it.
terminate_when_ready() {
  if wait_for_lines "$OUT" "ready" 2; then
    kill -TERM "$BG_PID"
  else
    kill -KILL "$BG_PID" 2>/dev/null || true
  fi
  wait_ddprun
}
start_ddprun --nproc-per-node 2 sh -c \
  'trap "echo got TERM; exit 0" TERM; echo ready; while :; do sleep 0.1; done'
terminate_when_ready
if [[ $RC -eq 143 ]] && has "$OUT" "[rank 0] got TERM" && has "$OUT" "[rank 1] got TERM"; then
  pass "SIGTERM is forwarded to every rank and ddprun exits 143"
else
  fail_check "SIGTERM is forwarded to every rank and ddprun exits 143" \
    "expected exit 143 and '[rank R] got TERM' for R = 0, 1"
fi

start_ddprun --nproc-per-node 2 --grace-period-s 1 sh -c \
  'if [ "$RANK" = 1 ]; then trap "" TERM; else trap "exit 0" TERM; fi; echo ready; while :; do sleep 0.1; done'
terminate_when_ready
if [[ $RC -eq 143 && $ELAPSED -le 8 ]] && has "$ERR" "rank 1 (pid" && has "$ERR" "SIGKILL"; then
  pass "a rank ignoring SIGTERM is SIGKILLed after --grace-period-s 1 (${ELAPSED}s)"
else
  fail_check "a rank ignoring SIGTERM is SIGKILLed after --grace-period-s 1" \
    "expected exit 143 within 8 s and stderr naming rank 1 and SIGKILL"
fi

# ------------------------------------------------------ 6. output handling
run_ddprun --nproc-per-node 2 --no-prefix sh -c 'echo "hello $RANK"'
if [[ $RC -eq 0 && $(sort "$OUT") == $'hello 0\nhello 1' ]]; then
  pass "--no-prefix leaves output unprefixed"
else
  fail_check "--no-prefix leaves output unprefixed" "expected lines 'hello 0' and 'hello 1'"
fi

run_ddprun --nproc-per-node 2 sh -c 'printf "partial-%s" "$RANK"'
if [[ $RC -eq 0 && $(sort "$OUT") == $'[rank 0] partial-0\n[rank 1] partial-1' ]]; then
  pass "a final line without newline is printed with the prefix"
else
  fail_check "a final line without newline is printed with the prefix" \
    "expected lines '[rank 0] partial-0' and '[rank 1] partial-1'"
fi

run_ddprun --nproc-per-node 2 sh -c 'echo "to-stderr $RANK" >&2'
if [[ $RC -eq 0 && ! -s $OUT && $(sort "$ERR") == $'[rank 0] to-stderr 0\n[rank 1] to-stderr 1' ]]; then
  pass "stderr lines go to stderr, prefixed"
else
  fail_check "stderr lines go to stderr, prefixed" "expected only stderr, '[rank R] to-stderr R'"
fi

# awk writes in large blocks that split lines at arbitrary points.
run_ddprun --nproc-per-node 4 sh -c \
  'exec awk -v r="$RANK" '\''BEGIN { s = sprintf("%0300d", 0); for (i = 0; i < 3000; i++) print r "-" s "-end" }'\'
good=$(grep -cE '^\[rank ([0-3])\] \1-0{300}-end$' "$OUT" || true)
if [[ $RC -eq 0 && $good -eq 12000 && $(wc -l <"$OUT") -eq 12000 ]]; then
  pass "lines of 4 busy ranks are never mixed mid-line"
else
  fail_check "lines of 4 busy ranks are never mixed mid-line" "expected 12000 intact lines, got $good"
fi

# ------------------------------------------------------- 7. bad arguments
check_usage_error() {
  local name=$1 needle=$2
  shift 2
  run_ddprun "$@"
  if [[ $RC -eq 2 && $(wc -l <"$ERR") -eq 1 ]] && has "$ERR" "$needle" && has "$ERR" "see ddprun --help"; then
    pass "$name"
  else
    fail_check "$name" "expected exit 2 and one stderr line naming '$needle' and 'see ddprun --help'"
  fi
}
check_usage_error "missing program" "program" --nproc-per-node 2
check_usage_error "--nproc-per-node 0" "--nproc-per-node" --nproc-per-node 0 true
check_usage_error "--nproc-per-node x" "--nproc-per-node" --nproc-per-node x true
check_usage_error "missing --nproc-per-node" "--nproc-per-node" true
check_usage_error "--node-rank 2 --nnodes 2" "--node-rank" \
  --nproc-per-node 1 --node-rank 2 --nnodes 2 --master-addr 127.0.0.1 --master-port 29999 true
check_usage_error "--nnodes 2 without --master-addr/--master-port" "--master-addr" \
  --nproc-per-node 1 --nnodes 2 --node-rank 0 true
check_usage_error "--master-port 70000" "--master-port" --nproc-per-node 1 --master-port 70000 true
check_usage_error "--grace-period-s -1" "--grace-period-s" --nproc-per-node 1 --grace-period-s -1 true
check_usage_error "unknown flag" "--bogus" --nproc-per-node 1 --bogus 3 true
check_usage_error "flag value missing" "--nnodes" --nproc-per-node 1 --nnodes
check_usage_error "--elastic 3:2" "--elastic MIN:MAX" --nproc-per-node 1 --elastic 3:2 true
check_usage_error "--elastic 2" "--elastic MIN:MAX" --nproc-per-node 1 --elastic 2 true
check_usage_error "--join without --elastic" "--join requires" --nproc-per-node 1 --join true
check_usage_error "--elastic with --nnodes 2" "--elastic runs on one node" \
  --nproc-per-node 1 --elastic 1:2 --nnodes 2 --master-addr 127.0.0.1 --master-port 29999 true
check_usage_error "--elastic with --max-restarts" "do not go together" \
  --nproc-per-node 1 --elastic 1:2 --max-restarts 1 true
check_usage_error "--nnodes 3:2" "--nnodes M" --nproc-per-node 1 --nnodes 3:2 true
check_usage_error "--nnodes MIN:MAX with --elastic" "give one" \
  --nproc-per-node 1 --nnodes 1:2 --elastic 1:2 true

# torchrun's --nnodes MIN:MAX: elastic, world sizes in machines of N ranks.
run_ddprun --nproc-per-node 2 --nnodes 1:3 sh -c 'echo "$DDP_ELASTIC_MIN_WORLD_SIZE $DDP_ELASTIC_MAX_WORLD_SIZE"'
if [[ $RC -eq 0 ]] && [[ $(grep -c '\] 2 6$' "$OUT") -eq 2 ]]; then
  pass "--nnodes 1:3 with 2 ranks a machine: an elastic job of 2 to 6 ranks"
else
  fail_check "--nnodes 1:3 with 2 ranks a machine: an elastic job of 2 to 6 ranks" \
    "expected each rank to print '2 6'"
fi

run_ddprun --help
if [[ $RC -eq 0 ]] && has "$OUT" "--nproc-per-node" && has "$OUT" "--grace-period-s" &&
  has "$OUT" "--no-prefix" && has "$OUT" "LOCAL_WORLD_SIZE" && has "$OUT" "MASTER_PORT"; then
  pass "--help lists flags and environment"
else
  fail_check "--help lists flags and environment" "expected exit 0 and the usage text on stdout"
fi

run_ddprun --nproc-per-node 2 ddprun-test-no-such-program --flag
if [[ $RC -eq 127 && $ELAPSED -le 8 ]] && has "$ERR" "ddprun-test-no-such-program"; then
  pass "a program that does not exist: exit 127 naming it"
else
  fail_check "a program that does not exist: exit 127 naming it" \
    "expected exit 127 and stderr naming ddprun-test-no-such-program"
fi

# --max-restarts: a job that fails once is stopped and started again on a
# fresh port with the restart count in the environment; one that keeps
# failing gives up after K restarts naming the last failure.
has_re() { grep -qE -- "$2" "$1"; }
run_ddprun --nproc-per-node 2 --max-restarts 1 sh -c \
  'echo "attempt $DDP_RESTART_COUNT $TORCHELASTIC_RESTART_COUNT port $MASTER_PORT"; if [ "$DDP_RESTART_COUNT" = 0 ] && [ "$RANK" = 1 ]; then exit 3; fi'
ports=$(grep -o "port [0-9]*" "$OUT" | sort -u | wc -l)
if [[ $RC -eq 0 ]] && has "$OUT" "[rank 1] attempt 1 1" && [[ $ports -eq 2 ]] &&
   has_re "$ERR" "restarting every rank \(restart 1 of 1\) after: rank 1 \(pid [0-9]+\) exited with status 3"; then
  pass "--max-restarts 1: a rank fails once, the job restarts on a fresh port and completes"
else
  fail_check "--max-restarts 1: a rank fails once, the job restarts on a fresh port and completes" \
    "expected exit 0, attempt 1 on rank 1, two ports, and the restart named"
fi
run_ddprun --nproc-per-node 2 --max-restarts 2 sh -c 'if [ "$RANK" = 1 ]; then exit 4; fi; sleep 10'
if [[ $RC -eq 4 && $ELAPSED -le 20 ]] &&
   has_re "$ERR" "giving up after 2 restart\(s\); the last failure: rank 1 \(pid [0-9]+\) exited with status 4"; then
  pass "--max-restarts 2: a job that keeps failing gives up with the last failure's status"
else
  fail_check "--max-restarts 2: a job that keeps failing gives up with the last failure's status" \
    "expected exit 4 naming the last failure"
fi

echo
finish
