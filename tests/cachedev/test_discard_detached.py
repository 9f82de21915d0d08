"""Discards and the detached path (issue 27 part 5 c, d), in the cached-device model and the explorer.

A discard takes cached_dev_write's bypass branch (drivers/md/bcache/request.c in 6.12: :371-373, :1007-1008,
:1017-1027), so it is a bypass write in every step and the tracker counts it. A write submitted while the cached
device has no cache set goes down detached_dev_do_request (:1210, :1231-1234) with no tracker call, and the attach
(drivers/md/bcache/super.c:1292) does not wait for it: once the device caches again, a read miss can cache the
data that write is about to overwrite. Every verdict here is an exhaustive explorer run (deterministic)."""
import json

import pytest

from pybcache.bcache import cachedev
from pybcache.bcache.cachedev import CachedDevice

pytestmark = [pytest.mark.native]


# -- discards --------------------------------------------------------------------------------------------

def test_unpatched_discards_race_like_bypass_writes():
    out = cachedev.explore(sync="none", writes=2, reads=1, write_kind="discard")
    assert out["finished"] and out["violations"] > 0
    assert any("W2 invalidate (discard):" in line for line in out["counterexample"])
    assert out["config"]["write_kind"] == "discard"


@pytest.mark.parametrize("sync", ["global", "page", "atomic"])
@pytest.mark.parametrize("track", ["bypass", "invalidations"])
def test_the_tracker_counts_discards_under_every_track(sync, track):
    """Discards are counted where bypass writes are (the v2 placement too): no stale read in any schedule."""
    for w, r in ((2, 1), (1, 2)):
        out = cachedev.explore(sync=sync, writes=w, reads=r, write_kind="discard", track=track)
        assert out["finished"] and out["violations"] == 0 and out["bypass_schedules"] > 0, (w, r)


def test_a_discard_on_the_device_is_counted_by_the_tracker():
    dev = CachedDevice(1 << 20, write_kind="discard", chunk_size=4096)
    w = dev.begin_write(0, 4096)
    assert w.kind == "discard"
    w.step()                                                   # start
    assert dev.tracker.count(0) == 1
    while not w.done:
        w.step()
    s = dev.tracker_stats()
    assert s["starts"] == s["ends"] == 1 and dev.tracker.count(0) == 0


# -- the detached path --------------------------------------------------------------------------------------

@pytest.mark.parametrize("check", ["after", "miss", "entry"])
def test_a_write_in_flight_from_the_detached_path_leaves_a_stale_block(check):
    out = cachedev.explore(writes=1, reads=1, detached=True, check=check)
    assert out["finished"] and out["violations"] == 1 and out["stale_cache_schedules"] == 1
    text = out["counterexample"]
    assert text[0].startswith("W1 was submitted while the device had no cache set")
    assert any(line.startswith("W1 land (detached path):") for line in text)
    assert "STALE CACHED BLOCK" in text[-1]
    assert out["config"]["detached"] is True


def test_a_second_read_then_returns_the_stale_block():
    out = cachedev.explore(writes=1, reads=2, detached=True)
    assert out["finished"] and out["stale_read_schedules"] > 0


def test_counting_the_detached_write_too_closes_the_window():
    """The fix to ask the series about: the detached path calls the tracker as well (track="all" here)."""
    for w, r in ((1, 1), (1, 2), (2, 1)):
        out = cachedev.explore(writes=w, reads=r, detached=True, track="all")
        assert out["finished"] and out["violations"] == 0, (w, r)


def test_detached_needs_a_write_and_a_bool():
    with pytest.raises(ValueError, match="detached=True needs writes >= 1"):
        cachedev.explore(writes=0, reads=1, detached=True)
    with pytest.raises(TypeError, match="detached"):
        cachedev.explore(writes=1, reads=1, detached=1)


# -- unhijack through the model ---------------------------------------------------------------------------

def test_md_decay_under_the_explorer_stays_safe_and_is_recorded():
    out = cachedev.explore(writes=2, reads=1, reclaims=2, fault_at=1, unhijack="on-decay")
    assert out["finished"] and out["violations"] == 0 and out["config"]["unhijack"] == "on-decay"
    assert "unhijack" not in cachedev.explore(writes=1, reads=1)["config"]
    dev = CachedDevice(1 << 20, unhijack="on-decay")
    assert dev.unhijack == "on-decay" and dev.tracker.unhijack == "on-decay"
    with pytest.raises(ValueError, match="unhijack must be one of"):
        CachedDevice(1 << 20, unhijack="later")


# -- CLI ---------------------------------------------------------------------------------------------------

@pytest.mark.e2e
def test_cli_explore_detached_and_discard():
    from helpers.clirun import run_pybcache
    out = run_pybcache("explore", "--scenario", "1w1r", "--detached", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["violations"] == 1
    fixed = run_pybcache("explore", "--scenario", "1w1r", "--detached", "--track", "all")
    assert fixed.returncode == 0 and "no violation in any schedule" in fixed.stdout
    disc = run_pybcache("explore", "--scenario", "2w1r", "--writes", "discard", "--json")
    assert json.loads(disc.stdout)["violations"] == 0
    bad = run_pybcache("explore", "--unhijack", "never")
    assert bad.returncode == 2 and "--unhijack" in bad.stderr


# -- the v3 proposal (examples/patches/v3_proposal.c) in the same explorer ---------------------------------------

@pytest.fixture(scope="module")
def v3():
    import pybcache
    from helpers.kpatch_util import EXAMPLES
    return pybcache.load_patch(EXAMPLES / "v3_proposal.c")


@pytest.mark.e2e
def test_the_v3_proposal_counts_discards_and_misses_the_detached_write(v3):
    out = cachedev.explore(sync=v3, writes=2, reads=1, write_kind="discard")
    assert out["finished"] and out["violations"] == 0
    det = cachedev.explore(sync=v3, writes=1, reads=1, detached=True)
    assert det["finished"] and det["violations"] == 1 and det["stale_cache_schedules"] == 1
    assert cachedev.explore(sync=v3, writes=1, reads=1, detached=True, track="all")["violations"] == 0


@pytest.mark.e2e
def test_unhijack_is_a_lab_option_refused_with_a_patch(v3):
    with pytest.raises(ValueError, match="unhijack"):
        cachedev.explore(sync=v3, writes=1, reads=1, unhijack="on-decay")
    with pytest.raises(ValueError, match="unhijack"):
        cachedev.race(sync=v3, seconds=0.1, unhijack="on-decay")
