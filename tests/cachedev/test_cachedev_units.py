"""What ``race``, ``explore``, ``explore_prefixes`` and ``fio`` pass to the C model and how they assemble,
check and report its results, and how a counterexample step is printed (docs/cachedev.md), on inputs chosen here.

The C model's entry points (``CachedDevice``, ``_race_slice``, ``_Explorer``, ``_FioBench``, a patch) are
replaced by recorders returning small results of the real shape, so each test checks exactly what is passed on
and the arithmetic of what comes back, with nothing timed and no thread started.
"""
from __future__ import annotations

import math
import types

import pytest

from pybcache.bcache import cachedev
from pybcache.bcache.cachedev import render_step

approx = pytest.approx


# ---- the small helpers -------------------------------------------------------------------------------------

def test_report_counts_sums_the_counts_of_each_kind():
    reports = [{"kind": "hung", "count": 2}, {"kind": "bug", "count": "3"}, {"kind": "hung", "count": 5}]
    assert cachedev.report_counts(reports) == {"hung": 7, "bug": 3}
    assert cachedev.report_counts([]) == {}


def test_patch_label_is_the_name_and_the_path_in_parentheses():
    assert cachedev.patch_label(types.SimpleNamespace(name="v2", path="/x/v2.c")) == "v2 (/x/v2.c)"


def test_progress_passes_the_items_through_or_wraps_them_with_the_total():
    assert list(cachedev._progress(None, iter([1, 2]), 9)) == [1, 2]
    seen = []

    def bar(items, total):
        seen.append(total)
        return [x * 10 for x in items]
    assert list(cachedev._progress(bar, iter([1, 2]), 9)) == [10, 20] and seen == [9]
    with pytest.raises(TypeError) as info:
        list(cachedev._progress(3, [1], 1))
    assert str(info.value) == "progress must be a callable (iterable, total) -> iterable or None, got int"


def test_schedule_bound_counts_the_interleavings_of_whole_operations():
    # multinomial: (4w + s r)! / (4!^w s!^r)
    assert cachedev._schedule_bound(1, 1, 5) == math.factorial(9) // (24 * 120) == 126
    assert cachedev._schedule_bound(2, 1, 5) == math.factorial(13) // (24 * 24 * 120) == 90090
    assert cachedev._schedule_bound(2, 2, 4) == math.factorial(16) // 24 ** 4 == 63063000
    assert cachedev._schedule_bound(0, 3, 4) == math.factorial(12) // 24 ** 3 == 34650
    assert cachedev._schedule_bound(1, 0, 5) == 1 and cachedev._schedule_bound(0, 0, 5) == 1
    # exact integers, however large (a float would round them): 8 writes = 32! / 4!^8
    assert type(cachedev._schedule_bound(2, 1, 5)) is int
    assert cachedev._schedule_bound(8, 0, 5) == math.factorial(32) // 24 ** 8 == 2390461829733887910000000


def test_blocks_and_chunks_name_one_or_a_half_open_range():
    assert cachedev._blocks(3, 4) == "block 3"
    assert cachedev._blocks(3, 5) == "blocks [3, 5)"
    assert cachedev._chunks(0, 4096, 4096) == "chunk 0"
    assert cachedev._chunks(4096, 8192, 4096) == "chunk 1"
    assert cachedev._chunks(4095, 4097, 4096) == "chunks [0, 2)"
    assert cachedev._chunks(8192, 3 * 8192 + 1, 8192) == "chunks [1, 4)"


def test_entry_names_an_empty_slot_a_check_key_and_a_valid_version():
    assert cachedev._entry(0) == "empty"
    assert cachedev._entry((7 << 2) | 1) == "check key #7"
    assert cachedev._entry((1 << 38) | (5 << 2) | 1) == "check key #5"   # only 36 bits of key
    assert cachedev._entry((0xFFFFFFFFF << 2) | 1) == "check key #68719476735"
    assert cachedev._entry(9 << 2) == "valid v9"
    assert cachedev._entry((9 << 2) | 2) == "valid v9"
    assert cachedev._entry((9 << 2) | 3) == "valid v9"


def _rec(op="W1", step="start", flags=(), lo=0, hi=4096, version=1, count=1, seq_now=0, a=(), b=()):
    return {"op": op, "kind": "write", "step": step, "flags": list(flags), "lo": lo, "hi": hi,
            "version": version, "count": count, "seq_now": seq_now, "a": list(a), "b": list(b)}


def test_write_tracker_text_states_each_outcome_of_a_start():
    t = cachedev._write_tracker_text
    assert t(_rec(flags=["blocked"], count=65535), 4096) == (
        "tracker start stops at a full counter (65535): WAITS for an end; chunk 0 counted so far")
    assert t(_rec(flags=["untracked"], hi=8192), 4096) == (
        "tracker start on chunks [0, 2): page allocation failed, write left UNTRACKED")
    assert t(_rec(flags=["wrapped"], count=0), 4096) == "tracker start on chunk 0: counter WRAPPED to 0 (overflow)"
    assert t(_rec(flags=["clamped"], count=2), 4096) == (
        "tracker start on chunk 0: counter CLAMPED at 2 (increment dropped)")
    assert t(_rec(count=3), 4096) == "tracker start on chunk 0: counter 3"


# ---- render_step: every step kind as docs/cachedev.md shows it ---------------------------------------------

def _r(rec, check="after", granularity="chunk", chunk_size=4096, max_restarts=3, patch=False):
    return render_step(rec, check=check, granularity=granularity, chunk_size=chunk_size,
                       max_restarts=max_restarts, patch=patch)


