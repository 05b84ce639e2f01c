"""PyTorch's own DDP over "ddp" trains to the same parameters, bit for bit,
as over "gloo": each rank runs both, on two groups, from the same start on
the same data, and compares after every step.
- 2 ranks: an MLP with tanh in float64 and float32; no hook, the fp16
  compression hook, PowerSGD (matrix rank 1, after two plain steps), and no hook
  with ZeroRedundancyOptimizer. With two
  ranks a sum has one order, whatever the algorithm.
- 4 ranks: a two-layer linear model whose values are small dyadic fractions,
  so that every sum is exact and the backends' different orders of summing
  cannot part them."""

import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

from launch import main

STEPS = 5


def mlp(dtype):
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64),
                               torch.nn.Tanh(), torch.nn.Linear(64, 4)).to(dtype)


def dyadic(dtype):
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8, bias=False), torch.nn.Linear(8, 2, bias=False))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randint(-4, 5, p.shape) / 8)
    return model.to(dtype)


def train(make, dtype, group, hook, rank, exact_data):
    # Several buckets, but one for PowerSGD: its hook issues a bucket's
    # second all_reduce from the first one's callback, so with several
    # buckets the ranks may issue them in different orders, on any backend
    # (Gloo aborts; docs/python.md, "What works").
    model = DDP(make(dtype), process_group=group,
                bucket_cap_mb=25 if hook == "powersgd" else 0.01)
    if hook == "fp16":
        model.register_comm_hook(group, default_hooks.fp16_compress_hook)
    elif hook == "powersgd":
        state = powersgd.PowerSGDState(process_group=group, matrix_approximation_rank=1,
                                       start_powerSGD_iter=2, min_compression_rate=0.5)
        model.register_comm_hook(state, powersgd.powerSGD_hook)
    lr, momentum = (1 / 64, 0) if exact_data else (0.05, 0.9)
    if hook == "zero":  # each rank steps its shard, then broadcasts it
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.SGD,
                                      process_group=group, lr=lr, momentum=momentum)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    gen = torch.Generator().manual_seed(100 + rank)
    after = []
    for _ in range(STEPS):
        opt.zero_grad()
        if exact_data:
            x = torch.randint(-2, 3, (4, 8), generator=gen).to(dtype)
            model(x).sum().backward()
        else:
            x = torch.randn(8, 16, generator=gen, dtype=dtype)
            torch.nn.functional.mse_loss(model(x), x[:, :4]).backward()
        opt.step()
        after.append(torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone())
    return after


def compare(case, rank, ddp_group, gloo_group, *args):
    ours = train(*args[:2], ddp_group, *args[2:])
    theirs = train(*args[:2], gloo_group, *args[2:])
    for step, (a, b) in enumerate(zip(ours, theirs)):
        if not torch.equal(a, b):
            raise AssertionError(f"rank {rank}, {case}: parts from gloo at step {step}, "
                                 f"max |difference| {(a - b).abs().max().item()}")
    print(f"rank {rank}, {case}: the same as over gloo after {STEPS} steps")


def body(rank, world_size):
    dist.init_process_group("ddp", timeout=timedelta(seconds=60))
    gloo = dist.new_group(backend="gloo")
    ours = dist.group.WORLD
    if world_size == 2:
        for dtype in (torch.float64, torch.float32):
            for hook in ("none", "fp16", "powersgd", "zero"):
                compare(f"MLP {dtype} hook {hook}", rank, ours, gloo, mlp, dtype, hook, rank, False)
    else:
        compare("dyadic float64", rank, ours, gloo, dyadic, torch.float64, "none", rank, True)
    dist.destroy_process_group()
    # Leaves without finalizing Python: PyTorch's Gloo may still be releasing
    # a comm hook's Python callback on its own thread, which then aborts the
    # process ("terminate called without an active exception"), or drops
    # the gloo group's last reference there and joins itself ("Resource
    # deadlock avoided"). Seen with PowerSGD; PyTorch's, not the "ddp"
    # backend's (it drains its completions at exit: completions.h).
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main(body, __file__, world_sizes=(2, 4))
