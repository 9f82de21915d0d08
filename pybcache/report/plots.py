"""The plots of ``pybcache report`` (matplotlib's object API: no display, no pyplot, no backend switch).

Each function takes plain data (the dicts and lists the experiments return), writes one PNG and returns its
path. Every plot has labelled axes with units, a legend where more than one series is drawn, and a title
that says what was measured; none of them reads a file or runs an experiment.
"""
from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

import numpy as np
from matplotlib import colormaps
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from ..units import bytes_label

# Figures are built with matplotlib.figure.Figure and saved through its own canvas, so importing this module
# never selects a backend or touches pyplot's global state (a notebook that imports pybcache keeps its own).

__all__ = ["plot_memory", "plot_scaling", "plot_stale_reads", "plot_counts_heatmap", "plot_writeback_timeline",
           "plot_fio", "VARIANT_COLORS"]

#: One colour per tracking variant, the same in every plot.
VARIANT_COLORS = {"none": "#7f7f7f", "global": "#d62728", "page": "#1f77b4", "atomic": "#2ca02c",
                  "global+yield": "#ff9896", "page+yield": "#9edae5"}
_DPI = 110


def _subplots(*grid: int, figsize: tuple[float, float], **kw: Any) -> tuple[Figure, Any]:
    """``pyplot.subplots`` without pyplot: a new Figure and its axes."""
    fig = Figure(figsize=figsize)
    return fig, fig.subplots(*grid, **kw)


def _save(fig: Any, path: str) -> str:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=_DPI, bbox_inches="tight")
    return path


def _bytes_label(x: float, _pos: Any = None) -> str:
    """:func:`pybcache.units.bytes_label` as a matplotlib tick formatter."""
    return bytes_label(x)


def _ns_label(x: float, _pos: Any = None) -> str:
    if x >= 1e6:
        return f"{x / 1e6:g} ms"
    if x >= 1e3:
        return f"{x / 1e3:g} µs"
    return f"{x:g} ns"


def plot_memory(rows: Sequence[Mapping[str, Any]], path: str,
                posted_points: Sequence[Mapping[str, Any]] = ()) -> str:
    """Idle and peak tracker memory against backing-device size, per variant, log-log.

    :param rows: ``{size_bytes, variant, idle_bytes, peak_bytes}``
        (as :func:`pybcache.bcache.experiments.memory.measure_memory`).
    :param posted_points: the posted table's values in the same form, drawn as crosses.
    """
    fig, ax = _subplots(figsize=(7.5, 4.8))
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    for v in variants:
        pts = sorted((r for r in rows if r["variant"] == v), key=lambda r: r["size_bytes"])
        xs = [r["size_bytes"] for r in pts]
        c = VARIANT_COLORS.get(v)
        # global and page have identical memory: draw page slightly thinner on top so both stay visible
        lw = 1.4 if v == "page" else 2.4
        ax.plot(xs, [r["peak_bytes"] for r in pts], "-o", color=c, lw=lw, ms=3.5, label=f"{v}: peak (every page)")
        ax.plot(xs, [r["idle_bytes"] for r in pts], "--", color=c, lw=lw, label=f"{v}: idle (directory only)")
    if posted_points:
        ax.plot([p["size_bytes"] for p in posted_points], [p["idle_bytes"] for p in posted_points], "kx", ms=8,
                label="posted table (idle and peak)")
        ax.plot([p["size_bytes"] for p in posted_points], [p["peak_bytes"] for p in posted_points], "kx", ms=8)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(_bytes_label))
    ax.yaxis.set_major_formatter(FuncFormatter(_bytes_label))
    ax.set_xlabel("backing device size (bytes, log scale)")
    ax.set_ylabel("tracker memory (bytes, log scale)")
    ax.set_title("Tracker memory vs device size, measured from real trackers")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    for label in ax.get_xticklabels():
        label.set_rotation(30)
        label.set_horizontalalignment("right")
    return _save(fig, path)


