"""Fuzzing the cached-device model's public API with hostile values (issue 7).

``CachedDevice`` methods get arbitrary values for every argument: the call succeeds or raises
``ValueError``/``TypeError``, and a failed call leaves the whole device as it was (every block's cache
entry, backing and completed versions, the statistics, the tracker's counters, statistics and memory).
``race``, ``explore`` and ``fio`` and the ``CachedDevice`` constructor get one hostile argument at a time
with the others small and valid: a value outside the documented domain must raise ``ValueError`` or
``TypeError`` naming the argument before anything runs; a value inside it (skipped when it would make the
run long) must work.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from pybcache import CachedDevice, FaultInjection, explore, fio, race
from helpers.hostile import hostile

pytestmark = pytest.mark.native

BLOCK = 4096
N_BLOCKS = 32
FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _is_int(v: Any) -> bool:
    return (isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_, np.timedelta64)))


def _is_num(v: Any) -> bool:
    # pybcache.validate.check_number: ints, floats and numpy integers/floats; never bools or durations
    return (isinstance(v, (int, float, np.integer, np.floating))
            and not isinstance(v, (bool, np.bool_, np.timedelta64)))


# -- the device's methods -----------------------------------------------------------------------------

def snapshot(d: CachedDevice) -> tuple:
    blocks = [(d.cache_entry(b), d.backing_version(b), d.completed_version(b)) for b in range(d.n_blocks)]
    counts = d.tracker_counts()
    return (blocks, d.stats(), d.tracker_stats(), d.tracker_memory(),
            None if counts is None else counts.tolist(), d.cached_blocks())


@pytest.fixture(scope="module", params=["none", "global", "page", "atomic"])
def device(request) -> CachedDevice:
    d = CachedDevice(N_BLOCKS * BLOCK, sync=request.param, block_size=BLOCK, region_blocks=4, chunk_size=2 * BLOCK,
                     alloc_failure="pool", pool_pages=1, fault=FaultInjection(probability=0.3, seed=1))
    for b in range(0, N_BLOCKS, 3):       # some cached data, some written blocks
        d.read(b * BLOCK, BLOCK)
    for b in range(0, N_BLOCKS, 5):
        d.write(b * BLOCK, BLOCK)
    return d


def _call(d: CachedDevice, fn, names: tuple[str, ...]) -> Any:
    before = snapshot(d)
    try:
        return fn()
    except (ValueError, TypeError) as exc:
        assert snapshot(d) == before, f"state changed by a failed call: {exc}"
        assert any(n in str(exc) for n in names), f"message does not name {names}: {exc}"
        return None


# Whole floats are not ints: always tried, whatever Hypothesis draws.
@FUZZ
@example(offset=4096.0, length=BLOCK, which="write")
@example(offset=0, length=float(BLOCK), which="read")
@example(offset=np.float64(0), length=BLOCK, which="begin_write")
@given(offset=hostile() | st.integers(0, N_BLOCKS * BLOCK), length=hostile() | st.sampled_from([BLOCK, 2 * BLOCK]),
       which=st.sampled_from(["write", "read", "begin_write", "begin_read"]))
def test_operations_reject_hostile_ranges_without_a_trace(device, offset, length, which):
    res = _call(device, lambda: getattr(device, which)(offset, length), ("offset", "length", "range"))
    size, max_len = N_BLOCKS * BLOCK, (None if "write" in which else 64 * BLOCK)
    valid = (_is_int(offset) and _is_int(length) and 0 <= int(offset) < size and int(offset) % BLOCK == 0
             and 0 < int(length) <= size - int(offset) and int(length) % BLOCK == 0
             and (max_len is None or int(length) <= max_len))
    assert (res is not None) == valid, f"{which}({offset!r}, {length!r}): {'accepted' if res else 'refused'}"
    if which.startswith("begin") and res is not None:
        res.run()   # a valid pending operation still runs to the end
        assert res.done


@FUZZ
@given(block=hostile() | st.integers(-2, N_BLOCKS + 2),
       which=st.sampled_from(["cache_entry", "backing_version", "completed_version"]))
def test_inspection_rejects_hostile_blocks(device, block, which):
    res = _call(device, lambda: getattr(device, which)(block), ("block",))
    if res is not None:
        assert _is_int(block) and 0 <= int(block) < N_BLOCKS


def test_a_numpy_timedelta_is_not_a_block_or_an_offset():
    # regression: np.timedelta64 subclasses np.signedinteger and used to be taken as an integer
    d = CachedDevice(N_BLOCKS * BLOCK, block_size=BLOCK)
    for fn, args, name in ((d.cache_entry, (np.timedelta64(1),), "block"),
                           (d.read, (np.timedelta64(0), BLOCK), "offset"),
                           (d.write, (0, np.timedelta64(BLOCK)), "length")):
        with pytest.raises(TypeError, match=name):
            fn(*args)
    with pytest.raises(TypeError, match="region_blocks"):
        race(region_blocks=np.timedelta64(8), seconds=0.01)
    with pytest.raises(TypeError, match="fault_at"):
        explore(fault_at=np.timedelta64("NaT"), max_schedules=1)
    assert d.stats()["writes"] == 0 and d.stats()["reads"] == 0


# -- construction and the workload functions: one hostile argument at a time -----------------------------

def _choice(options):
    return lambda v: isinstance(v, str) and v in options


def _int_in(lo, hi):
    return lambda v: _is_int(v) and lo <= int(v) <= hi


def _pow2(lo, hi):
    return lambda v: _int_in(lo, hi)(v) and int(v) & (int(v) - 1) == 0


def _num_in(lo, hi, open_low=False):
    return lambda v: _is_num(v) and not math.isnan(v) and ((lo < v) if open_low else (lo <= v)) and v <= hi


SYNCS = ("none", "global", "page", "atomic")

# name -> (valid?, too slow to run when valid?)
DEVICE_ARGS = {
    "device_size": (lambda v: _int_in(BLOCK, 1 << 50)(v) and int(v) % BLOCK == 0, lambda v: int(v) > 64 << 20),
    "sync": (_choice(SYNCS), None),
    "check": (_choice(("entry", "miss", "after", "read-done", "before")), None),
    "restart": (lambda v: isinstance(v, (bool, np.bool_)), None),
    "granularity": (_choice(("chunk", "page")), None),
    "region_blocks": (_pow2(1, 1 << 20), None),
    "write_delay_ns": (_int_in(0, 10**10), None),
    "delay": (_choice(("spin", "yield")), None),
    "bounce_copy": (lambda v: isinstance(v, (bool, np.bool_)), None),
    "chunk_size": (_pow2(512, 1 << 62), None),
    "counter_bits": (lambda v: v is None or (_is_int(v) and int(v) in (16, 32, 64)), None),
    "overflow": (_choice(("wrap", "clamp", "wait")), None),
    "alloc_failure": (_choice(("untracked", "hijack", "pool", "mempool")), None),
    "fault": (lambda v: v is None, None),
}


# Whole floats are not ints: always tried, whatever Hypothesis draws.
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(name="device_size", bad=float(16 * BLOCK))
@example(name="chunk_size", bad=8192.0)
@example(name="region_blocks", bad=np.float64(4))
@example(name="write_delay_ns", bad=0.0)
@given(name=st.sampled_from(sorted(DEVICE_ARGS)), bad=hostile())
def test_constructor_rejects_each_hostile_argument_by_name(name, bad):
    valid, slow = DEVICE_ARGS[name]
    is_valid = valid(bad)
    assume(not (is_valid and slow and slow(bad)))
    kwargs: dict[str, Any] = {"block_size": BLOCK}
    size = 16 * BLOCK
    if name == "device_size":
        size = bad
    else:
        kwargs[name] = bad
    try:
        d = CachedDevice(size, **kwargs)
    except (ValueError, TypeError) as exc:
        assert not is_valid, f"valid {name}={bad!r} refused: {exc}"
        assert name in str(exc), str(exc)
        return
    assert is_valid, f"invalid {name}={bad!r} accepted"
    assert d.stats()["reads"] == 0


RACE_OK = dict(threads=2, seconds=0.01, region_blocks=8, write_delay_ns=0)
RACE_ARGS = {
    "sync": (_choice(SYNCS), None),
    "check": (_choice(("entry", "miss", "after", "read-done", "before")), None),
    "restart": (lambda v: isinstance(v, bool), None),
    "granularity": (_choice(("chunk", "page")), None),
    "alloc_failure": (_choice(("untracked", "hijack", "pool", "mempool")), None),
    "fault_probability": (_num_in(0.0, 1.0), None),
    # the default policy is mempool, whose reserve (min_nr) any count in [0, 2**20] sets
    "pool_pages": (lambda v: v is None or _int_in(0, 1 << 20)(v), lambda v: v is not None and int(v) > 64),
    "threads": (_int_in(2, 256), lambda v: int(v) > 16),
    "writers": (lambda v: v is None or _int_in(1, 1)(v), None),
    "seconds": (_num_in(0.0, 3600.0, open_low=True), lambda v: v > 0.05),
    "min_ops": (_int_in(0, 10**12), lambda v: int(v) > 20000),
    "seed": (_int_in(0, 2**63 - 1), None),
    # max_write_blocks (default 4) must fit in the region: a smaller region is refused naming either
    "region_blocks": (_int_in(4, 1 << 20), lambda v: int(v) > 4096),
    "block_size": (_pow2(512, 1 << 20), None),
    "chunk_size": (_pow2(512, 1 << 62), None),
    "max_write_blocks": (_int_in(1, 8), None),
    "read_blocks": (_int_in(1, 8), None),
    "write_delay_ns": (_int_in(0, 10**9), lambda v: int(v) > 10**5),
    "delay": (_choice(("spin", "yield")), None),
    "reclaim_every": (_int_in(0, 1 << 62), None),
    "progress": (lambda v: v is None, None),
}

EXPLORE_OK = dict(writes=1, reads=1, max_schedules=20)
EXPLORE_ARGS = {
    "sync": (_choice(SYNCS), None),
    "check": (_choice(("entry", "miss", "after", "read-done", "before")), None),
    "restart": (lambda v: isinstance(v, bool), None),
    "granularity": (_choice(("chunk", "page")), None),
    "reclaims": (_int_in(0, 4), None),
    "max_restarts": (_int_in(0, 16), None),
    "counter_bits": (lambda v: v is None or (_is_int(v) and int(v) in (16, 32, 64)), None),
    "overflow": (_choice(("wrap", "clamp", "wait")), None),
    "preload": (_int_in(0, 65535), None),   # 16-bit counters (the default for sync="page")
    "reduce": (lambda v: isinstance(v, bool), None),
    "alloc_failure": (_choice(("untracked", "hijack", "pool", "mempool")), None),
    "fault_at": (_int_in(0, 1 << 62), None),
    "writes": (_int_in(0, 7), None),
    "reads": (_int_in(0, 7), None),
    "write_blocks": (_int_in(1, 64), None),
    "read_blocks": (_int_in(1, 64), None),
    "chunk_size": (_pow2(512, 1 << 40), None),
    "pool_pages": (_int_in(0, 64), None),
    "max_schedules": (_int_in(0, 1 << 62), None),         # 0 = every schedule (70 for 1 write + 1 read)
    "progress": (lambda v: v is None, None),
}

FIO_OK = dict(size=1 << 20, jobs=1, seconds=0.01, inflight=64, variants=("none", "page"))
FIO_ARGS = {
    "size": (lambda v: _int_in(128 << 10, 1 << 40)(v) and int(v) % (128 << 10) == 0, lambda v: int(v) > 64 << 20),
    # inflight (64 here) must be at least jobs: more jobs are refused naming either
    "jobs": (lambda v: v is None or _int_in(1, 64)(v), lambda v: v is not None and int(v) > 16),
    "seconds": (_num_in(0.0, 3600.0, open_low=True), lambda v: v > 0.05),
    "variants": (lambda v: isinstance(v, str) and 0 < len(set(x.strip() for x in v.split(",") if x.strip()))
                 == len([x for x in v.split(",") if x.strip()]) and all(x.strip() in SYNCS for x in v.split(",")
                                                                         if x.strip()), None),
    "read_percent": (_int_in(0, 100), None),
    "inflight": (_int_in(1, 4096), None),
    "read_size": (lambda v: _int_in(4096, 64 * 4096)(v) and int(v) % 4096 == 0, None),
    "write_size": (lambda v: _int_in(4096, 1 << 20)(v) and (1 << 20) % int(v) == 0 and int(v) % 4096 == 0, None),
    "bounce_copy": (lambda v: isinstance(v, bool), None),
    "chunk_size": (_pow2(512, 1 << 62), None),
    "granularity": (_choice(("chunk", "page")), None),
    "seed": (_int_in(0, 2**63 - 1), None),
    "progress": (lambda v: v is None, None),
}

FUNCTIONS = {"race": (race, RACE_OK, RACE_ARGS), "explore": (explore, EXPLORE_OK, EXPLORE_ARGS),
             "fio": (fio, FIO_OK, FIO_ARGS)}
# An argument whose valid range depends on another may be refused by naming that other argument.
RELATED = {("race", "region_blocks"): ("max_write_blocks",), ("fio", "jobs"): ("inflight",),
           ("explore", "writes"): ("writes + reads",), ("explore", "reads"): ("writes + reads",)}


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), fname=st.sampled_from(sorted(FUNCTIONS)))
def test_workload_functions_reject_each_hostile_argument_before_running(data, fname):
    fn, ok, spec = FUNCTIONS[fname]
    name = data.draw(st.sampled_from(sorted(spec)), label="name")
    bad = data.draw(hostile() | st.integers(-3, 70), label="bad")
    valid, slow = spec[name]
    is_valid = valid(bad)
    assume(not (is_valid and slow and slow(bad)))
    kwargs = dict(ok)
    kwargs[name] = bad
    try:
        res = fn(**kwargs)
    except (ValueError, TypeError) as exc:
        assert not is_valid, f"{fname}: valid {name}={bad!r} refused: {exc}"
        assert any(n in str(exc) for n in (name, *RELATED.get((fname, name), ()))), str(exc)
        return
    assert is_valid, f"{fname}: invalid {name}={bad!r} accepted"
    assert isinstance(res, dict)
