"""`bench/evaluate.py train | hooks | hierarchical`: ddp against PyTorch's DDP
(and against itself on another backend), the sides alternated run by run
(round 1: ours, PyTorch; round 2: PyTorch, ours; ...; three sides rotate),
each run a fresh job of its own ranks.

  train         `ddp_bench train` against bench/pytorch_ddp_train.py, same
                models, ranks and Gloo; our run also measures the limit
                (local compute alone, the allreduce of all gradient bytes
                alone). --backend picks ours (DDP_BACKEND; mpi runs it under
                mpirun). Tables: train_table.py.
  hooks         the same with a communication hook on both sides
                (`--hook H`), DDP iteration only, and the bytes each rank
                sent per iteration (its veth's tx_bytes; not on loopback).
                Table: hooks_table.py.
  hierarchical  2 nodes x 2 ranks over a shaped link (bench/netem): ddp's
                default backend (hierarchical: shm inside a node, Gloo
                across), ddp on a flat Gloo ring, PyTorch's DDP; with the
                bytes each node sent over the link (tc's counters). --mpi
                adds hierarchical-mpi: the same with Open MPI across hosts
                (DDP_CROSS_BACKEND=mpi, one mpirun: bench/netem --mpirun).

Output, in --out (default bench/results): NAME.json (every run's rows and
the pooled results), NAME.md (the tables), NAME.txt (the log: rank 0's lines
and the launchers'); hooks keeps each run's JSON under hooks-runs/<link>/,
train with --keep-runs under train-runs/<link>/.
"""

import json
import os
import re
import shlex
import statistics
import time

import hooks_table
import train_table
from harness import REPO, alternated, die, git_description, Log, md_table, paired_ratio, \
    reference_python, require_python, results_dir, run_arguments, run_bounded, Snapshot, \
    torch_version, write_json

PYTORCH_TRAIN = os.path.join(REPO, "bench", "pytorch_ddp_train.py")
HOOKS = "none,fp16,bf16,powersgd1,powersgd2,powersgd4,batched_powersgd1"
BATCHED_FAILS = "not run: PyTorch 1.x's batched_powerSGD_hook asserts a 3-D input in " \
                "_orthogonalize"


def common_arguments(p, name, rounds, iters, warmup, timeout):
    p.add_argument("--rounds", type=int, default=rounds,
                   help="alternated rounds (default %(default)s)")
    p.add_argument("--iters", type=int, default=iters,
                   help="timed iterations per run (default %(default)s)")
    p.add_argument("--warmup", type=int, default=warmup,
                   help="untimed iterations per run first (default %(default)s)")
    run_arguments(p, name, timeout, "1 round of 2 timed iterations on the MLP")


def add_parsers(sub):
    p = sub.add_parser("train", help="ddp_bench train against PyTorch's DDP, alternated run by run")
    p.add_argument("--link", default="loopback",
                   help="loopback (default), or a tc rate (1gbit) or preset (1g, 10g): bench/netem")
    p.add_argument("--models", default="mlp,resnet18")
    p.add_argument("--bucket-cap-mb", default="25", help="DDP bucket size on both sides")
    p.add_argument("--world-size", type=int, default=2, help="ranks (a shaped link takes 2)")
    p.add_argument("--backend", help="ours on this backend (DDP_BACKEND: auto, gloo, shm, mpi; "
                   "default ddp's own choice); mpi runs our ranks under mpirun")
    p.add_argument("--malloc", choices=("fixed", "default"), default="fixed",
                   help="fixed: both sides with the same glibc malloc thresholds (default)")
    p.add_argument("--ddp-args", default="", help="extra arguments for `ddp_bench train`")
    p.add_argument("--pytorch-args", default="", help="extra arguments for pytorch_ddp_train.py")
    p.add_argument("--keep-runs", action="store_true", help="keep each run's JSON")
    p.add_argument("--name", help="result files' name (default train[-BACKEND]-LINK)")
    common_arguments(p, "train", rounds=8, iters=10, warmup=2, timeout=600)
    p.set_defaults(run=run_train)

    p = sub.add_parser("hooks", help="communication hooks, ours against PyTorch's of the same name")
    p.add_argument("--link", default="loopback", help="loopback (default) or a rate: bench/netem")
    p.add_argument("--models", default="mlp,resnet18")
    p.add_argument("--hooks", default=HOOKS)
    p.add_argument("--try-pytorch-batched", action="store_true",
                   help="run PyTorch 1.x's batched_powerSGD_hook too (it asserts)")
    common_arguments(p, "hooks", rounds=2, iters=8, warmup=3, timeout=40)
    p.set_defaults(run=run_hooks)

    p = sub.add_parser("hierarchical", help="2 nodes x 2 ranks on a shaped link: hierarchical, "
                       "flat Gloo, PyTorch's DDP")
    p.add_argument("--rate", default="1g", help="the link (bench/netem --rate)")
    p.add_argument("--model", default="mlp")
    p.add_argument("--mpi", action="store_true",
                   help="a fourth side: hierarchical with MPI across hosts, under mpirun")
    common_arguments(p, "hierarchical", rounds=3, iters=10, warmup=2, timeout=600)
    p.set_defaults(run=run_hierarchical)