def plot_scaling(scaling: Mapping[str, Any], path: str, *, target_ns: float | None = None) -> str:
    """CPU ns per op, throughput and p50/p99 latency per variant and thread count.

    :param scaling: :func:`pybcache.bcache.experiments.bench.run_scaling`'s result.
    :param target_ns: the p99 target, drawn as a horizontal line on the latency panel.
    """
    variants = scaling["variants"]
    params = scaling["params"]
    threads = params["threads"]
    cpus = params["cpus"]
    fig, axes = _subplots(1, 3, figsize=(15, 4.6))
    x = np.arange(len(threads))
    width = 0.8 / max(1, len(variants))
    ax = axes[0]
    for k, (v, rows) in enumerate(variants.items()):
        ax.bar(x + (k - (len(variants) - 1) / 2) * width, [r["cpu_ns_per_op"] for r in rows], width,
               color=VARIANT_COLORS.get(v), label=v)
    ax.set_xticks(x, [str(n) for n in threads])
    ax.set_xlabel(f"threads (all on {cpus} CPUs)")
    ax.set_ylabel("CPU time per op (ns)")
    ax.set_title("CPU ns per op (end + start + check)")
    ax.legend(title="variant", fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)

    ax = axes[1]
    for v, rows in variants.items():
        ax.plot(threads, [r["ops_per_s"] / 1e6 for r in rows], "-o", color=VARIANT_COLORS.get(v), label=v)
    ax.axvspan(cpus + 0.5, max(threads) + 0.5, color="0.9", zorder=0, label=f"more threads than {cpus} CPUs")
    ax.set_xticks(threads)
    ax.set_xlim(min(threads) - 0.5, max(threads) + 0.5)
    ax.set_ylim(bottom=0)
    ax.set_xlabel(f"threads (all on {cpus} CPUs)")
    ax.set_ylabel("throughput (million ops/s, all threads)")
    ax.set_title("Throughput")
    ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)

    ax = axes[2]
    for v, rows in variants.items():
        c = VARIANT_COLORS.get(v)
        ax.plot(threads, [max(1, r["p50_ns"]) for r in rows], "--o", color=c, ms=4, label=f"{v} p50")
        ax.plot(threads, [max(1, r["p99_ns"]) for r in rows], "-s", color=c, ms=4, label=f"{v} p99")
        ax.plot(threads, [max(1, r["max_ns"]) for r in rows], ":", color=c, lw=1, label=f"{v} max (sampled)")
    if target_ns:
        ax.axhline(target_ns, color="k", lw=1, ls="-.", label=f"p99 target {_ns_label(target_ns)}")
    ax.axvspan(cpus + 0.5, max(threads) + 0.5, color="0.9", zorder=0)
    ax.set_xticks(threads)
    ax.set_xlim(min(threads) - 0.5, max(threads) + 0.5)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(_ns_label))
    ax.set_xlabel(f"threads (all on {cpus} CPUs)")
    ax.set_ylabel("per-op latency (log scale)")
    ax.set_title(f"Per-op latency (1 op in {params['sample_every']} timed)")
    ax.legend(fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.16))
    ax.grid(True, which="major", alpha=0.3)
    fig.suptitle(f"Tracker scaling and oversubscription: the v2 cover letter's 10 GiB workload, "
                 f"best of {params['repeats']} x {params['seconds']:g} s", y=1.02)
    fig.tight_layout()
    return _save(fig, path)


def plot_stale_reads(race_rows: Sequence[Mapping[str, Any]], explore_rows: Sequence[Mapping[str, Any]],
                     path: str) -> str:
    """Stale reads per configuration: the race stress (per second) and the explorer (violating schedules).

    :param race_rows: ``{label, stale_reads_per_s, stale_reads}`` per configuration.
    :param explore_rows: ``{label, violations, schedules}`` per configuration.
    """
    fig, axes = _subplots(1, 2, figsize=(14, max(3.2, 0.42 * max(len(race_rows), len(explore_rows)) + 1.4)))
    for ax, rows, key, xlabel, title in (
            (axes[0], race_rows, "stale_reads_per_s", "stale reads per second (symlog scale)",
             "Race stress: stale reads served"),
            (axes[1], explore_rows, "violations", "schedules with a stale read or stale cached block (symlog)",
             "Explorer: violating interleavings")):
        labels = [r["label"] for r in rows]
        vals = [r[key] for r in rows]
        colors = ["#d62728" if v > 0 else "#2ca02c" for v in vals]
        y = np.arange(len(rows))
        ax.barh(y, vals, color=colors)
        zeros = [yi for yi, v in zip(y, vals) if v <= 0]
        ax.plot([0] * len(zeros), zeros, "o", color="#2ca02c", ms=7, clip_on=False, zorder=3)
        ax.set_yticks(y, labels, fontsize=8)
        ax.invert_yaxis()
        ax.set_xscale("symlog", linthresh=1)
        ax.set_xlim(0, max([1.0] + [float(v) for v in vals]) * 8)
        for yi, v in zip(y, vals):
            ax.text(max(v, 0) * 1.15 + 0.2, yi, f"{v:,.0f}", va="center", fontsize=8)
        ax.set_xlabel(xlabel)
        ax.set_title(title)
        ax.grid(True, axis="x", alpha=0.3)
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    for ax in axes:
        ax.legend(handles=[Patch(color="#d62728", label="stale data served"),
                           Line2D([], [], marker="o", ls="", color="#2ca02c", label="none (0)")],
                  fontsize=8, loc="lower right")
    fig.tight_layout()
    return _save(fig, path)


