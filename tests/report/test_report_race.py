"""The report's race and explore section (``pybcache/report/race.py``).

The experiments the section runs are stood in for (``monkeypatch``); the tests check the Markdown it writes
(figures formatted as stated, verdicts that follow the figures), the results it stores, the plots it asks for
(the data handed to the plot function and the file named, not pixels) and what it hands on to the experiments.
Fast: no experiment, no real plot, no subprocess."""
from __future__ import annotations

import pytest

import pybcache.bcache.cachedev as cachedev_mod
from pybcache.report import race as rrace

from helpers.report_stand_ins import _ctx, _layout


def _race_stub(calls):
    def run_race(seconds, seed, **kw):
        calls.append((seconds, seed, kw))
        n = len(calls)
        stale = 0 if kw.get("sync") not in ("none",) else 1_234_567
        out = {k: n for k in rrace._RACE_KEYS}
        out.update(stale_reads=stale, stale_reads_per_s=stale / 0.4, reads=2_000_000 + n, writes=30_720,
                   read_bypasses=4_321, underflows=1_000 if kw.get("alloc_failure") == "untracked" else 0,
                   faults_injected=5_000 if "fault_probability" in kw else 0, stale_cached_blocks=2)
        out["config"] = {"sync": kw["sync"], "seed": seed}
        return out
    return run_race


def _explore_stub(calls):
    def explore(writes, reads, **kw):
        calls.append((writes, reads, kw))
        bound = f"{writes}w{reads}r"
        bad = kw.get("sync") == "none" or kw.get("check") == "entry" or (
            kw.get("alloc_failure") == "untracked" and bound == "2w1r") or (kw.get("restart") is False
                                                                            and bound == "1w2r") or (
            kw.get("detached") and kw.get("track") != "all")
        counterexample = [f"{bound} step {i}" for i in range(3 + writes)] if bad else None
        return {"schedules": 1000 * writes + reads, "violations": 7 if bad else 0,
                "underflow_schedules": 1 if kw.get("alloc_failure") == "untracked" else 0,
                "restart_schedules": 2, "restart_capped_schedules": 0 if reads == 1 else 3,
                "finished": kw.get("restart") is not False or bound != "1w2r", "counterexample": counterexample}
    return explore


def test_an_explorer_row_sums_its_bounds_and_keeps_the_first_counterexample(monkeypatch):
    calls = []
    monkeypatch.setattr(cachedev_mod, "explore", _explore_stub(calls))
    row = rrace._explore_row("untracked", {"sync": "page", "alloc_failure": "untracked"})
    assert calls == [(1, 1, {"sync": "page", "alloc_failure": "untracked"}),
                     (2, 1, {"sync": "page", "alloc_failure": "untracked"}),
                     (1, 2, {"sync": "page", "alloc_failure": "untracked"})]
    assert row["label"] == "untracked" and row["config"] == {"sync": "page", "alloc_failure": "untracked"}
    assert row["schedules"] == 1001 + 2001 + 1002 and row["violations"] == 7
    assert row["underflow_schedules"] == 3 and row["restart_schedules"] == 6 and row["restart_capped_schedules"] == 3
    assert row["finished"] is True
    assert row["per_bound"] == {"1w1r": {"schedules": 1001, "violations": 0, "counterexample": None},
                                "2w1r": {"schedules": 2001, "violations": 7,
                                         "counterexample": [f"2w1r step {i}" for i in range(5)]},
                                "1w2r": {"schedules": 1002, "violations": 0, "counterexample": None}}
    assert row["counterexample_bound"] == "2w1r" and row["counterexample"] == [f"2w1r step {i}" for i in range(5)]


def test_an_explorer_row_without_a_counterexample_has_none_and_one_unfinished_bound_makes_it_incomplete(monkeypatch):
    monkeypatch.setattr(cachedev_mod, "explore", _explore_stub([]))
    row = rrace._explore_row("miss", {"sync": "page", "check": "miss"})
    assert row["counterexample_bound"] is None and row["counterexample"] is None and row["finished"] is True
    assert rrace._explore_row("no restart", {"sync": "page", "restart": False})["finished"] is False


