"""`bench/evaluate.py compression`: adaptive-precision compression
(ddp::adaptive_compression_hook) against fixed levels, on the main job:
examples/train, the small CNN on Fashion-MNIST, 2 ranks on this host, its
default epochs, batch and learning rate. Each run trains through the hook
with `--compress LEVELS` ("full" is the fp32 allreduce: the same gradients as
no hook, with its bytes counted); per seed (the model's initial
parameters), the configurations run in an order rotated seed by seed.

Output, in --out (default bench/results): compression.jsonl (one line per
run: held-out accuracy, bytes sent and what fp32 would have sent, training
seconds, reductions per level, switches), compression.md (the table of
docs/benchmarks.md, "Adaptive-precision compression"), compression.png
(accuracy against bytes sent, with --plot), compression.txt (the log).
"""

import json
import os
import re
import shutil
import statistics

from harness import built_program, die, Log, md_table, results_dir, run_arguments, run_bounded, \
    side_order, Snapshot

# Fixed levels, the default ladder, and a ladder down to PowerSGD rank 1
# (where Accordion's premise, aggressive compression only while training is
# steady, matters most).
CONFIGS = ("full", "fp16", "powersgd:1", "powersgd:4", "adaptive",
           "full,fp16,powersgd:4,powersgd:1")
FINAL = re.compile(r"accuracy ([0-9.]+)% .*\| (\d+) steps in ([0-9.]+) s")
SENT = re.compile(r"--compress (\S+): sent (\d+) bytes of (\d+) .*reductions: (.*); "
                  r"(\d+) switches \((\d+) critical\)")


def add_parser(sub):
    p = sub.add_parser("compression", help="adaptive compression against fp32, fp16 and PowerSGD "
                       "on the main job (Fashion-MNIST)")
    p.add_argument("--seeds", default="1,2,3", help="model seeds, one run of each configuration "
                   "per seed (default %(default)s)")
    p.add_argument("--configs", default=";".join(CONFIGS), help="--compress values, "
                   "separated by ';' (default %(default)s)")
    p.add_argument("--epochs", type=int, default=4, help="epochs per run (default %(default)s, "
                   "the main job's)")
    run_arguments(p, "compression", 900, "one seed, one epoch")
    p.add_argument("--plot", action="store_true", help="also draw compression.png "
                   "(needs matplotlib: Debian's /usr/bin/python3)")
    p.set_defaults(run=run_compression)


def parse_run(text):
    """Rank 0's final lines as a row, or None."""
    row = {}
    for line in text.splitlines():
        line = line[len("[rank 0] "):] if line.startswith("[rank 0] ") else line
        if line.startswith("final: last epoch"):
            m = FINAL.search(line)
            if m:
                row.update(accuracy=float(m.group(1)), steps=int(m.group(2)),
                           train_s=float(m.group(3)))
        m = SENT.search(line)
        if line.startswith("final: --compress") and m:
            row.update(bytes_sent=int(m.group(2)), bytes_fp32=int(m.group(3)),
                       reductions=m.group(4), switches=int(m.group(5)), critical=int(m.group(6)))
    return row if "accuracy" in row and "bytes_sent" in row else None


def table(rows):
    configs = []
    for r in rows:
        if r["config"] not in configs:
            configs.append(r["config"])
    base = [r for r in rows if r["config"] == "full"]
    base_acc = statistics.mean(r["accuracy"] for r in base) if base else float("nan")
    out = []
    for c in configs:
        sel = sorted((r for r in rows if r["config"] == c), key=lambda r: r["seed"])
        acc = statistics.mean(r["accuracy"] for r in sel)
        sent = statistics.mean(r["bytes_sent"] / r["bytes_fp32"] for r in sel)
        out.append([c, "%.2f" % acc, ", ".join("%.2f" % r["accuracy"] for r in sel),
                    "%+.2f" % (acc - base_acc), "%.3f" % sent,
                    "%.1f" % statistics.median(r["train_s"] for r in sel),
                    "%.1f" % statistics.mean(r["switches"] for r in sel), sel[0]["reductions"]])
    return md_table(["--compress", "accuracy % (mean)", "each seed", "vs full",
                     "bytes vs fp32", "train s (median)", "switches", "reductions per level "
                     "(first seed)"], out)


def plot(rows, png_path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        die("compression: --plot needs matplotlib: run bench/evaluate.py with Debian's "
            "/usr/bin/python3 (python3-matplotlib)")
    fig, ax = plt.subplots(figsize=(7, 4))
    configs = []
    for r in rows:
        if r["config"] not in configs:
            configs.append(r["config"])
    for c in configs:
        sel = [r for r in rows if r["config"] == c]
        xs = [r["bytes_sent"] / r["bytes_fp32"] for r in sel]
        ys = [r["accuracy"] for r in sel]
        ax.scatter(xs, ys, label=c, alpha=0.6)
        ax.scatter([statistics.mean(xs)], [statistics.mean(ys)], marker="x", s=80, color="black")
    ax.set_xscale("log")
    ax.axvline(1 / 3, color="grey", linestyle="--", linewidth=1)
    ax.set_xlabel("bytes sent / fp32 allreduce's (log; dashed: 1/3)")
    ax.set_ylabel("held-out accuracy, % (x: mean over seeds)")
    ax.set_title("Fashion-MNIST CNN, 2 ranks: accuracy against bytes sent")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(png_path, dpi=110)


def run_compression(args):
    seeds = [int(s) for s in args.seeds.split(",")]
    configs = args.configs.split(";")
    if args.quick:
        seeds, args.epochs = seeds[:1], 1
    results_dir(args, "compression")
    train = built_program(args.build, os.path.join("examples", "train"), "train")
    base = os.path.join(args.out, "compression")
    log = Log(base + ".txt")
    rows = []
    with Snapshot(args.build) as snap:
        shutil.copy2(train, snap.dir)
        env = dict(snap.env, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
        for i, seed in enumerate(seeds):
            for config in side_order(configs, i):
                cmd = snap.ddprun_cmd(2) + [
                    os.path.join(snap.dir, "train"), "--compress", config, "--seed", str(seed),
                    "--epochs", str(args.epochs), "--log-every", "1000000",
                    "--checkpoint", os.path.join(snap.dir, "checkpoint.pt")]
                log.say("seed %d: --compress %s" % (seed, config))
                status, text = run_bounded(cmd, env, args.timeout)
                log.output(text)
                row = parse_run(text)
                if status or not row:
                    die("compression: seed %d, --compress %s failed with status %d; see %s"
                        % (seed, config, status, log.path))
                row.update(config=config, seed=seed, epochs=args.epochs)
                rows.append(row)
    with open(base + ".jsonl", "w") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)
    md = table(rows)
    with open(base + ".md", "w") as f:
        f.write(md + "\n")
    if args.plot:
        plot(rows, base + ".png")
    print(md)
    return 0