def test_render_write_start_names_the_version_and_the_tracker_outcome():
    assert _r(_rec(version=2, count=1)) == "W1 start: version v2; tracker start on chunk 0: counter 1"
    assert _r(_rec(flags=["no_tracking"])) == "W1 start: version v1; no tracking (unpatched)"
    assert _r(_rec(flags=["more"], hi=8192, count=1)) == (
        "W1 start: version v1; tracker start on chunks [0, 2): counter 1; more tracker steps of this call follow")
    assert _r(_rec(flags=["untracked"])) == (
        "W1 start: version v1; tracker start on chunk 0: page allocation failed, write left UNTRACKED")


def test_render_invalidate_and_land_name_the_blocks():
    assert _r(_rec(step="invalidate", lo=0, hi=2)) == (
        "W1 invalidate: cache blocks [0, 2) emptied (check keys included); the node sequence moves")
    assert _r(_rec(step="land", version=3, lo=1, hi=2)) == "W1 land: v3 reaches the backing device (block 1)"


def test_render_write_end_states_the_counter_underflow_and_completion():
    assert _r(_rec(step="end", count=0)) == "W1 end: tracker end on chunk 0: counter 0; v1 completed"
    assert _r(_rec(step="end", flags=["underflow"])) == (
        "W1 end: tracker end on chunk 0: found a zero counter (UNDERFLOW refused); v1 completed")
    assert _r(_rec(step="end", flags=["more"], hi=8192, count=2)) == (
        "W1 end: tracker end on chunks [0, 2): counter 2; more tracker steps of this call follow")
    assert _r(_rec(step="end", flags=["no_tracking"], version=4)) == "W1 end: no tracking; v4 completed"


def test_render_check_states_the_placement_the_scope_and_the_verdict():
    rec = _rec(op="R1", step="check")
    assert _r(rec, check="entry") == "R1 tracker check at ENTRY (before the lookup): no active write"
    assert _r(rec, check="miss") == "R1 tracker check in the MISS path (before the check key): no active write"
    assert _r(_rec(op="R1", step="check", flags=["active"]), granularity="page") == (
        "R1 tracker check AFTER the check key (whole tracking page): "
        "an active write overlaps -> the read bypasses the cache")
    assert _r(_rec(op="R1", step="check", flags=["more"])) == (
        "R1 tracker check AFTER the check key: no active write; more tracker steps of this call follow")


def test_render_lookup_names_each_block_entry_and_the_outcome():
    assert _r(_rec(op="R1", step="lookup", lo=2, a=[0, 5 << 2], flags=["hit"])) == (
        "R1 lookup: block 2 empty, block 3 valid v5 -> hit")
    assert _r(_rec(op="R1", step="lookup", lo=0, a=[(4 << 2) | 1])) == "R1 lookup: block 0 check key #4 -> miss"
    assert _r(_rec(op="R1", step="lookup", lo=0, a=[0], flags=["active"])) == (
        "R1 lookup: block 0 empty -> already bypassing, no check key")


def test_render_check_key_states_the_sequence_and_the_restart():
    assert _r(_rec(op="R1", step="check_key", count=1)) == (
        "R1 check key: node sequence unchanged (1): check key placed on the missed blocks")
    assert _r(_rec(op="R1", step="check_key", flags=["restart"], count=1, seq_now=3, version=2)) == (
        "R1 check key: node sequence moved 1 -> 3 since the lookup: -EINTR, the lookup restarts (restart 2)")
    assert _r(_rec(op="R1", step="check_key", flags=["restart", "capped"], count=1, seq_now=3, version=4),
              max_restarts=4) == (
        "R1 check key: node sequence moved 1 -> 3 since the lookup: -EINTR, the lookup restarts (restart 4)"
        "; restart bound 4 reached, schedule cut")
    assert _r(_rec(op="R1", step="check_key", flags=["forced"], count=1, seq_now=2)) == (
        "R1 check key: node sequence moved 1 -> 2 since the lookup, but the restart is switched off: "
        "check key placed anyway")


def test_render_backing_read_lists_only_the_blocks_read():
    assert _r(_rec(op="R1", step="backing", lo=4, a=[1, 2, 3], b=[1, 0, 1])) == (
        "R1 backing read: block 4 = v1, block 6 = v3")


def test_render_insert_states_skipped_collision_or_cached():
    assert _r(_rec(op="R1", step="insert", flags=["active"])) == "R1 replace-insert skipped (bypass): nothing cached"
    assert _r(_rec(op="R1", step="insert", version=1, count=2)) == (
        "R1 replace-insert: check key gone on 1 block(s) -> miss collision; 2 block(s) cached")
    assert _r(_rec(op="R1", step="insert", version=0, count=3)) == (
        "R1 replace-insert: check key intact -> 3 block(s) cached")


def test_render_return_marks_each_version_older_than_its_floor_stale():
    assert _r(_rec(op="R1", step="return", a=[1, 2], b=[1, 2])) == "R1 returns v1, v2"
    assert _r(_rec(op="R1", step="return", a=[0, 2], b=[1, 2], flags=["stale"])) == (
        "R1 returns v0 (STALE), v2: STALE READ, a newer version had completed before R1 began")
    assert _r(_rec(op="R1", step="return", a=[2], b=[3])) == "R1 returns v2 (STALE)"


def test_render_reclaim_stale_block_and_stuck():
    assert _r(_rec(op="D1", step="reclaim", version=2)) == "D1 reclaim: 2 idle tracker page(s) freed"
    assert _r(_rec(op="", step="stale_block", lo=3, a=[0], b=[1])) == (
        "at quiescence: block 3 is cached as v0 but the backing device holds v1 "
        "(STALE CACHED BLOCK: later reads hit old data)")
    assert _r(_rec(op="", step="stuck")) == "every unfinished operation is blocked: the schedule is stuck"


