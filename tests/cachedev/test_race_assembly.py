"""What ``cachedev.race`` passes to the C model and how it assembles, checks and reports its slices.

The C model's entry points (``CachedDevice``, ``_race_slice``, ``_Explorer``, ``_FioBench``, a patch) are
replaced by recorders returning small results of the real shape, so each test checks exactly what is passed on
and the arithmetic of what comes back, with nothing timed and no thread started (the real runs: test_race.py)."""
from __future__ import annotations

import pytest

from pybcache.bcache import cachedev

from helpers.cachedev_stand_ins import _SLICE_KEYS, _with_patch, FakeDevice, FakePatch, FakePatchTracker


approx = pytest.approx


def test_race_runs_half_second_slices_the_last_one_short_with_a_seed_each(race_model):
    cachedev.race(seconds=1.2, seed=7, threads=5, writers=2, region_blocks=32, max_write_blocks=3, read_blocks=2,
                  reclaim_every=9)
    dev = FakeDevice.made[0]
    assert [kw["seconds"] for _, kw in race_model] == approx([0.5, 0.5, 0.2])
    assert [kw["seed"] for _, kw in race_model] == [7, 8, 9]
    assert all(d is dev for d, _ in race_model)
    assert race_model[0][1] == {"threads": 5, "writers": 2, "ops": 0, "seconds": 0.5, "region_blk": 0,
                                "region_blocks": 32, "max_write_blocks": 3, "read_blocks": 2, "reclaim_every": 9,
                                "seed": 7}


def test_race_keeps_running_whole_slices_until_min_ops(race_model):
    # slice k reports ops 11 * k: 11, 22, 33 -> 66 >= 60 after the third
    cachedev.race(seconds=0.5)
    assert [kw["seconds"] for _, kw in race_model] == [0.5]
    race_model.clear()
    out = cachedev.race(seconds=0.5, min_ops=60)
    assert [kw["seconds"] for _, kw in race_model] == [0.5, 0.5, 0.5]
    assert out["ops"] == 66
    race_model.clear()
    assert cachedev.race(seconds=0.5, min_ops=66)["ops"] == 66 and len(race_model) == 3
    race_model.clear()
    cachedev.race(seconds=0.5, min_ops=67)
    assert len(race_model) == 4


def test_race_adds_the_slices_up_and_divides_by_their_elapsed_time(race_model):
    out = cachedev.race(seconds=1.0)       # two slices: k = 1 and 2, 0.25 s each
    for i, key in enumerate(_SLICE_KEYS):
        assert out[key] == 3 * (i + 1), key
    assert out["seconds"] == 0.5
    assert out["ops_per_s"] == approx(out["ops"] / 0.5) and out["stale_reads_per_s"] == approx(3 * 6 / 0.5)
    assert out["stale_cached_blocks"] == 6
    assert (out["underflows"], out["alloc_failures"], out["hijack_events"], out["faults_injected"]) == (1, 2, 3, 4)
    assert (out["mempool_waits"], out["mempool_rounds"]) == (5, 6)
    assert out["kernel_reports"] == {}
    assert set(out) == {*_SLICE_KEYS, "stale_cached_blocks", "seconds", "ops_per_s", "stale_reads_per_s",
                        "underflows", "alloc_failures", "hijack_events", "mempool_waits", "mempool_rounds",
                        "faults_injected", "kernel_reports", "config"}


def test_race_reports_zero_rates_when_no_time_elapsed_and_zero_tracker_counts_without_a_tracker(monkeypatch,
                                                                                                 race_model):
    def fake_slice(dev, **kw):
        return {**{key: 1 for key in _SLICE_KEYS}, "elapsed_ns": 0}
    monkeypatch.setattr(cachedev, "_race_slice", fake_slice)
    monkeypatch.setattr(FakeDevice, "tracker_stats", lambda self: None)
    out = cachedev.race(seconds=0.1, sync="none")
    assert out["seconds"] == 0.0 and out["ops_per_s"] == 0.0 and out["stale_reads_per_s"] == 0.0
    assert (out["underflows"], out["alloc_failures"], out["hijack_events"], out["faults_injected"]) == (0, 0, 0, 0)


def test_race_builds_the_device_from_the_checked_arguments(race_model):
    out = cachedev.race(sync="global", check="before", restart=False, granularity="page", alloc_failure="pool",
                        region_blocks=16, block_size=1024, chunk_size=2048, write_delay_ns=5, delay="yield",
                        seconds=0.5, threads=4)
    dev = FakeDevice.made[0]
    assert dev.size == 16 * 1024
    assert dev.kw == {"sync": "global", "check": "entry", "restart": False, "granularity": "page",
                      "block_size": 1024, "region_blocks": 1, "write_delay_ns": 5, "delay": "yield",
                      "chunk_size": 2048, "alloc_failure": "pool", "pool_pages": 1, "fault": None}
    assert out["config"] == {"sync": "global", "patch": None, "check": "entry", "restart": False,
                             "granularity": "page", "alloc_failure": "pool", "fault_probability": 0.0,
                             "pool_pages": 1, "threads": 4, "writers": 2, "region_blocks": 16, "block_size": 1024,
                             "chunk_size": 2048, "max_write_blocks": 4, "read_blocks": 1, "write_delay_ns": 5,
                             "delay": "yield", "reclaim_every": 0, "seed": 0, "hung_timeout": None}


