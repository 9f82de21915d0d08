"""Fuzzing the tracker's public API with hostile values (issue 7).

Every call gets arbitrary ints (huge and negative included), floats (NaN, inf), strings, bytes, None,
containers, numpy scalars of every dtype and numpy arrays of every dtype and shape. The only acceptable
outcomes are success or a ``ValueError``/``TypeError`` whose message names the bad argument; after an error
the tracker's ``counts()``, ``stats()`` and ``memory()`` are exactly what they were before the call.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import pybcache
from pybcache import BypassWriteTracker, FaultInjection

from helpers.hostile import hostile, is_int

pytestmark = pytest.mark.native

MiB = pybcache.MiB
DEVICE = 8 * MiB + 12345          # a partial last chunk
CHUNK = 64 * 1024                 # 129 chunks: several pages for 64-bit counters, one for u16
FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# -- hostile values -------------------------------------------------------------------------------------

def valid_offset() -> st.SearchStrategy[int]:
    return st.integers(0, DEVICE - 1)


def int_value(v: Any) -> int | None:
    """``int(v)`` for what the API takes as an integer, else None (never raises, whatever Hypothesis drew)."""
    return int(v) if is_int(v) else None


def valid_range(offset: Any, length: Any) -> bool:
    """Is (offset, length) a byte range the tracker must accept?"""
    off, n = int_value(offset), int_value(length)
    return off is not None and n is not None and off >= 0 and n > 0 and off + n <= DEVICE


# -- helpers --------------------------------------------------------------------------------------------

def snapshot(t: BypassWriteTracker) -> tuple:
    return t.counts().tolist(), t.stats(), t.memory()


def call_and_check(t: BypassWriteTracker, fn: Callable[[], Any], names: tuple[str, ...]) -> bool:
    """Run fn; an error must be ValueError/TypeError naming one of ``names`` and change nothing.
    Returns True if fn succeeded."""
    before = snapshot(t)
    try:
        fn()
    except (ValueError, TypeError) as exc:
        assert snapshot(t) == before, f"state changed by a failed call: {exc}"
        if names:
            assert any(n in str(exc) for n in names), f"message does not name {names}: {exc}"
        return False
    return True


@pytest.fixture(scope="module", params=[("global", 16), ("page", 32), ("atomic", 64), ("atomic", 16)],
                ids=lambda p: f"{p[0]}-u{p[1]}")
def tracker(request) -> BypassWriteTracker:
    sync, bits = request.param
    t = BypassWriteTracker(DEVICE, chunk_size=CHUNK, sync=sync, counter_bits=bits, overflow="clamp",
                           alloc_failure="pool", pool_pages=1,
                           fault=FaultInjection(probability=0.2, seed=3))
    # Some state to preserve: writes in flight on several pages.
    t.start_many(np.arange(0, DEVICE - 4096, 1 << 20), 4096)
    return t


# -- single calls ---------------------------------------------------------------------------------------

# Whole floats (4096.0, np.float64) are not ints: always tried, whatever Hypothesis draws.
@FUZZ
@example(bad=4096.0, good=0, which="start", position="offset")
@example(bad=4096.0, good=0, which="start", position="length")
@example(bad=np.float64(8192), good=0, which="is_active", position="length")
@given(bad=hostile(), good=valid_offset(), which=st.sampled_from(["start", "end", "is_active"]),
       position=st.sampled_from(["offset", "length"]))
def test_single_calls_reject_hostile_arguments_without_a_trace(tracker, bad, good, which, position):
    fn = getattr(tracker, which)
    args = (bad, 4096) if position == "offset" else (min(good, DEVICE - 4096), bad)
    ok = call_and_check(tracker, lambda: fn(*args), (position,) if position == "offset" else ("length", "range"))
    assert ok == valid_range(*args), f"{which}{args!r}: {'accepted' if ok else 'refused'}"
    if ok and which == "start":
        tracker.end(*args)  # keep the counters bounded


# Whole floats (4096.0, np.float64) are not ints: always tried, whatever Hypothesis draws.
@FUZZ
@example(offset=0.0, length=4096.0, which="start")
@example(offset=np.float64(0), length=4096, which="end")
@given(offset=hostile(), length=hostile(), which=st.sampled_from(["start", "end", "is_active"]))
def test_single_calls_with_two_hostile_arguments(tracker, offset, length, which):
    fn = getattr(tracker, which)
    ok = call_and_check(tracker, lambda: fn(offset, length), ())
    assert ok == valid_range(offset, length), f"{which}({offset!r}, {length!r}): {'accepted' if ok else 'refused'}"
    if ok and which == "start":
        tracker.end(offset, length)


@FUZZ
@given(bad=hostile())
def test_count_rejects_hostile_offsets(tracker, bad):
    ok = call_and_check(tracker, lambda: tracker.count(bad), ("offset",))
    assert ok == valid_range(bad, 1), f"count({bad!r}): {'accepted' if ok else 'refused'}"


# -- batch calls ----------------------------------------------------------------------------------------

@FUZZ
@given(offsets=hostile(), lengths=hostile() | st.sampled_from([4096, 1, np.int32(512)]),
       which=st.sampled_from(["start_many", "end_many", "is_active_many"]))
def test_batch_calls_validate_everything_before_changing_anything(tracker, offsets, lengths, which):
    fn = getattr(tracker, which)
    before = snapshot(tracker)
    try:
        out = fn(offsets, lengths)
    except (ValueError, TypeError) as exc:
        assert snapshot(tracker) == before, f"state changed by a failed batch: {exc}"
        assert "offsets" in str(exc) or "lengths" in str(exc) or "range" in str(exc), str(exc)
        return
    if which == "start_many":
        tracker.end_many(offsets, lengths)
    if which != "end_many":
        assert isinstance(out, np.ndarray) and out.dtype == np.bool_


@FUZZ
@given(offsets=hnp.arrays(hnp.integer_dtypes(endianness="=") | hnp.unsigned_integer_dtypes(endianness="="),
                          st.integers(1, 20), elements=st.integers(0, 127)),
       bad_at=st.integers(0, 19), bad=st.sampled_from([-1, DEVICE, 2**62, -(2**62)]))
def test_one_bad_element_anywhere_changes_nothing(tracker, offsets, bad_at, bad):
    offs = offsets.astype(np.int64) * 65536
    if bad < 0:
        assume(np.issubdtype(offsets.dtype, np.signedinteger))
    offs[bad_at % offs.size] = bad
    for fn in (tracker.start_many, tracker.end_many, tracker.is_active_many):
        call_and_check(tracker, lambda: fn(offs, 4096), ("offsets", "range"))
        lens = np.full(offs.size, 4096, dtype=np.int64)
        lens[bad_at % offs.size] = 0 if bad > 0 else DEVICE
        call_and_check(tracker, lambda: fn(offs, lens), ("offsets", "lengths", "range"))


# -- construction ---------------------------------------------------------------------------------------

KWARGS = ("chunk_size", "sync", "counter_bits", "overflow", "alloc_failure", "pool_pages", "fault")


def _int_in(lo: int, hi: int) -> Callable[[Any], bool]:
    return lambda v: is_int(v) and lo <= int(v) <= hi


def _one_of(*names: str) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, str) and v in names


# What the constructor must accept for each argument, the others being the test's defaults
# (chunk_size 1 MiB, alloc_failure "pool" when pool_pages is drawn). Option names new to the tracker
# are accepted too (a string outside these must be refused).
CTOR_VALID: dict[str, Callable[[Any], bool]] = {
    "device_size": _int_in(1, 1 << 62),
    "chunk_size": lambda v: _int_in(512, 1 << 62)(v) and int(v) & (int(v) - 1) == 0,
    "sync": _one_of("global", "page", "atomic"),
    "counter_bits": lambda v: v is None or (is_int(v) and int(v) in (16, 32, 64)),
    "overflow": _one_of("wrap", "clamp", "wait"),
    "alloc_failure": _one_of("untracked", "hijack", "pool", "mempool"),
    "pool_pages": _int_in(0, 1 << 20),
    "fault": lambda v: v is None or isinstance(v, FaultInjection),
}


@FUZZ
@given(name=st.sampled_from(("device_size",) + KWARGS), bad=hostile())
def test_constructor_rejects_hostile_arguments_by_name(name, bad):
    kwargs: dict[str, Any] = {"chunk_size": 1 << 20}
    if name == "pool_pages":
        kwargs["alloc_failure"] = "pool"
    size = 1 << 30
    if name == "device_size":
        size = bad
        # A valid huge device with 1 MiB chunks is a legitimate multi-GiB directory: not hostile.
        assume(not (is_int(bad) and 1 << 40 < int(bad) <= 1 << 62))
    else:
        kwargs[name] = bad
        if name == "chunk_size":
            assume(not (is_int(bad) and 0 < int(bad) < 4096))  # tiny chunks of 1 GiB: large but legitimate
    valid = CTOR_VALID[name](bad)
    try:
        t = BypassWriteTracker(size, **kwargs)
    except (ValueError, TypeError) as exc:
        assert not valid, f"valid {name}={bad!r} refused: {exc}"
        assert name in str(exc) or (name == "device_size" and "device" in str(exc)), str(exc)
        return
    assert valid, f"invalid {name}={bad!r} accepted"
    assert t.device_size == int(size)
    assert snapshot(t)[1]["starts"] == 0


@FUZZ
@given(name=st.sampled_from(["probability", "interval", "times", "space", "seed"]), bad=hostile())
def test_fault_injection_rejects_hostile_attributes_by_name(name, bad):
    valid = {"probability": lambda v: (is_int(v) or isinstance(v, (float, np.floating))) and 0 <= v <= 1,
             "interval": _int_in(1, 2**63 - 1), "times": _int_in(-1, 2**63 - 1), "space": _int_in(0, 2**63 - 1),
             "seed": _int_in(0, 2**63 - 1)}[name](bad)
    try:
        f = FaultInjection(**{name: bad})
    except (ValueError, TypeError) as exc:
        assert not valid, f"valid {name}={bad!r} refused: {exc}"
        assert name in str(exc), str(exc)
        return
    assert valid, f"invalid {name}={bad!r} accepted"
    assert f.injected == 0 and 0.0 <= f.probability <= 1.0 and f.interval >= 1 and f.times >= -1


STRESS_OK = dict(threads=2, ops=3, region=None, write_length=4096, depth=2, partition=False, reclaim_every=0,
                 seed=0)


@settings(max_examples=200, deadline=None)
@given(name=st.sampled_from(sorted(STRESS_OK) + ["seconds"]), bad=hostile())
def test_native_stress_rejects_hostile_arguments(name, bad):
    t = BypassWriteTracker(DEVICE, chunk_size=CHUNK, sync="atomic")
    kwargs = dict(STRESS_OK)
    kwargs[name] = bad
    if name == "ops":
        assume(not (is_int(bad) and int(bad) > 10**5))  # a valid, long run
    if name == "threads":
        assume(not (is_int(bad) and int(bad) > 64))
    before = snapshot(t)
    try:
        res = pybcache.stress(t, **kwargs)
    except (ValueError, TypeError) as exc:
        assert snapshot(t) == before, str(exc)
        return
    assert res["ops"] >= 1 and not t.counts().any()


# -- regressions found by the fuzzing above ---------------------------------------------------------------

@pytest.mark.parametrize("value", [np.timedelta64(4096), np.timedelta64("NaT"), np.timedelta64(1, "D")],
                         ids=["td", "NaT", "days"])
def test_a_numpy_timedelta_is_not_an_integer_argument(value):
    # np.timedelta64 subclasses np.signedinteger, so it passed the integer check and was either taken as
    # a byte offset or failed inside int() with a message that named no argument.
    t = BypassWriteTracker(DEVICE, chunk_size=CHUNK)
    with pytest.raises(TypeError, match="offset"):
        t.count(value)
    with pytest.raises(TypeError, match="offset"):
        t.start(value, 4096)
    with pytest.raises(TypeError, match="length"):
        t.is_active(0, value)
    with pytest.raises(TypeError, match="lengths"):
        t.start_many(np.zeros(2, dtype=np.int64), value)
    with pytest.raises(TypeError, match="device_size"):
        BypassWriteTracker(value)
    with pytest.raises(TypeError, match="seed"):
        FaultInjection(seed=value)
    with pytest.raises(TypeError, match="probability"):
        FaultInjection(probability=value)
    assert not t.counts().any() and t.stats()["starts"] == 0
