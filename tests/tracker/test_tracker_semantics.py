"""Semantics of docs/design.md ("The tracker") for every implementation (``tracker_impl``, tests/tracker/conftest.py):
the lab's C tracker and the pure-Python reference in every sync variant x counter width, and a loaded example patch
where it has what a test uses. The C tracker's own defaults, presets and repr: the tests without ``tracker_impl``."""
from __future__ import annotations

import numpy as np

import pybcache
from pybcache import BypassWriteTracker
import pytest

pytestmark = pytest.mark.native

MiB, GiB, TiB = pybcache.MiB, pybcache.GiB, pybcache.TiB
CHUNK = 32 * MiB


def test_defaults_follow_the_posted_geometry():
    t = BypassWriteTracker(TiB)
    assert (t.chunk_size, t.sync, t.counter_bits, t.overflow, t.alloc_failure) == (CHUNK, "page", 16, "wait", "mempool")
    assert (t.free, t.wait_timeout, t.pool_pages) == ("eager", 10.0, 0)
    assert t.n_chunks == 32768 and t.chunks_per_page == 2048 and t.n_pages == 16
    assert BypassWriteTracker(TiB, sync="atomic").counter_bits == 64


def test_posted_v2_preset_is_the_patch_as_posted():
    t = BypassWriteTracker.posted_v2(TiB)
    assert (t.sync, t.counter_bits, t.overflow, t.alloc_failure) == ("page", 16, "wrap", "untracked")
    assert BypassWriteTracker.posted_v2(TiB, sync="atomic").sync == "atomic"


def test_start_counts_every_overlapped_chunk_and_end_returns_to_zero(tracker_impl):
    tracker_impl.require("count", "underflows")
    t = tracker_impl()
    assert t.start(CHUNK - 1, 2)  # straddles chunks 0 and 1
    assert t.count(0) == 1 and t.count(CHUNK) == 1 and t.count(2 * CHUNK) == 0
    assert t.is_active(0, 1) and t.is_active(CHUNK, 1) and not t.is_active(2 * CHUNK, 1)
    t.end(CHUNK - 1, 2)
    assert not t.is_active(0, 3 * CHUNK)
    assert t.counts().sum() == 0
    assert t.stats()["underflows"] == 0


def test_write_across_a_page_boundary_touches_both_pages(tracker_impl):
    tracker_impl.require("count", "lab_memory", "geometry")
    t = tracker_impl()
    span = t.chunks_per_page * CHUNK
    t.start(span - 4096, 8192)
    c = t.counts()
    assert c[t.chunks_per_page - 1] == 1 and c[t.chunks_per_page] == 1 and c.sum() == 2
    assert t.memory()["pages"] == 2
    t.end(span - 4096, 8192)
    assert t.counts().sum() == 0


def test_write_covering_a_whole_page_counts_every_chunk_once(tracker_impl):
    tracker_impl.require("count", "underflows", "geometry")
    t = tracker_impl()
    span = t.chunks_per_page * CHUNK
    t.start(span, span)
    c = t.counts()
    assert (c[t.chunks_per_page:2 * t.chunks_per_page] == 1).all() and c.sum() == t.chunks_per_page
    t.end(span, span)
    assert t.counts().sum() == 0 and t.stats()["underflows"] == 0


def test_last_partial_chunk_is_tracked(tracker_impl):
    tracker_impl.require("count", "geometry")
    size = 10 * CHUNK + 512
    t = tracker_impl(size)
    assert t.n_chunks == 11
    t.start(size - 512, 512)
    assert t.count(size - 1) == 1 and t.counts()[10] == 1
    t.end(size - 512, 512)
    assert t.count(size - 1) == 0


def test_overlapping_writes_stack_in_one_chunk(tracker_impl):
    tracker_impl.require("count")
    t = tracker_impl()
    for _ in range(5):
        t.start(4096, 4096)
    assert t.count(0) == 5
    for k in range(5):
        t.end(4096, 4096)
        assert t.count(0) == 4 - k


def test_is_active_and_count_never_allocate(tracker_impl):
    tracker_impl.require("count", "lab_memory", "pages_allocated")
    t = tracker_impl()
    assert not t.is_active(0, 100 * GiB)
    assert t.count(50 * GiB) == 0
    t.counts()
    assert t.memory()["pages"] == 0 and t.memory()["page_bytes"] == 0
    assert t.stats()["pages_allocated"] == 0


def test_end_on_a_zero_counter_is_refused_and_counted_as_underflow(tracker_impl):
    tracker_impl.require("count", "underflows")
    t = tracker_impl()
    t.end(0, 4096)  # no page at all
    assert t.stats()["underflows"] == 1
    t.start(0, 4096)
    t.end(CHUNK, 4096)  # page present, this counter is 0
    assert t.stats()["underflows"] == 2
    assert t.count(0) == 1 and t.count(CHUNK) == 0
    t.end(0, 4096)
    assert t.counts().sum() == 0 and t.stats()["underflows"] == 2


def test_lock_variants_free_a_page_when_its_last_counter_drops(tracker_impl):
    tracker_impl.require("lab_memory", "reclaim", "pages_allocated")
    t = tracker_impl()
    t.start(0, 4096)
    t.start(CHUNK, 4096)
    t.end(0, 4096)
    assert t.memory()["pages"] == 1
    t.end(CHUNK, 4096)
    if tracker_impl.sync == "atomic":
        assert t.memory()["pages"] == 1  # freed only by reclaim
        assert t.reclaim() == 1
    else:
        assert t.memory()["pages"] == 0
        assert t.reclaim() == 0
    assert t.memory()["pages"] == 0 and t.memory()["page_bytes"] == 0
    s = t.stats()
    assert s["pages_allocated"] == s["pages_freed"] == 1


def test_reclaim_keeps_pages_with_writes_in_flight(tracker_impl):
    tracker_impl.require("lab_memory", "reclaim")
    t = tracker_impl()
    t.start(0, 4096)
    assert t.reclaim() == 0
    assert t.is_active(0, 1) and t.memory()["pages"] == 1


