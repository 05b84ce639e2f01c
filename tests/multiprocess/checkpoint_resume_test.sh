#!/usr/bin/env bash
# Lose no work: examples/train with --checkpoint-every under
# `ddprun --max-restarts 1`, one rank killed with SIGKILL at a random step;
# the job must restart, resume from its snapshot and end with parameters
# bit-identical (float64, with dropout: every rank's RNG stream matters) to
# those of an uninterrupted run without snapshots.
# Usage: checkpoint_resume_test.sh BUILD_DIR
# Reproduce a run: KILL_STEPS="57 23" (one step per killed run; rank 0's run
# first). Prints "ok"/"not ok" per check; exits non-zero if any failed.
set -euo pipefail

if [[ $# -ne 1 || ! -x "$1/tools/ddprun/ddprun" || ! -x "$1/examples/train" ]]; then
  echo "usage: $0 BUILD_DIR (with tools/ddprun/ddprun and examples/train built)" >&2
  exit 2
fi
DDPRUN=$1/tools/ddprun/ddprun
TRAIN=$1/examples/train
WORK=$(mktemp -d "${TMPDIR:-/tmp}/ddp-resume-test.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
. "$(dirname "$0")/../support/tap.sh"
LIMIT=90  # seconds any one job may take before the test kills it

# 2 epochs of 64 steps on 2 ranks; 2 ranks so that the sums are exact in
# any bucket layout.
JOB=(--data synthetic --float64 --train-size 4096 --epochs 2 --batch-size 32 --dropout 0.1 --log-every 1
     --timeout 20)
STEPS=128
EVERY=10

final_hash() { sed -n 's/^\[rank 0\] final: parameters fnv1a64 \([0-9a-f]*\)$/\1/p' "$1"; }
step_lines() { grep -cE '^\[rank 0\] epoch [0-9]+/2 step' "$1" || true; }

# The uninterrupted run: no snapshots at all.
RC=0
(cd "$WORK" && timeout -s KILL "$LIMIT" "$DDPRUN" --nproc-per-node 2 "$TRAIN" "${JOB[@]}" \
   --checkpoint "$WORK/reference.pt" >"$WORK/reference.out" 2>&1 </dev/null) || RC=$?
REFERENCE=$(final_hash "$WORK/reference.out")
if [[ $RC -ne 0 || -z $REFERENCE ]]; then
  fail "uninterrupted run" "exit $RC, output: $(tail -5 "$WORK/reference.out" | tr '\n' '|')"
  exit 1
fi
pass "uninterrupted run: parameters fnv1a64 $REFERENCE"

# Kills rank $1 at step $2 (at the earliest: when rank 0 printed it) of a
# restartable run, then checks the outcome.
killed_run() {
  local victim=$1 step=$2 name="rank $1 killed by SIGKILL (once rank 0 printed step $2)"
  local out=$WORK/killed$1.out snapshot=$WORK/snapshot$1.ckpt
  (cd "$WORK" && exec timeout -s KILL "$LIMIT" "$DDPRUN" --nproc-per-node 2 --max-restarts 1 \
     "$TRAIN" "${JOB[@]}" --checkpoint-every "$EVERY" --snapshot "$snapshot" \
     --checkpoint "$WORK/killed$1.pt" >"$out" 2>&1 </dev/null) &
  local job=$! i pid="" launcher=""
  for ((i = 0; i < 3000; i++)); do  # 60 s at most
    if [[ $(step_lines "$out") -ge $step ]]; then break; fi
    sleep 0.02
  done
  # timeout's child is ddprun, whose children are the ranks.
  launcher=$(pgrep -P "$job" | head -1 || true)
  for child in $(pgrep -P "${launcher:-0}" || true); do
    if tr '\0' '\n' <"/proc/$child/environ" 2>/dev/null | grep -qx "RANK=$victim"; then
      pid=$child
    fi
  done
  if [[ -z $pid ]]; then
    wait "$job" || true
    fail "$name" "no rank $victim to kill: the job ended first (or never started)" \
      "output: $(tail -5 "$out" | tr '\n' '|')"
    return
  fi
  kill -KILL "$pid"
  # Every snapshot comes after rank 0 printed its step, and a restart takes
  # far longer than this count: the snapshot resumed from is at most here.
  local killed_at
  killed_at=$(step_lines "$out")
  local rc=0
  wait "$job" || rc=$?
  local resumed hash
  resumed=$(sed -n 's/^\[rank 0\] train: resumed from .* step \([0-9]*\) .*/\1/p' "$out")
  hash=$(final_hash "$out")
  if [[ $rc -ne 0 ]]; then
    fail "$name: the job completes" "ddprun exit $rc" "output: $(tail -8 "$out" | tr '\n' '|')"
  elif ! grep -q "restarting every rank (restart 1 of 1) after: rank $victim" "$out"; then
    fail "$name: ddprun restarts the job" "no restart after rank $victim's death in the output"
  elif [[ -z $resumed || $resumed -le 0 || $((resumed % EVERY)) -ne 0 ||
          $resumed -gt $killed_at ]]; then
    fail "$name: the restarted job resumes from the last snapshot" \
      "resumed at step '${resumed}'; rank 0 had printed $killed_at steps at the kill;" \
      "snapshots every $EVERY steps"
  elif [[ $hash != "$REFERENCE" ]]; then
    fail "$name: parameters equal the uninterrupted run's" \
      "fnv1a64 $hash here, $REFERENCE uninterrupted (resumed at step $resumed)"
  elif compgen -G "$snapshot.tmp" >/dev/null; then
    fail "$name: no temporary snapshot left" "$(ls -l "$snapshot"*)"
  else
    pass "$name at step $killed_at of $STEPS: restarted, resumed at step $resumed, parameters bit-identical to the uninterrupted run's"
  fi
}

# Kill after the first snapshot, early enough that the job is still running.
read -r -a steps <<<"${KILL_STEPS:-$((EVERY + 2 + RANDOM % 70)) $((EVERY + 2 + RANDOM % 70))}"
echo "# kill steps: ${steps[*]} (rerun with KILL_STEPS=\"${steps[*]}\")"
killed_run 0 "${steps[0]}"
killed_run 1 "${steps[1]}"

finish
