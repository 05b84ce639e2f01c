"""Figures of the evaluation report's experiments 5-8 (no_sync and the loss
curves, the blog's variants, communication hooks; experiment 6 uses
plots.boxes). The style and the helpers are plots.py's; like those, each
figure shows only numbers that report.py also writes to the experiment's
JSON."""

# plots first: it selects the Agg backend before pyplot is imported.
from plots import OURS, SIDE_COLOR, SIDE_LABEL, THEIRS, empty, grid, save

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402


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
