"""The exhaustive explorer: counterexamples for the bugs, none for the fix."""
from __future__ import annotations

import json

import pytest

from clirun import run_pybcache

from pybcache import explore


def test_unpatched_model_has_a_counterexample():
    res = explore(sync="none", writes=1, reads=1)
    assert res["finished"] and res["violations"] > 0
    steps = res["counterexample"]
    assert any("STALE" in s for s in steps)
    assert steps[0].startswith("W1 start")


@pytest.mark.parametrize("sync", ["global", "page", "atomic"])
def test_check_before_the_check_key_has_a_counterexample(sync):
    res = explore(sync=sync, check="before", writes=1, reads=1)
    assert res["violations"] > 0
    assert any("BEFORE" in s for s in res["counterexample"])


@pytest.mark.parametrize("writes, reads", [(2, 1), (1, 2)])
@pytest.mark.parametrize("sync", ["global", "page", "atomic"])
def test_check_after_the_check_key_has_no_violation_in_any_schedule(sync, writes, reads):
    res = explore(sync=sync, check="after", writes=writes, reads=reads)
    assert res["finished"]
    assert res["schedules"] > 30_000
    assert res["violations"] == 0 and res["counterexample"] is None
    assert res["bypass_schedules"] > 0 and res["collision_schedules"] > 0


def test_schedule_count_of_two_writes_and_one_read_is_the_multinomial():
    # 4 steps per write and per read, no read can hit (nothing is cached before it): 12!/(4!4!4!).
    assert explore(sync="page", writes=2, reads=1)["schedules"] == 34650
    assert explore(sync="none", writes=2, reads=1)["schedules"] == 11550  # reads have 3 steps


@pytest.mark.parametrize("sync", ["global", "page", "atomic"])
def test_untracked_allocation_failure_reopens_the_race(sync):
    res = explore(sync=sync, alloc_failure="untracked", fault_at=1, writes=2, reads=1)
    assert res["violations"] > 0 and res["faults_injected"] > 0 and res["untracked_schedules"] > 0
    assert any("UNTRACKED" in s for s in res["counterexample"])


def test_stolen_increment_shows_as_an_underflow_in_the_counterexample():
    res = explore(sync="page", alloc_failure="untracked", fault_at=2, writes=2, reads=1)
    assert res["violations"] > 0 and res["underflow_schedules"] > 0


@pytest.mark.parametrize("policy", ["hijack", "pool"])
@pytest.mark.parametrize("fault_at", [1, 2])
@pytest.mark.parametrize("sync", ["global", "page", "atomic"])
def test_hijack_and_pool_stay_closed_under_allocation_failure(sync, policy, fault_at):
    res = explore(sync=sync, alloc_failure=policy, fault_at=fault_at, writes=2, reads=1)
    assert res["finished"] and res["violations"] == 0


def test_max_schedules_stops_early():
    res = explore(sync="page", writes=2, reads=1, max_schedules=1000)
    assert res["schedules"] == 1000 and not res["finished"]


def test_multi_block_operations():
    res = explore(sync="page", writes=1, reads=2, write_blocks=2, read_blocks=2)
    assert res["finished"] and res["violations"] == 0


@pytest.mark.parametrize("kwargs, exc, word", [
    ({"writes": 9}, ValueError, "writes"),
    ({"writes": 0, "reads": 0}, ValueError, "writes \\+ reads"),
    ({"writes": 5, "reads": 4}, ValueError, "writes \\+ reads"),
    ({"fault_at": -1}, ValueError, "fault_at"),
    ({"fault_at": 1.0}, TypeError, "fault_at"),
    ({"check": "never"}, ValueError, "check"),
    ({"alloc_failure": None}, TypeError, "alloc_failure"),
    ({"chunk_size": 3000}, ValueError, "chunk_size"),
    ({"read_blocks": 65}, ValueError, "read_blocks"),
])
def test_bad_arguments_name_the_argument(kwargs, exc, word):
    with pytest.raises(exc, match=word):
        explore(**kwargs)


def cli(*args):
    return run_pybcache(*args, timeout=120)


def test_cli_json_keys_and_counterexample():
    p = cli("explore", "--sync", "none", "--bounds", "1w1r", "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert {"schedules", "violations", "counterexample"} <= out.keys()
    assert out["violations"] > 0 and isinstance(out["counterexample"], list)


def test_cli_default_bounds_are_clean_for_the_fix():
    p = cli("explore", "--sync", "atomic", "--json")
    out = json.loads(p.stdout)
    assert p.returncode == 0 and out["violations"] == 0 and out["counterexample"] is None
    assert [r["bound"] for r in out["runs"]] == ["1w1r", "2w1r", "1w2r"]


def test_cli_table_prints_the_step_list():
    p = cli("explore", "--check", "before", "--bounds", "1w1r")
    assert p.returncode == 0 and "first counterexample" in p.stdout and " 1. " in p.stdout


@pytest.mark.parametrize("args", [
    ["--bounds", "3x"], ["--bounds", "5w5r"], ["--bounds", ","], ["--fault-at", "-1"], ["--fault-at", "one"],
    ["--sync", "locks"], ["--check", "sometimes"], ["--max-schedules", "1e3"],
])
def test_cli_hostile_arguments_exit_2_with_one_line(args):
    p = cli("explore", *args)
    assert p.returncode == 2 and p.stdout == ""
    assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr
