"""Python threads on one CachedDevice (Barrier start, invariants at quiescence)."""
from __future__ import annotations

import random
import threading

import pytest

from pybcache import CachedDevice

pytestmark = [pytest.mark.native, pytest.mark.xdist_group("native-threads")]

B = 4096


@pytest.mark.parametrize("sync", ["global", "page", "atomic"])
def test_threads_reading_and_writing_leave_no_stale_cache(sync):
    d = CachedDevice(32 * B, sync=sync, chunk_size=B, write_delay_ns=2000)
    barrier = threading.Barrier(4)
    errors = []

    def worker(i):
        rng = random.Random(i)
        barrier.wait()
        try:
            for _ in range(1500):
                b = rng.randrange(30)
                if i % 2:
                    d.write(b * B, rng.randint(1, 2) * B)
                else:
                    assert not d.read(b * B, B)["stale"]
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert d.stale_cached_blocks() == 0
    assert d.stats()["stale_reads"] == 0
    assert not d.tracker_counts().any()
    ts = d.tracker_stats()
    assert ts["starts"] == ts["ends"] and ts["underflows"] == 0


def test_pending_steps_from_two_threads_on_one_device():
    d = CachedDevice(64 * B, sync="page")
    barrier = threading.Barrier(2)

    def worker(base):
        barrier.wait()
        for k in range(200):
            w = d.begin_write((base + k % 8) * B, B)
            r = d.begin_read((base + k % 8) * B, B)
            w.step(), r.step(), w.step(), r.step(), w.step(), r.run(), w.run()

    threads = [threading.Thread(target=worker, args=(b,)) for b in (0, 32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert d.stale_cached_blocks() == 0
