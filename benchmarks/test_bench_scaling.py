"""Native stress scaling and oversubscription, and same-chunk contention against its floor.

Groups put the variants side by side per thread count (``--benchmark-group-by=group``). Every run pins
its threads to the same 2 CPUs, so 4 and 8 threads oversubscribe them on any machine. The figures to read
are ratios inside a group (and ``extra_info``'s p50/p99 per-op latency, sampled 1 op in 32), never an
absolute time. ``pybcache bench`` prints the same measurements as tables with best-of-N discipline.

Run: ``python -m pytest benchmarks/test_bench_scaling.py --benchmark-only``.
"""
from __future__ import annotations

import pytest

import pybcache
from pybcache.bcache._tracker import floors, native_stress

GiB = pybcache.GiB
MiB = pybcache.MiB
SIZE = 10 * GiB
VARIANTS = ["global", "page", "atomic"]
OPS = 50_000


@pytest.mark.parametrize("sync", VARIANTS)
@pytest.mark.parametrize("threads", [1, 2, 4, 8])
def test_stress_threads_on_two_cpus(benchmark, sync, threads):
    benchmark.group = f"native stress, {threads} thread(s) on 2 CPUs x {OPS // 1000}k ops, one page"
    t = pybcache.BypassWriteTracker(SIZE, sync=sync)
    res = benchmark.pedantic(native_stress, args=(t,),
                             kwargs=dict(threads=threads, ops=OPS, region=(0, SIZE), depth=4, cpus=2,
                                         sample_every=32),
                             rounds=3, iterations=1)
    lat = res["latency"]
    benchmark.extra_info.update(p50_ns=lat["p50_ns"], p99_ns=lat["p99_ns"], max_ns=lat["max_ns"],
                                slowest_thread_ops=min(p["ops"] for p in res["per_thread"]))
    assert not t.counts().any()


@pytest.mark.parametrize("sync", VARIANTS)
def test_same_chunk_two_threads(benchmark, sync):
    benchmark.group = f"same chunk, 2 threads x {OPS * 4 // 1000}k start+end pairs"
    t = pybcache.BypassWriteTracker(SIZE, sync=sync)
    t.start(SIZE - 4096, 4096)  # keep the page resident
    benchmark.pedantic(native_stress, args=(t,),
                       kwargs=dict(threads=2, ops=OPS * 4, region=(0, 32 * MiB), write_length=4096, depth=1,
                                   checks=False, cpus=2),
                       rounds=3, iterations=1)
    t.end(SIZE - 4096, 4096)
    assert not t.counts().any()


def test_same_chunk_floor(benchmark):
    benchmark.group = f"same chunk, 2 threads x {OPS * 4 // 1000}k start+end pairs"
    # floors(n) bounces n // 4 pairs between 2 threads (it also runs the uncontended floors)
    benchmark.pedantic(floors, args=(OPS * 16,), rounds=3, iterations=1)
