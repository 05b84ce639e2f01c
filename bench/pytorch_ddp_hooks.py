"""The communication hooks of PyTorch's side of `ddp_bench train`
(pytorch_ddp_train.py): the compression hooks by the names `--hook` takes, and
the hook that does what PyTorch's default allreduce does, optionally deferred
to the end of backward (--no-overlap) and timestamped into a Timeline of
the library's Chrome trace events (--timeline)."""

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
    """Rank 0's timed iterations as the library's Chrome trace events (those
    of src/timeline/chrome_trace.h, as bench/timeline.h records them for ddp_bench):
    "X" events with cat = lane, ts/dur in µs of the monotonic clock (what
    time.perf_counter reads), args {"blocking" (not on compute), "iteration"},
    one "iteration" event per iteration, "compute" on tid 0 and every other
    lane on rows of its own (a new row where spans overlap). `events` is
    the row's "timeline"."""

    def __init__(self):
        self.events = [{"name": "process_name", "ph": "M", "pid": 0,
                        "args": {"name": "rank 0"}}]
        self._thread(0, "compute")
        self.rows = {}  # lane -> [[tid, end_us], ...]
        self.next_tid = 1
        self.iteration = 0
        self.current = None

    def _thread(self, tid, name):
        self.events += [{"name": "thread_name", "ph": "M", "pid": 0, "tid": tid,
                         "args": {"name": name}},
                        {"name": "thread_sort_index", "ph": "M", "pid": 0, "tid": tid,
                         "args": {"sort_index": tid}}]

    def begin(self, start):
        self.current = [("iteration", "iteration", start, None, False)]

    def add(self, lane, name, start, end, blocking=False):
        if self.current is not None:
            self.current.append((lane, name, start, end, blocking))

    def end(self):
        spans, self.current = self.current, None
        spans[0] = spans[0][:3] + (time.perf_counter(), False)
        for lane, name, a, b, blocking in sorted(spans, key=lambda s: s[2]):
            a, b = a * 1e6, b * 1e6
            event = {"name": name, "cat": lane, "ph": "X", "pid": 0, "tid": 0, "ts": a,
                     "dur": max(b - a, 0.0), "args": {"iteration": self.iteration}}
            if lane != "compute":
                rows = self.rows.setdefault(lane, [])
                row = next((r for r in rows if r[1] <= a), None)
                if row is None:
                    row = [self.next_tid, b]
                    self.next_tid += 1
                    rows.append(row)
                    self._thread(row[0], lane if len(rows) == 1 else "%s %d" % (lane, len(rows)))
                row[1] = b
                event["tid"] = row[0]
                event["args"]["blocking"] = blocking
            self.events.append(event)
        self.iteration += 1


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
