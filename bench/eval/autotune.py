"""`bench/evaluate.py autotune`: bucket autotuning (bucket_cap_mb "auto")
against the exhaustive sweep of the paper's sizes (1, 2, 5, 10, 25, 50 and
100 MiB), per model and link. Each round runs every size and "auto" once,
as `ddp_bench train --impls ddp` on 2 ranks, their order rotated round by
round; "auto" gets enough untimed iterations first for its trials (at most
20) to end, so its timed ones run on the size it settled on.

For each (model, link): the sweep's median iteration time per size (median
over rounds of each run's median), the best size, what "auto" chose in each
round and that size's sweep time against the best one's (the choice's
quality, the target: within 3 %), and the auto runs' own time against the
best size's and against 25 MiB's, paired by round (the target against
25 MiB: at most 1 % slower).

Output, in --out (default bench/results): autotune.jsonl (one line per
run: its identity, median and samples, and auto's trials), autotune.md
(the table of docs/benchmarks.md, "Bucket autotuning"), autotune.txt (the
log). `--add` runs more rounds (or models) onto a kept autotune.jsonl and
reports them all; `--report` only writes the table again.
"""

import json
import os
import statistics

from harness import FIXED_MALLOC_NOTE, die, Log, md_table, paired_ratio, results_dir, \
    run_arguments, run_bounded, side_order, Snapshot

SIZES = ("1", "2", "5", "10", "25", "50", "100")
# The first iteration, at most 20 trials and the one that settles, and one
# to spare.
AUTO_WARMUP = 23


def add_parser(sub):
    p = sub.add_parser("autotune", help="bucket_cap_mb auto against the sweep of 1..100 MiB")
    p.add_argument("--models", default="mlp,resnet18,bert_base",
                   help="ddp_bench models (default %(default)s)")
    p.add_argument("--links", default="loopback,1g",
                   help="loopback and/or rates for bench/netem (default %(default)s)")
    p.add_argument("--rounds", type=int, default=2, help="rounds (default %(default)s)")
    p.add_argument("--iters", type=int, default=10,
                   help="timed iterations per run (default %(default)s)")
    p.add_argument("--warmup", type=int, default=3,
                   help="untimed iterations of a fixed size first (default %%(default)s; "
                        "auto gets %d)" % AUTO_WARMUP)
    p.add_argument("--add", action="store_true",
                   help="keep the runs already in --out's autotune.jsonl (e.g. a model run with "
                        "other --rounds) and report them with the new ones")
    p.add_argument("--report", action="store_true",
                   help="no runs: the table again from --out's autotune.jsonl")
    run_arguments(p, "autotune", 900, "the MLP on loopback, 1 and 25 MiB and auto, 1 round of 2 "
                  "iterations")
    p.set_defaults(run=run_autotune)


def run_one(snap, log, env, args, model, link, side, tag):
    """One `ddp_bench train` run; its rank 0 JSON with the run's identity."""
    path = os.path.join(snap.dir, "run.json")
    warmup = AUTO_WARMUP if side == "auto" else args.warmup
    cmd = snap.launcher(link, 2) + [
        snap.bench, "train", "--model", model, "--world-size", "2", "--impls", "ddp",
        "--bucket-cap-mb", side, "--iters", str(args.iters), "--warmup", str(warmup),
        "--tag", tag, "--json", path]
    status, text = run_bounded(cmd, env, args.timeout)
    log.output(text)
    if status or not os.path.exists(path):
        die("autotune: %s on %s, bucket_cap_mb %s failed with status %d; see %s"
            % (model, link, side, status, log.path))
    with open(path) as f:
        doc = json.load(f)
    os.remove(path)
    row = [r for r in doc["rows"] if r["impl"] == "ddp"][0]
    tuning = row.get("bucket_tuning")
    if side == "auto" and not (tuning and tuning["settled"]):
        die("autotune: %s on %s: auto had not settled after %d iterations; see %s"
            % (model, link, warmup, log.path))
    return {"model": model, "link": link, "side": side, "round": tag, "median_ms": row["median_ms"],
            "samples_ms": row["samples_ms"], "bucket_tuning": tuning}


