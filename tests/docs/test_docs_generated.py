"""`make docs`: docs/figures.md, the one generated Markdown file, is what pybcache/report/docs.py writes from one
report.json, no other file carries a generated block, and an unknown block or a missing figure fails instead of
printing a stale or zero value."""
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


def _flat(text: str) -> str:
    return " ".join(text.split())


def _skeleton(text: str) -> str:
    """``text`` with every generated block emptied: what depends on no report."""
    out, pos = [], 0
    for _, body, end in docs.blocks_in(text):
        out.append(text[pos:body])
        pos = end
    return "".join(out) + text[pos:]


def _doc(*names: str) -> str:
    blocks = "".join(f"<!-- generated: {n} (make docs) -->\nOLD FIGURE 0.16x\n<!-- end generated -->\n\n"
                     for n in names)
    return "# Title\n\nprose before\n\n" + blocks + "prose after\n"


def test_every_block_is_replaced_with_the_reports_figures_and_the_run_it_came_from(report):
    text, names = docs.refresh_text(_doc(*docs.GENERATORS), report)
    assert names == list(docs.GENERATORS)
    assert "OLD FIGURE" not in text
    assert text.startswith("# Title\n\nprose before\n\n") and text.endswith("prose after\n")
    flat = _flat(text)
    assert flat.count("run, `--quick`, 2026-12-01 18:30 UTC, 2 CPUs") == 1  # the run block, stated once
    assert "9.10, 9.00, 8.90" in flat and "9.50, 9.20, 9.00" in flat
    assert "| global | 8 | 3.17 | 0.16x |" in text  # the oversubscribed row
    assert "**missed**" in text  # 25 µs p99 > 20 µs: computed, not declared
    assert "1.39×" in text and "1.38×" in text  # distinct-pages scaling and the machine ceiling
    assert "25.4 ns; this report gives no spread" in flat
    assert "2.0 minutes" in text  # 3 + 60 + 57 s


def test_a_generated_paragraph_is_wrapped_to_the_docs_line_length_and_a_table_is_not(report):
    text, _ = docs.refresh_text(_doc("run", "bench-same-chunk", "fio-model", "bench-targets"), report)
    prose = [line for line in text.splitlines() if not line.startswith("|")]
    assert max(len(line.encode()) for line in prose) <= 120
    assert max(len(line.encode()) for line in text.splitlines()) > 120  # the targets table's rows stay whole


def test_figures_md_is_the_template_filled_from_one_report(report):
    text = docs.render(report)
    assert [name for name, _, _ in docs.blocks_in(text)] == list(docs.GENERATORS)
    assert _skeleton(text) == docs.template()
    assert text.startswith("# Figures from one report run\n")
    for name, (heading, _) in docs.SECTIONS.items():
        assert f"\n## {heading}\n" in text, name
    assert all(text[body:end].strip() for _, body, end in docs.blocks_in(text))


def test_the_committed_figures_md_is_what_docs_py_writes():
    """Its headings and sentences are docs.py's, its blocks are the generators' in order, and its run is stated:
    filled again from any report, it is exactly what docs.py writes for that report."""
    text = (ROOT / docs.FIGURES).read_text(encoding="utf-8")
    assert _skeleton(text) == docs.template(), "docs/figures.md differs from docs.py: run `make docs`"
    assert [name for name, _, _ in docs.blocks_in(text)] == list(docs.GENERATORS)
    name, body, end = docs.blocks_in(text)[0]
    assert name == "run" and _flat(text[body:end]).startswith("*Generated by `make docs` from one `pybcache report")
    assert all(text[body:end].strip() for _, body, end in docs.blocks_in(text))


def test_no_other_markdown_file_carries_a_generated_block():
    skip = {".git", "build", "node_modules", ".venv", "venv"}
    carriers = sorted(p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*.md")
                      if not skip & set(p.relative_to(ROOT).parts)
                      and ("<!-- generated:" in p.read_text(encoding="utf-8", errors="replace")
                           or "<!-- end generated -->" in p.read_text(encoding="utf-8", errors="replace")))
    assert carriers == [docs.FIGURES], "link to docs/figures.md instead of copying a generated block"


def test_a_refresh_of_a_refreshed_doc_changes_only_the_figures(report):
    once, _ = docs.refresh_text(_doc("bench-targets"), report)
    again, _ = docs.refresh_text(once, report)
    assert again == once
    report["bench"]["results"][0]["scaling_2_over_1"] = 1.85
    changed, _ = docs.refresh_text(once, report)
    assert "1.85×" in changed and changed.count("<!-- end generated -->") == 1


def test_fio_target_verdict_is_computed_from_the_page_ratio(report):
    text = _flat(docs.refresh_text(_doc("fio-model"), report)[0])
    assert "10 GiB, bounce copy on: `page` 1.060× — met" in text
    assert "320 GiB, bounce copy on: `page` 1.166× — **missed**" in text  # 1.06 * 1.1
    # 1.06 * 1.04 = 1.1024 > 1.10: shown with the third decimal, never as a "1.10× missed"
    assert "10 GiB, bounce copy off: `page` 1.102× — **missed**" in text
    report["fio"]["10 GiB"]["rows"][2]["ns_per_io_vs_none"] = 1.18
    text = _flat(docs.refresh_text(_doc("fio-model"), report)[0])
    assert "10 GiB, bounce copy on: `page` 1.180× — **missed**" in text


def test_floor_spread_is_shown_when_the_report_has_it(report):
    for r in report["bench"]["same_chunk"]:
        r["floor_spread_ns"] = {"min": 25.0, "median": 40.0, "max": 105.0, "runs": 7}
        r["floor_pinned"] = True
    text = _flat(docs.refresh_text(_doc("bench-same-chunk"), report)[0])
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
    (("run", "quick"), "run"),
    (("machine", "load_end"), "run"),
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


def test_main_writes_figures_md_from_a_report_dir_and_nothing_on_a_missing_figure(report, tmp_path, capsys):
    (tmp_path / "report.json").write_text(json.dumps(report))
    out = tmp_path / "figures.md"
    assert docs.main(["--report", str(tmp_path), "--out", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == docs.render(report)
    assert capsys.readouterr().out == f"{out}: {', '.join(docs.GENERATORS)}\n"
    del report["bench"]["scaling"]
    (tmp_path / "report.json").write_text(json.dumps(report))
    out.write_text("OLD FIGURE\n")
    assert docs.main(["--report", str(tmp_path), "--out", str(out)]) == 1
    assert "report.json has no bench/scaling" in capsys.readouterr().err
    assert out.read_text() == "OLD FIGURE\n"
    assert docs.main(["--report", str(tmp_path / "nowhere"), "--out", str(out)]) == 2
