#!/usr/bin/python3
"""Evaluation report: tables, figures and targets from a results directory.

    experiments/paper/eval/report.py DIR
        [--docs docs/experiments/paper-evaluation.md --images docs/img/eval]
        [--smooth W] [--strict]

(`experiments/paper/evaluate.py paper` runs it after its runs,
`experiments/paper/evaluate.py report DIR [--docs FILE]` on a kept directory.)

DIR is what `experiments/paper/evaluate.py paper` writes: meta.json (preset, links, machine, git,
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
Debian's python3-matplotlib (Agg backend); experiments/paper/eval/timeline.py computes
the blog's columns and writes the traces. The sections are in
report_exp1_4.py and report_exp5_8.py, what they share in report_base.py;
this file adds the targets, machine and model check and writes it all.
"""

import argparse
import os
import shutil
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "bench", "eval"))  # harness
sys.path.insert(0, HERE)
from harness import md_table, median as med, write_json  # noqa: E402
from report_base import BEGIN, DEFAULTS, EFFICIENCY_TARGET, EFFICIENCY_TARGET_MODELS, END, \
    LATENCY_TARGET, LATENCY_TARGET_LINKS, SIDE_NAME, Ctx, compare, failure_rows, failure_table, \
    model_key, new_cell, param_of, params_text, pool_train, section  # noqa: E402
from report_exp1_4 import exp1_split, exp2_breakdown, exp3_buckets, exp4_scaling  # noqa: E402
from report_exp5_8 import exp5_nosync, exp6_roundrobin, exp7_variants, exp8_hooks, \
    is_converge  # noqa: E402

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
    lines = ["Ours and PyTorch's models compared before the runs (bench/eval/models_check.py):", "",
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
           "Generated by `experiments/paper/eval/report.py` from `%s` (`meta.json`, `runs.json`). Per configuration the "
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
    p.add_argument("dir", help="results directory of experiments/paper/evaluate.py paper")
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
