"""Report sections 5-8 (report.py): no_sync and the loss curves,
round-robin process groups, the blog's variants, communication hooks."""

import os
import statistics
from collections import defaultdict

import plots
import timeline as tlmod
from harness import md_table, median as med, write_json
from report_base import MAIN_IMPL, SIDE_NAME, SIDES, absent, box_sweep, change_pct, finish, fmt, fmt_ms, \
    model_key, model_of, norm, panels_of, pool_train, section, sweep_rows, sweep_table, value_key

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
    return box_sweep(ctx, sec, "process_groups", 1, "6. per-iteration latency vs round-robin process groups",
                     "Gloo groups (round-robin)", lambda v: "rr%s" % v)


# --- experiment 7: the blog's variants ----------------------------------------------

COLUMNS = (("compute_pct", "compute %"), ("non_compute_pct", "non-compute %"), ("idle_pct", "idle %"),
           ("overlap_pct", "overlap %"), ("comm_overhead_pct", "comm overhead %"),
           ("allreduce_calls", "allreduce calls"), ("allreduce_ms", "allreduce ms"))
VARIANT_ORDER = ("simple", "simple_ga", "hook_ga", "async_ga", "bucket_ga", "ddp", "pytorch_ddp")


def variant_rows(ctx):
    """(link, model, variant) -> {"timelines" (timeline.iterations()), "samples", "per"}."""
    acc = {}
    for e in ctx.ok(7):
        doc = e["_doc"]
        for row in doc.get("rows", []):
            name = row.get("variant") or row.get("impl")
            if e["side"] == "pytorch" and name != "pytorch_ddp":
                continue
            a = acc.setdefault((e["link"], model_of(e), name),
                               {"timelines": [], "samples": [], "per": 1})
            a["timelines"] += tlmod.iterations(row.get("timeline") or [])
            # A train run's iteration is sync_every micro-batches (PyTorch's
            # row); the variants' are micro-batches already.
            a["per"] = int((doc.get("config") or {}).get("sync_every") or 1)
            a["samples"] += [x / a["per"] for x in row.get("samples_ms") or []]
    return acc


def closest_to_median(timelines):
    """The synchronizing iteration (one with collectives) closest to their
    median: accumulating micro-batches have nothing to show."""
    timelines = [t for t in timelines if any(e["lane"] == "comm" for e in t["events"])] or timelines
    m = statistics.median(t["duration_us"] for t in timelines)
    return min(timelines, key=lambda t: abs(t["duration_us"] - m))


def exp7_variants(ctx):
    sec = section(7, "variants", "Hand-written DDP variants, ours and PyTorch's DDP (the blog's table)",
                  "Columns from each variant's timelines (all timed iterations of all rounds, rank 0) by "
                  "experiments/paper/eval/timeline.py: compute % = compute time (blocking collectives excluded) / "
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
    rows = []
    for (link, model, name), a in sorted(acc.items(), key=lambda kv: (
            ctx.link_key(kv[0][0]), model_key(kv[0][1]),
            VARIANT_ORDER.index(kv[0][2]) if kv[0][2] in VARIANT_ORDER else 99, kv[0][2])):
        if not a["timelines"]:
            ctx.warnings.append("experiment 7: %s %s at %s has no timeline" % (model, name, link))
            continue
        traced = closest_to_median(a["timelines"])
        trace = "traces/%s-%s%s.trace.json" % (link, model + "-" if multi else "", name)
        write_json(os.path.join(ctx.dir, trace), tlmod.chrome_trace(traced, "%s %s (%s)" % (name, model, link)))
        m = tlmod.metrics(a["timelines"])
        for key in ("allreduce_calls", "allreduce_ms", "iteration_ms"):  # per micro-batch
            m[key] /= a["per"]
        rows.append({"link": link, "model": model, "variant": name, "metrics": m,
                     "median_ms": med(a["samples"]), "samples": len(a["samples"]),
                     "timed_iterations": len(a["timelines"]), "trace": trace,
                     "traced_iteration": {k: traced[k] for k in ("iteration", "duration_us", "events")}})
    sec["tables"].append(md_table(
        ["link", "model", "variant"] + [c for _, c in COLUMNS] + ["iteration ms", "trace"],
        [[r["link"], r["model"], r["variant"]] +
         [fmt(r["metrics"][k], 1) for k, _ in COLUMNS] + [fmt(r["median_ms"]), os.path.basename(r["trace"])]
         for r in rows]))
    sec["observations"] = variants_observations(ctx, rows)
    sec["files"].append(("Chrome traces (one iteration per variant, the one closest to the median; open in "
                         "chrome://tracing or ui.perfetto.dev; written by the run, not kept in the tree)",
                         "traces"))
    data = {"title": "7. DDP variants: where the iteration goes", "panels": sorted(
        {(r["link"], r["model"]) for r in rows}, key=lambda k: (ctx.link_key(k[0]), model_key(k[1]))),
        "rows": rows}
    sec = finish(ctx, sec, data, plots.variants)
    return sec


def variants_observations(ctx, rows):
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
    return obs


# --- experiment 8: communication hooks ------------------------------------------------

HOOK_ORDER = ("none", "fp16", "bf16", "powersgd1", "powersgd2", "powersgd4", "batched_powersgd1")


def exp8_hooks(ctx):
    sec = section(8, "hooks", "Communication hooks",
                  "Per-iteration latency (DDP iteration only) and bytes each rank sent per iteration "
                  "(its interface's tx_bytes, mean over ranks, median over rounds; not measured on loopback), "
                  "for our hooks and PyTorch's of the same name.")
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
