"""The pure-Python reference model of the bypass-write tracker: obvious, slow, single-threaded.

It is the oracle the tests compare the C core against after every step, and the baseline a user would
otherwise write. Same class names, constructor and methods as the compiled classes (docs/design.md, "The tracker");
it is not thread-safe, and where the C core would block (``overflow="wait"`` at a full counter) it raises
:class:`WouldBlock` instead. Under ``alloc_failure="mempool"`` with an empty reserve the C core waits
and retries the allocator (one fault-injection draw per attempt); with one thread nothing refills the
reserve meanwhile, so the model retries the allocator at once, the same attempts in the same order, and
raises :class:`WouldBlock` only if ``MEMPOOL_ATTEMPTS`` attempts all fail. Each failed attempt after the
second is preceded by one round that ran its whole length (``mempool_rounds``; no refill can end it, so
``mempool_wakeups`` stays 0). Under ``gfp="nowait"`` mempool makes one attempt, takes the reserve, and
otherwise returns NULL: the page is left untracked (``mempool_nulls``).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .variants import SYNCS

__all__ = ["BypassWriteTracker", "FaultInjection", "WouldBlock"]

PAGE_SIZE = 4096
SLOT_BYTES = 16
HALF_MAX = (1 << 31) - 1
_M64 = (1 << 64) - 1
MEMPOOL_ATTEMPTS = 10_000


class WouldBlock(RuntimeError):
    """A start reached a full counter under ``overflow="wait"``; the C core would block here."""


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


class FaultInjection:
    """The kernel's fault-injection attributes, evaluated in the kernel's order (see csrc/pyb_fault.h)."""

    def __init__(self, probability: float = 0.0, interval: int = 1, times: int = -1, space: int = 0,
                 seed: int = 0) -> None:
        if not 0.0 <= float(probability) <= 1.0:
            raise ValueError(f"probability must be in [0, 1], got {probability!r}")
        if interval < 1:
            raise ValueError(f"interval must be >= 1, got {interval!r}")
        if times < -1:
            raise ValueError(f"times must be -1 (unlimited) or >= 0, got {times!r}")
        if space < 0 or seed < 0:
            raise ValueError("space and seed must be >= 0")
        self.probability = float(probability)
        self.interval = interval
        self.times = times
        self.space = space
        self.seed = seed
        self._calls = 0
        self._draws = 0
        self.injected = 0

    def should_fail(self, size: int) -> bool:
        if self.times == 0:
            return False
        if self.space > size:
            self.space -= size
            return False
        if self.interval > 1:
            self._calls += 1
            if self._calls % self.interval:
                return False
        if self.probability < 1.0:
            if self.probability <= 0.0:
                return False
            u = (_splitmix64((self.seed + self._draws) & _M64) >> 11) * 2.0 ** -53
            self._draws += 1
            if u >= self.probability:
                return False
        if self.times != -1:
            self.times -= 1
        self.injected += 1
        return True


class _Slot:
    """A page slot: nothing, a page of counters, or two hijacked half counters."""

    __slots__ = ("page", "halves", "from_pool")

    def __init__(self) -> None:
        self.page: list[int] | None = None
        self.halves: list[int] | None = None
        self.from_pool = False


class BypassWriteTracker:
    """Reference model of :class:`pybcache.BypassWriteTracker` (same parameters and semantics)."""

    def __init__(self, device_size: int, *, chunk_size: int = 32 << 20, sync: str = "page",
                 counter_bits: int | None = None, overflow: str = "wait", alloc_failure: str = "mempool",
                 pool_pages: int = 0, fault: FaultInjection | None = None, lock: str = "pthread",
                 free: str = "eager", wait_timeout: float | None = 10.0, counter_max: int | None = None,
                 gfp: str = "noio", mempool_round: float | None = None) -> None:
        if device_size <= 0:
            raise ValueError("device_size must be > 0")
        if chunk_size < 512 or chunk_size & (chunk_size - 1):
            raise ValueError("chunk_size must be a power of two >= 512")
        if sync not in SYNCS:
            raise ValueError(f"unknown sync {sync!r}")
        if overflow not in ("wrap", "clamp", "wait"):
            raise ValueError(f"unknown overflow {overflow!r}")
        if alloc_failure not in ("untracked", "hijack", "pool", "mempool"):
            raise ValueError(f"unknown alloc_failure {alloc_failure!r}")
        if free not in ("eager", "deferred"):
            raise ValueError(f"unknown free {free!r}")
        if gfp not in ("noio", "nowait") or (gfp != "noio" and alloc_failure != "mempool"):
            raise ValueError(f"gfp {gfp!r} needs alloc_failure='mempool'")
        self.gfp = gfp
        self.mempool_round = 0.001 if mempool_round is None else mempool_round  # real time: none passes here
        self.device_size = device_size
        self.chunk_size = chunk_size
        self.sync = sync
        self.counter_bits = counter_bits if counter_bits is not None else (64 if sync == "atomic" else 16)
        self.overflow = overflow
        self.alloc_failure = alloc_failure
        self.pool_pages = pool_pages
        self.fault = fault
        self.lock = lock  # how a lock is waited for: no effect on semantics
        self.free = free
        self.wait_timeout = wait_timeout  # a bound on real waits: none happen in this model
        self.n_chunks = -(-device_size // chunk_size)
        self.chunks_per_page = PAGE_SIZE * 8 // self.counter_bits
        self.half_chunks = self.chunks_per_page // 2
        self.n_pages = -(-self.n_chunks // self.chunks_per_page)
        width_max = (1 << self.counter_bits) - 1
        if counter_max is not None and not 1 <= counter_max <= width_max:
            raise ValueError(f"counter_max must be in [1, {width_max}] or None")
        self.counter_max = width_max if counter_max is None else counter_max
        self.half_max = min(self.counter_max, HALF_MAX)
        self._slots = [_Slot() for _ in range(self.n_pages)]
        self._pool_free = pool_pages
        self._stats = dict.fromkeys(
            ("starts", "ends", "untracked_writes", "alloc_failures", "underflows", "hijack_events",
             "overflow_waits", "overflow_clamps", "overflow_wraps", "pages_allocated", "pages_freed",
             "mempool_waits", "pool_refills", "mempool_rounds", "mempool_wakeups", "mempool_nulls"), 0)
        self._page_bytes = PAGE_SIZE * pool_pages
        self._peak_page_bytes = self._page_bytes
        self._pages = 0
        self._peak_pages = 0
        self._waited_for_page = False  # the current start already counted a mempool wait

    @classmethod
    def posted_v2(cls, device_size: int, *, free: str = "eager", **overrides: Any) -> "BypassWriteTracker":
        kw: dict[str, Any] = dict(sync="page", counter_bits=16, overflow="wrap", alloc_failure="untracked",
                                  free=free)
        kw.update(overrides)
        return cls(device_size, **kw)

    # -- geometry --------------------------------------------------------------------------------

    def _check(self, offset: int, length: int) -> None:
        if not 0 <= offset < self.device_size:
            raise ValueError(f"offset must be in [0, {self.device_size})")
        if length <= 0:
            raise ValueError("length must be > 0")
        if offset + length > self.device_size:
            raise ValueError("range ends past device_size")

    def _pages_of(self, offset: int, length: int):
        """Yield (page, first, last) page-relative chunk ranges of [offset, offset+length)."""
        c0, c1 = offset // self.chunk_size, (offset + length - 1) // self.chunk_size
        for p in range(c0 // self.chunks_per_page, c1 // self.chunks_per_page + 1):
            base = p * self.chunks_per_page
            yield p, max(c0, base) - base, min(c1, base + self.chunks_per_page - 1) - base

    def _halves(self, a: int, b: int) -> range:
        return range(a // self.half_chunks, b // self.half_chunks + 1)

    # -- page life ---------------------------------------------------------------------------------

    def _gain_page(self, slot: _Slot, from_pool: bool) -> None:
        slot.page = [0] * self.chunks_per_page
        slot.from_pool = from_pool
        self._pages += 1
        self._peak_pages = max(self._peak_pages, self._pages)

    def _drop_page(self, slot: _Slot) -> None:
        slot.page = None
        self._pages -= 1
        if self.alloc_failure == "mempool" and self._pool_free < self.pool_pages:
            self._pool_free += 1  # mempool_free: back to the reserve while it is below its minimum
            self._stats["pool_refills"] += 1
        elif slot.from_pool and self.alloc_failure == "pool":
            self._pool_free += 1
        else:
            self._page_bytes -= PAGE_SIZE
            self._stats["pages_freed"] += 1
        slot.from_pool = False

    def _allocate(self, slot: _Slot) -> bool:
        """Try to give an empty slot a page; False if the policy must now hijack or skip."""
        attempts = 0
        while self.fault is not None and self.fault.should_fail(PAGE_SIZE):
            self._stats["alloc_failures"] += 1
            if self.alloc_failure in ("pool", "mempool") and self._pool_free:
                self._pool_free -= 1
                self._gain_page(slot, True)
                return True
            if self.alloc_failure != "mempool":
                return False
            if self.gfp == "nowait":  # no direct reclaim: NULL after one attempt and the reserve
                self._stats["mempool_nulls"] += 1
                return False
            # mempool_alloc: a second attempt at once, then wait for a page (none comes back with one
            # thread: each round runs its whole length) and retry the allocator
            attempts += 1
            if attempts >= 2 and not self._waited_for_page:
                self._waited_for_page = True
                self._stats["mempool_waits"] += 1
            if attempts >= 2:
                self._stats["mempool_rounds"] += 1
            if attempts >= MEMPOOL_ATTEMPTS:
                raise WouldBlock(f"{attempts} allocation attempts failed under alloc_failure='mempool'")
        self._page_bytes += PAGE_SIZE
        self._peak_page_bytes = max(self._peak_page_bytes, self._page_bytes)
        self._stats["pages_allocated"] += 1
        self._gain_page(slot, False)
        return True

    def _frees_eagerly(self) -> bool:
        """Lock variants under free="eager" free a page when its last counter drops to zero; the atomic
        variant and free="deferred" only in reclaim()."""
        return self.sync != "atomic" and self.free == "eager"

    def _bump(self, value: int, maximum: int) -> int | None:
        """value + 1 under the overflow policy; None = increment dropped (clamp)."""
        if value < maximum:
            return value + 1
        if self.overflow == "wrap":
            self._stats["overflow_wraps"] += 1
            return 0
        if self.overflow == "clamp":
            self._stats["overflow_clamps"] += 1
            return None
        raise WouldBlock("counter at its maximum under overflow='wait'")

    # -- operations --------------------------------------------------------------------------------

    def start(self, offset: int, length: int) -> bool:
        self._check(offset, length)
        self._waited_for_page = False  # mempool_waits counts starts that waited, once each
        tracked = True
        for p, a, b in self._pages_of(offset, length):
            slot = self._slots[p]
            if slot.page is None and slot.halves is None:
                if not self._allocate(slot):
                    if self.alloc_failure in ("untracked", "mempool"):  # mempool: a NOWAIT NULL
                        tracked = False
                        continue
                    slot.halves = [0, 0]
                    self._stats["hijack_events"] += 1
            if slot.halves is not None:
                for h in self._halves(a, b):
                    v = self._bump(slot.halves[h], self.half_max)
                    if v is not None:
                        slot.halves[h] = v
                if slot.halves == [0, 0]:
                    slot.halves = None
                continue
            assert slot.page is not None
            for c in range(a, b + 1):
                v = self._bump(slot.page[c], self.counter_max)
                if v is not None:
                    slot.page[c] = v
            if self._frees_eagerly() and not any(slot.page):
                self._drop_page(slot)
        self._stats["starts"] += 1
        if not tracked:
            self._stats["untracked_writes"] += 1
        return tracked

    def end(self, offset: int, length: int) -> None:
        self._check(offset, length)
        for p, a, b in self._pages_of(offset, length):
            slot = self._slots[p]
            if slot.halves is not None:
                for h in self._halves(a, b):
                    if slot.halves[h] == 0:
                        self._stats["underflows"] += 1
                    else:
                        slot.halves[h] -= 1
                if slot.halves == [0, 0]:
                    slot.halves = None
            elif slot.page is not None:
                for c in range(a, b + 1):
                    if slot.page[c] == 0:
                        self._stats["underflows"] += 1
                    else:
                        slot.page[c] -= 1
                if self._frees_eagerly() and not any(slot.page):
                    self._drop_page(slot)
            else:
                self._stats["underflows"] += b - a + 1
        self._stats["ends"] += 1

    def is_active(self, offset: int, length: int) -> bool:
        self._check(offset, length)
        for p, a, b in self._pages_of(offset, length):
            slot = self._slots[p]
            if slot.halves is not None and any(slot.halves[h] for h in self._halves(a, b)):
                return True
            if slot.page is not None and any(slot.page[a:b + 1]):
                return True
        return False

    def count(self, offset: int) -> int:
        if not 0 <= offset < self.device_size:
            raise ValueError(f"offset must be in [0, {self.device_size})")
        chunk = offset // self.chunk_size
        slot = self._slots[chunk // self.chunks_per_page]
        c = chunk % self.chunks_per_page
        if slot.halves is not None:
            return slot.halves[c // self.half_chunks]
        return slot.page[c] if slot.page is not None else 0

    def start_many(self, offsets, lengths) -> np.ndarray:
        offs, lens = self._batch(offsets, lengths)
        return np.array([self.start(o, n) for o, n in zip(offs, lens)], dtype=bool)

    def end_many(self, offsets, lengths) -> None:
        offs, lens = self._batch(offsets, lengths)
        for o, n in zip(offs, lens):
            self.end(o, n)

    def is_active_many(self, offsets, lengths) -> np.ndarray:
        offs, lens = self._batch(offsets, lengths)
        return np.array([self.is_active(o, n) for o, n in zip(offs, lens)], dtype=bool)

    def _batch(self, offsets, lengths) -> tuple[list[int], list[int]]:
        offs = [int(o) for o in offsets]
        lens = [int(lengths)] * len(offs) if np.ndim(lengths) == 0 else [int(n) for n in lengths]
        for o, n in zip(offs, lens):
            self._check(o, n)
        return offs, lens

    def counts(self) -> np.ndarray:
        return np.array([self.count(c * self.chunk_size) for c in range(self.n_chunks)], dtype=np.uint64)

    def reclaim(self) -> int:
        freed = 0
        for slot in self._slots:
            if slot.page is not None and not any(slot.page):
                self._drop_page(slot)
                freed += 1
        return freed

    def stats(self) -> dict[str, int]:
        out = dict(self._stats)
        out["hijacked_pages"] = sum(s.halves is not None for s in self._slots)
        out["pool_pages_used"] = self.pool_pages - self._pool_free
        return out

    def memory(self) -> dict[str, int]:
        directory = SLOT_BYTES * self.n_pages
        return {
            "directory_bytes": directory, "page_bytes": self._page_bytes,
            "total_bytes": directory + self._page_bytes, "peak_bytes": directory + self._peak_page_bytes,
            "pages": self._pages, "peak_pages": self._peak_pages,
        }
