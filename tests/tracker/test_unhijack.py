"""``unhijack``: when a hijacked page reverts to "no page" - at the end that drains it (the lab's first policy) or
after md's daemon decay (two reclaim passes that find it drained; drivers/md/md-bitmap.c in 6.12). Every test is a
fixed sequence of operations: no thread, no clock."""
from __future__ import annotations

import pytest

from pybcache import BypassWriteTracker, FaultInjection
from pybcache.bcache.experiments.unhijack import unhijack_bursts
from pybcache.units import GiB

SYNCS = ("global", "page", "atomic")
PAGE = 64 * GiB          # one tracking page of 2048 u16 counters (32 MiB chunks)
HALF = PAGE // 2         # a hijacked page counts in two halves


def _hijacked(sync, unhijack, **kw):
    """A tracker whose first page allocation fails (that page is hijacked by the first start)."""
    return BypassWriteTracker(2 * PAGE, sync=sync, counter_bits=16, alloc_failure="hijack", unhijack=unhijack,
                              fault=FaultInjection(probability=1.0, times=1), **kw)


@pytest.mark.parametrize("sync", SYNCS)
def test_at_end_reverts_when_the_last_end_drains_the_page(sync):
    t = _hijacked(sync, "at-end")
    t.start(0, 4096)
    t.start(HALF, 4096)
    assert t.stats()["hijacked_pages"] == 1
    t.end(0, 4096)
    assert t.stats()["hijacked_pages"] == 1          # the other half still counts
    t.end(HALF, 4096)
    assert t.stats()["hijacked_pages"] == 0          # drained: reverted at once
    t.start(0, 4096)                                 # the allocator works again: a page, counted per chunk
    assert t.stats()["pages_allocated"] == 1
    assert t.is_active(0, 4096) and not t.is_active(32 << 20, 4096)
    t.end(0, 4096)


@pytest.mark.parametrize("sync", SYNCS)
def test_on_decay_reverts_only_after_two_daemon_passes_over_the_drained_page(sync):
    t = _hijacked(sync, "on-decay")
    t.start(0, 4096)
    t.reclaim()                                      # a pass while a write is in flight: no decay
    t.end(0, 4096)
    assert t.stats()["hijacked_pages"] == 1          # drained, still hijacked (md keeps it)
    assert not t.is_active(0, 4096)                  # but its halves are zero: nothing reads as active
    t.start(32 << 20, 4096)                          # a start on it counts in the half, never allocates
    assert t.stats()["pages_allocated"] == 0
    assert t.is_active(0, 4096)                      # the coarse half covers chunk 0 too
    t.end(32 << 20, 4096)
    t.reclaim()                                      # first pass: marked (md: 2 -> 1)
    assert t.stats()["hijacked_pages"] == 1
    t.reclaim()                                      # second pass: reverted (md: 1 -> 0, checkfree)
    assert t.stats()["hijacked_pages"] == 0
    t.start(0, 4096)
    assert t.stats()["pages_allocated"] == 1
    assert not t.is_active(32 << 20, 4096)           # per chunk again
    t.end(0, 4096)
    assert t.stats()["underflows"] == 0


@pytest.mark.parametrize("sync", SYNCS)
def test_on_decay_a_start_between_the_passes_restarts_the_decay(sync):
    t = _hijacked(sync, "on-decay")
    t.start(0, 4096)
    t.end(0, 4096)
    t.reclaim()                                      # marked
    t.start(HALF, 4096)                              # md: the counter goes back above 2
    t.end(HALF, 4096)
    t.reclaim()                                      # marks again, does not revert
    assert t.stats()["hijacked_pages"] == 1
    t.reclaim()
    assert t.stats()["hijacked_pages"] == 0
    assert t.stats()["underflows"] == 0 and t.stats()["starts"] == t.stats()["ends"] == 2


