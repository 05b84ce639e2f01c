#!/usr/bin/python3
"""Evaluation report: tables, figures and targets from a results directory.

    bench/eval/report.py DIR [--docs docs/benchmarks.md --images docs/img/eval]
                             [--smooth W] [--strict]

DIR is what bench/evaluate.py writes: meta.json (preset, links, machine, git,
model check, notes) and runs.json (one entry per run: experiment 1..8, link,
side ddp|pytorch, model, params, round, json, status, error), each run's JSON
beside them. This writes into DIR

    expN-<name>.png, expN-<name>.json   per experiment: the figure and the
                                        numbers it shows (pooled statistics,
                                        observations, failed runs)
    exp5-loss.png                       experiment 5's loss curves
    traces/<link>-<variant>.trace.json  experiment 7: one iteration per
                                        variant as a Chrome trace
    report.md                           machine, model check, targets, one
                                        section per experiment, failed runs

and with --docs replaces the text between the lines "<!-- evaluation:begin -->"
and "<!-- evaluation:end -->" of that markdown file by report.md's text (the
markers are appended with it when missing), copying the PNGs to --images
(default: img/eval beside the docs file) and pointing at them relatively.

Pooling: per configuration (link, model, side, swept value) the samples of
all rounds are pooled (a sample is one iteration, the slowest rank's time);
tables give the median and min-max of the pooled samples. ours/PyTorch is
the ratio of the two pooled medians; "by round" is the median over rounds of
the ratio of that round's two medians (the sides alternate within a round).

Any experiment, link, model or side may be missing or failed: the report
says what exists. A malformed JSON file ends the program with its name.
Debian's python3-matplotlib (Agg backend); bench/eval/timeline.py computes
the blog's columns and writes the traces.
"""

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import traceback
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plots  # noqa: E402  (bench/eval/plots.py)
from harness import md_table, paired_ratio, write_json  # noqa: E402
from harness import median as med  # noqa: E402
import timeline as tlmod  # noqa: E402  (bench/eval/timeline.py)

MODEL_ORDER = ("mlp", "resnet18", "resnet50", "bert_small", "bert_base")
SIDES = ("ddp", "pytorch")
SIDE_NAME = {"ddp": "ours", "pytorch": "PyTorch"}
MAIN_IMPL = {"ddp": "ddp", "pytorch": "pytorch_ddp"}
LOCAL_IMPL = {"ddp": "local", "pytorch": "pytorch_local"}
LATENCY_TARGET = 0.9          # ours / PyTorch per-iteration latency, 2 ranks
LATENCY_TARGET_LINKS = ("loopback", "10g")
EFFICIENCY_TARGET = 0.9       # max(local, allreduce) / ours, shaped link
EFFICIENCY_TARGET_MODELS = ("resnet50", "bert_base")
# The configuration both targets are about (the defaults of both DDPs).
DEFAULTS = {"world_size": 2, "overlap": True, "bucket_cap_mb": 25, "sync_every": 1,
            "process_groups": 1, "hook": "none"}
BEGIN, END = "<!-- evaluation:begin -->", "<!-- evaluation:end -->"
KNOWN_ERRORS = (
    ("CUDA 11+", "PyTorch 1.13's bf16_compress_hook refuses CPU tensors (needs CUDA 11+ and NCCL 2.10+)"),
    ("EnforceNotMet", "Gloo aborted (gloo::EnforceNotMet): PyTorch's PowerSGD hook chains several "
                      "buckets' collectives in callbacks and the ranks interleave them differently"),
    ("_orthogonalize", "PyTorch 1.13's batched_powerSGD_hook asserts a 3-D input in _orthogonalize"),
    ("not run", "not run"),
    ("timed out", "timed out"), ("Timeout", "timed out"),
    ("no result after", "hung: stopped by bench/evaluate.py's per-run time limit"),
    ("Segmentation fault", "a rank crashed (segmentation fault)"),
    ("signal 9", "a rank was killed (signal 9: out of memory or timeout)"),
)


# --- loading -------------------------------------------------------------------

def load_json(path):
    """The file's JSON, None when it does not exist; exits on malformed JSON."""
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        sys.exit("report.py: %s: malformed JSON: %s" % (path, e))


def load_entries(d):
    """runs.json's entries, each with its result file as "_doc"; an "ok" run
    whose file is missing becomes a failed one."""
    path = os.path.join(d, "runs.json")
    runs = load_json(path)
    if runs is None:
        return [], ["%s does not exist: no runs to report" % path]
    if not isinstance(runs, list) or not all(isinstance(e, dict) for e in runs):
        sys.exit("report.py: %s: malformed: expected a list of objects" % path)
    entries, warnings = [], []
    for e in runs:
        e = dict(e)
        if isinstance(e.get("experiment"), str) and e["experiment"].isdigit():
            e["experiment"] = int(e["experiment"])
        e["params"] = e.get("params") or {}
        e.setdefault("link", "?")
        e.setdefault("side", "?")
        if e.get("status") == "ok":
            doc = load_json(os.path.join(d, e["json"])) if e.get("json") else None
            if doc is None:
                e["status"] = "failed"
                e["error"] = "result file %s missing" % (e.get("json") or "(none recorded)")
                warnings.append("experiment %s: %s" % (e.get("experiment"), e["error"]))
            elif not isinstance(doc, dict):
                sys.exit("report.py: %s: malformed: expected an object" % os.path.join(d, e["json"]))
            else:
                e["_doc"] = doc
        entries.append(e)
    return entries, warnings


class Ctx:
    """The results directory and what every experiment needs of it."""

    def __init__(self, d, smooth):
        self.dir = d
        self.meta = load_json(os.path.join(d, "meta.json")) or {}
        if not isinstance(self.meta, dict):
            sys.exit("report.py: %s: malformed: expected an object" % os.path.join(d, "meta.json"))
        self.entries, self.warnings = load_entries(d)
        self.smooth = smooth
        links = list(self.meta.get("links") or [])
        links += sorted({e["link"] for e in self.entries} - set(links))
        self.links = links

    def ok(self, exp):
        return [e for e in self.entries if e.get("experiment") == exp and e.get("status") == "ok"]

    def failed(self, exp):
        return [e for e in self.entries if e.get("experiment") == exp and e.get("status") != "ok"]

    def link_key(self, link):
        return self.links.index(link) if link in self.links else len(self.links)

    def machine(self, side=None):
        """A run's machine object: meta's, else the first run's of `side`."""
        if side is None and self.meta.get("machine"):
            return self.meta["machine"]
        for e in self.entries:
            if "_doc" in e and (side is None or e["side"] == side) and e["_doc"].get("machine"):
                return e["_doc"]["machine"]
        return {}


def model_key(m):
    return (MODEL_ORDER.index(m) if m in MODEL_ORDER else len(MODEL_ORDER), str(m))


def norm(v):
    """25 and 25.0 are the same configuration."""
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


def value_key(v):
    return (0, v, "") if isinstance(v, (int, float)) and not isinstance(v, bool) else (1, 0, str(v))


def model_of(e):
    return e.get("model") or (e.get("_doc", {}).get("config") or {}).get("model") or "?"


def param_of(e, name, default=None):
    v = e["params"].get(name)
    if v is None and "_doc" in e:
        v = (e["_doc"].get("config") or {}).get(name)
    return norm(default if v is None else v)


# --- statistics and formatting ----------------------------------------------------

def stats(values):
    v = sorted(float(x) for x in values if isinstance(x, (int, float)) and math.isfinite(x))
    if not v:
        return None
    q = statistics.quantiles(v, n=4, method="inclusive") if len(v) > 1 else [v[0], v[0], v[0]]
    return {"median": statistics.median(v), "min": v[0], "max": v[-1], "p25": q[0], "p75": q[2],
            "n": len(v)}


def fmt(x, d=1):
    return "–" if x is None else "%.*f" % (d, x)


def fmt_ms(st):
    return "–" if not st else "%.1f (%.1f–%.1f)" % (st["median"], st["min"], st["max"])


def change_pct(new, old):
    """new relative to old, in % (+: slower/larger)."""
    return None if new is None or not old else (new / old - 1.0) * 100.0


def fmt_value(name, v):
    return {"bucket_cap_mb": "%s MB", "world_size": "%s ranks", "sync_every": "K=%s",
            "process_groups": "rr%s"}.get(name, "%s") % v


# --- failures --------------------------------------------------------------------

def error_excerpt(text, lines=2, chars=300):
    ls = [x.strip() for x in str(text or "").splitlines() if x.strip()]
    s = " / ".join(ls[-lines:])
    return s if len(s) <= chars else "…" + s[-chars:]


def error_cause(text):
    for needle, cause in KNOWN_ERRORS:
        if needle in str(text or ""):
            return cause
    return ""


