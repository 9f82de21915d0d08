"""``pybcache report``: the quick report end to end, the plot functions on small inputs, and the report
package's templates (a missing value raises) and design answers (derived from the figures, not declared)."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
from helpers.clirun import run_python

from pybcache.report import plots
from pybcache.commands import main
from pybcache.report import MissingValue, ReportContext, render
from pybcache.report import _template, answers as answers_mod, bench as bench_mod

pytestmark = [pytest.mark.native, pytest.mark.e2e]

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SECTION_HEADINGS = [
    "## What was run",
    "## Memory: the v2 cover letter's tables next to ours",
    "## Hot paths against this machine's floors",
    "### 1, 2, 4 and 8 threads on 2 cores",
    "### Same chunk, 2 threads",
    "## The stale-read race and the explorer, per configuration",
    "## fio: the v2 cover letter's table in the model, 10 GiB and 320 GiB",
    "## memcg foreign-bdev writeback: our table next to the v6 cover letter's",
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


# The report's seven plots and each one's figure size in inches (pybcache/report/plots.py); None: the height grows
# with the number of rows shown.
PLOTS = {"memory.png": (7.5, 4.8), "scaling.png": (15, 4.6), "stale_reads.png": (14, None),
         "fio.png": (13, 4.4), "counts_heatmap.png": (10, 4.8), "writeback_timeline.png": (14, None),
         "writeback_sensitivity.png": (13, None)}


def test_quick_report_writes_its_seven_plots_as_valid_pngs_of_their_figure_size_and_links_each(quick_report):
    from pybcache.report.plots import _DPI
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
    # the sustained-load run behind question 1: every policy at 1, 2 and 3 failures, deterministic (one writer,
    # a fixed seed): hijack's page stays hijacked, mempool without a reserve stalls a whole round at 2 failures
    rows = {(r["policy"], r["pool_pages"], r["gfp"], r["failures"]): r for r in doc["sustained"]["rows"]}
    assert len(rows) == 24 and doc["sustained"]["round_s"] == 5.0
    assert rows[("hijack", 0, "noio", 1)]["ratio"] > 10
    assert rows[("mempool", 0, "noio", 2)]["stall_rounds"] == 1
    assert rows[("mempool", 1, "noio", 3)]["stall_rounds"] == 0 == rows[("mempool", 1, "noio", 3)]["writes_lost"]
    with open(os.path.join(quick_report, "report.md"), encoding="utf-8") as fh:
        assert "The lab's default, `mempool` min_nr 1, is one of them." in fh.read()


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
    assert _is_png(plots.plot_memory(rows, str(tmp_path / "m.png"), posted_points=seed))


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
                          posted_ratios={"10 GiB": {"page": 1.16}}, posted_util={"10 GiB": {"none": 66.9}})
    assert _is_png(path)


def test_importing_the_plots_leaves_pyplot_and_the_backend_alone():
    # A notebook that imports pybcache keeps its own backend: the plots use matplotlib.figure.Figure only.
    import os
    code = ("import sys, matplotlib; before = matplotlib.get_backend(); import pybcache.report.plots, pybcache.report; "
            "assert 'matplotlib.pyplot' not in sys.modules, 'pyplot imported'; "
            "assert matplotlib.get_backend() == before, matplotlib.get_backend()")
    proc = run_python(code, env=dict(os.environ, MPLBACKEND="svg"))
    assert proc.returncode == 0, proc.stderr


# -- the report package: templates that fail loudly, sections that agree --------------------------------


def test_a_template_field_without_a_value_raises_naming_the_template_and_the_field():
    with pytest.raises(MissingValue, match=r"'answers\.fio'.*'bypass_10'"):
        render("answers.fio", title="t")
    with pytest.raises(KeyError, match="stale_reads"):  # a key of a value that was given is checked too
        render("answers.q1", title="t", verdict="v", closing="c", unt={}, hij={}, pool={}, e1={}, eh={}, ep={})


def test_an_unknown_template_block_is_an_error():
    with pytest.raises(KeyError, match="no report template block 'answers.nope'"):
        render("answers.nope")


def test_wrapped_template_paragraphs_render_as_one_line_and_block_lines_stay():
    text = _template._unwrap("a\nb\n\n- item\n  more\n- next\n\n| x |\n| y |\n\n```\n1\n2\n```")
    assert text == "a b\n\n- item   more\n- next\n\n| x |\n| y |\n\n```\n1\n2\n```"


def test_every_template_file_parses_into_named_blocks():
    files = [f.name[:-3] for f in _template.resources.files("pybcache.report").joinpath("templates").iterdir()
             if f.name.endswith(".md")]
    assert {"header", "memory", "bench", "race", "fio", "writeback", "answers"} <= set(files)
    for name in files:
        assert _template._blocks(name), name


def test_a_design_answer_whose_experiment_did_not_run_says_so_instead_of_printing_zero(tmp_path):
    ctx = ReportContext(out_dir=str(tmp_path))
    ctx.results["machine"] = {}
    text = answers_mod.answers(ctx)
    assert text.count("Not answered in this report") == len(answers_mod._QUESTIONS)
    assert "`bench`" in text and "`race and explore`" in text and "`writeback`" in text
    assert " 0 B" not in text and "of 65,535" not in text


def test_a_design_answer_missing_a_figure_of_an_experiment_that_ran_raises(tmp_path):
    ctx = ReportContext(out_dir=str(tmp_path))
    res = _bench_results(2e6)
    del res["scaling"]["variants"]["atomic"]  # the bench ran, but without the atomic variant's rows
    ctx.results.update(bench=res)
    with pytest.raises(KeyError, match="atomic"):
        answers_mod.answers(ctx)


def _bench_results(page_top_ops: float, with_yield: bool = True) -> dict:
    def row(n, ops):
        return {"threads": n, "ops_per_s": ops, "cpu_ns_per_op": 2e9 / ops, "p50_ns": 70, "p99_ns": 300,
                "max_ns": 50_000, "slowest_thread_share": 0.5, "speedup_vs_1": ops / 1e7}
    variants = {"global": 1e6, "page": page_top_ops, "atomic": 1.2e7}
    if with_yield:
        variants.update({"global+yield": 4e6, "page+yield": 2 * page_top_ops})
    return {"scaling": {"variants": {v: [row(1, 1e7), row(2, 1e7), row(4, top), row(8, top)]
                                     for v, top in variants.items()}}}


@pytest.mark.parametrize("page_top_ops", [2e6, 1.5e7], ids=["page collapses", "page holds"])
def test_the_design_answer_and_the_oversubscription_note_agree_about_the_page_lock(page_top_ops):
    res = _bench_results(page_top_ops)
    note = bench_mod.oversubscription_note(res, 2)
    answer = answers_mod._spin(answers_mod._Figures({"bench": res}))
    page_collapsed_in_note = "`page` lost throughput" in note or "`global`, `page` lost throughput" in note
    assert page_collapsed_in_note == (page_top_ops < 0.75 * 1e7)
    assert ("the locks collapse" in answer) == page_collapsed_in_note
    assert ("did not collapse" in answer) == (not page_collapsed_in_note)
    # spin_yield was measured in this run: the answer reports it rather than proposing it
    assert "The option to add" not in answer and 'lock="spin_yield"' in answer
    assert "spin-then-yield is the better lock" in answer  # 4x and 2x the pthread lock's throughput here


def test_the_spin_answer_says_when_spin_yield_was_not_measured():
    answer = answers_mod._spin(answers_mod._Figures({"bench": _bench_results(2e6, with_yield=False)}))
    assert "was\nnot measured" not in answer and "not measured" in answer


def test_the_ported_check_patch_section_renders_the_battery_per_example(tmp_path, monkeypatch):
    # pybcache.bcache.kpatch.check.runner (#12) is not on this branch: a stand-in battery with one failing check
    import sys
    import types
    from dataclasses import dataclass, field

    from pybcache.report import check_patch as section

    @dataclass
    class Check:
        name: str
        passed: bool
        figure: str
        counterexample: list = field(default_factory=list)

    @dataclass
    class Result:
        name: str
        checks: list
        wall_s: float = 1.25

        def to_json(self):
            return {"name": self.name, "checks": [{"name": c.name} for c in self.checks]}

    def run(path, *, seconds):
        assert seconds == 0.5
        return Result(path.stem, [Check("semantics", True, "0 | 1"), Check("u16 overflow", False, "wrap",
                                                                           ["start x", "end y"])])

    monkeypatch.setitem(sys.modules, "pybcache.bcache.kpatch.check.runner", types.SimpleNamespace(check_patch=run))
    monkeypatch.setattr(section, "PATCH_EXAMPLES", ("v3_proposal", "no_such_patch"))
    ctx = ReportContext(out_dir=str(tmp_path), quick=True)
    text = section.check_patch(ctx)
    assert text.startswith("## check-patch: the shipped example patches\n\n`pybcache check-patch` on each")
    assert "stress time 0.5 s (quick)." in text
    assert "**v3_proposal.c** (`v3_proposal`): 1 of 2 checks passed, battery wall time 1.2 s" in text
    assert "| semantics | yes | 0 / 1 |" in text and "| u16 overflow | **FAILED** | wrap |" in text
    assert "u16 overflow counterexample:\n\n1. start x\n2. end y\n" in text
    assert "`no_such_patch.c`: not found (neither in the package" in text
    assert list(ctx.results["check_patch"]) == ["v3_proposal"]
