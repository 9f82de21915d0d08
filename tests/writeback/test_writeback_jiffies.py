"""64-bit jiffies: wrap-safe comparisons, HZ-derived intervals, clocks."""
from __future__ import annotations

import pytest

from pybcache.writeback import (JIFFIES_MASK, SimulatedClock, WritebackTunables, initial_jiffies, jiffies_add,
                                jiffies_diff, msecs_to_jiffies, time_after, time_after_eq, time_before,
                                time_before_eq)

NEAR_WRAP = JIFFIES_MASK - 5


def test_comparisons_order_stamps_across_the_64_bit_wrap():
    before = NEAR_WRAP
    after = jiffies_add(before, 10)  # wrapped to a small number
    assert after < before
    assert time_after(after, before) and time_before(before, after)
    assert time_after_eq(after, before) and time_before_eq(before, after)
    assert not time_after(before, after) and not time_before(after, before)
    assert jiffies_diff(after, before) == 10 and jiffies_diff(before, after) == -10


def test_equal_stamps_are_neither_before_nor_after():
    assert not time_after(7, 7) and not time_before(7, 7)
    assert time_after_eq(7, 7) and time_before_eq(7, 7)


def test_simulated_clock_started_near_the_wrap_keeps_elapsed_time():
    clock = SimulatedClock(250, start=NEAR_WRAP)
    t0 = clock.now()
    clock.advance(1000)
    assert clock.now() == (NEAR_WRAP + 1000) & JIFFIES_MASK
    assert time_after(clock.now(), t0)
    assert clock.elapsed_jiffies == 1000 and clock.elapsed_seconds == 4.0


def test_initial_jiffies_matches_the_kernel_boot_value():
    assert initial_jiffies(1000) == (1 << 32) - 300 * 1000
    assert SimulatedClock(100).now() == (1 << 32) - 300 * 100


def test_msecs_to_jiffies_rounds_up():
    assert msecs_to_jiffies(30000, 250) == 7500
    assert msecs_to_jiffies(1, 100) == 1
    assert msecs_to_jiffies(0, 100) == 0
    assert msecs_to_jiffies(5, 300) == 2


