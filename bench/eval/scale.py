"""`bench/evaluate.py scale`: the α–β model of scale (eval/scale_model.py),
checked against the network-namespace runs it predicts, then projected.

1. Calibration: α and β of each link rate from a Gloo all-reduce between two
   namespaces (bench/netem --bridge, as every run here); the host's own
   all-reduce (shm, 2 ranks) by size.
2. Check of the collective alone: Gloo all-reduces at 3..N nodes, measured
   against the ring's prediction from the 2-node α and β.
3. Check of training: `ddp_bench train --impls ddp,local` at 1..N nodes, one
   rank per node over Gloo's ring ("ring") and two per node with ddp's
   default backend (hierarchical: shm within, Gloo's ring across); the
   prediction takes the local iteration of the same run (the same cores, as
   loaded) and DDP's buckets, and nothing of the DDP run.
4. Projection to 8..256 nodes (as many ranks each as the 1-node run: 2) at
   10 and 100 Gbit/s: flat ring, hierarchical ring, hierarchical tree
   (NCCL's across hosts), from the 1-node run's compute and the fastest
   calibrated link scaled (α kept).

Output in --out (default bench/results): scale-model.json (what every run
measured: the model's inputs and what it predicts), scale-model.md (the
tables of docs/benchmarks.md, computed from the JSON), scale-model.txt (the
log); --plot PNG draws the check and the projection. Needs root for the
namespaces (bench/netem).
"""

import json
import os

import scale_model as model
from harness import die, Log, md_table, results_dir, run_arguments, run_bounded, Snapshot, \
    write_json

HOST_SIZES = "64K,1M,4M,16M,32M,64M"
LINK_SIZES = "4K,1M,4M,16M,64M"
CHECK_SIZES = "1M,16M,64M"
PROJECTED_NODES = (8, 16, 32, 64, 128, 256)
PROJECTED_GBIT = (10, 100)
# The measured runs' layouts, named by their algorithm (scale_model.allreduce_s),
# and their ranks per node.
LAYOUTS = {"ring": 1, "hierarchical": 2}
# The projection's algorithms (scale_model.allreduce_s) and their names in
# the tables and the plot.
ALGORITHMS = {"ring": "flat ring", "hierarchical": "hierarchical ring",
              "hierarchical-tree": "hierarchical tree"}
# The paper's Fig. 9 (256 GPUs, 8 per server), per-iteration slowdown against
# local training as its text states it.
PAPER_256 = (("NCCL, ResNet50", 2.0), ("Gloo, ResNet50", 3.0), ("Gloo, BERT", 6.0))


def add_parser(sub):
    p = sub.add_parser("scale", help="the α–β model of scale: checked against namespace runs "
                       "at 1..4 nodes, projected to 256 (eval/scale.py)",
                       description=__doc__.split("\n")[0], epilog=__doc__.split("\n", 2)[2],
                       formatter_class=__import__("argparse").RawDescriptionHelpFormatter)
    p.add_argument("--rates", default="1g,10g", help="link rates (bench/netem --rate)")
    p.add_argument("--nodes", type=int, default=4, help="largest node count measured (default 4)")
    p.add_argument("--model", default="mlp", help="bench model (default mlp)")
    p.add_argument("--iters", type=int, default=8, help="timed iterations per run (default 8)")
    run_arguments(p, "scale", 600, "1 Gbit/s, 2 nodes, 2 iterations")
    p.add_argument("--plot", metavar="PNG", help="draw the check and the projection")
    p.add_argument("--from-json", metavar="RUN", help="no runs: tables and plot from a kept run")
    p.set_defaults(run=run)