@pytest.mark.parametrize("sync", SYNCS)
def test_on_decay_counts_stay_exact_across_the_decay(sync):
    """Writes in flight on both halves while the daemon runs: no pass may revert the page under them."""
    t = _hijacked(sync, "on-decay")
    for k in range(5):
        t.start(k * (32 << 20), 4096)
        t.start(HALF + k * (32 << 20), 4096)
    for _ in range(3):
        t.reclaim()
    assert t.stats()["hijacked_pages"] == 1
    assert t.count(0) == 5 and t.count(HALF) == 5
    for k in range(5):
        t.end(k * (32 << 20), 4096)
        t.end(HALF + k * (32 << 20), 4096)
    assert t.count(0) == 0 and t.stats()["underflows"] == 0


def test_unhijack_bad_input():
    with pytest.raises(ValueError, match=r"unhijack must be one of \('at-end', 'on-decay'\), got 'never'"):
        BypassWriteTracker(PAGE, unhijack="never")
    with pytest.raises(TypeError, match="unhijack must be a str"):
        BypassWriteTracker(PAGE, unhijack=1)
    assert BypassWriteTracker(PAGE).unhijack == "at-end"


def test_the_bursts_experiment_shows_what_the_decay_costs_after_the_fault():
    """One failed allocation in the first burst. at-end: the bursts after it bypass exactly as the clean run
    does. on-decay with one daemon pass between bursts: the page never reverts (each burst's first start
    clears the mark), so every later burst runs on the hijacked page; with two passes it is at-end again."""
    kw = dict(bursts=3, ops=4000, depth=160, seed=3)
    at_end = unhijack_bursts("at-end", passes=1, **kw)
    one = unhijack_bursts("on-decay", passes=1, **kw)
    two = unhijack_bursts("on-decay", passes=2, **kw)
    assert at_end["bypasses_without_fault"] == one["bypasses_without_fault"] == two["bypasses_without_fault"]
    assert at_end["ratio_during"] == one["ratio_during"] > 5          # the faulted burst: hijacked under both
    assert at_end["ratio_after"] == 1.0 and two["ratio_after"] == 1.0
    assert one["ratio_after"] > 5
    assert one["hijacked_after_burst"] == [1, 1, 1] and two["hijacked_after_burst"] == [0, 0, 0]
    assert one["pages_allocated"] == 0 and two["pages_allocated"] == at_end["pages_allocated"] == 2
    with pytest.raises(ValueError, match="passes must be"):
        unhijack_bursts("on-decay", passes=17)


def test_bursts_whose_clean_run_bypassed_nothing_give_no_ratio_instead_of_a_division_by_zero():
    # one write per burst, one write in flight: no check of the clean bursts lands on the write's chunk
    r = unhijack_bursts("at-end", ops=1, depth=1, bursts=2)
    assert r["bypasses_without_fault"] == [0, 0] and r["bypasses_with_fault"][0] == 1   # hijacked: a whole half
    assert (r["ratio_during"], r["ratio_after"]) == (None, None)
    assert r["ratio_not_measured"] == "not measured: 0 bypasses in the run without the fault"
    assert unhijack_bursts("at-end", passes=1, bursts=3, ops=4000)["ratio_not_measured"] is None


@pytest.mark.native
@pytest.mark.xdist_group("native-threads")
@pytest.mark.parametrize("sync", SYNCS)
def test_on_decay_under_threads_and_a_racing_daemon_loses_no_count(sync):
    """Two writers and their completion threads on two hijack-prone pages while writer 0 runs the daemon every
    16 writes: whatever the interleaving, no end finds a zero counter and every counter is 0 at the end."""
    from pybcache import stress
    t = BypassWriteTracker(2 * PAGE, sync=sync, counter_bits=16, alloc_failure="hijack", unhijack="on-decay",
                           fault=FaultInjection(probability=0.5, seed=7))
    stress(t, threads=2, ops=20_000, depth=8, write_length=64 << 20, reclaim_every=16, seed=11)
    s = t.stats()
    assert s["hijack_events"] > 0 and s["underflows"] == 0 and s["starts"] == s["ends"] == 40_000
    assert not t.counts().any()
    t.reclaim()
    t.reclaim()
    assert t.stats()["hijacked_pages"] == 0


def test_the_module_command_line_refuses_a_bad_value_in_one_line(capsys):
    from pybcache.bcache.experiments import unhijack
    assert unhijack.main(["--ops", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ops must be in [160," in err and "Traceback" not in err
