#!/usr/bin/env bash
# Elastic training in process, measured on this machine:
#   1. cost of elastic mode when nothing fails: elastic_bench, plain DDP
#      against ElasticRunner, 2 ranks, alternated round by round (mlp,
#      resnet18; 100 steps after 3 warm-up, so one full copy is included);
#   2. recovery from kill -9 of one rank of 3 mid-backward at a random step:
#      from the victim's fault to the survivors' first completed step at
#      world size 2 (elastic_worker, KILLS per backend);
#   3. SIGSTOP of one rank of 3 (group timeout 3 s): fault to next step;
#   4. a 4th rank joining a job of 3: its ddprun's start to the first step
#      at world size 4.
# Sections 1 and 2 run again with ZeRO (--zero 1: plain ZeRO against an
# elastic one, which also steps a replica of the next rank's shard).
# Usage: bench/elastic_bench.sh BUILD_DIR [KILLS] [ROUNDS] [SECTIONS]
#   (default 20, 3, "1 2 3 4 1z 2z")
set -uo pipefail
BUILD=$(cd "${1:?usage: $0 BUILD_DIR [KILLS] [ROUNDS]}" && pwd)
KILLS=${2:-20}
ROUNDS=${3:-3}
SECTIONS=" ${4:-1 2 3 4 1z 2z} "
DDPRUN=$BUILD/tools/ddprun/ddprun
WORKER=$BUILD/tests/multiprocess/elastic_worker
BENCH=$BUILD/bench/elastic_bench
WORK=$(mktemp -d "${TMPDIR:-/tmp}/ddp-elastic-bench.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# "p50 p99 max" of numbers on stdin (p99 of fewer than 100: the maximum).
stats() { sort -n | awk '{v[NR]=$1} END {i=int(NR*0.5+0.5); if(i<1)i=1; print v[i], v[int(NR*0.99+0.999)], v[NR]}'; }

# cost ZERO MODEL...: section 1 over these models, ZERO 0 or 1.
cost() {
  local zero=$1 model ratio label
  shift
  for model in "$@"; do
    label=$model
    [[ $zero == 1 ]] && label="$model zero"
    ratios=()
    for round in $(seq 1 "$ROUNDS"); do
      order=(plain elastic)
      ((round % 2 == 0)) && order=(elastic plain)
      for mode in "${order[@]}"; do
        if [[ $mode == plain ]]; then
          "$DDPRUN" --nproc-per-node 2 "$BENCH" --mode plain --model "$model" --zero "$zero" >"$WORK/$mode.out" 2>&1
        else
          "$DDPRUN" --nproc-per-node 2 --elastic 1:2 "$BENCH" --mode elastic --model "$model" --zero "$zero" \
            >"$WORK/$mode.out" 2>&1
        fi
        eval "$mode=\$(sed -n 's/.*elastic_bench: $mode $label: mean \\([0-9.]*\\) ms.*/\\1/p' \"$WORK/$mode.out\")"
      done
      ratio=$(awk -v e="$elastic" -v p="$plain" 'BEGIN {printf "%.4f", e / p}')
      ratios+=("$ratio")
      echo "$label round $round: plain $plain ms/step, elastic $elastic ms/step, ratio $ratio"
    done
    echo "$label: elastic/plain ratio, median of rounds: $(printf '%s\n' "${ratios[@]}" | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')"
  done
}

if [[ $SECTIONS == *" 1 "* ]]; then
  echo "## 1. Cost of elastic mode, nothing failing (2 ranks, $ROUNDS rounds)"
  cost 0 mlp resnet18
fi
if [[ $SECTIONS == *" 1z "* ]]; then
  echo "## 1z. The same with ZeRO: plain ZeRO against elastic ZeRO (2 ranks, $ROUNDS rounds)"
  cost 1 mlp resnet18
fi

# kills ZERO: section 2, ZERO 0 or 1.
kills() {
  local zero=$1
  for backend in shm gloo; do
    : >"$WORK/kill.$backend"
    for i in $(seq 1 "$KILLS"); do
      victim=$((RANDOM % 3)) at=$((5 + RANDOM % 25))
      DDP_BACKEND=$backend timeout -s KILL 60 "$DDPRUN" --nproc-per-node 3 --elastic 2:3 "$WORKER" \
        --steps 40 --zero "$zero" --fault kill --victim "$victim" --at "$at" >"$WORK/k.out" 2>&1
      fault=$(sed -n 's/.*victim: member [0-9]* faults at step [0-9]* at \([0-9]*\) ms$/\1/p' "$WORK/k.out")
      next=$(sed -n 's/.*first step of generation 1 done at \([0-9]*\) ms, world 2$/\1/p' "$WORK/k.out")
      resumed=$(sed -n 's/.*generation 1: world 2, members [0-9,]*, resumed at step \([0-9]*\)$/\1/p' "$WORK/k.out")
      if [[ -n $fault && -n $next ]]; then
        echo $((next - fault)) >>"$WORK/kill.$backend"
        [[ $resumed == "$at" ]] || echo "$backend kill $i: resumed at step '$resumed', killed in step $at (steps lost)"
      else
        echo "$backend kill $i (victim $victim, step $at): no recovery: $(tail -3 "$WORK/k.out" | tr '\n' '|')"
      fi
    done
    read -r p50 p99 max < <(stats <"$WORK/kill.$backend")
    echo "$backend: $(wc -l <"$WORK/kill.$backend") recoveries; fault -> first step at world 2: p50 $p50 ms, p99 $p99 ms, max $max ms"
  done
}

if [[ $SECTIONS == *" 2 "* ]]; then
  echo "## 2. kill -9 of one rank of 3 mid-backward ($KILLS kills per backend)"
  kills 0
fi
if [[ $SECTIONS == *" 2z "* ]]; then
  echo "## 2z. The same with an elastic ZeRO ($KILLS kills per backend)"
  kills 1
fi

if [[ $SECTIONS == *" 3 "* ]]; then
  echo "## 3. SIGSTOP of one rank of 3, group timeout 3000 ms (5 runs, gloo)"
  : >"$WORK/stop"
  for i in 1 2 3 4 5; do
    # (ddprun continues the stopped rank once the others end)
    DDP_BACKEND=gloo DDP_TIMEOUT=3 timeout -s KILL 60 "$DDPRUN" --nproc-per-node 3 --elastic 2:3 "$WORKER" \
      --steps 30 --fault stop --victim 2 --at 10 >"$WORK/s.out" 2>&1
    fault=$(sed -n 's/.*victim: member 2 faults at step 10 at \([0-9]*\) ms$/\1/p' "$WORK/s.out")
    next=$(sed -n 's/.*first step of generation 1 done at \([0-9]*\) ms, world 2$/\1/p' "$WORK/s.out")
    [[ -n $fault && -n $next ]] && echo $((next - fault - 3000)) >>"$WORK/stop"
  done
  read -r p50 p99 max < <(stats <"$WORK/stop")
  echo "gloo: stop -> first step at world 2, beyond the 3000 ms timeout: p50 $p50 ms, max $max ms"
fi

if [[ $SECTIONS == *" 4 "* ]]; then
  echo "## 4. A 4th rank joins a job of 3 (5 runs, gloo)"
  : >"$WORK/join"
  for i in 1 2 3 4 5; do
    DDP_BACKEND=gloo timeout -s KILL 60 "$DDPRUN" --nproc-per-node 3 --elastic 1:4 "$WORKER" \
      --steps 150 --step-ms 20 >"$WORK/j.out" 2>&1 &
    job=$!
    for _ in $(seq 1 100); do grep -q "first step of generation 0" "$WORK/j.out" 2>/dev/null && break; sleep 0.1; done
    port=$(sed -n 's/^ddp-store: listening on port //p' "$WORK/j.out")
    started=$(date +%s%3N)
    DDP_BACKEND=gloo timeout -s KILL 60 "$DDPRUN" --nproc-per-node 1 --elastic 1:4 --join --master-port "$port" \
      "$WORKER" --steps 150 --step-ms 20 >/dev/null 2>&1
    wait "$job"
    stepping=$(sed -n 's/.*first step of generation 1 done at \([0-9]*\) ms, world 4$/\1/p' "$WORK/j.out")
    [[ -n $stepping ]] && echo $((stepping - started)) >>"$WORK/join"
  done
  read -r p50 p99 max < <(stats <"$WORK/join")
  echo "gloo: joiner's ddprun start -> first step at world 4: p50 $p50 ms, max $max ms (step 20 ms)"
fi

