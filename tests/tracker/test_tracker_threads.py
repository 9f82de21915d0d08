"""Concurrency: N workers on one shared tracker, invariants checked at quiescence.

Python threads drive the batch API (whose loops run in C without the GIL, so they really overlap);
the native driver starts pthreads from C for what Python threads cannot reach.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

import pybcache
from pybcache import BypassWriteTracker

pytestmark = [pytest.mark.native, pytest.mark.xdist_group("native-threads")]

GiB, MiB = pybcache.GiB, pybcache.MiB
THREADS = 4


def _quiescent(t: BypassWriteTracker) -> None:
    assert int(t.counts().sum()) == 0
    s = t.stats()
    assert s["underflows"] == 0
    assert s["starts"] == s["ends"]
    t.reclaim()
    m = t.memory()
    assert m["pages"] == 0 and m["page_bytes"] == 0
    assert s["pages_allocated"] == t.stats()["pages_freed"]


def _run(workers) -> None:
    errors: list[BaseException] = []

    def wrap(fn):
        def inner():
            try:
                fn()
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)
        return inner

    threads = [threading.Thread(target=wrap(w)) for w in workers]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=60)
        assert not th.is_alive(), "worker hung"
    assert not errors, errors


@pytest.mark.parametrize("sync", ["global", "page", "atomic"])
def test_python_threads_on_the_batch_api_leave_every_counter_at_zero(sync):
    t = BypassWriteTracker(3 * 64 * GiB, sync=sync, counter_bits=16)
    barrier = threading.Barrier(THREADS + 1)

    def writer(seed: int):
        def body():
            rng = np.random.default_rng(seed)
            barrier.wait()
            for _ in range(30):
                offs = rng.integers(0, t.device_size - MiB, 2000)
                lens = rng.integers(1, MiB, 2000)
                assert t.start_many(offs, lens).all()
                assert t.is_active_many(offs, 1).all()  # our own writes are still in flight
                t.end_many(offs, lens)
        return body

    def reclaimer():
        barrier.wait()
        for _ in range(300):
            t.reclaim()
            t.counts()

    _run([writer(i) for i in range(THREADS)] + [reclaimer])
    _quiescent(t)


@pytest.mark.parametrize("sync", ["global", "page", "atomic"])
def test_python_threads_mixing_single_and_batch_calls_stay_consistent(sync):
    t = BypassWriteTracker(GiB, chunk_size=4096, sync=sync)
    barrier = threading.Barrier(THREADS)

    def body(seed: int):
        def inner():
            rng = np.random.default_rng(seed)
            barrier.wait()
            for _ in range(2000):
                off = int(rng.integers(0, t.device_size - 65536))
                assert t.start(off, 65536)
                assert t.is_active(off, 1)
                assert t.count(off) >= 1
                t.end(off, 65536)
        return inner

    _run([body(i) for i in range(THREADS)])
    _quiescent(t)


@pytest.mark.parametrize("sync", ["global", "page", "atomic"])
@pytest.mark.parametrize("partition", [False, True], ids=["shared", "distinct-pages"])
def test_native_stress_returns_to_zero_and_frees_every_page(sync, partition):
    t = BypassWriteTracker(4 * 64 * GiB, sync=sync)
    res = pybcache.stress(t, threads=4, ops=40_000, write_length=128 * 1024, depth=8, partition=partition,
                          region=(0, 2 * 64 * GiB) if not partition else (0, 4 * 64 * GiB), seed=3)
    assert res["ops"] == 4 * 40_000
    for p in res["per_thread"]:
        assert p["starts"] == p["ends"] == 40_000 and p["untracked"] == 0
        assert p["active_hits"] > 0  # the thread's own in-flight writes are seen
    _quiescent(t)


@pytest.mark.parametrize("sync", ["global", "page", "atomic"])
def test_native_stress_with_a_racing_reclaim_loses_no_count(sync):
    # Small chunks and a small device: pages empty and refill constantly, so reclaim (and the eager
    # free of the lock variants) races with starts allocating the same page.
    t = BypassWriteTracker(64 * MiB, chunk_size=4096, sync=sync, counter_bits=32)
    res = pybcache.stress(t, threads=3, ops=60_000, write_length=8192, depth=2, reclaim_every=7, seed=5)
    assert sum(p["ends"] for p in res["per_thread"]) == 3 * 60_000
    _quiescent(t)
    if sync == "atomic":
        assert res["per_thread"][0]["reclaimed"] > 0


def test_native_stress_for_a_time_budget():
    t = BypassWriteTracker(64 * GiB)
    res = pybcache.stress(t, threads=2, seconds=0.2)
    assert res["ops"] > 0 and res["elapsed_s"] >= 0.15   # ran for its budget (an upper bound is load)
    _quiescent(t)


@pytest.mark.parametrize("sync, lock", [("global", "mcs"), ("page", "mcs"), ("page", "ticket")])
def test_queued_locks_survive_oversubscription(sync, lock):
    # More threads than CPUs with a FIFO lock: the next owner may be preempted (a convoy, slower) but
    # every waiter yields after its bounded spin, so the run finishes and nothing is lost.
    t = BypassWriteTracker(64 * MiB, chunk_size=4096, sync=sync, counter_bits=32, lock=lock)
    assert t.lock == lock
    res = pybcache.stress(t, threads=6, ops=5_000, write_length=8192, depth=2, reclaim_every=11, seed=9)
    assert sum(p["ends"] for p in res["per_thread"]) == 6 * 5_000
    _quiescent(t)


def test_every_module_queues_on_one_node_registry():
    # A device runs the caller's tracker with pybcache.bcache._cachedev's copy of the C core: a queued lock's
    # tail must name the same node there as in pybcache.bcache._tracker, so both share one registry.
    from pybcache.bcache import _cachedev
    from pybcache.bcache.kpatch import _kpatch
    from pybcache.bcache import _tracker
    assert _cachedev._mcs_registry_address() == _tracker._mcs_registry_address() == _kpatch._mcs_registry_address()


def test_a_device_and_python_threads_share_an_mcs_tracker():
    # One lock="mcs" tracker (sync="global": one lock for all) driven at once by Python threads' batch
    # loops (pybcache.bcache._tracker's C core, without the GIL) and by a cached device's writes
    # (pybcache.bcache._cachedev's C core): both queue on the same lock, so they must agree on its nodes.
    t = BypassWriteTracker(MiB, chunk_size=4096, sync="global", counter_bits=32, lock="mcs")
    dev = pybcache.CachedDevice(MiB, tracker=t)
    offs = np.arange(0, 256 * 4096, 4096, dtype=np.uint64)
    stop = threading.Event()

    def hammer():
        while not stop.is_set():
            t.start_many(offs, 4096)
            t.end_many(offs, 4096)

    threads = [threading.Thread(target=hammer) for _ in range(2)]
    for th in threads:
        th.start()
    try:
        for i in range(3_000):
            blk = i * 3 % 256
            dev.write(blk * 4096, 8192 if blk < 255 else 4096)
    finally:
        stop.set()
        for th in threads:
            th.join()
    _quiescent(t)


@pytest.mark.parametrize("sync", ["global", "page"])
def test_spin_then_yield_lock_survives_oversubscription(sync):
    # More threads than CPUs: a preempted lock holder must be waited for by yielding, not spinning,
    # and nothing may be lost either way.
    t = BypassWriteTracker(64 * MiB, chunk_size=4096, sync=sync, counter_bits=32, lock="spin_yield")
    assert t.lock == "spin_yield"
    res = pybcache.stress(t, threads=6, ops=20_000, write_length=8192, depth=2, reclaim_every=11, seed=9)
    assert sum(p["ends"] for p in res["per_thread"]) == 6 * 20_000
    _quiescent(t)


@pytest.mark.parametrize("sync, lock", [("global", "pthread"), ("global", "spin_yield"), ("global", "ticket"),
                                        ("global", "mcs"), ("page", "pthread"), ("page", "spin_yield"),
                                        ("page", "ticket"), ("page", "mcs"), ("atomic", "pthread")])
def test_ends_from_completion_threads_leave_every_variant_balanced(sync, lock):
    # 4 threads keep 4,096 writes each in flight over the 64 chunks (one u16 page) of a 256 KiB device,
    # thread 0 reclaiming under them. Every end comes from a completion thread; at quiescence every
    # count is back to zero and the page is freed.
    t = BypassWriteTracker(256 * 1024, chunk_size=4096, sync=sync, counter_bits=16, overflow="wait", lock=lock)
    res = pybcache.stress(t, threads=4, ops=30_000, write_length=4096, depth=4096, reclaim_every=97, seed=4)
    assert res["completions"] == "thread"
    for p in res["per_thread"]:
        assert p["starts"] == p["ends"] == 30_000
        assert p["completion_cpu_s"] > 0, "the ends ran on the completion thread"
        assert p["inflight_mean"] is not None and p["inflight_mean"] >= 0
    assert t.stats()["overflow_waits"] == sum(p["blocked_starts"] for p in res["per_thread"])
    _quiescent(t)