def params_text(p):
    return ", ".join("%s=%s" % (k, v) for k, v in sorted(p.items())) or "–"


def failure_rows(entries):
    """Failed runs grouped by configuration (rounds joined), as dicts."""
    groups = {}
    for e in entries:
        key = (e.get("experiment"), e["link"], e["side"], model_of(e), json.dumps(e["params"], sort_keys=True))
        g = groups.setdefault(key, {"experiment": e.get("experiment"), "link": e["link"], "side": e["side"],
                                    "model": model_of(e), "params": e["params"], "rounds": [],
                                    "error": error_excerpt(e.get("error")),
                                    "cause": error_cause(e.get("error"))})
        g["rounds"].append(e.get("round"))
    return list(groups.values())


def failure_table(rows):
    return md_table(["experiment", "link", "side", "model", "params", "rounds", "cause", "error (last lines)"],
                    [[str(r["experiment"]), r["link"], SIDE_NAME.get(r["side"], r["side"]), r["model"],
                      params_text(r["params"]), ", ".join(str(x) for x in r["rounds"]),
                      r["cause"] or "–", "`%s`" % r["error"] if r["error"] else "–"] for r in rows],
                    right=[False] * 8)


def failed_keys(ctx, exp, pname, default=None):
    """(link, model, value) -> sides whose runs failed."""
    out = defaultdict(set)
    for e in ctx.failed(exp):
        out[(e["link"], model_of(e), param_of(e, pname, default) if pname else None)].add(e["side"])
    return out


# --- training runs: pooling and comparison --------------------------------------

def new_cell():
    return {"samples": [], "rounds": {}, "runs": [], "impl_samples": defaultdict(list)}


def pool_train(ctx, exp, pname, default=None, keep=lambda e: True):
    """(link, model, value of pname) -> side -> cell of pooled train runs."""
    cells = {}
    for e in ctx.ok(exp):
        if not keep(e):
            continue
        doc = e["_doc"]
        rows = {r.get("impl"): r for r in doc.get("rows", []) if isinstance(r, dict)}
        main = rows.get(MAIN_IMPL.get(e["side"]))
        if not main or not main.get("samples_ms"):
            ctx.warnings.append("%s: no %s row with samples; skipped"
                                % (e.get("json"), MAIN_IMPL.get(e["side"], "DDP")))
            continue
        key = (e["link"], model_of(e), param_of(e, pname, default) if pname else None)
        c = cells.setdefault(key, {}).setdefault(e["side"], new_cell())
        c["samples"] += main["samples_ms"]
        c["rounds"][e.get("round")] = med(main["samples_ms"])
        c["runs"].append((e, rows))
        for impl, r in rows.items():
            c["impl_samples"][impl] += r.get("samples_ms") or []
    return cells


def compare(sides, scale=1.0):
    """Pooled stats per side (samples / scale), ours/PyTorch both ways."""
    res = {}
    for side in SIDES:
        c = sides.get(side)
        res[side] = stats([x / scale for x in c["samples"]]) if c else None
        res[side + "_samples_ms"] = [x / scale for x in c["samples"]] if c else []
    o, t = sides.get("ddp"), sides.get("pytorch")
    res["ratio"] = res["ddp"]["median"] / res["pytorch"]["median"] if res["ddp"] and res["pytorch"] else None
    res["ratio_by_round"], ratios = paired_ratio(o["rounds"] if o else {}, t["rounds"] if t else {})
    res["rounds_paired"] = len(ratios)
    return res


def sweep_rows(ctx, exp, cells, pname, default=None, scale=None):
    """One row per (link, model, value), failed-only configurations included."""
    failed = failed_keys(ctx, exp, pname, default)
    keys = set(cells) | set(failed)
    rows = []
    for key in sorted(keys, key=lambda k: (ctx.link_key(k[0]), model_key(k[1]), value_key(k[2]))):
        row = {"link": key[0], "model": key[1], "value": key[2]}
        row.update(compare(cells.get(key, {}), scale(key[2]) if scale else 1.0))
        for side in SIDES:
            row[side + "_failed"] = side in failed.get(key, ()) and not row[side]
        rows.append(row)
    return rows


def sweep_table(rows, vname, per=""):
    return md_table(["link", "model", vname, "ours ms%s median (min–max)" % per, "PyTorch ms%s" % per,
                     "ours/PyTorch", "by round", "samples ours / PyTorch"],
                    [[r["link"], r["model"], fmt_value(vname, r["value"]),
                      fmt_ms(r["ddp"]) if r["ddp"] or not r["ddp_failed"] else "failed",
                      fmt_ms(r["pytorch"]) if r["pytorch"] or not r["pytorch_failed"] else "failed",
                      fmt(r["ratio"], 3), fmt(r["ratio_by_round"], 3),
                      "%s / %s" % ((r["ddp"] or {}).get("n", 0), (r["pytorch"] or {}).get("n", 0))]
                     for r in rows])


def panels_of(ctx, rows):
    keys = {(r["link"], r["model"]) for r in rows}
    return sorted(keys, key=lambda k: (ctx.link_key(k[0]), model_key(k[1])))


def best_value(rows, side):
    pts = [r for r in rows if r.get(side)]
    return min(pts, key=lambda r: r[side]["median"]) if pts else None


def sweep_observations(ctx, rows, pname, baseline=None):
    """Best value per side, the ratio's range and, with a baseline value,
    every value's change against it."""
    obs = []
    for link, model in panels_of(ctx, rows):
        rs = [r for r in rows if (r["link"], r["model"]) == (link, model)]
        parts = []
        for side in SIDES:
            b = best_value(rs, side)
            if b:
                parts.append("%s fastest at %s (%.1f ms)" % (SIDE_NAME[side], fmt_value(pname, b["value"]),
                                                             b[side]["median"]))
        ratios = [r["ratio"] for r in rs if r["ratio"] is not None]
        if ratios:
            parts.append("ours/PyTorch %.3f–%.3f over %d settings" % (min(ratios), max(ratios), len(ratios)))
        if baseline is not None:
            base = next((r for r in rs if r["value"] == baseline), None)
            for side in SIDES:
                if base and base.get(side):
                    ch = ["%s %+.1f %%" % (fmt_value(pname, r["value"]), change_pct(r[side]["median"], base[side]["median"]))
                          for r in rs if r is not base and r.get(side)]
                    if ch:
                        parts.append("%s against %s: %s" % (SIDE_NAME[side], fmt_value(pname, baseline), ", ".join(ch)))
        if parts:
            obs.append("%s at %s: %s." % (model, link, "; ".join(parts)))
    return obs


# --- sections ------------------------------------------------------------------

def section(num, name, title, what):
    return {"num": num, "name": name, "title": title, "what": what, "tables": [], "image": None,
            "images": [], "observations": [], "failures": [], "notes": [], "files": []}


def finish(ctx, sec, data, draw):
    """Failures, the figure (draw(data, path)) and the JSON of one section."""
    sec["failures"] = failure_rows(ctx.failed(sec["num"]))
    png = "exp%d-%s.png" % (sec["num"], sec["name"])
    draw(data, os.path.join(ctx.dir, png))
    sec["images"].insert(0, png)
    doc = {"experiment": sec["num"], "title": sec["title"], "what": sec["what"],
           "observations": sec["observations"], "notes": sec["notes"], "failures": sec["failures"]}
    doc.update(data)
    write_json(os.path.join(ctx.dir, "exp%d-%s.json" % (sec["num"], sec["name"])), doc)
    return sec


def absent(ctx, sec):
    sec["notes"].append("No runs of this experiment in this results directory (preset %s)."
                        % ctx.meta.get("preset", "?"))
    return sec


# --- experiment 1: split all-reduce ----------------------------------------------

