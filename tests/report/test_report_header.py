"""The report's header, ``this_run`` and ``write_report`` (``pybcache/report/header.py``,
``pybcache/report/__init__.py``).

The experiments the section runs are stood in for (``monkeypatch``); the tests check the Markdown it writes
(figures formatted as stated, verdicts that follow the figures), the results it stores, the plots it asks for
(the data handed to the plot function and the file named, not pixels) and what it hands on to the experiments.
Fast: no experiment, no real plot, no subprocess."""
from __future__ import annotations

import json
import platform
import re
import types

import numpy as np
import pytest

import pybcache
from pybcache import report
from pybcache.report import _common, header as rheader

from helpers.report_stand_ins import _ctx


@pytest.fixture
def machine(monkeypatch):
    monkeypatch.setattr(rheader, "loadavg", lambda: "1.25, 1.50, 1.75")
    monkeypatch.setattr(rheader, "cpu_model", lambda: "Test CPU 9000")
    monkeypatch.setattr(rheader, "mem_total", lambda: "3.0 GiB")
    monkeypatch.setattr(rheader, "version_of", lambda m: f"{m}-v")
    monkeypatch.setattr(rheader.os, "cpu_count", lambda: 3)


@pytest.mark.parametrize("quick, mode", [(True, "mode: quick (short runs, noisier figures); seed 5"),
                                         (False, "mode: full; seed 5")])
def test_the_header_states_the_machine_mode_and_seed_and_records_the_run(tmp_path, machine, monkeypatch, quick,
                                                                         mode):
    import time
    utc = time.struct_time((2026, 12, 2, 0, 12, 30, 2, 336, 0))
    monkeypatch.setattr(rheader, "time", types.SimpleNamespace(strftime=time.strftime, gmtime=lambda: utc))
    ctx, _ = _ctx(tmp_path, quick=quick, seed=5)
    text = rheader.header(ctx)
    assert text.startswith("# pybcache report\n") and text.endswith("\n") and not text.endswith("\n\n")
    assert mode in text
    assert "machine: Test CPU 9000, 3 CPUs online, 3.0 GiB RAM" in text
    assert "matplotlib matplotlib-v, Cython Cython-v (build only)" in text
    assert "when the report started: 1.25, 1.50, 1.75" in text
    assert (f"- pybcache {pybcache.__version__}; Python {platform.python_version()}, numpy {np.__version__}, "
            "matplotlib") in text
    assert f" {platform.system()} {platform.release()} ({platform.machine()})\n" in text
    assert re.search(r"\n- generated \d{4}-\d\d-\d\d \d\d:\d\d:\d\d \S*; every figure below was measured in "
                     r"this run\n", text)
    assert ctx.results["machine"] == {"load_start": "1.25, 1.50, 1.75", "cpus": 3, "cpu": "Test CPU 9000"}
    run = ctx.results["run"]
    assert run["quick"] is quick and run["seed"] == 5
    assert run["generated_utc"] == "2026-12-02 00:12 UTC"                     # from the UTC clock


def test_this_run_lists_each_sections_time_the_total_the_load_and_the_plots(tmp_path, machine):
    ctx, _ = _ctx(tmp_path)
    ctx.plot("a.png", "the first")
    ctx.plot("b.png", "the second")
    text = rheader.this_run(ctx, {"memory": 1.26, "bench": 40.0}, 41.26)
    assert text == ("## This run\n\n- memory: 1.3 s\n- bench: 40.0 s\n- total: 41.3 s; load average at the end: "
                    "1.25, 1.50, 1.75\n- plots: `a.png` (the first), `b.png` (the second)\n- raw results: "
                    "`report.json`\n")


def test_a_plot_path_is_in_the_output_directory_and_recorded_with_its_title(tmp_path):
    ctx, _ = _ctx(tmp_path)
    assert ctx.plot("x.png", "title x") == str(tmp_path / "x.png")
    assert ctx.plots == [("x.png", "title x")]


