"""The exhaustive explorer: counterexamples for the bugs, none for the fix."""
from __future__ import annotations

import json

import pytest

from helpers.clirun import run_pybcache

from pybcache import explore

pytestmark = [pytest.mark.native, pytest.mark.e2e]


SYNCS = ["global", "page", "atomic"]


def test_unpatched_model_has_a_counterexample():
    res = explore(sync="none", writes=1, reads=1)
    assert res["finished"] and res["violations"] > 0
    steps = res["counterexample"]
    assert any("STALE" in s for s in steps)
    assert steps[0].startswith("W1 start") or steps[0].startswith("R1 lookup")


@pytest.mark.parametrize("bound", [(1, 1), (2, 1), (1, 2)])
@pytest.mark.parametrize("sync", SYNCS)
def test_check_at_request_entry_has_a_counterexample(sync, bound):
    res = explore(sync=sync, check="entry", writes=bound[0], reads=bound[1])
    assert res["finished"] and res["violations"] > 0
    steps = res["counterexample"]
    # the read's check found nothing; a write then started and invalidated before the read's lookup
    check = next(i for i, s in enumerate(steps) if "tracker check at ENTRY" in s)
    lookup = next(i for i, s in enumerate(steps) if s.startswith("R1 lookup"))
    assert "no active write" in steps[check]
    assert any("invalidate" in s for s in steps[check:lookup])
    assert any("STALE" in s for s in steps)


@pytest.mark.parametrize("sync", SYNCS)
def test_before_is_the_old_name_of_entry(sync):
    old, new = explore(sync=sync, check="before"), explore(sync=sync, check="entry")
    assert old["config"]["check"] == "entry"
    assert (old["schedules"], old["violations"]) == (new["schedules"], new["violations"])


@pytest.mark.parametrize("bound", [(1, 1), (2, 1), (1, 2)])
@pytest.mark.parametrize("check", ["miss", "after"])
@pytest.mark.parametrize("sync", SYNCS)
def test_checks_in_the_miss_path_and_after_the_check_key_have_no_violation(sync, check, bound):
    res = explore(sync=sync, check=check, writes=bound[0], reads=bound[1])
    assert res["finished"] and res["restart_capped_schedules"] == 0 and res["stuck_schedules"] == 0
    assert res["violations"] == 0 and res["counterexample"] is None
    assert res["bypass_schedules"] > 0


@pytest.mark.parametrize("sync", SYNCS)
def test_the_restart_is_what_makes_the_miss_placement_safe(sync):
    res = explore(sync=sync, check="miss", restart=False, writes=1, reads=1)
    assert res["violations"] > 0
    steps = res["counterexample"]
    moved = [s for s in steps if "node sequence moved" in s]
    assert moved and "restart is switched off" in moved[0]
    assert any("STALE" in s for s in steps)
    # and with the restart, the same interleaving restarts the lookup instead
    safe = explore(sync=sync, check="miss", writes=1, reads=1)
    assert safe["violations"] == 0 and safe["restart_schedules"] > 0


@pytest.mark.parametrize("sync", SYNCS)
def test_after_the_check_key_needs_no_restart(sync):
    res = explore(sync=sync, check="after", restart=False, writes=2, reads=1)
    assert res["finished"] and res["violations"] == 0


# Each case finishes in about 2 s without the reduction. A stale read needs two reads (one caches the
# old data, the other hits it), so every violating case has a 1w2r bound; the reclaim cases run the
# atomic variant, the only one that leaves an idle page for the daemon to free.
@pytest.mark.parametrize("kwargs, violating", [
    pytest.param(dict(sync="page", check="entry", writes=1, reads=2), True, id="entry-1w2r"),
    pytest.param(dict(sync="page", check="miss", writes=1, reads=2), False, id="miss-1w2r"),
    pytest.param(dict(sync="page", check="miss", restart=False, writes=1, reads=2), True, id="miss-no-restart-1w2r"),
    pytest.param(dict(sync="page", check="miss", restart=False, writes=2, reads=1), True, id="miss-no-restart-2w1r"),
    pytest.param(dict(sync="page", check="after", writes=2, reads=1), False, id="after-2w1r"),
    pytest.param(dict(sync="atomic", check="miss", restart=False, reclaims=1, writes=1, reads=2), True,
                 id="reclaim-miss-no-restart-1w2r"),
    pytest.param(dict(sync="atomic", check="after", reclaims=1, writes=1, reads=2, max_restarts=0), False,
                 id="reclaim-after-1w2r-cut"),
])
def test_reduction_keeps_each_kind_of_verdict_of_every_interleaving(kwargs, violating):
    full = explore(reduce=False, **kwargs)
    reduced = explore(**kwargs)
    assert full["finished"] and reduced["finished"]
    for key in ("violations", "stale_read_schedules", "stale_cache_schedules", "restart_capped_schedules",
                "reclaimed_schedules"):
        assert (full[key] > 0) == (reduced[key] > 0), key
    assert (full["violations"] > 0) == (full["stale_cache_schedules"] > 0) == violating
    assert (full["stale_read_schedules"] > 0) == (violating and kwargs["reads"] >= 2)
    assert (reduced["counterexample"] is not None) == violating
    if kwargs.get("reclaims"):
        assert reduced["reclaimed_schedules"] > 0
    assert reduced["schedules"] < full["schedules"] / 10