def exp1_split(ctx):
    sec = section(1, "split", "All-reduce of split tensors (paper Fig. 2a/b)",
                  "Total time to allreduce(SUM) a fixed number of float32 elements cut into tensors of "
                  "S elements, all launched asynchronously and waited for together; ddp's Gloo group "
                  "against libtorch's c10d::ProcessGroupGloo, interleaved in one run. ddp/c10d: ratio of "
                  "pooled medians, and paired (median over samples of ddp[i] / c10d[i], adjacent samples).")
    if not ctx.entries or not (ctx.ok(1) or ctx.failed(1)):
        return absent(ctx, sec)
    pooled = defaultdict(lambda: {"ddp": [], "c10d": [], "paired": [], "tensors": None})
    total = None
    for e in ctx.ok(1):
        doc = e["_doc"]
        total = total or (doc.get("config") or {}).get("total_elements")
        by = defaultdict(dict)
        for r in doc.get("rows", []):
            key = (e["link"], norm(r["split_elements"]))
            pooled[key][r["impl"]] = pooled[key].get(r["impl"], []) + r.get("samples_ms", [])
            pooled[key]["tensors"] = r.get("tensors")
            by[key][r["impl"]] = r.get("samples_ms", [])
        for key, d in by.items():
            if "ddp" in d and "c10d" in d:
                pooled[key]["paired"] += [a / b for a, b in zip(d["ddp"], d["c10d"]) if b > 0]
    rows = []
    for (link, split), p in sorted(pooled.items(), key=lambda kv: (ctx.link_key(kv[0][0]), kv[0][1])):
        r = {"link": link, "split_elements": split, "tensors": p["tensors"],
             "ddp": stats(p["ddp"]), "c10d": stats(p["c10d"]), "ratio_paired": med(p["paired"])}
        r["ratio"] = r["ddp"]["median"] / r["c10d"]["median"] if r["ddp"] and r["c10d"] else None
        rows.append(r)
    sec["tables"].append(md_table(
        ["link", "elements per tensor", "tensors", "ddp ms median (min–max)", "c10d ms", "ddp/c10d medians",
         "ddp/c10d paired"],
        [[r["link"], plots.size_label(r["split_elements"]), str(r["tensors"]), fmt_ms(r["ddp"]), fmt_ms(r["c10d"]),
          fmt(r["ratio"], 3), fmt(r["ratio_paired"], 3)] for r in rows]))
    sec["observations"] = split_observations(ctx, rows)
    links = sorted({r["link"] for r in rows}, key=ctx.link_key)
    data = {"title": "1. allreduce of %s float32 split into tensors" % plots.size_label(total or 0),
            "total_elements": total, "links": links, "rows": rows}
    return finish(ctx, sec, data, plots.split)


def split_observations(ctx, rows):
    obs = []
    for link in sorted({r["link"] for r in rows}, key=ctx.link_key):
        rs = [r for r in rows if r["link"] == link]
        for impl in ("ddp", "c10d"):
            pts = [r for r in rs if r.get(impl)]
            if not pts:
                continue
            best = min(pts, key=lambda r: r[impl]["median"])
            sat = next(r for r in pts if r[impl]["median"] <= 1.1 * best[impl]["median"])
            obs.append("%s, %s: fastest with %s-element tensors (%.1f ms); %s-element tensors take %.1fx as "
                       "long; within 10 %% of the best from %s elements per tensor on." % (
                           link, impl, plots.size_label(best["split_elements"]), best[impl]["median"],
                           plots.size_label(pts[0]["split_elements"]), pts[0][impl]["median"] / best[impl]["median"],
                           plots.size_label(sat["split_elements"])))
        paired = [(r["split_elements"], r["ratio_paired"]) for r in rs if r["ratio_paired"] is not None]
        if paired:
            slower = [plots.size_label(s) for s, x in paired if x > 1.02]
            obs.append("%s: ddp/c10d paired %.3f–%.3f; ddp slower by more than 2 %% at: %s." % (
                link, min(x for _, x in paired), max(x for _, x in paired), ", ".join(slower) or "none"))
    return obs


# --- experiment 2: latency breakdown -------------------------------------------

def split_median(runs, impl, key):
    """Median over runs of rank0_split[key]["median"] of row impl."""
    return med([(rows[impl].get("rank0_split") or {}).get(key, {}).get("median")
                for _, rows in runs if impl in rows])


def pooled_stat(runs, impl, per_iter_field, per_iter_key, row_key):
    """Median of a per-iteration statistic over all runs' iterations, or of
    the rows' medians where the per-iteration lists are missing."""
    vals = []
    for _, rows in runs:
        r = rows.get(impl, {})
        lst = (r.get(per_iter_field) or {}).get(per_iter_key)
        vals += lst if lst else ([r[row_key]] if r.get(row_key) is not None else [])
    return med(vals)


def timeline_comm(runs, impl):
    """(communication, overlap) medians in ms from the rows' timelines, or
    (None, None): communication = first collective's launch to the last's
    completion, overlap = its part during the "backward" compute event. Used
    for PyTorch's DDP with a deferring hook, whose logger starts its
    communication clock at the first bucket ready, not at the launch."""
    comm, overlap = [], []
    for _, rows in runs:
        for it in rows.get(impl, {}).get("timeline") or []:
            spans = [(e["start_us"], e["end_us"]) for e in it["events"] if e["lane"] == "comm"]
            bw = [(e["start_us"], e["end_us"]) for e in it["events"] if e["name"] == "backward"]
            if not spans:
                continue
            a, b = min(x for x, _ in spans), max(y for _, y in spans)
            comm.append((b - a) / 1e3)
            overlap.append(sum(max(0.0, min(b, y) - max(a, x)) for x, y in bw) / 1e3)
    return (med(comm), med(overlap)) if comm else (None, None)


def breakdown_parts(side, cell):
    runs, impl = cell["runs"], MAIN_IMPL[side]
    if side == "ddp":
        bc = pooled_stat(runs, impl, "stats_rank0", "backward_compute_ms", "backward_compute_ms")
        comm = pooled_stat(runs, impl, "stats_rank0", "communication_ms", "communication_ms")
        ov = pooled_stat(runs, impl, "stats_rank0", "overlap_ms", "overlap_ms")
    else:
        bc = pooled_stat(runs, impl, "pytorch_stats_rank0", "backward_compute_time", "backward_compute_time_ms")
        comm = pooled_stat(runs, impl, "pytorch_stats_rank0", "backward_comm_time", "backward_comm_time_ms")
        ov = pooled_stat(runs, impl, "pytorch_stats_rank0", "backward_compute_comm_overlap_time",
                         "backward_compute_comm_overlap_time_ms")
        measured = timeline_comm(runs, impl)
        if measured[0] is not None:
            comm, ov = measured
    fw = split_median(runs, impl, "forward_ms")
    opt = [split_median(runs, impl, k) for k in ("zero_grad_ms", "step_ms")]
    total = med(cell["samples"])
    parts = {"forward": fw, "backward_compute": bc,
             "comm_exposed": max(comm - (ov or 0.0), 0.0) if comm is not None else None,
             "optimizer": sum(x for x in opt if x is not None) if any(x is not None for x in opt) else None}
    parts["other"] = total - sum(v for v in parts.values() if v is not None)
    return {"iteration_ms": total, "parts": parts, "communication_ms": comm, "overlap_ms": ov,
            "hidden_pct": 100.0 * ov / comm if comm and ov is not None else None}


def exp2_breakdown(ctx):
    sec = section(2, "breakdown", "Per-iteration latency breakdown, with and without overlap (paper Fig. 6)",
                  "Median iteration (pooled, slowest rank) split into forward (+loss; the bench's clock, "
                  "same on both sides), backward compute, communication not hidden behind backward compute "
                  "(communication − overlap), optimizer (zero_grad + step) and the rest, all medians of rank 0. "
                  "Ours from DDP's statistics (backward compute from backward() to the last gradient), "
                  "PyTorch's from its DDP logger (backward compute from the end of forward). "
                  "Without overlap every bucket is reduced after backward compute (ours --no-overlap, "
                  "PyTorch's a deferring hook); PyTorch's logger would time that communication from the "
                  "first bucket ready, so there its communication and overlap come from the run's "
                  "timeline (--timeline: first launch to last completion, overlap with backward). "
                  "The figure normalizes each side to its no-overlap iteration.")
    if not (ctx.ok(2) or ctx.failed(2)):
        return absent(ctx, sec)
    cells = pool_train(ctx, 2, "overlap", True)
    rows = []
    for (link, model, overlap), sides in sorted(cells.items(), key=lambda kv: (
            ctx.link_key(kv[0][0]), model_key(kv[0][1]), not kv[0][2])):
        for side in SIDES:
            if side in sides:
                r = {"link": link, "model": model, "side": side, "overlap": bool(overlap)}
                r.update(breakdown_parts(side, sides[side]))
                rows.append(r)
    for r in rows:
        twin = next((x for x in rows if (x["link"], x["model"], x["side"]) == (r["link"], r["model"], r["side"])
                     and not x["overlap"]), None)
        r["normalize_ms"] = twin["iteration_ms"] if twin else None
        # What overlap saves: (without − with) / without.
        r["saving_pct"] = (1 - r["iteration_ms"] / twin["iteration_ms"]) * 100 if twin and r["overlap"] else None
    p = lambda r, k: fmt(r["parts"].get(k))  # noqa: E731
    sec["tables"].append(md_table(
        ["link", "model", "side", "overlap", "iteration ms", "forward", "backward compute",
         "communication (hidden %)", "not hidden", "optimizer", "other", "overlap saves (of no-overlap)"],
        [[r["link"], r["model"], SIDE_NAME[r["side"]], "on" if r["overlap"] else "off", fmt(r["iteration_ms"]),
          p(r, "forward"), p(r, "backward_compute"),
          "%s (%s)" % (fmt(r["communication_ms"]), fmt(r["hidden_pct"], 0)), p(r, "comm_exposed"),
          p(r, "optimizer"), p(r, "other"), "%.1f %%" % r["saving_pct"] if r["saving_pct"] is not None else "–"]
         for r in rows]))
    sec["observations"] = breakdown_observations(ctx, rows, cells)
    data = {"title": "2. per-iteration latency breakdown (normalized to the same side without overlap)",
            "links": sorted({r["link"] for r in rows}, key=ctx.link_key), "rows": rows,
            "comparison": [dict(link=k[0], model=k[1], overlap=k[2], **{
                x: y for x, y in compare(v).items() if not x.endswith("_samples_ms")})
                for k, v in cells.items()]}
    return finish(ctx, sec, data, plots.breakdown)


