"""The native race stress: the unpatched model serves stale data, every tracking variant does not."""
from __future__ import annotations

import json

import pytest

from helpers.clirun import run_pybcache

from pybcache import race

pytestmark = [pytest.mark.native, pytest.mark.e2e]

KEYS = {"stale_reads", "stale_cached_blocks", "reads", "writes", "read_bypasses", "cache_inserts",
        "miss_collisions"}


def test_unpatched_model_runs_without_tracking():
    # Whether the native race hits the window in a given time is a matter of timing, so the stale read
    # itself is asserted on the deterministic explorer (tests/test_explore.py); here: the model ran
    # unpatched - no read consulted a tracker or bypassed.
    res = race(sync="none", seconds=0.3, write_delay_ns=50_000)
    assert res["reads"] > 0 and res["writes"] > 0
    assert res["read_bypasses"] == 0 and res["tracker_checks"] == 0
    assert res["config"]["sync"] == "none"
    assert KEYS <= res.keys()


@pytest.mark.parametrize("sync", ["global", "page", "atomic"])
def test_tracking_variants_serve_no_stale_data_under_native_threads(sync):
    # That a read overlapping an active write bypasses is shown step by step (tests/test_cachedev.py) and
    # by the explorer; how many reads happen to overlap a write here depends on scheduling, so it is not
    # asserted. What must hold whatever the interleaving: no stale read, no stale block at quiescence.
    res = race(sync=sync, seconds=0.05, min_ops=200_000)   # an operation count, not a time: any machine
    assert res["reads"] > 0 and res["writes"] > 0
    assert res["stale_reads"] == 0 and res["stale_cached_blocks"] == 0


@pytest.mark.parametrize("check", ["entry", "before"])
def test_check_at_entry_reaches_the_model_every_read_checks_once(check):
    # The stale read this placement allows needs a write to start inside a window of a few
    # instructions; that is shown deterministically by the explorer (tests/test_explore.py). What is
    # deterministic here: the race ran with the check at request entry - every read, hit or miss,
    # consulted the tracker exactly once, before its lookup.
    res = race(sync="page", check=check, seconds=0.05, min_ops=50_000)
    assert res["config"]["check"] == "entry"
    assert res["reads"] > 0 and res["tracker_checks"] == res["reads"]
    assert res["read_hits"] > 0  # hits checked too: the check is not in the miss path


def test_check_after_the_check_key_reaches_the_model_only_final_misses_check():
    res = race(sync="page", check="after", seconds=0.05, min_ops=50_000)
    assert res["config"]["check"] == "after"
    misses = res["reads"] - res["read_hits"]
    assert misses > 0 and res["tracker_checks"] == misses
    assert res["stale_reads"] == 0 and res["stale_cached_blocks"] == 0


def test_check_in_the_miss_path_reaches_the_model_and_restarts_repeat_it():
    res = race(sync="page", check="miss", seconds=0.05, min_ops=50_000)
    assert res["config"]["check"] == "miss" and res["config"]["restart"] is True
    misses = res["reads"] - res["read_hits"]
    assert misses <= res["tracker_checks"] <= misses + res["check_key_restarts"]
    assert res["stale_reads"] == 0 and res["stale_cached_blocks"] == 0


def test_no_restart_and_page_granularity_reach_the_model():
    res = race(sync="page", check="miss", restart=False, granularity="page", seconds=0.2)
    assert res["config"]["restart"] is False and res["config"]["granularity"] == "page"
    assert res["check_key_restarts"] == 0


def test_untracked_policy_with_injected_faults_leaves_native_writes_untracked():
    # That an untracked write reopens the race (a stale read) is shown deterministically by the explorer
    # (tests/test_explore.py, alloc_failure="untracked" with fault_at); a native run only shows the
    # faults reaching the writes, which does not depend on timing.
    res = race(sync="page", alloc_failure="untracked", fault_probability=0.5, seconds=0.05, min_ops=20_000,
               write_delay_ns=50_000)
    assert res["untracked_writes"] > 0 and res["faults_injected"] > 0


