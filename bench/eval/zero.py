"""`bench/evaluate.py zero`: ZeroRedundancyOptimizer against unsharded Adam,
ours (bench/zero_bench.cpp) and PyTorch's (bench/pytorch_zero.py), with and
without overlap_with_ddp, on loopback with Gloo on both sides. Per world
size, each round runs the five once, their order rotated round by round. PyTorch's overlap_with_ddp refuses Gloo ("requires NCCL/HCCL backend
to avoid hangs", 1.13): it has no overlap run.

Output, in --out (default bench/results): zero-loopback.jsonl (rank 0's
line of every run), zero-loopback.md (the table of docs/benchmarks.md,
"ZeRO"), zero-loopback.txt (the log).
"""

import json
import os
import shutil
import statistics

from harness import REPO, built_program, die, Log, md_table, reference_python, require_python, \
    results_dir, run_arguments, run_bounded, side_order, Snapshot

PYTORCH_ZERO = os.path.join(REPO, "bench", "pytorch_zero.py")
RUNS = ("ddp adam", "ddp zero", "ddp zero-overlap", "pytorch adam", "pytorch zero")


def add_parser(sub):
    p = sub.add_parser("zero", help="ZeRO against unsharded Adam, ours and PyTorch's, alternated")
    p.add_argument("--worlds", default="2,4", help="world sizes (default %(default)s)")
    p.add_argument("--rounds", type=int, default=3, help="rounds (default %(default)s)")
    p.add_argument("--iters", type=int, default=10, help="timed iterations (default %(default)s)")
    run_arguments(p, "zero", 600, "world 2, 1 round of 2 iterations")
    p.set_defaults(run=run_zero)


def table(rows):
    out = []
    for world, impl, opt in sorted({(r["world"], r["impl"], r["optimizer"]) for r in rows}):
        sel = [r for r in rows if (r["world"], r["impl"], r["optimizer"]) == (world, impl, opt)]
        state = sel[0]["state_bytes"]
        plain = [r for r in rows if (r["world"], r["impl"], r["optimizer"]) == (world, impl, "adam")]
        ratio = max(state) / max(plain[0]["state_bytes"]) if plain else float("nan")
        ms = statistics.median(r["iter_ms_median"] for r in sel)
        each = ", ".join("%.1f" % (b / 2**20) for b in state)
        out.append([world, impl, opt, "%.1f (%s)" % (max(state) / 2**20, each), "%.3f" % ratio,
                    "%.1f" % ms])
    return md_table(["world", "side", "optimizer", "state MiB per rank (max; each)",
                     "vs unsharded", "iteration ms (median of rounds)"], out)


def run_zero(args):
    if args.quick:
        args.worlds, args.rounds, args.iters = "2", 1, 2
    results_dir(args, "zero")
    require_python(reference_python(args.build))
    zero_bench = built_program(args.build, os.path.join("bench", "zero_bench"), "zero_bench")
    base = os.path.join(args.out, "zero-loopback")
    log = Log(base + ".txt")
    rows = []
    with Snapshot(args.build) as snap:
        shutil.copy2(zero_bench, snap.dir)
        env = dict(snap.env, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", DDP_BACKEND="gloo")
        for world in [int(w) for w in args.worlds.split(",")]:
            for r in range(args.rounds):
                for run in side_order(RUNS, r):
                    side, optimizer = run.split()
                    program = [os.path.join(snap.dir, "zero_bench")] if side == "ddp" else \
                        [snap.python, PYTORCH_ZERO]
                    cmd = snap.ddprun_cmd(world) + program + \
                        ["--optimizer", optimizer, "--iters", str(args.iters)]
                    log.say("world %d round %d/%d: %s" % (world, r + 1, args.rounds, run))
                    status, text = run_bounded(cmd, env, args.timeout)
                    log.output(text)
                    lines = [l[len("[rank 0] "):] for l in text.splitlines()
                             if l.startswith("[rank 0] {")]
                    if status or not lines:
                        die("zero: world %d, %s failed with status %d; see %s"
                            % (world, run, status, log.path))
                    rows.append(json.loads(lines[-1]))
    with open(base + ".jsonl", "w") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)
    md = table(rows)
    with open(base + ".md", "w") as f:
        f.write(md + "\n")
    print(md)
    return 0