def test_race_defaults_are_the_documented_ones(race_model):
    out = cachedev.race()
    assert [kw["seconds"] for _, kw in race_model] == [0.5] * 4          # 2 s
    assert FakeDevice.made[0].size == 64 * 4096
    assert {k: out["config"][k] for k in ("sync", "check", "restart", "granularity", "alloc_failure", "threads",
                                          "writers", "region_blocks", "block_size", "chunk_size",
                                          "max_write_blocks", "read_blocks", "write_delay_ns", "delay",
                                          "reclaim_every", "seed", "pool_pages", "fault_probability")} == {
        "sync": "page", "check": "after", "restart": True, "granularity": "chunk", "alloc_failure": "mempool",
        "threads": 2, "writers": 1, "region_blocks": 64, "block_size": 4096, "chunk_size": 4096,
        "max_write_blocks": 4, "read_blocks": 1, "write_delay_ns": 20000, "delay": "spin", "reclaim_every": 0,
        "seed": 0, "pool_pages": 1, "fault_probability": 0.0}


def test_race_without_min_ops_stops_after_its_time_even_if_nothing_ran(monkeypatch, race_model):
    calls = []

    def fake_slice(dev, **kw):
        calls.append(kw)
        return {**{key: 0 for key in _SLICE_KEYS}, "elapsed_ns": 1}
    monkeypatch.setattr(cachedev, "_race_slice", fake_slice)
    assert cachedev.race(seconds=0.5)["ops"] == 0 and len(calls) == 1


def test_race_pool_pages_default_to_one_for_the_pool_and_mempool_only_and_writers_to_half_the_threads(race_model):
    assert cachedev.race(seconds=0.5, alloc_failure="untracked")["config"]["pool_pages"] == 0
    assert cachedev.race(seconds=0.5, alloc_failure="hijack")["config"]["pool_pages"] == 0
    assert cachedev.race(seconds=0.5, alloc_failure="mempool")["config"]["pool_pages"] == 1
    assert cachedev.race(seconds=0.5, alloc_failure="pool", pool_pages=0)["config"]["pool_pages"] == 0
    assert cachedev.race(seconds=0.5, pool_pages=5)["config"]["pool_pages"] == 5
    assert cachedev.race(seconds=0.5, threads=7)["config"]["writers"] == 3
    assert cachedev.race(seconds=0.5, threads=7, writers=6)["config"]["writers"] == 6
    with pytest.raises(ValueError, match="writers"):
        cachedev.race(seconds=0.5, threads=7, writers=7)


def test_race_injects_faults_only_with_a_probability_seeded_by_the_run(race_model):
    cachedev.race(seconds=0.5, fault_probability=0.25, seed=11)
    fault = FakeDevice.made[0].kw["fault"]
    assert (fault.probability, fault.seed) == (0.25, 11)
    assert FakeDevice.made[0].kw["alloc_failure"] == "mempool"


def test_race_shows_progress_over_the_planned_slices(race_model):
    totals = []

    def bar(items, total):
        totals.append(total)
        return items
    cachedev.race(seconds=1.01, progress=bar)
    assert totals == [3] and len(race_model) == 3


def test_race_with_a_patch_runs_it_with_its_hung_timeout_and_counts_its_reports(monkeypatch, race_model):
    patch = FakePatch([{"kind": "hung", "count": 1}, {"kind": "hung", "count": 2}])
    _with_patch(monkeypatch, patch)
    orig = FakeDevice.__init__

    def init(self, size, **kw):
        orig(self, size, **kw)
        self.tracker = FakePatchTracker(patch.reports)
    monkeypatch.setattr(FakeDevice, "__init__", init)
    out = cachedev.race(sync="PATCH", seconds=0.5, hung_timeout=3, region_blocks=8)
    dev = FakeDevice.made[0]
    assert dev.size == 8 * 4096
    # the device takes the patch's tracker, built with the hung bound, every end context but inline (a
    # completion thread is never the submitter) and the fault-injection mode
    (size, hung, tracker) = patch.trackers[0]
    assert (size, hung) == (8 * 4096, 3.0)
    assert tracker.kw == {"fault": None, "end_contexts": "all", "fail_alloc": "all"}
    assert dev.kw == {"tracker": tracker, "check": "after", "restart": True, "granularity": "chunk",
                      "block_size": 4096, "region_blocks": 1, "write_delay_ns": 20000, "delay": "spin"}
    assert out["kernel_reports"] == {"hung": 3}
    assert out["config"]["sync"] == "/p/fake.c" and out["config"]["patch"] == "fake (/p/fake.c)"
    assert out["config"]["hung_timeout"] == 3.0
    assert cachedev.race(sync="PATCH", seconds=0.5)["config"]["hung_timeout"] == 10.0
    cachedev.race(sync="PATCH", seconds=0.5, fault_probability=0.5, seed=2, fail_alloc="can-fail")
    fault = patch.trackers[-1][2].kw["fault"]
    assert (fault.probability, fault.seed) == (0.5, 2)
    assert patch.trackers[-1][2].kw["fail_alloc"] == "can-fail"
    with pytest.raises(ValueError, match="fail_alloc must be one of"):
        cachedev.race(sync="PATCH", seconds=0.5, fail_alloc="some")


def test_race_with_a_patch_refuses_the_lab_options_naming_them(monkeypatch, race_model):
    _with_patch(monkeypatch, FakePatch())
    for kw in ({"alloc_failure": "pool"}, {"pool_pages": 1}, {"granularity": "page"}, {"chunk_size": 8192}):
        with pytest.raises(ValueError, match=f"^sync='fake' \\(a patch\\) and {next(iter(kw))} are mutually"):
            cachedev.race(sync="PATCH", seconds=0.5, **kw)
    with pytest.raises(ValueError, match="^sync must be one of"):
        cachedev.race(sync="nope", seconds=0.5)
    with pytest.raises(ValueError, match="^hung_timeout applies to a patch"):
        cachedev.race(seconds=0.5, hung_timeout=1)
    assert race_model == []
