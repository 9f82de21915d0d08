"""What ``cachedev.fio`` passes to the C benchmark and how it assembles its rounds into rows; every argument's
range of ``race`` and ``fio``, as the refusal states it.

The C model's entry points (``CachedDevice``, ``_race_slice``, ``_Explorer``, ``_FioBench``, a patch) are
replaced by recorders returning small results of the real shape, so each test checks exactly what is passed on
and the arithmetic of what comes back, with nothing timed and no thread started (the real runs: test_fio.py)."""
from __future__ import annotations

import pytest

from pybcache.bcache import cachedev

from helpers.cachedev_stand_ins import _with_patch, FakeDevice, FakePatch


approx = pytest.approx


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


def _wt(fig, wt_writes, fallbacks, starts):
    return dict(fig, writethrough_writes=wt_writes, writethrough_fallbacks=fallbacks, tracker_starts=starts)


def test_fio_runs_every_tracking_variant_once_per_track_and_none_once_sharing_the_rounds_seed(bench):
    bench.figures = {"*": _wt(_fig(100, 1000, 50, 50), 25, 1, 30)}
    out = cachedev.fio(size=1 << 20, seconds=0.5, variants=("none", "page"), seed=5, write_kind="mixed",
                       cache_alloc_fail=0.1, track="bypass, all")
    b = bench.made[0]
    kw = {"jobs": b.runs[0][3]["jobs"], "read_percent": 70, "read_blocks": 1, "write_blocks": 32,
          "inflight": b.runs[0][3]["inflight"], "write_kind": "mixed", "cache_alloc_fail": 0.1}
    assert b.runs[0] == (0, 0.1, 5, {**kw, "track": "bypass"})          # the warm-up: the first column
    cols = [(i, k["track"], sd) for i, _, sd, k in b.runs[1:]]
    # columns (none), (page, bypass), (page, all), rotated by one each round; a variant's columns of a
    # round share its seed (seed + 1 + k * 2 + i)
    assert cols == [(0, "bypass", 6), (1, "bypass", 7), (1, "all", 7),
                    (1, "bypass", 9), (1, "all", 9), (0, "bypass", 8)]
    assert all({key: k[key] for key in kw} == kw for *_, k in b.runs)
    assert [(r["variant"], r["track"]) for r in out["rows"]] == [("none", "bypass"), ("page", "bypass"),
                                                                  ("page", "all")]
    assert [(r["writethrough_writes"], r["writethrough_fallbacks"], r["tracker_starts"]) for r in out["rows"]] \
        == [(50, 2, 60)] * 3                                             # the rounds' totals
    assert out["config"]["write_kind"] == "mixed" and out["config"]["cache_alloc_fail"] == 0.1
    assert out["config"]["tracks"] == ["bypass", "all"]


def test_fio_costs_each_track_against_track_bypass_per_round_and_by_bypass_share(monkeypatch, bench):
    # rounds of (page bypass, page invalidations): CPU ratios 2, 5, 3 -> median 3, range [2, 5]
    per_round = {("bypass", 0): _wt(_fig(10, 100, 5, 5, bypasses=1), 2, 0, 5),
                 ("invalidations", 0): _wt(_fig(10, 200, 5, 5, bypasses=2), 2, 1, 6),
                 ("bypass", 1): _wt(_fig(10, 100, 5, 5, bypasses=1), 2, 0, 5),
                 ("invalidations", 1): _wt(_fig(10, 500, 5, 5, bypasses=2), 2, 1, 6),
                 ("bypass", 2): _wt(_fig(10, 100, 5, 5, bypasses=1), 2, 0, 5),
                 ("invalidations", 2): _wt(_fig(10, 300, 5, 5, bypasses=2), 2, 1, 6)}
    runs = []

    def run(self, i, *, seconds, seed, track, **kw):
        runs.append(track)
        return dict(per_round[(track, (len(runs) - 2) // 2)]) if len(runs) > 1 else _wt(_fig(1, 1, 1, 0), 0, 0, 0)
    monkeypatch.setattr(FakeBench, "run", run)
    out = cachedev.fio(size=1 << 20, seconds=0.75, variants=["page"], write_kind="writethrough",
                       track=["bypass", "invalidations"])
    base, inval = out["rows"]
    assert (base["ns_per_io_vs_track_bypass"], base["ns_per_io_vs_track_bypass_range"]) == (1.0, [1.0, 1.0])
    assert base["bypass_fraction_vs_track_bypass"] == 1.0
    assert inval["ns_per_io_vs_track_bypass"] == 3.0 and inval["ns_per_io_vs_track_bypass_range"] == [2.0, 5.0]
    assert inval["bypass_fraction_vs_track_bypass"] == 2.0
    assert base["ns_per_io_vs_none"] is None
    # without "bypass" among the tracks there is no baseline, so no such ratios
    runs.clear()
    out = cachedev.fio(size=1 << 20, seconds=0.75, variants=["page"], write_kind="writethrough",
                       track="invalidations")
    assert "ns_per_io_vs_track_bypass" not in out["rows"][0] and out["rows"][0]["track"] == "invalidations"


def test_fio_at_its_write_defaults_keeps_its_rows_config_and_calls(bench):
    out = cachedev.fio(size=1 << 20, seconds=0.5, variants=["page"], write_kind="bypass", cache_alloc_fail=0,
                       track=["bypass"])
    assert not {"track", "writethrough_writes", "tracker_starts", "ns_per_io_vs_track_bypass"} & out["rows"][0].keys()
    assert not {"write_kind", "cache_alloc_fail", "tracks"} & out["config"].keys()
    assert all(set(k) == {"jobs", "read_percent", "read_blocks", "write_blocks", "inflight"}
               for *_, k in bench.made[0].runs)


@pytest.mark.parametrize("kw, exc, message", [
    ({"write_kind": "sideways"}, ValueError,
     "write_kind must be one of ('bypass', 'writethrough', 'mixed', 'discard'), got 'sideways'"),
    ({"write_kind": "mixed", "cache_alloc_fail": 1.5}, ValueError, "cache_alloc_fail must be in [0.0, 1.0], got 1.5"),
    ({"cache_alloc_fail": 0.1}, ValueError, "cache_alloc_fail applies to writethrough writes (write_kind "
     "'writethrough' or 'mixed'), got cache_alloc_fail=0.1 with write_kind='bypass'"),
    ({"track": "some"}, ValueError, "track must be one of ('bypass', 'invalidations', 'all'), got 'some'"),
    ({"track": ["all", "all"]}, ValueError, "track must not repeat, got ['all', 'all']"),
    ({"track": []}, TypeError, "track must be one of ('bypass', 'invalidations', 'all') or a non-empty list of them"),
    ({"track": 3}, TypeError, "track must be one of ('bypass', 'invalidations', 'all') or a non-empty list of them"),
])
def test_fio_refuses_bad_write_options_naming_them_before_running(bench, kw, exc, message):
    with pytest.raises(exc) as info:
        cachedev.fio(size=1 << 20, seconds=0.5, **kw)
    assert str(info.value) == message and bench.made == []
