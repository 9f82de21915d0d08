"""``pybcache report``: the quick report end to end, and the plot functions on small inputs."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
from clirun import run_python

from pybcache import plots
from pybcache.cli import main

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SECTION_HEADINGS = [
    "## What was run",
    "## Memory: the seed's tables next to ours",
    "## Hot paths against this machine's floors",
    "### 1, 2, 4 and 8 threads on 2 cores",
    "### Same chunk, 2 threads",
    "## The stale-read race and the explorer, per configuration",
    "## fio: the seed's table in the model, 10 GiB and 320 GiB",
    "## memcg foreign-bdev writeback: the v6 table next to the seed's",
    "## Design answers",
]


def _png_size(path: str) -> tuple[int, int]:
    """(width, height) of ``path`` after checking it is a complete PNG that decodes (every chunk's CRC, the
    image data) and is not blank (more than one colour), else AssertionError."""
    from PIL import Image
    with open(path, "rb") as fh:
        assert fh.read(8) == PNG_MAGIC, f"{path}: no PNG signature"
    with Image.open(path) as im:
        assert im.format == "PNG", im.format
        im.verify()                         # chunk CRCs and structure, up to IEND
    with Image.open(path) as im:
        im.load()                           # the compressed image data decodes in full
        colours = im.convert("RGB").getcolors(maxcolors=1 << 16)
        assert colours is None or len(colours) > 1, f"{path}: a blank image"
        return im.size


def _is_png(path: str) -> bool:
    w, h = _png_size(path)
    return w >= 200 and h >= 150


@pytest.fixture(scope="module")
def quick_report(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = str(tmp_path_factory.mktemp("report"))
    assert main(["report", "--quick", "--out", out]) == 0
    return out


def test_quick_report_has_every_section_in_order(quick_report):
    with open(os.path.join(quick_report, "report.md"), encoding="utf-8") as fh:
        text = fh.read()
    positions = [text.find(h) for h in SECTION_HEADINGS]
    assert all(p >= 0 for p in positions), [h for h, p in zip(SECTION_HEADINGS, positions) if p < 0]
    assert positions == sorted(positions)
    assert "Counterexample" in text and "stolen increment" in text
    for size in ("**10 GiB**", "**320 GiB**"):
        assert size in text
    assert "CPU vs unpatched (model, bounce copy on)" in text and "CPU vs unpatched (model, bounce copy off)" in text
    assert text.count("**Question") == 2


# The report's seven plots and each one's figure size in inches (pybcache/plots.py); None: the height grows
# with the number of rows shown.
PLOTS = {"memory.png": (7.5, 4.8), "scaling.png": (15, 4.6), "stale_reads.png": (14, None),
         "fio.png": (13, 4.4), "counts_heatmap.png": (10, 4.8), "writeback_timeline.png": (14, None),
         "writeback_sensitivity.png": (13, None)}


def test_quick_report_writes_its_seven_plots_as_valid_pngs_of_their_figure_size_and_links_each(quick_report):
    from pybcache.plots import _DPI
    with open(os.path.join(quick_report, "report.md"), encoding="utf-8") as fh:
        text = fh.read()
    assert sorted(f for f in os.listdir(quick_report) if f.endswith(".png")) == sorted(PLOTS)
    for name, (w_in, h_in) in PLOTS.items():
        w, h = _png_size(os.path.join(quick_report, name))
        # saved with bbox_inches="tight": the empty margins are trimmed, nothing is added
        assert 0.85 * w_in * _DPI <= w <= 1.02 * w_in * _DPI, (name, w)
        if h_in is not None:
            assert 0.85 * h_in * _DPI <= h <= 1.02 * h_in * _DPI, (name, h)
        else:
            assert h >= 2.5 * _DPI, (name, h)
        assert f"]({name})" in text, name


def test_quick_report_json_has_the_measured_figures(quick_report):
    with open(os.path.join(quick_report, "report.json"), encoding="utf-8") as fh:
        doc = json.load(fh)
    scaling = doc["bench"]["scaling"]["variants"]
    assert set(scaling) == {"global", "page", "atomic", "global+yield", "page+yield"}
    for rows in scaling.values():
        assert [r["threads"] for r in rows] == [1, 2, 4, 8]
        assert all(r["p50_ns"] <= r["p99_ns"] for r in rows)
    assert {r["variant"] for r in doc["bench"]["same_chunk"]} == {"global", "page", "atomic"}
    assert doc["explore"][0]["violations"] > 0  # unpatched
    assert doc["overflow_demo"]["wrap"]["count"] == 0
    assert set(doc["fio"]) == {"10 GiB", "320 GiB"}
    assert set(doc["fio_no_bounce_copy"]) == {"10 GiB", "320 GiB"}
    assert all(not r["config"]["bounce_copy"] for r in doc["fio_no_bounce_copy"].values())


def test_report_out_must_be_a_directory(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("x")
    assert main(["report", "--out", str(f)]) == 2
    assert "not a directory" in capsys.readouterr().err


# -- the plot functions on small inputs ---------------------------------------------------------------

def test_plot_memory(tmp_path):
    rows = [{"size_bytes": s, "variant": v, "idle_bytes": s >> 36 or 16, "peak_bytes": (s >> 36) * 257 or 4112}
            for s in (1 << 30, 1 << 40, 1 << 44) for v in ("global", "page", "atomic")]
    seed = [{"size_bytes": 1 << 40, "variant": "page", "idle_bytes": 256, "peak_bytes": 65792}]
    assert _is_png(plots.plot_memory(rows, str(tmp_path / "m.png"), seed_points=seed))


def _scaling(threads=(1, 2, 4, 8)):
    def row(n, v):
        return {"threads": n, "cpu_ns_per_op": 40.0 * n, "ops_per_s": 1e7 / n, "p50_ns": 70, "p99_ns": 100 * n,
                "max_ns": 10_000 * n}
    return {"variants": {v: [row(n, v) for n in threads] for v in ("global", "page", "atomic")},
            "params": {"threads": list(threads), "cpus": 2, "sample_every": 32, "repeats": 1, "seconds": 0.1}}


def test_plot_scaling(tmp_path):
    assert _is_png(plots.plot_scaling(_scaling(), str(tmp_path / "s.png"), target_ns=20_000))


def test_plot_stale_reads_with_zero_and_nonzero_bars(tmp_path):
    race = [{"label": "none", "stale_reads_per_s": 1234.0}, {"label": "page", "stale_reads_per_s": 0.0}]
    expl = [{"label": "none", "violations": 5}, {"label": "page", "violations": 0}]
    assert _is_png(plots.plot_stale_reads(race, expl, str(tmp_path / "r.png")))


def test_plot_counts_heatmap_with_uneven_sample_times(tmp_path):
    counts = np.random.default_rng(0).poisson(0.5, size=(5, 40))
    path = plots.plot_counts_heatmap([0.0, 0.004, 0.01, 0.02, 0.05], counts, str(tmp_path / "h.png"),
                                     chunk_size=32 << 20)
    assert _is_png(path)
    assert _is_png(plots.plot_counts_heatmap([0.0], np.zeros((1, 3)), str(tmp_path / "h1.png"), chunk_size=4096))


def test_plot_writeback_timeline(tmp_path):
    t = [0.5, 1.0, 1.5]
    tl = {"t": t, "dirty_mib": {"all dirty pages": [1, 2, 3], "bdev mapping": [0, 1, 0]},
          "bandwidth_mib_s": {"foreground direct I/O": [150, 160, 170], "bdev mapping (metadata)": [50, 40, 30]}}
    assert _is_png(plots.plot_writeback_timeline({"baseline": tl, "patched": tl}, str(tmp_path / "w.png")))


def test_plot_fio(tmp_path):
    def run(r):
        return {"rows": [{"variant": v, "ns_per_io_vs_none": None if v == "none" else r, "insert_fraction": 0.5}
                         for v in ("none", "global", "page", "atomic")]}
    path = plots.plot_fio({"10 GiB": run(1.1), "320 GiB": run(0.9)}, str(tmp_path / "f.png"),
                          seed_ratios={"10 GiB": {"page": 1.16}}, seed_util={"10 GiB": {"none": 66.9}})
    assert _is_png(path)


def test_importing_the_plots_leaves_pyplot_and_the_backend_alone():
    # A notebook that imports pybcache keeps its own backend: the plots use matplotlib.figure.Figure only.
    import os
    code = ("import sys, matplotlib; before = matplotlib.get_backend(); import pybcache.plots, pybcache.report; "
            "assert 'matplotlib.pyplot' not in sys.modules, 'pyplot imported'; "
            "assert matplotlib.get_backend() == before, matplotlib.get_backend()")
    proc = run_python(code, env=dict(os.environ, MPLBACKEND="svg"))
    assert proc.returncode == 0, proc.stderr
