"""Bad input: a clear ValueError/TypeError naming the argument, and nothing half-applied."""
from __future__ import annotations

import numpy as np
import pytest

import pybcache
from pybcache import BypassWriteTracker, FaultInjection

pytestmark = pytest.mark.native

GiB = pybcache.GiB


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(device_size=0), ValueError, "device_size"),
    (dict(device_size=-5), ValueError, "device_size"),
    (dict(device_size=1.5), TypeError, "device_size"),
    (dict(device_size="1G"), TypeError, "device_size"),
    (dict(device_size=True), TypeError, "device_size"),
    (dict(device_size=2**70), ValueError, "device_size"),
    (dict(device_size=GiB, chunk_size=1000), ValueError, "chunk_size"),
    (dict(device_size=GiB, chunk_size=256), ValueError, "chunk_size"),
    (dict(device_size=GiB, chunk_size=None), TypeError, "chunk_size"),
    (dict(device_size=GiB, sync="spin"), ValueError, "sync"),
    (dict(device_size=GiB, sync=1), TypeError, "sync"),
    (dict(device_size=GiB, counter_bits=8), ValueError, "counter_bits"),
    (dict(device_size=GiB, counter_bits="16"), TypeError, "counter_bits"),
    (dict(device_size=GiB, overflow="saturate"), ValueError, "overflow"),
    (dict(device_size=GiB, alloc_failure="retry"), ValueError, "alloc_failure"),
    (dict(device_size=GiB, pool_pages=-1, alloc_failure="pool"), ValueError, "pool_pages"),
    (dict(device_size=GiB, pool_pages=3, alloc_failure="hijack"), ValueError, "pool_pages"),
    (dict(device_size=GiB, free="lazy"), ValueError, "free"),
    (dict(device_size=GiB, free=0), TypeError, "free"),
    (dict(device_size=GiB, wait_timeout=0), ValueError, "wait_timeout"),
    (dict(device_size=GiB, wait_timeout=-1.0), ValueError, "wait_timeout"),
    (dict(device_size=GiB, wait_timeout=float("nan")), ValueError, "wait_timeout"),
    (dict(device_size=GiB, wait_timeout=float("inf")), ValueError, "wait_timeout"),
    (dict(device_size=GiB, wait_timeout="10"), TypeError, "wait_timeout"),
    (dict(device_size=GiB, wait_timeout=True), TypeError, "wait_timeout"),
    (dict(device_size=GiB, fault=0.5), TypeError, "fault"),
    (dict(device_size=GiB, lock="mutex"), ValueError, "lock"),
    (dict(device_size=GiB, lock=1), TypeError, "lock"),
    (dict(device_size=GiB, sync="atomic", lock="spin_yield"), ValueError, "lock"),
    (dict(device_size=GiB, sync="atomic", lock="mcs"), ValueError, "lock"),
])
def test_constructor_rejects_bad_arguments_by_name(kwargs, exc, match):
    size = kwargs.pop("device_size")
    with pytest.raises(exc, match=match):
        BypassWriteTracker(size, **kwargs)


@pytest.mark.parametrize("sync", ["global", "page"])
@pytest.mark.parametrize("lock", ["pthread", "spin_yield", "ticket", "mcs"])
def test_every_lock_mode_is_accepted_by_the_lock_variants(sync, lock):
    t = BypassWriteTracker(GiB, sync=sync, lock=lock)
    assert t.lock == lock and lock in pybcache.bcache._tracker.LOCKS
    t.start(0, 4096)
    assert t.count(0) == 1


