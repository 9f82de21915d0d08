"""The report's plots (``pybcache/report/plots.py``): what each figure holds (its data, labels, titles, scales) and
its file; the figure is kept and read back instead of rendered to PNG."""
from __future__ import annotations

import types
import warnings

import numpy as np
import pytest
import matplotlib
from matplotlib.colors import to_rgba

from pybcache.report import plots


approx = pytest.approx


@pytest.fixture
def drawn(monkeypatch):
    """The plots' figures, kept instead of rendered: ``[(figure, path)]``; ``tight_layout`` (which lays the
    text out, most of a plot's time) is recorded on the figure instead of run."""
    figs = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: figs.append((fig, path)) or path)
    monkeypatch.setattr(plots.Figure, "tight_layout", lambda fig: setattr(fig, "laid_out", True))
    # matplotlib's own defaults, whatever matplotlibrc the user (or the working directory) has
    with warnings.catch_warnings(), matplotlib.rc_context():
        matplotlib.rcdefaults()
        warnings.simplefilter("error", UserWarning)  # drawn as asked: nothing matplotlib had to correct or ignore
        yield figs


def _lines(ax):
    """Each labelled line: label -> (x, y, colour, linestyle, marker)."""
    return {ln.get_label(): ([float(v) for v in ln.get_xdata()], [float(v) for v in ln.get_ydata()],
                             to_rgba(ln.get_color()), ln.get_linestyle(), ln.get_marker())
            for ln in ax.get_lines() if not ln.get_label().startswith("_")}


def _bars(ax):
    """Each bar series: label -> ([(x, width, height, y)], colour of its first bar)."""
    return {c.get_label(): ([tuple(round(float(v), 9) for v in (p.get_x(), p.get_width(), p.get_height(), p.get_y()))
                             for p in c.patches],
                            to_rgba(c.patches[0].get_facecolor()) if c.patches else None) for c in ax.containers}


def _legend(holder):
    return [t.get_text() for t in holder.get_legend().get_texts()]


_LOC = {2: "upper left", 3: "lower left", 4: "lower right", 9: "upper center"}


def _legend_style(leg, frame):
    """Where a legend sits and how it is set: (location, anchor in ``frame``'s coordinates or None, columns,
    font size, title)."""
    bb = leg.get_bbox_to_anchor()
    anchor = tuple(round(float(v), 6) for v in frame.inverted().transform((bb.x0, bb.y0)))
    return (_LOC.get(leg._loc, leg._loc), anchor, leg._ncols, leg.prop.get_size(),
            leg.get_title().get_text() or None)


def _grid(ax):
    """(x grid shown, y grid shown, the shown lines' alpha)."""
    xs, ys = ax.xaxis.get_gridlines(), ax.yaxis.get_gridlines()
    shown = [g for g in (xs[:1] + ys[:1]) if g.get_visible()]
    return (bool(xs) and xs[0].get_visible(), bool(ys) and ys[0].get_visible(),
            shown[0].get_alpha() if shown else None)


def test_a_plot_is_saved_at_110_dpi_trimmed_into_its_directory_made_if_missing(tmp_path):
    saved = []
    fig = types.SimpleNamespace(savefig=lambda path, **kw: saved.append((path, kw)))
    path = str(tmp_path / "a" / "b" / "p.png")
    assert plots._save(fig, path) == path
    assert saved == [(path, {"dpi": 110, "bbox_inches": "tight"})] and (tmp_path / "a" / "b").is_dir()
    assert plots._DPI == 110


def test_tick_labels_are_bytes_and_nanoseconds_in_their_largest_unit():
    assert plots._bytes_label(float(1 << 30)) == "1 GiB" and plots._bytes_label(4096.0, 3) == "4 KiB"
    assert [plots._ns_label(x) for x in (2.5e6, 1e6, 999_999.0, 1e3, 999.0, 0.5)] == [
        "2.5 ms", "1 ms", "999.999 µs", "1 µs", "999 ns", "0.5 ns"]


