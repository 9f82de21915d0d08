"""mempool as Linux 6.12 has it (mm/mempool.c:404-470, 518-569; docs/design-answers.md, "mempool as the
kernel has it"): the attempts in order, waiting counted in rounds, a wake only while the reserve is below
min_nr (``pool_pages``), none ever with min_nr 0, and NULL under a mask without direct reclaim.

Every count here is deterministic: one thread, or a second one whose progress is read from the fault
injection's count before the first acts. No assertion is on a duration."""
from __future__ import annotations

import logging
import threading
import time

import pytest

from pybcache.bcache._tracker import BypassWriteTracker, FaultInjection
from pybcache.bcache.reference import BypassWriteTracker as Reference, FaultInjection as RefFault
from pybcache.units import GiB, MiB

CHUNK = 32 * MiB
PAGE_SPAN = 2048 * CHUNK  # one tracking page of u16 counters covers 64 GiB


@pytest.fixture(autouse=True)
def _quiet(monkeypatch):
    log = logging.getLogger("pybcache")  # untracked writes warn; these tests count them
    monkeypatch.setattr(log, "level", logging.ERROR)


def _mempool(fails, *, pool_pages=0, gfp="noio", round_s=0.001, size=GiB, sync="page"):
    f = FaultInjection(probability=1.0, times=fails)
    return BypassWriteTracker(size, sync=sync, alloc_failure="mempool", pool_pages=pool_pages, gfp=gfp,
                              fault=f, mempool_round=round_s), f


@pytest.mark.parametrize("sync", ["global", "page", "atomic"])
@pytest.mark.parametrize("fails, rounds", [(1, 0), (2, 1), (3, 2), (6, 5)])
def test_a_sleeping_mempool_makes_two_attempts_then_one_per_whole_round(sync, fails, rounds):
    """Attempts 1 and 2 (without, then with reclaim) come before any wait; each later attempt follows one
    round that ran its whole length (nothing is freed: one thread), so ``fails`` failures cost
    ``fails - 1`` rounds and the next attempt gets the page."""
    t, f = _mempool(fails, sync=sync)
    assert t.start(0, 4096) is True
    s = t.stats()
    assert f.injected == fails == s["alloc_failures"]
    assert (s["mempool_rounds"], s["mempool_wakeups"], s["mempool_nulls"]) == (rounds, 0, 0)
    assert s["mempool_waits"] == (1 if rounds else 0)
    assert (s["pages_allocated"], s["untracked_writes"], s["hijack_events"]) == (1, 0, 0)
    assert t.count(0) == 1


@pytest.mark.parametrize("fails", [1, 2, 5])
def test_the_reference_model_counts_the_same_rounds(fails):
    ref = Reference(GiB, alloc_failure="mempool", fault=RefFault(probability=1.0, times=fails))
    t, _ = _mempool(fails)
    assert ref.start(0, 4096) == t.start(0, 4096) is True
    want = {k: t.stats()[k] for k in ("alloc_failures", "mempool_rounds", "mempool_wakeups", "mempool_nulls",
                                      "mempool_waits")}
    assert {k: ref.stats()[k] for k in want} == want


def test_the_reserve_comes_between_the_attempts_so_min_nr_1_never_waits():
    """Attempt 1 fails, the reserve has a page: no second attempt, no round."""
    t, f = _mempool(5, pool_pages=1)
    assert t.start(0, 4096) is True
    s = t.stats()
    assert (f.injected, s["mempool_rounds"], s["mempool_waits"], s["pool_pages_used"]) == (1, 0, 0, 1)


@pytest.mark.parametrize("pool_pages", [0, 1, 8])
def test_a_nowait_mask_returns_null_after_one_attempt_and_the_reserve(pool_pages):
    """No __GFP_DIRECT_RECLAIM: mempool_alloc makes one attempt, takes the reserve if it holds a page, and
    otherwise returns NULL at once (mm/mempool.c:444-454): the page is left untracked, nothing waits."""
    t, f = _mempool(100, pool_pages=pool_pages, gfp="nowait", round_s=60.0)
    tracked = t.start(0, 4096)
    s = t.stats()
    assert f.injected == 1 == s["alloc_failures"]
    assert (s["mempool_rounds"], s["mempool_waits"]) == (0, 0)
    if pool_pages:
        assert tracked is True and s["mempool_nulls"] == 0 and t.count(0) == 1
    else:
        assert tracked is False and s["mempool_nulls"] == 1 == s["untracked_writes"] and t.count(0) == 0
    ref = Reference(GiB, alloc_failure="mempool", pool_pages=pool_pages, gfp="nowait",
                    fault=RefFault(probability=1.0, times=100))
    assert ref.start(0, 4096) is tracked
    assert {k: ref.stats()[k] for k in ("mempool_nulls", "untracked_writes")} == \
        {k: s[k] for k in ("mempool_nulls", "untracked_writes")}


