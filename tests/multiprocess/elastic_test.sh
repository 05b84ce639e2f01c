#!/usr/bin/env bash
# Elastic training in process: elastic_worker jobs under
# `ddprun --elastic` and by hand around ddp-store, with ranks killed
# (SIGKILL), stopped (SIGSTOP), joining, and too few left. Each recovered
# job must end with a model and momentum bit-identical (float64) to the
# checkpoint handover at the same step: the job saved at that step and
# loaded into the new world size.
# Usage: elastic_test.sh BUILD_DIR [CASE...]  (cases: the names below)
# Prints "ok"/"not ok" per check; exits non-zero if any failed.
set -uo pipefail

if [[ $# -lt 1 || ! -x "$1/tools/ddprun/ddprun" || ! -x "$1/tests/multiprocess/elastic_worker" ]]; then
  echo "usage: $0 BUILD_DIR [CASE...] (with ddprun, ddp-store and elastic_worker built)" >&2
  exit 2
fi
BUILD=$(cd "$1" && pwd)
DDPRUN=$BUILD/tools/ddprun/ddprun
STORE=$BUILD/tools/ddprun/ddp-store
WORKER=$BUILD/tests/multiprocess/elastic_worker
shift
CASES=("$@")
WORK=$(mktemp -d "${TMPDIR:-/tmp}/ddp-elastic-test.XXXXXX")
trap 'pkill -KILL -f "$WORK" 2>/dev/null; rm -rf "$WORK"' EXIT
# One job secret for every job here: ddprun --elastic's ranks, its store and
# the joiners (ddprun --join, which makes none) must share it.
export DDP_JOB_SECRET=${DDP_JOB_SECRET:-$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')}
LIMIT=60  # seconds any one job may take before the test kills it
STEPS=40
# A job a rank joins: from its first step, when the joiner starts (which
# must step within 2 s: join's check), it runs over 39 x 80 ms = 3.1 s; and
# few steps are left after the join.
JOIN_STEPS=40 JOIN_STEP_MS=80
. "$(dirname "$0")/../support/tap.sh"

wanted() { [[ ${#CASES[@]} -eq 0 || " ${CASES[*]} " == *" $1 "* ]]; }
final_hash() { sed -n 's/.*final: steps [0-9]*, world \([0-9]*\), state fnv1a64 \([0-9a-f]*\)$/\1 \2/p' "$1"; }
# "GEN STEP": the first generation from $2 on that resumed (output $1), and
# its step. Not always $2 itself: a generation whose group did not connect
# (a store that answered late on a loaded machine) is formed again, with the
# same members and step.
resumed() {
  [[ -n $2 ]] || return 0
  sed -n 's/.*generation \([0-9]*\): world [0-9]*, members [0-9,]*, resumed at step \([0-9]*\)$/\1 \2/p' "$1" |
    awk -v g="$2" '$1 >= g + 0 { print; exit }'
}
resumed_at() { resumed "$1" "$2" | cut -s -d' ' -f2; }
# The generation of the job's first membership change (output $1): the first
# that ddprun reports with a member left or joined. Not always generation 1:
# a generation whose group failed to connect (a rank that started late on a
# loaded machine) is formed again, with the same members, before it.
change_generation() {
  sed -n 's/^ddprun: elastic: generation \([0-9]*\): .*; left: \(.*\); joined: \(.*\); formed in.*/\1|\2|\3/p' "$1" |
    awk -F'|' '$2 != "none" || $3 != "none" { print $1; exit }'
}
show() { tail -n "${2:-8}" "$1" | cut -c1-240 | tr '\n' '|'; }
# The job's lines about generations (output $1), the last 12, for a failure.
generation_lines() { grep -E 'generation|ddprun' "$1" | show - 12; }

# An elastic job of $1 ranks on backend $2; the rest: worker flags. Output in $OUT.
elastic_job() {
  local n=$1 backend=$2
  shift 2
  (cd "$WORK" && DDP_BACKEND=$backend DDP_TIMEOUT=${TIMEOUT_S:-20} \
     timeout -s KILL "$LIMIT" "$DDPRUN" --nproc-per-node "$n" --elastic "${ELASTIC:-1:8}" \
     "$WORKER" --steps "$STEPS" "$@" >"$OUT" 2>&1 </dev/null)
}

# The checkpoint handover: $2 ranks to step $4 save, then $3 ranks load and
# finish (backend $1); prints the final "world hash". With ZERO=1 through a
# ZeroRedundancyOptimizer: the consolidated checkpoint, loaded by a fresh one.
# A handover the test made before (the same backend, worlds, step, STEPS and
# ZERO) is not made again: its hash is kept in $WORK.
handover() {
  local backend=$1 before=$2 after=$3 at=$4 ck=$WORK/handover.$RANDOM.ckpt got
  local zero=(--zero "${ZERO:-0}") made=$WORK/handover.$1.$2.$3.$4.$STEPS.${ZERO:-0}.hash
  if [[ -s $made ]]; then
    cat "$made"
    return
  fi
  OUT=$WORK/save.out elastic_job "$before" "$backend" "${zero[@]}" --save-at "$at" --checkpoint "$ck" ||
    return 1
  OUT=$WORK/load.out elastic_job "$after" "$backend" "${zero[@]}" --load "$ck" || return 1
  got=$(final_hash "$WORK/load.out")
  [[ -n $got ]] && echo "$got" >"$made"
  echo "$got"
}

# The port of a job's ddp-store once its first generation steps (output $1).
store_port() {
  local port=""
  for _ in $(seq 1 100); do
    port=$(sed -n 's/^ddp-store: listening on port //p' "$1" 2>/dev/null)
    [[ -n $port ]] && grep -q "first step of generation 0" "$1" && break
    sleep 0.1
  done
  echo "$port"
}

# A rank joining the job whose store is on port $1 (ddprun --join, backend
# $2); the rest: worker flags. Output in $OUT.
join_job() {
  local port=$1 backend=$2
  shift 2
  (cd "$WORK" && DDP_BACKEND=$backend timeout -s KILL "$LIMIT" "$DDPRUN" --nproc-per-node 1 \
     --elastic 1:8 --join --master-port "$port" "$WORKER" "$@" >"$OUT" 2>&1 </dev/null)
}

# Kill (SIGKILL) member $2 mid-backward of step $3 in a job of 3 on $1.
killed_case() {
  local backend=$1 victim=$2 at=$3 name="$1: member $2 of 3 killed (SIGKILL) mid-backward of step $3"
  OUT=$WORK/kill.$backend.$victim.out
  local rc=0
  elastic_job 3 "$backend" --fault kill --victim "$victim" --at "$at" || rc=$?
  local got resumed expected gen
  got=$(final_hash "$OUT")
  gen=$(change_generation "$OUT")
  resumed=$(resumed_at "$OUT" "$gen")
  if [[ $rc -ne 0 || -z $got ]]; then
    fail "$name: job went on" "ddprun exit $rc: $(show "$OUT")"
    return
  fi
  grep -q "ddprun: rank $victim (pid [0-9]*) was killed by signal 9.*elastic: 2 rank(s) of this ddprun go on" "$OUT" &&
    grep -q "ddprun: elastic: generation $gen: world 2 .*left: $victim; joined: none" "$OUT" &&
    pass "$name: ddprun reports the loss and the new world" ||
    fail "$name: ddprun's lines" "$(show "$OUT" 12)"
  [[ $resumed == "$at" ]] && pass "$name: resumed at step $at (no committed step lost)" ||
    fail "$name: resumed at step '$resumed', wanted $at" "$(generation_lines "$OUT")"
  expected=$(handover "$backend" 3 2 "$at")
  [[ $got == "$expected" && $got == 2\ * ]] &&
    pass "$name: bit-identical to the 3 -> 2 checkpoint handover at step $at ($got)" ||
    fail "$name: state '$got', checkpoint handover '$expected'"
}

if wanted kill; then
  killed_case gloo 1 10
  killed_case shm 1 17
  killed_case shm 0 5  # rank 0: the store lives in ddp-store, not in rank 0
  killed_case gloo 2 23
fi

# SIGSTOP of member $2 at step $3 on $1: the survivors wait for the group's
# timeout (3 s here), then go on without it; when they end, ddprun
# continues the stopped member, which finds the job finished and exits 0.
stopped_case() {
  local backend=$1 victim=$2 at=$3 name="$1: member $2 of 3 stopped (SIGSTOP) mid-backward of step $3"
  OUT=$WORK/stop.$backend.$victim.out
  local rc=0
  TIMEOUT_S=3 elastic_job 3 "$backend" --fault stop --victim "$victim" --at "$at" || rc=$?
  local stopped_at next expected
  stopped_at=$(sed -n "s/.*victim: member $victim faults at step $at at \([0-9]*\) ms$/\1/p" "$OUT")
  next=$(sed -n "s/.*first step of generation $(change_generation "$OUT") done at \([0-9]*\) ms, world 2$/\1/p" "$OUT")
  if [[ $rc -ne 0 || -z $stopped_at || -z $next ]]; then
    fail "$name" "ddprun exit $rc: $(show "$OUT" 12)"
    return
  fi
  [[ $((next - stopped_at)) -lt 4000 ]] &&
    pass "$name: stepping at world 2 $((next - stopped_at)) ms after the stop (timeout 3000 ms + 1 s)" ||
    fail "$name: $((next - stopped_at)) ms after the stop, over the timeout + 1 s"
  expected=$(handover "$backend" 3 2 "$at")
  [[ $(final_hash "$OUT") == "$expected" ]] && pass "$name: bit-identical to the checkpoint handover" ||
    fail "$name: state '$(final_hash "$OUT")', handover '$expected'"
  ! grep -q "sending SIGKILL" "$OUT" &&
    pass "$name: continued by ddprun at the end, the stopped member ended on its own" ||
    fail "$name: the stopped member had to be killed" "$(show "$OUT" 6)"
}

if wanted stop; then
  stopped_case gloo 2 10
  stopped_case shm 0 7  # rank 0 too
fi

# Two failures in a row (4 -> 3 -> 2), and one while generation 1 forms.
if wanted twice; then
  name="shm: members 1 and 3 of 4 killed at steps 8 and 16"
  OUT=$WORK/twice.out
  rc=0
  elastic_job 4 shm --fault kill --victim 1,3 --at 8,16 || rc=$?
  got=$(final_hash "$OUT")
  ck1=$WORK/twice1.ckpt ck2=$WORK/twice2.ckpt
  OUT=$WORK/t1.out elastic_job 4 shm --save-at 8 --checkpoint "$ck1"
  OUT=$WORK/t2.out elastic_job 3 shm --load "$ck1" --save-at 16 --checkpoint "$ck2"
  OUT=$WORK/t3.out elastic_job 2 shm --load "$ck2"
  expected=$(final_hash "$WORK/t3.out")
  [[ $rc -eq 0 && $got == "$expected" && $got == 2\ * ]] &&
    pass "$name: bit-identical to handovers 4 -> 3 -> 2 ($got)" ||
    fail "$name" "exit $rc, state '$got', handovers '$expected': $(show "$WORK/twice.out" 12)"

  name="gloo: member 1 of 4 killed at step 8, member 2 as the next generation forms"
  OUT=$WORK/reform.out
  rc=0
  elastic_job 4 gloo --fault kill --victim 1 --at 8 --reform-victim 2 || rc=$?
  got=$(final_hash "$OUT")
  expected=$(handover gloo 4 2 8)
  [[ $rc -eq 0 && $got == "$expected" ]] &&
    grep -q "ddprun: elastic: generation [0-9]*: world 2 .*left: 2;" "$OUT" &&
    pass "$name: 2 members go on, bit-identical to the 4 -> 2 handover" ||
    fail "$name" "exit $rc, state '$got', handover '$expected': $(show "$OUT" 12)"
fi

# A 4th rank joins a running job of 3 (ddprun --join): it is stepping within
# 2 s of its start, and the result is the 3 -> 4 handover at the join step.
if wanted join; then
  name="gloo: a 4th rank joins a job of 3"
  OUT=$WORK/join.out
  (elastic_job 3 gloo --step-ms "$JOIN_STEP_MS" --steps "$JOIN_STEPS") &
  job=$!
  port=$(store_port "$OUT")
  started=$(date +%s%3N)
  rc2=0
  OUT=$WORK/joiner.out join_job "$port" gloo --steps "$JOIN_STEPS" --step-ms "$JOIN_STEP_MS" || rc2=$?
  rc=0
  wait "$job" || rc=$?
  gen=$(change_generation "$OUT")
  at=$(resumed_at "$OUT" "$gen")
  stepping=$(sed -n "s/.*first step of generation $(resumed "$OUT" "$gen" | cut -s -d' ' -f1) done at \([0-9]*\) ms, world 4$/\1/p" "$OUT")
  if [[ $rc -eq 0 && $rc2 -eq 0 && -n $at && -n $stepping ]]; then
    grep -q "ddprun: elastic: generation $gen: world 4 .*joined: 1000000" "$OUT" &&
      pass "$name: ddprun reports the join" || fail "$name: ddprun's line" "$(show "$OUT" 12)"
    [[ $((stepping - started)) -lt 2000 ]] &&
      pass "$name: stepping at world 4 $((stepping - started)) ms after its ddprun started" ||
      fail "$name: $((stepping - started)) ms after its start, over 2 s"
    expected=$(STEPS=$JOIN_STEPS handover gloo 3 4 "$at")
    [[ $(final_hash "$OUT") == "$expected" ]] &&
      pass "$name: bit-identical to the 3 -> 4 handover at step $at" ||
      fail "$name: state '$(final_hash "$OUT")', handover '$expected'"
  else
    fail "$name" "exit $rc/$rc2: $(show "$OUT" 12) joiner: $(show "$WORK/joiner.out")"
  fi

  # A rank joins while another dies: whatever the order, 3 members finish.
  name="shm: a rank joins while member 1 of 3 dies"
  OUT=$WORK/joindie.out
  (elastic_job 3 shm --step-ms 30 --steps 100 --fault kill --victim 1 --at 20) &
  job=$!
  for _ in $(seq 1 100); do grep -q "victim:" "$OUT" 2>/dev/null && break; sleep 0.05; done
  port=$(sed -n 's/^ddp-store: listening on port //p' "$OUT")
  rc2=0
  OUT=$WORK/joiner2.out join_job "$port" shm --steps 100 --step-ms 30 || rc2=$?
  rc=0
  wait "$job" || rc=$?
  [[ $rc -eq 0 && $rc2 -eq 0 && $(final_hash "$OUT") == 3\ * ]] &&
    pass "$name: the job ends with 3 members" ||
    fail "$name" "exit $rc/$rc2: $(show "$OUT" 12)"
fi

# ZeRO (ZeroOptions().elastic(true)): each member keeps its shard of the
# momentum and a replica of the next member's. A lost member's shard comes
# from its replica; the shards are re-partitioned over the survivors; the
# result is bit-identical to a fresh ZeRO of the new world loading the
# consolidated checkpoint of the same step (the handover with --zero).
zero_case() {
  local backend=$1 n=$2 victims=$3 at=$4 name=$5
  OUT=$WORK/zero.$backend.${victims//,/_}.out
  local rc=0
  elastic_job "$n" "$backend" --zero 1 --fault kill --victim "$victims" --at "$at" || rc=$?
  local got resumed expected gen first=${at%%,*}
  got=$(final_hash "$OUT")
  gen=$(change_generation "$OUT")
  resumed=$(resumed_at "$OUT" "$gen")
  if [[ $rc -ne 0 || -z $got ]]; then
    fail "$name: job went on" "ddprun exit $rc: $(show "$OUT" 12)"
    return 1
  fi
  [[ $resumed == "$first" ]] && pass "$name: resumed at step $first (no committed step lost)" ||
    fail "$name: resumed at step '$resumed', wanted $first" "$(generation_lines "$OUT")"
  echo "$got" >"$OUT.hash"
}

if wanted zero; then
  name="gloo, ZeRO: member 1 of 3 killed (SIGKILL) mid-backward of step 10"
  if zero_case gloo 3 1 10 "$name"; then
    got=$(cat "$WORK/zero.gloo.1.out.hash")
    expected=$(ZERO=1 handover gloo 3 2 10)
    [[ $got == "$expected" && $got == 2\ * ]] &&
      pass "$name: bit-identical to a fresh ZeRO of 2 loading the consolidated checkpoint of step 10 ($got)" ||
      fail "$name: state '$got', ZeRO handover '$expected'" "$(show "$WORK/load.out" 4)"
    whole=$(handover gloo 3 2 10)
    [[ $got == "$whole" ]] && pass "$name: and to the whole optimizer's 3 -> 2 handover" ||
      fail "$name: state '$got', whole optimizer's handover '$whole'"
  fi

  name="shm, ZeRO: member 0 of 3 killed mid-backward of step 5 (its shard's replica on member 2)"
  if zero_case shm 3 0 5 "$name"; then
    got=$(cat "$WORK/zero.shm.0.out.hash")
    expected=$(ZERO=1 handover shm 3 2 5)
    [[ $got == "$expected" ]] && pass "$name: bit-identical to the ZeRO 3 -> 2 handover" ||
      fail "$name: state '$got', handover '$expected'"
  fi

  name="shm, ZeRO: members 1 and 3 of 4 killed at steps 8 and 16"
  if zero_case shm 4 1,3 8,16 "$name"; then
    got=$(cat "$WORK/zero.shm.1_3.out.hash")
    ck1=$WORK/zt1.ckpt ck2=$WORK/zt2.ckpt
    OUT=$WORK/zt1.out elastic_job 4 shm --zero 1 --save-at 8 --checkpoint "$ck1"
    OUT=$WORK/zt2.out elastic_job 3 shm --zero 1 --load "$ck1" --save-at 16 --checkpoint "$ck2"
    OUT=$WORK/zt3.out elastic_job 2 shm --zero 1 --load "$ck2"
    expected=$(final_hash "$WORK/zt3.out")
    [[ $got == "$expected" && $got == 2\ * ]] &&
      pass "$name: bit-identical to ZeRO handovers 4 -> 3 -> 2 ($got)" ||
      fail "$name: state '$got', handovers '$expected'"
  fi

  name="gloo, ZeRO: members 1 and 3 of 4 killed at once (each shard's replica survives)"
  if zero_case gloo 4 1,3 6,6 "$name"; then
    got=$(cat "$WORK/zero.gloo.1_3.out.hash")
    expected=$(ZERO=1 handover gloo 4 2 6)
    [[ $got == "$expected" ]] && pass "$name: bit-identical to the ZeRO 4 -> 2 handover" ||
      fail "$name: state '$got', handover '$expected'"
  fi

  # After backward, before opt.step(): the others fail in ZeRO's broadcast
  # after their own update, so they go back to the last full copy (every 4
  # steps here: step 8).
  name="gloo, ZeRO: member 2 of 3 killed before opt.step() of step 10, full copy every 4 steps"
  OUT=$WORK/zero.copy.out
  rc=0
  elastic_job 3 gloo --zero 1 --commit-every 4 --fault kill --fault-point before-step --victim 2 --at 10 ||
    rc=$?
  got=$(final_hash "$OUT")
  resumed=$(resumed_at "$OUT" "$(change_generation "$OUT")")
  expected=$(ZERO=1 handover gloo 3 2 8)
  [[ $rc -eq 0 && $resumed == 8 && $got == "$expected" && $got == 2\ * ]] &&
    pass "$name: resumed at step 8, bit-identical to the ZeRO 3 -> 2 handover there" ||
    fail "$name" "exit $rc, resumed at '$resumed', state '$got', handover '$expected': $(show "$OUT" 8)"

  name="gloo, ZeRO: member 1 of 4 killed at step 8, member 2 as the next generation forms"
  OUT=$WORK/zero.reform.out
  rc=0
  elastic_job 4 gloo --zero 1 --fault kill --victim 1 --at 8 --reform-victim 2 || rc=$?
  got=$(final_hash "$OUT")
  expected=$(ZERO=1 handover gloo 4 2 8)
  [[ $rc -eq 0 && $got == "$expected" && $got == 2\ * ]] &&
    grep -q "ddprun: elastic: generation [0-9]*: world 2 .*left: 2;" "$OUT" &&
    pass "$name: 2 members go on, bit-identical to the ZeRO 4 -> 2 handover" ||
    fail "$name" "exit $rc, state '$got', handover '$expected': $(show "$OUT" 12)"

  # Members 1 and 3 hold no shard's only copies between them (each shard's
  # replica is on the rank before its owner): the handover can go on.
  name="gloo, ZeRO: member 1 of 4 killed at step 8, member 3 mid-way through the handover after it"
  OUT=$WORK/zero.mid-handover.out
  rc=0
  elastic_job 4 gloo --zero 1 --fault kill --victim 1 --at 8 --handover-victim 3 || rc=$?
  got=$(final_hash "$OUT")
  expected=$(ZERO=1 handover gloo 4 2 8)
  [[ $rc -eq 0 && $got == "$expected" && $got == 2\ * ]] &&
    grep -q "ddp: fault point elastic.zero_handover.transfer: killing this process" "$OUT" &&
    grep -q "ddprun: elastic: generation [0-9]*: world 2 .*left: 3;" "$OUT" &&
    pass "$name: 2 members go on, bit-identical to the ZeRO 4 -> 2 handover" ||
    fail "$name" "exit $rc, state '$got', handover '$expected': $(generation_lines "$OUT")"

  name="gloo, ZeRO: members 1 and 2 of 4 killed at once (member 2's shard and its replica)"
  OUT=$WORK/zero.lost.out
  rc=0
  elastic_job 4 gloo --zero 1 --fault kill --victim 1,2 --at 6,6 || rc=$?
  # Each survivor (members 0 and 3) ends with a ddp::Error (the operation:
  # the member, its rank and generation) naming the lost state: parameter
  # #1 (member 2's shard, its replica on member 1) and the step they are at.
  [[ $rc -ne 0 ]] &&
    ddp_error "$OUT" "shows=ddp: elastic member 0 (" "shows=ZeroRedundancyOptimizer" \
      "shows=parameter #1 (of 4)" "shows=step 6" &&
    pass "$name: every survivor ends naming the lost state (exit $rc)" ||
    fail "$name" "exit $rc: $(show "$OUT" 8)"
  survivors=$(ddp_error_facts "$OUT" type=Error peers=none | grep -c -E "operation=elastic member (0|3) \(")
  [[ $survivors -eq 2 ]] && pass "$name: both survivors say so" ||
    fail "$name: $survivors survivor(s) said so, wanted 2"

  name="gloo, ZeRO: a 4th rank joins a job of 3"
  OUT=$WORK/zjoin.out
  (elastic_job 3 gloo --zero 1 --step-ms "$JOIN_STEP_MS" --steps "$JOIN_STEPS") &
  job=$!
  port=$(store_port "$OUT")
  rc2=0
  OUT=$WORK/zjoiner.out join_job "$port" gloo --zero 1 --steps "$JOIN_STEPS" --step-ms "$JOIN_STEP_MS" || rc2=$?
  rc=0
  wait "$job" || rc=$?
  at=$(resumed_at "$OUT" "$(change_generation "$OUT")")
  if [[ $rc -eq 0 && $rc2 -eq 0 && -n $at ]]; then
    expected=$(STEPS=$JOIN_STEPS ZERO=1 handover gloo 3 4 "$at")
    [[ $(final_hash "$OUT") == "$expected" && $expected == 4\ * ]] &&
      pass "$name: shards re-partitioned over 4, bit-identical to the ZeRO 3 -> 4 handover at step $at" ||
      fail "$name: state '$(final_hash "$OUT")', handover '$expected'"
  else
    fail "$name" "exit $rc/$rc2: $(show "$OUT" 12) joiner: $(show "$WORK/zjoiner.out")"
  fi
fi

# Too few left: ddprun stops the job at once; by hand (no ddprun), the
# survivors raise a TimeoutError naming who is left and who is gone.
if wanted minimum; then
  name="ddprun --elastic 3:4: member 1 of 3 killed"
  OUT=$WORK/min.out
  rc=0
  ELASTIC=3:4 elastic_job 3 gloo --fault kill --victim 1 --at 5 || rc=$?
  [[ $rc -eq 137 ]] && grep -q "fewer than the minimum of 3 rank(s) left; stopping the other 2" "$OUT" &&
    pass "$name: ddprun stops the job (exit 137) naming the minimum" ||
    fail "$name" "exit $rc: $(show "$OUT" 6)"

  name="by hand: 3 members around ddp-store, min 3, member 1 killed"
  port=$(free_port)
  "$STORE" --port "$port" >"$WORK/store.out" 2>&1 &
  store=$!
  pids=()
  for r in 0 1 2; do
    (cd "$WORK" && DDP_BACKEND=shm MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=$r WORLD_SIZE=3 \
       DDP_RENDEZVOUS_TIMEOUT_S=2 timeout -s KILL "$LIMIT" "$WORKER" --steps "$STEPS" --min 3 \
       --fault kill --victim 1 --at 5 >"$WORK/hand$r.out" 2>&1 </dev/null) 2>/dev/null &
    # (the subshell's own stderr: bash's notice that the victim was killed)
    pids+=($!)
  done
  codes=()
  for p in "${pids[@]}"; do rc=0; wait "$p" 2>/dev/null || rc=$?; codes+=("$rc"); done
  kill "$store" 2>/dev/null
  wait "$store" 2>/dev/null
  # A TimeoutError about member 1 (the one gone), showing the timeout, who
  # is here, and the minimum.
  if [[ ${codes[*]} == "1 137 1" ]] &&
     ddp_error "$WORK/hand0.out" type=TimeoutError "operation=elastic member 0" peers=1 &&
     ddp_error "$WORK/hand0.out" "at=elastic member 0" "shows=2000 ms" "shows=(0,2)" "shows= 3 "; then
    pass "$name: survivors exit 1 naming who is left, the minimum and who is gone"
  else
    fail "$name" "exit codes ${codes[*]}: $(show "$WORK/hand0.out" 4)"
  fi
fi

# The main job through the runner: examples/train --elastic, 3 ranks, one
# killed from outside once training runs; the others finish the epochs.
TRAIN=$BUILD/examples/train
if wanted train && [[ -x $TRAIN ]]; then
  name="examples/train --elastic: a rank of 3 killed (SIGKILL) while training"
  OUT=$WORK/train.out
  (cd "$WORK" && DDP_BACKEND=shm timeout -s KILL 120 "$DDPRUN" --nproc-per-node 3 --elastic 2:3 "$TRAIN" \
     --elastic --data synthetic --train-size 3000 --epochs 2 --batch-size 32 --log-every 10 \
     --checkpoint "$WORK/train.pt" >"$OUT" 2>&1 </dev/null) &
  job=$!
  for _ in $(seq 1 300); do grep -q "step 20 |" "$OUT" 2>/dev/null && break; sleep 0.1; done
  pkill -KILL -n -f "^$TRAIN --elastic" 2>/dev/null  # the newest rank (ddprun's line starts elsewhere)
  rc=0
  wait "$job" || rc=$?
  if [[ $rc -eq 0 ]] && grep -q "ddprun: elastic: generation [0-9]*: world 2" "$OUT" &&
     grep -q "final: held-out loss .* 2 ranks at the end" "$OUT"; then
    pass "$name: the job ends at world 2: $(grep -o 'final: held-out.*' "$OUT" | head -1)"
  else
    fail "$name" "exit $rc: $(show "$OUT" 10)"
  fi
fi

exit $failed