def test_the_memory_plot_draws_peak_and_idle_per_variant_in_size_order_log_log_with_the_posted_as_crosses(drawn):
    rows = [{"size_bytes": s, "variant": v, "idle_bytes": s >> 20 + k, "peak_bytes": s >> 10 + k}
            for s in (1 << 40, 1 << 30) for k, v in enumerate(("page", "global"))]
    seed = [{"size_bytes": 1 << 35, "variant": "page", "idle_bytes": 7, "peak_bytes": 9}]
    assert plots.plot_memory(rows, "m.png", posted_points=seed) == "m.png"
    ((fig, path),) = drawn
    assert path == "m.png" and tuple(fig.get_size_inches()) == (7.5, 4.8)
    (ax,) = fig.axes
    xs = [float(1 << 30), float(1 << 40)]
    lines = _lines(ax)
    assert lines == {
        "page: peak (every page)": (xs, [float(1 << 20), float(1 << 30)], to_rgba("#1f77b4"), "-", "o"),
        "page: idle (directory only)": (xs, [float(1 << 10), float(1 << 20)], to_rgba("#1f77b4"), "--", "None"),
        "global: peak (every page)": (xs, [float(1 << 19), float(1 << 29)], to_rgba("#d62728"), "-", "o"),
        "global: idle (directory only)": (xs, [float(1 << 9), float(1 << 19)], to_rgba("#d62728"), "--", "None"),
        "posted table (idle and peak)": ([float(1 << 35)], [7.0], to_rgba("k"), "None", "x")}
    unlabelled = [ln for ln in ax.get_lines() if ln.get_label().startswith("_")]
    assert [(list(ln.get_xdata()), list(ln.get_ydata()), ln.get_marker()) for ln in unlabelled] == [
        ([1 << 35], [9], "x")]
    # page is drawn thinner, on top of global's identical memory
    assert {ln.get_label(): ln.get_linewidth() for ln in ax.get_lines() if ":" in ln.get_label()} == {
        "page: peak (every page)": 1.4, "page: idle (directory only)": 1.4, "global: peak (every page)": 2.4,
        "global: idle (directory only)": 2.4}
    assert (ax.get_xscale(), ax.get_yscale()) == ("log", "log")
    assert ax.xaxis.get_transform().base == 2 and ax.yaxis.get_transform().base == 2
    assert ax.xaxis.get_major_formatter().func is plots._bytes_label
    assert ax.yaxis.get_major_formatter().func is plots._bytes_label
    assert ax.get_xlabel() == "backing device size (bytes, log scale)"
    assert ax.get_ylabel() == "tracker memory (bytes, log scale)"
    assert ax.get_title() == "Tracker memory vs device size, measured from real trackers"
    assert _legend(ax) == list(lines)
    assert all(t.get_rotation() == 30 and t.get_horizontalalignment() == "right" for t in ax.get_xticklabels())
    assert {ln.get_label(): ln.get_markersize() for ln in ax.get_lines() if ln.get_marker() != "None"} == {
        "page: peak (every page)": 3.5, "global: peak (every page)": 3.5, "posted table (idle and peak)": 8,
        unlabelled[0].get_label(): 8}
    style = _legend_style(ax.get_legend(), ax.transAxes)
    assert style[0] == "upper left" and style[2:] == (1, 8, None)
    assert _grid(ax) == (True, True, 0.3)


def test_the_memory_plot_without_posted_points_draws_no_crosses(drawn):
    plots.plot_memory([{"size_bytes": 1 << 30, "variant": "atomic", "idle_bytes": 1, "peak_bytes": 2}], "m.png")
    (ax,) = drawn[0][0].axes
    assert [ln.get_label() for ln in ax.get_lines()] == ["atomic: peak (every page)", "atomic: idle (directory only)"]


def _scaling(threads=(1, 2, 4)):
    def row(n, k):
        return {"threads": n, "cpu_ns_per_op": 40.0 * n + k, "ops_per_s": 1e6 * (n + k),
                "p50_ns": 70 * n if n > 1 else 0,
                "p99_ns": 0 if n == 1 else 100 * n + k, "max_ns": 10_000 * n if n > 1 else 0}
    return {"variants": {v: [row(n, k) for n in threads] for k, v in enumerate(("global", "page"))},
            "params": {"threads": list(threads), "cpus": 2, "sample_every": 32, "repeats": 3, "seconds": 0.25}}


