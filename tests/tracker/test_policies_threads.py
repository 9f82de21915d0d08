"""Allocation-failure and overflow policies under concurrency (issue 3).

One idiom throughout: a ``threading.Barrier`` start, N workers on one shared tracker, invariants
asserted at quiescence. Python workers use the batch calls, whose loops run in C without the GIL, so
they really overlap; the native pthread stress (:func:`pybcache.stress`) reaches the interleavings
Python threads cannot, with a thread calling ``reclaim`` racing the others.
"""
from __future__ import annotations

import _thread
import threading
import time
from collections.abc import Callable

import numpy as np
import pytest

import pybcache
from pybcache import BypassWriteTracker, FaultInjection

pytestmark = [pytest.mark.native, pytest.mark.xdist_group("native-threads")]

MiB = pybcache.MiB
CHUNK = 512                   # small chunks: 1 MiB per u16 page, many pages on a small device
SIZE = 64 * MiB               # 64 u16 pages, 256 u64 pages
VARIANTS = [("global", 16), ("page", 16), ("atomic", 64), ("atomic", 16)]
POLICIES = ("untracked", "hijack", "pool")
PROBABILITIES = (0.001, 0.5, 1.0)
JOIN_TIMEOUT_S = 30


def run_together(workers: list[Callable[[], None]], background: list[Callable[[threading.Event], None]] = ()):
    """Start every worker at one barrier; background workers run until the others finish. Re-raises
    the first exception of any thread; a thread still running after the timeout is a deadlock."""
    barrier = threading.Barrier(len(workers) + len(background))
    stop = threading.Event()
    errors: list[BaseException] = []

    def guarded(fn, *args):
        def run():
            barrier.wait()
            try:
                fn(*args)
            except BaseException as exc:  # noqa: BLE001 - reported by the main thread
                errors.append(exc)
                stop.set()
        return threading.Thread(target=run, daemon=True)

    fore = [guarded(fn) for fn in workers]
    back = [guarded(fn, stop) for fn in background]
    for th in fore + back:
        th.start()
    deadline = time.monotonic() + JOIN_TIMEOUT_S  # one deadline for all: a hang fails in bounded time
    for th in fore:
        th.join(max(0.0, deadline - time.monotonic()))
    stop.set()
    for th in back:
        th.join(max(0.1, deadline - time.monotonic()))
    assert not any(th.is_alive() for th in fore + back), "a worker never finished (deadlock or lost wake-up)"
    if errors:
        raise errors[0]


def tracker(variant, policy, probability, seed=0, **kw) -> BypassWriteTracker:
    sync, bits = variant
    return BypassWriteTracker(SIZE, chunk_size=CHUNK, sync=sync, counter_bits=bits, alloc_failure=policy,
                              pool_pages=4 if policy == "pool" else 0,
                              fault=FaultInjection(probability=probability, seed=seed), **kw)


def assert_quiescent(t: BypassWriteTracker, policy: str, starts: int) -> None:
    """The invariants every policy keeps once every write has ended."""
    s = t.stats()
    assert s["starts"] == s["ends"] == starts
    assert t.counts().sum() == 0, "a counter is non-zero with no write in flight"
    assert s["alloc_failures"] == t.fault.injected, "every injected failure is counted once"
    assert s["hijacked_pages"] == 0, "a hijacked page with both halves zero must revert"
    t.reclaim()
    m = t.memory()
    assert m["pages"] == 0 and t.stats()["pool_pages_used"] == 0
    assert m["page_bytes"] == 4096 * t.pool_pages, "every page went back to the allocator or the pool"
    if policy == "untracked":
        assert s["hijack_events"] == 0
        # each write covers one chunk, so each untracked write's blind end is refused exactly once,
        # either at once or later as the victim of the increment it stole
        assert s["underflows"] == s["untracked_writes"]
        assert s["untracked_writes"] <= s["alloc_failures"]
        if t.sync == "atomic":
            assert s["untracked_writes"] == s["alloc_failures"]  # no re-check can rescue a failure
        # (for the lock variants an injected failure can be absorbed: another thread installs the page
        # while this one allocates with the lock dropped, and the re-check takes that page)
    else:
        assert s["underflows"] == 0 and s["untracked_writes"] == 0
        assert s["hijack_events"] <= s["alloc_failures"]  # (>= 1 is not guaranteed: see above)