def test_write_report_runs_the_sections_in_order_and_writes_the_markdown_and_the_json(tmp_path, machine,
                                                                                      monkeypatch):
    clock = iter([100.0, 101.0, 103.5, 104.0, 104.25, 110.0])
    monkeypatch.setattr(report, "time", types.SimpleNamespace(perf_counter=lambda: next(clock)))
    monkeypatch.setattr(report, "loadavg", lambda: "2.00, 2.00, 2.00")

    def first(ctx):
        ctx.note("inside first")
        ctx.results["first"] = {"n": np.int64(3), "big": np.zeros(5000)}
        ctx.plot("first.png", "the first plot")
        return "FIRST"

    def second(ctx):
        assert ctx.quick and ctx.seed == 9
        return "SECOND"
    monkeypatch.setattr(report, "SECTIONS", [("one", first), ("two", second)])
    seen, steps = [], []
    out = tmp_path / "out" / "deeper"
    path, summary = report.write_report(str(out), quick=True, seed=9, progress=seen.append, step=steps.append)
    assert seen == ["one", "two"] and steps == ["inside first"]
    assert path == str(out / "report.md")
    md = (out / "report.md").read_text("utf-8")
    assert md.startswith("# pybcache report\n") and "\nFIRST\nSECOND\n## This run\n" in md
    assert "- one: 2.5 s\n- two: 0.2 s\n- total: 10.0 s" in md and "`first.png` (the first plot)" in md
    doc = json.loads((out / "report.json").read_text("utf-8"))
    assert doc["first"] == {"n": 3, "big": None}
    assert doc["timings"] == {"one": 2.5, "two": 0.25}
    assert doc["machine"]["load_end"] == "2.00, 2.00, 2.00" and doc["run"]["seed"] == 9
    assert summary == {"timings": {"one": 2.5, "two": 0.25}, "total_s": 10.0, "plots": ["first.png"], "targets": {}}


def test_write_report_without_callbacks_runs_and_its_json_is_indented(tmp_path, machine, monkeypatch):
    monkeypatch.setattr(report, "SECTIONS", [("only", lambda ctx: ctx.note("a step") or "ONLY")])
    path, summary = report.write_report(str(tmp_path))
    assert open(path, encoding="utf-8").read().count("ONLY") == 1
    run = json.loads((tmp_path / "report.json").read_text("utf-8"))["run"]
    assert run["quick"] is False and run["seed"] == 0                             # full mode, seed 0 by default
    assert '\n "machine": {\n' in (tmp_path / "report.json").read_text("utf-8")
    assert list(summary["timings"]) == ["only"]


def test_loadavg_is_the_three_averages_to_two_decimals_or_unknown(monkeypatch):
    monkeypatch.setattr(_common.os, "getloadavg", lambda: (1.0, 2.5, 0.125))
    assert _common.loadavg() == "1.00, 2.50, 0.12"

    def refused():
        raise OSError("no load average here")
    monkeypatch.setattr(_common.os, "getloadavg", refused)
    assert _common.loadavg() == "unknown"


def test_the_cpu_model_is_read_from_cpuinfo_else_the_platforms_name_else_unknown(monkeypatch):
    import io
    cpuinfo = "processor\t: 0\nvendor_id\t: Test\nmodel name\t: Test CPU: 9000 @ 2GHz \nmodel name\t: second\n"
    opened = []

    def fake_open(path, encoding):
        opened.append((path, encoding))
        if cpuinfo is None:
            raise OSError(path)
        return io.StringIO(cpuinfo)
    monkeypatch.setattr(_common, "open", fake_open, raising=False)
    monkeypatch.setattr(_common.platform, "processor", lambda: "x86_64")
    assert _common.cpu_model() == "Test CPU: 9000 @ 2GHz"
    assert opened == [("/proc/cpuinfo", "utf-8")]
    cpuinfo = "processor\t: 0\n"
    assert _common.cpu_model() == "x86_64"
    cpuinfo = None
    assert _common.cpu_model() == "x86_64"
    monkeypatch.setattr(_common.platform, "processor", lambda: "")
    assert _common.cpu_model() == "unknown CPU"


def test_the_memory_total_is_pages_times_page_size_else_unknown(monkeypatch):
    values = {"SC_PAGE_SIZE": 4096, "SC_PHYS_PAGES": 786_432}
    monkeypatch.setattr(_common.os, "sysconf", lambda name: values[name])
    assert _common.mem_total() == "3 GiB"

    def refused(name):
        raise ValueError(name)
    monkeypatch.setattr(_common.os, "sysconf", refused)
    assert _common.mem_total() == "unknown"


def test_a_modules_version_or_not_installed():
    assert _common.version_of("numpy") == np.__version__
    assert _common.version_of("pybcache_no_such_module") == "not installed"
    assert _common.version_of("types") == "not installed"          # imports, but has no __version__
