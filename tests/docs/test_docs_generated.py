"""`make docs`: the generated blocks of README.md and docs/*.md are refreshed from one report.json, and an
unknown block or a missing figure fails instead of printing a stale or zero value."""
from __future__ import annotations

import copy
import json
import pathlib

import pytest

from pybcache.report import docs

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _scaling_row(threads: int, mops: float) -> dict:
    return {"threads": threads, "ops_per_s": mops * 1e6, "speedup_vs_1": mops / 20.0, "cpu_ns_per_op": 111.0,
            "cpu_ns_vs_floor": 3.0, "p50_ns": 81.0, "p99_ns": 129.0 if threads < 8 else 25_000.0,
            "p99_worst_ns": 300.0, "p999_ns": 900.0, "max_ns": 28.0e6, "slowest_thread_share": 0.48}


def _fio_rows(scale: float) -> dict:
    return {"config": {"jobs": 2, "rounds": 12, "size": 1, "seconds": 3.0},
            "rows": [{"variant": v, "ns_per_io_vs_none": None if v == "none" else r * scale, "bypass_fraction": 0.381,
                      "stale_reads": 48 if v == "none" else 0, "tracking_pages": 1}
                     for v, r in (("none", 1.0), ("global", 1.01), ("page", 1.06), ("atomic", 0.97))]}


@pytest.fixture
def report() -> dict:
    """A small fake report.json with every key the generators read (values chosen to be recognisable)."""
    variants = ("global", "page", "atomic")
    return {
        "run": {"generated_utc": "2026-12-01 18:30 UTC", "quick": True, "seed": 0},
        "machine": {"cpus": 2, "load_start": "9.10, 9.00, 8.90", "load_end": "9.50, 9.20, 9.00"},
        "timings": {"memory": 3.0, "bench": 60.0, "fio": 57.0},
        "bench": {
            "targets": {"p99_ns": 20_000},
            "results": [{"variant": v, "batch_pair_vs_floor": 1.53, "single_pair_vs_empty_call": 1.84,
                         "speedup_vs_reference": 62.4, "scaling_2_over_1": 1.391, "machine_2_over_1": 1.384,
                         "scaling_2_over_1_adjacent_slots": 0.27} for v in variants],
            "same_chunk": [{"variant": v, "vs_floor": 2.918, "overlap": 0.99, "met": v == "atomic", "target": 1.5,
                            "runs": 5, "floor_ns": 25.4} for v in variants],
            "scaling": {"params": {"cpus": 2, "repeats": 3, "seconds": 0.5},
                        "variants": {v: [_scaling_row(1, 20.0), _scaling_row(8, 3.17)] for v in variants}},
        },
        "fio": {"10 GiB": _fio_rows(1.0), "320 GiB": _fio_rows(1.1)},
        "fio_no_bounce_copy": {"10 GiB": _fio_rows(1.04), "320 GiB": _fio_rows(1.09)},
    }


def _doc(*names: str) -> str:
    blocks = "".join(f"<!-- generated: {n} (make docs) -->\nOLD FIGURE 0.16x\n<!-- end generated -->\n\n"
                     for n in names)
    return "# Title\n\nprose before\n\n" + blocks + "prose after\n"


def test_every_block_is_replaced_with_the_reports_figures_and_the_run_it_came_from(report):
    text, names = docs.refresh_text(_doc(*docs.GENERATORS), report)
    assert names == list(docs.GENERATORS)
    assert "OLD FIGURE" not in text
    assert text.startswith("# Title\n\nprose before\n\n") and text.endswith("prose after\n")
    assert text.count("run, `--quick`, 2026-12-01 18:30 UTC, 2 CPUs") == len(docs.GENERATORS)
    assert "9.10, 9.00, 8.90" in text and "9.50, 9.20, 9.00" in text
    assert "| global | 8 | 3.17 | 0.16x |" in text  # the oversubscribed row
    assert "**missed**" in text  # 25 µs p99 > 20 µs: computed, not declared
    assert "1.39×" in text and "1.38×" in text  # distinct-pages scaling and the machine ceiling
    assert "25.4 ns; this report gives no spread" in text
    assert "2.0 minutes" in text  # 3 + 60 + 57 s


def test_a_refresh_of_a_refreshed_doc_changes_only_the_figures(report):
    once, _ = docs.refresh_text(_doc("bench-targets"), report)
    again, _ = docs.refresh_text(once, report)
    assert again == once
    report["bench"]["results"][0]["scaling_2_over_1"] = 1.85
    changed, _ = docs.refresh_text(once, report)
    assert "1.85×" in changed and changed.count("<!-- end generated -->") == 1


