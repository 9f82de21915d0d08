"""64-bit jiffies, wrap-safe comparisons, kernel writeback tunables and the clocks the model reads.

Jiffies are unsigned 64-bit integers that wrap; two stamps are only ever compared through
:func:`time_after` and friends, which look at the signed difference, so a counter that starts just below
2**64 (tests do exactly that) orders stamps correctly across the wrap as long as they are less than
2**63 jiffies apart.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from functools import cached_property

from ..validate import check_int

__all__ = [
    "JIFFIES_BITS", "JIFFIES_MASK", "time_after", "time_before", "time_after_eq", "time_before_eq",
    "jiffies_add", "jiffies_diff", "msecs_to_jiffies", "initial_jiffies", "WritebackTunables",
    "SimulatedClock", "MonotonicClock", "Clock", "MAX_HZ",
]

JIFFIES_BITS = 64
JIFFIES_MASK = (1 << JIFFIES_BITS) - 1
_HALF = 1 << (JIFFIES_BITS - 1)
MAX_HZ = 100_000


def jiffies_diff(a: int, b: int) -> int:
    """``a - b`` as a signed 64-bit value: positive when ``a`` is later than ``b``."""
    d = (a - b) & JIFFIES_MASK
    return d - (1 << JIFFIES_BITS) if d >= _HALF else d


def time_after(a: int, b: int) -> bool:
    """True if stamp ``a`` is strictly later than ``b`` (the kernel's ``time_after64``)."""
    return jiffies_diff(a, b) > 0


def time_before(a: int, b: int) -> bool:
    """True if stamp ``a`` is strictly earlier than ``b`` (``time_before64``)."""
    return jiffies_diff(a, b) < 0


def time_after_eq(a: int, b: int) -> bool:
    """True if ``a`` is later than or equal to ``b`` (``time_after_eq64``)."""
    return jiffies_diff(a, b) >= 0


def time_before_eq(a: int, b: int) -> bool:
    """True if ``a`` is earlier than or equal to ``b`` (``time_before_eq64``)."""
    return jiffies_diff(a, b) <= 0


def jiffies_add(a: int, delta: int) -> int:
    """``a + delta`` modulo 2**64 (``delta`` may be negative)."""
    return (a + delta) & JIFFIES_MASK


def msecs_to_jiffies(msecs: int, hz: int) -> int:
    """Milliseconds to jiffies, rounding up as the kernel does.

    :param msecs: a non-negative number of milliseconds.
    :param hz: ticks per second, 1..100000.
    """
    msecs = check_int(msecs, "msecs", 0)
    hz = check_int(hz, "hz", 1, MAX_HZ)
    return -(-msecs * hz // 1000)


def initial_jiffies(hz: int) -> int:
    """The value the kernel's 64-bit jiffies counter has at boot (2**32 - 300 * HZ).

    The 32-bit view of the counter wraps five minutes after boot, so wrap bugs show up early.
    """
    hz = check_int(hz, "hz", 1, MAX_HZ)
    return ((1 << 32) - 300 * hz) & JIFFIES_MASK


@dataclass(frozen=True)
class WritebackTunables:
    """The ``vm.*`` writeback sysctls and HZ; every interval the model uses is derived from these.

    Defaults are the kernel's (mm/page-writeback.c, fs/fs-writeback.c). Changing one at run time (replace
    the model's ``tunables``) takes effect at the next call, as a sysctl write does. The instance is frozen,
    so each derived interval is computed once, at its first use (the model reads them on every tick).

    :param hz: jiffies per second (CONFIG_HZ), 1..100000; default 250.
    :param dirty_expire_centisecs: age after which dirty data is written by periodic writeback; 3000 (30 s).
    :param dirty_writeback_centisecs: period of the flusher's periodic wake-up; 500 (5 s).
    :param dirty_ratio: hard dirty threshold, percent of dirtyable memory; 20.
    :param dirty_background_ratio: background writeback threshold, percent; 10.
    :param ratelimit_pages: pages a task dirties between two throttling checks; 32.
    """

    hz: int = 250
    dirty_expire_centisecs: int = 3000
    dirty_writeback_centisecs: int = 500
    dirty_ratio: int = 20
    dirty_background_ratio: int = 10
    ratelimit_pages: int = 32

    def __post_init__(self) -> None:
        check_int(self.hz, "hz", 1, MAX_HZ)
        check_int(self.dirty_expire_centisecs, "dirty_expire_centisecs", 1, 10**9)
        check_int(self.dirty_writeback_centisecs, "dirty_writeback_centisecs", 1, 10**9)
        check_int(self.dirty_ratio, "dirty_ratio", 1, 100)
        check_int(self.dirty_background_ratio, "dirty_background_ratio", 0, 100)
        check_int(self.ratelimit_pages, "ratelimit_pages", 1, 1 << 30)

    @cached_property
    def expire_jiffies(self) -> int:
        """``dirty_expire_interval`` in jiffies (30 s = 30 * HZ by default)."""
        return msecs_to_jiffies(self.dirty_expire_centisecs * 10, self.hz)

    @cached_property
    def writeback_interval_jiffies(self) -> int:
        """``dirty_writeback_interval`` in jiffies (5 s by default)."""
        return msecs_to_jiffies(self.dirty_writeback_centisecs * 10, self.hz)

    @cached_property
    def foreign_update_interval(self) -> int:
        """How stale a foreign record's stamp may be before a new dirtying refreshes it: min(1 s, expire / 8)."""
        return min(self.hz, self.expire_jiffies // 8)

    @cached_property
    def foreign_window(self) -> int:
        """A foreign record is flushed only if it was stamped within this many jiffies (the expire interval)."""
        return self.expire_jiffies

    @cached_property
    def max_pause(self) -> int:
        """The longest single throttling pause, ``MAX_PAUSE`` = max(HZ/5, 1) jiffies (200 ms)."""
        return max(self.hz // 5, 1)

    @cached_property
    def bandwidth_interval(self) -> int:
        """``BANDWIDTH_INTERVAL`` = max(HZ/5, 1) jiffies: how often write bandwidth is re-estimated."""
        return max(self.hz // 5, 1)


class Clock:
    """Where the model reads the current 64-bit jiffies."""

    hz: int

    def now(self) -> int:  # pragma: no cover - interface
        """The current jiffies, modulo 2**64."""
        raise NotImplementedError


class SimulatedClock(Clock):
    """A jiffies counter that only moves when :meth:`advance` is called (simulated time, never sleeps).

    :param hz: jiffies per second, 1..100000; default 250.
    :param start: the counter's first value, 0..2**64-1; default :func:`initial_jiffies` (HZ).
    """

    def __init__(self, hz: int = 250, *, start: int | None = None) -> None:
        hz = check_int(hz, "hz", 1, MAX_HZ)
        start = initial_jiffies(hz) if start is None else check_int(start, "start", 0, JIFFIES_MASK)
        self.hz = hz
        self.start = start
        self._now = start
        self._elapsed = 0

    def now(self) -> int:
        """The current jiffies."""
        return self._now

    def advance(self, jiffies: int) -> int:
        """Move time forward by ``jiffies`` (>= 0) and return the new value (wrapping at 2**64)."""
        jiffies = check_int(jiffies, "jiffies", 0, _HALF - 1)
        self._elapsed += jiffies
        self._now = (self._now + jiffies) & JIFFIES_MASK
        return self._now

    @property
    def elapsed_jiffies(self) -> int:
        """Jiffies since construction (does not wrap)."""
        return self._elapsed

    @property
    def elapsed_seconds(self) -> float:
        """Seconds since construction."""
        return self._elapsed / self.hz


class MonotonicClock(Clock):
    """Jiffies derived from the host's monotonic clock, for the real-thread model.

    :param hz: jiffies per second, 1..100000; default 250.
    :param start: the value at construction, 0..2**64-1; default :func:`initial_jiffies` (HZ).
    """

    def __init__(self, hz: int = 250, *, start: int | None = None) -> None:
        hz = check_int(hz, "hz", 1, MAX_HZ)
        start = initial_jiffies(hz) if start is None else check_int(start, "start", 0, JIFFIES_MASK)
        self.hz = hz
        self.start = start
        self._t0 = time.monotonic()

    def now(self) -> int:
        """The current jiffies (monotonic, wrapping at 2**64)."""
        ticks = int((time.monotonic() - self._t0) * self.hz)
        return (self.start + ticks) & JIFFIES_MASK
