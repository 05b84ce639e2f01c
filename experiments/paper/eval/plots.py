#!/usr/bin/python3
"""Figures of the evaluation report (experiments/paper/eval/report.py), one function per
experiment. Each takes the numbers that report.py also writes to the
experiment's JSON, so a figure never shows anything the JSON lacks. Debian's
python3-matplotlib, Agg backend (no display). The style and helpers, then
the experiments in order (boxes serves experiments 3 and 6)."""

import math
import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

OURS = "#1f77b4"     # ddp
THEIRS = "#ff7f0e"   # PyTorch's DDP / c10d
SIDE_COLOR = {"ddp": OURS, "pytorch": THEIRS}
SIDE_LABEL = {"ddp": "ours (ddp)", "pytorch": "PyTorch DDP"}
PARTS = (("forward", "#4c72b0"), ("backward_compute", "#55a868"),
         ("comm_exposed", "#c44e52"), ("optimizer", "#8172b2"), ("other", "#cccccc"))
PART_LABEL = {"forward": "forward (+loss)", "backward_compute": "backward compute",
              "comm_exposed": "communication not overlapped", "optimizer": "optimizer (zero_grad + step)",
              "other": "other (rest of the iteration)"}


def grid(n, ncols=None, w=5.2, h=3.8):
    """A figure with n panels (at least one), returned flat."""
    n = max(n, 1)
    ncols = ncols or min(n, 3)
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(w * ncols, h * nrows), squeeze=False)
    flat = [a for row in axes for a in row]
    for a in flat[n:]:
        a.set_visible(False)
    return fig, flat[:n]


def save(fig, path, title):
    fig.suptitle(textwrap.fill(title, int(fig.get_figwidth() * 11)), fontsize=12)
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def empty(path, title, text):
    fig, (ax,) = grid(1)
    ax.axis("off")
    ax.text(0.5, 0.5, text, ha="center", va="center", wrap=True)
    save(fig, path, title)


def size_label(n):
    for div, suf in ((1e9, "G"), (1e6, "M"), (1e3, "K")):
        if n >= div:
            v = n / div
            return ("%d%s" % (v, suf)) if v == int(v) else ("%.1f%s" % (v, suf))
    return str(int(n))


# --- experiment 1 --------------------------------------------------------------

def split(data, path):
    """Per link: total time vs elements per tensor (log-log, min-max bars),
    and below it the ratio ddp/c10d (paired and of medians)."""
    links = data["links"]
    if not links:
        return empty(path, data["title"], "no data")
    fig, axes = plt.subplots(2, len(links), figsize=(5.6 * len(links), 7.2), squeeze=False,
                             gridspec_kw={"height_ratios": [2, 1]})
    for col, link in enumerate(links):
        top, bot = axes[0][col], axes[1][col]
        for impl, color in (("ddp", OURS), ("c10d", THEIRS)):
            pts = [r for r in data["rows"] if r["link"] == link and r.get(impl)]
            if not pts:
                continue
            x = [r["split_elements"] for r in pts]
            y = [r[impl]["median"] for r in pts]
            err = [[r[impl]["median"] - r[impl]["min"] for r in pts],
                   [r[impl]["max"] - r[impl]["median"] for r in pts]]
            top.errorbar(x, y, yerr=err, marker="o", ms=4, capsize=3, color=color,
                         label="ddp" if impl == "ddp" else "c10d ProcessGroupGloo")
        if top.has_data():
            top.set_xscale("log")
            top.set_yscale("log")
        top.set_title(link)
        top.set_ylabel("total time, ms (median, min-max)")
        top.grid(True, which="both", alpha=0.3)
        top.legend(fontsize=8)
        pts = [r for r in data["rows"] if r["link"] == link and r.get("ratio") is not None]
        if not pts:
            bot.text(0.5, 0.5, "no split with both ddp and c10d", transform=bot.transAxes,
                     ha="center", va="center")
            bot.set_xticks([])
            bot.set_yticks([])
            continue
        x = [r["split_elements"] for r in pts]
        bot.plot(x, [r["ratio"] for r in pts], "o-", color="k", ms=4, label="ratio of medians")
        paired = [(r["split_elements"], r["ratio_paired"]) for r in pts if r.get("ratio_paired")]
        if paired:
            bot.plot(*zip(*paired), "s--", color="grey", ms=4, label="paired (median of per-sample ratios)")
        bot.axhline(1.0, color="k", lw=0.8, alpha=0.5)
        bot.set_xscale("log")
        bot.set_xlabel("elements per tensor (of %s in all)" % size_label(data.get("total_elements") or 0))
        bot.set_ylabel("ddp / c10d")
        bot.grid(True, which="both", alpha=0.3)
        bot.legend(fontsize=8)
    save(fig, path, data["title"])


