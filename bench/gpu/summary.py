"""The table of bench/gpu/compare.sh: per case, each side's median iteration
time (the median over rounds of each run's median), and DDP's overhead over
local training on each side.

    python3 bench/gpu/summary.py OUT
"""
import glob
import json
import os
import statistics
import sys


def medians(out):
    """{(case, impl): the median over rounds of each run's median_ms}."""
    found = {}
    for path in sorted(glob.glob(os.path.join(out, "*.json"))):
        case = os.path.basename(path).rsplit("-", 2)[0]
        with open(path) as f:
            for row in json.load(f)["rows"]:
                found.setdefault((case, row["impl"]), []).append(row["median_ms"])
    return {k: statistics.median(v) for k, v in found.items()}


def main():
    out = sys.argv[1]
    m = medians(out)
    cases = sorted({case for case, _ in m})
    print("| case | ddp ms | local ms | ddp overhead ms | PyTorch DDP ms | PyTorch local ms "
          "| PyTorch overhead ms | overhead ratio | DDP time ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    for case in cases:
        ddp, local = m.get((case, "ddp")), m.get((case, "local"))
        pt, pt_local = m.get((case, "pytorch_ddp")), m.get((case, "pytorch_local"))
        cell = lambda v: "%.2f" % v if v is not None else "—"
        ours = ddp - local if ddp is not None and local is not None else None
        theirs = pt - pt_local if pt is not None and pt_local is not None else None
        ratio = ours / theirs if ours is not None and theirs else None
        speed = ddp / pt if ddp is not None and pt else None
        print("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            case, cell(ddp), cell(local), cell(ours), cell(pt), cell(pt_local), cell(theirs),
            "%.2f" % ratio if ratio is not None else "—",
            "%.3f" % speed if speed is not None else "—"))
    line = bound(out, m)
    if line:
        print()
        print(line)



def bound(out, m):
    """The staging bound of mlp4096-w2 (compare.sh's OUT/bound/), as a line."""
    try:
        with open(os.path.join(out, "bound", "copies.json")) as f:
            copies = json.load(f)
        with open(os.path.join(out, "bound", "shm.json")) as f:
            shm_ms = json.load(f)["rows"][0]["median_us"] / 1e3
    except (OSError, KeyError, IndexError, ValueError):
        return None
    stages = (copies["to_host_ms"], shm_ms, copies["to_device_ms"])
    serial, pipelined = sum(stages), max(stages)
    line = ("Staging bound of mlp4096-w2 (%d ranks, %.2f GiB each, %s): to host %.1f ms, shm "
            "allreduce %.1f ms, back %.1f ms; serial %.1f ms, pipelined %.1f ms" % (
                copies["world_size"], copies["bytes"] / 2**30, copies["device"], *stages,
                serial, pipelined))
    ddp = m.get(("mlp4096-w2", "ddp"))
    if ddp is not None:
        line += "; ddp's %.1f ms is %.2f x the pipelined bound, %.2f x the serial" % (
            ddp, ddp / pipelined, ddp / serial)
    return line + "."

if __name__ == "__main__":
    main()