@pytest.mark.parametrize("lock", ["qspinlock", "MCS", "ticket ", ""])
def test_an_unknown_lock_is_refused_with_the_allowed_list(lock):
    with pytest.raises(ValueError) as info:
        BypassWriteTracker(GiB, lock=lock)
    assert str(info.value) == f"lock must be one of ('pthread', 'spin_yield', 'ticket', 'mcs'), got {lock!r}"


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(probability=1.5), ValueError, "probability"),
    (dict(probability=-0.1), ValueError, "probability"),
    (dict(probability="x"), TypeError, "probability"),
    (dict(interval=0), ValueError, "interval"),
    (dict(times=-2), ValueError, "times"),
    (dict(space=-1), ValueError, "space"),
    (dict(seed=-1), ValueError, "seed"),
    (dict(seed=1.0), TypeError, "seed"),
])
def test_fault_injection_rejects_bad_attributes(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        FaultInjection(**kwargs)


@pytest.fixture(params=["global", "page", "atomic"])
def tracker(request):
    t = BypassWriteTracker(10 * GiB, sync=request.param)
    t.start(0, 4096)
    return t


def _snapshot(t):
    return t.counts().copy(), t.stats(), t.memory()


def _unchanged(t, snap):
    counts, stats, memory = snap
    assert (t.counts() == counts).all() and t.stats() == stats and t.memory() == memory


@pytest.mark.parametrize("method", ["start", "end", "is_active"])
@pytest.mark.parametrize("args, exc, match", [
    ((-1, 10), ValueError, "offset"),
    ((10 * GiB, 1), ValueError, "offset"),
    ((0, 0), ValueError, "length"),
    ((0, -4), ValueError, "length"),
    ((10 * GiB - 10, 11), ValueError, "device_size"),
    ((1.0, 10), TypeError, "offset"),
    ((0, "10"), TypeError, "length"),
    ((None, 10), TypeError, "offset"),
    ((False, 10), TypeError, "offset"),
    ((2**80, 10), ValueError, "offset"),
    ((0, 2**80), ValueError, "device_size"),
])
def test_single_calls_reject_bad_ranges_and_change_nothing(tracker, method, args, exc, match):
    snap = _snapshot(tracker)
    with pytest.raises(exc, match=match):
        getattr(tracker, method)(*args)
    _unchanged(tracker, snap)


def test_count_rejects_bad_offsets(tracker):
    for bad, exc in ((-1, ValueError), (10 * GiB, ValueError), (0.5, TypeError), ("0", TypeError)):
        with pytest.raises(exc, match="offset"):
            tracker.count(bad)


@pytest.mark.parametrize("method", ["start_many", "end_many", "is_active_many"])
@pytest.mark.parametrize("offsets, lengths, exc, match", [
    (np.array([0, -1]), 1, ValueError, "offsets"),
    (np.array([0, 10 * GiB]), 1, ValueError, "offsets"),
    (np.array([0, 10 * GiB - 1]), 2, ValueError, "device_size"),
    (np.array([0, 4096]), 0, ValueError, "lengths"),
    (np.array([0, 4096]), np.array([1, 0]), ValueError, "lengths"),
    (np.array([0, 4096]), np.array([1, 1, 1]), ValueError, "shape"),
    (np.array([[0, 4096]]), 1, ValueError, "1-dimensional"),
    (np.array([0.0, 1.0]), 1, TypeError, "offsets"),
    (np.array([True, False]), 1, TypeError, "offsets"),
    (np.array(["a"]), 1, TypeError, "offsets"),
    ("0,1", 1, TypeError, "offsets"),
    (None, 1, TypeError, "offsets"),
    (np.array([0, 1]), 1.5, TypeError, "lengths"),
    (np.array([0, 1]), np.array([1.0, 2.0]), TypeError, "lengths"),
    (np.array([2**63], dtype=np.uint64), 1, ValueError, "offsets"),
])
def test_batch_calls_check_every_element_before_changing_anything(tracker, method, offsets, lengths, exc, match):
    snap = _snapshot(tracker)
    with pytest.raises(exc, match=match):
        getattr(tracker, method)(offsets, lengths)
    _unchanged(tracker, snap)


def _layouts(values, dtype):
    """The same offsets as a C-contiguous array (the batch calls' two-pass check), a strided view and, when
    numpy reads it as int64, a list (the general checks)."""
    arr = np.array(values, dtype=dtype)
    as_list = [int(v) for v in values]
    return [arr, np.repeat(arr, 2)[::2]] + ([as_list] if np.asarray(as_list).dtype == np.int64 else [])


@pytest.mark.parametrize("method", ["start_many", "end_many", "is_active_many"])
@pytest.mark.parametrize("values, dtype, length", [
    ([0, -1], np.int64, 1),
    ([-(2**63), 0], np.int64, 1),
    ([0, 10 * GiB], np.int64, 1),
    ([0, 10 * GiB - 1], np.int64, 2),
    ([0, 4096], np.int64, 0),
    ([0, 4096], np.int64, -4096),
    ([0, 4096], np.int64, 10 * GiB + 1),
    ([0, 4096], np.int64, 2**64),
    ([0, 2**63], np.uint64, 1),
    ([0, 10 * GiB], np.uint64, np.uint64(1)),
    ([10 * GiB - 4096, 0], np.uint64, np.int32(4097)),
    ([0, 4096], np.int64, np.timedelta64(4096)),
    ([0, 4096], np.int64, True),
])
def test_a_bad_batch_gets_the_same_error_whatever_its_layout(tracker, method, values, dtype, length):
    snap = _snapshot(tracker)
    errors = set()
    for offsets in _layouts(values, dtype):
        with pytest.raises((ValueError, TypeError)) as e:
            getattr(tracker, method)(offsets, length)
        errors.add((type(e.value), str(e.value)))
    assert len(errors) == 1, errors
    _unchanged(tracker, snap)


@pytest.mark.parametrize("dtype", [np.int64, np.uint64])
@pytest.mark.parametrize("length", [1, 4096, 128 * 1024, np.uint64(4096), np.int16(512)])
def test_a_batch_counts_the_same_whatever_its_layout(dtype, length):
    offs = np.random.default_rng(3).integers(0, 10 * GiB - 128 * 1024, 300).astype(dtype)
    offs[:2] = (0, 10 * GiB - int(length))  # the two ends of the device
    counts, active = [], []
    for offsets in _layouts(offs, dtype):
        t = BypassWriteTracker(10 * GiB, sync="page")
        t.start_many(offsets, length)
        counts.append(t.counts())
        active.append(t.is_active_many(offsets, length))
        t.end_many(offsets, length)
        assert not t.counts().any()
    assert all((c == counts[0]).all() for c in counts) and counts[0].sum() >= 300
    assert all((a == active[0]).all() for a in active) and active[0].all()


def test_a_bad_last_element_leaves_the_earlier_ones_unapplied(tracker):
    snap = _snapshot(tracker)
    offs = np.arange(1000, dtype=np.int64) * 4096
    offs[-1] = -1
    with pytest.raises(ValueError):
        tracker.start_many(offs, 4096)
    _unchanged(tracker, snap)


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(threads=0, ops=10), ValueError, "threads"),
    (dict(threads=1000, ops=10), ValueError, "threads"),
    (dict(threads=1), ValueError, "ops"),
    (dict(threads=1, ops=10, seconds=1), ValueError, "ops"),
    (dict(threads=1, ops=0), ValueError, "ops"),
    (dict(threads=1, seconds=-1), ValueError, "seconds"),
    (dict(threads=1, seconds="1"), TypeError, "seconds"),
    (dict(threads=1, ops=10, depth=0), ValueError, "depth"),
    (dict(threads=1, ops=10, write_length=0), ValueError, "write_length"),
    (dict(threads=1, ops=10, region=(0, 20 * GiB)), ValueError, "region"),
    (dict(threads=1, ops=10, region=5), TypeError, "region"),
    (dict(threads=2, ops=10, region=(0, 4096), write_length=4096, partition=True), ValueError, "write_length"),
])
def test_stress_rejects_bad_arguments(tracker, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        pybcache.stress(tracker, **kwargs)
    with pytest.raises(TypeError, match="tracker"):
        pybcache.stress("not a tracker", threads=1, ops=1)


def test_range_error_message_survives_small_numpy_ints_and_huge_lengths(tracker):
    # The message reports offset + length; computing it must not overflow a numpy int8 or an int64.
    with pytest.raises(ValueError, match="device_size"):
        tracker.start(np.int8(100), 2**40)
    with pytest.raises(ValueError, match="device_size"):
        tracker.start(np.int64(5), np.int64(2**63 - 1))


@pytest.mark.parametrize("threads, exc", [(1, ValueError), (17, ValueError), (2.0, TypeError), (True, TypeError)])
def test_same_chunk_bench_refuses_a_thread_count_outside_2_to_16_before_measuring(threads, exc):
    from pybcache.bcache.experiments.bench import run_same_chunk
    with pytest.raises(exc, match=r"threads must be (an int )?in \[2, 16\]"):
        run_same_chunk(threads=threads)


@pytest.mark.parametrize("seconds, exc", [(0, ValueError), (0.0005, ValueError), (11, ValueError), ("1", TypeError),
                                          (True, TypeError)])
def test_same_chunk_bench_refuses_a_run_length_outside_1ms_to_10s_before_measuring(seconds, exc):
    from pybcache.bcache.experiments.bench import run_same_chunk
    with pytest.raises(exc, match="seconds"):
        run_same_chunk(seconds=seconds)
