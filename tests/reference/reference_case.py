"""The case of a cross-check against PyTorch's DDP (pytorch_ddp.py): its
settings per mode, the model, and the files through which both sides get the
same initial weights and data (manifest.txt, init.bin, x.bin, y.bin,
branch.bin; raw little-endian) and return their results."""
import os
import re

import torch

WORLD = 2
STEPS = 6
BATCH = 4  # per rank
LR = 0.1
MOMENTUM = 0.9
BUCKET_CAP_MB = 0.01  # several buckets on the ddp side; PyTorch's first bucket is 1 MiB regardless
TOLERANCE = 1e-5
DTYPES = {"float64": torch.float64, "float32": torch.float32}
MODES = ["plain", "no_sync", "find_unused", "no_sync_find_unused",
         "hook_fp16", "hook_powersgd_r1", "hook_powersgd_r2", "hook_batched_powersgd_r1"]
HOOK_STEPS = 8  # PowerSGD: 2 vanilla iterations, then 6 compressed ones
HOOK_BUCKET_CAP_MB = 25.0  # one bucket on both sides
START_POWERSGD_ITER = 2
# Gate of each hook against PyTorch's DDP with the same hook, relative to a
# tensor's largest magnitude, per dtype. fp16: exact (the same float16 casts
# and divisions, and a sum of two float16 values is rounded once either way).
# PowerSGD: the same algorithm, but not always the same order of floating-point
# sums: PyTorch multiplies with bmm, whose small-matrix kernel (n*m*rank < 400,
# here the 4x32 fc3.weight at rank 1) rounds differently from ddp's mm;
# observed up to 7e-15 (float64) and 1.4e-6 (float32) in the gradients.
HOOK_TOLERANCES = {
    "fp16": {"float64": 0.0, "float32": 0.0},
    "powersgd": {"float64": 1e-6, "float32": 1e-4},
    # Not a test: PyTorch 1.13's batched_powerSGD_hook fails at its first
    # compressed step (_orthogonalize asserts a 3-D batch, it gets the 2-D Q).
    "batched_powersgd": {"float64": 1e-6, "float32": 1e-4},
}


def hook_settings(mode):
    """(hook, PowerSGD rank) of a mode: ("none", 0) without a hook."""
    m = re.fullmatch(r"hook_(fp16|powersgd|batched_powersgd)(?:_r(\d+))?", mode)
    if not m:
        return "none", 0
    return m.group(1), int(m.group(2) or 0)

# Whether each rank's forward takes the branch, per step (find_unused mode).
BRANCH_SCHEDULE = [
    [0, 1],  # unused on rank 0 only, before it ever had a gradient there
    [1, 1],
    [0, 0],  # globally unused: gradients stay as zero_grad left them
    [1, 0],  # unused on rank 1 only
    [0, 0],
    [1, 1],
]
# no_sync_find_unused: per step, per micro-batch (the first two under
# no_sync), per rank. Parameters used only while accumulating must still be
# reduced at the synchronized backward (PyTorch #69031).
BRANCH_SCHEDULE_NO_SYNC = [
    [[1, 0], [0, 0], [0, 0]],  # used only in an accumulated micro-batch, on rank 0 only
    [[0, 0], [0, 1], [1, 1]],
    [[0, 0], [0, 0], [0, 0]],  # globally unused
    [[1, 1], [0, 0], [0, 0]],  # used by both ranks, only while accumulating
    [[0, 0], [0, 0], [1, 0]],  # used on rank 0 only, in the synchronized micro-batch
    [[1, 1], [1, 1], [1, 1]],
]