@pytest.mark.parametrize("quick, seconds", [(True, 0.4), (False, 1.0)])
def test_the_race_section_runs_every_configuration_tables_it_and_shows_the_counterexamples(
        tmp_path, monkeypatch, plots, quick, seconds):
    race_calls, explore_calls = [], []
    monkeypatch.setattr(cachedev_mod, "race", _race_stub(race_calls))
    monkeypatch.setattr(cachedev_mod, "explore", _explore_stub(explore_calls))
    monkeypatch.setattr(cachedev_mod, "EXPLORER_SEMANTICS", "SEMANTICS-TEXT")
    ctx, notes = _ctx(tmp_path, quick=quick, seed=11)
    text = rrace.race(ctx)
    _layout(text, "race")
    assert [c[2] for c in race_calls] == [kw for _, kw in rrace.RACE_CONFIGS]
    assert all(c[:2] == (seconds, 11) for c in race_calls)
    assert len(explore_calls) == 3 * len(rrace.EXPLORE_CONFIGS)
    assert notes == [f"race: {lb}" for lb, _ in rrace.RACE_CONFIGS] + [f"explore: {lb}" for lb, _ in
                                                                          rrace.EXPLORE_CONFIGS]
    rows = ctx.results["race"]
    assert [r["label"] for r in rows] == [lb for lb, _ in rrace.RACE_CONFIGS]
    assert rows[0]["stale_reads"] == 1_234_567 and rows[0]["config"] == {"sync": "none", "seed": 11}
    assert set(rows[0]) == set(rrace._RACE_KEYS) | {"label", "config"}
    assert [r["label"] for r in ctx.results["explore"]] == [lb for lb, _ in rrace.EXPLORE_CONFIGS]
    assert f"{seconds:g} s per configuration, seed 11" in text and "It checks SEMANTICS-TEXT." in text
    assert ("| configuration | stale reads | per second | stale cached at end | reads | writes | read bypasses | "
            "underflows | faults injected |\n|---|") in text
    assert ("| configuration | schedules | violations | with an underflow | with a restart | cut at the restart "
            "bound | complete | first counterexample |\n|---|") in text
    per_s = f"{1_234_567 / 0.4:,.0f}"
    assert f"| none (unpatched) | 1,234,567 | {per_s} | 2 | 2,000,001 | 30,720 | 4,321 | 0 | 0 |" in text
    assert "| page, untracked, 30% alloc faults | 0 | 0 | 2 | 2,000,007 | 30,720 | 4,321 | 1,000 | 5,000 |" in text
    assert "| none (unpatched) | 4,004 | 21 | 0 | 6 | 3 | yes | 1w1r, 4 steps |" in text
    assert "| page, miss path without the -EINTR restart | 4,004 | 7 | 0 | 6 | 3 | no | 1w2r, 4 steps |" in text
    assert "| page, check in the miss path | 4,004 | 0 | 0 | 6 | 3 | yes | — |" in text
    assert "| page, untracked, 1st alloc fails | 4,004 | 7 | 3 | 6 | 3 | yes | 2w1r, 5 steps |" in text
    # counterexamples: the unpatched one, the placements with a check (entry), and the stolen increment
    assert "Counterexample, none (unpatched) (1w1r):\n\n```\n 1. 1w1r step 0\n 2. 1w1r step 1\n" in text
    assert "Counterexample, page, check at request entry (1w1r):" in text
    assert ("Counterexample, page, untracked, 1st alloc fails (the stolen increment) (2w1r):\n\n```\n"
            " 1. 2w1r step 0\n") in text
    assert "Counterexample, page, miss path without the -EINTR restart (1w2r):" in text
    assert "Counterexample, page, W1 from the detached path (1w1r):" in text
    assert "| page, W1 from the detached path, counted (track all) | 4,004 | 0 |" in text
    assert text.count("Counterexample, ") == 5
    assert text.rstrip().endswith("![stale reads per configuration](stale_reads.png)") and text.endswith("\n\n")
    (race_rows, explore_rows, path), _ = plots["plot_stale_reads"][0]
    assert race_rows == rows and explore_rows == ctx.results["explore"] and path == str(tmp_path / "stale_reads.png")
    assert ctx.plots == [("stale_reads.png", "stale reads per configuration")]


def test_the_race_section_shows_no_stolen_increment_when_the_untracked_fallback_found_none(tmp_path, monkeypatch,
                                                                                          plots):
    stub = _explore_stub([])

    def explore(writes, reads, **kw):
        out = stub(writes, reads, **kw)
        if kw.get("alloc_failure") == "untracked":
            out.update(violations=0, counterexample=None)
        return out
    monkeypatch.setattr(cachedev_mod, "race", _race_stub([]))
    monkeypatch.setattr(cachedev_mod, "explore", explore)
    text = rrace.race(_ctx(tmp_path)[0])
    assert "stolen increment" not in text and text.count("Counterexample, ") == 4  # none, entry, no restart, detached