@pytest.mark.parametrize("policy, pool_pages", [("hijack", None), ("pool", None), ("mempool", None), ("mempool", 0)])
def test_hijack_pool_and_mempool_keep_the_race_closed_under_injected_faults(policy, pool_pages):
    res = race(sync="page", alloc_failure=policy, pool_pages=pool_pages, fault_probability=0.5, seconds=0.6)
    assert res["faults_injected"] > 0 and res["untracked_writes"] == 0
    assert res["stale_reads"] == 0 and res["stale_cached_blocks"] == 0
    if policy == "mempool":
        assert res["hijack_events"] == 0


def test_the_race_default_policy_is_mempool_with_one_reserve_page():
    res = race(sync="page", fault_probability=0.5, seconds=0.2)
    assert (res["config"]["alloc_failure"], res["config"]["pool_pages"]) == ("mempool", 1)
    assert res["faults_injected"] > 0 and res["hijack_events"] == 0 and res["untracked_writes"] == 0
    assert res["stale_reads"] == 0


def test_more_threads_and_min_ops():
    res = race(sync="atomic", threads=4, writers=2, seconds=0.2, min_ops=200_000, reclaim_every=16)
    assert res["ops"] >= 200_000 and res["stale_reads"] == 0
    assert res["config"]["writers"] == 2


@pytest.mark.parametrize("kwargs, exc, word", [
    ({"sync": "nope"}, ValueError, "sync"),
    ({"threads": 1}, ValueError, "threads"),
    ({"threads": 2, "writers": 2}, ValueError, "writers"),
    ({"seconds": 0}, ValueError, "seconds"),
    ({"seconds": "1"}, TypeError, "seconds"),
    ({"fault_probability": 1.5}, ValueError, "fault_probability"),
    ({"region_blocks": 8, "max_write_blocks": 9}, ValueError, "max_write_blocks"),
    ({"chunk_size": 1000}, ValueError, "chunk_size"),
    ({"progress": 3}, TypeError, "progress"),
    ({"check": "during"}, ValueError, "check"),
    ({"restart": "no"}, TypeError, "restart"),
    ({"granularity": "block"}, ValueError, "granularity"),
])
def test_bad_arguments_name_the_argument(kwargs, exc, word):
    kwargs.setdefault("seconds", 0.05)
    with pytest.raises(exc, match=word):
        race(**kwargs)


def cli(*args):
    return run_pybcache(*args, timeout=60)