def quick(args, name):
    """--quick: the smallest configuration that still runs every side."""
    if args.quick:  # what the command line left at its default only
        args.rounds, args.iters, args.warmup = 1, 2, max(1, min(args.warmup, 3))
        if getattr(args, "models", None) == "mlp,resnet18":
            args.models = "mlp"
        if getattr(args, "hooks", None) == HOOKS:
            args.hooks = "none,fp16"
    results_dir(args, name)
    require_python(reference_python(args.build))


class Runs:
    """The runs of one comparison: each bounded by a time limit, its output
    in the log, its JSON in `runs_dir`."""

    def __init__(self, snap, log, timeout_s):
        self.snap, self.log, self.timeout_s = snap, log, timeout_s
        self.started = time.time()

    def run(self, label, cmd, json_path, env=None):
        """(status, output); status 0 only when the run also wrote its JSON."""
        self.log.say("%s (%d s so far, load %s)" % (label, time.time() - self.started,
                                                   self.log.load()))
        environment = dict(self.snap.env, **(env or {}))
        status, text = run_bounded(cmd, environment, self.timeout_s)
        self.log.output(text)
        if status == 0 and not (os.path.exists(json_path) and os.path.getsize(json_path)):
            status, text = 1, text + "\nevaluate: the run wrote no " + json_path
        return status, text


# --- train ----------------------------------------------------------------------

def run_train(args):
    quick(args, "train")
    if args.link != "loopback" and args.world_size != 2:
        die("train: a shaped link (--link %s) runs exactly 2 ranks, one per namespace" % args.link)
    if args.backend == "mpi" and args.link != "loopback":
        die("train: --backend mpi runs under mpirun on this host: --link loopback only")
    name = args.name or "train-%s%s" % (args.backend + "-" if args.backend else "", args.link)
    log = Log(os.path.join(args.out, name + ".txt"))
    with Snapshot(args.build, args.malloc) as snap:
        runs_dir = os.path.join(args.out, "train-runs", args.link) if args.keep_runs else \
            os.path.join(snap.dir, "runs")
        os.makedirs(runs_dir, exist_ok=True)
        log.say("code under test: ddp_bench and libddp built %s, git %s; %s; %s" % (
            snap.built, git_description(), snap.malloc_note, snap.reference))
        runs = Runs(snap, log, args.timeout)
        common = ["--world-size", str(args.world_size), "--iters", str(args.iters),
                  "--warmup", str(args.warmup), "--bucket-cap-mb", args.bucket_cap_mb]
        ours_env = {"DDP_BACKEND": args.backend} if args.backend else {}
        if args.backend == "mpi":
            ours_launch = snap.mpirun_cmd(args.world_size, ours_env, ["--bind-to", "none"])
        else:
            ours_launch = snap.launcher(args.link, args.world_size)
        pytorch_launch = snap.launcher(args.link, args.world_size)
        paths = []
        for model, r, side in alternated(args.models.split(","), args.rounds, ("ddp", "pytorch")):
            json_path = os.path.join(runs_dir, "%s-%s-r%d.json" % (model, side, r))
            tail = ["--model", model] + common + ["--tag", "round %d" % r, "--json", json_path]
            if side == "ddp":
                cmd = ours_launch + [snap.bench, "train"] + tail + shlex.split(args.ddp_args)
            else:
                cmd = pytorch_launch + [snap.python, PYTORCH_TRAIN] + tail + \
                    shlex.split(args.pytorch_args)
            status, _ = runs.run("%s round %d/%d: %s" % (model, r, args.rounds, side), cmd,
                                 json_path, ours_env if side == "ddp" else None)
            if status:
                die("train: %s round %d (%s) failed with status %d; see %s"
                    % (model, r, side, status, log.path))
            paths.append(json_path)
        note = "%d rounds x %d timed iterations (after %d warm-up) per side; %s; %s%s%s%s" % (
            args.rounds, args.iters, args.warmup, snap.reference, snap.malloc_note,
            "; ours on DDP_BACKEND=%s" % args.backend if args.backend else "",
            "; ddp_bench train " + args.ddp_args if args.ddp_args else "",
            "; pytorch_ddp_train.py " + args.pytorch_args if args.pytorch_args else "")
        md, errors = train_table.summarize(paths, args.link, note,
                                           os.path.join(args.out, name + ".json"))
    return finish(log, os.path.join(args.out, name), md, errors)


