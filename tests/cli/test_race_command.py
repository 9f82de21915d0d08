"""``pybcache race`` (``pybcache/commands/race.py``). The experiment it starts is stood in for (no subprocess, no C
model): these tests state what the command hands on, prints, writes as JSON and returns for given arguments and
results."""
from __future__ import annotations

import json

import pytest

from pybcache import commands
from pybcache.commands import race
from pybcache._console import format_table

from helpers.command_stand_ins import _args, _patch, _recording_progress, _without_progress


def _race_result(stale_reads=0, stale_cached=0, **cfg):
    config = dict(check="after", restart=True, granularity="chunk", alloc_failure="hijack",
                  fault_probability=0.0, threads=4, writers=2, write_delay_ns=1500)
    config.update(cfg)
    return {"config": config, "seconds": 1.234, "stale_reads": stale_reads, "stale_cached_blocks": stale_cached,
            "reads": 12345, "writes": 2345, "read_bypasses": 3, "cache_inserts": 4000, "miss_collisions": 5,
            "ops": 14690, "ops_per_s": 11904.4, "stale_reads_per_s": 0.25, "untracked_writes": 6, "underflows": 7,
            "faults_injected": 8, "tracker_checks": 9000, "check_key_restarts": 10,
            "kernel_reports": {"lockdep": 2, "kasan": 1}}


def _fake_race(monkeypatch, result=None, exc=None):
    import pybcache.bcache.cachedev
    calls = []

    def fake(**kw):
        calls.append(kw)
        kw["progress"](range(3), 3)
        if exc is not None:
            raise exc
        return result if result is not None else _race_result()
    monkeypatch.setattr(pybcache.bcache.cachedev, "race", fake)
    return calls


def test_race_hands_the_lab_defaults_to_the_stress(monkeypatch):
    calls = _fake_race(monkeypatch)
    assert race.run(_args("race")) == 0
    assert _without_progress(calls[0]) == dict(
        sync="page", check="after", restart=True, granularity="chunk", fault_probability=0.0, threads=2,
        writers=None, seconds=3.0, min_ops=0, seed=0, write_delay_ns=20_000, region_blocks=64, max_write_blocks=4,
        alloc_failure="mempool", chunk_size=4096, reclaim_every=0)


def test_race_hands_every_option_given_to_the_stress_in_its_units(monkeypatch):
    calls = _fake_race(monkeypatch)
    assert race.run(_args("race", "--sync", "atomic", "--check", "entry", "--no-restart", "--granularity", "page",
                          "--fault-probability", "0.5", "--threads", "8", "--writers", "7", "--seconds", "0.25",
                          "--min-ops", "100", "--seed", "7", "--write-delay-us", "1.5", "--region-blocks", "3",
                          "--chunk-size", "512", "--reclaim-every", "5", "--alloc-failure", "pool")) == 0
    assert _without_progress(calls[0]) == dict(
        sync="atomic", check="entry", restart=False, granularity="page", fault_probability=0.5, threads=8,
        writers=7, seconds=0.25, min_ops=100, seed=7, write_delay_ns=1500, region_blocks=3, max_write_blocks=3,
        alloc_failure="pool", chunk_size=512, reclaim_every=5)


@pytest.mark.parametrize("argv, message", [
    (["--chunk-size", "256"], "--chunk-size: must be a power of two >= 512, got '256'"),
    (["--chunk-size", "1536"], "--chunk-size: must be a power of two >= 512, got '1536'"),
    (["--chunk-size", "4Q"], "--chunk-size: '4Q' is not a size (use e.g. 512, 4K, 32M, 10G, 1T)"),
    (["--threads", "4", "--writers", "4"], "--writers: must be in [1, 3] (threads - 1), got 4"),
    (["--hung-timeout", "2"], "--hung-timeout: applies to a patch (--sync PATCH.c), not to the lab's trackers"),
])
def test_race_refuses_bad_lab_arguments_by_name_before_running(monkeypatch, argv, message):
    calls = _fake_race(monkeypatch)
    with pytest.raises(commands.UsageError) as err:
        race.run(_args("race", *argv))
    assert str(err.value) == message and calls == []


@pytest.mark.parametrize("option", [["--alloc-failure", "hijack"], ["--chunk-size", "4K"], ["--granularity", "page"],
                                    ["--reclaim-every", "1"]])
def test_race_with_a_patch_refuses_each_lab_only_option_by_name(monkeypatch, option):
    _patch(monkeypatch, race)
    calls = _fake_race(monkeypatch)
    with pytest.raises(commands.UsageError) as err:
        race.run(_args("race", "--sync", "fix.c", *option))
    name = " ".join(option) if option[0] == "--granularity" else option[0]
    assert str(err.value) == f"{name}: applies to the lab's trackers, not to a patch (--sync is the patch 'v3')"
    assert calls == []