def test_render_assumes_the_labs_tracker_unless_told_a_patch():
    assert render_step(_rec(count=2), check="after", granularity="chunk", chunk_size=4096, max_restarts=3) == (
        "W1 start: version v1; tracker start on chunk 0: counter 2")


def test_render_refuses_an_unknown_step_naming_it():
    with pytest.raises(ValueError) as info:
        _r(_rec(step="teleport"))
    assert str(info.value) == "unknown explorer step 'teleport'"


def test_render_a_patchs_steps_by_the_kernels_hooks_without_counters():
    assert _r(_rec(step="start", version=2, lo=0, hi=8192, count=9), patch=True) == (
        "W1 start: version v2; patch write_start on bytes [0, 8192): returned")
    assert _r(_rec(step="start", flags=["untracked"], lo=4096, hi=8192), patch=True) == (
        "W1 start: version v1; patch write_start on bytes [4096, 8192): an allocation failed during the call "
        "(the write may be UNTRACKED)")
    assert _r(_rec(step="end", version=3, lo=0, hi=4096), patch=True) == (
        "W1 end: patch write_end on bytes [0, 4096) (a completion); v3 completed")
    assert _r(_rec(op="R1", step="check"), check="entry", patch=True) == (
        "R1 patch read_bypass at ENTRY (before the lookup): no active write")
    assert _r(_rec(op="R1", step="check", flags=["active"]), patch=True) == (
        "R1 patch read_bypass AFTER the check key: an active write overlaps -> the read bypasses the cache")
    # the other steps are the model's own, printed as without a patch
    assert _r(_rec(step="land", version=3, lo=1, hi=2), patch=True) == (
        "W1 land: v3 reaches the backing device (block 1)")


def test_a_real_counterexample_is_rendered_step_by_step():
    out = cachedev.explore(writes=1, reads=1, check="entry", restart=False)
    assert out["counterexample"] == [_r(s, check="entry") for s in out["counterexample_steps"]]
    assert out["counterexample"][0] == "R1 tracker check at ENTRY (before the lookup): no active write"
    assert out["counterexample"][-1].startswith("at quiescence: block 0 is cached as v0")


# ---- race: what it passes to the model and how it adds the slices up ---------------------------------------

class FakeDevice:
    made: list = []

    def __init__(self, size, **kw):
        self.size, self.kw = size, kw
        self.sync, self.check = kw["sync"], kw["check"]
        self.restart, self.granularity = kw["restart"], kw["granularity"]
        self.tracker = object()
        self.stats = {"underflows": 1, "alloc_failures": 2, "hijack_events": 3, "faults_injected": 4}
        FakeDevice.made.append(self)

    def tracker_stats(self):
        return self.stats

    def stale_cached_blocks(self):
        return 6


_SLICE_KEYS = ("reads", "read_hits", "read_bypasses", "cache_inserts", "miss_collisions", "stale_reads", "writes",
               "untracked_writes", "tracker_checks", "check_key_restarts", "ops", "reclaimed")


@pytest.fixture
def race_model(monkeypatch):
    calls = []

    def fake_slice(dev, **kw):
        calls.append((dev, kw))
        k = len(calls)
        part = {key: k * (i + 1) for i, key in enumerate(_SLICE_KEYS)}
        part["elapsed_ns"] = 250_000_000
        return part
    FakeDevice.made = []
    monkeypatch.setattr(cachedev, "CachedDevice", FakeDevice)
    monkeypatch.setattr(cachedev, "_race_slice", fake_slice)
    return calls


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
    assert out["kernel_reports"] == {}
    assert set(out) == {*_SLICE_KEYS, "stale_cached_blocks", "seconds", "ops_per_s", "stale_reads_per_s",
                        "underflows", "alloc_failures", "hijack_events", "faults_injected", "kernel_reports",
                        "config"}


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
        "sync": "page", "check": "after", "restart": True, "granularity": "chunk", "alloc_failure": "hijack",
        "threads": 2, "writers": 1, "region_blocks": 64, "block_size": 4096, "chunk_size": 4096,
        "max_write_blocks": 4, "read_blocks": 1, "write_delay_ns": 20000, "delay": "spin", "reclaim_every": 0,
        "seed": 0, "pool_pages": 0, "fault_probability": 0.0}


def test_race_without_min_ops_stops_after_its_time_even_if_nothing_ran(monkeypatch, race_model):
    calls = []

    def fake_slice(dev, **kw):
        calls.append(kw)
        return {**{key: 0 for key in _SLICE_KEYS}, "elapsed_ns": 1}
    monkeypatch.setattr(cachedev, "_race_slice", fake_slice)
    assert cachedev.race(seconds=0.5)["ops"] == 0 and len(calls) == 1


def test_race_pool_pages_default_to_one_for_the_pool_only_and_writers_to_half_the_threads(race_model):
    assert cachedev.race(seconds=0.5, alloc_failure="untracked")["config"]["pool_pages"] == 0
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
    assert FakeDevice.made[0].kw["alloc_failure"] == "hijack"


def test_race_shows_progress_over_the_planned_slices(race_model):
    totals = []

    def bar(items, total):
        totals.append(total)
        return items
    cachedev.race(seconds=1.01, progress=bar)
    assert totals == [3] and len(race_model) == 3


class FakePatch:
    def __init__(self, reports=()):
        self.name, self.path, self._module = "fake", "/p/fake.c", object()
        self.reports = list(reports)
        self.trackers = []

    def tracker(self, size, hung_timeout):
        t = FakePatchTracker(self.reports)
        self.trackers.append((size, hung_timeout, t))
        return t


