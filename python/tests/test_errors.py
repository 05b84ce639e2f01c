"""Misuse and faults from Python: each raises PyTorch's exception type on
every rank concerned, carrying ddp's message, within the timeout.
- a call the backend does not offer: NotImplementedError naming it;
- misuse on one rank: ValueError naming what is wrong;
- ranks that reduce different sizes, under DDP_DEBUG=detail: ValueError on
  every rank naming the sizes;
- a rank that dies: the survivors raise DistBackendError naming it, and
  with DDP_FLIGHT_RECORDER_DIR each survivor dumps its last collectives,
  which ddp-flight ($DDP_FLIGHT_TOOL, when CTest passes it) reads."""

import glob
import os
import subprocess
import sys
import tempfile
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from launch import check_all_passed, launch

CASE = os.environ.get("CASE")


def expect(exception_type, call, *words):
    try:
        call()
    except exception_type as e:
        text = str(e)
        missing = [w for w in words if w not in text]
        assert not missing, f"the error does not say {missing}: {text}"
        print(f"raised {type(e).__name__}: {text.splitlines()[0]}")
        return
    raise AssertionError(f"no {exception_type.__name__} from {call}")


def unsupported(rank, world_size):
    t = torch.ones(4)
    expect(NotImplementedError, lambda: dist.send(t, dst=(rank + 1) % world_size), "send")
    expect(NotImplementedError, lambda: dist.reduce(t, dst=0), "reduce")
    expect(NotImplementedError, lambda: dist.all_reduce(t.int(), op=dist.ReduceOp.BAND), "ReduceOp")
    # The group still works after each refusal.
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((4,), float(world_size))), t


def misuse(rank, world_size):
    out = torch.empty(world_size * 4 + 1)
    expect(ValueError, lambda: dist.all_gather_into_tensor(out, torch.ones(4)),
           "all_gather_into_tensor", str(world_size * 4 + 1))
    expect(ValueError, lambda: dist.all_reduce(torch.ones(4, 4).t()), "contiguous")
    dist.barrier()  # the group still works


def mismatch(rank, world_size):
    t = torch.ones(10 + rank)
    # DDP_DEBUG=detail compares the collectives' fingerprints first.
    expect(ValueError, lambda: dist.all_reduce(t), "10", "11")


def dead_peer(rank, world_size):
    t = torch.ones(1000)
    dist.all_reduce(t)
    if rank == world_size - 1:
        os._exit(3)  # dies between two collectives
    start = time.monotonic()
    expect(dist.DistBackendError, lambda: dist.all_reduce(t), f"rank {world_size - 1}")
    took = time.monotonic() - start
    # shm sees the death at once (docs: about 0.1 s), long before the timeout.
    assert took < 5, f"the survivors raised after {took:.1f} s (the timeout is 20 s)"
    print(f"raised after {took:.2f} s")


CASES = {"unsupported": (unsupported, 2, {}),
         "misuse": (misuse, 2, {}),
         "mismatch": (mismatch, 2, {"DDP_DEBUG": "detail"}),
         "dead_peer": (dead_peer, 3, {})}


if __name__ == "__main__":
    if CASE:  # a rank
        import ddp_torch  # noqa: F401
        dist.init_process_group("ddp", timeout=timedelta(seconds=20))
        CASES[CASE][0](int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))
        sys.stdout.flush()
        os._exit(0)  # a broken group is not torn down: its peers are gone
    flights = tempfile.mkdtemp(prefix="ddp-torch-flights.")
    CASES["dead_peer"][2]["DDP_FLIGHT_RECORDER_DIR"] = flights
    for case, (_, world_size, env) in CASES.items():
        results = launch(__file__, world_size, dict(env, CASE=case), timeout=120)
        if case == "dead_peer":  # the last rank died on purpose
            assert results[-1][0] == 3, results[-1]
            results = results[:-1]
        check_all_passed(__file__, world_size, results)
        if case == "dead_peer":
            dumps = glob.glob(os.path.join(flights, "*"))
            assert len(dumps) >= world_size - 1, f"the survivors' flight dumps: {dumps}"
            if os.environ.get("DDP_FLIGHT_TOOL"):
                said = subprocess.run([os.environ["DDP_FLIGHT_TOOL"], flights],
                                      capture_output=True, text=True, timeout=60)
                print(f"ddp-flight: {said.stdout.strip()}")
                assert f"rank {world_size - 1}" in said.stdout, said.stdout + said.stderr
        for rank, (_, out) in enumerate(results):
            print(f"{case}, rank {rank}: " + " | ".join(
                l for l in out.splitlines() if l.startswith("raised")))