# -- Python threads: batch calls overlap in C -------------------------------------------------------------


@pytest.mark.parametrize("probability", PROBABILITIES)
@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: f"{v[0]}-u{v[1]}")
def test_threads_with_faults_keep_every_tracked_write_visible_and_end_at_zero(variant, policy, probability):
    t = tracker(variant, policy, probability, seed=17)
    n_workers, rounds, batch = 4, 150, 8
    invisible = []

    def writer(seed):
        rng = np.random.default_rng(seed)
        previous = None  # two batches in flight per worker: this round's and the last one's
        for _ in range(rounds):
            # four hot chunks per page, so that writes share chunks and pages come and go
            offs = (rng.integers(0, t.n_pages, batch) * t.chunks_per_page + rng.integers(0, 4, batch)) * CHUNK
            tracked = t.start_many(offs, 1)
            if policy != "untracked":
                assert tracked.all()
                # a tracked write in flight must be visible to a read miss until it ends
                in_flight = offs if previous is None else np.concatenate([offs, previous])
                seen = t.is_active_many(in_flight, 1)
                if not seen.all():
                    invisible.append(int(in_flight[~seen][0]))
            if previous is not None:
                t.end_many(previous, 1)
            previous = offs
        t.end_many(previous, 1)

    def reclaimer(stop):
        while not stop.is_set():
            t.reclaim()
            time.sleep(0)

    run_together([lambda s=s: writer(s) for s in range(n_workers)], [reclaimer])
    assert invisible == [], f"tracked writes in flight were invisible at offsets {invisible[:5]}"
    assert_quiescent(t, policy, n_workers * rounds * batch)
    if probability == 1.0:
        assert t.fault.injected > 0