class FakePatchTracker:
    def __init__(self, reports):
        self.reports = reports

    def kernel_reports(self):
        return self.reports


def _with_patch(monkeypatch, patch):
    monkeypatch.setattr(cachedev, "_as_patch", lambda s: patch if s == "PATCH" else None)
    monkeypatch.setattr(cachedev, "PatchTracker", FakePatchTracker)


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
    assert dev.kw == {"sync": patch, "check": "after", "restart": True, "granularity": "chunk", "block_size": 4096,
                      "region_blocks": 1, "write_delay_ns": 20000, "delay": "spin", "fault": None,
                      "wait_timeout": 3.0}
    assert out["kernel_reports"] == {"hung": 3}
    assert out["config"]["sync"] == "/p/fake.c" and out["config"]["patch"] == "fake (/p/fake.c)"
    assert out["config"]["hung_timeout"] == 3.0
    assert cachedev.race(sync="PATCH", seconds=0.5)["config"]["hung_timeout"] == 10.0
    cachedev.race(sync="PATCH", seconds=0.5, fault_probability=0.5, seed=2)
    fault = FakeDevice.made[-1].kw["fault"]
    assert (fault.probability, fault.seed) == (0.5, 2)


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


def test_a_tiny_real_race_returns_the_documented_keys():
    out = cachedev.race(seconds=0.01, threads=2, region_blocks=8)
    assert out["ops"] == out["reads"] + out["writes"] > 0 and out["stale_reads"] == 0
    assert out["config"]["sync"] == "page" and out["kernel_reports"] == {}


# ---- explore: batches, progress, prefix and the assembled result -------------------------------------------

class FakeExplorer:
    made: list = []
    finish_after = 1
    steps = None

    def __init__(self, *args, **kw):
        self.args, self.kw, self.budgets, self.prefix = args, kw, [], None
        FakeExplorer.made.append(self)

    def set_prefix(self, b):
        self.prefix = b

    def run(self, budget):
        self.budgets.append(budget)
        return len(self.budgets) >= self.finish_after

    def result(self):
        return {"schedules": 5, "violations": 1, "finished": True, "steps": self.steps}

    def prefixes(self, depth, max_count):
        self.prefix_args = (depth, max_count)
        return self.got


@pytest.fixture
def explorer(monkeypatch):
    FakeExplorer.made = []
    monkeypatch.setattr(cachedev, "_Explorer", FakeExplorer)
    monkeypatch.setattr(FakeExplorer, "finish_after", 1)
    monkeypatch.setattr(FakeExplorer, "steps", None)
    return FakeExplorer


def test_explore_runs_batches_until_the_explorer_finishes(explorer):
    explorer.finish_after = 3
    out = cachedev.explore()
    ex = explorer.made[0]
    assert ex.budgets == [20000, 20000, 20000]
    assert out["counterexample"] is None and out["counterexample_steps"] is None
    assert out["schedules"] == 5 and out["semantics"] == cachedev.EXPLORER_SEMANTICS
    assert "steps" not in out and out["config"]["writes"] == 2


def test_explore_stops_at_max_schedules_with_the_last_batch_cut_to_fit(explorer):
    explorer.finish_after = 99
    cachedev.explore(max_schedules=45000)
    assert explorer.made[0].budgets == [20000, 20000, 5000]
    cachedev.explore(max_schedules=40000)
    assert explorer.made[1].budgets == [20000, 20000]
    cachedev.explore(max_schedules=7)
    assert explorer.made[2].budgets == [7]


def test_explore_progress_total_is_the_schedule_bound_in_batches(explorer):
    totals = []

    def bar(items, total):
        totals.append(total)
        return items
    cachedev.explore(writes=2, reads=2, progress=bar)               # 18! / (4!^2 5!^2) = 771,891,120 -> 38595
    cachedev.explore(writes=2, reads=2, sync="none", progress=bar)   # 16! / 4!^4 = 63,063,000 -> 3154
    cachedev.explore(writes=2, reads=2, max_schedules=50000, progress=bar)
    cachedev.explore(writes=1, reads=0, progress=bar)
    assert totals == [38595, 3154, 3, 1]
    explorer.finish_after = 3
    seen = []
    cachedev.explore(progress=lambda items, total: (seen.append(k) or k for k in items))
    assert seen == [0, 1, 2]


def test_explore_passes_the_prefix_as_bytes_checked_against_all_operations(explorer):
    cachedev.explore(writes=1, reads=1, reclaims=1, prefix=[2, 0, 1])
    assert explorer.made[0].prefix == bytes([2, 0, 1])
    with pytest.raises(ValueError, match=r"prefix\[0\]"):
        cachedev.explore(writes=1, reads=1, prefix=[2])
    cachedev.explore()
    assert explorer.made[-1].prefix is None


def test_explore_renders_each_counterexample_step_with_its_settings(explorer):
    explorer.steps = [_rec(op="R1", step="check"), _rec(step="end", lo=0, hi=16384, count=0),
                      _rec(op="R1", step="check_key", flags=["restart", "capped"], count=1, seq_now=2, version=2)]
    out = cachedev.explore(check="miss", granularity="page", chunk_size=8192, max_restarts=2)
    assert out["counterexample"] == [
        "R1 tracker check in the MISS path (before the check key) (whole tracking page): no active write",
        "W1 end: tracker end on chunks [0, 2): counter 0; v1 completed",
        "R1 check key: node sequence moved 1 -> 2 since the lookup: -EINTR, the lookup restarts (restart 2); "
        "restart bound 2 reached, schedule cut"]
    assert out["counterexample_steps"] is explorer.steps