def test_schedule_count_without_restart_or_reduction_is_the_multinomial():
    # no read can hit (nothing is cached before it) and nothing restarts: 4 steps per write, 5 per
    # tracked read (lookup, check key, check, backing, insert), 4 per untracked read.
    assert explore(sync="page", restart=False, reduce=False, writes=2, reads=1)["schedules"] == 90090  # 13!/(4!4!5!)
    assert explore(sync="none", restart=False, reduce=False, writes=2, reads=1)["schedules"] == 34650  # 12!/(4!4!4!)


def test_a_read_restarted_beyond_the_bound_is_cut_and_counted():
    res = explore(sync="page", check="after", writes=1, reads=2, max_restarts=0)
    assert res["restart_capped_schedules"] > 0 and res["finished"]
    assert explore(sync="page", check="after", writes=1, reads=2, max_restarts=4)["restart_capped_schedules"] == 0


def test_output_states_what_the_explorer_checks():
    res = explore(sync="page", writes=1, reads=1)
    assert "sequential consistency" in res["semantics"] and "atomic" in res["semantics"]


@pytest.mark.parametrize("sync", SYNCS)
def test_untracked_allocation_failure_reopens_the_race(sync):
    res = explore(sync=sync, alloc_failure="untracked", fault_at=1, writes=2, reads=1)
    assert res["violations"] > 0 and res["faults_injected"] > 0 and res["untracked_schedules"] > 0
    assert any("UNTRACKED" in s for s in res["counterexample"])


def test_stolen_increment_shows_as_an_underflow_in_the_counterexample():
    res = explore(sync="page", alloc_failure="untracked", fault_at=2, writes=2, reads=1)
    assert res["violations"] > 0 and res["underflow_schedules"] > 0


@pytest.mark.parametrize("policy", ["hijack", "pool", "mempool"])
@pytest.mark.parametrize("fault_at", [1, 2])
@pytest.mark.parametrize("sync", SYNCS)
def test_hijack_pool_and_mempool_stay_closed_under_allocation_failure(sync, policy, fault_at):
    res = explore(sync=sync, alloc_failure=policy, fault_at=fault_at, writes=2, reads=1)
    assert res["finished"] and res["violations"] == 0


def test_the_explorers_default_policy_is_mempool_with_one_reserve_page_and_never_waits_on_one_failure():
    res = explore(sync="page", fault_at=1, writes=2, reads=1)
    assert (res["config"]["alloc_failure"], res["config"]["pool_pages"]) == ("mempool", 1)
    # the failed attempt takes the reserve's page: no start waits, the same schedules as with hijack
    assert res["finished"] and res["violations"] == 0 and res["blocked_schedules"] == 0
    assert res["schedules"] == explore(sync="page", alloc_failure="hijack", fault_at=1, writes=2, reads=1)["schedules"]


@pytest.mark.parametrize("sync", SYNCS)
def test_a_mempool_start_without_a_reserve_takes_its_second_attempt_as_a_step_and_stays_closed(sync):
    """No reserve: the first write's start fails its first attempt (WOULD_BLOCK, a page wait) and gets the page
    at its next step, mempool_alloc's second attempt; every schedule has that blocked step, none a violation."""
    res = explore(sync=sync, alloc_failure="mempool", pool_pages=0, fault_at=1, writes=2, reads=1)
    assert res["finished"] and res["violations"] == 0
    assert res["blocked_schedules"] == res["schedules"] > 0
    res2 = explore(sync=sync, alloc_failure="mempool", pool_pages=0, fault_at=1, writes=1, reads=1)
    assert res2["schedules"] > explore(sync=sync, alloc_failure="mempool", fault_at=1, writes=1, reads=1)["schedules"]


