#!/usr/bin/python3
"""Draws DDP_TIMELINE traces (docs/ddp.md, "Timeline") as a lane chart, PNG.

    scripts/timeline_plot.py trace.rank0.json trace.rank1.json -o timeline.png
    scripts/timeline_plot.py trace.rank*.json --iterations 10-12 -o out.png

One row per (rank, row) of the files, as chrome://tracing shows them: the
rank's compute row (forward, backward, the copy-back, the program's
TimelineSpans) and its comm rows (each bucket's allreduce or comm hook from
launch to completion, buffer broadcasts). Ranks of one host line up (the
files share the host's monotonic clock). Needs matplotlib (Debian:
python3-matplotlib).
"""
import argparse
import json
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {"forward": "#4c72b0", "forward (no_sync)": "#8fa9d6", "forward (no grad)": "#8fa9d6",
          "backward": "#dd8452", "finalize (copy back)": "#c9a227",
          "broadcast buffers": "#c44e52"}
BUCKET = ["#55a868", "#3d8c55", "#7fc48f", "#2a6b3f"]
SPAN = "#8172b3"  # the program's own TimelineSpans


def load(path):
    with open(path) as f:
        data = json.load(f)
    return data["traceEvents"] if isinstance(data, dict) else data


def color(e):
    name = e["name"]
    if name in COLORS:
        return COLORS[name]
    if " bucket " in name:
        return BUCKET[int(name.split(" bucket ")[1].split()[0]) % len(BUCKET)]
    return SPAN


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("files", nargs="+")
    p.add_argument("-o", "--output", required=True, help="the PNG to write")
    p.add_argument("--iterations", help="A-B: synchronized iterations A to B "
                   "(default: the last three in the files)")
    p.add_argument("--title", default="DDP_TIMELINE")
    args = p.parse_args()

    events = [e for path in args.files for e in load(path)]
    spans = [e for e in events if e.get("ph") == "X"]
    numbered = sorted({e["args"]["iteration"] for e in spans if "iteration" in e.get("args", {})})
    if not numbered:
        sys.exit("timeline_plot: no iterations in %s" % ", ".join(args.files))
    if args.iterations:
        lo, hi = (int(v) for v in args.iterations.split("-"))
    else:
        lo, hi = max(numbered[0], numbered[-1] - 2), numbered[-1]
    chosen = [e for e in spans if lo <= e.get("args", {}).get("iteration", -1) <= hi]
    if not chosen:
        sys.exit("timeline_plot: no spans of iterations %d-%d" % (lo, hi))
    t0 = min(e["ts"] for e in chosen)
    t1 = max(e["ts"] + e["dur"] for e in chosen)
    # The program's spans (no iteration of their own) inside the window.
    chosen += [e for e in spans if "iteration" not in e.get("args", {})
               and e["ts"] >= t0 and e["ts"] + e["dur"] <= t1]

    names = {(e["pid"], e.get("tid")): e["args"]["name"] for e in events
             if e.get("ph") == "M" and e["name"] in ("thread_name", "process_name")}
    rows = sorted({(e["pid"], e["tid"]) for e in chosen})
    y = {row: i for i, row in enumerate(reversed(rows))}
    fig, ax = plt.subplots(figsize=(12, 0.55 * len(rows) + 1.3), dpi=110)
    for e in chosen:
        start, width = (e["ts"] - t0) / 1000, e["dur"] / 1000
        row = y[(e["pid"], e["tid"])]
        ax.broken_barh([(start, width)], (row - 0.38, 0.76), facecolors=color(e),
                       edgecolors="white", linewidth=0.4)
        label = e["name"].replace("allreduce ", "").replace("comm hook ", "hook ")
        if width > (t1 - t0) / 1000 * 0.011 * len(label):
            ax.text(start + width / 2, row, label, ha="center", va="center", fontsize=7,
                    color="white", clip_on=True)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(["%s · %s" % (names.get((pid, None), "pid %d" % pid),
                                     names.get((pid, tid), "tid %d" % tid))
                        for pid, tid in reversed(rows)], fontsize=8)
    ax.set_xlim(0, (t1 - t0) / 1000)
    ax.set_xlabel("ms")
    ax.set_title("%s: iterations %d-%d" % (args.title, lo, hi), fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in
               (COLORS["forward"], COLORS["backward"], BUCKET[0], COLORS["finalize (copy back)"],
                COLORS["broadcast buffers"], SPAN)]
    fig.legend(handles, ["forward", "backward", "bucket: launch to completion",
                         "finalize (copy back)", "broadcast buffers", "TimelineSpan (program's)"],
               fontsize=8, loc="lower center", ncol=6, frameon=False)
    fig.tight_layout(rect=(0, 0.35 / fig.get_figheight(), 1, 1))
    fig.savefig(args.output)
    print("timeline_plot: iterations %d-%d, %d spans on %d rows -> %s"
          % (lo, hi, len(chosen), len(rows), args.output))


if __name__ == "__main__":
    main()
