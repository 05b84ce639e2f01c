#!/usr/bin/env bash
# A short chaos run: ddp-chaos injects a few dozen failures into the main
# job (examples/train --elastic) and checks it at the end (every member in
# each generation from the same step and state, no step that rank 0 reported
# done lost, the same final state on every member, every process ended,
# no process or /dev/shm segment left behind); the first case then makes the
# same events again from the log (--replay). Cases:
#   plain  shm, SGD: kills, stops, joins, kills as a generation forms
#   zero   gloo, ZeRO (elastic, a full copy every step): the same, and
#          joiners that die in the middle of their first ZeRO handover
# Usage: chaos_test.sh BUILD_DIR [CASE...]
set -uo pipefail

if [[ $# -lt 1 || ! -x "$1/tools/ddprun/ddp-chaos" || ! -x "$1/examples/train" ]]; then
  echo "usage: $0 BUILD_DIR [CASE...] (with ddp-chaos, ddp-store and examples/train built)" >&2
  exit 2
fi
BUILD=$(cd "$1" && pwd)
CHAOS=$BUILD/tools/ddprun/ddp-chaos
TRAIN=$BUILD/examples/train
shift
CASES=("$@")
WORK=$(mktemp -d "${TMPDIR:-/tmp}/ddp-chaos-test.XXXXXX")
# At exit, any process still working in $WORK (ddp-chaos stops its own; this
# is for a ddp-chaos that was killed), then $WORK.
leftovers() {
  local p
  for p in /proc/[0-9]*; do
    [[ $(readlink "$p/cwd" 2>/dev/null) == "$WORK"* ]] && kill -KILL "${p#/proc/}" 2>/dev/null
  done
}
trap 'leftovers; [[ -n ${KEEP:-} ]] || rm -rf "$WORK"' EXIT
. "$(dirname "$0")/../support/tap.sh"

wanted() { [[ ${#CASES[@]} -eq 0 || " ${CASES[*]} " == *" $1 "* ]]; }
# The events of a log (kind and process), without times: what --replay repeats.
events_of() {
  python3 -c '
import json, sys
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e["event"] in ("kill", "stop", "join", "formation-kill", "handover-kill"):
        print(e["event"], e.get("process"))' "$1"
}
# A summary's field ($2, a Python expression on s) of summary file $1.
field() { python3 -c 'import json, sys; s = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"; }

# chaos NAME BACKEND FAILURES KINDS [TRAIN FLAGS...]: a run, then (REPLAY=1)
# its replay.
chaos() {
  local name=$1 backend=$2 failures=$3 kinds=$4
  shift 4
  local job=("$TRAIN" --elastic --report-state --data synthetic --train-size 12000
             --log-every 5 "$@")
  local rc=0
  (cd "$WORK" && DDP_BACKEND=$backend DDP_TIMEOUT=1 timeout -k 60 200 "$CHAOS" --nproc 4 \
     --elastic 2:6 --failures "$failures" --kinds "$kinds" --every 0.1 --every-steps 10 \
     --seed 7 \
     --recovery-timeout 30 --timeout 120 --log "$name.log" --output "$name.out" \
     --summary "$name.json" -- "${job[@]}" >"$name.err" 2>&1) || rc=$?
  if [[ $rc -ne 0 ]]; then
    fail "$name: $failures failures ($kinds) on $backend" "exit $rc" \
         "$(grep 'ddp-chaos' "$WORK/$name.err" | tail -8)"
    return
  fi
  pass "$name: $failures failures on $backend, every check held: $(grep -m1 'recovery failures' \
        "$WORK/$name.err" | sed 's/.*recovery failures *//')"
  local kind
  for kind in ${kinds//,/ }; do
    [[ $(field "$WORK/$name.json" "s['events'].get('$kind', 0)") -gt 0 ]] &&
      pass "$name: at least one $kind" || fail "$name: no $kind was drawn" \
        "$(field "$WORK/$name.json" "s['events']")"
  done
  [[ ${REPLAY:-0} == 1 ]] || return
  rc=0
  (cd "$WORK" && DDP_BACKEND=$backend DDP_TIMEOUT=1 timeout -k 60 200 "$CHAOS" --nproc 4 \
     --elastic 2:6 --replay "$name.log" --recovery-timeout 30 --timeout 120 \
     --log "$name.replay.log" -- "${job[@]}" >"$name.replay.err" 2>&1) || rc=$?
  if [[ $rc -eq 0 ]] && diff <(events_of "$WORK/$name.log") \
       <(events_of "$WORK/$name.replay.log") >/dev/null; then
    pass "$name: the replay made the same events to the same processes, every check held"
  else
    fail "$name: replay" "exit $rc" "$(grep 'ddp-chaos' "$WORK/$name.replay.err" | tail -6)" \
         "$(diff <(events_of "$WORK/$name.log") <(events_of "$WORK/$name.replay.log") | head -4)"
  fi
}

if wanted plain; then
  REPLAY=1 chaos plain shm 16 kill,stop,join,formation-kill --epochs 45
fi
if wanted zero; then
  chaos zero gloo 12 kill,stop,join,formation-kill,handover-kill --epochs 30 --zero \
    --commit-every 1
fi
finish
