#!/usr/bin/python3
"""PyTorch's DDP on the task of `paper_bench converge`: the reference side.

Training loss against micro-batch on scikit-learn's "digits" (1797 real 8x8
handwritten digits), gradients synchronized every K micro-batches (no_sync on
the others): the paper's Fig. 11 experiment. Run once per rank with Debian's
python3-torch (/usr/bin/python3) under a launcher that sets RANK, WORLD_SIZE,
MASTER_ADDR and MASTER_PORT:

    experiments/paper/evaluate.py digits /tmp/digits.csv
    build/tools/ddprun/ddprun --nproc-per-node 2 -- /usr/bin/python3 \\
        experiments/paper/pytorch_converge.py --data /tmp/digits.csv --sync-every 1,2,4,8 \\
        --json converge_pytorch.json

and compare with the C++ side's output (no launcher, no torch needed):

    /usr/bin/python3 experiments/paper/pytorch_converge.py --compare converge_ddp.json \\
        converge_pytorch.json

Everything is as in experiments/paper/converge_bench.cpp (read its opening comment):
features / 16, rows [0, 1500) train and the rest held out; the sample order
from splitmix64-driven Fisher-Yates shuffles (no torch RNG); micro-batch t is
stream samples [t*W*B, (t+1)*W*B), rank r's slice [r*B, (r+1)*B);
torch.manual_seed(seed) then nn.Sequential(Linear(64,128), ReLU,
Linear(128,128), ReLU, Linear(128,10)) with default init; cross-entropy; the
K-th micro-batch of each group (and the last of the run) synced, the others
under no_sync; then SGD step and zero_grad. Both sides print a checksum of
each initial parameter (sum and FNV-1a of its float32 bytes) and record each
loss also as its float32 bit pattern, so that equality can be checked exactly.
"""

import argparse
from contextlib import nullcontext
import json
import os
import struct
import sys
import time

FEATURES, CLASSES, TRAIN_ROWS = 64, 10, 1500
MASK64 = (1 << 64) - 1


def load_digits(path):
    """(x [n][64] in [0, 1], labels [n]) from the plain CSV `experiments/paper/evaluate.py digits` writes."""
    try:
        f = open(path)
    except OSError as e:
        sys.exit("pytorch_converge.py: cannot read --data %s (%s): write it with "
                 "experiments/paper/evaluate.py digits (needs python3-sklearn)" % (path, e.strerror))
    xs, ys = [], []
    with f:
        for row, line in enumerate(f, 1):
            if not line.strip():
                continue
            v = [float(s) for s in line.split(",")]
            if len(v) != FEATURES + 1:
                sys.exit("pytorch_converge.py: %s row %d: %d fields, expected 65 (64 pixels, label)"
                         % (path, row, len(v)))
            if v[-1] not in range(CLASSES):
                sys.exit("pytorch_converge.py: %s row %d: label %g is not one of 0..9"
                         % (path, row, v[-1]))
            xs.append([p / 16.0 for p in v[:FEATURES]])
            ys.append(int(v[-1]))
    if len(ys) <= TRAIN_ROWS:
        sys.exit("pytorch_converge.py: %s has %d rows, expected more than %d (the digits have 1797)"
                 % (path, len(ys), TRAIN_ROWS))
    return xs, ys


def sample_stream(seed, n, count):
    """The first `count` samples of the stream of epochs, each a Fisher-Yates
    shuffle of 0..n-1 (from the identity) driven by splitmix64 from state
    `seed`, the state continuing across epochs (as converge_bench.cpp)."""
    out, state = [], seed & MASK64
    while len(out) < count:
        perm = list(range(n))
        for i in range(n - 1, 0, -1):
            state = (state + 0x9E3779B97F4A7C15) & MASK64
            z = state
            z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
            z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
            z ^= z >> 31
            j = z % (i + 1)
            perm[i], perm[j] = perm[j], perm[i]
        out.extend(perm[:count - len(out)])
    return out


def fnv1a64(t):
    h = 0xcbf29ce484222325
    for b in t.detach().contiguous().numpy().tobytes():
        h = ((h ^ b) * 0x100000001b3) & MASK64
    return "%016x" % h


