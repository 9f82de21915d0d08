"""Tracker hot paths, grouped so the variants (and their floors) sit side by side.

Run: ``python -m pytest benchmarks/test_bench_tracker.py --benchmark-only``. To compare two commits, save
with ``--benchmark-save=NAME`` on each and compare with ``pytest-benchmark compare``.
"""
from __future__ import annotations

import numpy as np
import pytest

import pybcache
from pybcache.bcache import reference
from pybcache.bcache._tracker import _EmptyPair, floors

GiB = pybcache.GiB
SIZE = 10 * GiB
WRITE = 128 * 1024
N = 100_000
OFFS = (np.random.default_rng(0).integers(0, (SIZE - WRITE) // 4096, N) * 4096).astype(np.int64)
VARIANTS = ["global", "page", "atomic"]


def _resident(t):
    t.start(SIZE - 4096, 4096)  # keep the tracking page allocated: the steady state
    return t


@pytest.mark.parametrize("sync", VARIANTS)
def test_batch_pair(benchmark, sync):
    benchmark.group = "batch start+end pair (100k writes)"
    t = _resident(pybcache.BypassWriteTracker(SIZE, sync=sync))
    benchmark(lambda: (t.start_many(OFFS, WRITE), t.end_many(OFFS, WRITE)))
    assert t.stats()["underflows"] == 0


def test_batch_pair_floor_atomic(benchmark):
    benchmark.group = "batch start+end pair (100k writes)"
    benchmark(floors, N)


@pytest.mark.parametrize("sync", VARIANTS)
def test_batch_is_active(benchmark, sync):
    benchmark.group = "batch is_active (100k checks)"
    t = _resident(pybcache.BypassWriteTracker(SIZE, sync=sync))
    benchmark(t.is_active_many, OFFS, 4096)


@pytest.mark.parametrize("sync", VARIANTS)
def test_single_call_pair(benchmark, sync):
    benchmark.group = "single call start+end pair"
    t = _resident(pybcache.BypassWriteTracker(SIZE, sync=sync))
    benchmark(lambda: (t.start(4096, WRITE), t.end(4096, WRITE)))


def test_single_call_pair_empty_floor(benchmark):
    benchmark.group = "single call start+end pair"
    e = _EmptyPair()
    benchmark(lambda: (e.start(4096, WRITE), e.end(4096, WRITE)))


@pytest.mark.parametrize("sync", VARIANTS)
def test_single_call_pair_reference(benchmark, sync):
    benchmark.group = "single call start+end pair"
    t = _resident(reference.BypassWriteTracker(SIZE, sync=sync))
    benchmark(lambda: (t.start(4096, WRITE), t.end(4096, WRITE)))


@pytest.mark.parametrize("sync", VARIANTS)
def test_single_call_is_active(benchmark, sync):
    benchmark.group = "single call is_active (page resident)"
    t = _resident(pybcache.BypassWriteTracker(SIZE, sync=sync))
    benchmark(t.is_active, 4096, 4096)


@pytest.mark.parametrize("sync", VARIANTS)
def test_single_call_count(benchmark, sync):
    benchmark.group = "single call count"
    t = _resident(pybcache.BypassWriteTracker(SIZE, sync=sync))
    benchmark(t.count, 4096)


@pytest.mark.parametrize("sync", VARIANTS)
def test_single_call_pair_cold(benchmark, sync):
    benchmark.group = "single call start+end pair, cold (page allocated and freed)"
    t = pybcache.BypassWriteTracker(SIZE, sync=sync)
    benchmark(lambda: (t.start(4096, WRITE), t.end(4096, WRITE)))


@pytest.mark.parametrize("batch", [16, 1024, N], ids=["16", "1k", "100k"])
@pytest.mark.parametrize("sync", VARIANTS)
def test_batch_pair_per_size(benchmark, sync, batch):
    benchmark.group = f"batch start+end pair, {batch} writes per call"
    t = _resident(pybcache.BypassWriteTracker(SIZE, sync=sync))
    offs = OFFS[:batch]
    benchmark(lambda: (t.start_many(offs, WRITE), t.end_many(offs, WRITE)))


@pytest.mark.parametrize("size", [10 * GiB, 320 * GiB, 100 * pybcache.TiB], ids=["10GiB", "320GiB", "100TiB"])
@pytest.mark.parametrize("sync", VARIANTS)
def test_counts_snapshot(benchmark, sync, size):
    benchmark.group = f"counts() snapshot, {size // GiB} GiB device"
    t = pybcache.BypassWriteTracker(size, sync=sync)
    t.start(0, WRITE)
    benchmark(t.counts)


@pytest.mark.parametrize("sync", VARIANTS)
def test_native_stress_two_threads_distinct_lines(benchmark, sync):
    benchmark.group = "native stress, 2 threads x 100k writes"
    t = pybcache.BypassWriteTracker(8 * 64 * GiB, sync=sync)
    span = t.chunks_per_page * t.chunk_size
    benchmark(pybcache.stress, t, threads=2, ops=100_000, region=(0, 8 * span), partition=True)