def finish(log, base, md, errors=()):
    with open(base + ".md", "w") as f:
        f.write(md + "\n")
    log.write(md)
    print(md)
    for e in errors:
        log.say("ERROR: " + e)
    log.say("wrote %s.md, %s.json and %s.txt" % (base, base, base))
    return 1 if errors else 0


# --- hooks ----------------------------------------------------------------------

def run_hooks(args):
    quick(args, "hooks")
    if args.warmup < 3:
        die("hooks: --warmup must be >= 3 (PowerSGD compresses from iteration 2 on)")
    log = Log(os.path.join(args.out, "hooks-%s.txt" % args.link))
    runs_dir = os.path.join(args.out, "hooks-runs", args.link)  # each run's JSON, kept
    os.makedirs(runs_dir, exist_ok=True)
    for f in os.listdir(runs_dir):
        if f.endswith(".json"):
            os.remove(os.path.join(runs_dir, f))
    with Snapshot(args.build) as snap:
        log.say("git %s; link %s; %d rounds x %d timed iterations after %d warm-up" % (
            git_description(), args.link, args.rounds, args.iters, args.warmup))
        runs = Runs(snap, log, args.timeout)
        common = ["--world-size", "2", "--iters", str(args.iters), "--warmup", str(args.warmup)]
        failed = set()  # a model x hook x side that failed is not run again
        batched_asserts = torch_version(snap.python).startswith("1.")
        paths = []
        configs = [(m, h) for m in args.models.split(",") for h in args.hooks.split(",")]
        for (model, hook), r, side in alternated(configs, args.rounds, ("ddp", "pytorch")):
            json_path = os.path.join(runs_dir, "%s-%s-%s-r%d.json" % (model, hook, side, r))
            record = {"side": side, "model": model, "hook": hook}
            if side == "pytorch" and hook == "batched_powersgd1" and batched_asserts and \
                    not args.try_pytorch_batched:
                write_json(json_path, dict(record, failed=BATCHED_FAILS))
                paths.append(json_path)
                continue
            if (model, hook, side) in failed:
                log.say("%s %s round %d: %s skipped (failed in an earlier round)"
                        % (model, hook, r, side))
                continue
            cmd = [snap.bench, "train", "--impls", "ddp"] if side == "ddp" else \
                [snap.python, PYTORCH_TRAIN, "--impls", "pytorch_ddp"]
            cmd = snap.launcher(args.link, 2) + cmd + ["--model", model] + common + \
                ["--hook", hook, "--tag", "round %d" % r, "--json", json_path]
            status, text = runs.run("%s %s round %d/%d: %s" % (model, hook, r, args.rounds, side),
                                    cmd, json_path)
            if status:
                failed.add((model, hook, side))
                record["failed"] = failure(status, text, args.timeout)
                write_json(json_path, record)
                log.say("  FAILED: " + record["failed"])
            paths.append(json_path)
        note = "%d rounds x %d timed iterations (after %d warm-up) per side, hook and model; " \
               "DDP iteration only; %s; %s" % (args.rounds, args.iters, args.warmup,
                                                snap.reference, snap.malloc_note)
        md = hooks_table.summarize(paths, args.link, note,
                                   os.path.join(args.out, "hooks-%s.json" % args.link))
    return finish(log, os.path.join(args.out, "hooks-%s" % args.link), md)


