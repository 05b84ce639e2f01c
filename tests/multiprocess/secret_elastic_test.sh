#!/usr/bin/env bash
# Elastic membership behind the job secret (docs/security.md): ddp-store
# opens the job and admits a process only with the secret; the job's keys
# (member records, arrivals, decisions, the generations' groups) are sealed
# with it. Cases:
#   joiners  a job of 3 under ddprun --elastic (its secret exported): a
#            joiner without a secret and one with another secret are refused,
#            each with a clear error, and the job goes on as it was; one
#            with the job's secret joins (world 4)
#   forged   while a job of 3 runs, a stranger (PyTorch's bare store client,
#            no secret) lists the store's keys and writes the next
#            generation's decision (a copy of the last one, whose MAC names
#            the other key); when a member dies, every survivor refuses it
#            with an error naming the key, and no generation forms from it
# Usage: secret_elastic_test.sh BUILD_DIR CASE
set -uo pipefail
case=$2
. "$(dirname "$0")/../support/scratch.sh" "$1"
worker=$build/tests/multiprocess/elastic_worker
trap 'kill $(jobs -p) 2>/dev/null; pkill -KILL -f "$tmp" 2>/dev/null; [[ -n ${KEEP:-} ]] || rm -rf "$tmp"' EXIT
secret=0123456789abcdef0123456789abcdef
export DDP_JOB_SECRET=$secret DDP_BACKEND=gloo DDP_RENDEZVOUS_TIMEOUT_S=10

# job N STEPS STEP_MS [WORKER FLAGS...]: an elastic job of N in the background,
# its output in $tmp/job.out.
job() {
  local n=$1 steps=$2 step_ms=$3
  shift 3
  (cd "$tmp" && timeout -s KILL 60 "$ddprun" --nproc-per-node "$n" --elastic 1:8 "$worker" \
     --steps "$steps" --step-ms "$step_ms" "$@" >"$tmp/job.out" 2>&1; echo "exit $?" >>"$tmp/job.out") &
}
# The job's store port, once its generation 0 steps.
port_of_job() {
  for _ in $(seq 1 200); do
    grep -q "first step of generation 0" "$tmp/job.out" 2>/dev/null && break
    sleep 0.05
  done
  sed -n 's/^ddp-store: listening on port //p' "$tmp/job.out"
}
# joiner LOG SECRET: one process joining the job ("-": no secret).
joiner() {
  local log=$1 s=$2
  (
    if [[ $s == - ]]; then unset DDP_JOB_SECRET; else export DDP_JOB_SECRET=$s; fi
    cd "$tmp" && timeout -s KILL 30 "$ddprun" --nproc-per-node 1 --elastic 1:8 --join \
      --master-port "$port" "$worker" --steps 200 --step-ms 30 >"$log" 2>&1
    echo "exit $?" >>"$log"
  )
}
finished() { grep -q "^exit" "$1" 2>/dev/null; }
wait_for_job() { for _ in $(seq 1 600); do finished "$tmp/job.out" && return; sleep 0.1; done; }
show() { tail -n "${2:-6}" "$1" | cut -c1-240 | tr '\n' '|'; }

case $case in
joiners)
  job 3 200 30
  port=$(port_of_job)
  joiner "$tmp/none.out" -
  grep -q "this process has no job secret (DDP_JOB_SECRET is unset) but ddp-store requires one" \
    "$tmp/none.out" && ! grep -qx "exit 0" "$tmp/none.out" &&
    ok "a joiner without a secret is refused: it has none, ddp-store requires one" ||
    not_ok "a joiner without a secret: $(show "$tmp/none.out")"
  joiner "$tmp/other.out" fedcba9876543210fedcba9876543210
  grep -q "ddp-store refused this process .*its proof of the job secret does not match ddp-store's" \
    "$tmp/other.out" && ! grep -qx "exit 0" "$tmp/other.out" &&
    ok "a joiner with another secret is refused: its proof does not match" ||
    not_ok "a joiner with another secret: $(show "$tmp/other.out")"
  if grep -q "joined: [0-9]" "$tmp/job.out"; then
    not_ok "a refused process was taken in: $(grep 'joined:' "$tmp/job.out" | show - 4)"
  else
    ok "the job took neither in"
  fi
  joiner "$tmp/right.out" "$secret"
  wait_for_job
  grep -qx "exit 0" "$tmp/job.out" && grep -q "ddprun: elastic: generation [0-9]*: world 4 .*joined: 1000" \
    "$tmp/job.out" && grep -qx "exit 0" "$tmp/right.out" &&
    ok "a joiner with the job's secret joins: world 4, the job ends well" ||
    not_ok "the joiner with the secret: job $(show "$tmp/job.out" 8) joiner $(show "$tmp/right.out")"
  ;;
forged)
  py=${DDP_REFERENCE_PYTHON:-/usr/bin/python3}
  if ! "$py" -c "import torch.distributed as d; assert hasattr(d.TCPStore, 'list_keys')" 2>/dev/null; then
    echo "ok - skipped: no PyTorch with TCPStore.list_keys for the stranger ($py)"
    finish
  fi
  # The stranger imports torch before the job starts, then waits for "go".
  ( "$py" - "$tmp" >"$tmp/stranger.out" 2>&1 <<'PY'; echo "exit $?" >>"$tmp/stranger.out" ) &
import datetime, os, re, sys, time
import torch.distributed as dist
tmp = sys.argv[1]
print("ready", flush=True)
while not os.path.exists(tmp + "/go"):
    time.sleep(0.02)
port = int(open(tmp + "/go").read())
store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=10))
decided = {}
for key in store.list_keys():
    m = re.match(r"(.*)/elastic/g(\d+)/decided$", key)
    if m:
        decided[int(m.group(2))] = m.group(1)
last = max(decided)
forged = "%s/elastic/g%d/decided" % (decided[last], last + 1)
store.set(forged, store.get("%s/elastic/g%d/decided" % (decided[last], last)))
print("forged " + forged, flush=True)
PY
  for _ in $(seq 1 300); do grep -q ready "$tmp/stranger.out" 2>/dev/null && break; sleep 0.05; done
  job 3 200 30 --fault kill --victim 1 --at 100
  port=$(port_of_job)
  echo "$port" >"$tmp/go"
  for _ in $(seq 1 200); do finished "$tmp/stranger.out" && break; sleep 0.05; done
  wait_for_job
  if ! grep -q "^forged " "$tmp/stranger.out"; then
    not_ok "the stranger could not write its decision: $(show "$tmp/stranger.out")"
    finish
  fi
  key=$(sed -n 's|^forged .*/\(elastic/g[0-9]*/decided\)$|\1|p' "$tmp/stranger.out")
  refusals=$(grep -c "holds a value under '$key' that no rank of this job wrote" "$tmp/job.out")
  [[ $refusals -ge 2 ]] && ! grep -qx "exit 0" "$tmp/job.out" &&
    ok "both survivors refuse the forged $key, naming it, and the job ends" ||
    not_ok "the forged decision ($key, $refusals refusal(s)): $(show "$tmp/job.out" 10)"
  gen=${key#elastic/g}
  gen=${gen%/decided}
  if grep -q "generation $gen: .*first step\|first step of generation $gen" "$tmp/job.out"; then
    not_ok "generation $gen formed from the forged decision"
  else
    ok "no generation formed from it"
  fi
  ;;
*)
  echo "unknown case '$case'" >&2
  exit 2
  ;;
esac
finish