def test_cli_json_has_the_design_keys():
    p = cli("race", "--sync", "page", "--seconds", "0.3", "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert KEYS <= out.keys() and out["stale_reads"] == 0


def test_cli_table_for_people():
    p = cli("race", "--sync", "none", "--seconds", "0.3")
    assert p.returncode == 0 and "stale_reads" in p.stdout


def test_cli_check_miss_without_restart_reaches_the_model():
    p = cli("race", "--check", "miss", "--no-restart", "--seconds", "0.2", "--json")
    out = json.loads(p.stdout)
    assert p.returncode == 0 and out["config"]["check"] == "miss" and out["config"]["restart"] is False


@pytest.mark.parametrize("args", [
    ["--sync", "bogus"], ["--threads", "1"], ["--threads", "x"], ["--seconds", "-1"], ["--seconds", "nan"],
    ["--fault-probability", "2"], ["--writers", "5"], ["--chunk-size", "3K"], ["--chunk-size", "lots"],
    ["--seed", "-4"], ["--alloc-failure", "retry"], ["--region-blocks", "0"], ["--check", "sometimes"],
    ["--granularity", "block"],
])
def test_cli_hostile_arguments_exit_2_with_one_line(args):
    p = cli("race", *args)
    assert p.returncode == 2
    assert p.stdout == ""
    assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr


def test_a_writer_blocked_past_wait_timeout_stops_the_race_naming_the_chunk():
    # Chunk 0's u16 counter held at its maximum by 65,535 writes this test started and has not ended:
    # every race write lands on block 0, waits past wait_timeout, and the run stops with nothing of its
    # own left counted; the held writes then finish and the device is quiescent and clean.
    from pybcache import CachedDevice
    from pybcache.bcache._cachedev import _race_slice
    B = 4096
    dev = CachedDevice(4 * B, sync="page", chunk_size=B, counter_bits=16, overflow="wait", write_delay_ns=0)
    held = [dev.begin_write(0, B) for _ in range(65535)]
    for w in held:
        w.step()  # start: counted, not yet invalidated, landed or ended
    assert dev.tracker_counts()[0] == 65535
    with pytest.raises(TimeoutError, match=r"chunk 0 \(bytes \[0, 4096\)\)"):
        _race_slice(dev, threads=2, writers=1, ops=1000, seconds=0.0, region_blk=0, region_blocks=1,
                    max_write_blocks=1, read_blocks=1, reclaim_every=0, seed=1, wait_timeout=0.2)
    assert dev.tracker_counts()[0] == 65535, "the abandoned start's increment was not undone"
    for w in held:
        w.run()
    ts = dev.tracker_stats()
    assert not dev.tracker_counts().any() and ts["starts"] == ts["ends"] and ts["underflows"] == 0
    assert dev.stale_cached_blocks() == 0 and dev.stats()["stale_reads"] == 0


def test_cli_reports_a_timed_out_run_in_one_line_and_exits_1(monkeypatch, capsys):
    import pybcache.bcache.cachedev as cachedev
    from pybcache.commands import main

    def timed_out(**kwargs):
        raise TimeoutError("a bypass write's start waited 10 s (wait_timeout=10) for chunk 0 (bytes [...])")
    monkeypatch.setattr(cachedev, "race", timed_out)
    assert main(["race", "--seconds", "0.1"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("pybcache race: ") and "chunk 0" in err and len(err.strip().splitlines()) == 1


def _one_window_slice(dev, *, seed, **kw):
    """Stands in for the native slice with one fixed interleaving on the device ``race`` built: a read takes
    its first step, a write on the same block invalidates the cache, the read runs up to its insertion, the
    write lands, the read inserts, and a second read hits. The read's placement decides the outcome."""
    before = dev.stats()
    r = dev.begin_read(0, dev.block_size)
    r.step()
    w = dev.begin_write(0, dev.block_size)
    w.step(), w.step()                  # start + invalidate
    while not r.done and r.next_step != "insert":
        r.step()
    w.run()                             # land + end
    r.run()
    dev.read(0, dev.block_size)         # a hit on what the first read cached, if it did
    part = {k: v - before[k] for k, v in dev.stats().items()}
    part.update(ops=part["reads"] + part["writes"], elapsed_ns=1000, reclaimed=0)
    return part


@pytest.mark.parametrize("check, stale", [("entry", 1), ("before", 1), ("miss", 0), ("after", 0)])
def test_race_runs_the_placement_it_is_asked_for_and_entry_serves_stale_data(monkeypatch, check, stale):
    # The same interleaving under each placement: a check at request entry runs before the write starts and
    # lets old data into the cache (one stale block, then one stale hit); the check in the miss path (saved by
    # the check key's restart) and after the check key both see the write and bypass. A race that ran "after"
    # whatever was asked would report no stale data for "entry".
    import pybcache.bcache.cachedev as cachedev
    monkeypatch.setattr(cachedev, "_race_slice", _one_window_slice)
    res = race(sync="page", check=check, seconds=0.01)
    assert res["stale_cached_blocks"] == stale and res["stale_reads"] == stale
    assert res["read_bypasses"] == 1 - stale