@pytest.mark.parametrize("storage", ["page", "hijacked"])
@pytest.mark.parametrize("variant", [("global", 16), ("page", 16), ("atomic", 16)], ids=lambda v: v[0])
def test_writers_contending_for_a_full_counter_under_wait_lose_no_count(variant, storage):
    """Three slots of room on a u16 counter held near its maximum, six writers: most starts wait for
    an end, every waiter is woken, and the count afterwards is exactly what was held."""
    sync, bits = variant
    fault = FaultInjection(probability=1.0) if storage == "hijacked" else None
    t = BypassWriteTracker(SIZE, chunk_size=CHUNK, sync=sync, counter_bits=bits, overflow="wait",
                           alloc_failure="hijack", fault=fault)
    held = 65535 - 3
    assert t.start_many(np.zeros(held, dtype=np.int64), 1).all()
    n_workers, rounds = 6, 300
    lost = []

    def writer():
        for _ in range(rounds):
            assert t.start(0, 1)
            v = t.count(0)
            if not held < v <= 65535:
                lost.append(v)
            time.sleep(0)  # hold the write while the others run
            t.end(0, 1)

    def waiter_count_batch():  # a batch writer too: blocks per element, without the GIL
        for _ in range(rounds // 10):
            t.start_many(np.zeros(1, dtype=np.int64), 1)
            t.end_many(np.zeros(1, dtype=np.int64), 1)

    run_together([writer] * n_workers + [waiter_count_batch])
    s = t.stats()
    assert lost == [], f"counter outside (held, 65535] while this thread's write was in flight: {lost[:5]}"
    assert t.count(0) == held
    assert s["underflows"] == s["overflow_wraps"] == s["overflow_clamps"] == 0
    assert s["overflow_waits"] >= 1
    t.end_many(np.zeros(held, dtype=np.int64), 1)
    assert t.counts().sum() == 0 and t.stats()["underflows"] == 0


@pytest.mark.parametrize("sync", ["global", "page", "atomic"])
def test_a_blocked_writer_sleeps_instead_of_spinning(sync):
    """The writer's start finds chunk 0 at its maximum and waits about 0.5 s for the end; it must use
    almost no CPU meanwhile. The tracker's overflow_waits == 1 shows the start really waited: a writer
    that reached start() only after the end would measure nothing, so that attempt is run again."""
    for _attempt in range(5):
        t = BypassWriteTracker(SIZE, sync=sync, counter_bits=16, overflow="wait")
        t.start_many(np.zeros(65535, dtype=np.int64), 1)
        cpu = []

        def writer():
            c0 = time.thread_time()
            t.start(0, 1)
            cpu.append(time.thread_time() - c0)

        th = threading.Thread(target=writer, daemon=True)
        th.start()
        time.sleep(0.5)
        assert th.is_alive()
        t.end(0, 1)
        th.join(10)
        assert not th.is_alive() and len(cpu) == 1
        if t.stats()["overflow_waits"] == 1:
            break
    else:
        pytest.fail("in 5 attempts the writer never reached its start before the end: nothing was measured")
    assert cpu[0] < 0.1, f"the blocked writer used {cpu[0]:.3f} s of CPU in 0.5 s: it spins"


@pytest.mark.parametrize("sync", ["global", "page", "atomic"])
def test_a_mempool_writer_waits_for_the_page_another_thread_frees(sync):
    """Every allocation fails; the reserve's one page is in use. The second writer waits (GIL released)
    until the first write ends and its page (freed eagerly, or by reclaim for atomic) refills the
    reserve: it is then tracked on that page, with no hijack and nothing untracked. (Should the end
    come first, the writer takes the refilled page without waiting: the same outcome.)"""
    t = BypassWriteTracker(2 * 2048 * 32 * MiB, sync=sync, counter_bits=16, alloc_failure="mempool",
                           pool_pages=1, fault=FaultInjection(probability=1.0), wait_timeout=JOIN_TIMEOUT_S)
    page = 2048 * 32 * MiB
    assert t.start(0, 4096)
    waiting = threading.Event()
    results: list[bool] = []

    def ender(stop: threading.Event) -> None:
        waiting.wait(JOIN_TIMEOUT_S)
        stop.wait(0.1)  # usually the writer is asleep by now; either order must give the same outcome
        while not results and not stop.is_set():
            if t.is_active(0, 4096):
                t.end(0, 4096)
            t.reclaim()
            stop.wait(0.01)

    def writer() -> None:
        waiting.set()
        results.append(t.start(page, 4096))

    run_together([writer], [ender])
    s = t.stats()
    assert results == [True] and t.count(page) == 1 and t.count(0) == 0
    assert (s["pool_refills"], s["hijack_events"], s["untracked_writes"]) == (1, 0, 0)
    assert s["mempool_waits"] <= 1 and s["alloc_failures"] == t.fault.injected


# -- native pthreads: the interleavings Python threads cannot reach ---------------------------------------


def native_stress(t: BypassWriteTracker, timeout: float = JOIN_TIMEOUT_S, **kw) -> dict:
    """pybcache.stress from a watcher thread, so that a livelock fails the test instead of hanging it."""
    out: list = []
    watcher = threading.Thread(target=lambda: out.append(pybcache.stress(t, **kw)), daemon=True)
    watcher.start()
    watcher.join(timeout)
    assert not watcher.is_alive(), f"the native stress did not finish in {timeout} s (livelock or deadlock)"
    assert out, "the native stress raised"
    return out[0]


@pytest.mark.parametrize("policy", POLICIES)
def test_users_entering_a_slot_while_reclaim_holds_it_never_wedge_it(policy):
    """Atomic variant: a user that enters a slot while a reclaimer holds it DEAD undoes its entry
    afterwards; the reclaimer's release must not erase that pending entry, or the slot reads DEAD for
    ever (every later user waits: a livelock) or idle while a user is inside (a page freed under it).
    Every page keeps one write in flight on its last chunk, so each reclaim pass holds every idle slot
    for a whole page scan while native threads and a Python thread keep entering and reclaiming."""
    t = BypassWriteTracker(SIZE, chunk_size=CHUNK, sync="atomic", counter_bits=16, alloc_failure=policy,
                           pool_pages=4 if policy == "pool" else 0,
                           fault=FaultInjection(probability=0.01, seed=4))
    last_chunks = (np.arange(t.n_pages) * t.chunks_per_page + t.chunks_per_page - 1) * CHUNK
    t.start_many(last_chunks, 1)
    stop = threading.Event()

    def reclaimer():
        while not stop.is_set():
            t.reclaim()

    th = threading.Thread(target=reclaimer, daemon=True)
    th.start()
    try:
        res = native_stress(t, timeout=30, threads=4, seconds=1.0, region=(0, 8 * MiB), write_length=1,
                            depth=1, reclaim_every=1, seed=1)
    finally:
        stop.set()
        th.join(JOIN_TIMEOUT_S)
    t.end_many(last_chunks, 1)
    assert_quiescent(t, policy, res["ops"] + t.n_pages)


@pytest.mark.parametrize("probability", PROBABILITIES)
@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: f"{v[0]}-u{v[1]}")
def test_native_threads_with_faults_and_reclaim_end_at_exactly_zero(variant, policy, probability):
    t = tracker(variant, policy, probability, seed=3)
    threads, ops = 4, 20000
    # one-byte writes: each covers one chunk, so every untracked write is exactly one refused end
    res = native_stress(t, threads=threads, ops=ops, write_length=1, depth=2, reclaim_every=16, seed=5)
    assert res["ops"] == threads * ops
    untracked = sum(p["untracked"] for p in res["per_thread"])
    assert untracked == t.stats()["untracked_writes"]
    assert t.fault.injected > 0, "the run must actually inject failures"
    assert_quiescent(t, policy, threads * ops)


