#!/usr/bin/python3
"""`experiments/paper/evaluate.py paper`: the paper's §5 experiments and the
blog's six-variant table, for ddp and PyTorch's DDP in the same run, on
loopback and on shaped links; then the report (report.py: JSON, PNGs,
markdown). From the repository's root:

    experiments/paper/evaluate.py paper --preset quick   # under 15 minutes on a 2-core machine
    experiments/paper/evaluate.py paper --preset full    # adds ResNet-50 and BERT-base, more rounds
    experiments/paper/evaluate.py paper --preset quick --experiments 2,7 --links 10g --docs ''
    experiments/paper/evaluate.py paper --quick          # the smoke preset: every experiment, tiny

Experiments (numbers as in docs/experiments/paper-evaluation.md):
  1 split      allreduce of T float32 split into tensors of 1K..T elements, all
               launched then waited (Fig. 2): ddp vs c10d's ProcessGroupGloo
               (paper_bench split)
  2 breakdown  forward / backward compute / communication / optimizer, with
               and without overlap (Fig. 6); the latency targets
  3 buckets    bucket cap 0..200 MB, per-iteration latency (Fig. 7/8)
  4 scaling    1..N ranks, latency and efficiency (Fig. 9)
  5 nosync     no_sync every 1, 2, 4, 8 micro-batches: latency (Fig. 10) and
               loss on sklearn's digits (Fig. 11)
  6 roundrobin 1, 3, 5 Gloo groups round-robin (Fig. 12)
  7 variants   the blog's five hand-written variants, ddp and PyTorch's DDP,
               with compute / non-compute / idle / overlap from timelines
  8 hooks      iteration time and bytes per iteration for each hook

Method (docs/experiments/paper-evaluation.md): every configuration runs once per side per
round, the two sides alternating (round 1: ddp first, round 2: PyTorch
first, ...); inside a run the measurements interleave by iteration; one
intra-op thread per rank; a sample is the slowest rank's time. The code under
test is a snapshot of ddp_bench, paper_bench, libddp and ddprun taken at the
start (bench/eval/harness.py's Snapshot). Shaped links come from bench/netem
(network namespaces, veth, tc tbf); without root it falls back to loopback
and the link recorded says so.

Output: DIR/runs.json (every run: experiment, link, side, model, parameters,
round, its JSON, status), DIR/meta.json, the runs' JSON under DIR/runs/,
DIR/log.txt, and what report.py writes (DIR/report.md, DIR/expN-*.png/json,
DIR/traces/); with --docs (default docs/experiments/paper-evaluation.md) the
report replaces the evaluation section there and its images go to
docs/img/eval/. DIR defaults to experiments/paper/results/eval-<preset>,
which git ignores.
"""

import argparse
import gzip
import json
import os
import re
import shutil
import subprocess
import time

from harness import PLOT_PYTHON, REPO, Log, Snapshot, die, git_description, quick_out, \
    reference_python, require_python, run_bounded, side_order
import models_check
from presets import PRESETS

NETEM_COUNTS = re.compile(r"netem: node \d+ \S+: \d+ bytes sent")
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # experiments/paper
DIGITS_GZ = "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz"
EXPERIMENTS = {1: "split", 2: "breakdown", 3: "buckets", 4: "scaling", 5: "nosync",
               6: "roundrobin", 7: "variants", 8: "hooks"}