def test_the_scaling_plot_has_cpu_bars_throughput_and_latency_per_thread_count_with_the_target(drawn):
    assert plots.plot_scaling(_scaling(), "s.png", target_ns=20_000) == "s.png"
    ((fig, path),) = drawn
    assert path == "s.png" and fig.laid_out and fig._suptitle.get_position()[1] == 1.02
    assert len({ax.get_position().y0 for ax in fig.axes}) == 1      # three panels side by side
    assert tuple(fig.get_size_inches()) == (15, 4.6)
    assert fig._suptitle.get_text() == ("Tracker scaling and oversubscription: the v2 cover letter's 10 GiB "
                                        "workload, best of 3 x "
                                        "0.25 s")
    cpu, tput, lat = fig.axes
    # two variants side by side, 0.4 wide, centred on each thread count's tick
    bars = _bars(cpu)
    assert bars["global"] == ([(-0.4, 0.4, 40.0, 0), (0.6, 0.4, 80.0, 0), (1.6, 0.4, 160.0, 0)],
                              to_rgba("#d62728"))
    assert [b[:3] for b in bars["page"][0]] == [(0.0, 0.4, 41.0), (1.0, 0.4, 81.0), (2.0, 0.4, 161.0)]
    assert [t.get_text() for t in cpu.get_xticklabels()] == ["1", "2", "4"] and list(cpu.get_xticks()) == [0, 1, 2]
    assert (cpu.get_xlabel(), cpu.get_ylabel(), cpu.get_title()) == (
        "threads (all on 2 CPUs)", "CPU time per op (ns)", "CPU ns per op (end + start + check)")
    assert cpu.get_legend().get_title().get_text() == "variant" and _legend(cpu) == ["global", "page"]
    assert _legend_style(cpu.get_legend(), cpu.transAxes)[2:] == (1, 8, "variant") and _grid(cpu) == (False, True, 0.3)

    assert _lines(tput) == {"global": ([1, 2, 4], [1.0, 2.0, 4.0], to_rgba("#d62728"), "-", "o"),
                            "page": ([1, 2, 4], [2.0, 3.0, 5.0], to_rgba("#1f77b4"), "-", "o")}
    (span,) = [p for p in tput.patches if p.get_label() == "more threads than 2 CPUs"]
    assert (span.get_x(), span.get_width()) == (2.5, 2.0)
    assert to_rgba(span.get_facecolor()) == to_rgba("0.9") and span.get_zorder() == 0
    assert tput.get_legend().prop.get_size() == 8 and _grid(tput) == (True, True, 0.3)
    assert list(tput.get_xticks()) == [1, 2, 4] and tput.get_xlim() == (0.5, 4.5) and tput.get_ylim()[0] == 0
    assert (tput.get_xlabel(), tput.get_ylabel(), tput.get_title()) == (
        "threads (all on 2 CPUs)", "throughput (million ops/s, all threads)", "Throughput")
    assert _legend(tput) == ["global", "page", "more threads than 2 CPUs"]

    lines = _lines(lat)
    # latencies of 0 drawn at 1 ns (a log scale)
    assert lines["global p50"] == ([1, 2, 4], [1.0, 140.0, 280.0], to_rgba("#d62728"), "--", "o")
    assert lines["global p99"] == ([1, 2, 4], [1.0, 200.0, 400.0], to_rgba("#d62728"), "-", "s")
    assert lines["page p99"][1] == [1.0, 201.0, 401.0]
    assert lines["page max (sampled)"] == ([1, 2, 4], [1.0, 2e4, 4e4], to_rgba("#1f77b4"), ":", "None")
    assert lines["p99 target 20 µs"][1] == [20_000.0, 20_000.0] and lines["p99 target 20 µs"][2] == to_rgba("k")
    (shade,) = [p for p in lat.patches]
    assert (shade.get_x(), shade.get_width()) == (2.5, 2.0)
    assert to_rgba(shade.get_facecolor()) == to_rgba("0.9") and shade.get_zorder() == 0
    sizes = {ln.get_label(): (ln.get_markersize(), ln.get_linewidth(), ln.get_linestyle()) for ln in lat.get_lines()}
    assert sizes["global p50"][0] == 4 and sizes["page p99"][0] == 4 and sizes["global max (sampled)"][1] == 1
    assert sizes["p99 target 20 µs"][1:] == (1, "-.")
    assert _legend_style(lat.get_legend(), lat.transAxes) == ("upper center", (0.5, -0.16), 3, 7, None)
    assert _grid(lat) == (True, True, 0.3)
    assert lat.get_yscale() == "log" and lat.yaxis.get_major_formatter().func is plots._ns_label
    assert list(lat.get_xticks()) == [1, 2, 4] and lat.get_xlim() == (0.5, 4.5)
    assert (lat.get_xlabel(), lat.get_ylabel(), lat.get_title()) == (
        "threads (all on 2 CPUs)", "per-op latency (log scale)", "Per-op latency (1 op in 32 timed)")
    assert _legend(lat) == ["global p50", "global p99", "global max (sampled)", "page p50", "page p99",
                            "page max (sampled)", "p99 target 20 µs"]