def test_race_with_a_patch_takes_chunk_granularity_and_the_reclaim_off_and_passes_its_hung_timeout(monkeypatch):
    patch = _patch(monkeypatch, race)
    calls = _fake_race(monkeypatch)
    assert race.run(_args("race", "--sync", "fix.c", "--granularity", "chunk", "--reclaim-every", "0")) == 0
    assert calls[0]["sync"] is patch and calls[0]["hung_timeout"] is None
    assert not {"alloc_failure", "chunk_size", "reclaim_every"} & set(calls[0])
    calls.clear()
    race.run(_args("race", "--sync", "fix.c", "--hung-timeout", "2.5", "--threads", "3", "--writers", "2"))
    assert (calls[0]["hung_timeout"], calls[0]["threads"], calls[0]["writers"]) == (2.5, 3, 2)


def _race_table(res):
    rows = [["stale_reads", f"{res['stale_reads']:,}"], ["stale_cached_blocks", f"{res['stale_cached_blocks']:,}"],
            ["reads", "12,345"], ["writes", "2,345"], ["read_bypasses", "3"], ["cache_inserts", "4,000"],
            ["miss_collisions", "5"], ["ops", "14,690"], ["ops/s", "11,904"], ["stale reads/s", "0.2"],
            ["untracked_writes", "6"], ["underflows", "7"], ["faults_injected", "8"], ["tracker_checks", "9,000"],
            ["check_key_restarts", "10"]]
    return format_table(["metric", "value"], rows)


@pytest.mark.parametrize("stale_reads, stale_cached, verdict", [(0, 0, "no stale data"),
                                                                 (1234, 0, "STALE DATA SERVED"),
                                                                 (0, 1, "STALE DATA SERVED")])
def test_race_prints_its_config_the_counters_and_whether_stale_data_was_served(monkeypatch, capsys, stale_reads,
                                                                              stale_cached, verdict):
    res = _race_result(stale_reads, stale_cached)
    _fake_race(monkeypatch, res)
    assert race.run(_args("race", "--sync", "global")) == 0
    assert capsys.readouterr().out == (
        "race: sync=global check=after restart=on granularity=chunk alloc_failure=hijack fault_probability=0.0 "
        "threads=4 (writers 2) write delay 1.5 us (each write lands and ends on its writer's completion thread), "
        "1.23 s\n" + _race_table(res) + "\n" + verdict + "\n")


def test_race_with_a_patch_prints_no_alloc_failure_and_its_kernel_reports(monkeypatch, capsys):
    _patch(monkeypatch, race)
    res = _race_result(restart=False, granularity="chunk", alloc_failure="hijack")
    _fake_race(monkeypatch, res)
    assert race.run(_args("race", "--sync", "fix.c")) == 0
    assert capsys.readouterr().out == (
        "race: sync=v3 (/p/fix.c) check=after restart=OFF granularity=chunk alloc_failure=- fault_probability=0.0 "
        "threads=4 (writers 2) write delay 1.5 us (each write lands and ends on its writer's completion thread), "
        "1.23 s\n" + _race_table(res) + "\nkernel reports: kasan x1, lockdep x2\nno stale data\n")


def test_race_json_is_the_result_with_the_tracker_named(monkeypatch, capsys):
    _patch(monkeypatch, race)
    _fake_race(monkeypatch)
    assert race.run(_args("race", "--sync", "fix.c", "--json")) == 0
    assert json.loads(capsys.readouterr().out) == dict(_race_result(), sync="v3 (/p/fix.c)", invalidate="at-submit")


@pytest.mark.parametrize("exc", [ValueError("threads: bad\nthing"), TypeError("seed: not an int")])
def test_race_turns_the_stresss_refusal_into_a_usage_error(monkeypatch, exc):
    _fake_race(monkeypatch, exc=exc)
    with pytest.raises(commands.UsageError) as err:
        race.run(_args("race"))
    assert str(err.value) == str(exc)


@pytest.mark.parametrize("exc", [TimeoutError("start waited 10 s"), RuntimeError("the patch hung in write_end")])
def test_a_hung_or_failed_race_is_one_line_on_stderr_and_status_1(monkeypatch, capsys, exc):
    _fake_race(monkeypatch, exc=exc)
    assert race.run(_args("race")) == 1
    out = capsys.readouterr()
    assert out.out == "" and out.err == f"pybcache race: {exc}\n"


@pytest.mark.parametrize("as_json", [False, True])
def test_race_names_its_bar_and_keeps_quiet_with_json(monkeypatch, capsys, as_json):
    seen = _recording_progress(monkeypatch, race)
    _fake_race(monkeypatch)   # reports range(3) of 3
    race.run(_args("race", *(["--json"] if as_json else [])))
    assert seen == [([0, 1, 2], 3, "race", as_json)]