def test_max_schedules_stops_early():
    res = explore(sync="page", writes=2, reads=1, max_schedules=1000, reduce=False)
    assert res["schedules"] <= 1000 and not res["finished"]


def test_multi_block_operations():
    res = explore(sync="page", writes=1, reads=2, write_blocks=2, read_blocks=2)
    assert res["finished"] and res["violations"] == 0


@pytest.mark.parametrize("kwargs, exc, word", [
    ({"writes": 9}, ValueError, "writes"),
    ({"writes": 0, "reads": 0}, ValueError, "writes \\+ reads"),
    ({"writes": 5, "reads": 4}, ValueError, "writes \\+ reads"),
    ({"writes": 4, "reads": 3, "reclaims": 2}, ValueError, "reclaims"),
    ({"reclaims": 5}, ValueError, "reclaims"),
    ({"restart": 1}, TypeError, "restart"),
    ({"granularity": "block"}, ValueError, "granularity"),
    ({"max_restarts": 17}, ValueError, "max_restarts"),
    ({"counter_bits": 8}, ValueError, "counter_bits"),
    ({"overflow": "grow"}, ValueError, "overflow"),
    ({"preload": 65536}, ValueError, "preload"),
    ({"reduce": "yes"}, TypeError, "reduce"),
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


def test_cli_table_prints_the_step_list_and_what_it_checks():
    p = cli("explore", "--check", "before", "--bounds", "1w1r")
    assert p.returncode == 0 and "first counterexample" in p.stdout and " 1. " in p.stdout
    assert "check=entry" in p.stdout and "sequential consistency" in p.stdout


def test_cli_no_restart_makes_the_miss_placement_fail():
    p = cli("explore", "--check", "miss", "--no-restart", "--json")
    out = json.loads(p.stdout)
    assert p.returncode == 0 and out["violations"] > 0 and out["counterexample"]
    p = cli("explore", "--check", "miss", "--json")
    assert json.loads(p.stdout)["violations"] == 0


@pytest.mark.parametrize("args", [
    ["--bounds", "3x"], ["--bounds", "5w5r"], ["--bounds", ","], ["--fault-at", "-1"], ["--fault-at", "one"],
    ["--sync", "locks"], ["--check", "sometimes"], ["--max-schedules", "1e3"], ["--max-restarts", "99"],
    ["--granularity", "block"], ["--overflow", "grow"], ["--counter-bits", "8"], ["--preload", "-1"],
    ["--reclaims", "5"], ["--bounds", "4w3r", "--reclaims", "2"], ["--preload", "70000"],
])
def test_cli_hostile_arguments_exit_2_with_one_line(args):
    p = cli("explore", *args)
    assert p.returncode == 2 and p.stdout == ""
    assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr


# -- overflow, reclaim and per-lock-hold tracker steps ---------------------------------------------------

U16_MAX = 65535


@pytest.mark.parametrize("sync", SYNCS)
def test_overflow_wait_holds_a_start_back_and_stays_closed(sync):
    # 65,534 other writes in flight: W1 fills the 16-bit counter, W2's start is not scheduled until an end
    res = explore(sync=sync, counter_bits=16, overflow="wait", preload=U16_MAX - 1, writes=2, reads=1)
    assert res["finished"] and res["blocked_schedules"] > 0 and res["stuck_schedules"] == 0
    assert res["violations"] == 0 and res["wrap_schedules"] == 0


@pytest.mark.parametrize("sync", SYNCS)
def test_overflow_wrap_loses_the_count_and_the_oracle_catches_it(sync):
    res = explore(sync=sync, counter_bits=16, overflow="wrap", preload=U16_MAX, writes=1, reads=1)
    assert res["wrap_schedules"] > 0 and res["violations"] > 0
    steps = res["counterexample"]
    assert any("WRAPPED to 0" in s for s in steps) and any("STALE" in s for s in steps)


@pytest.mark.parametrize("sync", SYNCS)
def test_a_lowered_counter_maximum_shows_each_overflow_policy_in_two_writes(sync):
    # counter_max=1: the second write's start finds the counter full, without 65,534 preloaded starts.
    wait = explore(sync=sync, counter_max=1, overflow="wait", writes=2, reads=1)
    assert wait["finished"] and wait["blocked_schedules"] > 0 and wait["violations"] == 0
    wrap = explore(sync=sync, counter_max=1, overflow="wrap", writes=2, reads=1)
    assert wrap["wrap_schedules"] > 0 and wrap["violations"] > 0
    assert any("WRAPPED to 0" in s for s in wrap["counterexample"])
    # clamping drops the second increment: the first end empties the counter while a write is in flight
    clamp = explore(sync=sync, counter_max=1, overflow="clamp", writes=2, reads=1)
    assert clamp["violations"] > 0 and any("STALE" in s for s in clamp["counterexample"])
    assert wait["config"]["counter_max"] == wrap["config"]["counter_max"] == 1


def test_a_counter_maximum_above_the_width_is_refused():
    with pytest.raises(ValueError, match="counter_max"):
        explore(sync="page", counter_bits=16, counter_max=1 << 16)
    with pytest.raises(ValueError, match="preload"):
        explore(sync="page", counter_max=2, preload=3)


def test_a_full_counter_with_no_end_to_come_is_stuck_and_still_judged_on_its_returned_reads():
    # W1 can never start: every schedule is stuck after R1 returns; R1 is judged, the end state is not
    res = explore(sync="page", counter_bits=16, overflow="wait", preload=U16_MAX, writes=1, reads=1)
    assert res["finished"] and res["schedules"] == res["stuck_schedules"] > 0
    assert res["violations"] == res["partial_violation_schedules"] == 0


def test_a_stale_read_in_a_schedule_cut_at_the_restart_bound_is_a_violation():
    # With one write a stale read needs a read that caches the old data and another that hits it, so a
    # third read is the one whose restart cuts the schedule; the two that returned are still judged.
    res = explore(sync="none", check="entry", writes=1, reads=3, max_restarts=0)
    assert res["finished"] and res["restart_capped_schedules"] > 0
    assert 0 < res["partial_violation_schedules"] <= res["stale_read_schedules"] <= res["violations"]
    assert res["schedules"] > res["restart_capped_schedules"]
    # with two reads no schedule cut at a restart can hold a stale read
    two = explore(sync="none", check="entry", writes=1, reads=2, max_restarts=0)
    assert two["restart_capped_schedules"] > 0 and two["partial_violation_schedules"] == 0


def test_cli_says_that_cut_and_stuck_schedules_are_judged_on_their_returned_reads():
    p = cli("explore", "--sync", "none", "--check", "entry", "--bounds", "1w3r", "--max-restarts", "0")
    assert p.returncode == 0, p.stderr
    line = next(x for x in p.stdout.splitlines() if "cut at max restarts and" in x)
    assert "judged on the reads that returned" in line and "violation(s) among them" in line
    p = cli("explore", "--sync", "page", "--check", "after", "--bounds", "1w1r", "--json")
    assert "partial_violation_schedules" in json.loads(p.stdout)["runs"][0]


@pytest.mark.parametrize("sync", SYNCS)
def test_reclaim_interleaved_anywhere_keeps_the_race_closed(sync):
    res = explore(sync=sync, reclaims=1, writes=2, reads=1)
    assert res["finished"] and res["violations"] == 0
    # the lock variants free a page eagerly when its last counter drops, so only atomic leaves one to reclaim
    assert (res["reclaimed_schedules"] > 0) == (sync == "atomic")


def test_multi_chunk_calls_are_one_step_per_lock_hold():
    # two 4 KiB chunks on one tracking page: the lock variants count both under one page lock hold,
    # the atomic variant one chunk at a time, so it has more interleavings (and both stay closed)
    kw = dict(writes=1, reads=2, write_blocks=2, read_blocks=2, chunk_size=4096)
    locked, atomic = explore(sync="page", **kw), explore(sync="atomic", **kw)
    assert locked["violations"] == atomic["violations"] == 0
    assert atomic["schedules"] > locked["schedules"]
    assert explore(sync="global", **kw)["schedules"] == locked["schedules"]