def summarize(runs):
    """One table row per (model, link) and the numbers behind it."""
    out = []
    for model, link in sorted({(r["model"], r["link"]) for r in runs},
                              key=lambda k: (k[1] != "loopback", k)):
        sel = [r for r in runs if (r["model"], r["link"]) == (model, link)]
        by_side = {}
        for r in sel:
            by_side.setdefault(r["side"], {})[r["round"]] = r["median_ms"]
        sweep = {s: statistics.median(v.values()) for s, v in by_side.items() if s != "auto"}
        best = min(sweep, key=sweep.get)
        chosen = [r["bucket_tuning"]["cap_bytes"] / 2**20 for r in sel if r["side"] == "auto"]
        chosen_ms = [sweep.get("%g" % c) for c in chosen]
        quality = [c / sweep[best] for c in chosen_ms if c]
        vs_best, _ = paired_ratio(by_side["auto"], by_side[best])
        vs_default, _ = paired_ratio(by_side["auto"], by_side.get("25", {}))
        trials = [r["bucket_tuning"]["trial_iterations"] for r in sel if r["side"] == "auto"]
        out.append({"model": model, "link": link, "sweep_ms": sweep, "best": best,
                    "auto_ms": statistics.median(by_side["auto"].values()),
                    "chosen_mib": chosen, "chosen_vs_best": quality, "auto_vs_best": vs_best,
                    "auto_vs_25": vs_default, "trial_iterations": trials})
    return out


def table(summary):
    rows = []
    for s in summary:
        sweep = " / ".join("%.0f" % s["sweep_ms"][k] if k in s["sweep_ms"] else "–"
                           for k in SIZES)
        rows.append([s["model"], s["link"], sweep, s["best"],
                     ", ".join("%g" % c for c in s["chosen_mib"]),
                     ", ".join("%.3f" % q for q in s["chosen_vs_best"]),
                     "%.0f" % s["auto_ms"],
                     "%.3f" % s["auto_vs_best"] if s["auto_vs_best"] else "–",
                     "%.3f" % s["auto_vs_25"] if s["auto_vs_25"] else "–",
                     ", ".join(str(t) for t in s["trial_iterations"]),
                     "%d of %d" % (sum(q <= 1.03 for q in s["chosen_vs_best"]),
                                   len(s["chosen_vs_best"])),
                     "–" if not s["auto_vs_25"] else "met" if s["auto_vs_25"] <= 1.01 else
                     "missed by %.1f %%" % (100 * (s["auto_vs_25"] - 1.01))])
    return md_table(["model", "link", "sweep ms at " + " / ".join(SIZES) + " MiB", "best MiB",
                     "auto chose MiB (per round)", "chosen's sweep ms / best's",
                     "auto ms", "auto / best", "auto / 25 MiB", "trial iterations",
                     "choices within 3 % of the best", "auto at most 1 % slower than 25 MiB"],
                    rows)


def run_autotune(args):
    sizes = SIZES
    if args.quick:
        args.models, args.links, args.rounds, args.iters, args.warmup = \
            "mlp", "loopback", 1, 2, 1
        sizes = ("1", "25")
    results_dir(args, "autotune")
    base = os.path.join(args.out, "autotune")
    log = Log(base + ".txt", append=args.add or args.report)
    runs = []
    if args.report:
        with open(base + ".jsonl") as f:
            runs = [json.loads(line) for line in f if line.strip()]
        return write_report(base, runs, FIXED_MALLOC_NOTE, log)
    if args.add and os.path.exists(base + ".jsonl"):
        with open(base + ".jsonl") as f:
            runs = [json.loads(line) for line in f if line.strip()]
    sides = list(sizes) + ["auto"]
    with Snapshot(args.build) as snap:
        env = dict(snap.env, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
        env.pop("DDP_BUCKET_CAP_MB", None)
        with open(base + ".jsonl", "a" if args.add else "w") as jsonl:
            for link in args.links.split(","):
                for model in args.models.split(","):
                    done = len({r["round"] for r in runs
                                if (r["model"], r["link"]) == (model, link)})  # --add
                    for r in range(done, done + args.rounds):
                        for side in side_order(sides, r):
                            log.say("%s on %s, round %d/%d: bucket_cap_mb %s (load %s)"
                                    % (model, link, r + 1, done + args.rounds, side, log.load()))
                            run = run_one(snap, log, env, args, model, link, side,
                                          "round %d" % (r + 1))
                            jsonl.write(json.dumps(run) + "\n")
                            jsonl.flush()
                            runs.append(run)
    write_report(base, runs, snap.malloc_note, log)


def write_report(base, runs, malloc_note, log):
    def shape(model, link):
        sel = [r for r in runs if (r["model"], r["link"]) == (model, link)]
        return "%s %s: %d x %d" % (model, link, len({r["round"] for r in sel}),
                                   min(len(r["samples_ms"]) for r in sel))
    shapes = ", ".join(shape(m, l) for m, l in sorted({(r["model"], r["link"]) for r in runs}))
    text = ("Rounds x timed iterations per run: %s (auto after %d untimed iterations, the sizes "
            "after a few); 2 ranks, ddp_bench train --impls ddp, each run alone, sizes and auto "
            "rotated round by round. %s.\n\n" % (shapes, AUTO_WARMUP, malloc_note)) + \
        table(summarize(runs)) + "\n"
    with open(base + ".md", "w") as f:
        f.write(text)
    log.say("wrote %s.md, %s.jsonl" % (base, base))
    print(text)
