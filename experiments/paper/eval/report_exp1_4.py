"""Report sections 1-4 (report.py): split all-reduce, latency breakdown,
bucket sizes, scalability."""

from collections import defaultdict

import plots
import timeline as tlmod
from harness import md_table, median as med
from report_base import LOCAL_IMPL, MAIN_IMPL, SIDE_NAME, SIDES, absent, box_sweep, change_pct, compare, \
    finish, fmt, fmt_ms, model_key, norm, panels_of, pool_train, section, stats, sweep_rows

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
        for it in tlmod.iterations(rows.get(impl, {}).get("timeline") or []):
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
    return box_sweep(ctx, sec, "bucket_cap_mb", 25, "3. per-iteration latency vs bucket size",
                     "bucket size, MB")


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
