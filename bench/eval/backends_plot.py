#!/usr/bin/env python3
"""Bus bandwidth against message size for each implementation of one
`ddp_bench collectives` run (its --json file): the plot of docs/benchmarks.md's
backends section.

    /usr/bin/python3 bench/eval/backends_plot.py RUN.json OUT.png
"""
import json
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt


def main(run_path, png_path):
    run = json.load(open(run_path))
    impls = []
    for row in run["rows"]:
        if row["impl"] not in impls:
            impls.append(row["impl"])
    fig, ax = plt.subplots(figsize=(7, 4))
    for impl in impls:
        rows = sorted((r for r in run["rows"] if r["impl"] == impl), key=lambda r: r["bytes"])
        ax.plot([r["bytes"] for r in rows], [r["busbw_GBps"] for r in rows], marker="o", label=impl)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("all-reduced bytes (float32)")
    ax.set_ylabel("bus bandwidth, GB/s (median)")
    ax.set_title("allreduce, %d ranks on one host" % run["rows"][0]["world_size"])
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(png_path, dpi=110)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
