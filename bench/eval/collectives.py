"""`bench/evaluate.py collectives`: one `ddp_bench collectives` run (allreduce
latency and bus bandwidth of ddp's backends against c10d's ProcessGroupGloo
and raw MPI_Allreduce, interleaved in one run) under ddprun, bench/netem or
mpirun, with its log and, with --plot, the bus bandwidth by implementation.

    bench/evaluate.py collectives --name collectives-loopback -- --raw
    bench/evaluate.py collectives --link 1g --name collectives-veth-1gbit -- --raw
    bench/evaluate.py collectives --launcher mpirun --name collectives-shm-mpirun \\
        --plot docs/img/backends/collectives.png -- --impls shm,gloo,mpi,mpi-raw,c10d
    bench/evaluate.py collectives --from-json bench/results/collectives-shm-mpirun.json \\
        --plot docs/img/backends/collectives.png      # the plot alone, from a kept run

Arguments after `--` go to `ddp_bench collectives` (`--help` lists them:
--sizes, --iters, --budget-s, --impls, --raw, ...). Output: NAME.json (the
run's --json) and NAME.txt (the command, the load average before and after,
rank 0's lines) in --out (default bench/results).
"""

import json
import os
import shlex

from harness import run_arguments, REPO, Log, Snapshot, die, free_port, quick_out, run_bounded


def add_parser(sub):
    p = sub.add_parser("collectives", help="allreduce by backend against c10d and raw MPI "
                       "(ddp_bench collectives), with the bandwidth plot",
                       description=__doc__.split("\n")[0], epilog=__doc__.split("\n", 2)[2],
                       formatter_class=__import__("argparse").RawDescriptionHelpFormatter)
    p.add_argument("--link", default="loopback",
                   help="loopback (default), or a rate: one rank per namespace (bench/netem)")
    p.add_argument("--launcher", choices=("ddprun", "mpirun"), default="ddprun",
                   help="mpirun: for the mpi and mpi-raw rows (loopback only)")
    p.add_argument("--nproc", type=int, default=2, help="ranks (default 2)")
    p.add_argument("--mpirun-args", default="",
                   help="extra mpirun arguments, e.g. '--bind-to none'")
    p.add_argument("--name", help="result files' name (default collectives-LINK or "
                                  "collectives-mpirun)")
    run_arguments(p, "collectives", 900, "sizes 4K and 1M, 5 samples each")
    p.add_argument("--plot", metavar="PNG", help="bus bandwidth against size, one line per impl")
    p.add_argument("--from-json", metavar="RUN", help="no run: plot this kept run's JSON")
    p.add_argument("bench_args", nargs="*", help="for ddp_bench collectives (after --)")
    p.set_defaults(run=run)


def run(args):
    if args.from_json:
        if not args.plot:
            die("collectives: --from-json only draws: give --plot PNG")
        plot(args.from_json, args.plot)
        return 0
    if args.launcher == "mpirun" and args.link != "loopback":
        die("collectives: mpirun runs on this host: --link loopback only")
    args.out = args.out or (quick_out("collectives") if args.quick else
                            os.path.join(REPO, "bench", "results"))
    name = args.name or "collectives-" + ("mpirun" if args.launcher == "mpirun" else args.link)
    base = os.path.join(args.out, name)
    bench_args = list(args.bench_args)
    if args.quick:
        bench_args += ["--sizes", "4K,1M", "--iters", "5", "--warmup", "1"]
    log = Log(base + ".txt")
    with Snapshot(args.build, malloc="default") as snap:
        env = {}
        if args.launcher == "mpirun":
            # The store of the gloo, shm and c10d rows: mpirun sets no MASTER_*.
            env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
            launch = snap.mpirun_cmd(args.nproc, env, shlex.split(args.mpirun_args))
        elif args.link == "loopback":
            launch = snap.ddprun_cmd(args.nproc)
        else:
            launch = snap.netem_cmd(args.link, nodes=args.nproc)
        cmd = launch + [snap.bench, "collectives", "--json", base + ".json"] + bench_args
        log.write("# %s; load average before/after:" % " ".join(
            shlex.quote(c.replace(snap.dir + "/", "")) for c in cmd))
        log.write(open("/proc/loadavg").read())
        status, text = run_bounded(cmd, dict(snap.env, **env), args.timeout)
        log.write(open("/proc/loadavg").read())
        log.output(text)
    print("\n".join(l[len("[rank 0] "):] if l.startswith("[rank 0] ") else l
                    for l in text.splitlines() if not l.startswith("[rank ") or
                    l.startswith("[rank 0]")))
    if status or not os.path.exists(base + ".json"):
        log.say("collectives failed (status %d); see %s" % (status, log.path))
        return status or 1
    if args.plot:
        plot(base + ".json", args.plot)
    log.say("wrote %s.json and %s.txt%s" % (base, base, ", " + args.plot if args.plot else ""))
    return 0


def plot(run_path, png_path):
    """Bus bandwidth against message size, one line per implementation (the
    plot of docs/benchmarks.md, "Collectives against Open MPI")."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        die("collectives: --plot needs matplotlib: run bench/evaluate.py with Debian's "
            "/usr/bin/python3 (python3-matplotlib)")
    with open(run_path) as f:
        run = json.load(f)
    if not run.get("rows"):
        die("collectives: %s has no rows to plot" % run_path)
    impls = []
    for row in run["rows"]:
        if row["impl"] not in impls:
            impls.append(row["impl"])
    fig, ax = plt.subplots(figsize=(7, 4))
    for impl in impls:
        rows = sorted((r for r in run["rows"] if r["impl"] == impl), key=lambda r: r["bytes"])
        ax.plot([r["bytes"] for r in rows], [r["busbw_GBps"] for r in rows], marker="o", label=impl)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("all-reduced bytes (float32)")
    ax.set_ylabel("bus bandwidth, GB/s (median)")
    link = (run.get("machine") or {}).get("link", "loopback")
    ax.set_title("allreduce, %d ranks, %s" % (run["rows"][0]["world_size"],
                 "on one host" if link == "loopback" else link.split(",")[0]))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(png_path)), exist_ok=True)
    fig.savefig(png_path, dpi=110)