@pytest.mark.parametrize("policy", ["hijack", "pool"])
@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: f"{v[0]}-u{v[1]}")
def test_native_threads_with_writes_across_pages_keep_hijack_and_pool_exact(variant, policy):
    t = tracker(variant, policy, 0.5, seed=9)
    # 1.5 MiB writes span two or three pages and, on a hijacked page, one or both halves
    res = native_stress(t, threads=4, ops=5000, write_length=3 * MiB // 2, depth=3, reclaim_every=8, seed=2)
    assert res["ops"] == 20000 and t.fault.injected > 0
    assert_quiescent(t, policy, 20000)


# -- the native drivers under overflow="wait": completions on threads of their own, bounded waits ---------

U16_MAX = 65535


def assert_balanced(t: BypassWriteTracker, held: int = 0) -> None:
    """At quiescence: every counter back to what the test itself holds, every start ended."""
    s = t.stats()
    assert int(t.counts().sum()) == held
    assert s["starts"] == s["ends"] + held
    assert s["underflows"] == s["overflow_wraps"] == s["overflow_clamps"] == 0


@pytest.mark.parametrize("sync", ["global", "page", "atomic"])
def test_17_threads_at_depth_4096_on_one_u16_chunk_complete_under_wait(sync):
    """The issue's deadlock: 17 x 4096 writes in flight need more than a u16 counter's 65,535. Starts
    that find the counter full wait while the completion threads keep ending writes."""
    t = BypassWriteTracker(MiB, chunk_size=MiB, sync=sync, counter_bits=16, overflow="wait")
    res = native_stress(t, threads=17, depth=4096, ops=12_000, write_length=4096, seed=1)
    assert res["ops"] == 17 * 12_000 and res["completions"] == "thread"
    for p in res["per_thread"]:
        assert p["starts"] == p["ends"] == 12_000
    assert_balanced(t)
    assert t.stats()["starts"] == 17 * 12_000
    assert t.stats()["overflow_waits"] == sum(p["blocked_starts"] for p in res["per_thread"])


def hold_counter(t: BypassWriteTracker, offset: int, count: int) -> np.ndarray:
    offs = np.full(count, offset, dtype=np.int64)
    assert t.start_many(offs, 1).all()
    assert t.count(offset) == count
    return offs


@pytest.mark.parametrize("sync", ["global", "page", "atomic"])
def test_a_thread_with_more_writes_in_flight_than_room_completes_with_completion_threads(sync):
    """100 slots of room, one thread keeping 4,096 writes in flight: its 101st start must wait, and only
    an end of one of its own writes can make room, which its completion thread does."""
    t = BypassWriteTracker(MiB, chunk_size=MiB, sync=sync, counter_bits=16, overflow="wait")
    held = hold_counter(t, 0, U16_MAX - 100)
    res = native_stress(t, threads=1, depth=4096, ops=5_000, write_length=4096, seed=2, wait_timeout=30)
    p = res["per_thread"][0]
    assert p["starts"] == p["ends"] == 5_000
    assert p["blocked_starts"] >= 1, "the 101st start found the counter full"
    assert_balanced(t, held=held.size)
    t.end_many(held, 1)
    assert_balanced(t)


@pytest.mark.parametrize("sync", ["global", "page", "atomic"])
def test_the_same_thread_ending_its_own_writes_holds_them_hostage_and_times_out(sync):
    """The unsafe driver (completions="inline", the one before completion threads): the blocked start
    waits for ends only its own thread could make, so the wait runs out, names the chunk, and the run
    is unwound: no count of the driver's is left behind."""
    t = BypassWriteTracker(MiB, chunk_size=MiB, sync=sync, counter_bits=16, overflow="wait")
    held = hold_counter(t, 0, U16_MAX - 100)
    with pytest.raises(TimeoutError, match=r"chunk 0 \(bytes \[0, 1048576\)\)"):
        pybcache.stress(t, threads=1, depth=4096, ops=5_000, write_length=4096, seed=2, wait_timeout=0.2,
                        completions="inline")
    assert_balanced(t, held=held.size)
    t.end_many(held, 1)
    assert_balanced(t)


@pytest.mark.parametrize("sync", ["global", "page", "atomic"])
def test_a_start_that_waits_past_wait_timeout_raises_naming_the_chunk_and_rolls_back(sync):
    """Chunk 1 held at its maximum by the test itself; every write covers chunks 0 and 1, so each
    start counts chunk 0 and then waits on chunk 1. Past wait_timeout the run stops: TimeoutError names
    chunk 1, and chunk 0's increments of the abandoned starts are undone."""
    t = BypassWriteTracker(2 * MiB, chunk_size=MiB, sync=sync, counter_bits=16, overflow="wait")
    held = hold_counter(t, MiB, U16_MAX)
    with pytest.raises(TimeoutError, match=r"chunk 1 \(bytes \[1048576, 2097152\)\)") as info:
        pybcache.stress(t, threads=3, ops=100, write_length=2 * MiB, depth=4, wait_timeout=0.1)
    assert "wait_timeout=0.1" in str(info.value)
    assert t.count(0) == 0, "a start's increment of chunk 0 was left behind"
    assert_balanced(t, held=held.size)
    assert t.stats()["overflow_waits"] >= 1
    t.end_many(held, 1)
    assert_balanced(t)


@pytest.mark.parametrize("sync", ["global", "page", "atomic"])
def test_a_stress_start_left_without_a_mempool_page_times_out_naming_the_page_wait(sync):
    """Every allocation fails and the reserve's one page goes to page 0 of a write that crosses into
    page 1: the start waits for a page nobody frees. Past wait_timeout the TimeoutError says it waited
    for a mempool page for page 1's first chunk (not for a counter's maximum), page 0's increment is
    rolled back, and the tracker counted one mempool wait and no overflow wait."""
    page = 2048 * 4096
    t = BypassWriteTracker(2 * page, chunk_size=4096, sync=sync, counter_bits=16, alloc_failure="mempool",
                           pool_pages=1, fault=FaultInjection(probability=1.0))
    pattern = rf"a tracking page for chunk 2048 \(bytes \[{page}, {page + 4096}\)\)"
    with pytest.raises(TimeoutError, match=pattern) as info:
        pybcache.stress(t, threads=1, ops=10, region=(page - 4096, 8192), write_length=8192, wait_timeout=0.1)
    assert 'alloc_failure="mempool"' in str(info.value) and "maximum" not in str(info.value)
    assert_balanced(t)
    s = t.stats()
    assert (s["mempool_waits"], s["overflow_waits"]) == (1, 0)


def test_the_driver_takes_a_numpy_wait_timeout_as_the_tracker_does():
    t = BypassWriteTracker(MiB, chunk_size=MiB, wait_timeout=np.float64(2.5))
    assert t.wait_timeout == 2.5
    assert pybcache.stress(t, threads=1, ops=10, wait_timeout=np.float32(0.5))["wait_timeout"] == 0.5
    assert pybcache.stress(t, threads=1, ops=10, wait_timeout=np.int64(3))["wait_timeout"] == 3.0


@pytest.mark.parametrize("bad", [np.timedelta64(1, "s"), "1", True, 0, -1.0, float("nan"), 1e7],
                         ids=["timedelta64", "str", "bool", "zero", "negative", "nan", "over-1e6"])
def test_the_tracker_and_the_driver_refuse_a_bad_wait_timeout_alike(bad):
    """One check of wait_timeout: the same exception and message from the constructor and the driver."""
    with pytest.raises((TypeError, ValueError)) as from_tracker:
        BypassWriteTracker(MiB, chunk_size=MiB, wait_timeout=bad)
    t = BypassWriteTracker(MiB, chunk_size=MiB)
    with pytest.raises(type(from_tracker.value)) as from_driver:
        pybcache.stress(t, threads=1, ops=10, wait_timeout=bad)
    assert str(from_driver.value) == str(from_tracker.value)
    assert "wait_timeout" in str(from_tracker.value)
    assert t.stats()["starts"] == 0


def test_without_wait_timeout_the_driver_takes_the_trackers_or_10_seconds():
    t = BypassWriteTracker(MiB, chunk_size=MiB)
    assert pybcache.stress(t, threads=1, ops=10)["wait_timeout"] == getattr(t, "wait_timeout", 10.0)
    assert pybcache.stress(t, threads=1, ops=10, wait_timeout=2.5)["wait_timeout"] == 2.5


@pytest.mark.parametrize("bad, exc", [(0, ValueError), (-1.0, ValueError), (float("nan"), ValueError),
                                      (float("inf"), ValueError), ("1", TypeError), (True, TypeError)])
def test_a_bad_wait_timeout_is_refused_before_anything_runs(bad, exc):
    t = BypassWriteTracker(MiB, chunk_size=MiB)
    with pytest.raises(exc, match="wait_timeout"):
        pybcache.stress(t, threads=1, ops=10, wait_timeout=bad)
    assert t.stats()["starts"] == 0


@pytest.mark.parametrize("blocked", [False, True], ids=["running", "blocked-on-a-full-counter"])
def test_ctrl_c_stops_the_native_run_and_leaves_nothing_half_applied(blocked):
    """KeyboardInterrupt arrives while the call waits for its threads (here from a timer thread, as
    Ctrl-C would): the run stops, every write ends, and the exception reaches the caller. Without the
    interrupt the call would run for a minute and return normally, failing the test."""
    t = BypassWriteTracker(2 * MiB, chunk_size=MiB, counter_bits=16, overflow="wait")
    held = hold_counter(t, MiB, U16_MAX) if blocked else np.zeros(0, dtype=np.int64)
    timer = threading.Timer(0.3, _thread.interrupt_main)
    try:
        with pytest.raises(KeyboardInterrupt):   # armed inside: an early interrupt is still expected here
            timer.start()
            pybcache.stress(t, threads=2, seconds=60, write_length=4096 if not blocked else 2 * MiB,
                            depth=8, wait_timeout=60)
    finally:
        timer.cancel()
    assert t.count(0) == 0
    assert_balanced(t, held=held.size)