def breakdown_observations(ctx, rows, cells):
    obs = []
    for r in rows:
        if r["saving_pct"] is not None:
            hidden = ("; %.0f %% of %.1f ms of communication hidden behind backward compute"
                      % (r["hidden_pct"], r["communication_ms"]) if r["hidden_pct"] is not None else "")
            obs.append("%s at %s, %s: overlap saves %.1f %% of the iteration (%.1f ms without, %.1f ms with)%s." % (
                r["model"], r["link"], SIDE_NAME[r["side"]], r["saving_pct"], r["normalize_ms"],
                r["iteration_ms"], hidden))
    for (link, model, overlap), sides in sorted(cells.items(), key=lambda kv: (ctx.link_key(kv[0][0]), model_key(kv[0][1]))):
        c = compare(sides)
        if c["ratio"] is not None:
            obs.append("%s at %s, overlap %s: ours/PyTorch = %.3f (by round %s)." % (
                model, link, "on" if overlap else "off", c["ratio"], fmt(c["ratio_by_round"], 3)))
    return obs


# --- experiment 3: bucket sizes ----------------------------------------------------

def exp3_buckets(ctx):
    sec = section(3, "buckets", "Bucket size sweep (paper Fig. 7/8)",
                  "Per-iteration latency (slowest rank, every timed iteration of every round) for each "
                  "bucket_cap_mb; 0 MB puts every gradient in a bucket of its own. Box: quartiles, whiskers "
                  "1.5 IQR, dots beyond.")
    if not (ctx.ok(3) or ctx.failed(3)):
        return absent(ctx, sec)
    rows = sweep_rows(ctx, 3, pool_train(ctx, 3, "bucket_cap_mb", 25), "bucket_cap_mb", 25)
    sec["tables"].append(sweep_table(rows, "bucket_cap_mb"))
    sec["observations"] = sweep_observations(ctx, rows, "bucket_cap_mb", baseline=25)
    data = {"title": "3. per-iteration latency vs bucket size", "panels": panels_of(ctx, rows), "rows": rows}
    return finish(ctx, sec, data, lambda d, path: plots.boxes(d, path, "bucket size, MB"))


# --- experiment 4: scalability ---------------------------------------------------

def exp4_scaling(ctx):
    cpus = ctx.machine().get("cpus_allowed") or ctx.machine().get("logical_cpus")
    sec = section(4, "scaling", "Scalability (paper Fig. 9)",
                  "Per-iteration latency against the number of ranks (same batch per rank: weak scaling). "
                  "Scaling efficiency = latency at 1 rank / latency at n ranks (throughput per rank against "
                  "one rank alone); without a 1-rank run, the same side's local iteration (no DDP) in its "
                  "smallest run is the base, as noted.")
    if not (ctx.ok(4) or ctx.failed(4)):
        return absent(ctx, sec)
    cells = pool_train(ctx, 4, "world_size")
    rows = sweep_rows(ctx, 4, cells, "world_size")
    for link, model in panels_of(ctx, rows):
        rs = [r for r in rows if (r["link"], r["model"]) == (link, model)]
        for side in SIDES:
            base, how = scaling_base(cells, link, model, side)
            for r in rs:
                r[side + "_efficiency"] = base / r[side]["median"] if base and r.get(side) else None
            if base:
                sec["notes"].append("%s at %s, %s: base %.1f ms (%s)." % (model, link, SIDE_NAME[side], base, how))
    sec["tables"].append(md_table(
        ["link", "model", "ranks", "ours ms median (min–max)", "PyTorch ms", "ours/PyTorch", "by round",
         "efficiency ours", "efficiency PyTorch"],
        [[r["link"], r["model"], str(r["value"]), fmt_ms(r["ddp"]), fmt_ms(r["pytorch"]), fmt(r["ratio"], 3),
          fmt(r["ratio_by_round"], 3), fmt(r.get("ddp_efficiency"), 3), fmt(r.get("pytorch_efficiency"), 3)]
         for r in rows]))
    sec["observations"] = scaling_observations(ctx, rows, cpus)
    data = {"title": "4. scalability: latency and scaling efficiency", "cpus_allowed": cpus,
            "panels": panels_of(ctx, rows), "rows": rows}
    return finish(ctx, sec, data, plots.scaling)


def scaling_base(cells, link, model, side):
    sizes = sorted(k[2] for k in cells if k[:2] == (link, model) and side in cells[k])
    if not sizes:
        return None, ""
    if sizes[0] == 1:
        return med(cells[(link, model, 1)][side]["samples"]), "its 1-rank latency"
    # One rank has no link: the evaluation runs it on loopback only.
    one = next((c[side] for k, c in cells.items() if k[1:] == (model, 1) and side in c), None)
    if one:
        return med(one["samples"]), "its 1-rank latency (one rank uses no link)"
    local = med(cells[(link, model, sizes[0])][side]["impl_samples"].get(LOCAL_IMPL[side], []))
    return local, "no 1-rank run: its local iteration at %d ranks" % sizes[0] if local else ""


def scaling_observations(ctx, rows, cpus):
    obs = []
    for link, model in panels_of(ctx, rows):
        rs = [r for r in rows if (r["link"], r["model"]) == (link, model)]
        for side in SIDES:
            pts = [r for r in rs if r.get(side)]
            if len(pts) < 2:
                continue
            a, b = pts[0], pts[-1]
            obs.append("%s at %s, %s: %d → %d ranks: latency %.1f → %.1f ms (%+.1f %%), scaling efficiency "
                       "at %d ranks %s." % (model, link, SIDE_NAME[side], a["value"], b["value"], a[side]["median"],
                                            b[side]["median"], change_pct(b[side]["median"], a[side]["median"]),
                                            b["value"], fmt(b.get(side + "_efficiency"), 3)))
    over = sorted({r["value"] for r in rows if cpus and r["value"] > cpus})
    if over:
        obs.append("%s ranks exceed the %d CPUs: ranks share cores, so latency there grows with compute "
                   "as well as with communication." % (", ".join(map(str, over)), cpus))
    return obs


# --- experiment 5: no_sync ----------------------------------------------------------

def is_converge(e):
    return e["params"].get("kind") == "converge" or e.get("_doc", {}).get("benchmark") == "converge"


def exp5_nosync(ctx):
    sec = section(5, "nosync", "Skipping gradient synchronization: no_sync (paper Fig. 10/11)",
                  "Latency: an iteration is K micro-batches, the first K−1 under no_sync, one SGD step; the "
                  "table and figure give the latency per micro-batch (iteration / K). Loss: training loss "
                  "per micro-batch on a small real task for each K, ours and PyTorch's.")
    if not (ctx.ok(5) or ctx.failed(5)):
        return absent(ctx, sec)
    cells = pool_train(ctx, 5, "sync_every", 1, keep=lambda e: not is_converge(e))
    rows = sweep_rows(ctx, 5, cells, "sync_every", 1, scale=lambda k: float(k or 1))
    for r in rows:
        for side in SIDES:
            r[side + "_per_micro"] = r[side]
            base = next((x for x in rows if (x["link"], x["model"], x["value"]) == (r["link"], r["model"], 1)), None)
            r[side + "_speedup_vs_k1"] = (base[side]["median"] / r[side]["median"]
                                          if base and base.get(side) and r.get(side) else None)
    if rows:
        sec["tables"].append(sweep_table(rows, "sync_every", per=" per micro-batch"))
    sec["observations"] = nosync_observations(ctx, rows)
    curves, window = loss_curves(ctx)
    if curves:
        sec["tables"].append(loss_table(curves))
        sec["observations"] += loss_observations(curves)
        sec["notes"].append("Loss smoothing: the paper low-pass filters with SciPy's filtfilt (order 3); here a "
                            "centered moving average over %d micro-batches (shorter at both ends), raw losses "
                            "as dots. Final loss = mean of the last %d raw losses." % (window, window))
    data = {"title": "5. no_sync: latency per micro-batch", "panels": panels_of(ctx, rows), "rows": rows,
            "loss_window": window, "curves": curves}
    finish(ctx, sec, data, plots.nosync)
    plots.loss({"title": "5. training loss per micro-batch, sync every K (smoothed: moving average of %d)"
                % window, "panels": sorted({(c["link"], c["model"]) for c in curves},
                                           key=lambda k: (ctx.link_key(k[0]), model_key(k[1]))),
                "curves": curves}, os.path.join(ctx.dir, "exp5-loss.png"))
    sec["images"].append("exp5-loss.png")
    return sec