def test_explore_renders_a_patchs_steps_as_the_patchs(monkeypatch, explorer):
    patch = FakePatch()
    _with_patch(monkeypatch, patch)
    explorer.steps = [_rec(step="start", lo=0, hi=4096)]
    out = cachedev.explore(sync="PATCH")
    assert out["counterexample"] == ["W1 start: version v1; patch write_start on bytes [0, 4096): returned"]
    assert explorer.made[0].kw == {"patch": patch._module, "hung_timeout": 10.0}
    assert explorer.made[0].args[0] == "page"


def test_explore_defaults_are_the_documented_ones_and_each_setting_reaches_the_config(monkeypatch, explorer):
    assert cachedev.explore()["config"] == {
        "sync": "page", "patch": None, "hung_timeout": None, "check": "after", "restart": True,
        "granularity": "chunk", "alloc_failure": "hijack", "fault_at": 0, "writes": 2, "reads": 1, "reclaims": 0,
        "write_blocks": 1, "read_blocks": 1, "chunk_size": 4096, "pool_pages": 1, "counter_bits": 16,
        "counter_max": 65535, "overflow": "wait", "preload": 0, "max_restarts": 3, "reduce": True,
        "max_schedules": 0}
    given = {"sync": "atomic", "check": "miss", "restart": False, "granularity": "page", "alloc_failure": "pool",
             "fault_at": 2, "writes": 1, "reads": 2, "reclaims": 1, "write_blocks": 3, "read_blocks": 2,
             "chunk_size": 8192, "pool_pages": 4, "counter_bits": 32, "counter_max": 9, "overflow": "clamp",
             "preload": 5, "max_restarts": 1, "reduce": False, "max_schedules": 10}
    assert cachedev.explore(**given)["config"] == {**given, "patch": None, "hung_timeout": None}
    _with_patch(monkeypatch, FakePatch())
    out = cachedev.explore(sync="PATCH", hung_timeout=2)
    assert out["config"]["hung_timeout"] == 2.0 and explorer.made[-1].kw["hung_timeout"] == 2.0


def test_explore_prefixes_lists_the_explorers_prefixes_as_tuples(explorer):
    explorer.got = [[0, 1], [1]]
    assert cachedev.explore_prefixes(2, writes=1, reads=1, max_count=9) == [(0, 1), (1,)]
    assert explorer.made[0].prefix_args == (2, 9)
    assert explorer.made[0].args[7:9] == (1, 1)          # writes, reads as given
    assert cachedev.explore_prefixes(3)
    assert explorer.made[1].prefix_args == (3, 1 << 16) and explorer.made[1].args[7:9] == (2, 1)
    explorer.got = None
    assert cachedev.explore_prefixes(1) is None


def test_explore_prefixes_refuses_an_unknown_argument_and_bad_bounds(explorer):
    with pytest.raises(TypeError) as info:
        cachedev.explore_prefixes(1, writes=1, zzz=1, aaa=2)
    assert str(info.value) == "explore_prefixes: unknown argument 'aaa'"
    for kw in ({"prefix": [0]}, {"progress": None}):
        with pytest.raises(TypeError, match="unknown argument"):
            cachedev.explore_prefixes(1, **kw)
    with pytest.raises(ValueError) as info:
        cachedev.explore_prefixes(1025)
    assert str(info.value) == "depth must be in [1, 1024], got 1025"
    with pytest.raises(ValueError) as info:
        cachedev.explore_prefixes(1, max_count=(1 << 24) + 1)
    assert str(info.value) == "max_count must be in [1, 16777216], got 16777217"
    assert explorer.made == []


def test_explore_config_defaults_are_explores_own():
    assert cachedev._EXPLORE_CONFIG["writes"] == 2 and cachedev._EXPLORE_CONFIG["sync"] == "page"
    assert "prefix" not in cachedev._EXPLORE_CONFIG and "progress" not in cachedev._EXPLORE_CONFIG


def test_real_explore_prefixes_cover_the_whole_search():
    prefixes = cachedev.explore_prefixes(2, writes=1, reads=1)
    assert prefixes == [(0, 0), (0, 1), (1, 1)]
    whole = cachedev.explore(writes=1, reads=1)
    assert sum(cachedev.explore(writes=1, reads=1, prefix=p)["schedules"] for p in prefixes) == whole["schedules"]


# ---- fio: rounds, rotation, rows ---------------------------------------------------------------------------

class FakeBench:
    made: list = []
    figures: dict = {}

    def __init__(self, size, variants, chunk_size, block, bounce, gran, free, **kw):
        self.init = (size, variants, chunk_size, block, bounce, gran, free, kw)
        self.variants = variants
        self.runs = []
        self.allocated = [10 * (i + 1) for i in range(len(variants))]
        FakeBench.made.append(self)

    def run(self, i, *, seconds, seed, **kw):
        self.runs.append((i, seconds, seed, kw))
        if len(self.runs) > 1:
            self.allocated[i] += 5
        v = self.variants[i]
        return dict(self.figures[v] if v in self.figures else self.figures["*"])

    def tracker_pages(self, i):
        return 100 + i

    def tracker_pages_allocated(self, i):
        return self.allocated[i]


def _fig(ops, cpu_ns, reads, writes, bypasses=0, inserts=0, elapsed=1_000_000_000, stale=0, hits=0):
    return {"ops": ops, "cpu_ns": cpu_ns, "elapsed_ns": elapsed, "reads": reads, "writes": writes,
            "read_bypasses": bypasses, "cache_inserts": inserts, "stale_reads": stale, "read_hits": hits}


