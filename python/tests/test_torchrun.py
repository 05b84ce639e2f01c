"""Under torchrun, the launcher PyTorch users start with: init_process_group
("ddp") with what torchrun sets, and PyTorch's DDP trains over it."""

import os
import subprocess
import sys

import torch
import torch.distributed as dist

if __name__ == "__main__" and "RANK" not in os.environ:
    from launch import free_port
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                          "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
                          __file__], capture_output=True, text=True, timeout=240)
    print(out.stdout, out.stderr)
    sys.exit(out.returncode)

import ddp_torch  # noqa: E402,F401

dist.init_process_group("ddp")
rank, size = dist.get_rank(), dist.get_world_size()
backend = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
print(f"rank {rank} of {size}: ddp chose {backend.ddp_backend}")
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 2))
x = torch.full((4, 8), float(rank + 1))
model(x).sum().backward()
# The gradient of the weight: the mean over ranks of each rank's 4 * (rank + 1).
expected = torch.full((2, 8), 4 * (1 + size) / 2)
assert torch.equal(model.module.weight.grad, expected), model.module.weight.grad
dist.destroy_process_group()
