"""ddp's collectives for PyTorch: the torch.distributed backend "ddp".

    import ddp_torch  # registers the backend
    torch.distributed.init_process_group("ddp")

Shared memory within a host and Gloo across hosts, as ddp chooses for C++
programs ($DDP_BACKEND names another of its backends). CPU tensors. What it
offers and what it does not: docs/python.md.
"""

import atexit
import warnings
from datetime import timedelta

import torch
import torch.distributed as dist

from ddp_torch._C import Backend, _drain_completions  # (after torch: it links torch's libraries)

__all__ = ["Backend"]


def _create_backend(store, rank, world_size, timeout):
    return Backend(store, rank, world_size, timeout)


def _drain_at_exit():
    if not _drain_completions(timedelta(seconds=10)):
        warnings.warn("ddp_torch: a future's callback was still running 10 s after the program "
                      "ended; the interpreter may abort while it finishes")


if "ddp" not in dist.Backend.backend_list:
    dist.Backend.register_backend("ddp", _create_backend, devices=["cpu"])
    # Futures complete on threads of ddp_torch's own (python/csrc/completions.h):
    # the interpreter must not finalize while one runs a Python callback.
    atexit.register(_drain_at_exit)