@pytest.fixture
def bench(monkeypatch):
    FakeBench.made = []
    monkeypatch.setattr(cachedev, "_FioBench", FakeBench)
    monkeypatch.setattr(FakeBench, "figures", {"*": _fig(100, 1000, 50, 50)})
    return FakeBench


def test_fio_rounds_are_quarter_seconds_at_least_two_rotating_the_order_with_a_seed_each(bench):
    out = cachedev.fio(size=1 << 20, seconds=0.6, variants=("none", "page", "atomic"), seed=5, jobs=2,
                       inflight=7, read_size=8192, write_size=16384, read_percent=40)
    b = bench.made[0]
    kw = {"jobs": 2, "read_percent": 40, "read_blocks": 2, "write_blocks": 4, "inflight": 3}
    assert b.runs[0] == (0, 0.1, 5, kw)                     # the warm-up: at most 0.1 s, variant 0
    rounds = b.runs[1:]
    assert [i for i, *_ in rounds] == [0, 1, 2, 1, 2, 0]     # round(0.6 / 0.25) = 2 rounds, rotated
    assert [s for _, s, _, _ in rounds] == approx([0.3] * 6)
    assert [sd for *_, sd, _ in rounds] == [6, 7, 8, 10, 11, 9]   # seed + 1 + k * 3 + i
    assert all(k == kw for *_, k in rounds)
    assert all(type(v) is int for *_, k in b.runs for v in k.values())     # block counts, not floats
    assert out["config"]["rounds"] == 2 and out["config"]["inflight"] == 6
    assert cachedev.fio(size=1 << 20, seconds=0.1)["config"]["rounds"] == 2
    assert bench.made[1].runs[0][1] == 0.05
    assert cachedev.fio(size=1 << 20, seconds=1.0)["config"]["rounds"] == 4


def test_fio_builds_one_bench_for_the_checked_variants(bench):
    cachedev.fio(size=1 << 21, variants="page, none,", chunk_size=4096, bounce_copy=False, granularity="page",
                 free="deferred", seconds=0.5)
    assert bench.made[0].init == (1 << 21, ("page", "none"), 4096, 4096, False, "page", "deferred", {})


def test_fio_refuses_empty_repeated_or_unknown_variants_before_running(bench):
    with pytest.raises(TypeError, match="^variants must be a non-empty list of"):
        cachedev.fio(variants=" , ")
    with pytest.raises(TypeError, match="^variants must be a non-empty list of"):
        cachedev.fio(variants=())
    with pytest.raises(TypeError, match="^variants must be a non-empty list of"):
        cachedev.fio(variants={"none"})
    with pytest.raises(ValueError) as info:
        cachedev.fio(variants=["none", "page", "none"])
    assert str(info.value) == "variants must not repeat, got ['none', 'page', 'none']"
    with pytest.raises(ValueError) as info:
        cachedev.fio(variants=["none", "nope"])
    assert str(info.value) == "variants must be one of ('none', 'global', 'page', 'atomic'), got 'nope'"
    assert bench.made == []