# --- experiment 2 --------------------------------------------------------------

def breakdown(data, path):
    """Per link, stacked bars per model x side x overlap, normalized to that
    model and side's iteration without overlap (as the paper's Fig. 6); a
    black tick marks the measured iteration (the parts are medians of their
    own and need not add up to it), labelled in ms."""
    links = data["links"]
    if not links:
        return empty(path, data["title"], "no data")
    fig, axes = grid(len(links), ncols=1, w=max(8, 1.1 * max(len(data["rows"]) // len(links), 6)), h=4.2)
    for ax, link in zip(axes, links):
        rows = [r for r in data["rows"] if r["link"] == link]
        labels, top = [], 0.0
        for i, r in enumerate(rows):
            base = r.get("normalize_ms") or r["iteration_ms"]
            bottom = 0.0
            for part, color in PARTS:
                v = max(r["parts"].get(part) or 0.0, 0.0) / base
                ax.bar(i, v, bottom=bottom, color=color, edgecolor="white", width=0.7,
                       hatch="//" if r["side"] == "pytorch" else None)
                bottom += v
            total = r["iteration_ms"] / base
            ax.plot([i - 0.42, i + 0.42], [total, total], "k-", lw=2)
            ax.text(i, max(bottom, total) + 0.015, "%.0f ms" % r["iteration_ms"], ha="center",
                    va="bottom", fontsize=7)
            top = max(top, bottom, total)
            labels.append("%s\n%s\n%s" % (r["model"], "ours" if r["side"] == "ddp" else "PyTorch",
                                          "overlap" if r["overlap"] else "no overlap"))
        ax.set_xticks(range(len(rows)))
        ax.set_xticklabels(labels, fontsize=7)
        ax.set_ylim(0, top * 1.12 + 0.01)
        ax.set_ylabel("latency / same side's\nno-overlap latency")
        ax.set_title(link)
        ax.grid(True, axis="y", alpha=0.3)
    handles = [Patch(color=c, label=PART_LABEL[p]) for p, c in PARTS]
    handles.append(Patch(facecolor="white", edgecolor="k", hatch="//", label="PyTorch DDP"))
    handles.append(Line2D([], [], color="k", lw=2, label="measured iteration"))
    fig.legend(handles=handles, fontsize=8, loc="lower center", ncol=4)
    fig.suptitle(data["title"], fontsize=12)
    fig.tight_layout(rect=(0, 0.08, 1, 0.96))
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --- experiments 3 and 6: box plots per value -----------------------------------

def boxes(data, path, xlabel, value_label=str):
    """Per (link, model): a box per value and side (ours left, PyTorch right)."""
    panels = data["panels"]
    if not panels:
        return empty(path, data["title"], "no data")
    fig, axes = grid(len(panels))
    for ax, (link, model) in zip(axes, panels):
        rows = [r for r in data["rows"] if r["link"] == link and r["model"] == model]
        for i, r in enumerate(rows):
            for side, dx in (("ddp", -0.18), ("pytorch", 0.18)):
                s = r.get(side + "_samples_ms")
                if not s:
                    if r.get(side + "_failed"):
                        ax.text(i + dx, 0.5, "failed", transform=ax.get_xaxis_transform(),
                                rotation=90, ha="center", va="center", fontsize=7,
                                color=SIDE_COLOR[side])
                    continue
                bp = ax.boxplot([s], positions=[i + dx], widths=0.3, patch_artist=True,
                                manage_ticks=False, flierprops={"markersize": 3})
                for b in bp["boxes"]:
                    b.set_facecolor(SIDE_COLOR[side])
                    b.set_alpha(0.6)
                for m in bp["medians"]:
                    m.set_color("k")
        ax.set_xlim(-0.6, len(rows) - 0.4)
        ax.set_xticks(range(len(rows)))
        ax.set_xticklabels([value_label(r["value"]) for r in rows])
        ax.set_xlabel(xlabel)
        ax.set_ylabel("per-iteration latency, ms")
        ax.set_title("%s, %s" % (model, link))
        ax.grid(True, axis="y", alpha=0.3)
    axes[0].legend(handles=[Patch(color=OURS, alpha=0.6, label=SIDE_LABEL["ddp"]),
                            Patch(color=THEIRS, alpha=0.6, label=SIDE_LABEL["pytorch"])],
                   fontsize=8)
    save(fig, path, data["title"])


# --- experiment 4 --------------------------------------------------------------

def scaling(data, path):
    """Per (link, model): latency vs ranks (top) and scaling efficiency (bottom)."""
    panels = data["panels"]
    if not panels:
        return empty(path, data["title"], "no data")
    n = len(panels)
    fig, axes = plt.subplots(2, n, figsize=(5.2 * n, 7), squeeze=False,
                             gridspec_kw={"height_ratios": [2, 1]})
    for col, (link, model) in enumerate(panels):
        top, bot = axes[0][col], axes[1][col]
        rows = [r for r in data["rows"] if r["link"] == link and r["model"] == model]
        for side in ("ddp", "pytorch"):
            pts = [r for r in rows if r.get(side)]
            if not pts:
                continue
            x = [r["value"] for r in pts]
            st = [r[side] for r in pts]
            top.errorbar(x, [s["median"] for s in st],
                         yerr=[[s["median"] - s["min"] for s in st], [s["max"] - s["median"] for s in st]],
                         marker="o", capsize=3, color=SIDE_COLOR[side], label=SIDE_LABEL[side])
            eff = [(r["value"], r[side + "_efficiency"]) for r in pts
                   if r.get(side + "_efficiency") is not None]
            if eff:
                bot.plot(*zip(*eff), "o-", color=SIDE_COLOR[side], label=SIDE_LABEL[side])
        xs = sorted({r["value"] for r in rows})
        for ax in (top, bot):
            ax.set_xticks(xs)
            ax.grid(True, alpha=0.3)
        cpus = data.get("cpus_allowed")
        if cpus and xs and max(xs) > cpus:
            top.axvspan(cpus + 0.5, max(xs) + 0.5, color="red", alpha=0.07,
                        label="more ranks than %d CPUs" % cpus)
        top.set_title("%s, %s" % (model, link))
        top.set_ylabel("per-iteration latency, ms")
        top.legend(fontsize=8)
        bot.axhline(1.0, color="k", lw=0.8, alpha=0.5)
        bot.set_ylim(0, 1.15)
        bot.set_xlabel("ranks")
        bot.set_ylabel("scaling efficiency")
    save(fig, path, data["title"])


# --- experiment 5 --------------------------------------------------------------

def nosync(data, path):
    """Per (link, model): latency per micro-batch vs K (sync every K)."""
    panels = data["panels"]
    if not panels:
        return empty(path, data["title"], "no latency data")
    fig, axes = grid(len(panels))
    for ax, (link, model) in zip(axes, panels):
        rows = [r for r in data["rows"] if r["link"] == link and r["model"] == model]
        for side in ("ddp", "pytorch"):
            pts = [r for r in rows if r.get(side)]
            if not pts:
                continue
            st = [r[side + "_per_micro"] for r in pts]
            ax.errorbar([r["value"] for r in pts], [s["median"] for s in st],
                        yerr=[[s["median"] - s["min"] for s in st], [s["max"] - s["median"] for s in st]],
                        marker="o", capsize=3, color=SIDE_COLOR[side], label=SIDE_LABEL[side])
        ax.set_xscale("log", base=2)
        ks = sorted({r["value"] for r in rows})
        ax.set_xticks(ks)
        ax.set_xticklabels([str(k) for k in ks])
        ax.set_xlabel("gradient sync every K micro-batches")
        ax.set_ylabel("latency per micro-batch, ms")
        ax.set_title("%s, %s" % (model, link))
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    save(fig, path, data["title"])


def loss(data, path):
    """Per (link, model): raw loss as dots, smoothed loss as lines; ours
    solid, PyTorch dashed; one color per K."""
    panels = data["panels"]
    if not panels:
        return empty(path, data["title"], "no loss data")
    fig, axes = grid(len(panels), w=8 if len(panels) == 1 else 6.5, h=5 if len(panels) == 1 else 4.5)
    cmap = plt.get_cmap("viridis")
    ks = sorted({c["sync_every"] for c in data["curves"]})
    color = {k: cmap(i / max(len(ks) - 1, 1) * 0.85) for i, k in enumerate(ks)}
    for ax, (link, model) in zip(axes, panels):
        for c in data["curves"]:
            if (c["link"], c["model"]) != (link, model):
                continue
            x = range(len(c["loss"]))
            ax.plot(x, c["loss"], ".", ms=1.5, color=color[c["sync_every"]], alpha=0.25)
            # Ours wide and light, PyTorch's dashed on top: equal curves stay visible.
            ours = c["side"] == "ddp"
            ax.plot(x, c["smoothed"], "-" if ours else "--", lw=2.6 if ours else 1.2,
                    alpha=0.55 if ours else 1.0, color=color[c["sync_every"]], zorder=2 if ours else 3)
        ax.set_title("%s, %s" % (model, link))
        ax.set_xlabel("micro-batch")
        ax.set_ylabel("training loss")
        ax.grid(True, alpha=0.3)
    handles = [Line2D([], [], color=color[k], label="sync every %d" % k) for k in ks]
    handles += [Line2D([], [], color="k", ls="-", lw=2.6, alpha=0.55, label="ours (smoothed)"),
                Line2D([], [], color="k", ls="--", label="PyTorch (smoothed)"),
                Line2D([], [], color="k", ls="", marker=".", label="raw loss")]
    axes[0].legend(handles=handles, fontsize=7)
    save(fig, path, data["title"])


# --- experiment 7 --------------------------------------------------------------

def variants(data, path):
    """Per (link, model): the blog's columns as stacked bars (compute,
    non-compute, idle; overlap % written on the bar) and, beside them, the
    traced iteration of every variant: compute above, communication below
    (blocking collectives in red)."""
    panels = data["panels"]
    if not panels:
        return empty(path, data["title"], "no data")
    fig, axes = plt.subplots(len(panels), 2, figsize=(15, 0.6 * max(
        len([r for r in data["rows"] if (r["link"], r["model"]) == p]) for p in panels) * len(panels) + 2.5),
        squeeze=False)
    for (left, right), (link, model) in zip(axes, panels):
        rows = [r for r in data["rows"] if (r["link"], r["model"]) == (link, model)]
        names = [r["variant"] for r in rows]
        y = range(len(rows))
        acc = [0.0] * len(rows)
        for key, color, label in (("compute_pct", "#55a868", "compute"),
                                  ("non_compute_pct", "#c44e52", "non-compute"),
                                  ("idle_pct", "#cccccc", "idle")):
            vals = [r["metrics"][key] for r in rows]
            left.barh(y, vals, left=acc, color=color, label=label)
            acc = [a + v for a, v in zip(acc, vals)]
        for i, r in enumerate(rows):
            left.text(101, i, "overlap %.0f%%, %d calls, %.0f ms" % (
                r["metrics"]["overlap_pct"], round(r["metrics"]["allreduce_calls"]),
                r["median_ms"] or 0), va="center", fontsize=7)
        left.set_yticks(list(y))
        left.set_yticklabels(names)
        left.invert_yaxis()
        left.set_xlim(0, 150)
        left.set_xticks(range(0, 101, 20))
        left.set_xlabel("% of iteration time")
        left.set_title("%s, %s" % (model, link))
        for i, r in enumerate(rows):
            it = r.get("traced_iteration")
            if not it:
                continue
            for e in it["events"]:
                a, b = e["start_us"] / 1e3, e["end_us"] / 1e3
                if e["lane"] == "compute":
                    right.barh(i - 0.17, b - a, left=a, height=0.3, color="#55a868", edgecolor="none")
                else:
                    right.barh(i + 0.17, b - a, left=a, height=0.3, edgecolor="none", alpha=0.6,
                               color="#d62728" if e.get("blocking") else "#1f77b4")
            right.plot([it["duration_us"] / 1e3] * 2, [i - 0.4, i + 0.4], "k-", lw=1)
        right.set_yticks(list(y))
        right.set_yticklabels(names)
        right.invert_yaxis()
        right.set_xlabel("ms since the iteration's start (the traced iteration)")
        right.set_title("one iteration per variant (closest to the median)")
        right.grid(True, axis="x", alpha=0.3)
    fig.legend(handles=[Patch(color="#55a868", label="compute"),
                        Patch(color="#c44e52", label="non-compute (communication alone)"),
                        Patch(color="#cccccc", label="idle"),
                        Patch(color="#1f77b4", alpha=0.6, label="collective (async)"),
                        Patch(color="#d62728", alpha=0.6, label="collective (blocking)"),
                        Line2D([], [], color="k", label="end of the iteration")],
               fontsize=8, loc="lower center", ncol=6)
    fig.suptitle(data["title"], fontsize=12)
    fig.tight_layout(rect=(0, 0.05, 1, 0.96))
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --- experiment 8 --------------------------------------------------------------

def hooks(data, path):
    """Per (link, model): iteration time per hook (bars, ours and PyTorch;
    'failed' where a side failed) and bytes sent per iteration (log scale)."""
    panels = data["panels"]
    if not panels:
        return empty(path, data["title"], "no data")
    n = len(panels)
    fig, axes = plt.subplots(2, n, figsize=(max(5.5, 0.9 * len(data["hooks"]) + 2) * n, 7),
                             squeeze=False)
    for col, (link, model) in enumerate(panels):
        top, bot = axes[0][col], axes[1][col]
        rows = [r for r in data["rows"] if (r["link"], r["model"]) == (link, model)]
        x = range(len(rows))
        for side, dx in (("ddp", -0.2), ("pytorch", 0.2)):
            for i, r in enumerate(rows):
                st = r.get(side)
                if st:
                    top.bar(i + dx, st["median"], width=0.38, color=SIDE_COLOR[side],
                            yerr=[[st["median"] - st["min"]], [st["max"] - st["median"]]], capsize=2)
                elif r.get(side + "_failed"):
                    top.text(i + dx, 0.02, "failed", transform=top.get_xaxis_transform(),
                             rotation=90, ha="center", va="bottom", fontsize=7, color=SIDE_COLOR[side])
                b = r.get(side + "_tx_bytes_per_iter")
                if b:
                    bot.bar(i + dx, b / 1e6, width=0.38, color=SIDE_COLOR[side])
        for ax in (top, bot):
            ax.set_xlim(-0.6, len(rows) - 0.4)
            ax.set_xticks(list(x))
            ax.set_xticklabels([r["value"] for r in rows], rotation=30, ha="right", fontsize=8)
            ax.grid(True, axis="y", alpha=0.3)
        top.set_ylabel("per-iteration latency, ms")
        top.set_title("%s, %s" % (model, link))
        top.legend(handles=[Patch(color=OURS, label=SIDE_LABEL["ddp"]),
                            Patch(color=THEIRS, label=SIDE_LABEL["pytorch"])], fontsize=8)
        if any(r.get("ddp_tx_bytes_per_iter") or r.get("pytorch_tx_bytes_per_iter") for r in rows):
            bot.set_yscale("log")
            bot.set_ylabel("MB sent per rank per iteration")
        else:
            bot.text(0.5, 0.5, "no bytes per iteration measured (loopback, or no run)", transform=bot.transAxes,
                     ha="center", va="center")
    save(fig, path, data["title"])
