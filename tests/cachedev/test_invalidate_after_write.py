"""The v1 approach (``invalidate="after-write"``): a bypass write invalidates its cached range only once its
backing write has landed, instead of right after submitting it (Linux 6.12 ``cached_dev_write``,
drivers/md/bcache/request.c:1027 then :1061). No tracker is needed for bypass writes then; writethrough
writes keep the 6.12 order, so their fallback invalidation (:264-272) still opens the window."""
import pytest

from pybcache.bcache import cachedev
from pybcache.bcache.cachedev import CachedDevice

pytestmark = [pytest.mark.native]

BLOCK = 4096
BOUNDS = [(1, 1), (2, 1), (1, 2)]   # the explorer's default bounds


@pytest.mark.parametrize("writes,reads", BOUNDS)
def test_explorer_finds_the_race_at_submit_and_none_after_write(writes, reads):
    # The explorer is exhaustive: these are verdicts over every schedule, not samples.
    kernel = cachedev.explore(sync="none", writes=writes, reads=reads)
    v1 = cachedev.explore(sync="none", writes=writes, reads=reads, invalidate="after-write")
    assert kernel["finished"] and kernel["violations"] > 0
    assert v1["finished"] and v1["violations"] == 0 and v1["counterexample"] is None
    assert v1["config"]["invalidate"] == "after-write" and "invalidate" not in kernel["config"]


def test_the_counterexample_at_submit_invalidates_before_landing():
    text = cachedev.explore(sync="none", writes=1, reads=1)["counterexample"]
    assert text.index(next(t for t in text if t.startswith("W1 invalidate"))) < \
        text.index(next(t for t in text if t.startswith("W1 land")))


def test_no_restart_cut_hides_a_violation_after_write():
    # 2w2r with a restart bound that cuts nothing: every schedule is judged, quiescence included.
    out = cachedev.explore(sync="none", writes=2, reads=2, max_restarts=16, invalidate="after-write")
    assert out["finished"] and out["restart_capped_schedules"] == 0 and out["stuck_schedules"] == 0
    assert out["violations"] == 0 and out["schedules"] > 100_000


@pytest.mark.parametrize("sync,check", [("page", "after"), ("global", "miss"), ("atomic", "after"),
                                        ("page", "entry"), ("page", "read-done")])
def test_after_write_combines_with_any_tracker_and_placement(sync, check):
    # Orthogonal to tracking: even the unsafe placements find nothing, since the order alone is enough.
    out = cachedev.explore(sync=sync, check=check, invalidate="after-write")
    assert out["finished"] and out["violations"] == 0


def test_the_writethrough_fallback_still_opens_the_window_after_write():
    # v1 defers only the bypass branch: a writethrough insert that falls back invalidates in flight.
    out = cachedev.explore(sync="none", writes=1, reads=1, write_kind="writethrough", cache_alloc_fail=1,
                           invalidate="after-write")
    assert out["finished"] and out["violations"] > 0
    text = out["counterexample"]
    fallback = next(i for i, t in enumerate(text) if "the writethrough fallback" in t)
    land = next(i for i, t in enumerate(text) if t.startswith("W1 land"))
    assert fallback < land and "STALE" in text[-1]
    mixed = cachedev.explore(sync="none", writes=2, reads=1, write_kind="mixed", cache_alloc_fail=1,
                             invalidate="after-write")
    assert mixed["violations"] > 0 and any("the writethrough fallback" in t for t in mixed["counterexample"])
    assert any("invalidate (after-write" in t for t in mixed["counterexample"])   # W1, the bypass write
    counted = cachedev.explore(sync="page", writes=1, reads=2, write_kind="writethrough", cache_alloc_fail=1,
                               track="invalidations", invalidate="after-write")
    assert counted["finished"] and counted["violations"] == 0


def _steps(dev):
    w = dev.begin_write(0, BLOCK)
    names = []
    while not w.done:
        names.append(w.step())
    return names, w


@pytest.mark.parametrize("kind", ["bypass", "writethrough"])
@pytest.mark.parametrize("invalidate", ["at-submit", "after-write"])
def test_the_step_order_of_a_write(kind, invalidate):
    dev = CachedDevice(16 * BLOCK, sync="page", chunk_size=BLOCK, write_kind=kind, invalidate=invalidate)
    assert dev.invalidate == invalidate
    names, w = _steps(dev)
    late = kind == "bypass" and invalidate == "after-write"
    assert names == (["start", "land", "invalidate", "end"] if late else ["start", "invalidate", "land", "end"])
    assert w.after_write is late and dev.tracker_counts().sum() == 0


def test_a_racing_miss_collides_or_is_emptied_and_a_later_read_sees_the_write():
    dev = CachedDevice(16 * BLOCK, sync="none", invalidate="after-write")
    dev.write(0, BLOCK)                                # v1 on the backing device
    w, r = dev.begin_write(0, BLOCK), dev.begin_read(0, BLOCK)
    w.step()                                           # start: v2
    assert [r.step() for _ in range(3)] == ["lookup", "check_key", "backing"]   # reads v1, check key placed
    assert w.step() == "land" and dev.cache_entry(0)[0] == "check"        # nothing invalidated yet
    assert w.step() == "invalidate" and dev.cache_entry(0)[0] == "empty"  # the check key is gone
    r.run()
    assert r.result["versions"] == [1] and r.result["collided"] == 1 and not r.result["stale"]
    w.run()
    assert dev.read(0, BLOCK)["versions"] == [2] and dev.stale_cached_blocks() == 0


@pytest.mark.xdist_group("native-threads")
@pytest.mark.parametrize("sync", ["none", "page"])
def test_race_after_write_serves_no_stale_data(sync):
    # An invariant of the order (the explorer's verdict above), not a matter of timing: 0 however it runs.
    out = cachedev.race(sync=sync, invalidate="after-write", seconds=0.5, min_ops=200_000, write_delay_ns=5_000)
    assert out["writes"] > 0 and out["reads"] > 0
    assert out["stale_reads"] == 0 and out["stale_cached_blocks"] == 0
    assert out["config"]["invalidate"] == "after-write"


@pytest.mark.parametrize("make", [lambda v: CachedDevice(BLOCK, invalidate=v),
                                  lambda v: cachedev.explore(invalidate=v),
                                  lambda v: cachedev.race(invalidate=v, seconds=0.1)])
def test_bad_values_are_refused_naming_the_argument(make):
    with pytest.raises(ValueError, match=r"invalidate must be one of \('at-submit', 'after-write'\)"):
        make("later")
    with pytest.raises(TypeError, match="invalidate must be a str"):
        make(1)


def test_the_distributed_explorer_takes_the_option_and_adds_up():
    from pybcache.dist.explore import explore_distributed
    whole = cachedev.explore(sync="none", writes=2, reads=1, invalidate="after-write")
    split = explore_distributed(workers=0, sync="none", writes=2, reads=1, invalidate="after-write")
    assert (split["schedules"], split["violations"]) == (whole["schedules"], 0)
    assert split["config"]["invalidate"] == "after-write" and split["distributed"]["prefixes"] > 1
