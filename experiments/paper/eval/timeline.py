#!/usr/bin/python3
"""Timelines of training iterations: the blog's columns, and Chrome traces.

A row's "timeline" in the JSON of `ddp_bench train --timeline`, `paper_bench
variants` and `bench/pytorch_ddp_train.py --timeline` is a list of the
library's Chrome trace events (src/timeline/chrome_trace.h, as DDP_TIMELINE writes
them; bench/timeline.h records them): "X" events with cat = lane
("compute": the training thread; "comm": a collective from launch to
completion, args.blocking where the training thread waited in it;
"iteration": the iteration itself), ts/dur in µs, args.iteration.

The columns, per iteration of duration T, events clipped to it:

    C* = union of the compute events, minus the blocking communication
         events (the training thread waits in them)
    M  = union of the communication events (launch to completion)
    compute %        |C*| / T
    non-compute %    |M minus C*| / T   communication nothing hides
    idle %           100 - compute % - non-compute %
    overlap %        |C* ∩ M| / |M|     share of communication hidden by compute
    comm overhead %  |M| / T
    allreduce calls  communication events named "allreduce..." per iteration
    allreduce ms     their summed durations (unclipped) per iteration

T and the lengths are summed over the iterations given. Other collectives
(DDP's "broadcast buffers") count in M, not in the allreduce columns.

    experiments/paper/evaluate.py timeline RUN.json [--row NAME] [--iteration K] [--trace OUT.json]

prints the columns of every row with a timeline in RUN.json and, with
--trace, writes iteration K (default 0) of the row as a Chrome trace (open
in chrome://tracing or https://ui.perfetto.dev).
"""

import argparse
import json
import sys


def iterations(events):
    """The iterations of a row's trace events, in order: {"iteration",
    "duration_us", "events": [{"lane", "name", "start_us", "end_us",
    "blocking"}] (times from the iteration's start), "trace": its own trace
    events, "metadata": the rows' names}."""
    metadata = [e for e in events if e.get("ph") == "M"]
    by_k = {}
    for e in events:
        if e.get("ph") == "X":
            by_k.setdefault(e["args"]["iteration"], []).append(e)
    out = []
    for k in sorted(by_k):
        own = by_k[k]
        it = next(e for e in own if e["cat"] == "iteration")
        t0 = it["ts"]
        out.append({"iteration": k, "duration_us": it["dur"], "trace": own, "metadata": metadata,
                    "events": [{"lane": e["cat"], "name": e["name"], "start_us": e["ts"] - t0,
                                "end_us": e["ts"] - t0 + e["dur"],
                                "blocking": bool(e["args"].get("blocking"))}
                               for e in own if e["cat"] != "iteration"]})
    return out


def union(intervals):
    """Sorted, merged copy of [(start, end), ...]."""
    out = []
    for a, b in sorted(i for i in intervals if i[1] > i[0]):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def length(intervals):
    return sum(b - a for a, b in intervals)


def intersect(x, y):
    """Intersection of two merged interval lists."""
    out, i, j = [], 0, 0
    while i < len(x) and j < len(y):
        a, b = max(x[i][0], y[j][0]), min(x[i][1], y[j][1])
        if a < b:
            out.append((a, b))
        if x[i][1] < y[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(x, y):
    """x minus y, both merged interval lists."""
    out = []
    for a, b in x:
        cur = a
        for c, d in y:
            if d <= cur or c >= b:
                continue
            if c > cur:
                out.append((cur, c))
            cur = max(cur, d)
        if cur < b:
            out.append((cur, b))
    return out


def metrics(iters):
    """The columns over `iters` (iterations() of one or more rows)."""
    total = comp = noncomp = overlap = comm = calls = call_us = 0.0
    for it in iters:
        ev = it["events"]
        t = it["duration_us"]
        span = lambda e: (max(e["start_us"], 0.0), min(e["end_us"], t))  # noqa: E731
        m = union(span(e) for e in ev if e["lane"] == "comm")
        blocking = union(span(e) for e in ev if e["lane"] == "comm" and e["blocking"])
        c = subtract(union(span(e) for e in ev if e["lane"] == "compute"), blocking)
        total += t
        comp += length(c)
        noncomp += length(subtract(m, c))
        overlap += length(intersect(c, m))
        comm += length(m)
        calls_here = [e for e in ev if e["lane"] == "comm" and e["name"].startswith("allreduce")]
        calls += len(calls_here)
        call_us += sum(e["end_us"] - e["start_us"] for e in calls_here)
    n = max(len(iters), 1)
    pct = lambda x: 100.0 * x / total if total else 0.0  # noqa: E731
    return {"compute_pct": pct(comp), "non_compute_pct": pct(noncomp),
            "idle_pct": 100.0 - pct(comp) - pct(noncomp),
            "overlap_pct": 100.0 * overlap / comm if comm else 0.0,
            "comm_overhead_pct": pct(comm), "allreduce_calls": calls / n,
            "allreduce_ms": call_us / n / 1e3, "iteration_ms": total / n / 1e3}


def chrome_trace(iteration, title):
    """One of iterations() as a Chrome trace (a dict to json.dump): its own
    events, as recorded, with the rows' names."""
    return {"traceEvents": iteration["metadata"] + iteration["trace"], "displayTimeUnit": "ms",
            "otherData": {"title": title, "iteration": iteration["iteration"]}}


def rows_with_timelines(run):
    """(name, iterations) of each row of a run's JSON that carries a timeline."""
    for row in run.get("rows", []):
        if row.get("timeline"):
            yield row.get("variant") or row.get("impl"), iterations(row["timeline"])


def main(argv=None):
    p = argparse.ArgumentParser(prog="experiments/paper/evaluate.py timeline",
                                description=__doc__.split("\n")[0])
    p.add_argument("run", help="a run's JSON (ddp_bench train/variants, pytorch_ddp_train.py)")
    p.add_argument("--row", help="the row (impl or variant) for --trace (default: the first)")
    p.add_argument("--iteration", type=int, default=0, help="which timed iteration to trace")
    p.add_argument("--trace", help="write that iteration as a Chrome trace here")
    args = p.parse_args(argv)
    with open(args.run) as f:
        run = json.load(f)
    rows = list(rows_with_timelines(run))
    if not rows:
        sys.exit("timeline.py: %s has no timeline (run with --timeline, or paper_bench variants)"
                 % args.run)
    print("| row | compute % | non-compute % | idle % | overlap % | comm overhead % "
          "| allreduce calls | allreduce ms | iteration ms |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, its in rows:
        m = metrics(its)
        print("| %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f |" % (
            name, m["compute_pct"], m["non_compute_pct"], m["idle_pct"], m["overlap_pct"],
            m["comm_overhead_pct"], m["allreduce_calls"], m["allreduce_ms"], m["iteration_ms"]))
    if args.trace:
        name, its = next(((n, t) for n, t in rows if args.row in (None, n)), (None, None))
        if its is None:
            sys.exit("timeline.py: no row %r with a timeline (rows: %s)"
                     % (args.row, ", ".join(n for n, _ in rows)))
        if not 0 <= args.iteration < len(its):
            sys.exit("timeline.py: --iteration %d: the row has %d timed iterations"
                     % (args.iteration, len(its)))
        side = run.get("side", run.get("benchmark", ""))
        with open(args.trace, "w") as f:
            json.dump(chrome_trace(its[args.iteration], "%s %s" % (side, name)), f)
        print("timeline.py: wrote %s (%s, iteration %d)" % (args.trace, name, args.iteration),
              file=sys.stderr)


if __name__ == "__main__":
    main()
