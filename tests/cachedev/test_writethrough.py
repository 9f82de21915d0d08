"""The writethrough fallback (issue 27 part 1): a writethrough write whose cache allocation fails
invalidates its range while its backing write is in flight, outside the bypass branch where the v2
patch counts writes (drivers/md/bcache/request.c in 6.12: :222, :264-272, :1057-1061)."""
import pytest

from pybcache.bcache import cachedev
from pybcache.bcache.cachedev import CachedDevice

pytestmark = [pytest.mark.native, pytest.mark.xdist_group("native-threads")]

BLOCK = 4096

# (writes, reads, cache_alloc_fail, write_kind): scenarios in which a fallback invalidation can
# precede the backing write. With two writethrough writes the fallback must be the second allocation:
# the first start draws the first allocation and the older version, and the newer write's insert
# then outlives the older one's invalidation (newest wins).
FALLBACK = [(1, 1, 1, "writethrough"), (1, 2, 1, "writethrough"), (2, 1, 2, "writethrough"),
            (2, 1, 1, "mixed")]


def _explore(writes, reads, k, kind, track, **kw):
    return cachedev.explore(writes=writes, reads=reads, cache_alloc_fail=k, write_kind=kind, track=track, **kw)


@pytest.mark.parametrize("writes,reads,k,kind", FALLBACK)
def test_v2_placement_misses_the_fallback(writes, reads, k, kind):
    out = _explore(writes, reads, k, kind, "bypass")
    assert out["finished"] and out["violations"] > 0
    text = out["counterexample"]
    fallback = next(i for i, t in enumerate(text) if "the writethrough fallback" in t)
    w = text[fallback].split()[0]
    land = next(i for i, t in enumerate(text) if t.startswith(f"{w} land"))
    assert fallback < land                                  # invalidated while the backing write is in flight
    assert any(t.startswith(f"{w} start (writethrough)") and "not counted (track=bypass)" in t for t in text)
    backing = next(t for t in text if " backing read: " in t)
    assert backing.index("backing") < len(backing) and fallback < text.index(backing) < land
    assert "STALE" in text[-1]


def test_fallback_gives_stale_reads_too():
    out = _explore(1, 2, 1, "writethrough", "bypass")
    assert out["stale_read_schedules"] > 0 and out["stale_cache_schedules"] > 0


@pytest.mark.parametrize("track", ["invalidations", "all"])
@pytest.mark.parametrize("writes,reads,k,kind", FALLBACK)
def test_counting_the_fallback_closes_it(writes, reads, k, kind, track):
    out = _explore(writes, reads, k, kind, track)
    assert out["finished"] and out["violations"] == 0 and out["counterexample"] is None
    assert out["bypass_schedules"] > 0                      # the fallback's start made reads bypass


@pytest.mark.parametrize("track", ["bypass", "invalidations", "all"])
@pytest.mark.parametrize("writes,reads,kind", [(1, 2, "writethrough"), (2, 1, "writethrough"), (2, 1, "mixed")])
def test_no_allocation_failure_no_violation(writes, reads, kind, track):
    out = _explore(writes, reads, 0, kind, track)
    assert out["finished"] and out["violations"] == 0


@pytest.mark.parametrize("track", ["bypass", "invalidations", "all"])
def test_bypass_writes_unchanged(track):
    base = cachedev.explore()
    out = cachedev.explore(write_kind="bypass", cache_alloc_fail=3, track=track)
    for key in ("schedules", "violations", "bypass_schedules", "collision_schedules", "restart_schedules"):
        assert out[key] == base[key], key


def test_explorer_config_and_prefixes():
    out = _explore(1, 1, 1, "writethrough", "all")
    assert {k: out["config"][k] for k in ("write_kind", "cache_alloc_fail", "track")} == {
        "write_kind": "writethrough", "cache_alloc_fail": 1, "track": "all"}
    whole = _explore(2, 1, 2, "writethrough", "bypass")
    prefixes = cachedev.explore_prefixes(2, writes=2, reads=1, cache_alloc_fail=2, write_kind="writethrough")
    parts = [_explore(2, 1, 2, "writethrough", "bypass", prefix=p) for p in prefixes]
    assert sum(p["schedules"] for p in parts) == whole["schedules"]
    assert sum(p["violations"] for p in parts) == whole["violations"]


# -- the device, step by step ---------------------------------------------------------------------------

def _steps(dev, *names):
    w = dev.begin_write(0, BLOCK)
    for name in names:
        assert w.step() == name
    return w


def test_insert_puts_the_new_version_in_the_cache():
    dev = CachedDevice(16 * BLOCK, chunk_size=BLOCK, write_kind="writethrough")
    w = _steps(dev, "start", "invalidate")
    assert w.kind == "writethrough" and not w.fallback and not w.counted
    assert dev.cache_entry(0) == ("valid", w.version)
    assert dev.read(0, BLOCK)["hit"]
    w.run()
    assert dev.stale_cached_blocks() == 0
    st = dev.stats()
    assert st["writes"] == 1 and st["writethrough_writes"] == 1 and st["writethrough_fallbacks"] == 0


def test_insert_overwrites_a_check_key():
    dev = CachedDevice(16 * BLOCK, chunk_size=BLOCK, write_kind="writethrough", track="all")
    r = dev.begin_read(0, BLOCK)
    while r.next_step != "backing":
        r.step()
    w = _steps(dev, "start", "invalidate")
    r.run()
    assert r.result["collided"] == 1 and r.result["inserted"] == 0
    w.run()
    assert dev.cache_entry(0) == ("valid", w.version)


