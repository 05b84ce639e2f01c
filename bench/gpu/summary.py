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


if __name__ == "__main__":
    main()
