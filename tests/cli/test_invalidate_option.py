"""``--invalidate {at-submit,after-write}`` on ``pybcache explore`` and ``pybcache race``: handed on to the model
only when not at its default (so a default run is called as before), named in the ``--json`` output, refused
with exit status 2 and one line when bad; and one real explorer run per value through the command."""
from __future__ import annotations

import json

import pytest

from pybcache.commands import main


def _recording(monkeypatch, name, result):
    import pybcache.bcache.cachedev
    calls = []

    def fake(**kw):
        calls.append(kw)
        if "progress" in kw:
            kw["progress"](range(1), 1)
        return dict(result)
    monkeypatch.setattr(pybcache.bcache.cachedev, name, fake)
    return calls


_EXPLORED = {"schedules": 1, "violations": 0, "counterexample": None, "counterexample_steps": None,
             "finished": True, "report_schedules": 0, "stale_read_schedules": 0, "stale_cache_schedules": 0,
             "bypass_schedules": 0, "restart_schedules": 0, "restart_capped_schedules": 0, "untracked_schedules": 0,
             "underflow_schedules": 0, "wrap_schedules": 0, "blocked_schedules": 0, "stuck_schedules": 0,
             "partial_violation_schedules": 0, "config": {}}


@pytest.mark.parametrize("argv, handed", [([], None), (["--invalidate", "at-submit"], None),
                                          (["--invalidate", "after-write"], "after-write")])
def test_explore_hands_the_option_on_and_names_it_in_json(monkeypatch, capsys, argv, handed):
    calls = _recording(monkeypatch, "explore", _EXPLORED)
    assert main(["explore", "--bounds", "1w1r", "--json", *argv]) == 0
    assert calls[0].get("invalidate") == handed
    assert json.loads(capsys.readouterr().out)["invalidate"] == (handed or "at-submit")


@pytest.mark.parametrize("argv, handed", [([], None), (["--invalidate", "after-write"], "after-write")])
def test_race_hands_the_option_on_and_names_it_in_json(monkeypatch, capsys, argv, handed):
    result = {k: 0 for k in ("stale_reads", "stale_cached_blocks", "reads", "writes", "read_bypasses",
                             "cache_inserts", "miss_collisions", "ops", "ops_per_s", "stale_reads_per_s",
                             "untracked_writes", "underflows", "faults_injected", "tracker_checks",
                             "check_key_restarts")}
    calls = _recording(monkeypatch, "race", dict(result, seconds=1.0, kernel_reports={}, config={}))
    assert main(["race", "--sync", "none", "--json", *argv]) == 0
    assert calls[0].get("invalidate") == handed
    assert json.loads(capsys.readouterr().out)["invalidate"] == (handed or "at-submit")


@pytest.mark.parametrize("command", ["explore", "race"])
@pytest.mark.parametrize("value", ["later", "", "AT-SUBMIT"])
def test_a_bad_value_exits_2_with_one_line_naming_the_option(capsys, command, value):
    with pytest.raises(SystemExit) as exc:
        main([command, "--invalidate", value])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and len(err.splitlines()) == 1 and "--invalidate" in err


@pytest.mark.native
@pytest.mark.parametrize("value, found", [("at-submit", True), ("after-write", False)])
def test_the_real_explorer_through_the_command(capsys, value, found):
    # Exhaustive, hence deterministic: the unpatched order has a counterexample in 1w1r, the v1 order none.
    assert main(["explore", "--sync", "none", "--bounds", "1w1r,2w1r", "--invalidate", value, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["finished"] and out["invalidate"] == value
    assert (out["violations"] > 0) is found and (out["counterexample"] is not None) is found
    assert all(r["config"].get("invalidate", "at-submit") == value for r in out["runs"])