@pytest.mark.parametrize("track,counted", [("bypass", False), ("invalidations", True), ("all", True)])
def test_fallback_invalidates_and_the_track_decides_the_count(track, counted):
    dev = CachedDevice(16 * BLOCK, chunk_size=BLOCK, write_kind="writethrough", cache_alloc_fail=1, track=track)
    dev.read(0, BLOCK)                                       # cache v0
    w = _steps(dev, "start", "invalidate")
    assert w.fallback and w.counted == counted
    assert dev.cache_entry(0)[0] == "empty"
    assert int(dev.tracker_counts()[0]) == (1 if counted else 0)
    got = dev.read(0, BLOCK)                                 # a miss inside the window
    assert got["bypassed"] == counted
    w.run()
    assert int(dev.tracker_counts()[0]) == 0                  # no stolen increment either way
    assert dev.stale_cached_blocks() == (0 if counted else 1)
    assert dev.stats()["writethrough_fallbacks"] == 1
    # the second allocation succeeds (K = 1 only)
    w2 = _steps(dev, "start", "invalidate")
    assert not w2.fallback and dev.cache_entry(0) == ("valid", w2.version)


def test_mixed_alternates_per_device():
    dev = CachedDevice(16 * BLOCK, write_kind="mixed")
    assert [dev.begin_write(0, BLOCK).kind for _ in range(4)] == ["bypass", "writethrough"] * 2


def test_uncounted_write_does_not_steal_an_increment():
    dev = CachedDevice(16 * BLOCK, chunk_size=BLOCK, write_kind="mixed", track="bypass")
    wb = _steps(dev, "start")                                 # W1 bypass: counted
    wt = _steps(dev, "start", "invalidate", "land", "end")    # W2 writethrough: not counted
    assert wb.counted and not wt.counted
    assert int(dev.tracker_counts()[0]) == 1
    wb.run()
    assert int(dev.tracker_counts()[0]) == 0 and dev.tracker_stats()["underflows"] == 0


# -- race --------------------------------------------------------------------------------------------------

RACE = dict(threads=4, writers=2, seconds=0.5, region_blocks=8, max_write_blocks=2, write_delay_ns=20_000,
            write_kind="mixed", cache_alloc_fail=0.3)


def test_race_counting_every_write_is_never_stale():
    out = cachedev.race(track="all", **RACE)
    assert out["stale_reads"] == 0 and out["stale_cached_blocks"] == 0
    assert out["writethrough_fallbacks"] > 0 and 0 < out["writethrough_writes"] < out["writes"]
    assert out["config"]["track"] == "all" and out["config"]["write_kind"] == "mixed"


def test_race_counting_fallbacks_is_never_stale():
    out = cachedev.race(track="invalidations", **RACE)
    assert out["stale_reads"] == 0 and out["stale_cached_blocks"] == 0


def test_race_v2_placement_runs():
    # Whether this run hits the window is timing; the explorer above is the certainty.
    out = cachedev.race(track="bypass", seed=3, **RACE)
    assert out["writethrough_fallbacks"] > 0 and out["stale_reads"] >= 0


def test_race_writethrough_without_failures_is_never_stale():
    out = cachedev.race(track="bypass", **{**RACE, "write_kind": "writethrough", "cache_alloc_fail": 0.0})
    assert out["stale_reads"] == 0 and out["stale_cached_blocks"] == 0
    assert out["writethrough_fallbacks"] == 0 and out["writethrough_writes"] == out["writes"]


# -- validation --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("call", [
    lambda: cachedev.explore(write_kind="writeback"),
    lambda: cachedev.explore(track="some"),
    lambda: cachedev.explore(cache_alloc_fail=-1),
    lambda: cachedev.race(cache_alloc_fail=1.5, seconds=0.01),
    lambda: cachedev.race(write_kind="nope", seconds=0.01),
    lambda: CachedDevice(BLOCK, write_kind="x"),
    lambda: CachedDevice(BLOCK, track="x"),
    lambda: CachedDevice(BLOCK, cache_alloc_fail=-2),
])
def test_bad_values(call):
    with pytest.raises(ValueError, match="write_kind|track|cache_alloc_fail"):
        call()


@pytest.mark.parametrize("call", [
    lambda: cachedev.explore(cache_alloc_fail=1.5),
    lambda: cachedev.explore(track=1),
    lambda: CachedDevice(BLOCK, write_kind=None),
])
def test_bad_types(call):
    with pytest.raises(TypeError, match="write_kind|track|cache_alloc_fail"):
        call()


# -- CLI ---------------------------------------------------------------------------------------------------

@pytest.mark.e2e
def test_cli_explore_shows_the_fallback_counterexample():
    import json

    from helpers.clirun import run_pybcache
    out = run_pybcache("explore", "--scenario", "1w1r", "--writes", "writethrough", "--cache-alloc-fail", "1")
    assert out.returncode == 0, out.stderr
    assert "writes: write_kind=writethrough, cache_alloc_fail=1" in out.stdout
    assert "the writethrough fallback" in out.stdout and "not counted (track=bypass)" in out.stdout
    got = run_pybcache("explore", "--scenario", "1w2r", "--writes", "writethrough", "--cache-alloc-fail", "1",
                       "--track", "invalidations", "--json")
    run = json.loads(got.stdout)["runs"][0]
    assert run["violations"] == 0 and run["config"]["track"] == "invalidations"


@pytest.mark.e2e
def test_cli_race_takes_the_write_options():
    from helpers.clirun import run_pybcache
    out = run_pybcache("race", "--seconds", "0.2", "--region-blocks", "8", "--writes", "mixed",
                       "--cache-alloc-fail", "0.5", "--track", "all")
    assert out.returncode == 0, out.stderr
    assert "writethrough_fallbacks" in out.stdout and "no stale data" in out.stdout
    bad = run_pybcache("race", "--cache-alloc-fail", "2")
    assert bad.returncode == 2 and "--cache-alloc-fail" in bad.stderr
