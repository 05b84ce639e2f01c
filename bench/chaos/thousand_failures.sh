#!/usr/bin/env bash
# A thousand failures in one job (docs/benchmarks.md, "Chaos"): ddp-chaos
# fails the elastic main job (examples/train --elastic, synthetic data, 4
# ranks within 2:6) FAILURES times, one event at a time: kill -9, SIGSTOP
# and SIGCONT, joins, kills as a generation forms (and, with --zero, joiners
# that die mid-handover); then the same job runs undisturbed (4 ranks), and
# the held-out accuracies are compared (within 0.5 points).
# Usage: thousand_failures.sh BUILD_DIR OUT_DIR [FAILURES [EPOCHS [TRAIN FLAGS...]]]
#   FAILURES default 1000; EPOCHS default 1000 (the job must outlast the
#   failures: about 140 steps a failure here). $DDP_BACKEND (shm), $DDP_TIMEOUT
#   (1 s: a stop is noticed after it), $SEED (1), $UNDISTURBED_ACCURACY (the
#   undisturbed run's, when the same flags ran before: not run again). Writes
#   OUT_DIR/summary.json
#   (ddp-chaos's), events.jsonl, chaos.txt, undisturbed.txt and verdict.txt.
set -uo pipefail
if [[ $# -lt 2 || ! -x "$1/tools/ddprun/ddp-chaos" ]]; then
  echo "usage: $0 BUILD_DIR OUT_DIR [FAILURES [EPOCHS [TRAIN FLAGS...]]]" >&2
  exit 2
fi
BUILD=$(cd "$1" && pwd)
OUT=$2
FAILURES=${3:-1000}
EPOCHS=${4:-1000}
shift $(($# < 4 ? $# : 4))
mkdir -p "$OUT/snapshot"
OUT=$(cd "$OUT" && pwd)
# A snapshot of the programs and libddp (and its Gloo module): a rebuild of
# BUILD_DIR while the job runs must not change the code of the processes it
# starts later (joiners). LD_LIBRARY_PATH comes before the RUNPATHs.
SNAP=$OUT/snapshot
cp "$BUILD/examples/train" "$BUILD/tools/ddprun/ddprun" "$BUILD/tools/ddprun/ddp-store" \
   "$BUILD/tools/ddprun/ddp-chaos" "$SNAP/"
for lib in $(ldd "$BUILD/examples/train" | awk '$1 ~ /^libddp/ {print $3}'); do
  cp "$lib" "$SNAP/"
  [[ -f $(dirname "$lib")/libddp_gloo.so ]] && cp "$(dirname "$lib")/libddp_gloo.so" "$SNAP/"
done
export LD_LIBRARY_PATH=$SNAP${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export DDP_BACKEND=${DDP_BACKEND:-shm} DDP_TIMEOUT=${DDP_TIMEOUT:-1}
KINDS=kill,stop,join,formation-kill
[[ " $* " == *" --zero "* ]] && KINDS=$KINDS,handover-kill
TRAIN=("$SNAP/train" --elastic --report-state --data synthetic --train-size 40000
       --log-every 4 --epochs "$EPOCHS" "$@")

start=$(date +%s)
rc=0
(cd "$OUT" && "$SNAP/ddp-chaos" --nproc 4 --elastic 2:6 --failures "$FAILURES" \
   --kinds "$KINDS" --every 0.05 --every-steps 4 --seed "${SEED:-1}" --timeout 14400 \
   --log events.jsonl --output output.txt --summary summary.json -- "${TRAIN[@]}" \
   2>chaos.txt) || rc=$?
echo "chaos: exit $rc after $(($(date +%s) - start)) s" | tee "$OUT/verdict.txt"
tail -12 "$OUT/chaos.txt"

start=$(date +%s)
if [[ -n ${UNDISTURBED_ACCURACY:-} ]]; then
  # The same flags ran undisturbed before (deterministic: the same seed).
  undisturbed=$UNDISTURBED_ACCURACY
else
  (cd "$OUT" && "$SNAP/ddprun" --nproc-per-node 4 --elastic 2:6 "${TRAIN[@]}" \
     >undisturbed.txt 2>&1) || rc=$?
  undisturbed=$(sed -n 's/.*final: held-out loss [0-9.]*, accuracy \([0-9.]*\)%.*/\1/p' \
    "$OUT/undisturbed.txt")
fi
chaos=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["final"]["accuracy_pct"])' \
  "$OUT/summary.json" 2>/dev/null)
echo "undisturbed: $(($(date +%s) - start)) s, accuracy $undisturbed%" | tee -a "$OUT/verdict.txt"
python3 - "$chaos" "$undisturbed" <<'PY' | tee -a "$OUT/verdict.txt"
import sys
try:
    chaos, calm = float(sys.argv[1]), float(sys.argv[2])
except ValueError:
    print("accuracy: missing (chaos %r, undisturbed %r)" % tuple(sys.argv[1:3]))
    sys.exit(1)
gap = chaos - calm
print("accuracy: %.2f%% under chaos, %.2f%% undisturbed: %+.2f points (%s 0.5)"
      % (chaos, calm, gap, "within" if abs(gap) <= 0.5 else "NOT within"))
sys.exit(0 if abs(gap) <= 0.5 else 1)
PY
[[ ${PIPESTATUS[0]} -eq 0 && $rc -eq 0 ]]
