#!/usr/bin/python3
"""PyTorch's DDP on the models of `ddp_bench train`: the reference side.

Run once per rank with Debian's python3-torch (/usr/bin/python3), under a
launcher that sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT (ddprun
works; so does bench/netem, which also sets GLOO_SOCKET_IFNAME):

    build/tools/ddprun/ddprun --nproc-per-node 2 -- \\
        /usr/bin/python3 bench/pytorch_ddp_train.py --model mlp --world-size 2

(Do not use Debian's torchrun 1.13 on Python 3.11 without
`--redirects 1 --tee 1`: it breaks.)

The models, data, loss, optimizer and method are those of
bench/train_bench.cpp and bench/models/ (models.py here), defined identically: same
modules in the same registration order (same parameter names, shapes and
order), default initialization from the same seed, so both sides start from
the same weights and see the same data. Measurements, interleaved by
iteration (order reversed every other iteration), each sample preceded by an
untimed 1-element allreduce, a sample's time the slowest rank's:

    pytorch_ddp        torch.nn.parallel.DistributedDataParallel iteration:
                       zero_grad, forward, loss, backward, SGD step
    pytorch_local      the same iteration on a plain copy, no communication
    pytorch_allreduce  (not by default) one c10d allreduce of all gradient bytes

With --no-overlap, a communication hook holds every bucket until the last
one is ready (the end of backward compute) and only then allreduces them all:
PyTorch's DDP without overlap, as `ddp_bench train --no-overlap`. With
--timeline, the allreduces go through a communication hook (the allreduce
PyTorch's default does, in Python) that timestamps each bucket's launch and
completion, and a hook on every parameter timestamps the last gradient: the
iteration's timeline, in the format of `ddp_bench train --timeline`
(Chrome trace events, bench/timeline.h; `bench/evaluate.py timeline` analyses both). Those hooks,
and --hook's, are pytorch_ddp_hooks.py's.

Rank 0 prints a table and, with --json, writes rows in the format of
`ddp_bench train --json` (`bench/evaluate.py train` compares both).
"""

import argparse
from contextlib import nullcontext
import json
import os
import platform
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "models"))
import models as bench_models  # noqa: E402  (bench/models/models.py)
from pytorch_ddp_hooks import Timeline, allreduce_hook, register_hook  # noqa: E402

IMPLS = ("pytorch_ddp", "pytorch_local", "pytorch_allreduce")
HOOKS = ("none", "fp16", "bf16", "powersgd1", "powersgd2", "powersgd4", "batched_powersgd1")


def tx_bytes_now():
    """Bytes sent on GLOO_SOCKET_IFNAME (the rank's veth under bench/netem),
    or -1 when unset (loopback: not measured)."""
    name = os.environ.get("GLOO_SOCKET_IFNAME")
    if not name:
        return -1.0
    try:
        with open("/sys/class/net/%s/statistics/tx_bytes" % name) as f:
            return float(f.read())
    except (OSError, ValueError):
        return -1.0
# PyTorch's DDP logger: forward start to backward start (prepare_for_backward),
# backward compute, first bucket launched to last reduced, and their overlap.
PYTORCH_STATS = ("forward_compute_time", "backward_compute_time", "backward_comm_time",
                 "backward_compute_comm_overlap_time")


# --- helpers ----------------------------------------------------------------

def summarize(v):
    v = sorted(v)
    return {"median": statistics.median(v), "min": v[0], "max": v[-1],
            "mean": sum(v) / len(v)} if v else {}


