#!/usr/bin/env bash
# DDP_TIMELINE in real processes: a 2-rank job writes one Chrome trace per
# rank, each valid JSON with the events of every iteration in order (the
# checker below), with the allreduce and with a communication hook, under
# each way of naming the files; an unwritable path fails on every rank with
# the variable and the file named.
#   timeline_test.sh BUILD_DIR
set -uo pipefail
build=$1
ddprun=$build/tools/ddprun/ddprun
job=$build/tests/multiprocess/timeline_job
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/../support/tap.sh"
iterations=4

# check FILE RANK COMM: the trace of RANK, buckets named "COMM bucket K (size)".
check() {
  /usr/bin/python3 - "$@" "$iterations" <<'PY'
import json, sys
path, rank, comm, iterations = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
events = json.load(open(path))  # the JSON array format; valid as a whole
def fail(msg):
    print("%s: %s" % (path, msg)); sys.exit(1)
if any(e["pid"] != rank for e in events): fail("an event of another pid than %d" % rank)
meta = {(e["name"], e.get("tid")): e["args"] for e in events if e["ph"] == "M"}
if meta.get(("process_name", None)) != {"name": "rank %d" % rank}: fail("no process name")
spans = [e for e in events if e["ph"] == "X"]
if any((e["cat"] == "compute") != (e["tid"] == 0) for e in spans):
    fail("compute spans must be on tid 0 and only they")
rows = {}
for e in spans:
    if e["tid"]: rows.setdefault(e["tid"], []).append((e["ts"], e["ts"] + e["dur"]))
for tid, row in rows.items():
    row.sort()
    if any(b[0] < a[1] - 1e-3 for a, b in zip(row, row[1:])): fail("overlap on comm row %d" % tid)
    if ("thread_name", tid) not in meta: fail("comm row %d has no name" % tid)
end = lambda e: e["ts"] + e["dur"]
spans.sort(key=lambda e: (e["ts"], -e["dur"]))
# Per synchronized iteration k: broadcast buffers, forward, backward, its
# buckets, finalize, optimizer step; the no_sync micro-step's forward before.
step = [e for e in spans if e["name"] == "optimizer step"]
if len(step) != iterations: fail("%d optimizer steps, not %d" % (len(step), iterations))
buckets_seen = set()
for k in range(1, iterations + 1):
    it = [e for e in spans if e.get("args", {}).get("iteration") == k]
    names = [e["name"] for e in it]
    def one(name):
        found = [e for e in it if e["name"] == name]
        if len(found) != 1: fail("iteration %d: %d '%s' spans: %s" % (k, len(found), name, names))
        return found[0]
    nosync, bcast, fwd, bwd, fin = (one(n) for n in ("forward (no_sync)", "broadcast buffers",
                                                     "forward", "backward", "finalize (copy back)"))
    buckets = [e for e in it if e["name"].startswith(comm + " bucket ")]
    if len(buckets) < 3: fail("iteration %d: %d buckets (%s)" % (k, len(buckets), names))
    buckets_seen.add(len(buckets))
    if [e["name"].split()[len(comm.split()) + 1] for e in buckets] != [str(i) for i in range(len(buckets))]:
        fail("iteration %d: buckets out of order: %s" % (k, names))
    order = [end(nosync) <= bcast["ts"], end(bcast) <= fwd["ts"], end(fwd) <= bwd["ts"],
             end(bwd) <= fin["ts"], end(fin) <= step[k - 1]["ts"],
             all(bwd["ts"] <= b["ts"] <= end(b) <= fin["ts"] + 1 for b in buckets),
             any(b["ts"] < end(bwd) for b in buckets)]  # the first launched during backward
    if not all(order): fail("iteration %d: out of order %s: %s" % (k, order, it))
    if k > 1 and not end(step[k - 2]) <= nosync["ts"]: fail("iteration %d starts before the last step ended" % k)
if len(buckets_seen) != 1: fail("bucket counts differ between iterations: %s" % buckets_seen)
print("%s: %d events, %d iterations of %d buckets in order" % (path, len(events), iterations, buckets_seen.pop()))
PY
}

# run NAME DDP_TIMELINE COMM FILE0 FILE1 [job args]
run() {
  local name=$1 value=$2 comm=$3 f0=$4 f1=$5 out
  shift 5
  out=$(DDP_TIMELINE=$value timeout -s KILL 120 "$ddprun" --nproc-per-node 2 "$job" \
          --iterations "$iterations" "$@" 2>&1)
  local got=$?
  if [ "$got" -ne 0 ]; then not_ok "$name: the job failed (exit $got)"; echo "$out" | head -20; return; fi
  local r f
  for r in 0 1; do
    f=$f0; [ "$r" -eq 1 ] && f=$f1
    if [ ! -f "$f" ]; then not_ok "$name: rank $r wrote no $f"; ls "$tmp"; continue; fi
    if msg=$(check "$f" "$r" "$comm" 2>&1); then ok "$name: rank $r: $msg"; else not_ok "$name: rank $r: $msg"; fi
  done
}

run "DDP_TIMELINE=trace.json" "$tmp/trace.json" allreduce "$tmp/trace.rank0.json" "$tmp/trace.rank1.json"
mkdir "$tmp/dir"
run "a directory, a comm hook" "$tmp/dir" "comm hook" \
    "$tmp/dir/timeline.rank0.json" "$tmp/dir/timeline.rank1.json" --hook
run "{rank} in the name" "$tmp/t-{rank}" allreduce "$tmp/t-0" "$tmp/t-1"

# Unwritable: every rank fails at construction (an InvalidArgument whose
# operation is the variable and its value), naming its own file (rank 0's
# with the OS's reason).
DDP_TIMELINE=$tmp/missing/t.json timeout -s KILL 120 "$ddprun" --nproc-per-node 2 "$job" >"$tmp/unwritable" 2>&1
got=$?
variable="DDP_TIMELINE=$tmp/missing/t.json"
if [ "$got" -ne 0 ] &&
   ddp_error "$tmp/unwritable" type=InvalidArgument rank=0 "operation=$variable" &&
   ddp_error "$tmp/unwritable" "at=rank 0: $variable" "shows='$tmp/missing/t.rank0.json'" \
     "shows=No such file or directory" &&
   ddp_error "$tmp/unwritable" type=InvalidArgument rank=1 "operation=$variable" &&
   ddp_error "$tmp/unwritable" "at=rank 1: $variable" "shows='$tmp/missing/t.rank1.json'"; then
  ok "an unwritable DDP_TIMELINE fails on every rank, naming the variable and the file"
else
  not_ok "an unwritable DDP_TIMELINE (exit $got)"; head -20 "$tmp/unwritable"
fi
exit $failed