def test_the_scaling_plot_of_one_variant_without_a_target_draws_its_bars_0_8_wide_and_no_target_line(drawn):
    one = _scaling()
    one["variants"] = {"page": one["variants"]["page"]}
    plots.plot_scaling(one, "s.png")
    assert not any("target" in label for label in _lines(drawn[0][0].axes[2]))
    assert [b[:2] for b in _bars(drawn[0][0].axes[0])["page"][0]] == [(-0.4, 0.8), (0.6, 0.8), (1.6, 0.8)]


def test_the_stale_reads_plot_shows_each_configurations_count_red_if_any_and_a_green_dot_at_zero(drawn):
    race = [{"label": "none", "stale_reads_per_s": 1234.0}, {"label": "page", "stale_reads_per_s": 0.0},
            {"label": "global", "stale_reads_per_s": 1.0}]
    expl = [{"label": "none", "violations": 5}, {"label": "page", "violations": 0}, {"label": "atomic",
                                                                                    "violations": 0}]
    assert plots.plot_stale_reads(race, expl, "r.png") == "r.png"
    ((fig, path),) = drawn
    assert path == "r.png" and fig.laid_out
    assert fig.axes[0].get_position().y0 == fig.axes[1].get_position().y0     # side by side
    assert tuple(fig.get_size_inches()) == (14, 3.2)    # 3 rows: the minimum height
    left, right = fig.axes
    for ax, vals, labels, xlabel, title in (
            (left, [1234.0, 0.0, 1.0], ["none", "page", "global"], "stale reads per second (symlog scale)",
             "Race stress: stale reads served"),
            (right, [5, 0, 0], ["none", "page", "atomic"],
             "schedules with a stale read or stale cached block (symlog)", "Explorer: violating interleavings")):
        (bars,) = ax.containers
        assert [(p.get_width(), p.get_y() + p.get_height() / 2) for p in bars.patches] == [
            (v, i) for i, v in enumerate(vals)]
        assert [to_rgba(p.get_facecolor()) for p in bars.patches] == [
            to_rgba("#d62728" if v > 0 else "#2ca02c") for v in vals]
        (dots,) = ax.get_lines()
        zeros = [i for i, v in enumerate(vals) if v <= 0]
        assert (list(dots.get_xdata()), list(dots.get_ydata())) == ([0] * len(zeros), zeros)
        assert to_rgba(dots.get_color()) == to_rgba("#2ca02c") and dots.get_marker() == "o"
        # drawn above the axis, unclipped, at a size that shows
        assert (dots.get_markersize(), dots.get_clip_on(), dots.get_zorder()) == (7, False, 3)
        assert {t.get_fontsize() for t in ax.get_yticklabels()} == {8}
        assert {(t.get_verticalalignment(), t.get_fontsize()) for t in ax.texts} == {("center", 8)}
        assert _grid(ax) == (True, False, 0.3)
        assert _legend_style(ax.get_legend(), ax.transAxes)[0::3] == ("lower right", 8)
        assert [to_rgba(h.get_facecolor() if hasattr(h, "get_facecolor") and not hasattr(h, "get_marker") else
                        h.get_color()) for h in ax.get_legend().legend_handles] == [to_rgba("#d62728"),
                                                                                    to_rgba("#2ca02c")]
        assert ax.get_legend().legend_handles[1].get_marker() == "o"
        assert ax.get_legend().legend_handles[1].get_linestyle() == "None"     # a dot, no line
        assert [t.get_text() for t in ax.get_yticklabels()] == labels and ax.yaxis_inverted()
        assert ax.get_xscale() == "symlog" and ax.xaxis.get_transform().linthresh == 1
        assert ax.get_xlim() == (0, max(1.0, *vals) * 8)
        assert [(t.get_text(), t.get_position()) for t in ax.texts] == [
            (f"{v:,.0f}", (max(v, 0) * 1.15 + 0.2, i)) for i, v in enumerate(vals)]
        assert (ax.get_xlabel(), ax.get_title()) == (xlabel, title)
        assert _legend(ax) == ["stale data served", "none (0)"]


def test_the_stale_reads_plot_grows_with_its_rows_from_a_minimum_height(drawn):
    plots.plot_stale_reads([{"label": "a", "stale_reads_per_s": 1.0}], [], "r.png")
    plots.plot_stale_reads([{"label": str(i), "stale_reads_per_s": 1.0} for i in range(10)], [], "r.png")
    assert [tuple(f.get_size_inches()) for f, _ in drawn] == [(14, 3.2), (14, approx(0.42 * 10 + 1.4))]
    # counts of 1 and none at all: the axis still runs from 0 to 8 (1 x 8)
    assert [ax.get_xlim() for ax in drawn[0][0].axes] == [(0, 8.0), (0, 8.0)]