def test_fio_target_verdict_is_computed_from_the_page_ratio(report):
    text, _ = docs.refresh_text(_doc("fio-model"), report)
    assert "10 GiB, bounce copy on: `page` 1.060× — met" in text
    assert "320 GiB, bounce copy on: `page` 1.166× — **missed**" in text  # 1.06 * 1.1
    # 1.06 * 1.04 = 1.1024 > 1.10: shown with the third decimal, never as a "1.10× missed"
    assert "10 GiB, bounce copy off: `page` 1.102× — **missed**" in text
    report["fio"]["10 GiB"]["rows"][2]["ns_per_io_vs_none"] = 1.18
    text, _ = docs.refresh_text(_doc("fio-model"), report)
    assert "10 GiB, bounce copy on: `page` 1.180× — **missed**" in text


def test_floor_spread_is_shown_when_the_report_has_it(report):
    for r in report["bench"]["same_chunk"]:
        r["floor_spread_ns"] = {"min": 25.0, "median": 40.0, "max": 105.0, "runs": 7}
        r["floor_pinned"] = True
    text, _ = docs.refresh_text(_doc("bench-same-chunk"), report)
    assert "spread 25.0–105.0 ns (median 40.0) over 7 runs, threads pinned to distinct CPUs" in text
    assert "`atomic` 2.92x (overlap 0.99, met)" in text and "`page` 2.92x (overlap 0.99, **missed**)" in text


def test_unknown_block_name_fails_naming_the_file_line_and_block(report):
    with pytest.raises(docs.UnknownBlock, match=r"x\.md:9: generated block 'no-such-table' names no generator"):
        docs.refresh_text(_doc("bench-targets", "no-such-table"), report, source="x.md")


def test_unclosed_block_fails(report):
    text = "<!-- generated: bench-targets (make docs) -->\nold\n<!-- generated: fio-model (make docs) -->\n" \
           "<!-- end generated -->\n"
    with pytest.raises(docs.UnknownBlock, match="bench-targets.*no '<!-- end generated -->'"):
        docs.refresh_text(text, report)


@pytest.mark.parametrize("path, block", [
    (("bench", "scaling"), "bench-oversubscribed"),
    (("bench", "targets", "p99_ns"), "bench-oversubscribed"),
    (("bench", "results", 0, "machine_2_over_1"), "bench-targets"),
    (("bench", "same_chunk", 0, "floor_ns"), "bench-same-chunk"),
    (("fio_no_bounce_copy", "320 GiB", "rows", 2, "ns_per_io_vs_none"), "fio-model"),
    (("timings",), "report-time"),
    (("run", "quick"), "report-time"),
    (("machine", "load_end"), "bench-targets"),
])
def test_missing_figure_fails_loudly_and_never_prints_zero(report, path, block):
    bad = copy.deepcopy(report)
    cur = bad
    for k in path[:-1]:
        cur = cur[k]
    del cur[path[-1]]
    with pytest.raises(docs.MissingFigure, match=f"block '{block}': report.json has no "):
        docs.refresh_text(_doc(block), bad, source="README.md")


def test_null_figure_is_missing_too(report):
    report["bench"]["results"][1]["scaling_2_over_1"] = None
    with pytest.raises(docs.MissingFigure, match="scaling_2_over_1"):
        docs.refresh_text(_doc("bench-targets"), report)


def test_refresh_files_writes_nothing_when_one_file_fails(report, tmp_path):
    good, bad = tmp_path / "good.md", tmp_path / "bad.md"
    good.write_text(_doc("bench-targets"))
    bad.write_text(_doc("unknown-thing"))
    with pytest.raises(docs.UnknownBlock):
        docs.refresh_files([str(good), str(bad)], report)
    assert good.read_text() == _doc("bench-targets")


def test_main_refreshes_from_a_report_dir_and_exits_1_on_a_missing_figure(report, tmp_path, capsys):
    (tmp_path / "report.json").write_text(json.dumps(report))
    doc = tmp_path / "a.md"
    doc.write_text(_doc("bench-oversubscribed"))
    assert docs.main(["--report", str(tmp_path), str(doc)]) == 0
    assert "OLD FIGURE" not in doc.read_text()
    del report["bench"]["scaling"]
    (tmp_path / "report.json").write_text(json.dumps(report))
    doc.write_text(_doc("bench-oversubscribed"))
    assert docs.main(["--report", str(tmp_path), str(doc)]) == 1
    assert "report.json has no bench/scaling" in capsys.readouterr().err
    assert "OLD FIGURE" in doc.read_text()
    assert docs.main(["--report", str(tmp_path / "nowhere"), str(doc)]) == 2


def test_every_block_in_the_real_docs_names_a_known_generator():
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    found = {}
    for f in files:
        for name, _, _ in docs.blocks_in(f.read_text(encoding="utf-8"), source=str(f)):
            found.setdefault(name, []).append(f.name)
    assert found, "no generated block in README.md or docs/*.md"
    assert set(found) == set(docs.GENERATORS), f"generators no doc uses: {set(docs.GENERATORS) - set(found)}"