class Context:
    def __init__(self, args, preset, snap, log):
        self.out = args.out
        self.preset = preset
        self.snap = snap
        self.bench, self.ddprun, self.env = snap.bench, snap.ddprun, snap.env
        self.paper_bench = os.path.join(snap.dir, "paper_bench")
        self.log = log
        self.runs = []
        self.failures = 0
        self.alternation = 0

    def run(self, experiment, link, side, model, params, rnd, cmd, json_path, world=2,
            launch=True, bridge=False):
        """Runs one configuration; records it in runs.json whatever happens."""
        rel = os.path.relpath(json_path, self.out)
        full = (self.snap.launcher(link, world, bridge) if launch else []) + cmd
        label = "exp %d %s %s %s %s round %d" % (experiment, link, side, model,
                                                 json.dumps(params, sort_keys=True), rnd)
        self.log.say("%s (load %s)" % (label, self.log.load()))
        t0 = time.time()
        returncode, text = run_bounded(full, self.env, self.preset["run_timeout_s"])
        entry = {"experiment": experiment, "link": link, "side": side, "model": model,
                 "params": params, "round": rnd, "json": rel, "seconds": round(time.time() - t0, 1)}
        # The error's tail, without bench/netem's per-node byte counts, which
        # follow it and would push it out.
        output = [l for l in text.strip().splitlines() if not NETEM_COUNTS.match(l)]
        self.log.output(text)
        self.record(entry, returncode == 0 and os.path.exists(json_path),
                    "\n".join(output[-12:]) or "exit status %d" % returncode, label)
        return entry["status"] == "ok"

    def record(self, entry, ok, error, label):
        """Adds a run to runs.json, failed ones with their error."""
        if ok:
            entry["status"] = "ok"
        else:
            self.failures += 1
            entry.update(status="failed", json=None, error=error)
            self.log.say("%s FAILED: %s" % (label, error.splitlines()[-1] if error else ""))
        self.runs.append(entry)
        with open(os.path.join(self.out, "runs.json"), "w") as f:
            json.dump(self.runs, f, indent=1)

    def path(self, experiment, link, name):
        d = os.path.join(self.out, "runs", "exp%d-%s" % (experiment, EXPERIMENTS[experiment]), link)
        os.makedirs(d, exist_ok=True)
        return os.path.join(d, name + ".json")

    def train_pair(self, experiment, link, model, params, ddp_args, pytorch_args, world=2,
                   iters=None, warmup=None, ddp_impls="ddp,local,allreduce", bridge=False):
        """ddp_bench train and pytorch_ddp_train.py on one configuration, the
        sides alternating round by round."""
        p = self.preset
        common = ["--model", model, "--world-size", str(world),
                  "--iters", str(iters or p["iters"]), "--warmup", str(warmup or p["warmup"])]
        tag = "-".join("%s%s" % (k, v) for k, v in sorted(params.items()))
        for rnd in range(1, p["rounds"] + 1):
            sides = side_order(("ddp", "pytorch"), rnd - 1 + self.alternation)
            for side in sides:
                out = self.path(experiment, link, "%s-%s-%s-r%d" % (model, side, tag, rnd))
                if side == "ddp":
                    cmd = [self.bench, "train"] + common + ["--impls", ddp_impls] + ddp_args
                else:
                    impls = ddp_impls.replace("ddp", "pytorch_ddp").replace("local", "pytorch_local")
                    impls = ",".join(i for i in impls.split(",") if i != "allreduce")
                    cmd = [self.snap.python, os.path.join(REPO, "bench", "pytorch_ddp_train.py")] + \
                        common + ["--impls", impls] + pytorch_args
                self.run(experiment, link, side, model, params, rnd,
                         cmd + ["--tag", "round %d" % rnd, "--json", out], out, world=world,
                         bridge=bridge)
        self.alternation += 1


# --- the experiments ------------------------------------------------------------

def exp_split(ctx, link):
    p = ctx.preset
    out = ctx.path(1, link, "split")
    ctx.run(1, link, "ddp", "-", {"total": p["split_total"]}, 1,
            [ctx.paper_bench, "split", "--total", p["split_total"], "--splits", p["split_sizes"],
             "--rounds", str(p["split_rounds"]), "--json", out], out)


def exp_breakdown(ctx, link):
    for model in ctx.preset["breakdown_models"]:
        ctx.train_pair(2, link, model, {"overlap": True}, [], [])
        # With timelines: PyTorch's logger cannot time a deferring hook's
        # communication (report.py takes it from the timeline); ours for symmetry.
        ctx.train_pair(2, link, model, {"overlap": False}, ["--no-overlap", "--timeline"],
                       ["--no-overlap", "--timeline"], ddp_impls="ddp")


