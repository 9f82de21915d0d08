"""The report's real-fio section: it says what to install when fio or nbdkit is missing (the section
that runs is exercised by test_report.py's quick report wherever the tools are installed)."""
from __future__ import annotations

import pytest

from pybcache.report.nbd import section
from pybcache.report import SECTIONS, ReportContext


def test_report_lists_the_real_fio_section_after_the_model_fio():
    names = [name for name, _ in SECTIONS]
    assert names.index("fio over NBD") == names.index("fio") + 1


def test_real_fio_section_says_what_to_install_when_the_tools_are_missing(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    ctx = ReportContext(out_dir=str(tmp_path), quick=True)
    text = section(ctx)
    assert "Not run on this machine" in text and "apt-get install" in text and "fio" in text
    assert "apt-get install" in ctx.results["fio_nbd"]["skipped"]


def _fake_fio_nbd(calls):
    def fio_nbd(*, size, seconds, memory_baseline):
        calls.append({"size": size, "seconds": seconds, "memory_baseline": memory_baseline})
        iops = {"none": (300, 100), "global": (240, 60), "page": (270, 90), "atomic": (330, 110)}
        return {"rows": [{"variant": v, "fio": {"read_iops": r, "write_iops": w}} for v, (r, w) in iops.items()],
                "baseline": {"fio": {"read_iops": 600, "write_iops": 200}},
                "config": {"jobs": 4, "size": size, "rounds": 3, "seconds": seconds, "write_delay_ns": 1_000_000}}
    return fio_nbd


@pytest.mark.parametrize("quick, size, seconds", [(True, 1 << 30, 1.0), (False, 10 << 30, 10.0)])
def test_real_fio_section_states_the_run_and_each_variants_iops_ratio(tmp_path, monkeypatch, quick, size, seconds):
    # The tools present (stood in for): the section runs fio_nbd once, quick or full, keeps its result, and
    # states each tracked variant's total IOPS over the unpatched model's and each server's over nbdkit-memory.
    import pybcache.commands.fio_nbd
    import pybcache.bcache.nbd.fio
    import pybcache.bcache.nbd.server
    calls: list[dict] = []
    notes: list[str] = []
    required: list[tuple[str, ...]] = []
    monkeypatch.setattr(pybcache.bcache.nbd.server, "require_tools", lambda *tools: required.append(tools))
    monkeypatch.setattr(pybcache.bcache.nbd.server, "build_plugin", lambda: None)
    monkeypatch.setattr(pybcache.bcache.nbd.fio, "fio_nbd", _fake_fio_nbd(calls))
    monkeypatch.setattr(pybcache.bcache.nbd.fio, "fio_table",
                        lambda res: "THE TABLE" if res is ctx.results["fio_nbd"] else "another result")
    ctx = ReportContext(out_dir=str(tmp_path), quick=quick, note=notes.append)
    text = section(ctx)
    assert required == [("fio", "nbdkit")]
    assert calls == [{"size": size, "seconds": seconds, "memory_baseline": True}] and notes == ["fio over NBD"]
    assert ctx.results["fio_nbd"]["config"]["size"] == size
    assert text.startswith("## fio over NBD: the v2 cover letter's table from real fio\n")
    flat = " ".join(text.split())
    assert f"4 jobs, {size >> 30} GiB)" in flat and "rotating rounds (3)" in flat
    assert f"{seconds:g} s per server in all, write delay 1 ms." in flat
    # none 400 IOPS: global 300 -> 0.750x, page 360 -> 0.900x, atomic 440 -> 1.100x; memory 800 IOPS
    assert "relative to the unpatched model: global 0.750x, page 0.900x, atomic 1.100x;" in flat
    assert "relative to nbdkit-memory: none 0.50x, global 0.38x, page 0.45x, atomic 0.55x." in flat
    assert "```\nTHE TABLE\n```" in text
