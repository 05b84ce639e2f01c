"""What every section of the evaluation report (report.py) shares: the
results directory (Ctx), statistics and formatting, failed runs, pooling of
training runs per configuration and side, and the section skeleton."""

import json
import math
import os
import statistics
import sys
from collections import defaultdict

import plots
from harness import md_table, median as med, paired_ratio, write_json

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
    ("CUDA 11+", "PyTorch 1.x's bf16_compress_hook refuses CPU tensors (needs CUDA 11+ and NCCL 2.10+)"),
    ("EnforceNotMet", "Gloo aborted (gloo::EnforceNotMet): PyTorch's PowerSGD hook chains several "
                      "buckets' collectives in callbacks and the ranks interleave them differently"),
    ("_orthogonalize", "PyTorch 1.x's batched_powerSGD_hook asserts a 3-D input in _orthogonalize"),
    ("no round-robin process groups", "PyTorch 2.x has no round-robin process groups "
                                      "(dist._round_robin_process_groups was removed)"),
    ("not run", "not run"),
    ("timed out", "timed out"), ("Timeout", "timed out"),
    ("no result after", "hung: stopped by the harness's per-run time limit"),
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
                # Recorded as done, its file gone: the runs of this directory
                # are not all here (the tree keeps no runs: experiments/paper/README.md).
                # Drawing on would overwrite the tables with failures.
                sys.exit("report.py: %s: run %s of experiment %s is recorded as done but its file "
                         "is missing: this directory's runs are not all here (runs/ is not kept "
                         "in the tree); regenerate them with experiments/paper/evaluate.py paper"
                         % (d, e.get("json") or "(none recorded)", e.get("experiment")))
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


def box_sweep(ctx, sec, pname, default, plot_title, xlabel, value_label=str):
    """The section of latency against one parameter, boxes per value
    (experiments 3 and 6)."""
    n = sec["num"]
    if not (ctx.ok(n) or ctx.failed(n)):
        return absent(ctx, sec)
    rows = sweep_rows(ctx, n, pool_train(ctx, n, pname, default), pname, default)
    sec["tables"].append(sweep_table(rows, pname))
    sec["observations"] = sweep_observations(ctx, rows, pname, baseline=default)
    data = {"title": plot_title, "panels": panels_of(ctx, rows), "rows": rows}
    return finish(ctx, sec, data, lambda d, path: plots.boxes(d, path, xlabel, value_label))


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