def f32_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def compare(paths):
    """Prints, per K, the max abs and relative difference of the two files'
    loss curves, how many losses are bit-identical, and both accuracies."""
    sides = []
    for p in paths:
        with open(p) as f:
            sides.append(json.load(f))
    a, b = sides
    pa = {p["name"]: p["fnv1a64"] for p in a.get("parameters", [])}
    pb = {p["name"]: p["fnv1a64"] for p in b.get("parameters", [])}
    print("initial weights: %s" % ("identical (FNV-1a of every parameter's bytes)" if pa == pb
                                   else "DIFFERENT: %s vs %s" % (pa, pb)))
    for key in ("world_size", "batch_per_rank", "steps", "lr", "momentum", "seed", "accumulate"):
        if a["config"].get(key) != b["config"].get(key):
            print("warning: config %s differs: %s vs %s" % (key, a["config"].get(key),
                                                           b["config"].get(key)))
    runs_b = {r["sync_every"]: r for r in b["runs"]}
    print("\n| K | micro-batches | identical (bits) | first differing | max abs diff | "
          "max rel diff (first 50) | max rel diff | accuracy %s | accuracy %s |"
          % (a["side"], b["side"]))
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for ra in a["runs"]:
        rb = runs_b.get(ra["sync_every"])
        if rb is None:
            continue
        la = [struct.unpack("<f", struct.pack("<I", u))[0] for u in ra["loss_f32_bits"]]
        lb = [struct.unpack("<f", struct.pack("<I", u))[0] for u in rb["loss_f32_bits"]]
        n = min(len(la), len(lb))
        same = sum(ra["loss_f32_bits"][i] == rb["loss_f32_bits"][i] for i in range(n))
        first = next((i for i in range(n) if ra["loss_f32_bits"][i] != rb["loss_f32_bits"][i]), None)
        absd = [abs(la[i] - lb[i]) for i in range(n)]
        rel = [absd[i] / max(abs(la[i]), abs(lb[i]), 1e-30) for i in range(n)]
        print("| %d | %d | %d | %s | %.3g | %.3g | %.3g | %.1f | %.1f |"
              % (ra["sync_every"], n, same, "-" if first is None else first, max(absd),
                 max(rel[:50]), max(rel), 100 * ra["accuracy"], 100 * rb["accuracy"]))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", help="the digits as plain CSV (experiments/paper/evaluate.py digits writes it)")
    p.add_argument("--sync-every", default="1,2,4,8",
                   help="values of K, run one after the other (default 1,2,4,8)")
    p.add_argument("--steps", type=int, default=400, help="micro-batches per run (default 400)")
    p.add_argument("--batch", type=int, default=16, help="samples per rank (default 16)")
    p.add_argument("--lr", type=float, default=0.05, help="SGD learning rate (default 0.05)")
    p.add_argument("--momentum", type=float, default=0.0, help="SGD momentum (default 0)")
    p.add_argument("--accumulate", choices=("sum", "mean"), default="sum",
                   help="sum (default, as the paper) or mean of a group's gradients "
                        "(each micro-batch's loss divided by K before backward)")
    p.add_argument("--seed", type=int, default=0, help="weights and sample order (default 0)")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per rank (default 1)")
    p.add_argument("--json", default="", help="rank 0 writes the curves there")
    p.add_argument("--compare", nargs=2, metavar=("A.json", "B.json"),
                   help="compare two outputs (paper_bench converge or this script's); no launcher")
    args = p.parse_args()
    if args.compare:
        compare(args.compare)
        return
    if not args.data:
        p.error("--data is required: the digits CSV (experiments/paper/evaluate.py digits /tmp/digits.csv)")
    try:
        ks = [int(k) for k in args.sync_every.split(",")]
    except ValueError:
        ks = []
    if not ks or min(ks) < 1:
        p.error("--sync-every takes positive integers separated by commas (e.g. 1,2,4,8)")
    if args.steps < 1 or args.batch < 1 or args.lr < 0 or args.momentum < 0 or args.seed < 0:
        p.error("--steps and --batch must be at least 1; --lr, --momentum, --seed not negative")
    if not os.environ.get("WORLD_SIZE"):
        sys.exit("pytorch_converge.py: WORLD_SIZE is not set: run one process per rank under a "
                 "launcher, e.g. ddprun --nproc-per-node 2 -- /usr/bin/python3 %s ..." % sys.argv[0])

    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
    from pytorch_ddp_train import (  # bench/pytorch_ddp_train.py
        bench_models, describe_machine, leave, write_result)

    torch.set_num_threads(args.threads)
    blas_threads = bench_models.limit_openblas_threads(args.threads)
    xs, ys = load_digits(args.data)
    x_all = torch.tensor(xs, dtype=torch.float64).to(torch.float32)
    y_all = torch.tensor(ys, dtype=torch.int64)
    train_x, train_y = x_all[:TRAIN_ROWS], y_all[:TRAIN_ROWS]
    test_x, test_y = x_all[TRAIN_ROWS:], y_all[TRAIN_ROWS:]

    dist.init_process_group("gloo")  # env://
    rank, world = dist.get_rank(), dist.get_world_size()
    glob = world * args.batch
    stream = sample_stream(args.seed, TRAIN_ROWS, args.steps * glob)

    def make_mlp():
        torch.manual_seed(args.seed)
        return nn.Sequential(nn.Linear(FEATURES, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(),
                             nn.Linear(128, CLASSES))

    params = []
    for name, t in make_mlp().named_parameters():
        s = t.detach().double().sum().item()
        h = fnv1a64(t)
        shape = ", ".join(str(d) for d in t.shape)
        if rank == 0:
            print("pytorch_converge: init %-8s [%s] sum %.17g fnv1a64 %s" % (name, shape, s, h),
                  file=sys.stderr, flush=True)
        params.append({"name": name, "shape": "[%s]" % shape, "sum": s, "fnv1a64": h})

    runs = []
    keep = []  # PyTorch 1.13 can hang destroying a DDP Reducer mid-run: keep them till leave()
    for k in ks:
        start = time.perf_counter()
        net = make_mlp()
        model = nn.parallel.DistributedDataParallel(net)
        opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
        opt.zero_grad()
        losses = []
        for t in range(args.steps):
            sync = (t + 1) % k == 0 or t + 1 == args.steps
            first = t * glob + rank * args.batch
            index = torch.tensor(stream[first:first + args.batch], dtype=torch.int64)
            x, y = train_x.index_select(0, index), train_y.index_select(0, index)
            with (nullcontext() if sync else model.no_sync()):
                loss = F.cross_entropy(model(x), y)
                (loss / k if args.accumulate == "mean" else loss).backward()
            mean = loss.detach().clone()
            dist.all_reduce(mean)
            mean.div_(world)
            losses.append(mean.item())
            if sync:
                opt.step()
                opt.zero_grad()
            if rank == 0 and ((t + 1) % 100 == 0 or t + 1 == args.steps):
                print("pytorch_converge: K=%d micro-batch %d/%d loss %.4f"
                      % (k, t + 1, args.steps, losses[-1]), file=sys.stderr, flush=True)
        with torch.no_grad():
            logits = net(test_x)
            test_loss = F.cross_entropy(logits, test_y).item()
            accuracy = (logits.argmax(1) == test_y).sum().item() / len(test_y)
        runs.append({"sync_every": k, "loss": losses,
                     "loss_f32_bits": [f32_bits(v) for v in losses],
                     "accuracy": accuracy, "test_loss": test_loss,
                     "wall_s": time.perf_counter() - start})
        keep.append(model)
    if rank != 0:
        leave()

    print("converge (pytorch): digits, MLP 64-128-128-10, %d ranks x %d samples, %d micro-batches, "
          "SGD lr %g momentum %g, accumulate %s; torch %s\n"
          % (world, args.batch, args.steps, args.lr, args.momentum, args.accumulate,
             torch.__version__))
    print("| sync every | first loss | loss (last 20) | held-out loss | held-out accuracy % | wall s |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in runs:
        tail = r["loss"][-20:]
        print("| %d | %.4f | %.4f | %.4f | %.1f | %.1f |"
              % (r["sync_every"], r["loss"][0], sum(tail) / len(tail), r["test_loss"],
                 100 * r["accuracy"], r["wall_s"]))
    sys.stdout.flush()
    if args.json:
        out = {"benchmark": "converge", "side": "pytorch", "machine": describe_machine(),
               "config": {"data": args.data, "train_rows": TRAIN_ROWS, "test_rows": len(test_y),
                          "world_size": world, "batch_per_rank": args.batch, "steps": args.steps,
                          "lr": args.lr, "momentum": args.momentum, "accumulate": args.accumulate,
                          "seed": args.seed, "sync_every": ks,
                          "model": "Sequential(Linear(64,128), ReLU, Linear(128,128), ReLU, "
                                   "Linear(128,10))",
                          "method": "as experiments/paper/converge_bench.cpp",
                          "intra_op_threads": args.threads, "openblas_threads": blas_threads,
                          "backend": "gloo"},
               "parameters": params, "runs": runs}
        write_result("pytorch_converge", args.json, out)
    leave()


if __name__ == "__main__":
    main()