class Net(torch.nn.Module):
    """16 -> 32 -> 32 -> 4 with a tanh branch beside the middle layer."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.fc2 = torch.nn.Linear(32, 32)
        self.branch = torch.nn.Linear(32, 32)
        self.fc3 = torch.nn.Linear(32, 4)

    def forward(self, x, use_branch: bool):
        h = torch.tanh(self.fc1(x))
        out = torch.tanh(self.fc2(h))
        if use_branch:
            out = out + torch.tanh(self.branch(h))
        return self.fc3(out)


def write_raw(path, tensor):
    array = tensor.detach().contiguous().numpy()
    with open(path, "wb") as f:
        f.write(array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes())


def read_raw(path, dtype, shape):
    # frombuffer reads native order: little-endian on the machines this runs on.
    with open(path, "rb") as f:
        data = bytearray(f.read())
    t = torch.frombuffer(data, dtype=dtype)
    want = 1
    for d in shape:
        want *= d
    if t.numel() != want:
        raise SystemExit(f"{path}: {t.numel()} elements, expected {want} ({list(shape)})")
    return t.reshape(shape)


def read_manifest(directory):
    settings, params = {}, []
    with open(os.path.join(directory, "manifest.txt")) as f:
        for line in f:
            words = line.split()
            if not words:
                continue
            if words[0] == "param":
                params.append((words[1], [int(d) for d in words[2:]]))
            else:
                settings[words[0]] = words[1]
    return settings, params


def write_case(directory, mode, dtype_name):
    dtype = DTYPES[dtype_name]
    micro = 3 if mode.startswith("no_sync") else 1
    find_unused = mode.endswith("find_unused")
    hook, powersgd_rank = hook_settings(mode)
    steps = HOOK_STEPS if hook != "none" else STEPS
    bucket_cap_mb = HOOK_BUCKET_CAP_MB if hook != "none" else BUCKET_CAP_MB
    torch.manual_seed(12345)
    net = Net().to(dtype)
    x = torch.randn(steps, micro, WORLD * BATCH, 16, dtype=torch.float64).to(dtype)
    y = torch.randn(steps, micro, WORLD * BATCH, 4, dtype=torch.float64).to(dtype)
    if mode == "no_sync_find_unused":
        branch = torch.tensor(BRANCH_SCHEDULE_NO_SYNC, dtype=dtype)
    elif find_unused:
        branch = torch.tensor(BRANCH_SCHEDULE, dtype=dtype).reshape(STEPS, 1, WORLD)
    else:
        branch = torch.ones(steps, micro, WORLD, dtype=dtype)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "manifest.txt"), "w") as f:
        f.write(f"mode {mode}\ndtype {dtype_name}\nworld {WORLD}\nsteps {steps}\nmicro {micro}\n"
                f"batch {BATCH}\nlr {LR!r}\nmomentum {MOMENTUM!r}\nbucket_cap_mb {bucket_cap_mb!r}\n"
                f"find_unused {int(find_unused)}\nhook {hook}\npowersgd_rank {powersgd_rank}\n"
                f"start_powerSGD_iter {START_POWERSGD_ITER}\n")
        for name, p in net.named_parameters():
            f.write(f"param {name} {' '.join(str(d) for d in p.shape)}\n")
    write_raw(os.path.join(directory, "init.bin"), torch.cat([p.detach().reshape(-1) for p in net.parameters()]))
    write_raw(os.path.join(directory, "x.bin"), x)
    write_raw(os.path.join(directory, "y.bin"), y)
    write_raw(os.path.join(directory, "branch.bin"), branch)


def load_case(directory):
    s, params = read_manifest(directory)
    dtype = DTYPES[s["dtype"]]
    steps, micro, world, batch = int(s["steps"]), int(s["micro"]), int(s["world"]), int(s["batch"])
    total = sum(torch.Size(shape).numel() for _, shape in params)
    case = dict(
        settings=s, params=params, dtype=dtype, steps=steps, micro=micro, world=world, batch=batch,
        total=total,
        init=read_raw(os.path.join(directory, "init.bin"), dtype, [total]),
        x=read_raw(os.path.join(directory, "x.bin"), dtype, [steps, micro, world * batch, 16]),
        y=read_raw(os.path.join(directory, "y.bin"), dtype, [steps, micro, world * batch, 4]),
        branch=read_raw(os.path.join(directory, "branch.bin"), dtype, [steps, micro, world]))
    return case


def initial_net(case):
    net = Net().to(case["dtype"])
    with torch.no_grad():
        offset = 0
        for (name, shape), (own_name, p) in zip(case["params"], net.named_parameters()):
            assert name == own_name and list(p.shape) == shape, (name, shape, own_name, p.shape)
            p.copy_(case["init"][offset:offset + p.numel()].reshape(p.shape))
            offset += p.numel()
    return net
