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
