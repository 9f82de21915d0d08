"""``pybcache report`` (``pybcache/commands/report.py``). The experiment it starts is stood in for (no subprocess, no C
model): these tests state what the command hands on, prints, writes as JSON and returns for given arguments and
results."""
from __future__ import annotations

import contextlib
import os
from types import SimpleNamespace

import pytest

from pybcache import commands
from pybcache.commands import report

from helpers.command_stand_ins import _args


def _fake_report(monkeypatch, targets=None):
    import pybcache.report
    seen = {"calls": [], "bar": [], "postfixes": []}
    bar = SimpleNamespace(update=lambda n: seen["bar"].append(("update", n)),
                          set_postfix_str=lambda text: seen["postfixes"].append(text))

    @contextlib.contextmanager
    def status_bar(desc, *, total=None, quiet=False):
        seen["bar"].append((desc, total, quiet))
        yield bar

    def write_report(out, *, quick, seed, kernel, progress, step):
        seen["calls"].append(dict(out=out, quick=quick, seed=seed, kernel=kernel, step=step is bar.set_postfix_str))
        for name in ("memory", "bench", "fio"):
            progress(name)
            step(f"{name} step")
        return os.path.join(out, "report.md"), {
            "plots": ["a.png", "b.png", "c.png"], "timings": {"memory": 1.25, "bench": 20.0},
            "targets": targets if targets is not None else {}}
    monkeypatch.setattr(pybcache.report, "write_report", write_report)
    monkeypatch.setattr(report, "status_bar", status_bar)
    ticks = iter((10.0, 42.5))
    monkeypatch.setattr(report, "time", SimpleNamespace(perf_counter=lambda: next(ticks)))
    return seen


def test_report_writes_into_out_with_its_seed_and_quick_and_prints_what_it_wrote(monkeypatch, capsys, tmp_path):
    from pybcache.report import SECTIONS
    out = tmp_path / "a" / "b"
    seen = _fake_report(monkeypatch, {"p99_bypass_ns": (99_960, True), "batch_pair_ratio": (1.5, False),
                                      "same_chunk": (2.25, None)})
    assert report.run(_args("report", "--out", str(out), "--quick", "--seed", "5")) == 0
    assert out.is_dir()
    assert seen["calls"] == [dict(out=str(out), quick=True, seed=5, kernel=False, step=True)]
    # the bar counts a section done when the next starts, and names the one running
    assert seen["bar"] == [("report", len(SECTIONS), False), ("update", 1), ("update", 1)]
    assert seen["postfixes"] == ["memory", "memory step", "bench", "bench step", "fio", "fio step"]
    assert capsys.readouterr().out == (
        f"wrote {out}/report.md and 3 plots in 32.5 s (memory 1.2 s, bench 20.0 s)\n"
        "  target p99_bypass_ns: 100.0 µs met\n  target batch_pair_ratio: 1.5x MISSED\n"
        "  target same_chunk: 2.25x inconclusive\n")


def test_report_prints_a_target_of_0_operations_as_not_measured(monkeypatch, capsys, tmp_path):
    _fake_report(monkeypatch, {"same chunk page ≤ 1.5x floor (overlap 0.00)": (None, None)})
    assert report.run(_args("report", "--out", str(tmp_path))) == 0
    assert capsys.readouterr().out.endswith(
        "  target same chunk page ≤ 1.5x floor (overlap 0.00): not measured: 0 operations in the run\n")


def test_report_defaults_to_report_seed_0_and_full_runs(monkeypatch, capsys, tmp_path):
    seen = _fake_report(monkeypatch)
    monkeypatch.chdir(tmp_path)
    assert report.run(_args("report")) == 0
    assert seen["calls"] == [dict(out="report", quick=False, seed=0, kernel=False, step=True)] and \
        (tmp_path / "report").is_dir()


def test_report_kernel_asks_for_the_real_driver_section(monkeypatch, tmp_path):
    seen = _fake_report(monkeypatch)
    monkeypatch.chdir(tmp_path)
    assert report.run(_args("report", "--kernel")) == 0
    assert seen["calls"][-1]["kernel"] is True


def test_report_refuses_an_out_that_is_a_file_cannot_be_made_or_is_not_writable(monkeypatch, tmp_path):
    seen = _fake_report(monkeypatch)
    (tmp_path / "f").write_text("")
    with pytest.raises(commands.UsageError) as err:
        report.run(_args("report", "--out", str(tmp_path / "f")))
    assert str(err.value) == f"--out: {str(tmp_path / 'f')!r} exists and is not a directory"
    with pytest.raises(commands.UsageError) as err:
        report.run(_args("report", "--out", str(tmp_path / "f" / "g")))
    assert str(err.value) == f"--out: cannot create {str(tmp_path / 'f' / 'g')!r}: Not a directory"
    checked = []
    monkeypatch.setattr(os, "access", lambda path, mode: checked.append((path, mode)) and False)
    with pytest.raises(commands.UsageError) as err:
        report.run(_args("report", "--out", str(tmp_path)))
    assert str(err.value) == f"--out: {str(tmp_path)!r} is not writable"
    assert checked == [(str(tmp_path), os.W_OK)] and seen["calls"] == []
