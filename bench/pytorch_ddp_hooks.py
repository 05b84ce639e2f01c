"""The communication hooks of PyTorch's side of `ddp_bench train`
(pytorch_ddp_train.py): the compression hooks by the names `--hook` takes, and
the hook that does what PyTorch's default allreduce does, optionally deferred
to the end of backward (--no-overlap) and timestamped into a Timeline in the
format of bench/timeline.h (--timeline)."""

import time

import torch
import torch.distributed as dist


def register_hook(ddp, name):
    """As `ddp_bench train --hook NAME` (bench/train_bench.cpp)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook as psgd
    if name == "fp16":
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif name == "bf16":
        ddp.register_comm_hook(None, default_hooks.bf16_compress_hook)
    elif name.startswith("powersgd"):
        ddp.register_comm_hook(psgd.PowerSGDState(process_group=None,
                                                  matrix_approximation_rank=int(name[-1]),
                                                  start_powerSGD_iter=2), psgd.powerSGD_hook)
    elif name == "batched_powersgd1":
        ddp.register_comm_hook(psgd.PowerSGDState(process_group=None, matrix_approximation_rank=1,
                                                  start_powerSGD_iter=2),
                               psgd.batched_powerSGD_hook)


class Timeline:
    """Rank 0's record of timed iterations, as bench/timeline.h writes them:
    {"iteration", "duration_us", "events": [{"lane", "name", "start_us",
    "end_us", "blocking"}]}, times in µs after the iteration's start."""

    def __init__(self):
        self.iterations = []
        self.current = None

    def begin(self, start):
        self.current = (start, [])

    def add(self, lane, name, start, end, blocking=False):
        if self.current is not None:
            self.current[1].append((lane, name, start, end, blocking))

    def end(self):
        t0, events = self.current
        self.current = None
        us = lambda t: (t - t0) * 1e6  # noqa: E731
        self.iterations.append({
            "iteration": len(self.iterations), "duration_us": us(time.perf_counter()),
            "events": [{"lane": lane, "name": name, "start_us": us(a), "end_us": us(b),
                        "blocking": blocking} for lane, name, a, b, blocking in events]})


def allreduce_hook(world, group, defer, timeline):
    """A communication hook doing what PyTorch's default does (average the
    bucket with one allreduce), optionally deferred to the end of backward
    compute (`defer`: every bucket waits for the last one) and timestamped
    into `timeline` (launch to completion of each bucket's allreduce)."""
    held = []

    def launch(buf, index):
        t0 = time.perf_counter()
        fut = dist.all_reduce(buf.div_(world), group=group, async_op=True).get_future()

        def done(f):
            timeline.add("comm", "allreduce bucket %d (%d bytes)" % (index, buf.numel() * 4),
                         t0, time.perf_counter())
            return f.value()[0]
        return fut.then(done) if timeline is not None else fut.then(lambda f: f.value()[0])

    def hook(state, bucket):
        if not defer:
            return launch(bucket.buffer(), bucket.index())
        result = torch.futures.Future()
        held.append((bucket.buffer(), bucket.index(), result))
        if bucket.is_last():
            for buf, index, res in held:
                launch(buf, index).then(lambda f, res=res: res.set_result(f.value()))
            held.clear()
        return result
    return hook