def test_a_free_refills_and_wakes_only_while_the_reserve_is_below_min_nr():
    """min_nr 1. A page from the allocator freed while the reserve is full goes back to the allocator (no
    refill); the reserve's own page, freed after the reserve was emptied, refills it."""
    t, f = _mempool(1, pool_pages=1)
    t2 = BypassWriteTracker(2 * PAGE_SPAN, alloc_failure="mempool", pool_pages=1, fault=f)
    t = t2
    t.start(0, 4096)                 # attempt 1 fails: the reserve's page
    t.start(PAGE_SPAN, 4096)         # page 1 from the allocator (the fault is spent)
    t.end(PAGE_SPAN, 4096)           # the reserve is empty (below min_nr): this page refills it
    s = t.stats()
    assert (s["pool_refills"], s["pages_freed"]) == (1, 0)
    t.end(0, 4096)                   # the reserve is full again: to the allocator
    s = t.stats()
    assert (s["pool_refills"], s["pages_freed"]) == (1, 1)


def _wait_for(pred, what):
    deadline = time.monotonic() + 60.0  # a bound for a stalled machine, not a timing assertion
    while not pred():
        assert time.monotonic() < deadline, f"never saw {what}"
        time.sleep(0.001)


@pytest.mark.xdist_group("native-threads")
def test_with_min_nr_0_a_free_never_wakes_the_waiter_its_rounds_run_out():
    """Two pages, min_nr 0. A's page 0 comes from the allocator (the fault's ``space`` lets the first
    allocation through); B's start on page 1 fails both attempts and waits. A's end frees page 0, which
    does not go to the reserve (it is not below min_nr 0), so nothing wakes B: its page comes from the
    attempt after one whole round, whenever the free happened."""
    f = FaultInjection(probability=1.0, times=2, space=2 * 4096)  # the first 4 KiB allocation passes
    t = BypassWriteTracker(2 * PAGE_SPAN, alloc_failure="mempool", fault=f, mempool_round=0.05)
    t.start(0, 4096)
    assert (f.injected, t.stats()["pages_allocated"]) == (0, 1)
    done = threading.Event()
    th = threading.Thread(target=lambda: (t.start(PAGE_SPAN, 4096), done.set()), daemon=True)
    th.start()
    _wait_for(lambda: f.injected >= 1, "B's first attempt")
    t.end(0, 4096)                                     # frees page 0: no refill under min_nr 0
    th.join(60.0)
    assert done.is_set()
    s = t.stats()
    assert (s["pool_refills"], s["mempool_wakeups"], s["mempool_rounds"]) == (0, 0, 1)
    assert (s["pages_freed"], s["pages_allocated"], s["alloc_failures"]) == (1, 2, 2)


@pytest.mark.xdist_group("native-threads")
def test_with_min_nr_1_a_free_into_the_empty_reserve_wakes_the_waiter_before_its_round_ends():
    """min_nr 1, every allocation failing: A takes the reserve's page for page 0; B's start on page 1 fails
    both attempts, finds the reserve empty and waits (a 60 s round). A's end frees page 0 into the
    reserve (below min_nr): that wakes B, which takes it. No round ran its length."""
    f = FaultInjection(probability=1.0, times=-1)
    t = BypassWriteTracker(2 * PAGE_SPAN, alloc_failure="mempool", pool_pages=1, fault=f, mempool_round=60.0,
                           wait_timeout=120.0)
    t.start(0, 4096)
    assert f.injected == 1 and t.stats()["pool_pages_used"] == 1
    done = threading.Event()
    th = threading.Thread(target=lambda: (t.start(PAGE_SPAN, 4096), done.set()), daemon=True)
    th.start()
    _wait_for(lambda: f.injected >= 3, "B's two attempts")  # B is now registering or asleep
    time.sleep(0.2)  # let it reach the sleep (if it has not, it finds the page on its re-check instead)
    assert not done.is_set()
    t.end(0, 4096)
    th.join(60.0)
    assert done.is_set()
    s = t.stats()
    assert s["pool_refills"] == 1 and s["mempool_rounds"] == 0
    assert s["mempool_wakeups"] == 1
    # B's attempts 1 and 2, and the one after the wake (goto repeat_alloc: the allocator before the reserve);
    # the Python layer's 50 ms slices of the 60 s round added none (a resume sleeps the rest of its round)
    assert f.injected == 4
    assert t.count(PAGE_SPAN) == 1


def test_mempool_options_are_checked():
    with pytest.raises(ValueError, match=r"gfp must be one of \('noio', 'nowait'\), got 'atomic'"):
        BypassWriteTracker(GiB, gfp="atomic")
    with pytest.raises(ValueError, match=r"gfp='nowait' needs alloc_failure='mempool', got alloc_failure='hijack'"):
        BypassWriteTracker(GiB, alloc_failure="hijack", gfp="nowait")
    with pytest.raises(TypeError, match=r"gfp must be a str"):
        BypassWriteTracker(GiB, gfp=1)
    with pytest.raises(ValueError, match=r"mempool_round must be in \(0, 60\] seconds, got 0"):
        BypassWriteTracker(GiB, mempool_round=0)
    with pytest.raises(TypeError, match=r"mempool_round must be a number of seconds or None, got bool"):
        BypassWriteTracker(GiB, mempool_round=True)
    t = BypassWriteTracker(GiB)
    assert (t.gfp, t.mempool_round) == ("noio", 0.001)
    assert "gfp='noio', mempool_round=0.001" in repr(t)