@pytest.mark.parametrize("hz", [100, 250, 300, 1000])
def test_intervals_follow_hz(hz):
    t = WritebackTunables(hz=hz)
    assert t.expire_jiffies == 30 * hz                # the 30 s foreign window
    assert t.foreign_window == 30 * hz
    assert t.foreign_update_interval == hz            # min(1 s, 30 s / 8)
    assert t.writeback_interval_jiffies == 5 * hz
    assert t.max_pause == max(hz // 5, 1)


def test_short_expire_interval_shrinks_the_update_interval():
    t = WritebackTunables(hz=1000, dirty_expire_centisecs=400)  # 4 s: expire/8 = 0.5 s < 1 s
    assert t.foreign_update_interval == 500
    assert t.foreign_window == 4000


@pytest.mark.parametrize("kwargs, exc, word", [
    ({"hz": 0}, ValueError, "hz"),
    ({"hz": 2.5}, TypeError, "hz"),
    ({"dirty_ratio": 101}, ValueError, "dirty_ratio"),
    ({"dirty_expire_centisecs": -1}, ValueError, "dirty_expire_centisecs"),
    ({"ratelimit_pages": True}, TypeError, "ratelimit_pages"),
])
def test_bad_tunables_are_refused_with_the_argument_named(kwargs, exc, word):
    with pytest.raises(exc, match=word):
        WritebackTunables(**kwargs)


def test_bad_clock_arguments_are_refused():
    with pytest.raises(ValueError, match="start"):
        SimulatedClock(100, start=-1)
    with pytest.raises(ValueError, match="start"):
        SimulatedClock(100, start=1 << 64)
    clock = SimulatedClock(100)
    before = clock.now()
    with pytest.raises(ValueError, match="jiffies"):
        clock.advance(-1)
    assert clock.now() == before


HZ = 100


def test_the_simulated_clock_advances_by_0_to_2_63_minus_1_jiffies():
    clock = SimulatedClock(HZ, start=0)
    assert clock.advance(0) == 0
    assert clock.advance((1 << 63) - 1) == (1 << 63) - 1
    for bad, exc, message in (("1", TypeError, "jiffies must be an int in [0, 9223372036854775807], got str"),
                              (-1, ValueError, "jiffies must be in [0, 9223372036854775807], got -1"),
                              (1 << 63, ValueError, "jiffies must be in [0, 9223372036854775807], got "
                                                    "9223372036854775808")):
        with pytest.raises(exc) as info:
            clock.advance(bad)
        assert str(info.value) == message
    assert clock.elapsed_jiffies == (1 << 63) - 1


def test_the_monotonic_clock_counts_hz_ticks_of_host_time_from_its_start_across_the_wrap(monkeypatch):
    import pybcache.writeback.jiffies as jiffies_module
    host = iter([100.0, 100.5, 102.0])
    monkeypatch.setattr(jiffies_module.time, "monotonic", lambda: next(host))
    clock = jiffies_module.MonotonicClock(start=(1 << 64) - 10)
    assert clock.hz == 250
    assert clock.now() == 125 - 10                          # half a second at HZ 250, wrapped
    assert clock.now() == 500 - 10
    monkeypatch.undo()
    default = jiffies_module.MonotonicClock(1)
    assert default.start == jiffies_module.initial_jiffies(1)
    assert jiffies_module.MonotonicClock(start=0).start == 0
    for kwargs, exc, message in (({"hz": 0}, ValueError, "hz must be in [1, 100000], got 0"),
                                 ({"hz": "1"}, TypeError, "hz must be an int in [1, 100000], got str"),
                                 ({"start": -1}, ValueError, "start must be in [0, 18446744073709551615], got -1"),
                                 ({"start": 1 << 64}, ValueError,
                                  "start must be in [0, 18446744073709551615], got 18446744073709551616")):
        with pytest.raises(exc) as info:
            jiffies_module.MonotonicClock(**kwargs)
        assert str(info.value) == message


def raises(call, exc: type[Exception], message: str) -> None:
    with pytest.raises(exc) as info:
        call()
    assert str(info.value) == message


# -- jiffies.py ------------------------------------------------------------------------------------------------------
def test_stamps_half_the_counter_apart_compare_as_the_later_one_being_earlier():
    half = 1 << 63
    assert jiffies_diff(half, 0) == -half              # (s64)(a - b) of 2**63 is the most negative value
    assert not time_after(half, 0) and not time_after(0, half)   # each is before the other
    assert time_after(1, 0) and not time_after(0, 0)


def test_time_conversions_name_their_arguments_and_the_hz_range():
    raises(lambda: msecs_to_jiffies(-1, 100), ValueError, "msecs must be in [0, inf), got -1")
    raises(lambda: msecs_to_jiffies(1, 100_001), ValueError, "hz must be in [1, 100000], got 100001")
    raises(lambda: initial_jiffies(100_001), ValueError, "hz must be in [1, 100000], got 100001")
    raises(lambda: SimulatedClock(100_001), ValueError, "hz must be in [1, 100000], got 100001")
    raises(lambda: SimulatedClock(100_001, start=0), ValueError, "hz must be in [1, 100000], got 100001")
    raises(lambda: SimulatedClock(100, start=-1), ValueError, f"start must be in [0, {(1 << 64) - 1}], got -1")
    assert msecs_to_jiffies(1, 100_000) == 100 and initial_jiffies(100_000) == (1 << 32) - 30_000_000


def test_the_simulated_clock_runs_at_250_hz_by_default_from_the_start_it_is_given():
    assert SimulatedClock().hz == 250
    clock = SimulatedClock(100, start=5)
    assert clock.start == 5 and clock.now() == 5


@pytest.mark.parametrize("field, lo, hi", [
    ("hz", 1, 100_000),
    ("dirty_expire_centisecs", 1, 10**9),
    ("dirty_writeback_centisecs", 1, 10**9),
    ("dirty_ratio", 1, 100),
    ("dirty_background_ratio", 0, 100),
    ("ratelimit_pages", 1, 1 << 30),
])
def test_each_tunable_is_refused_by_name_outside_its_range_and_taken_at_its_bounds(field, lo, hi):
    raises(lambda: WritebackTunables(**{field: lo - 1}), ValueError, f"{field} must be in [{lo}, {hi}], got {lo - 1}")
    raises(lambda: WritebackTunables(**{field: hi + 1}), ValueError, f"{field} must be in [{lo}, {hi}], got {hi + 1}")
    assert getattr(WritebackTunables(**{field: lo}), field) == lo
    assert getattr(WritebackTunables(**{field: hi}), field) == hi