def test_the_counts_heatmap_spans_each_sample_until_the_next_one_with_one_colour_per_count(drawn):
    counts = np.array([[0, 1, 2], [3, 0, 0], [1, 1, 1], [0, 0, 2]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")      # drawn as asked, nothing matplotlib had to correct
        # but a deprecation is not a wrong drawing: CI installs the newest matplotlib and numpy (their
        # versions are not capped), and one deprecating a call made here failed this test with the plot right
        # (shown with BoundaryNorm made to warn as a MatplotlibDeprecationWarning, a DeprecationWarning)
        warnings.simplefilter("default", DeprecationWarning)
        warnings.simplefilter("default", PendingDeprecationWarning)
        assert plots.plot_counts_heatmap([0.002, 0.004, 0.010, 0.020], counts, "h.png", chunk_size=32 << 20,
                                         title="T") == "h.png"
    ((fig, path),) = drawn
    assert path == "h.png"
    assert tuple(fig.get_size_inches()) == (10, 4.8)
    ax, bar = fig.axes
    (mesh,) = ax.collections
    xy = mesh.get_coordinates()
    # edges halfway between the samples (ms), the first and last as far out as their inner halves
    assert list(xy[0, :, 0]) == approx([1.0, 3.0, 7.0, 15.0, 25.0])
    assert list(xy[:, 0, 1]) == [-0.5, 0.5, 1.5, 2.5]
    assert np.array_equal(mesh.get_array(), counts.T)
    assert mesh.get_cmap().name == "magma" and list(mesh.norm.boundaries) == [-0.5, 0.5, 1.5, 2.5, 3.5]
    assert ax.yaxis_inverted()
    assert list(bar.get_yticks()) == [0, 1, 2, 3]
    assert bar.get_ylabel() == "in-flight bypass writes on the chunk (counter)"
    assert ax.get_xlabel() == "time since the workload started (ms)"
    assert ax.get_ylabel() == "chunk index (32 MiB chunks)" and ax.get_title() == "T"


def test_a_heatmap_of_two_samples_spans_each_until_the_midpoint_and_as_far_beyond(drawn):
    plots.plot_counts_heatmap([0.001, 0.005], np.ones((2, 1)), "h.png", chunk_size=4096)
    (mesh,) = drawn[0][0].axes[0].collections
    assert list(mesh.get_coordinates()[0, :, 0]) == approx([-1.0, 3.0, 7.0])


def test_a_heatmap_of_no_sample_is_one_empty_cell_from_0_to_1_ms(drawn):
    plots.plot_counts_heatmap([], np.zeros((0, 1)), "h.png", chunk_size=4096)
    ax, bar = drawn[0][0].axes
    (mesh,) = ax.collections
    assert list(mesh.get_coordinates()[0, :, 0]) == [0.0, 1.0] and list(mesh.get_coordinates()[:, 0, 1]) == [-0.5, 0.5]
    assert np.array_equal(mesh.get_array(), np.zeros((1, 1))) and list(bar.get_yticks()) == [0, 1]


def test_a_heatmap_of_one_sample_spans_a_millisecond_and_of_zeros_still_has_a_0_and_1_colour(drawn):
    plots.plot_counts_heatmap([0.003], np.zeros((1, 2)), "h.png", chunk_size=4096)
    ax, bar = drawn[0][0].axes
    (mesh,) = ax.collections
    assert list(mesh.get_coordinates()[0, :, 0]) == approx([2.5, 3.5])
    assert list(mesh.norm.boundaries) == [-0.5, 0.5, 1.5] and list(bar.get_yticks()) == [0, 1]
    assert ax.get_title() == "Tracker counters during a fio-like run"
    assert ax.get_ylabel() == "chunk index (4 KiB chunks)"


def test_the_writeback_timeline_has_dirty_pages_and_stacked_bandwidth_per_mechanism_on_one_scale(drawn):
    a = {"t": [0.5, 1.0, 1.5], "dirty_mib": {"all dirty pages": [1, 2, 3], "bdev mapping": [0, 1, 0]},
         "bandwidth_mib_s": {"foreground": [150, 160, 170], "bdev": [50, 40, 30]}}
    b = {"t": [0.5, 1.0], "dirty_mib": {"all dirty pages": [4, 5]}, "bandwidth_mib_s": {"foreground": [10, 400]}}
    assert plots.plot_writeback_timeline({"baseline": a, "patched": b}, "w.png") == "w.png"
    ((fig, path),) = drawn
    assert path == "w.png" and fig.laid_out
    assert tuple(fig.get_size_inches()) == (14, approx(7.2))
    (d0, bw0, d1, bw1) = fig.axes
    palette = plots.colormaps.get_cmap("tab10")
    # colours: the sources first, then the dirty categories, the same in every row
    assert _lines(d0) == {"all dirty pages": ([0.5, 1.0, 1.5], [1, 2, 3], to_rgba(palette(2)), "-", "None"),
                          "bdev mapping": ([0.5, 1.0, 1.5], [0, 1, 0], to_rgba(palette(3)), "-", "None")}
    assert _lines(d1) == {"all dirty pages": ([0.5, 1.0], [4, 5], to_rgba(palette(2)), "-", "None")}
    for ax, name in ((d0, "baseline"), (d1, "patched")):
        assert (ax.get_ylabel(), ax.get_title()) == ("dirty page cache (MiB)", f"{name}: dirty pages")
    for ax, name in ((bw0, "baseline"), (bw1, "patched")):
        assert (ax.get_ylabel(), ax.get_title()) == ("device bandwidth (MiB/s)", f"{name}: device bandwidth by source")
        # one scale for every row: the largest stacked total (400) plus 8 %
        assert ax.get_ylim() == approx((0, 432.0))
    fg, bd = bw0.collections
    assert (fg.get_label(), bd.get_label()) == ("foreground", "bdev")
    assert to_rgba(fg.get_facecolor()[0]) == to_rgba(palette(0), 0.9) and to_rgba(bd.get_facecolor()[0]) == to_rgba(
        palette(1), 0.9)
    # each bin's mean drawn back to the previous sample, the first from t = 0
    top = fg.get_paths()[0].vertices
    assert min(top[:, 0]) == 0.0 and max(top[:, 0]) == 1.5
    assert {float(y) for x, y in top if 0 < x < 0.5} <= {0.0, 150.0}
    assert {float(y) for y in top[:, 1]} == {0.0, 150.0, 160.0, 170.0}
    assert {float(y) for x, y in top if x == 0} == {0.0, 150.0}
    # steps: at each sample the next bin's value starts
    assert {(0.5, 150.0), (0.5, 160.0), (1.0, 160.0), (1.0, 170.0)} <= {(float(x), float(y)) for x, y in top}
    assert {float(y) for y in bd.get_paths()[0].vertices[:, 1]} == {150.0, 160.0, 170.0, 200.0}
    assert [ax.get_xlabel() for ax in fig.axes] == ["", "", "simulated time (s)", "simulated time (s)"]
    assert d0.get_shared_x_axes().joined(d0, bw1)
    dirty, written = fig.legends
    assert (dirty.get_title().get_text(), [t.get_text() for t in dirty.get_texts()]) == (
        "dirty pages of", ["all dirty pages", "bdev mapping"])
    assert (written.get_title().get_text(), [t.get_text() for t in written.get_texts()]) == (
        "bytes written by", ["foreground", "bdev"])
    assert _legend_style(dirty, fig.transFigure) == ("upper center", (0.27, 0.0), 2, 8, "dirty pages of")
    assert _legend_style(written, fig.transFigure) == ("upper center", (0.76, 0.0), 2, 8, "bytes written by")
    assert [to_rgba(h.get_facecolor()) for h in written.legend_handles] == [to_rgba(palette(0), 0.9),
                                                                             to_rgba(palette(1), 0.9)]
    assert [to_rgba(h.get_color()) for h in dirty.legend_handles] == [to_rgba(palette(2)), to_rgba(palette(3))]
    assert {ln.get_linewidth() for ln in d0.get_lines()} == {1.4}
    assert {_grid(ax) for ax in fig.axes} == {(True, True, 0.3)}


def test_an_empty_timeline_keeps_a_bandwidth_scale_of_1(drawn):
    plots.plot_writeback_timeline({"x": {"t": [], "dirty_mib": {"d": []}, "bandwidth_mib_s": {"s": []}}}, "w.png")
    assert drawn[0][0].axes[1].get_ylim() == approx((0, 1.08))


def test_the_sensitivity_plot_has_each_perturbations_two_changes_and_the_two_thresholds(drawn):
    rows = [{"name": n, "change_percent": {"background_write_gib": bg, "foreground_bandwidth_mib_s": fg}}
            for n, bg, fg in (("default", -40, 1.5), ("slow disk", -3, 0.0), ("fast", "-12.5", 2))]
    assert plots.plot_writeback_sensitivity(rows, "s.png", holds_percent=20, vanishes_percent=5) == "s.png"
    ((fig, path),) = drawn
    assert path == "s.png" and fig.laid_out
    # side by side, one row
    assert fig.axes[0].get_position().y0 == fig.axes[1].get_position().y0
    assert fig.axes[0].get_position().x1 < fig.axes[1].get_position().x0
    assert tuple(fig.get_size_inches()) == (13, approx(0.42 * 3 + 1.6))
    bg, fg = fig.axes
    for ax, vals, label, color in ((bg, [-40.0, -3.0, -12.5], "background file write I/O change (%)", "tab:red"),
                                   (fg, [1.5, 0.0, 2.0], "foreground bandwidth change (%)", "tab:blue")):
        (bars,) = ax.containers
        # table order top to bottom
        assert [(p.get_width(), p.get_y() + p.get_height() / 2) for p in bars.patches] == list(zip(vals, [2, 1, 0]))
        assert to_rgba(bars.patches[0].get_facecolor()) == to_rgba(color, 0.8)
        assert ax.get_xlabel() == label
        zero = [ln for ln in ax.get_lines() if list(ln.get_xdata()) == [0.0, 0.0]]
        assert len(zero) == 1 and to_rgba(zero[0].get_color()) == to_rgba("black") and zero[0].get_linewidth() == 0.8
        assert _grid(ax) == (True, False, 0.3)
    lines = _lines(bg)
    assert lines["holds: cut >= 20 %"][0] == [-20.0, -20.0] and lines["holds: cut >= 20 %"][3] == "--"
    assert lines["vanishes: cut < 5 %"][0] == [-5.0, -5.0] and lines["vanishes: cut < 5 %"][3] == ":"
    assert _legend(bg) == ["holds: cut >= 20 %", "vanishes: cut < 5 %"] and fg.get_legend() is None
    assert lines["holds: cut >= 20 %"][2] == lines["vanishes: cut < 5 %"][2] == to_rgba("grey")
    assert {ln.get_linewidth() for ln in bg.get_lines() if "cut" in ln.get_label()} == {1}
    assert _legend_style(bg.get_legend(), bg.transAxes)[0::3] == ("lower left", 8)
    assert {t.get_fontsize() for t in bg.get_yticklabels()} == {8}
    assert [t.get_text() for t in bg.get_yticklabels()] == ["default", "slow disk", "fast"]
    assert list(bg.get_yticks()) == [2, 1, 0] and bg.get_shared_y_axes().joined(bg, fg)


def _fio_run(ratio, fraction):
    return {"rows": [{"variant": v, "ns_per_io_vs_none": None if v == "none" else ratio + k,
                      "insert_fraction": fraction + k / 10} for k, v in enumerate(("none", "global", "page"))]}


def test_the_fio_plot_has_each_variants_overhead_beside_the_posted_and_the_cache_inserts_beside_nvme_util(drawn):
    runs = {"10 GiB": _fio_run(1.0, 0.5), "320 GiB": _fio_run(0.0, 0.25)}
    assert plots.plot_fio(runs, "f.png", posted_ratios={"10 GiB": {"page": 1.16}},
                          posted_util={"320 GiB": {"none": 66.9}}) == "f.png"
    ((fig, path),) = drawn
    assert path == "f.png" and fig.laid_out
    assert fig.axes[0].get_position().y0 == fig.axes[1].get_position().y0    # side by side
    assert tuple(fig.get_size_inches()) == (13, 4.4)
    cpu, inserts = fig.axes
    # the unpatched variant is the unit: not a bar of its own; a missing ratio is drawn as 0
    bars = _bars(cpu)
    assert list(bars) == ["global (model, this run)", "page (model, this run)"]
    assert [b[:3] for b in bars["global (model, this run)"][0]] == [(-0.4, 0.4, 2.0), (0.6, 0.4, 1.0)]
    assert [b[:3] for b in bars["page (model, this run)"][0]] == [(0.0, 0.4, 3.0), (1.0, 0.4, 2.0)]
    assert bars["page (model, this run)"][1] == to_rgba("#1f77b4")
    seed = _lines(cpu)["posted: kernel CPU vs unpatched"]
    assert seed[0] == [-0.2, 0.8] and seed[1][0] != seed[1][0] and seed[1][1] != seed[1][1]   # NaN: none given
    (page_seed,) = [ln for ln in cpu.get_lines() if ln.get_label().startswith("_") and ln.get_marker() == "D"]
    assert list(page_seed.get_ydata())[0] == 1.16 and page_seed.get_marker() == "D"
    (one,) = [ln for ln in cpu.get_lines() if list(ln.get_ydata()) == [1.0, 1.0]]
    assert to_rgba(one.get_color()) == to_rgba("k") and one.get_linewidth() == 0.8
    assert {ln.get_markersize() for ln in cpu.get_lines() + inserts.get_lines() if ln.get_marker() == "D"} == {5}
    assert _legend_style(cpu.get_legend(), cpu.transAxes) == ("upper center", (0.5, -0.14), 2, 8, None)
    assert _legend_style(inserts.get_legend(), inserts.transAxes) == ("upper center", (0.5, -0.14), 3, 8, None)
    assert _grid(cpu) == _grid(inserts) == (False, True, 0.3)
    for ax in (cpu, inserts):
        assert [t.get_text() for t in ax.get_xticklabels()] == ["10 GiB", "320 GiB"]
        assert ax.get_xlabel() == "working set"
    assert (cpu.get_ylabel(), cpu.get_title()) == ("CPU per I/O relative to unpatched (x)",
                                                   "Tracking overhead (median of per-round ratios)")
    assert sorted(_legend(cpu)) == ["global (model, this run)", "page (model, this run)",
                                    "posted: kernel CPU vs unpatched"]
    bars = _bars(inserts)
    assert list(bars) == ["none (model, this run)", "global (model, this run)", "page (model, this run)"]
    w = 0.8 / 3
    assert [b[:3] for b in bars["none (model, this run)"][0]] == [(approx(-1.5 * w), approx(w), 50.0),
                                                                  (approx(1 - 1.5 * w), approx(w), 25.0)]
    assert [b[2] for b in bars["page (model, this run)"][0]] == [approx(70.0), approx(45.0)]
    assert [bars[f"{v} (model, this run)"][1] for v in ("none", "global", "page")] == [
        to_rgba(plots.VARIANT_COLORS[v]) for v in ("none", "global", "page")]
    assert {ln.get_marker() for ln in inserts.get_lines()} == {"D"}
    util = _lines(inserts)["posted: NVMe util (%)"]
    assert util[1][1] == 66.9 and util[1][0] != util[1][0] and util[0] == [approx(-w), approx(1 - w)]
    assert (inserts.get_ylabel(), inserts.get_title()) == ("reads that populate the cache (%)",
                                                           "Cache inserts (the v2 cover letter's NVMe-util analogue)")
    assert inserts.get_ylim() == (0, 105)
    assert sorted(_legend(inserts)) == sorted(list(bars) + ["posted: NVMe util (%)"])


def test_the_fio_plot_of_one_variant_beside_the_unpatched_draws_it_0_8_wide_and_a_missing_ratio_as_0(drawn):
    def run(ratio):
        return {"rows": [{"variant": "none", "ns_per_io_vs_none": None, "insert_fraction": 0.5},
                         {"variant": "page", "ns_per_io_vs_none": ratio, "insert_fraction": 0.25}]}
    plots.plot_fio({"10 GiB": run(1.5), "20 GiB": run(None)}, "f.png")
    cpu, inserts = drawn[0][0].axes
    assert _bars(cpu)["page (model, this run)"][0] == [(-0.4, 0.8, 1.5, 0.0), (0.6, 0.8, 0.0, 0.0)]
    assert [b[:3] for b in _bars(inserts)["page (model, this run)"][0]] == [(0.0, 0.4, 25.0), (1.0, 0.4, 25.0)]


def test_the_fio_plot_of_the_unpatched_alone_draws_its_inserts_0_8_wide_and_no_empty_legend(drawn):
    plots.plot_fio({"10 GiB": {"rows": [{"variant": "none", "ns_per_io_vs_none": None,
                                         "insert_fraction": 0.5}]}}, "f.png")  # (no warning: the fixture)
    cpu, inserts = drawn[0][0].axes
    assert _bars(cpu) == {} and cpu.get_legend() is None   # the overhead panel has nothing to show
    assert _bars(inserts)["none (model, this run)"][0] == [(-0.4, 0.8, 50.0, 0.0)]


def test_the_fio_plot_without_posted_figures_draws_only_the_models(drawn):
    plots.plot_fio({"10 GiB": _fio_run(1.0, 0.5)}, "f.png")
    cpu, inserts = drawn[0][0].axes
    assert [list(ln.get_ydata()) for ln in cpu.get_lines()] == [[1.0, 1.0]] and inserts.get_lines() == []
