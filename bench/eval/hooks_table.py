#!/usr/bin/env python3
"""The table of `bench/evaluate.py hooks` from its runs: per model x hook,
ours and PyTorch's median iteration time (over all rounds' samples), their
ratio, the bytes each rank sent per iteration (mean over ranks, median over
rounds), and the speedup against the same side's uncompressed (hook none)
time. A run that failed is a JSON file {"side", "model", "hook", "failed"}.
"""

import json
import statistics

from harness import write_json

HOOKS = ("none", "fp16", "bf16", "powersgd1", "powersgd2", "powersgd4", "batched_powersgd1")


def summarize(paths, link, note="", json_path=""):
    """The markdown table of the runs in `paths`; with json_path, every pooled
    result there too."""
    cells = {}  # (model, hook, side) -> {"samples": [], "tx": [], "failed": []}
    machine = None
    for path in paths:
        with open(path) as f:
            d = json.load(f)
        if "failed" in d:
            key = (d["model"], d["hook"], d["side"])
            cells.setdefault(key, {"samples": [], "tx": [], "failed": []})["failed"].append(d["failed"])
            continue
        machine = machine or d.get("machine")
        side = d["side"]
        for row in d["rows"]:
            if row["impl"] not in ("ddp", "pytorch_ddp"):
                continue
            key = (row["model"], row.get("hook", d["config"].get("hook", "none")), side)
            c = cells.setdefault(key, {"samples": [], "tx": [], "failed": []})
            c["samples"] += row["samples_ms"]
            if "tx_bytes_per_iter" in row:
                c["tx"].append(row["tx_bytes_per_iter"])
    results = []
    models = [m for m in ("mlp", "resnet18") if any(k[0] == m for k in cells)]

    def med(key):
        c = cells.get(key)
        return statistics.median(c["samples"]) if c and c["samples"] else None

    out = []
    out.append("Communication hooks, 2 ranks, link: %s%s\n" % (link, "; " + note if note else ""))
    for model in models:
        out.append("\n%s\n" % model)
        out.append("| hook | ours ms | PyTorch ms | ours / PyTorch | ours bytes/iter | PyTorch bytes/iter "
                   "| ours speedup vs none | PyTorch speedup vs none |")
        out.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for hook in HOOKS:
            if not any(k[:2] == (model, hook) for k in cells):
                continue
            r = {"model": model, "hook": hook}
            for side in ("ddp", "pytorch"):
                c = cells.get((model, hook, side), {"samples": [], "tx": [], "failed": []})
                m = med((model, hook, side))
                base = med((model, "none", side))
                r[side] = {"median_ms": m, "samples_ms": c["samples"],
                           "tx_bytes_per_iter": statistics.median(c["tx"]) if c["tx"] else None,
                           "failed": c["failed"],
                           "speedup_vs_none": base / m if m and base else None}
            o, t = r["ddp"], r["pytorch"]
            r["ratio"] = o["median_ms"] / t["median_ms"] if o["median_ms"] and t["median_ms"] else None

            def ms(s):
                if s["median_ms"] is not None:
                    return "%.1f" % s["median_ms"] + (" (%d of the runs failed)" % len(s["failed"]) if s["failed"] else "")
                if not s["failed"]:
                    return "not run"
                f = s["failed"][0]
                if f.startswith("not run"):
                    return f
                if "CUDA 11+" in f:
                    return "fails (needs CUDA 11+ and NCCL 2.10+)"
                if "EnforceNotMet" in f:
                    return "fails (Gloo aborts: gloo::EnforceNotMet)"
                return "failed: " + f[:80]

            def by(s):
                return "%.2f MB" % (s["tx_bytes_per_iter"] / 1e6) if s["tx_bytes_per_iter"] is not None else "–"

            def sp(s):
                return "%.2fx" % s["speedup_vs_none"] if s["speedup_vs_none"] else "–"
            out.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
                hook, ms(o), ms(t), "%.3f" % r["ratio"] if r["ratio"] else "–", by(o), by(t), sp(o), sp(t)))
            results.append(r)
    if json_path:
        write_json(json_path, {"benchmark": "hooks", "link": link, "note": note,
                               "machine": machine, "runs": list(paths), "results": results})
    return "\n".join(out)