def failure(status, text, timeout_s):
    """What a failed run's JSON says: the status and the first error line."""
    reason = "exit status %d" % status
    if status == 124:
        reason += " (timed out after %d s)" % timeout_s
        if "warm-up" not in text:
            reason += ", not through its warm-up"
    err = next((l for l in text.splitlines() if re.search(r"Error|error|Assert|terminate", l)), "")
    return "%s: %s" % (reason, err.strip()[:300])


# --- hierarchical -----------------------------------------------------------------

SIDES3 = ("hierarchical", "gloo", "pytorch")


def run_hierarchical(args):
    quick(args, "hierarchical")
    base = os.path.join(args.out, "hierarchical-%s-%s" % (args.rate, args.model))
    log = Log(base + ".txt")
    with Snapshot(args.build) as snap:
        log.say("git %s; 2 nodes x 2 ranks, link %s, model %s; %s" % (
            git_description(), args.rate, args.model, snap.malloc_note))
        runs = Runs(snap, log, args.timeout)
        sides = SIDES3 + (("hierarchical-mpi",) if args.mpi else ())
        launch = snap.netem_cmd(args.rate, nodes=2, nproc_per_node=2)
        common = ["--model", args.model, "--world-size", "4", "--iters", str(args.iters),
                  "--warmup", str(args.warmup)]
        per = {s: {} for s in sides}   # side -> round -> median ms
        sent = {s: [] for s in sides}  # bytes both nodes sent over the link, per run
        for _, r, side in alternated([None], args.rounds, sides):
            json_path = os.path.join(snap.dir, "%s-r%d.json" % (side, r))
            side_launch = launch
            cmd = [snap.bench, "train", "--impls", "ddp"]
            if side == "pytorch":
                cmd, env = [snap.python, PYTORCH_TRAIN, "--impls", "pytorch_ddp"], None
            elif side == "hierarchical-mpi":
                # netem's mpirun passes its environment on to every node's ranks
                side_launch = snap.netem_cmd(args.rate, nodes=2, nproc_per_node=2, mpirun=True)
                env = {"DDP_BACKEND": "hierarchical", "DDP_CROSS_BACKEND": "mpi"}
            else:
                env = {"DDP_BACKEND": "auto" if side == "hierarchical" else "gloo"}
            status, text = runs.run("round %d/%d: %s" % (r, args.rounds, side),
                                    side_launch + cmd + common + ["--json", json_path], json_path,
                                    env)
            if status:
                log.say("%s round %d failed (status %d): %s"
                        % (side, r, status, " / ".join(text.splitlines()[-3:])))
                continue
            with open(json_path) as f:
                rows = [x for x in json.load(f)["rows"] if x["impl"] in ("ddp", "pytorch_ddp")]
            if rows:
                per[side][r] = rows[0]["median_ms"]
            sent[side].append(sum(int(b) for b in re.findall(r"(\d+) bytes sent", text)))
    lines = ["# DDP training, 2 nodes x 2 ranks, link %s, model %s" % (args.rate, args.model), "",
             md_table(["side", "median ms per iteration (median of runs)", "runs",
                       "link bytes per run (both nodes, tc)"],
                      [[s, "%.1f" % statistics.median(per[s].values()), str(len(per[s])),
                        "%.0f MB" % (statistics.median(sent[s]) / 1e6) if sent[s] else "-"]
                       for s in sides if per[s]])]
    pairs = [("hierarchical", "gloo"), ("hierarchical", "pytorch"), ("gloo", "pytorch")]
    if args.mpi:
        pairs += [("hierarchical-mpi", "gloo"), ("hierarchical-mpi", "pytorch"),
                  ("hierarchical-mpi", "hierarchical")]
    for a, b in pairs:
        ratio, _ = paired_ratio(per[a], per[b])
        if ratio is not None:
            lines += ["", "%s / %s: %.3f (median of per-round ratios)" % (a, b, ratio)]
    write_json(base + ".json", {"rate": args.rate, "model": args.model, "median_ms": per,
                                "link_bytes": sent})
    missing = ["no %s run succeeded" % s for s in sides if not per[s]]
    return finish(log, base, "\n".join(lines), missing)