def plot_counts_heatmap(times_s: Sequence[float], counts: np.ndarray, path: str, *,
                        chunk_size: int, title: str = "") -> str:
    """The tracker's per-chunk counters (``counts()``) sampled over time, as a heatmap.

    :param times_s: sample times in seconds from the start of the run.
    :param counts: array of shape ``(len(times_s), chunks)``.
    :param chunk_size: bytes per chunk (for the axis label).
    """
    counts = np.asarray(counts)
    fig, ax = _subplots(figsize=(10, 4.8))
    t = np.asarray(times_s, dtype=float) * 1e3
    # column edges halfway between samples: each frame spans the time until the next one was taken
    if t.size > 1:
        mid = (t[1:] + t[:-1]) / 2
        edges = np.concatenate([[t[0] - (mid[0] - t[0])], mid, [t[-1] + (t[-1] - mid[-1])]])
    else:
        edges = np.array([t[0] - 0.5, t[0] + 0.5]) if t.size else np.array([0.0, 1.0])
    vmax = max(1, int(counts.max()) if counts.size else 1)
    from matplotlib.colors import BoundaryNorm
    norm = BoundaryNorm(np.arange(-0.5, vmax + 1.5), colormaps.get_cmap("magma").N)
    im = ax.pcolormesh(edges, np.arange(counts.shape[1] + 1) - 0.5, counts.T if counts.size else
                       np.zeros((1, 1)), cmap="magma", norm=norm, shading="flat")
    ax.invert_yaxis()
    cb = fig.colorbar(im, ax=ax, ticks=range(0, vmax + 1))
    cb.set_label("in-flight bypass writes on the chunk (counter)")
    ax.set_xlabel("time since the workload started (ms)")
    ax.set_ylabel(f"chunk index ({_bytes_label(chunk_size)} chunks)")
    ax.set_title(title or "Tracker counters during a fio-like run")
    return _save(fig, path)


def plot_writeback_timeline(timelines: Mapping[str, Mapping[str, Any]], path: str) -> str:
    """Dirty pages and device bandwidth by source over simulated time, one row per mechanism.

    :param timelines: mechanism label -> ``{"t": [s], "dirty_mib": {category: [MiB]}, "bandwidth_mib_s":
        {source: [MiB/s]}}``; each series is as long as ``t``.
    """
    names = list(timelines)
    fig, axes = _subplots(len(names), 2, figsize=(14, 3.6 * len(names)), sharex=True, squeeze=False)
    sources = list(dict.fromkeys(s for tl in timelines.values() for s in tl["bandwidth_mib_s"]))
    palette = colormaps.get_cmap("tab10")
    src_color = {s: palette(i) for i, s in enumerate(sources)}
    cats = list(dict.fromkeys(c for tl in timelines.values() for c in tl["dirty_mib"]))
    cat_color = {c: palette(i + len(sources)) for i, c in enumerate(cats)}
    ymax_bw = max((float(np.sum([tl["bandwidth_mib_s"][s] for s in tl["bandwidth_mib_s"]], axis=0).max())
                   for tl in timelines.values() if len(tl["t"])), default=1.0)
    for row, name in enumerate(names):
        tl = timelines[name]
        t = np.asarray(tl["t"], dtype=float)
        ax = axes[row][0]
        for c, ys in tl["dirty_mib"].items():
            ax.plot(t, ys, color=cat_color[c], lw=1.4, label=c)
        ax.set_ylabel("dirty page cache (MiB)")
        ax.set_title(f"{name}: dirty pages")
        ax.grid(True, alpha=0.3)
        ax = axes[row][1]
        keys = list(tl["bandwidth_mib_s"])
        # each value is the mean over the bin that ends at t: draw it back to the previous sample
        x = np.concatenate([[0.0], t]) if t.size else t
        ys = [np.concatenate([[v[0]], v]) if len(v) else np.asarray(v) for v in
              (np.asarray(tl["bandwidth_mib_s"][s], dtype=float) for s in keys)]
        ax.stackplot(x, ys, labels=keys, colors=[src_color[s] for s in keys], step="pre", alpha=0.9)
        ax.set_ylim(0, ymax_bw * 1.08)
        ax.set_ylabel("device bandwidth (MiB/s)")
        ax.set_title(f"{name}: device bandwidth by source")
        ax.grid(True, alpha=0.3)
    for ax in axes[-1]:
        ax.set_xlabel("simulated time (s)")
    fig.tight_layout()
    h0, l0 = axes[0][0].get_legend_handles_labels()
    h1, l1 = axes[0][1].get_legend_handles_labels()
    fig.legend(h0, l0, loc="upper center", bbox_to_anchor=(0.27, 0.0), ncol=2, fontsize=8,
               title="dirty pages of")
    fig.legend(h1, l1, loc="upper center", bbox_to_anchor=(0.76, 0.0), ncol=2, fontsize=8,
               title="bytes written by")
    return _save(fig, path)