def test_memory_counts_directory_and_pages_exactly(tracker_impl):
    tracker_impl.require("lab_memory", "reclaim", "geometry")
    t = tracker_impl(200 * GiB)
    slots = -(-t.n_chunks // t.chunks_per_page)
    assert t.memory() == {"directory_bytes": 16 * slots, "page_bytes": 0, "total_bytes": 16 * slots,
                          "peak_bytes": 16 * slots, "pages": 0, "peak_pages": 0}
    span = t.chunks_per_page * CHUNK
    t.start(0, 1)
    t.start(span, 1)
    m = t.memory()
    assert m["pages"] == 2 and m["page_bytes"] == 8192 and m["total_bytes"] == 16 * slots + 8192
    t.end(0, 1)
    t.end(span, 1)
    t.reclaim()
    m = t.memory()
    assert m["pages"] == 0 and m["page_bytes"] == 0 and m["peak_bytes"] == 16 * slots + 8192 and m["peak_pages"] == 2


def test_stats_count_starts_and_ends(tracker_impl):
    tracker_impl.require("underflows", "batch")
    t = tracker_impl()
    t.start_many(np.arange(10) * 4096, 4096)
    t.start(0, 1)
    t.end_many(np.arange(10) * 4096, 4096)
    t.end(0, 1)
    s = t.stats()
    assert s["starts"] == 11 and s["ends"] == 11 and s["underflows"] == 0


def test_batch_calls_match_single_calls(tracker_impl):
    tracker_impl.require("count", "batch")
    rng = np.random.default_rng(1)
    size = 300 * GiB
    offs = rng.integers(0, size - 4 * MiB, 500)
    lens = rng.integers(1, 4 * MiB, 500)
    a, b = tracker_impl(size), tracker_impl(size)
    assert a.start_many(offs, lens).all()
    for o, n in zip(offs, lens):
        b.start(int(o), int(n))
    assert (a.counts() == b.counts()).all()
    checks = rng.integers(0, size - MiB, 300)
    assert (a.is_active_many(checks, MiB) == np.array([b.is_active(int(c), MiB) for c in checks])).all()
    a.end_many(offs, lens)
    assert a.counts().sum() == 0


def test_batch_accepts_every_integer_dtype_and_list_input(tracker_impl):
    tracker_impl.require("count", "underflows", "batch")
    t = tracker_impl()
    for dtype in (np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64):
        offs = np.array([0, 40, 80], dtype=dtype)
        assert t.start_many(offs, np.array([1, 1, 1], dtype=dtype)).all()
        t.end_many(offs, 1)
    assert t.start_many([0, 1], 1).all()
    t.end_many([0, 1], [1, 1])
    assert t.counts().sum() == 0 and t.stats()["underflows"] == 0


def test_empty_batches_are_fine(tracker_impl):
    tracker_impl.require("batch")
    t = tracker_impl()
    assert t.start_many(np.array([], dtype=np.int64), 1).shape == (0,)
    t.end_many([], 1)
    assert t.is_active_many(np.array([], dtype=np.int64), np.array([], dtype=np.int64)).shape == (0,)


def test_small_chunks_and_a_tiny_device():
    t = BypassWriteTracker(1536, chunk_size=512)
    assert t.n_chunks == 3
    t.start(0, 1536)
    assert list(t.counts()) == [1, 1, 1]
    t.end(0, 1536)
    assert list(t.counts()) == [0, 0, 0]


def test_repr_names_the_configuration():
    assert "sync='atomic'" in repr(BypassWriteTracker(GiB, sync="atomic"))


# ---- from test_reference.py, where they ran on the C core and the reference side by side -------------------

def test_an_empty_batch_answers_an_empty_bool_array_and_counts_nothing(tracker_impl):
    tracker_impl.require("batch")
    t = tracker_impl(MiB)
    for got in (t.start_many(np.array([], dtype=np.int64), 4096), t.is_active_many([], [])):
        assert got.dtype == bool and got.shape == (0,)
    t.end_many([], 4096)
    assert t.stats()["starts"] == 0 and t.stats()["ends"] == 0


def test_a_one_byte_device_with_the_smallest_chunks_is_accepted_and_tracked(tracker_impl):
    tracker_impl.require("geometry", "count", "lab_memory")
    t = tracker_impl(1, chunk_size=512)
    assert (t.n_chunks, t.n_pages) == (1, 1)
    assert t.start(0, 1) is True and t.count(0) == 1
    assert t.memory()["pages"] == 1 and t.stats()["starts"] == 1


# ---- what every implementation, a loaded patch included, has: start, end, is_active, stats' starts and ends ----

def test_a_write_is_active_on_every_byte_it_covers_from_start_to_end_and_nowhere_else(tracker_impl):
    t = tracker_impl()
    assert t.start(CHUNK - 1, 2)  # straddles chunks 0 and 1
    assert t.is_active(CHUNK - 1, 1) and t.is_active(CHUNK, 1) and t.is_active(0, 3 * CHUNK)
    assert not t.is_active(2 * CHUNK, 1) and not t.is_active(100 * GiB, CHUNK)
    t.end(CHUNK - 1, 2)
    assert not t.is_active(0, 3 * CHUNK)


def test_overlapping_writes_keep_a_range_active_until_the_last_one_ends(tracker_impl):
    t = tracker_impl()
    for _ in range(5):
        assert t.start(4096, 4096)
    for _ in range(4):
        t.end(4096, 4096)
        assert t.is_active(4096, 1)
    t.end(4096, 4096)
    assert not t.is_active(0, CHUNK)


def test_writes_on_distant_pages_are_tracked_apart(tracker_impl):
    t = tracker_impl()
    far = 150 * GiB
    t.start(0, 4096)
    t.start(far, 4096)
    t.end(0, 4096)
    assert not t.is_active(0, 4096) and t.is_active(far, 4096)
    t.end(far, 4096)
    assert not t.is_active(far, 4096)


def test_stats_count_each_start_and_end(tracker_impl):
    t = tracker_impl()
    for k in range(7):
        t.start(k * CHUNK, 4096)
    for k in range(7):
        t.end(k * CHUNK, 4096)
    s = t.stats()
    assert (s["starts"], s["ends"]) == (7, 7)