class Runner:
    """Runs ddp_bench from the snapshot, one intra-op thread per rank, each
    run bounded; keeps the machine's description of the last run."""

    def __init__(self, args, snap, log):
        self.args, self.snap, self.log = args, snap, log
        self.env = dict(snap.env, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
        self.machine = None

    def bench(self, what, launch, argv, env=None):
        """One ddp_bench run; its --json document."""
        path = os.path.join(self.snap.dir, "run.json")
        if os.path.exists(path):
            os.remove(path)
        self.log.say("%s (load %s)" % (what, self.log.load()))
        status, text = run_bounded(launch + [self.snap.bench] + argv + ["--json", path],
                                   dict(self.env, **(env or {})), self.args.timeout)
        self.log.output(text)
        if status or not os.path.exists(path):
            die("scale: %s failed with status %d; see %s" % (what, status, self.log.path))
        with open(path) as f:
            doc = json.load(f)
        self.machine = doc.get("machine", self.machine)
        return doc

    def launch(self, rate, nodes, per_node):
        if nodes == 1:
            return self.snap.ddprun_cmd(per_node)
        return self.snap.netem_cmd(rate, nodes=nodes, nproc_per_node=per_node, bridge=True)

    def collectives(self, what, rate, nodes, impl, sizes):
        return self.bench(what, self.launch(rate, nodes, 1 if nodes > 1 else 2),
                          ["collectives", "--impls", impl, "--sizes", sizes, "--budget-s",
                           "1" if self.args.quick else "3"])["rows"]

    def train(self, rate, layout, nodes):
        per_node = LAYOUTS[layout]
        world = nodes * per_node
        env = {"DDP_BACKEND": "gloo"} if layout == "ring" else {}
        doc = self.bench("train %s, %s, %d node(s) x %d" % (rate, layout, nodes, per_node),
                         self.launch(rate, nodes, per_node),
                         ["train", "--model", self.args.model, "--world-size", str(world),
                          "--impls", "ddp,local", "--iters", str(self.args.iters),
                          "--warmup", "2"], env)
        rows = {r["impl"]: r for r in doc["rows"]}
        split = rows["local"]["rank0_split"]
        return {"rate": rate, "layout": layout, "nodes": nodes, "ranks_per_node": per_node,
                "ddp_ms": rows["ddp"]["median_ms"], "local_ms": rows["local"]["median_ms"],
                "compute_ms": {k: split[k + "_ms"]["median"] for k in
                               ("forward", "backward", "step")},
                "bucket_bytes": rows["ddp"]["bucket_bytes"]}


def measure(args, log):
    rates = args.rates.split(",")
    doc = {"model": args.model, "iters": args.iters, "cores": len(os.sched_getaffinity(0)),
           "links": {},
           "collectives": [], "train": []}
    with Snapshot(args.build) as snap:
        run = Runner(args, snap, log)
        doc["machine_note"] = snap.malloc_note
        doc["host_allreduce"] = run.collectives("host all-reduce: shm, 2 ranks", "none", 1,
                                                "shm", HOST_SIZES)
        # One node uses no link: once, whatever the rate; of one rank alone
        # (the ring's one node) there is nothing to model.
        doc["train"].append(run.train("none", "hierarchical", 1))
        for rate in rates:
            doc["links"][rate] = run.collectives("link %s: gloo, 2 nodes" % rate, rate, 2,
                                                 "gloo", LINK_SIZES)
            for nodes in range(3, args.nodes + 1):
                rows = run.collectives("check %s: gloo, %d nodes" % (rate, nodes), rate, nodes,
                                       "gloo", CHECK_SIZES)
                doc["collectives"] += [dict(r, rate=rate, nodes=nodes) for r in rows]
            for nodes in range(2, args.nodes + 1):
                for layout in LAYOUTS:
                    doc["train"].append(run.train(rate, layout, nodes))
        doc["machine"] = run.machine
    return doc


def fits(doc):
    links = {rate: model.fit_link(rows, 2, "Gloo all-reduce, 2 nodes at %s" % rate)
             for rate, rows in doc["links"].items()}
    host = {r["bytes"]: r["median_us"] * 1e-6 for r in doc["host_allreduce"]}
    return links, (lambda n: model.interpolate(host, n))


def link_of(run, links):
    """A run's link; a 1-node run has none (any will do: no term uses it)."""
    return links.get(run["rate"]) or next(iter(links.values()))


def predict(run, link, host):
    """The α–β model's milliseconds for a training run."""
    compute = {k: v / 1e3 for k, v in run["compute_ms"].items()}
    return 1e3 * model.iteration_s(  # a layout is named by its algorithm
        compute, run["bucket_bytes"], lambda n: model.allreduce_s(
            run["layout"], n, run["nodes"], run["ranks_per_node"], link, host))


def one_node_run(doc):
    """The 1-node run (no link): DDP's own cost and the projection's base."""
    run = next((r for r in doc["train"] if r["nodes"] == 1), None)
    if run is None:
        die("scale: the run has no 1-node training run, which the model needs")
    return run


def ranks_per_core(run, cores):
    return max(1.0, run["nodes"] * run["ranks_per_node"] / cores)


def own_cost(doc, links, host):
    """DDP's own milliseconds per iteration beyond the model (its gradient
    copies, the host's all-reduce beside the compute), measured at one node,
    where no link is involved: (that cost, and the function that adds it to
    a run's prediction, scaled by how many ranks share each of the host's
    cores: the namespaces' nodes share them)."""
    base = one_node_run(doc)
    own = base["ddp_ms"] - predict(base, link_of(base, links), host)
    cores = doc["cores"]
    return own, lambda run: own * ranks_per_core(run, cores) / ranks_per_core(base, cores)


def gbit_s(rate):
    """bench/netem's rate (1g, 10g, 500m, 2.5gbit, 100mbit) in Gbit/s."""
    text = rate.lower().replace("bit", "")
    scale = {"g": 1.0, "m": 1e-3, "k": 1e-6}.get(text[-1:])
    try:
        return float(text[:-1]) * scale if scale else float(text) * 1e-9
    except ValueError:
        die("scale: cannot read the link rate %r (use e.g. 1g, 10g, 500m)" % rate)


def projection(doc, links, host):
    """{(gbit, algorithm): [(nodes, ms)]}, the 1-node run it scales from, and
    the link it scales. Each node has cores of its own: DDP's own cost as at
    one node."""
    base = one_node_run(doc)
    own, _ = own_cost(doc, links, host)
    rate, fastest = min(links.items(), key=lambda kv: kv[1].beta)
    compute = {k: v / 1e3 for k, v in base["compute_ms"].items()}
    per_node = base["ranks_per_node"]
    out = {}
    for gbit in PROJECTED_GBIT:
        link = fastest.scaled(gbit / gbit_s(rate), "%s, β scaled to %d Gbit/s" % (rate, gbit))
        for algorithm in ALGORITHMS:
            out[(gbit, algorithm)] = [
                (n, own + 1e3 * model.iteration_s(compute, base["bucket_bytes"], lambda b, n=n:
                                                  model.allreduce_s(algorithm, b, n, per_node,
                                                                    link, host)))
                for n in (1,) + PROJECTED_NODES]
    return out, base, rate


def tables(doc):
    links, host = fits(doc)
    out = ["**Links** (Gloo all-reduce between 2 namespaces; α from the smallest size's "
           "fastest sample, β by least squares from 1 MiB up):", ""]
    out.append(md_table(["rate", "α µs", "β ns/byte", "effective Gbit/s"],
                        [[rate, "%.1f" % (l.alpha * 1e6), "%.3f" % (l.beta * 1e9),
                          "%.2f" % l.gbit_s()] for rate, l in links.items()]))
    rows = []
    for r in doc["collectives"]:
        predicted_us = model.ring(r["bytes"], r["nodes"], links[r["rate"]]) * 1e6
        rows.append([r["rate"], r["nodes"], "%d KiB" % (r["bytes"] >> 10),
                     "%.1f" % (r["median_us"] / 1e3), "%.1f" % (predicted_us / 1e3),
                     "%+.1f %%" % (100 * (predicted_us / r["median_us"] - 1))])
    out += ["", "**The collective alone** (Gloo's ring, predicted from the 2-node fit):", "",
            md_table(["rate", "nodes", "size", "measured ms", "predicted ms", "error"], rows)]
    own, with_own = own_cost(doc, links, host)
    rows = []
    for r in doc["train"]:
        p = predict(r, link_of(r, links), host)
        calibrates = r["nodes"] == 1
        rows.append([r["rate"], r["layout"], "%d × %d" % (r["nodes"], r["ranks_per_node"]),
                     "%.1f" % sum(r["compute_ms"].values()), "%.1f" % r["ddp_ms"], "%.1f" % p,
                     "%+.1f %%" % (100 * (p / r["ddp_ms"] - 1)), "%.1f" % (p + with_own(r)),
                     "(measures it)" if calibrates else
                     "%+.1f %%" % (100 * ((p + with_own(r)) / r["ddp_ms"] - 1))])
    out += ["", "**Training** (`ddp_bench train --model %s`, median of %d iterations; compute "
            "= the same run's local iteration; DDP's own cost: %.1f ms at one node, times the "
            "ranks per core beyond one, %d cores):" % (doc["model"], doc["iters"], own,
                                                       doc["cores"]), "",
            md_table(["rate", "layout", "nodes × ranks", "local compute ms", "measured ms",
                      "α–β model ms", "error (α–β)", "with DDP's own cost ms",
                      "error (+ own cost)"], rows)]
    proj, base, rate = projection(doc, links, host)
    local = sum(base["compute_ms"].values())
    rows = []
    for (gbit, algorithm), points in sorted(proj.items()):
        rows.append(["%d Gbit/s" % gbit, ALGORITHMS[algorithm]] +
                    ["%.0f (%.2f×)" % (ms, ms / local) for n, ms in points if n > 1])
    out += ["", "**Projection** (nodes of %d ranks; compute, buckets and DDP's own cost of the "
            "1-node run, local compute %.1f ms (forward + backward + step); link: %s's α, β "
            "scaled; ms per iteration, and its slowdown against local compute):"
            % (base["ranks_per_node"], local, rate), "",
            md_table(["link", "algorithm"] + ["%d nodes" % n for n in PROJECTED_NODES], rows)]
    out += ["", "The paper's Fig. 9 at 256 GPUs (8 per server), slowdown against local "
            "training: " + ", ".join("%s %.0f×" % p for p in PAPER_256) + "."]
    return "\n".join(out)


def plot(doc, png):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    links, host = fits(doc)
    _, with_own = own_cost(doc, links, host)
    fig, (check, proj_ax) = plt.subplots(1, 2, figsize=(11, 4.2))
    for (rate, layout), marker in zip(sorted({(r["rate"], r["layout"]) for r in doc["train"]
                                              if r["nodes"] > 1}), "osD^v<>"):
        runs = sorted((r for r in doc["train"] if (r["rate"], r["layout"]) == (rate, layout)
                       or (r["nodes"] == 1 and r["layout"] == layout)), key=lambda r: r["nodes"])
        xs = [r["nodes"] for r in runs]
        line, = check.plot(xs, [r["ddp_ms"] for r in runs], marker=marker, linestyle="none",
                           label="%s %s measured" % (rate, layout))
        check.plot(xs, [predict(r, link_of(r, links), host) + with_own(r) for r in runs],
                   color=line.get_color(), linestyle="--", label="%s %s model" % (rate, layout))
    check.set_xlabel("nodes")
    check.set_ylabel("ms per iteration (median)")
    check.set_title("model (with DDP's own cost) against namespace runs (%s)" % doc["model"])
    check.grid(True, alpha=0.3)
    check.legend(fontsize=7)
    proj, base, _ = projection(doc, links, host)
    local = sum(base["compute_ms"].values())
    for (gbit, algorithm), points in sorted(proj.items()):
        proj_ax.plot([n for n, _ in points], [ms / local for _, ms in points], marker=".",
                     linestyle="-" if gbit == 100 else ":",
                     label="%d Gbit/s %s" % (gbit, ALGORITHMS[algorithm]))
    for (name, slowdown), style in zip(PAPER_256, ("-.", "--", ":")):
        proj_ax.axhline(slowdown, color="grey", linestyle=style, linewidth=0.8)
        proj_ax.text(1, slowdown, " paper, 256 GPUs: " + name, fontsize=7, va="bottom")
    proj_ax.set_xscale("log", base=2)
    proj_ax.set_xlabel("nodes (%d ranks each)" % base["ranks_per_node"])
    proj_ax.set_ylabel("iteration / local compute")
    proj_ax.set_title("projection (model)")
    proj_ax.grid(True, which="both", alpha=0.3)
    proj_ax.legend(fontsize=7)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(png)), exist_ok=True)
    fig.savefig(png, dpi=110)


def run(args):
    if args.from_json:  # no runs, nothing written but the plot
        with open(args.from_json) as f:
            doc = json.load(f)
        print(tables(doc))
        if args.plot:
            plot(doc, args.plot)
        return 0
    if args.quick:
        args.rates, args.nodes, args.iters = "1g", 2, 2
    results_dir(args, "scale")
    base = os.path.join(args.out, "scale-model")
    log = Log(base + ".txt")
    doc = measure(args, log)
    write_json(base + ".json", doc)
    md = tables(doc)
    with open(base + ".md", "w") as f:
        f.write(md + "\n")
    print(md)
    if args.plot:
        plot(doc, args.plot)
    log.say("wrote %s.{json,md,txt}%s" % (base, ", " + args.plot if args.plot else ""))
    return 0
