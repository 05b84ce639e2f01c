#!/usr/bin/python3
"""The tables of `bench/evaluate.py train` from its runs (`ddp_bench train
--json`, side "ddp"; bench/pytorch_ddp_train.py --json, side "pytorch"; or an
earlier output of this module, whose runs are read again).

Per model it pools the per-iteration samples (slowest rank each) of all
rounds and reports median, min and max per measurement; ours/PyTorch as the
ratio of pooled medians and as the median over rounds of the per-round ratio;
our DDP split (medians of model->stats() per iteration, rank 0); the limit
max(local, allreduce) from the C++ runs and the efficiency limit / iteration
time of both sides (where the runs measured them).

The errors it returns: the two sides do not hold the same parameters (names,
shapes, order), or a side ran a different configuration.
"""

import json
import statistics
from collections import defaultdict

from harness import paired_ratio, write_json


def stats(v):
    v = sorted(v)
    return {"median": statistics.median(v), "min": v[0], "max": v[-1], "samples": len(v)}


def fmt(x, d=1):
    return "%.*f" % (d, x)


def summarize(paths, link, note="", json_path=""):
    """(markdown, errors) for the runs in `paths`; with json_path, writes every
    run's rows and the pooled results there."""
    runs = defaultdict(list)  # model -> [run]
    all_runs = []
    for path in paths:
        with open(path) as f:
            doc = json.load(f)
        lists = {r["model"]: r["parameter_list"] for r in doc.get("results", [])}
        for k, run in enumerate(doc["runs"] if "runs" in doc else [doc]):
            run.setdefault("machine", doc.get("machine"))
            run["parameters"].setdefault("list", lists.get(run["config"]["model"]))
            run["_path"] = path if "runs" not in doc else "%s#%d" % (path, k)
            runs[run["config"]["model"]].append(run)
            all_runs.append(run)

    errors = []
    results = []
    machine = None
    for model in sorted(runs):
        rs = runs[model]
        ours = [r for r in rs if r["side"] == "ddp"]
        theirs = [r for r in rs if r["side"] == "pytorch"]
        if not ours or not theirs:
            errors.append("%s: need runs of both sides (have %d ours, %d PyTorch)"
                          % (model, len(ours), len(theirs)))
            continue
        machine = machine or ours[0]["machine"]
        # Same model on both sides: names, shapes, order.
        ref = ours[0]["parameters"]
        for r in rs:
            if r["parameters"]["list"] != ref["list"]:
                a, b = ref["list"], r["parameters"]["list"]
                first = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]),
                             min(len(a), len(b)))
                errors.append("%s: %s has different parameters than %s: %d vs %d tensors; "
                              "first difference at #%d: %r vs %r"
                              % (model, r["_path"], ours[0]["_path"], len(b), len(a), first,
                                 a[first] if first < len(a) else None,
                                 b[first] if first < len(b) else None))
        for key in ("world_size", "batch_per_rank", "bucket_cap_mb", "iters", "warmup", "lr",
                    "seed", "intra_op_threads"):
            values = {json.dumps(float(v) if isinstance(v, (int, float)) else v)
                      for v in (r["config"].get(key) for r in rs)}
            if len(values) > 1:
                errors.append("%s: runs differ in %s: %s" % (model, key, sorted(values)))

        pooled = defaultdict(list)
        per_round = defaultdict(dict)  # impl -> tag -> median
        split = defaultdict(list)
        their_split = defaultdict(list)
        buckets = {}
        first_loss = {}
        for r in rs:
            for row in r["rows"]:
                pooled[row["impl"]] += row["samples_ms"]
                per_round[row["impl"]][r.get("tag", "")] = row["median_ms"]
                if "first_loss" in row:
                    first_loss.setdefault(row["impl"], row["first_loss"])
                if row["impl"] == "ddp":
                    for k, v in row["stats_rank0"].items():
                        split[k] += v
                if row["impl"] == "pytorch_ddp":
                    for k, v in row.get("pytorch_stats_rank0", {}).items():
                        their_split[k] += v
                if "bucket_bytes" in row:
                    buckets.setdefault(row["impl"], row["bucket_bytes"])
        s = {impl: stats(v) for impl, v in pooled.items()}
        o, t = s["ddp"]["median"], s["pytorch_ddp"]["median"]
        by_round, round_ratios = paired_ratio(per_round["ddp"], per_round["pytorch_ddp"])
        res = {"model": model, "link": link, "world_size": ours[0]["config"]["world_size"],
               "batch_per_rank": ours[0]["config"]["batch_per_rank"],
               "parameters": ref["count"], "parameter_elements": ref["elements"],
               "parameter_list": ref["list"],
               "gradient_bytes": ref["elements"] * 4,
               "parameters_match": all(r["parameters"]["list"] == ref["list"] for r in rs),
               "rounds": len(round_ratios), "measurements": s,
               "per_round_median_ms": {k: dict(v) for k, v in per_round.items()},
               "ours_over_pytorch": o / t,
               "ours_over_pytorch_by_round": by_round,
               "ours_split_ms": {k: statistics.median(v) for k, v in split.items()},
               "pytorch_split_ms": {k: statistics.median(v) for k, v in their_split.items()},
               "bucket_bytes": buckets,
               "first_loss": first_loss}
        if "local" in s and "allreduce" in s:
            limit = max(s["local"]["median"], s["allreduce"]["median"])
            res.update(limit_ms=limit, efficiency_ours=limit / o, efficiency_pytorch=limit / t)
        if "local" in s and "pytorch_local" in s:
            # What DDP adds to each side's own local iteration.
            res.update(overhead_ours_ms=o - s["local"]["median"],
                       overhead_pytorch_ms=t - s["pytorch_local"]["median"])
        results.append(res)

    # --- tables ------------------------------------------------------------
    out = []
    if machine:
        out.append("Link: %s. Machine: %s, %s CPUs allowed, %s, libtorch %s.\n"
                   % (machine.get("link", link), machine.get("cpu_model"),
                      machine.get("cpus_allowed"), machine.get("kernel"), machine.get("libtorch")))
    if note:
        out.append(note[0].upper() + note[1:] + ".\n")
    out.append("| model | ours ms | PyTorch ms | ours/PyTorch | by round | ours fwd / bwd compute / "
               "comm / overlap / finalize ms | local ms | allreduce ms (DDP's buckets) | limit ms | "
               "efficiency ours | efficiency PyTorch | PyTorch local ms | DDP overhead ours / PyTorch ms |")
    out.append("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for r in results:
        m = r["measurements"]
        sp = r["ours_split_ms"]
        cell = lambda k: "%s (%s–%s)" % (fmt(m[k]["median"]), fmt(m[k]["min"]), fmt(m[k]["max"]))
        ar = "%s (%s)" % (fmt(m["allreduce"]["median"]), fmt(m["allreduce_buckets"]["median"])) \
            if "allreduce_buckets" in m else fmt(m.get("allreduce", {}).get("median", float("nan")))
        med = lambda k: fmt(m[k]["median"]) if k in m else ""  # noqa: E731
        num = lambda k, d=3: "%.*f" % (d, r[k]) if r.get(k) is not None else ""  # noqa: E731
        out.append("| %s | %s | %s | %s | %s | %s / %s / %s / %s / %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["model"], cell("ddp"), cell("pytorch_ddp"), num("ours_over_pytorch"),
            num("ours_over_pytorch_by_round"), fmt(sp["forward_ms"]), fmt(sp["backward_compute_ms"]),
            fmt(sp["communication_ms"]), fmt(sp["overlap_ms"]), fmt(sp["finalize_ms"]),
            med("local"), ar if "allreduce" in m else "", num("limit_ms", 1),
            num("efficiency_ours"), num("efficiency_pytorch"), med("pytorch_local"),
            "%s / %s" % (fmt(r["overhead_ours_ms"]), fmt(r["overhead_pytorch_ms"]))
            if "overhead_ours_ms" in r else ""))
    out.append("")
    out.append("Per round (median ms of each run; rounds alternate which side goes first):\n")
    out.append("| model | round | ours | PyTorch | ours/PyTorch | local | PyTorch local | allreduce |")
    out.append("|---|---|--:|--:|--:|--:|--:|--:|")
    for r in results:
        pr = r["per_round_median_ms"]
        for tag in sorted(pr["ddp"]):
            g = lambda k: fmt(pr[k][tag]) if k in pr and tag in pr[k] else ""
            out.append("| %s | %s | %s | %s | %.3f | %s | %s | %s |" % (
                r["model"], tag, g("ddp"), g("pytorch_ddp"),
                pr["ddp"][tag] / pr["pytorch_ddp"][tag] if tag in pr["pytorch_ddp"] else float("nan"),
                g("local"), g("pytorch_local"), g("allreduce")))
    out.append("")
    out.append("Both sides' own split (medians, rank 0; ours from model->stats(), PyTorch's from "
               "its DDP logger, _get_ddp_logging_data(); PyTorch's backward compute starts at the "
               "end of forward, ours when backward reaches the output) and bucket sizes:\n")
    out.append("| model | side | forward ms | backward compute ms | communication ms | overlap ms | "
               "comm after compute ms | buckets (MB, launch order) |")
    out.append("|---|---|--:|--:|--:|--:|--:|---|")
    for r in results:
        o, t = r["ours_split_ms"], r["pytorch_split_ms"]
        mb = lambda impl: ", ".join("%.2f" % (b / 1e6) for b in r["bucket_bytes"].get(impl, []))
        out.append("| %s | ours | %s | %s | %s | %s | %s | %s |" % (
            r["model"], fmt(o["forward_ms"]), fmt(o["backward_compute_ms"]),
            fmt(o["communication_ms"]), fmt(o["overlap_ms"]),
            fmt(o["communication_ms"] - o["overlap_ms"]), mb("ddp")))
        if t:
            out.append("| %s | PyTorch | %s | %s | %s | %s | %s | %s |" % (
                r["model"], fmt(t["forward_compute_time"]), fmt(t["backward_compute_time"]),
                fmt(t["backward_comm_time"]), fmt(t["backward_compute_comm_overlap_time"]),
                fmt(t["backward_comm_time"] - t["backward_compute_comm_overlap_time"]),
                mb("pytorch_ddp")))
    out.append("")
    for r in results:
        fl = r["first_loss"]
        same = "same" if abs(fl.get("ddp", 0) - fl.get("pytorch_ddp", 1)) <= 1e-5 * abs(fl.get("ddp", 1)) else "DIFFERENT"
        out.append("%s: %d parameter tensors, %d elements (%.1f MiB of gradients) on both sides, "
                   "same names, shapes and order: %s; first loss ours %.6g, PyTorch %.6g (%s)."
                   % (r["model"], r["parameters"], r["parameter_elements"],
                      r["gradient_bytes"] / 1048576, "yes" if r["parameters_match"] else "NO",
                      fl.get("ddp", float("nan")), fl.get("pytorch_ddp", float("nan")), same))
    if json_path:
        # The parameter lists are in results (checked equal): not 32 times.
        kept = [dict({k: v for k, v in r.items() if k not in ("_path", "machine")},
                     parameters={k: v for k, v in r["parameters"].items() if k != "list"})
                for r in all_runs]
        write_json(json_path, {"benchmark": "train", "link": link, "note": note,
                               "machine": machine, "results": results, "errors": errors,
                               "runs": kept}, compact_lists=True)
    return "\n".join(out), errors