def describe_machine():
    def first(path, key):
        try:
            with open(path) as f:
                for line in f:
                    if line.startswith(key):
                        return line.split(":" if ":" in line else "=", 1)[1].strip().strip('"')
        except OSError:
            pass
        return ""
    link = os.environ.get("DDP_BENCH_LINK") or (
        "loopback" if os.environ.get("MASTER_ADDR", "127.0.0.1") in ("127.0.0.1", "localhost", "::1")
        else "network (MASTER_ADDR=%s)" % os.environ.get("MASTER_ADDR"))
    m = {"cpu_model": first("/proc/cpuinfo", "model name") or "unknown",
         "logical_cpus": os.cpu_count(), "cpus_allowed": len(os.sched_getaffinity(0)),
         "kernel": " ".join(platform.uname()[i] for i in (0, 2, 4)),
         "os": first("/etc/os-release", "PRETTY_NAME"),
         "python": sys.version.split()[0], "torch": torch.__version__, "link": link,
         "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if os.environ.get("DDP_BENCH_LINK_RATE_BPS"):
        m["link_rate_bits_per_s"] = float(os.environ["DDP_BENCH_LINK_RATE_BPS"])
    return m


def write_result(program, path, result):
    """Writes a result file (JSON) to `path` and says so on stderr: "PROGRAM: wrote PATH"."""
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    print("%s: wrote %s" % (program, path), file=sys.stderr)


def leave():
    """Ends this rank once all ranks are done, without tearing anything down.

    PyTorch 1.13 can hang at exit here: destroying the DDP Reducer joins
    ProcessGroupGloo's worker while holding the GIL, and the worker needs the
    GIL to free a tensor; and a rank whose TCPStore host (rank 0) has left
    spins in the store's listener thread. So: a barrier (rank 0, which hosts
    the store, has written its results before it), then os._exit.
    """
    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True, choices=bench_models.MODEL_NAMES)
    p.add_argument("--world-size", type=int, required=True,
                   help="number of ranks; must equal $WORLD_SIZE")
    p.add_argument("--bucket-cap-mb", type=float, default=25.0)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--batch", type=int, default=0, help="default: the model's")
    p.add_argument("--image-size", type=int, default=0, help="resnets (default: the model's)")
    p.add_argument("--seq-len", type=int, default=0, help="berts (default: the model's)")
    p.add_argument("--gradient-as-bucket-view", action="store_true",
                   help="DDP's gradient_as_bucket_view=True")
    p.add_argument("--no-overlap", action="store_true",
                   help="allreduce every bucket after backward compute (a deferring hook)")
    p.add_argument("--process-groups", type=int, default=1,
                   help="K Gloo groups used round-robin (dist._round_robin_process_groups)")
    p.add_argument("--sync-every", type=int, default=1,
                   help="an iteration is K micro-batches, the first K-1 under no_sync")
    p.add_argument("--timeline", action="store_true",
                   help="keep each timed DDP iteration's timeline (a timing hook)")
    p.add_argument("--impls", default="pytorch_ddp,pytorch_local",
                   help="any of " + ",".join(IMPLS))
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1,
                   help="torch.set_num_threads and OpenBLAS's own pool (default 1)")
    p.add_argument("--hook", default="none", choices=HOOKS,
                   help="communication hook (PowerSGD: start_powerSGD_iter=2, error feedback "
                        "and warm start on; use --warmup >= 3)")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                   help="cuda: models, data and gradients on LOCAL_RANK's GPU (modulo the GPUs "
                        "seen); each timed iteration ends with a device synchronize")
    p.add_argument("--backend", default="gloo", choices=("gloo", "nccl"),
                   help="PyTorch's process group (default gloo; nccl needs --device cuda)")
    p.add_argument("--tag", default="")
    p.add_argument("--json", default="")
    args = p.parse_args()
    if args.hook != "none" and (args.no_overlap or args.timeline):
        p.error("--hook cannot be combined with --no-overlap or --timeline (they use a hook)")
    if args.process_groups < 1 or args.sync_every < 1:
        p.error("--process-groups and --sync-every must be at least 1")
    opts = bench_models.with_defaults({"name": args.model, "batch": args.batch,
                                       "image_size": args.image_size, "seq_len": args.seq_len,
                                       "seed": args.seed})
    impls = []
    for name in args.impls.split(","):
        if name not in IMPLS:
            p.error("unknown measurement %r (%s)" % (name, ", ".join(IMPLS)))
        if name not in impls:
            impls.append(name)

    env_ws = os.environ.get("WORLD_SIZE")
    if not env_ws:
        sys.exit("pytorch_ddp_train.py: WORLD_SIZE is not set: run one process per rank under a "
                 "launcher, e.g. ddprun --nproc-per-node %d -- /usr/bin/python3 %s ..."
                 % (args.world_size, sys.argv[0]))
    if env_ws != str(args.world_size):
        sys.exit("pytorch_ddp_train.py: --world-size %d but the launcher started WORLD_SIZE=%s "
                 "ranks: they must be equal" % (args.world_size, env_ws))

    torch.set_num_threads(args.threads)
    blas_threads = bench_models.limit_openblas_threads(args.threads)
    dist.init_process_group(args.backend)  # env://
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cpu")
    if args.device == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))
                              % torch.cuda.device_count())
        torch.cuda.set_device(device)

    ddp_net = bench_models.make_model(opts).to(device)
    local_net = bench_models.make_model(opts).to(device)
    x, y = (t.to(device) for t in bench_models.make_batch(opts, args.seed + 1 + rank))
    named = list(ddp_net.named_parameters())
    elements = sum(t.numel() for _, t in named)
    if rank == 0:
        print("pytorch_ddp_train: model %s: %d parameter tensors, %d elements (%.1f MiB of "
              "gradients); %d ranks; torch %s, python %s"
              % (bench_models.describe(opts), len(named), elements, elements * 4 / 1048576, world,
                 torch.__version__, sys.version.split()[0]), file=sys.stderr, flush=True)

    ddp = None
    timeline = Timeline() if args.timeline else None
    last_grad = [0.0]
    if "pytorch_ddp" in impls:
        group = None
        if args.process_groups > 1:
            if not hasattr(dist, "_round_robin_process_groups"):
                sys.exit("pytorch_ddp_train: --process-groups %d: torch %s has no round-robin "
                         "process groups (dist._round_robin_process_groups left PyTorch in 2.x)"
                         % (args.process_groups, torch.__version__))
            group = dist._round_robin_process_groups(
                [dist.new_group(backend=args.backend) for _ in range(args.process_groups)])
        # 0 MB (every gradient its own bucket) as PyTorch 2.x accepts it: its
        # DDP asserts on a cap of 0, and a cap of 1 byte buckets the same.
        cap_mb = args.bucket_cap_mb if args.bucket_cap_mb > 0 else 1.0 / (1 << 20)
        ddp = nn.parallel.DistributedDataParallel(
            ddp_net, bucket_cap_mb=cap_mb, process_group=group,
            gradient_as_bucket_view=args.gradient_as_bucket_view)
        register_hook(ddp, args.hook)
        if args.no_overlap or args.timeline:
            ddp.register_comm_hook(None, allreduce_hook(world, group, args.no_overlap,
                                                        timeline if rank == 0 else None))
        if args.timeline:
            for prm in ddp_net.parameters():  # the backward compute ends at the last
                prm.register_hook(lambda g: last_grad.__setitem__(0, time.perf_counter()))
        ddp_opt = torch.optim.SGD(ddp.parameters(), lr=args.lr)
        # PyTorch's own per-iteration split (the runtime stats of its DDP
        # logger), sampled every iteration instead of every 100th: a few clock
        # reads per iteration.
        ddp._set_ddp_runtime_logging_sample_rate(1)
    local_opt = torch.optim.SGD(local_net.parameters(), lr=args.lr)
    sync = torch.zeros(1, device=device)
    flat = torch.zeros(elements, device=device)

    def run_one(impl):
        dist.all_reduce(sync)  # start together
        s = {}
        t0 = time.perf_counter()
        if impl == "pytorch_allreduce":
            dist.all_reduce(flat)
            s["total"] = (time.perf_counter() - t0) * 1e3
            return s
        model, opt = (ddp, ddp_opt) if impl == "pytorch_ddp" else (local_net, local_opt)
        record = recording[0] and impl == "pytorch_ddp" and timeline is not None and rank == 0
        if record:
            timeline.begin(t0)
        opt.zero_grad()
        t1 = time.perf_counter()
        forward = backward = 0.0  # summed over the micro-batches
        for micro in range(args.sync_every):  # all but the last under no_sync
            last = micro + 1 == args.sync_every
            f0 = time.perf_counter()
            with (model.no_sync() if impl == "pytorch_ddp" and not last else nullcontext()):
                loss = bench_models.model_loss(opts, model(x), y)
                t2 = time.perf_counter()
                loss.backward()
            t3 = time.perf_counter()
            forward += t2 - f0
            backward += t3 - t2
            if record:
                timeline.add("compute", "forward", f0, t2)
                if last:
                    timeline.add("compute", "backward", t2, last_grad[0])
                else:
                    timeline.add("compute", "backward (no_sync)", t2, t3)
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t4 = time.perf_counter()
        if record:
            timeline.add("compute", "zero_grad", t0, t1)
            timeline.add("compute", "step", t3, t4)
            timeline.end()
        s.update(total=(t4 - t0) * 1e3, zero_grad=(t1 - t0) * 1e3, forward=forward * 1e3,
                 backward=backward * 1e3, step=(t4 - t3) * 1e3, loss=loss.item())
        if impl == "pytorch_ddp":
            # Set at this iteration's forward: the previous iteration's (ns).
            d = ddp._get_ddp_logging_data()
            s["previous_stats"] = {k: d.get(k, 0) / 1e6 for k in PYTORCH_STATS}
        return s

    samples = {i: [] for i in impls}
    warm = {i: [] for i in impls}
    tx_start = tx_per_iter = -1.0
    recording = [False]
    for it in range(args.warmup + args.iters):
        if it == args.warmup:
            tx_start = tx_bytes_now()
            recording[0] = True
        order = impls if it % 2 == 0 else impls[::-1]
        for impl in order:
            (samples if it >= args.warmup else warm)[impl].append(run_one(impl))
        done = it - args.warmup + 1
        if rank == 0 and (it + 1 == args.warmup or (done > 0 and done % 5 == 0)):
            src = warm if it < args.warmup else samples
            print("pytorch_ddp_train: %s %d/%d: %s" % (
                "warm-up" if it < args.warmup else "iteration",
                it + 1 if it < args.warmup else done,
                args.warmup if it < args.warmup else args.iters,
                "  ".join("%s %.1f ms" % (i, src[i][-1]["total"]) for i in impls)),
                file=sys.stderr, flush=True)
    if tx_start >= 0:
        end = tx_bytes_now()
        if end >= 0:
            tx_per_iter = (end - tx_start) / args.iters

    # On the device: PyTorch's nccl group takes CUDA tensors only.
    tx = torch.zeros(world, dtype=torch.float64, device=device)
    tx[rank] = tx_per_iter
    dist.all_reduce(tx)
    tx_ranks = tx.tolist()

    slowest = {}
    for impl in impls:
        t = torch.tensor([s["total"] for s in samples[impl]], dtype=torch.float64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        slowest[impl] = t.tolist()
    if rank != 0:
        leave()

    rows = []
    print("pytorch_ddp_train %s, %d ranks, %d parameters (%d elements)\n"
          % (bench_models.describe(opts), world, len(named), elements))
    print("| measurement | median ms | min–max ms | fwd ms (rank 0) | bwd ms (rank 0) | step ms (rank 0) "
          "| PyTorch's stats fwd / bwd compute / comm / overlap ms |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for impl in impls:
        st = summarize(slowest[impl])
        row = {"impl": impl, "model": opts.name, "world_size": world,
               "median_ms": st["median"], "min_ms": st["min"], "max_ms": st["max"],
               "mean_ms": st["mean"], "iters": len(slowest[impl]), "samples_ms": slowest[impl]}
        cells = ["", "", ""]
        if impl != "pytorch_allreduce":
            split = {k + "_ms": summarize([s[k] for s in samples[impl]])
                     for k in ("zero_grad", "forward", "backward", "step")}
            row["rank0_split"] = split
            row["first_loss"] = (warm[impl] or samples[impl])[0]["loss"]
            row["last_loss"] = samples[impl][-1]["loss"]
            cells = ["%.1f" % split[k]["median"] for k in ("forward_ms", "backward_ms", "step_ms")]
        if impl == "pytorch_ddp":
            # Sample i carries iteration i-1's stats: drop the first (a warm-up's).
            prev = [s["previous_stats"] for s in samples[impl][1:]]
            if prev:
                row["pytorch_stats_rank0"] = {k: [p[k] for p in prev] for k in PYTORCH_STATS}
                for k in PYTORCH_STATS:
                    row[k + "_ms"] = statistics.median(p[k] for p in prev)
                cells.append(" / ".join("%.1f" % row[k + "_ms"] for k in PYTORCH_STATS))
            # Its buckets after the rebuild (bytes, in reduction order).
            log = ddp._get_ddp_logging_data()
            sizes = log.get("rebuilt_bucket_sizes", log.get("bucket_sizes", ""))
            row["gloo_threads"] = log.get("gloo_num_threads")
            row["bucket_bytes"] = [int(x) for x in str(sizes).replace(",", " ").split()]
            row["hook"] = args.hook
            if timeline is not None:
                row["timeline"] = timeline.events
            if all(x >= 0 for x in tx_ranks):
                row["tx_bytes_per_iter_ranks"] = tx_ranks
                row["tx_bytes_per_iter"] = sum(tx_ranks) / len(tx_ranks)
        rows.append(row)
        cells += [""] * (4 - len(cells))
        print("| %s | %.1f | %.1f–%.1f | %s |" % (impl, st["median"], st["min"], st["max"],
                                                 " | ".join(cells)))
    sys.stdout.flush()
    if args.json:
        out = {"benchmark": "train", "side": "pytorch", "tag": args.tag,
               "machine": describe_machine(),
               "config": {"model": opts.name, "world_size": world,
                          "batch_per_rank": opts.batch, "image_size": opts.image_size,
                          "seq_len": opts.seq_len, "model_description": bench_models.describe(opts),
                          "process_groups": args.process_groups, "sync_every": args.sync_every,
                          "overlap": not args.no_overlap, "timeline": args.timeline,
                          "gradient_as_bucket_view": args.gradient_as_bucket_view,
                          "bucket_cap_mb": args.bucket_cap_mb, "iters": args.iters,
                          "warmup": args.warmup, "hook": args.hook, "lr": args.lr, "seed": args.seed,
                          "intra_op_threads": args.threads, "openblas_threads": blas_threads,
                          "backend": args.backend, "device": args.device},
               "parameters": {"count": len(named), "elements": elements,
                              "list": ["%s [%s]" % (n, ", ".join(str(d) for d in t.shape))
                                       for n, t in named]},
               "rows": rows}
        write_result("pytorch_ddp_train", args.json, out)
    leave()


if __name__ == "__main__":
    main()