def exp_buckets(ctx, link):
    if link not in ctx.preset["bucket_links"]:
        return
    for model in ctx.preset["bucket_models"]:
        for mb in ctx.preset["buckets_mb"]:
            arg = ["--bucket-cap-mb", str(mb)]
            ctx.train_pair(3, link, model, {"bucket_cap_mb": mb}, arg, arg, ddp_impls="ddp")


def exp_scaling(ctx, link):
    model = ctx.preset["scaling_model"]
    for world in ctx.preset["world_sizes"]:
        if world == 1 and link != "loopback":
            continue  # one rank has no link; the loopback run is the baseline
        # A bridge at every size: the same topology from 2 ranks on.
        ctx.train_pair(4, link, model, {"world_size": world}, [], [], world=world,
                       ddp_impls="ddp", bridge=True)


def exp_nosync(ctx, link):
    p = ctx.preset
    model = p["nosync_model"]
    for k in p["sync_every"]:
        arg = ["--sync-every", str(k)]
        # Fewer iterations for larger K (an iteration is K micro-batches), at
        # least 2: the time per K stays within about twice K=1's.
        iters = max(2, p["iters"] // k)
        ctx.train_pair(5, link, model, {"sync_every": k}, arg, arg, iters=iters,
                       warmup=1, ddp_impls="ddp")


def exp_converge(ctx):
    """Fig. 11: loss against micro-batch on sklearn's digits, on loopback (the
    link does not change the loss)."""
    p = ctx.preset
    data = os.path.join(ctx.snap.dir, "digits.csv")
    error = None if os.path.exists(data) else write_digits_csv(data)
    if error:
        for side in ("ddp", "pytorch"):
            ctx.record({"experiment": 5, "link": "loopback", "side": side,
                        "model": "digits_mlp", "params": {"kind": "converge"}, "round": 1,
                        "json": None, "seconds": 0}, False,
                       "no digits data: " + error, "exp 5 loss (digits)")
        return
    ks = ",".join(str(k) for k in p["sync_every"])
    common = ["--data", data, "--sync-every", ks, "--steps", str(p["converge_steps"])]
    for side in ("ddp", "pytorch"):
        out = ctx.path(5, "loopback", "converge-" + side)
        cmd = ([ctx.paper_bench, "converge"] if side == "ddp"
               else [ctx.snap.python, os.path.join(HERE, "pytorch_converge.py")])
        ctx.run(5, "loopback", side, "digits_mlp", {"kind": "converge"}, 1,
                cmd + common + ["--json", out], out)


def exp_roundrobin(ctx, link):
    model = ctx.preset["rr_model"]
    for g in ctx.preset["process_groups"]:
        arg = ["--process-groups", str(g)]
        ctx.train_pair(6, link, model, {"process_groups": g}, arg, arg, ddp_impls="ddp")


def exp_variants(ctx, link):
    """The five variants and ddp interleave round by round inside one run;
    PyTorch's DDP runs the same micro-batches (accumulating 2) in its own."""
    p = ctx.preset
    model = p["variants_model"]
    out = ctx.path(7, link, "variants-ddp")
    ctx.run(7, link, "ddp", model, {"variants": "all"}, 1,
            [ctx.paper_bench, "variants", "--model", model, "--iters", str(p["variants_iters"]),
             "--rounds", str(p["rounds"]), "--warmup", "1", "--accum", "2", "--json", out], out)
    out = ctx.path(7, link, "variants-pytorch")
    ctx.run(7, link, "pytorch", model, {"variant": "pytorch_ddp"}, 1,
            [ctx.snap.python, os.path.join(REPO, "bench", "pytorch_ddp_train.py"), "--model", model,
             "--world-size", "2", "--iters", str(p["variants_iters"] * p["rounds"] // 2),
             "--warmup", "2", "--sync-every", "2", "--impls", "pytorch_ddp", "--timeline",
             "--json", out], out)


def exp_hooks(ctx, link):
    model = ctx.preset["hooks_model"]
    for hook in ctx.preset["hooks"]:
        arg = ["--hook", hook]
        # PowerSGD starts compressing at iteration 2: keep the warm-up past it.
        ctx.train_pair(8, link, model, {"hook": hook}, arg, arg, warmup=3, ddp_impls="ddp")


def model_check(ctx, models):
    """C++ and Python models: same parameter names, shapes and order (and
    whether the initial weights match): models_check.py."""
    result = {}
    for model in models:
        check = models_check.compare(ctx.bench, ctx.snap.python, ctx.env, model)
        if not check["same_structure"]:
            die("the C++ and Python %s: %s; refusing to compare them"
                % (model, models_check.describe(check)))
        result[model] = {k: check[k] for k in ("same_structure", "same_initial_weights",
                                               "tensors", "parameters")}
        ctx.log.say("model %s: same structure in C++ and Python (%d tensors), initial weights %s"
                    % (model, check["tensors"],
                       "equal" if check["same_initial_weights"] else "differ"))
    return result


def add_parser(subparsers):
    p = subparsers.add_parser("paper", help="the paper's §5 experiments and the blog's variants, "
                              "against PyTorch's DDP, with the report",
                              description=__doc__.split("\n")[0],
                              formatter_class=argparse.RawDescriptionHelpFormatter,
                              epilog=__doc__.split("\n", 2)[2])
    p.add_argument("--preset", choices=sorted(PRESETS), default="quick")
    p.add_argument("--quick", action="store_true",
                   help="the smoke preset (every experiment once, as small as it goes), docs "
                        "untouched, results in %s unless --out" % quick_out("paper"))
    p.add_argument("--experiments", default="1,2,3,4,5,6,7,8",
                   help="which experiments (numbers, comma-separated)")
    p.add_argument("--links", help="override the preset's links (loopback and tc rates/presets "
                                   "such as 1g, 10g, 25g)")
    p.add_argument("--rounds", type=int, help="override the preset's rounds")
    p.add_argument("--models", help="override every experiment's models (comma-separated)")
    p.add_argument("--out", help="results directory (default "
                                 "experiments/paper/results/eval-<preset>)")
    p.add_argument("--build", default=os.path.join(REPO, "build"))
    p.add_argument("--add", action="store_true",
                   help="add these runs to an existing results directory (e.g. the big models "
                        "to a quick run) instead of starting it afresh; the report covers all")
    p.add_argument("--docs", default=os.path.join(REPO, "docs", "experiments",
                                                  "paper-evaluation.md"),
                   help="markdown file whose evaluation section is replaced ('' for none)")
    p.set_defaults(run=run)
    return p


def configure(args):
    """The preset with the command line's overrides, and the experiments wanted."""
    if args.quick:
        args.preset, args.docs = "smoke", ""
        args.out = args.out or quick_out("paper")
    preset = dict(PRESETS[args.preset])
    if args.links:
        preset["links"] = args.links.split(",")
        preset["bucket_links"] = [l for l in preset["bucket_links"] if l in preset["links"]] or \
            preset["links"][-1:]
    if args.rounds:
        preset["rounds"] = args.rounds
    if args.models:
        models = args.models.split(",")
        preset["breakdown_models"] = preset["bucket_models"] = models
        for key in ("scaling_model", "nosync_model", "rr_model", "variants_model", "hooks_model"):
            preset[key] = models[0]
    try:
        wanted = sorted({int(x) for x in args.experiments.split(",")})
    except ValueError:
        die("paper: --experiments takes numbers such as 1,2,7")
    if not set(wanted) <= set(EXPERIMENTS):
        die("paper: experiments are 1..8")
    args.out = args.out or os.path.join(HERE, "results", "eval-" + args.preset)
    return preset, wanted


def run(args):
    preset, wanted = configure(args)
    previous = None
    if args.add:
        try:
            with open(os.path.join(args.out, "meta.json")) as f:
                previous = json.load(f)
            with open(os.path.join(args.out, "runs.json")) as f:
                previous_runs = json.load(f)
        except (OSError, ValueError) as e:
            die("--add needs a finished evaluation in %s: %s" % (args.out, e))
    elif os.path.exists(os.path.join(args.out, "runs")):
        shutil.rmtree(os.path.join(args.out, "runs"))
    os.makedirs(args.out, exist_ok=True)
    log = Log(os.path.join(args.out, "log.txt"), append=args.add)
    require_python(reference_python(args.build))
    require_python(PLOT_PYTHON, "matplotlib")

    with Snapshot(args.build, extra=[("experiments/paper/paper_bench", "paper_bench")]) as snap:
        ctx = Context(args, preset, snap, log)
        if previous:
            ctx.runs = previous_runs
        started = time.time()
        git = git_description()
        log.say("preset %s, experiments %s, links %s; git %s" % (
            args.preset, ",".join(map(str, wanted)), ",".join(preset["links"]), git))
        models = sorted({m for key in ("breakdown_models", "bucket_models") for m in preset[key]} |
                        {preset[k] for k in ("scaling_model", "nosync_model", "rr_model",
                                             "variants_model", "hooks_model")})
        meta = {"preset": args.preset, "links": preset["links"], "experiments": wanted,
                "config": preset, "git": git,
                "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "model_check": model_check(ctx, models), "notes": []}
        for n in wanted:
            for link in preset["links"]:
                globals()["exp_" + EXPERIMENTS[n]](ctx, link)
            if n == 5:
                exp_converge(ctx)
        meta["finished_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        meta["seconds"] = round(time.time() - started)
        if previous:  # the first run's description, and what was added when
            note = "added %s: experiments %s, models %s, links %s, git %s, %d s" % (
                meta["started_utc"], ",".join(map(str, wanted)), args.models or "the preset's",
                ",".join(preset["links"]), meta["git"], meta["seconds"])
            previous["model_check"].update(meta["model_check"])
            previous["experiments"] = sorted(set(previous["experiments"]) | set(wanted))
            previous["links"] += [l for l in preset["links"] if l not in previous["links"]]
            previous["notes"].append(note)
            previous["finished_utc"] = meta["finished_utc"]
            previous["seconds"] = previous.get("seconds", 0) + meta["seconds"]
            meta = previous
        for entry in ctx.runs:  # the machine, from the first run that recorded it
            if entry["status"] == "ok":
                with open(os.path.join(args.out, entry["json"])) as f:
                    machine = json.load(f).get("machine")
                if machine:
                    meta["machine"] = machine
                    break
        with open(os.path.join(args.out, "meta.json"), "w") as f:
            json.dump(meta, f, indent=1)
        log.say("%d runs, %d failed, %d s" % (len(ctx.runs), ctx.failures,
                                             round(time.time() - started)))
    return report(args.out, args.docs)


def report(out, docs):
    """report.py on a results directory; with `docs`, into that markdown file."""
    cmd = [PLOT_PYTHON, os.path.join(HERE, "eval", "report.py"), out]
    if docs:
        cmd += ["--docs", docs, "--images", os.path.join(REPO, "docs", "img", "eval")]
    return subprocess.run(cmd).returncode


def write_digits_csv(out, src=None):
    """scikit-learn's "digits" (1797 real 8x8 handwritten digits, UCI; 64 pixel
    values 0..16 then the label per row) as plain CSV for `paper_bench
    converge --data` and experiments/paper/pytorch_converge.py --data, which
    cannot read the gzip file Debian's python3-sklearn ships. No network.
    Returns an error or None."""
    src = src or os.environ.get("DIGITS_CSV_GZ", DIGITS_GZ)
    try:
        with gzip.open(src, "rt") as f:
            text = f.read()
    except OSError as e:
        return "%s: %s: install Debian's python3-sklearn (apt-get install -y python3-sklearn, " \
               "or scripts/install-deps.sh)" % (src, e.strerror or e)
    rows = text.count("\n")
    if rows != 1797:
        return "%s has %d rows, expected 1797" % (src, rows)
    tmp = "%s.tmp.%d" % (out, os.getpid())
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, out)
    return None

