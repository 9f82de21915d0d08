"""The report's real-fio section: it says what to install when fio or nbdkit is missing (the section
that runs is exercised by test_report.py's quick report wherever the tools are installed)."""
from __future__ import annotations

from pybcache.nbdreport import section
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
