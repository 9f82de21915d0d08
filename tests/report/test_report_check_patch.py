"""The report's check-patch section (``pybcache/report/check_patch.py``).

The experiments the section runs are stood in for (``monkeypatch``); the tests check the Markdown it writes
(figures formatted as stated, verdicts that follow the figures), the results it stores, the plots it asks for
(the data handed to the plot function and the file named, not pixels) and what it hands on to the experiments.
Fast: no experiment, no real plot, no subprocess."""
from __future__ import annotations

import types

import pybcache.bcache.kpatch.check.runner as checkpatch_mod
from pybcache import _csrc
from pybcache.report import check_patch as rcheck

from helpers.report_stand_ins import _ctx


def _check(name, passed, figure, counterexample=None):
    return types.SimpleNamespace(name=name, passed=passed, figure=figure, counterexample=counterexample)


def test_the_check_patch_section_tables_each_example_and_numbers_a_failed_checks_counterexample(
        tmp_path, monkeypatch):
    calls = []

    def battery(path, seconds):
        calls.append((path, seconds))
        checks = [_check("race", False, "3 stale | 2 runs", ["W1 start", "R1 read"]),
                  _check("explore", True, "0 violations", ["never shown"]),
                  _check("memory", False, "over", [])]
        return types.SimpleNamespace(name=f"{path}-name", checks=checks, wall_s=9.27,
                                     to_json=lambda: {"path": path})
    monkeypatch.setattr(checkpatch_mod, "check_patch", battery)
    monkeypatch.setattr(_csrc, "example_patches", lambda: {"v2_posted": "P2", "v3_atomic": "P3A"})
    ctx, notes = _ctx(tmp_path, quick=True)
    text = rcheck.check_patch(ctx)
    assert calls == [("P2", 0.5), ("P3A", 0.5)] and notes == ["check-patch: v2_posted", "check-patch: v3_atomic"]
    blocks = text.split("\n\n")
    table_ = ("| check | passed | figure |\n|---|---|---|\n| race | **FAILED** | 3 stale / 2 runs |\n"
              "| explore | yes | 0 violations |\n| memory | **FAILED** | over |")
    assert blocks[0] == "## check-patch: the shipped example patches"
    assert blocks[1].endswith("each check in a child process; stress time 0.5 s (quick).")
    assert blocks[2:6] == ["**v2_posted.c** (`P2-name`): 1 of 3 checks passed, battery wall time 9.3 s", table_,
                           "race counterexample:", "1. W1 start\n2. R1 read"]
    assert blocks[6].startswith("`v3_proposal.c`: not found (neither in the package")
    assert blocks[7:] == ["**v3_atomic.c** (`P3A-name`): 1 of 3 checks passed, battery wall time 9.3 s", table_,
                          "race counterexample:", "1. W1 start\n2. R1 read", ""]
    assert ctx.results["check_patch"] == {"v2_posted": {"path": "P2"}, "v3_atomic": {"path": "P3A"}}
    assert "stress time 0.5 s (quick)." in text
    assert "`v3_proposal.c`: not found" in text
    assert "**v2_posted.c** (`P2-name`): 1 of 3 checks passed, battery wall time 9.3 s" in text
    assert ("| race | **FAILED** | 3 stale / 2 runs |\n| explore | yes | 0 violations |\n"
            "| memory | **FAILED** | over |") in text
    assert "race counterexample:\n\n1. W1 start\n2. R1 read" in text
    assert text.count("counterexample:") == 2 and "never shown" not in text
    assert text.endswith("\n\n")


def test_the_check_patch_section_in_full_mode_stresses_two_seconds(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(checkpatch_mod, "check_patch", lambda path, seconds: calls.append(seconds) or
                        types.SimpleNamespace(name="n", checks=[], wall_s=1.0, to_json=dict))
    monkeypatch.setattr(_csrc, "example_patches", lambda: {n: n for n in rcheck.PATCH_EXAMPLES})
    text = rcheck.check_patch(_ctx(tmp_path, quick=False)[0])
    assert calls == [2.0, 2.0, 2.0] and "stress time the default 2 s." in text and "not found" not in text
