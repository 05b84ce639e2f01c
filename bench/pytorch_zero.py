#!/usr/bin/python3
"""PyTorch's twin of bench/zero_bench.cpp: DDP on the evaluation MLP with
torch.distributed.optim.ZeroRedundancyOptimizer(Adam) or plain Adam, Gloo.
Run once per rank under a launcher setting RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT (ddprun does):

    build/tools/ddprun/ddprun --nproc-per-node 2 -- /usr/bin/python3 bench/pytorch_zero.py --optimizer zero

Prints one JSON line (rank 0) in zero_bench's format.
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks.ddp_zero_hook import hook_with_zero_step
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "models"))
from models import make_mlp  # noqa: E402


def state_bytes(optimizer):
    inner = optimizer.optim if isinstance(optimizer, ZeroRedundancyOptimizer) else optimizer
    return sum(t.numel() * t.element_size() for s in inner.state.values()
               for k, t in s.items() if torch.is_tensor(t) and k != "step")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--optimizer", choices=["zero", "zero-overlap", "adam"], default="zero")
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--layers", type=int, default=16)
    a = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DistributedDataParallel(make_mlp(layers=a.layers))
    if a.optimizer != "adam":
        overlap = a.optimizer == "zero-overlap"
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=1e-4,
                                      overlap_with_ddp=overlap)
        if overlap:  # updates start after 2 iterations (pytorch/pytorch#62157): the warm-up
            model.register_comm_hook(None, hook_with_zero_step(allreduce_hook, model, opt))
    else:
        opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    torch.manual_seed(1 + rank)
    x, y = torch.randn(a.batch, 1024), torch.randn(a.batch, 1024)
    times, sync = [], torch.zeros(1)
    for i in range(a.warmup + a.iters):
        dist.all_reduce(sync)
        t0 = time.perf_counter()
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        ms = torch.tensor([(time.perf_counter() - t0) * 1e3], dtype=torch.float64)
        dist.all_reduce(ms, op=dist.ReduceOp.MAX)
        if i >= a.warmup:
            times.append(ms.item())
    times.sort()
    mine = torch.tensor([state_bytes(opt)], dtype=torch.int64)
    everyone = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(everyone, mine)
    if rank == 0:
        print(json.dumps({"impl": "pytorch", "optimizer": a.optimizer, "world": world,
                          "backend": "gloo", "state_bytes": [int(t.item()) for t in everyone],
                          "iter_ms_median": round(times[len(times) // 2], 3)}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
