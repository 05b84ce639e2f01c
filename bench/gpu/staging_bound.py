"""What staging costs at least, for ranks that share one GPU over shm
(bench/gpu/compare.sh's mlp4096-w2): each rank's gradients are copied to
pinned host memory, reduced across the ranks by shm, and copied back. This
script measures the copies: BYTES per rank, the ranks copying at once (as
they do in training), to the host and back, the median over ITERS. shm's
allreduce of BYTES at the same world size is measured by compare.sh with
ddp_bench collectives; summary.py puts them together:
  serial bound = to host + allreduce + back; pipelined bound = the largest
  of the three (buckets overlap: one is copied while another is reduced).

    python3 bench/gpu/staging_bound.py --world-size 2 --bytes 1G --json OUT
"""
import argparse
import json
import statistics
import time

import torch
import torch.multiprocessing as mp

UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def byte_size(text):
    return int(text[:-1]) * UNITS[text[-1]] if text[-1] in UNITS else int(text)


def rank_main(rank, world, nbytes, iters, barrier, results):
    torch.cuda.set_device(0)
    n = nbytes // 4
    device = torch.randn(n, device="cuda")
    host = torch.empty(n, pin_memory=True)
    times = {"to_host_ms": [], "to_device_ms": []}
    for i in range(iters + 1):  # the first of each: a warm-up
        for key, dst, src in (("to_host_ms", host, device), ("to_device_ms", device, host)):
            torch.cuda.synchronize()
            barrier.wait()
            t0 = time.perf_counter()
            dst.copy_(src, non_blocking=True)
            torch.cuda.synchronize()
            if i:
                times[key].append((time.perf_counter() - t0) * 1e3)
    results[rank] = {k: statistics.median(v) for k, v in times.items()}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--bytes", default="1G")
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--json", required=True)
    a = p.parse_args()
    nbytes = byte_size(a.bytes)
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(a.world_size), ctx.Manager().dict()
    procs = [ctx.Process(target=rank_main, args=(r, a.world_size, nbytes, a.iters, barrier, results))
             for r in range(a.world_size)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=600)
        if proc.exitcode != 0:
            raise SystemExit("staging_bound: a rank failed (exit %s)" % proc.exitcode)
    # The slowest rank's: the ranks copy at once and wait for each other.
    out = {k: max(results[r][k] for r in range(a.world_size)) for k in results[0]}
    out.update(bytes=nbytes, world_size=a.world_size, iters=a.iters,
               device=torch.cuda.get_device_name(0))
    with open(a.json, "w") as f:
        json.dump(out, f, indent=1)
    print("staging_bound: %s" % json.dumps(out))


if __name__ == "__main__":
    main()
