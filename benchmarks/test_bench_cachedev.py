"""Benchmarks of the cached-device model, grouped by operation so that the tracking variants sit side by
side (``pytest benchmarks/test_bench_cachedev.py --benchmark-group-by=group``). The claim to read from
them is each variant's ratio to ``none`` in the same run, never an absolute time."""
from __future__ import annotations

import pytest

from pybcache import GiB, MiB, CachedDevice
from pybcache.bcache._cachedev import _FioBench

VARIANTS = ("none", "global", "page", "atomic")
B = 4096


@pytest.mark.parametrize("sync", VARIANTS)
def test_read_hit(benchmark, sync):
    benchmark.group = "cachedev read hit (Python call)"
    d = CachedDevice(64 * MiB, sync=sync)
    d.read(0, B)
    benchmark(d.read, 0, B)


@pytest.mark.parametrize("sync", VARIANTS)
def test_read_miss_with_active_write(benchmark, sync):
    benchmark.group = "cachedev read miss, write in flight (Python call)"
    d = CachedDevice(64 * MiB, sync=sync, chunk_size=32 * MiB)
    w = d.begin_write(1 << 20, 128 * 1024)
    w.step(), w.step()  # started and invalidated: every read of the chunk now bypasses (if tracked)
    benchmark(d.read, 0, B)
    w.run()


@pytest.mark.parametrize("sync", VARIANTS)
def test_bypass_write(benchmark, sync):
    benchmark.group = "cachedev 128 KiB bypass write (Python call)"
    d = CachedDevice(64 * MiB, sync=sync)
    benchmark(d.write, 0, 128 * 1024)


@pytest.mark.parametrize("size", [1 * GiB, 32 * GiB], ids=["1GiB", "32GiB"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_fio_mix_native(benchmark, variant, size):
    benchmark.group = f"fio mix, 2 jobs x 50k ops, {size // GiB} GiB"
    bench = _FioBench(size, (variant,), 32 * MiB, B, True)
    kw = dict(jobs=2, seconds=0.0, read_percent=70, read_blocks=1, write_blocks=32, inflight=80, ops=50_000)
    bench.run(0, seed=1, **kw)
    benchmark.pedantic(bench.run, args=(0,), kwargs=dict(seed=2, **kw), rounds=5, iterations=1)


@pytest.mark.parametrize("sync", VARIANTS)
def test_explore_two_writes_one_read(benchmark, sync):
    benchmark.group = "explore 2w1r, every schedule"
    from pybcache import explore
    res = benchmark.pedantic(explore, kwargs=dict(sync=sync, writes=2, reads=1), rounds=3, iterations=1)
    assert res["finished"]


@pytest.mark.parametrize("sync", VARIANTS)
def test_race_half_second(benchmark, sync):
    benchmark.group = "race stress, 2 threads, 0.5 s (ops/s in extra_info)"
    from pybcache import race
    res = benchmark.pedantic(race, kwargs=dict(sync=sync, seconds=0.5), rounds=2, iterations=1)
    benchmark.extra_info.update(ops_per_s=res["ops_per_s"], stale_reads=res["stale_reads"])
