"""The collectives of the "ddp" backend against a NumPy oracle: every op on
every dtype ddp takes, at sizes from empty to past shm's pipeline chunk, on 2
and 3 ranks. Inputs are small integers, so that every dtype holds every sum
and product exactly and results compare bit for bit (AVG, a division, to the
dtype's rounding)."""

import warnings
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist

from launch import main

warnings.filterwarnings("ignore", category=FutureWarning)  # all_reduce_coalesced

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16,
          torch.int32, torch.int64, torch.uint8]
SIZES = [0, 1, 1000, 300_001]
OPS = {"SUM": dist.ReduceOp.SUM, "AVG": dist.ReduceOp.AVG, "PRODUCT": dist.ReduceOp.PRODUCT,
       "MIN": dist.ReduceOp.MIN, "MAX": dist.ReduceOp.MAX}


def values(rank, n):
    """Rank `rank`'s input: integers in [1, 3] (so that products stay small)."""
    return (np.arange(n, dtype=np.int64) * (rank + 1) + rank) % 3 + 1


def oracle(op, world_size, n):
    inputs = np.stack([values(r, n) for r in range(world_size)]).astype(np.float64)
    return {"SUM": inputs.sum(0), "AVG": inputs.sum(0) / world_size,
            "PRODUCT": inputs.prod(0), "MIN": inputs.min(0), "MAX": inputs.max(0)}[op]


def tensor_of(array, dtype):
    return torch.from_numpy(np.ascontiguousarray(array, dtype=np.float64)).to(dtype)


def check(got, expected, what, exact=True):
    if exact:
        same = torch.equal(got, expected)
    else:  # to the dtype's rounding
        same = torch.allclose(got.double(), expected.double(), atol=0,
                              rtol=torch.finfo(got.dtype).eps)
    if not same:
        diff = (got.double() - expected.double()).abs()
        first = int(diff.nonzero()[0][0]) if diff.numel() else -1
        raise AssertionError(f"{what}: differs from the oracle, first at element {first}: "
                             f"{got.flatten()[first].item()} != {expected.flatten()[first].item()}")


def body(rank, world_size):
    dist.init_process_group("ddp", timeout=timedelta(seconds=60))
    assert dist.get_backend() == "ddp", dist.get_backend()
    for dtype in DTYPES:
        floating = dtype.is_floating_point
        for n in SIZES:
            mine = values(rank, n)
            for name, op in OPS.items():
                if name == "AVG" and not floating:
                    continue
                t = tensor_of(mine, dtype)
                dist.all_reduce(t, op=op)
                check(t, tensor_of(oracle(name, world_size, n), dtype),
                      f"all_reduce {name} {dtype} {n}", exact=name != "AVG")
            # async, with a future chained as DDP's comm hooks do
            t = tensor_of(mine, dtype)
            fut = dist.all_reduce(t, async_op=True).get_future().then(lambda f: f.value()[0] * 2)
            check(fut.wait(), tensor_of(oracle("SUM", world_size, n) * 2, dtype),
                  f"all_reduce future {dtype} {n}")
            for root in range(world_size):
                t = tensor_of(values(rank, n), dtype)
                dist.broadcast(t, src=root)
                check(t, tensor_of(values(root, n), dtype), f"broadcast from {root} {dtype} {n}")
            gathered = [torch.empty(n, dtype=dtype) for _ in range(world_size)]
            dist.all_gather(gathered, tensor_of(mine, dtype))
            for r in range(world_size):
                check(gathered[r], tensor_of(values(r, n), dtype), f"all_gather {dtype} {n}")
            flat = torch.empty(world_size * n, dtype=dtype)
            dist.all_gather_into_tensor(flat, tensor_of(mine, dtype))
            check(flat, tensor_of(np.concatenate([values(r, n) for r in range(world_size)]),
                                  dtype), f"all_gather_into_tensor {dtype} {n}")
            # reduce_scatter: rank r's part p is values(r, world_size * n)[p]
            whole = values(rank, world_size * n)
            for name, op in OPS.items():
                if name == "AVG" and not floating:
                    continue
                expected = tensor_of(oracle(name, world_size, world_size * n)[rank * n:(rank + 1) * n],
                                     dtype)
                out = torch.empty(n, dtype=dtype)
                dist.reduce_scatter(out, list(tensor_of(whole, dtype).chunk(world_size))
                                    if n else [torch.empty(0, dtype=dtype)] * world_size, op=op)
                check(out, expected, f"reduce_scatter {name} {dtype} {n}", exact=name != "AVG")
                out = torch.empty(n, dtype=dtype)
                dist.reduce_scatter_tensor(out, tensor_of(whole, dtype), op=op)
                check(out, expected, f"reduce_scatter_tensor {name} {dtype} {n}",
                      exact=name != "AVG")
        for name in ("SUM", "MAX"):
            a, b = tensor_of(values(rank, 5), dtype), tensor_of(values(rank, 7), dtype)
            dist.all_reduce_coalesced([a, b], op=OPS[name])
            check(a, tensor_of(oracle(name, world_size, 5), dtype), f"all_reduce_coalesced {dtype}")
            check(b, tensor_of(oracle(name, world_size, 7), dtype), f"all_reduce_coalesced {dtype}")
    # The Work: wait with a timeout, then its state.
    t = torch.ones(1000)
    work = dist.all_reduce(t, async_op=True)
    assert work.wait(timeout=timedelta(seconds=30))
    assert work.is_completed() and work.is_success()  # (exception(): PyTorch cannot convert it)
    assert work.get_future().done()
    check(t, torch.full((1000,), float(world_size)), "all_reduce waited with a timeout")
    dist.barrier()
    # A subgroup: its own PrefixStore, its own ddp group.
    evens = dist.new_group([r for r in range(world_size) if r % 2 == 0], backend="ddp")
    if rank % 2 == 0:
        t = torch.ones(10)
        dist.all_reduce(t, group=evens)
        check(t, torch.full((10,), float((world_size + 1) // 2)), "all_reduce on a subgroup")
    dist.destroy_process_group()


if __name__ == "__main__":
    main(body, __file__, world_sizes=(2, 3))
