#!/usr/bin/env python3
"""ddp_torch (the torch.distributed backend "ddp") against PyTorch's Gloo,
from Python, in one run, interleaved: each rank holds a "ddp" group and a
"gloo" group and alternates between them, sample by sample (the order
reversed every other sample), each sample preceded by an untimed barrier.

    PYTHONPATH=build/python $DDP_VENV/bin/python -m torch.distributed.run \\
        --nproc-per-node 2 bench/python_backend.py [--rounds 20]

- all_reduce of float32 at 4 KB, 1 MB and 16 MB: the time of a call (the
  slowest rank's, median over samples), and the time to issue one
  asynchronously (the Python, dispatcher and backend overhead before any
  communication: async_op=True, not waited on in the timed part);
- PyTorch's DDP iteration (zero_grad, forward, loss, backward, SGD step) on
  bench/models' MLP and ResNet-18, with PyTorch's defaults, and the same
  iteration without DDP ("no DDP": the floor that no backend goes under).
Rank 0 prints the table (medians, and the ratio ddp / gloo).
"""

import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "models"))
import models as bench_models  # noqa: E402

import ddp_torch  # noqa: E402,F401


def slowest(seconds, group):
    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return t.item()


def allreduce_sample(group, tensor, calls):
    start = time.perf_counter()
    for _ in range(calls):
        dist.all_reduce(tensor, group=group)
    return (time.perf_counter() - start) / calls


def issue_sample(group, tensor, calls):
    works, took = [], 0.0
    for _ in range(calls):
        start = time.perf_counter()
        works.append(dist.all_reduce(tensor, group=group, async_op=True))
        took += time.perf_counter() - start
        works[-1].wait()
    return took / calls


def ddp_sample(model, opt, opts, batch, iters):
    x, y = batch
    start = time.perf_counter()
    for _ in range(iters):
        opt.zero_grad()
        bench_models.model_loss(opts, model(x), y).backward()
        opt.step()
    return (time.perf_counter() - start) / iters


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=20, help="samples per measurement (default 20)")
    p.add_argument("--models", default="mlp,resnet18", help="bench/models' names (default mlp,resnet18)")
    args = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("ddp")
    rank = dist.get_rank()
    groups = {"ddp": dist.group.WORLD, "gloo": dist.new_group(backend="gloo")}
    backend = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
    rows = []  # (what, {impl: median seconds})

    def measure(what, sample, impls=tuple(groups)):
        times = {impl: [] for impl in impls}
        for i in range(args.rounds + 2):  # two warm-up samples
            order = list(impls) if i % 2 == 0 else list(reversed(impls))
            for impl in order:
                dist.barrier(group=groups["gloo"])
                t = slowest(sample(impl), groups["gloo"])
                if i >= 2:
                    times[impl].append(t)
        rows.append((what, {impl: statistics.median(v) for impl, v in times.items()}))

    for size, calls in ((4 << 10, 200), (1 << 20, 20), (16 << 20, 4)):
        tensor = torch.ones(size // 4)
        label = f"{size >> 20} MB" if size >= 1 << 20 else f"{size >> 10} KB"
        measure(f"all_reduce {label}", lambda impl: allreduce_sample(groups[impl], tensor, calls))
    tensor = torch.ones(1024)
    measure("issue all_reduce 4 KB (async call)", lambda impl: issue_sample(groups[impl], tensor, 200))

    for name in args.models.split(","):
        opts = bench_models.with_defaults(bench_models.ModelOptions(name=name, seed=1))
        trainers = {}  # impl: (model, optimizer)
        for impl in (*groups, "local"):
            torch.manual_seed(1)
            model = bench_models.make_model(opts)
            if impl != "local":
                model = DDP(model, process_group=groups[impl])
            trainers[impl] = (model, torch.optim.SGD(model.parameters(), lr=0.01))
        batch = bench_models.make_batch(opts, data_seed=100 + rank)
        iters = 10 if name == "mlp" else 2
        measure(f"DDP iteration, {name}",
                lambda impl: ddp_sample(*trainers[impl], opts, batch, iters),
                impls=(*groups, "local"))

    if rank == 0:
        print(f"# {dist.get_world_size()} ranks, torch {torch.__version__}, ddp chose "
              f"{backend.ddp_backend}; medians of {args.rounds} interleaved samples")
        print(f"| {'measurement':<36} | {'ddp':>10} | {'gloo':>10} | ddp / gloo | "
              f"{'no DDP':>10} |")
        print(f"|{'-' * 38}|{'-' * 12}|{'-' * 12}|------------|{'-' * 12}|")
        for what, t in rows:
            local = f"{t['local'] * 1e3:>7.3f} ms" if "local" in t else "–"
            print(f"| {what:<36} | {t['ddp'] * 1e3:>7.3f} ms | {t['gloo'] * 1e3:>7.3f} ms | "
                  f"{t['ddp'] / t['gloo']:>10.3f} | {local:>10} |")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