def plot_writeback_sensitivity(rows: Sequence[Mapping[str, Any]], path: str, *, holds_percent: float,
                               vanishes_percent: float) -> str:
    """Per perturbation, the patched kernel's change of background file write I/O and of foreground bandwidth
    (percent, horizontal bars), with the two verdict thresholds on the background panel.

    :param rows: ``{"name", "change_percent": {"background_write_gib", "foreground_bandwidth_mib_s", ...}}``
        per perturbation, in table order.
    """
    names = [r["name"] for r in rows]
    y = np.arange(len(names))[::-1]
    fig, axes = _subplots(1, 2, figsize=(13, 0.42 * len(names) + 1.6), sharey=True)
    panels = (("background_write_gib", "background file write I/O change (%)", "tab:red"),
              ("foreground_bandwidth_mib_s", "foreground bandwidth change (%)", "tab:blue"))
    for ax, (key, label, color) in zip(axes, panels):
        values = [float(r["change_percent"][key]) for r in rows]
        ax.barh(y, values, color=color, alpha=0.8)
        ax.axvline(0.0, color="black", lw=0.8)
        ax.set_xlabel(label)
        ax.grid(True, axis="x", alpha=0.3)
    axes[0].axvline(-holds_percent, color="grey", ls="--", lw=1, label=f"holds: cut >= {holds_percent:g} %")
    axes[0].axvline(-vanishes_percent, color="grey", ls=":", lw=1, label=f"vanishes: cut < {vanishes_percent:g} %")
    axes[0].legend(fontsize=8, loc="lower left")
    axes[0].set_yticks(y)
    axes[0].set_yticklabels(names, fontsize=8)
    fig.tight_layout()
    return _save(fig, path)


def plot_fio(fio_runs: Mapping[str, Mapping[str, Any]], path: str,
             posted_ratios: Mapping[str, Mapping[str, float]] | None = None,
             posted_util: Mapping[str, Mapping[str, float]] | None = None) -> str:
    """CPU ns per I/O relative to the unpatched model, per variant and working set, beside the v2 cover letter's
    kernel-CPU ratios; and the share of reads inserted in the cache beside the v2 cover letter's NVMe utilisation.

    :param fio_runs: working-set label -> :func:`pybcache.bcache.cachedev.fio` result.
    :param posted_ratios: working-set label -> ``{variant: kernel CPU % / unpatched kernel CPU %}``.
    :param posted_util: working-set label -> ``{variant: NVMe util %}``.
    """
    labels = list(fio_runs)
    variants = [r["variant"] for r in next(iter(fio_runs.values()))["rows"] if r["variant"] != "none"]
    fig, axes = _subplots(1, 2, figsize=(13, 4.4))
    x = np.arange(len(labels))
    width = 0.8 / max(1, len(variants))
    ax = axes[0]
    for k, v in enumerate(variants):
        xs = x + (k - (len(variants) - 1) / 2) * width
        ours = [next(r for r in fio_runs[lb]["rows"] if r["variant"] == v)["ns_per_io_vs_none"] or 0.0
                for lb in labels]
        ax.bar(xs, ours, width, color=VARIANT_COLORS.get(v), label=f"{v} (model, this run)")
        if posted_ratios:
            ax.plot(xs, [posted_ratios.get(lb, {}).get(v, np.nan) for lb in labels], "kD", ms=5,
                    label="posted: kernel CPU vs unpatched" if k == 0 else None)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(x, labels)
    ax.set_xlabel("working set")
    ax.set_ylabel("CPU per I/O relative to unpatched (x)")
    ax.set_title("Tracking overhead (median of per-round ratios)")
    if variants:  # (the unpatched alone: nothing to compare, no legend)
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)
    ax.grid(True, axis="y", alpha=0.3)
    ax = axes[1]
    allv = [r["variant"] for r in next(iter(fio_runs.values()))["rows"]]
    width = 0.8 / max(1, len(allv))
    for k, v in enumerate(allv):
        xs = x + (k - (len(allv) - 1) / 2) * width
        ax.bar(xs, [100 * next(r for r in fio_runs[lb]["rows"] if r["variant"] == v)["insert_fraction"]
                    for lb in labels], width, color=VARIANT_COLORS.get(v), label=f"{v} (model, this run)")
        if posted_util:
            ax.plot(xs, [posted_util.get(lb, {}).get(v, np.nan) for lb in labels], "kD", ms=5,
                    label="posted: NVMe util (%)" if k == 0 else None)
    ax.set_xticks(x, labels)
    ax.set_xlabel("working set")
    ax.set_ylabel("reads that populate the cache (%)")
    ax.set_title("Cache inserts (the v2 cover letter's NVMe-util analogue)")
    ax.set_ylim(0, 105)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    return _save(fig, path)