@pytest.mark.parametrize("kw, message", [
    ({"write_size": 6000}, "write_size must be a multiple of 4096, got 6000"),
    ({"read_size": 6000}, "read_size must be a multiple of 4096, got 6000"),
    ({"size": 3 * 16384 // 2, "write_size": 16384}, "size must be a multiple of write_size (16384), got 24576"),
    ({"bounce_copy": 1}, "bounce_copy must be a bool, got int"),
    ({"sync": "nope"}, "sync must be None, a KernelPatch or the path of a patch's .c file, got 'nope' "
                       "(the lab's variants are chosen with variants=)"),
])
def test_fio_refuses_sizes_off_the_block_and_bad_options_naming_them(bench, kw, message):
    with pytest.raises((TypeError, ValueError)) as info:
        cachedev.fio(**{"size": 1 << 20, **kw})
    assert str(info.value) == message
    assert bench.made == []


def test_fio_inflight_is_checked_against_the_jobs(bench):
    with pytest.raises(ValueError, match="inflight"):
        cachedev.fio(size=1 << 20, jobs=4, inflight=3)
    with pytest.raises(ValueError, match="inflight"):
        cachedev.fio(size=1 << 20, jobs=1, inflight=4097)
    assert cachedev.fio(size=1 << 20, jobs=1, inflight=4096, seconds=0.5)["config"]["inflight"] == 4096


def test_fio_gives_each_job_its_share_of_the_writes_in_flight_at_least_one(bench):
    out = cachedev.fio(size=1 << 20, seconds=0.5, jobs=2, inflight=2)
    assert out["config"]["inflight"] == 2 and bench.made[0].runs[0][3]["inflight"] == 1
    out = cachedev.fio(size=1 << 20, seconds=0.5, jobs=3, inflight=11)
    assert out["config"]["inflight"] == 9 and bench.made[1].runs[0][3]["inflight"] == 3


def test_fio_shows_progress_over_its_rounds(bench):
    seen = []

    def bar(items, total):
        seen.append(total)
        for k in items:
            seen.append(k)
            yield k
    cachedev.fio(size=1 << 20, seconds=0.75, variants=["none", "page"], progress=bar)
    assert seen == [3, 0, 1, 2] and len(bench.made[0].runs) == 1 + 3 * 2


def test_fio_defaults_are_the_documented_ones(monkeypatch, bench):
    monkeypatch.setattr(cachedev.os, "cpu_count", lambda: 16)
    out = cachedev.fio()
    assert out["config"] == {
        "size": 10 << 30, "jobs": 16, "seconds": 2.0, "rounds": 8, "variants": ["none", "global", "page", "atomic"],
        "read_percent": 70, "inflight": 160, "read_size": 4096, "write_size": 128 << 10, "bounce_copy": True,
        "chunk_size": 32 << 20, "granularity": "chunk", "free": "eager", "seed": 0, "chunks": 320, "sync": None,
        "patch": None, "hung_timeout": None}
    assert bench.made[0].runs[0][:3] == (0, 0.1, 0)
    monkeypatch.setattr(cachedev.os, "cpu_count", lambda: 1)
    assert cachedev.fio()["config"]["inflight"] == 160 and bench.made[1].runs[0][3]["inflight"] == 160


def test_fio_jobs_default_to_the_cpus_up_to_16(monkeypatch, bench):
    for cpus, jobs in ((40, 16), (3, 3), (None, 1)):
        monkeypatch.setattr(cachedev.os, "cpu_count", lambda cpus=cpus: cpus)
        assert cachedev.fio(size=1 << 20, seconds=0.5, inflight=16)["config"]["jobs"] == jobs


def test_fio_rows_are_the_rounds_totals_and_the_ratios_to_none(bench):
    bench.figures = {"none": _fig(100, 1000, 80, 20, inserts=40, hits=8, stale=3),
                     "page": _fig(50, 1000, 40, 10, bypasses=30, inserts=4, elapsed=500_000_000)}
    out = cachedev.fio(size=1 << 20, seconds=0.5, variants=("none", "page"))
    none, page = out["rows"]
    assert none == {"variant": "none", "ops_per_s": 100.0, "ns_per_io": 10.0, "read_bypasses": 0,
                    "cache_inserts": 80, "stale_reads": 6, "reads": 160, "writes": 40, "read_hits": 16,
                    "bypass_fraction": 0.0, "insert_fraction": 0.5, "tracking_pages": 100,
                    "pages_allocated": 10, "allocations_per_1000_writes": 250.0, "ns_per_io_vs_none": 1.0,
                    "inserts_avoided": 0.0}
    assert page["ops_per_s"] == 100.0 and page["ns_per_io"] == 20.0 and page["ns_per_io_vs_none"] == 2.0
    assert page["bypass_fraction"] == 0.75 and page["insert_fraction"] == 0.1
    assert page["inserts_avoided"] == approx(0.8)
    assert page["tracking_pages"] == 101 and page["pages_allocated"] == 10
    assert page["allocations_per_1000_writes"] == 500.0


def test_fio_ratio_to_none_is_the_median_over_rounds_skipping_empty_ones(monkeypatch, bench):
    per_round = [(_fig(10, 100, 5, 5), _fig(10, 200, 5, 5)),     # page 2x
                 (_fig(10, 100, 5, 5), _fig(10, 500, 5, 5)),     # page 5x
                 (_fig(10, 100, 5, 5), _fig(10, 300, 5, 5)),     # page 3x
                 (_fig(0, 100, 0, 0), _fig(10, 900, 5, 5)),      # none ran nothing: no ratio
                 (_fig(10, 0, 5, 5), _fig(10, 900, 5, 5)),       # none took no cpu: no ratio
                 (_fig(10, 100, 5, 5), _fig(0, 900, 0, 0))]      # page ran nothing: no ratio
    runs = []

    def run(self, i, *, seconds, seed, **kw):
        runs.append(i)
        if len(runs) == 1:
            return _fig(1, 1, 1, 0)
        k = (len(runs) - 2) // 2
        return per_round[k][i]
    monkeypatch.setattr(FakeBench, "run", run)
    out = cachedev.fio(size=1 << 20, seconds=1.5, variants=("none", "page"))
    assert out["config"]["rounds"] == 6
    assert out["rows"][1]["ns_per_io_vs_none"] == 3.0
    assert out["rows"][0]["ns_per_io_vs_none"] == 1.0


def test_fio_without_none_has_no_ratios_and_zeros_where_nothing_ran(bench):
    bench.figures = {"*": _fig(0, 0, 0, 0, elapsed=0)}
    out = cachedev.fio(size=1 << 20, seconds=0.5, variants=["page", "atomic"])
    assert [(r["ns_per_io_vs_none"], r["inserts_avoided"]) for r in out["rows"]] == [(None, None)] * 2
    row = out["rows"][0]
    assert row["ops_per_s"] == 0.0 and row["ns_per_io"] == 0.0 and row["bypass_fraction"] == 0.0
    assert row["insert_fraction"] == 0.0 and row["allocations_per_1000_writes"] == 0.0
    out = cachedev.fio(size=1 << 20, seconds=0.5, variants=["none", "page"])
    assert [r["ns_per_io_vs_none"] for r in out["rows"]] == [None, None]
    assert [r["inserts_avoided"] for r in out["rows"]] == [0.0, 0.0]


def test_fio_config_is_the_checked_arguments(bench):
    out = cachedev.fio(size=3 << 20, jobs=2, seconds=0.5, variants=["atomic"], read_percent=0, inflight=5,
                       read_size=4096, write_size=1 << 20, bounce_copy=False, chunk_size=1 << 21,
                       granularity="page", free="deferred", seed=9)
    assert out == {"rows": out["rows"], "config": {
        "size": 3 << 20, "jobs": 2, "seconds": 0.5, "rounds": 2, "variants": ["atomic"], "read_percent": 0,
        "inflight": 4, "read_size": 4096, "write_size": 1 << 20, "bounce_copy": False, "chunk_size": 1 << 21,
        "granularity": "page", "free": "deferred", "seed": 9, "chunks": 2, "sync": None, "patch": None,
        "hung_timeout": None}}


def test_fio_with_a_patch_measures_it_last_on_its_own_tracker_and_counts_its_reports(monkeypatch, bench):
    patch = FakePatch([{"kind": "warn", "count": 2}])
    _with_patch(monkeypatch, patch)
    out = cachedev.fio(size=1 << 20, seconds=0.5, variants=["none"], sync="PATCH", hung_timeout=4)
    (size, ht, tracker), = patch.trackers
    assert (size, ht) == (1 << 20, 4.0)
    assert bench.made[0].init[1] == ("none", "patch") and bench.made[0].init[7] == {"patch_tracker": tracker}
    assert [r["variant"] for r in out["rows"]] == ["none", "patch"]
    assert "patch" not in out["rows"][0] and out["rows"][1]["patch"] == "fake (/p/fake.c)"
    assert out["kernel_reports"] == {"warn": 2}
    cfg = out["config"]
    assert (cfg["sync"], cfg["patch"], cfg["hung_timeout"], cfg["variants"]) == (
        "/p/fake.c", "fake (/p/fake.c)", 4.0, ["none", "patch"])
    assert cachedev.fio(size=1 << 20, seconds=0.5, sync="PATCH")["config"]["hung_timeout"] == 10.0
    with pytest.raises(ValueError, match="^sync='fake' \\(a patch\\) and granularity are mutually exclusive"):
        cachedev.fio(size=1 << 20, sync="PATCH", granularity="page")
    assert "kernel_reports" not in cachedev.fio(size=1 << 20, seconds=0.5)


def test_a_tiny_real_fio_returns_a_row_per_variant():
    out = cachedev.fio(size=1 << 20, seconds=0.02, jobs=1, inflight=1, write_size=16384, variants=("none", "page"))
    assert [r["variant"] for r in out["rows"]] == ["none", "page"]
    assert out["rows"][0]["ns_per_io_vs_none"] == 1.0 and out["rows"][1]["stale_reads"] == 0


# ---- every argument's range, as the refusal states it (nothing built or run) ---------------------------------

@pytest.mark.parametrize("func, kw, message", [
    ("race", {"fault_probability": 1.5}, "fault_probability must be in [0.0, 1.0], got 1.5"),
    ("race", {"pool_pages": (1 << 20) + 1}, "pool_pages must be in [0, 1048576], got 1048577"),
    ("race", {"threads": 257}, "threads must be in [2, 256], got 257"),
    ("race", {"threads": 6, "writers": 6}, "writers must be in [1, 5], got 6"),
    ("race", {"min_ops": 10 ** 12 + 1}, "min_ops must be in [0, 1000000000000], got 1000000000001"),
    ("race", {"seed": -1}, "seed must be in [0, 9223372036854775807], got -1"),
    ("race", {"region_blocks": (1 << 20) + 1}, "region_blocks must be in [1, 1048576], got 1048577"),
    ("race", {"block_size": 1 << 21}, "block_size must be in [512, 1048576], got 2097152"),
    ("race", {"chunk_size": 256}, "chunk_size must be in [512, 4611686018427387904], got 256"),
    ("race", {"region_blocks": 8, "max_write_blocks": 9}, "max_write_blocks must be in [1, 8], got 9"),
    ("race", {"region_blocks": 8, "read_blocks": 9}, "read_blocks must be in [1, 8], got 9"),
    ("race", {"region_blocks": 100, "read_blocks": 65}, "read_blocks must be in [1, 64], got 65"),
    ("race", {"write_delay_ns": 10 ** 9 + 1}, "write_delay_ns must be in [0, 1000000000], got 1000000001"),
    ("race", {"delay": "sleep"}, "delay must be one of ('spin', 'yield'), got 'sleep'"),
    ("race", {"reclaim_every": -1}, "reclaim_every must be in [0, 4611686018427387904], got -1"),
    ("race", {"seconds": 3601}, "seconds must be in (0.0, 3600.0], got 3601"),
    ("fio", {"write_size": (1 << 30) + 4096}, "write_size must be in [4096, 1073741824], got 1073745920"),
    ("fio", {"read_size": 65 * 4096}, "read_size must be in [4096, 262144], got 266240"),
    ("fio", {"size": 1 << 41}, "size must be in [131072, 1099511627776], got 2199023255552"),
    ("fio", {"size": 4096, "write_size": 8192}, "size must be in [8192, 1099511627776], got 4096"),
    ("fio", {"jobs": 257}, "jobs must be in [1, 256], got 257"),
    ("fio", {"seconds": 0}, "seconds must be in (0.0, 3600.0], got 0"),
    ("fio", {"read_percent": 101}, "read_percent must be in [0, 100], got 101"),
    ("fio", {"chunk_size": 1 << 63}, "chunk_size must be in [512, 4611686018427387904], got 9223372036854775808"),
    ("fio", {"granularity": "x"}, "granularity must be one of ('chunk', 'page'), got 'x'"),
    ("fio", {"free": "x"}, "free must be one of ('eager', 'deferred'), got 'x'"),
    ("fio", {"seed": 1 << 63}, "seed must be in [0, 9223372036854775807], got 9223372036854775808"),
    ("fio", {"jobs": 2, "inflight": 8193}, "inflight must be in [2, 8192], got 8193"),
])
def test_race_and_fio_refuse_an_argument_out_of_range_naming_it_and_the_range(race_model, bench, func, kw, message):
    with pytest.raises(ValueError) as info:
        getattr(cachedev, func)(**kw)
    assert str(info.value) == message
    assert race_model == [] and FakeDevice.made == [] and bench.made == []