def nosync_observations(ctx, rows):
    obs = []
    for link, model in panels_of(ctx, rows):
        rs = [r for r in rows if (r["link"], r["model"]) == (link, model)]
        for side in SIDES:
            pts = ["K=%s %.2fx" % (r["value"], r[side + "_speedup_vs_k1"]) for r in rs
                   if r.get(side + "_speedup_vs_k1") is not None and r["value"] != 1]
            if pts:
                obs.append("%s at %s, %s: per micro-batch speedup against K=1: %s." % (
                    model, link, SIDE_NAME[side], ", ".join(pts)))
        ratios = ["K=%s %.3f" % (r["value"], r["ratio"]) for r in rs if r["ratio"] is not None]
        if ratios:
            obs.append("%s at %s: ours/PyTorch %s." % (model, link, ", ".join(ratios)))
    return obs


def moving_average(v, w):
    h, prefix = w // 2, [0.0]
    for x in v:
        prefix.append(prefix[-1] + x)
    out = []
    for i in range(len(v)):
        a, b = max(0, i - h), min(len(v), i + h + 1)
        out.append((prefix[b] - prefix[a]) / (b - a))
    return out


def loss_window(ctx, n):
    if ctx.smooth:
        return ctx.smooth
    return max(1, min(101, (n // 25) | 1))


def loss_curves(ctx):
    """One curve per (link, model, side, K): the first round's."""
    raw = {}
    for e in ctx.ok(5):
        if not is_converge(e):
            continue
        doc = e["_doc"]
        model = e.get("model") or (doc.get("config") or {}).get("model") or "?"
        for run in doc.get("runs", []):
            key = (e["link"], model, e["side"], norm(run.get("sync_every")))
            if key not in raw and run.get("loss"):
                raw[key] = run
    if not raw:
        return [], loss_window(ctx, 0)
    window = loss_window(ctx, min(len(r["loss"]) for r in raw.values()))
    curves = []
    for (link, model, side, k), run in sorted(raw.items(), key=lambda kv: (
            ctx.link_key(kv[0][0]), model_key(kv[0][1]), value_key(kv[0][3]), kv[0][2])):
        loss = [float(x) for x in run["loss"]]
        curves.append({"link": link, "model": model, "side": side, "sync_every": k, "loss": loss,
                       "smoothed": moving_average(loss, window), "accuracy": run.get("accuracy"),
                       "final_loss": statistics.fmean(loss[-window:]), "window": window})
    return curves, window


def loss_pairs(curves):
    """(link, model, K) -> {side: curve}."""
    pairs = defaultdict(dict)
    for c in curves:
        pairs[(c["link"], c["model"], c["sync_every"])][c["side"]] = c
    return pairs


def max_diff(a, b):
    n = min(len(a["loss"]), len(b["loss"]))
    return max((abs(x - y) for x, y in zip(a["loss"][:n], b["loss"][:n])), default=None)


def loss_table(curves):
    rows = []
    for (link, model, k), s in loss_pairs(curves).items():
        o, t = s.get("ddp"), s.get("pytorch")
        rows.append([link, model, "K=%s" % k, str(len((o or t)["loss"])),
                     fmt(o and o["final_loss"], 4), fmt(t and t["final_loss"], 4),
                     fmt(o and o["accuracy"], 4), fmt(t and t["accuracy"], 4),
                     "%.2g" % max_diff(o, t) if o and t else "–"])
    return md_table(["link", "model", "sync every", "micro-batches", "final loss ours", "final loss PyTorch",
                     "accuracy ours", "accuracy PyTorch", "max |ours − PyTorch| raw loss"], rows)


def loss_observations(curves):
    obs = []
    pairs = loss_pairs(curves)
    for (link, model, k), s in pairs.items():
        for side in SIDES:
            base = pairs.get((link, model, 1), {}).get(side)
            c = s.get(side)
            if c and base and k != 1:
                obs.append("%s at %s, %s: final loss with K=%s is %.4f, %+.1f %% against K=1 (%.4f)." % (
                    model, link, SIDE_NAME[side], k, c["final_loss"], change_pct(c["final_loss"], base["final_loss"]),
                    base["final_loss"]))
        if s.get("ddp") and s.get("pytorch"):
            obs.append("%s at %s, K=%s: ours and PyTorch's raw losses differ by at most %.2g over %d micro-batches."
                       % (model, link, k, max_diff(s["ddp"], s["pytorch"]),
                          min(len(s["ddp"]["loss"]), len(s["pytorch"]["loss"]))))
    return obs


# --- experiment 6: round-robin process groups ------------------------------------

def exp6_roundrobin(ctx):
    sec = section(6, "roundrobin", "Round-robin process groups (paper Fig. 12)",
                  "Per-iteration latency with DDP's collectives dispatched round-robin over g Gloo groups "
                  "(rr g: ours RoundRobinProcessGroup, PyTorch dist._round_robin_process_groups).")
    if not (ctx.ok(6) or ctx.failed(6)):
        return absent(ctx, sec)
    rows = sweep_rows(ctx, 6, pool_train(ctx, 6, "process_groups", 1), "process_groups", 1)
    sec["tables"].append(sweep_table(rows, "process_groups"))
    sec["observations"] = sweep_observations(ctx, rows, "process_groups", baseline=1)
    data = {"title": "6. per-iteration latency vs round-robin process groups", "panels": panels_of(ctx, rows),
            "rows": rows}
    return finish(ctx, sec, data, lambda d, path: plots.boxes(d, path, "Gloo groups (round-robin)",
                                                              lambda v: "rr%s" % v))


# --- experiment 7: the blog's variants ----------------------------------------------

# timeline.metrics key -> C++ ("metrics" of a variant row) key candidates.
CPP_KEYS = {"compute_pct": ("compute_pct",), "non_compute_pct": ("non_compute_pct",), "idle_pct": ("idle_pct",),
            "overlap_pct": ("overlap_pct",), "comm_overhead_pct": ("comm_overhead_pct",),
            "allreduce_calls": ("allreduce_calls", "allreduce_calls_per_iteration"),
            "allreduce_ms": ("allreduce_ms", "allreduce_ms_per_iteration")}
COLUMNS = (("compute_pct", "compute %"), ("non_compute_pct", "non-compute %"), ("idle_pct", "idle %"),
           ("overlap_pct", "overlap %"), ("comm_overhead_pct", "comm overhead %"),
           ("allreduce_calls", "allreduce calls"), ("allreduce_ms", "allreduce ms"))
VARIANT_ORDER = ("simple", "simple_ga", "hook_ga", "async_ga", "bucket_ga", "ddp", "pytorch_ddp")


def variant_rows(ctx):
    """(link, model, variant) -> {"timelines", "samples", "cpp": [(json, metrics, timeline)]}."""
    acc = {}
    for e in ctx.ok(7):
        doc = e["_doc"]
        for row in doc.get("rows", []):
            name = row.get("variant") or row.get("impl")
            if e["side"] == "pytorch" and name != "pytorch_ddp":
                continue
            a = acc.setdefault((e["link"], model_of(e), name),
                               {"timelines": [], "samples": [], "cpp": [], "per": 1})
            a["timelines"] += row.get("timeline") or []
            # A train run's iteration is sync_every micro-batches (PyTorch's
            # row); the variants' are micro-batches already.
            a["per"] = int((doc.get("config") or {}).get("sync_every") or 1)
            a["samples"] += [x / a["per"] for x in row.get("samples_ms") or []]
            if row.get("metrics") and row.get("timeline"):
                a["cpp"].append((e.get("json"), row["metrics"], row["timeline"]))
    return acc


def metric_disagreements(name, cpp):
    """Where the C++ metrics of a row differ from timeline.py's on the same
    timeline: > 0.5 points for %, > 0.5 for calls, > 0.5 % for ms."""
    out = []
    for path, m, timeline in cpp:
        py = tlmod.metrics(timeline)
        for key, cands in CPP_KEYS.items():
            ck = next((c for c in cands if c in m), None)
            if ck is None:
                continue
            a, b = py[key], float(m[ck])
            limit = 0.5 if not key.endswith("_ms") else max(0.005 * abs(b), 0.01)
            if abs(a - b) > limit:
                out.append("%s (%s): %s C++ %.2f, timeline.py %.2f" % (name, path, key, b, a))
    return out


def closest_to_median(timelines):
    """The synchronizing iteration (one with collectives) closest to their
    median: accumulating micro-batches have nothing to show."""
    timelines = [t for t in timelines if any(e["lane"] == "comm" for e in t["events"])] or timelines
    m = statistics.median(t["duration_us"] for t in timelines)
    return min(timelines, key=lambda t: abs(t["duration_us"] - m))


def exp7_variants(ctx):
    sec = section(7, "variants", "Hand-written DDP variants, ours and PyTorch's DDP (the blog's table)",
                  "Columns from each variant's timelines (all timed iterations of all rounds, rank 0) by "
                  "bench/eval/timeline.py: compute % = compute time (blocking collectives excluded) / "
                  "iteration; non-compute % = communication with no compute beside it; idle % = the rest; "
                  "overlap % = share of communication time hidden by compute; comm overhead % = "
                  "communication / iteration; allreduce calls and ms per micro-batch. Iteration ms: "
                  "median of the pooled samples (slowest rank) per micro-batch. Every variant but "
                  "simple accumulates 2 micro-batches per synchronization (PyTorch's DDP too, with "
                  "no_sync). Not quite like for like: PyTorch's row runs in its own process after ours, "
                  "and its timeline needs a Python communication hook (the allreduce its default does, "
                  "timestamped in a future callback that takes the GIL) and a Python hook per parameter; "
                  "ours reads DDP's statistics, at no cost, and counts the end of backward after the last "
                  "bucket (gradients written back, the small status allreduce) as compute, where "
                  "PyTorch's tail is idle. Experiment 2 has the uninstrumented comparison.")
    if not (ctx.ok(7) or ctx.failed(7)):
        return absent(ctx, sec)
    acc = variant_rows(ctx)
    os.makedirs(os.path.join(ctx.dir, "traces"), exist_ok=True)
    multi = len({(k[0], k[1]) for k in acc}) > len({k[0] for k in acc})
    rows, disagreements = [], []
    for (link, model, name), a in sorted(acc.items(), key=lambda kv: (
            ctx.link_key(kv[0][0]), model_key(kv[0][1]),
            VARIANT_ORDER.index(kv[0][2]) if kv[0][2] in VARIANT_ORDER else 99, kv[0][2])):
        if not a["timelines"]:
            ctx.warnings.append("experiment 7: %s %s at %s has no timeline" % (model, name, link))
            continue
        traced = closest_to_median(a["timelines"])
        trace = "traces/%s-%s%s.trace.json" % (link, model + "-" if multi else "", name)
        write_json(os.path.join(ctx.dir, trace), tlmod.chrome_trace(traced, "%s %s (%s)" % (name, model, link)))
        disagreements += metric_disagreements(name, a["cpp"])
        m = tlmod.metrics(a["timelines"])
        for key in ("allreduce_calls", "allreduce_ms", "iteration_ms"):  # per micro-batch
            m[key] /= a["per"]
        rows.append({"link": link, "model": model, "variant": name, "metrics": m,
                     "median_ms": med(a["samples"]), "samples": len(a["samples"]),
                     "timed_iterations": len(a["timelines"]), "trace": trace, "traced_iteration": traced,
                     "cpp_checked": len(a["cpp"])})
    sec["tables"].append(md_table(
        ["link", "model", "variant"] + [c for _, c in COLUMNS] + ["iteration ms", "trace"],
        [[r["link"], r["model"], r["variant"]] +
         [fmt(r["metrics"][k], 1) for k, _ in COLUMNS] + [fmt(r["median_ms"]), os.path.basename(r["trace"])]
         for r in rows]))
    sec["observations"] = variants_observations(ctx, rows, disagreements)
    sec["files"].append(("Chrome traces (one iteration per variant, the one closest to the median; open in "
                         "chrome://tracing or ui.perfetto.dev)", "traces"))
    data = {"title": "7. DDP variants: where the iteration goes", "panels": sorted(
        {(r["link"], r["model"]) for r in rows}, key=lambda k: (ctx.link_key(k[0]), model_key(k[1]))),
        "rows": rows, "metric_disagreements": disagreements}
    sec = finish(ctx, sec, data, plots.variants)
    return sec


def variants_observations(ctx, rows, disagreements):
    obs = []
    for link, model in sorted({(r["link"], r["model"]) for r in rows}, key=lambda k: (ctx.link_key(k[0]), model_key(k[1]))):
        rs = [r for r in rows if (r["link"], r["model"]) == (link, model) and r["median_ms"]]
        if len(rs) < 2:
            continue
        best = min(rs, key=lambda r: r["median_ms"])
        most = max(rs, key=lambda r: r["metrics"]["overlap_pct"])
        obs.append("%s at %s: fastest %s (%.1f ms); most overlap %s (%.0f %%); fewest allreduce calls %s (%.1f)." % (
            model, link, best["variant"], best["median_ms"], most["variant"], most["metrics"]["overlap_pct"],
            *min(((r["variant"], r["metrics"]["allreduce_calls"]) for r in rs), key=lambda x: x[1])))
        d = {r["variant"]: r for r in rs}
        if "ddp" in d and "pytorch_ddp" in d:
            obs.append("%s at %s: ours (ddp) / PyTorch's DDP = %.3f; overlap %.0f %% vs %.0f %%." % (
                model, link, d["ddp"]["median_ms"] / d["pytorch_ddp"]["median_ms"],
                d["ddp"]["metrics"]["overlap_pct"], d["pytorch_ddp"]["metrics"]["overlap_pct"]))
    checked = sum(r["cpp_checked"] for r in rows)
    if disagreements:
        obs.append("C++ metrics vs bench/eval/timeline.py: %d disagreement(s): %s." % (
            len(disagreements), "; ".join(disagreements[:12]) + (" …" if len(disagreements) > 12 else "")))
    elif checked:
        obs.append("C++ metrics vs bench/eval/timeline.py: all %d variant rows agree (within 0.5 points, "
                   "0.5 calls, 0.5 %% of ms)." % checked)
    else:
        obs.append("C++ metrics vs bench/eval/timeline.py: no row carried both metrics and a timeline: not checked.")
    return obs


# --- experiment 8: communication hooks ------------------------------------------------

HOOK_ORDER = ("none", "fp16", "bf16", "powersgd1", "powersgd2", "powersgd4", "batched_powersgd1")


def exp8_hooks(ctx):
    sec = section(8, "hooks", "Communication hooks",
                  "Per-iteration latency (DDP iteration only) and bytes each rank sent per iteration "
                  "(its interface's tx_bytes, mean over ranks, median over rounds; not measured on loopback), "
                  "for our hooks and PyTorch 1.13's of the same name.")
    if not (ctx.ok(8) or ctx.failed(8)):
        return absent(ctx, sec)
    cells = pool_train(ctx, 8, "hook", "none")
    rows = sweep_rows(ctx, 8, cells, "hook", "none")
    rows.sort(key=lambda r: (ctx.link_key(r["link"]), model_key(r["model"]),
                             HOOK_ORDER.index(r["value"]) if r["value"] in HOOK_ORDER else 99))
    for r in rows:
        for side in SIDES:
            c = cells.get((r["link"], r["model"], r["value"]), {}).get(side)
            r[side + "_tx_bytes_per_iter"] = med([rows_[MAIN_IMPL[side]].get("tx_bytes_per_iter")
                                                  for _, rows_ in c["runs"]]) if c else None
            none = next((x for x in rows if (x["link"], x["model"], x["value"]) == (r["link"], r["model"], "none")), None)
            r[side + "_speedup_vs_none"] = (none[side]["median"] / r[side]["median"]
                                            if none and none.get(side) and r.get(side) else None)
    mb = lambda b: "%.2f MB" % (b / 1e6) if b else "–"  # noqa: E731
    sec["tables"].append(md_table(
        ["link", "model", "hook", "ours ms median (min–max)", "PyTorch ms", "ours/PyTorch", "ours bytes/iter",
         "PyTorch bytes/iter", "ours speedup vs none", "PyTorch speedup vs none"],
        [[r["link"], r["model"], r["value"], fmt_ms(r["ddp"]) if r["ddp"] or not r["ddp_failed"] else "failed",
          fmt_ms(r["pytorch"]) if r["pytorch"] or not r["pytorch_failed"] else "failed", fmt(r["ratio"], 3),
          mb(r["ddp_tx_bytes_per_iter"]), mb(r["pytorch_tx_bytes_per_iter"]),
          fmt(r["ddp_speedup_vs_none"], 2), fmt(r["pytorch_speedup_vs_none"], 2)] for r in rows]))
    sec["observations"] = hooks_observations(ctx, rows)
    hooks = sorted({r["value"] for r in rows}, key=lambda h: HOOK_ORDER.index(h) if h in HOOK_ORDER else 99)
    data = {"title": "8. communication hooks: latency and bytes per iteration", "hooks": hooks,
            "panels": panels_of(ctx, rows), "rows": rows}
    return finish(ctx, sec, data, plots.hooks)


def hooks_observations(ctx, rows):
    obs = []
    for link, model in panels_of(ctx, rows):
        rs = [r for r in rows if (r["link"], r["model"]) == (link, model)]
        for side in SIDES:
            sp = ["%s %.2fx" % (r["value"], r[side + "_speedup_vs_none"]) for r in rs
                  if r.get(side + "_speedup_vs_none") and r["value"] != "none"]
            if sp:
                obs.append("%s at %s, %s: speedup against no hook: %s." % (model, link, SIDE_NAME[side], ", ".join(sp)))
            none = next((r for r in rs if r["value"] == "none" and r.get(side + "_tx_bytes_per_iter")), None)
            by = ["%s %.3f" % (r["value"], r[side + "_tx_bytes_per_iter"] / none[side + "_tx_bytes_per_iter"])
                  for r in rs if none and r is not none and r.get(side + "_tx_bytes_per_iter")]
            if by:
                obs.append("%s at %s, %s: bytes per iteration relative to no hook (%.2f MB): %s." % (
                    model, link, SIDE_NAME[side], none[side + "_tx_bytes_per_iter"] / 1e6, ", ".join(by)))
        ratios = ["%s %.3f" % (r["value"], r["ratio"]) for r in rs if r["ratio"] is not None]
        if ratios:
            obs.append("%s at %s: ours/PyTorch %s." % (model, link, ", ".join(ratios)))
        failed = ["%s (%s)" % (r["value"], ", ".join(SIDE_NAME[s] for s in SIDES if r[s + "_failed"]))
                  for r in rs if r["ddp_failed"] or r["pytorch_failed"]]
        if failed:
            obs.append("%s at %s: failed: %s (causes under Failed runs)." % (model, link, ", ".join(failed)))
    return obs


# --- targets -----------------------------------------------------------------------

def is_default(e):
    return all(param_of(e, k, DEFAULTS[k] if k != "world_size" else None) == v for k, v in DEFAULTS.items())


# Experiments whose default-configuration runs count for the latency target:
# every one with 2 ranks on the same link topology (4 puts even 2 ranks
# behind a bridge).
TARGET_EXPERIMENTS = (2, 3, 5, 6, 8)


def baseline_cells(ctx, experiments=TARGET_EXPERIMENTS):
    """(link, model) -> (experiments, side -> cell) pooling every run in the
    default configuration at 2 ranks of `experiments`; a cell's rounds are
    keyed (experiment, round), so the by-round ratios show the spread."""
    found = {}
    for exp in experiments:
        cells = pool_train(ctx, exp, None, keep=lambda e: is_default(e) and not is_converge(e))
        for (link, model, _), sides in cells.items():
            exps, pooled = found.setdefault((link, model), ([], {}))
            exps.append(exp)
            for side, c in sides.items():
                p = pooled.setdefault(side, new_cell())
                p["samples"] += c["samples"]
                p["runs"] += c["runs"]
                p["rounds"].update({(exp, r): v for r, v in c["rounds"].items()})
                for impl, v in c["impl_samples"].items():
                    p["impl_samples"][impl] += v
    return found


def paired_ratios(sides):
    """ours/PyTorch of each (experiment, round) both sides ran."""
    o, t = sides.get("ddp"), sides.get("pytorch")
    if not o or not t:
        return []
    return [o["rounds"][k] / t["rounds"][k] for k in o["rounds"] if t["rounds"].get(k)]


def verdict(value, target, higher_is_better):
    if value is None:
        return "not measured"
    if higher_is_better:
        if value >= target:
            return "**met** (%.1f %% above)" % ((value / target - 1) * 100)
        return "**missed** by %.1f %%" % ((1 - value / target) * 100)
    if value <= target:
        return "**met** (%.1f %% below)" % ((1 - value / target) * 100)
    return "**missed** by %.1f %%" % ((value / target - 1) * 100)


def targets_section(ctx):
    sec = {"title": "Targets", "lines": [], "json": []}
    base = baseline_cells(ctx)
    sec["lines"].append("Every run in the default configuration (2 ranks, overlap, 25 MB buckets, no no_sync, "
                        "one group, no hook) of experiments %s pooled; ours/PyTorch = ratio of the pooled "
                        "medians, then in brackets the median and range of the ratios of each pair of runs "
                        "(same experiment and round), which shows how much one comparison moves."
                        % ", ".join(map(str, TARGET_EXPERIMENTS)))
    sec["lines"].append("")
    sec["lines"].append("**ours ≤ %.1f × PyTorch's per-iteration latency, every model, 2 ranks, on %s:**" % (
        LATENCY_TARGET, " and ".join(LATENCY_TARGET_LINKS)))
    for link in LATENCY_TARGET_LINKS:
        if not any(k[0] == link for k in base):
            sec["lines"].append("- %s: no runs on this link in this results directory (links: %s)." % (
                link, ", ".join(ctx.links) or "none"))
    for (link, model), (exps, sides) in sorted(base.items(), key=lambda kv: (ctx.link_key(kv[0][0]), model_key(kv[0][1]))):
        c = compare(sides)
        pairs = paired_ratios(sides)
        target = link in LATENCY_TARGET_LINKS
        if c["ratio"] is None:
            text = "only %s measured in this configuration" % " and ".join(SIDE_NAME[s] for s in sides)
        else:
            spread = ("%d pairs: median %.3f, %.3f–%.3f" % (len(pairs), med(pairs), min(pairs), max(pairs))
                      if pairs else "no pairs")
            text = "ours/PyTorch = %.3f (%s) → %s" % (c["ratio"], spread,
                                                      verdict(c["ratio"], LATENCY_TARGET, False)
                                                      if target else "not a target link")
        sec["lines"].append("- %s at %s (experiments %s): %s." % (model, link, ",".join(map(str, exps)), text))
        sec["json"].append({"target": "latency_ratio", "link": link, "model": model, "experiments": exps,
                            "ratio": c["ratio"], "pair_ratios": pairs, "target_value": LATENCY_TARGET,
                            "applies": target, "met": c["ratio"] <= LATENCY_TARGET if c["ratio"] is not None else None})
    sec["lines"].append("")
    sec["lines"] += efficiency_lines(ctx, baseline_cells(ctx, (2,)), sec["json"])
    return sec


def efficiency_lines(ctx, base, out):
    lines = ["**Overlap efficiency = max(local compute, allreduce of all gradients alone) / our iteration ≥ %.1f "
             "on %s over a shaped link:**" % (EFFICIENCY_TARGET, " and ".join(EFFICIENCY_TARGET_MODELS))]
    shaped = [(k, v) for k, v in base.items() if k[0] != "loopback" and "ddp" in v[1]]
    for model in EFFICIENCY_TARGET_MODELS:
        if not any(k[1] == model for k, _ in shaped):
            lines.append("- %s: no runs over a shaped link in this preset." % model)
    for (link, model), (exps, sides) in sorted(shaped, key=lambda kv: (ctx.link_key(kv[0][0]), model_key(kv[0][1]))):
        exp = exps[0]
        c = sides["ddp"]
        local, ar, ours = (med(c["impl_samples"].get(k, [])) for k in ("local", "allreduce", "ddp"))
        target = model in EFFICIENCY_TARGET_MODELS
        if local is None or ar is None:
            lines.append("- %s at %s: not measured (the runs lack the local or allreduce rows)." % (model, link))
            continue
        eff = max(local, ar) / ours
        lines.append("- %s at %s (experiment %d): max(local %.1f, allreduce %.1f) / %.1f ms = %.3f → %s." % (
            model, link, exp, local, ar, ours, eff,
            verdict(eff, EFFICIENCY_TARGET, True) if target else "not a target model"))
        out.append({"target": "overlap_efficiency", "link": link, "model": model, "experiment": exp,
                    "local_ms": local, "allreduce_ms": ar, "ours_ms": ours, "efficiency": eff,
                    "target_value": EFFICIENCY_TARGET, "applies": target, "met": eff >= EFFICIENCY_TARGET})
    cpus = ctx.machine().get("cpus_allowed")
    if cpus:
        lines += ["", "The limit assumes communication costs no CPU; on this machine (%s CPUs) Gloo's copies "
                  "and reductions take the same cores as backward, which the limit does not count." % cpus]
    return lines


# --- machine, model check -------------------------------------------------------------

def machine_lines(ctx):
    m, py = ctx.machine(), ctx.machine("pytorch")
    meta = ctx.meta
    rates = {}
    for e in ctx.entries:
        mm = e.get("_doc", {}).get("machine") or {}
        if mm.get("link_rate_bits_per_s"):
            rates.setdefault(e["link"], mm["link_rate_bits_per_s"])
    link_text = ", ".join("%s (%s)" % (l, "%.3g Gbit/s shaped" % (rates[l] / 1e9) if l in rates else
                                       "unshaped" if l == "loopback" else "rate not recorded") for l in ctx.links)
    rows = [("CPU", "%s, %s logical CPUs (%s allowed)" % (m.get("cpu_model", "?"), m.get("logical_cpus", "?"),
                                                         m.get("cpus_allowed", "?"))),
            ("memory", "%s GiB" % m["mem_total_gib"] if m.get("mem_total_gib") else "not recorded"),
            ("OS, kernel", "%s, %s" % (m.get("os", "?"), m.get("kernel", "?"))),
            ("libtorch (ours)", m.get("libtorch", "?")),
            ("PyTorch (reference)", "torch %s, Python %s" % (py.get("torch", "?"), py.get("python", "?"))
             if py else "no PyTorch run"),
            ("compiler", m.get("compiler", "?")),
            ("links", link_text or "none"),
            ("preset", str(meta.get("preset", "?"))), ("git", str(meta.get("git", "?"))),
            ("run", "%s – %s UTC" % (meta.get("started_utc", "?"), meta.get("finished_utc", "?")))]
    lines = [md_table(["", ""], [list(r) for r in rows], right=[False, False])]
    if meta.get("notes"):
        lines += ["", "Notes from the run:", ""] + ["- " + str(n) for n in meta["notes"]]
    return lines


def model_check_lines(ctx):
    mc = ctx.meta.get("model_check") or {}
    if not mc:
        return ["No model check in meta.json."]
    yn = lambda v: "yes" if v is True else "**NO**" if v is False else "?"  # noqa: E731
    rows = [[m, yn(c.get("same_structure")), yn(c.get("same_initial_weights")),
             "{:,}".format(c["parameters"]) if isinstance(c.get("parameters"), int) else str(c.get("parameters", "?")),
             str(c.get("tensors", "?"))] for m, c in sorted(mc.items(), key=lambda kv: model_key(kv[0]))]
    lines = ["Ours and PyTorch's models compared before the runs (bench/evaluate.py):", "",
             md_table(["model", "same structure", "same initial weights", "parameters", "tensors"], rows,
                      right=[False, False, False, True, True])]
    bad = [m for m, c in mc.items() if c.get("same_structure") is False or c.get("same_initial_weights") is False]
    if bad:
        lines.append("")
        lines.append("**The two sides differ for %s: comparisons on those models are not like for like.**"
                     % ", ".join(bad))
    return lines


# --- rendering ------------------------------------------------------------------------

def render(ctx, sections, targets, ref, dir_text):
    """The report's markdown; ref(name, image) maps a file of DIR to its link."""
    out = ["## Evaluation", "",
           "Generated by `bench/eval/report.py` from `%s` (`meta.json`, `runs.json`). Per configuration the "
           "samples (one per iteration, the slowest rank's) of all rounds are pooled: tables give the median "
           "and min–max; ours/PyTorch is the ratio of the pooled medians, \"by round\" the median over rounds "
           "of each round's ratio of medians." % dir_text, "",
           "### Machine", ""] + machine_lines(ctx) + ["", "### Model check", ""] + model_check_lines(ctx)
    out += ["", "### " + targets["title"], ""] + targets["lines"]
    for s in sections:
        out += ["", "### %d. %s" % (s["num"], s["title"]), "", "*What is measured:* " + s["what"], ""]
        for n in s["notes"]:
            out += ["- " + n]
        if s["notes"]:
            out.append("")
        for t in s["tables"]:
            out += [t, ""]
        for img in s["images"]:
            out += ["![%s](%s)" % (img, ref(img, True)), ""]
        if s["observations"]:
            out += ["Observations (computed from the data):", ""] + ["- " + o for o in s["observations"]] + [""]
        if s["failures"]:
            out += ["Failed runs (details under Failed runs):", ""]
            out += ["- %s, %s, %s, %s (round %s): %s" % (
                f["link"], SIDE_NAME.get(f["side"], f["side"]), f["model"], params_text(f["params"]),
                ", ".join(str(x) for x in f["rounds"]), f["cause"] or f["error"][-160:] or "no error text")
                for f in s["failures"]] + [""]
        for label, name in s["files"]:
            out += ["%s: `%s`." % (label, ref(name, False)), ""]
        if s.get("json_name"):
            out += ["Numbers: `%s`." % ref(s["json_name"], False), ""]
    fails = failure_rows([e for e in ctx.entries if e.get("status") != "ok"])
    out += ["### Failed runs", ""]
    out += [failure_table(fails) if fails else "None.", ""]
    if ctx.warnings:
        out += ["### Warnings from report.py", ""] + ["- " + w for w in ctx.warnings] + [""]
    return "\n".join(out).rstrip() + "\n"


def update_docs(docs, text):
    old = open(docs).read() if os.path.exists(docs) else ""
    lines = old.splitlines(keepends=True)
    b = next((i for i, l in enumerate(lines) if l.strip() == BEGIN), None)
    e = next((i for i, l in enumerate(lines) if l.strip() == END and b is not None and i > b), None)
    block = BEGIN + "\n" + text + END + "\n"
    if b is None or e is None:
        new = old + ("" if old.endswith("\n") or not old else "\n") + "\n" + block
    else:
        new = "".join(lines[:b]) + block + "".join(lines[e + 1:])
    with open(docs, "w") as f:
        f.write(new)


EXPERIMENTS = (exp1_split, exp2_breakdown, exp3_buckets, exp4_scaling, exp5_nosync, exp6_roundrobin,
               exp7_variants, exp8_hooks)


def run_experiments(ctx, strict):
    sections = []
    for num, fn in enumerate(EXPERIMENTS, 1):
        try:
            s = fn(ctx)
        except Exception as exc:  # one broken piece must not lose the rest of the report
            if strict:
                raise
            traceback.print_exc()
            s = section(num, fn.__name__.split("_", 1)[1], fn.__name__, "(report.py failed on this experiment)")
            s["notes"].append("report.py failed here: %s: %s (traceback on stderr)." % (type(exc).__name__, exc))
            ctx.warnings.append("experiment %d: report.py raised %s: %s" % (num, type(exc).__name__, exc))
        if os.path.exists(os.path.join(ctx.dir, "exp%d-%s.json" % (num, s["name"]))):
            s["json_name"] = "exp%d-%s.json" % (num, s["name"])
        sections.append(s)
    return sections


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("dir", help="results directory of bench/evaluate.py")
    p.add_argument("--docs", help="markdown file whose evaluation markers get report.md's text")
    p.add_argument("--images", help="where --docs's PNGs go (default: img/eval beside the docs file)")
    p.add_argument("--smooth", type=int, default=0,
                   help="loss moving-average window in micro-batches (default: about 1/25 of the run, odd)")
    p.add_argument("--strict", action="store_true", help="an error in one experiment ends the program")
    args = p.parse_args()
    if not os.path.isdir(args.dir):
        sys.exit("report.py: %s is not a directory" % args.dir)
    ctx = Ctx(args.dir, args.smooth)
    sections = run_experiments(ctx, args.strict)
    targets = targets_section(ctx)
    write_json(os.path.join(ctx.dir, "targets.json"), targets["json"])
    report = render(ctx, sections, targets, lambda name, image: name, ctx.dir)
    with open(os.path.join(ctx.dir, "report.md"), "w") as f:
        f.write(report)
    print("report.py: wrote %s" % os.path.join(ctx.dir, "report.md"), file=sys.stderr)
    if args.docs:
        docs_dir = os.path.dirname(os.path.abspath(args.docs))
        images = args.images or os.path.join(docs_dir, "img", "eval")
        os.makedirs(images, exist_ok=True)
        for s in sections:
            for img in s["images"]:
                shutil.copyfile(os.path.join(ctx.dir, img), os.path.join(images, img))

        def ref(name, image):
            target = os.path.join(images if image else ctx.dir, name)
            return os.path.relpath(os.path.abspath(target), docs_dir)
        update_docs(args.docs, render(ctx, sections, targets, ref,
                                      os.path.relpath(os.path.abspath(ctx.dir), docs_dir)))
        print("report.py: updated %s (images in %s)" % (args.docs, images), file=sys.stderr)
    for w in ctx.warnings:
        print("report.py: warning: " + w, file=sys.stderr)


if __name__ == "__main__":
    main()
