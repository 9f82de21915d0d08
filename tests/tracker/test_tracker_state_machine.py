"""Hypothesis state machines: the C tracker against the pure-Python reference after every step."""
from __future__ import annotations

import hypothesis.strategies as st
import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import pybcache
from pybcache.bcache import reference
import pytest

pytestmark = pytest.mark.native

# A small geometry so that page and half boundaries are hit often: 4 KiB chunks, 32-bit counters
# (1024 per page = 4 MiB per page), a device of 3.5 pages.
CHUNK = 4096


def _machine(sync: str, bits: int, alloc_failure: str, overflow: str, probability: float, free: str = "eager",
             counter_max: int | None = None, lock: str = "pthread"):
    class TrackerVsReference(RuleBasedStateMachine):
        @initialize(seed=st.integers(0, 2**32))
        def build(self, seed: int) -> None:
            self.size = int(3.5 * (4096 * 8 // bits) * CHUNK) + 512
            fault = dict(probability=probability, seed=seed)
            pool = 2 if alloc_failure in ("pool", "mempool") else 0
            self.c = pybcache.BypassWriteTracker(
                self.size, chunk_size=CHUNK, sync=sync, counter_bits=bits, overflow=overflow,
                alloc_failure=alloc_failure, pool_pages=pool, free=free, counter_max=counter_max, lock=lock,
                fault=pybcache.FaultInjection(**fault) if probability else None)
            self.r = reference.BypassWriteTracker(
                self.size, chunk_size=CHUNK, sync=sync, counter_bits=bits, overflow=overflow,
                alloc_failure=alloc_failure, pool_pages=pool, free=free, counter_max=counter_max, lock=lock,
                fault=reference.FaultInjection(**fault) if probability else None)
            self.inflight: list[tuple[int, int]] = []

        def _range(self, data) -> tuple[int, int]:
            off = data.draw(st.integers(0, self.size - 1))
            n = data.draw(st.integers(1, min(self.size - off, 3 * 1024 * CHUNK)))
            return off, n

        @rule(data=st.data())
        def start(self, data) -> None:
            off, n = self._range(data)
            assert self.c.start(off, n) == self.r.start(off, n)
            self.inflight.append((off, n))

        @precondition(lambda self: self.inflight)
        @rule(data=st.data())
        def end_an_inflight_write(self, data) -> None:
            off, n = self.inflight.pop(data.draw(st.integers(0, len(self.inflight) - 1)))
            self.c.end(off, n)
            self.r.end(off, n)

        @rule(data=st.data())
        def end_that_may_underflow(self, data) -> None:
            off, n = self._range(data)
            self.c.end(off, n)
            self.r.end(off, n)

        @rule(data=st.data())
        def is_active(self, data) -> None:
            off, n = self._range(data)
            assert self.c.is_active(off, n) == self.r.is_active(off, n)

        @rule(data=st.data())
        def count(self, data) -> None:
            off = data.draw(st.integers(0, self.size - 1))
            assert self.c.count(off) == self.r.count(off)

        @rule(data=st.data(), k=st.integers(1, 8))
        def batch(self, data, k: int) -> None:
            ranges = [self._range(data) for _ in range(k)]
            offs = np.array([o for o, _ in ranges], dtype=np.int64)
            lens = np.array([n for _, n in ranges], dtype=np.int64)
            assert (self.c.start_many(offs, lens) == self.r.start_many(offs, lens)).all()
            assert (self.c.is_active_many(offs, lens) == self.r.is_active_many(offs, lens)).all()
            self.inflight.extend(ranges)

        @rule()
        def reclaim(self) -> None:
            assert self.c.reclaim() == self.r.reclaim()

        @invariant()
        def same_counters_stats_and_memory(self) -> None:
            if not hasattr(self, "c"):
                return
            assert (self.c.counts() == self.r.counts()).all()
            assert self.c.stats() == self.r.stats()
            assert self.c.memory() == self.r.memory()

    TrackerVsReference.TestCase.settings = settings(
        max_examples=30, stateful_step_count=30, deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    return TrackerVsReference


TestGlobal = _machine("global", 32, "hijack", "wrap", 0.0).TestCase
TestPage = _machine("page", 32, "hijack", "wrap", 0.0).TestCase
TestAtomic = _machine("atomic", 32, "hijack", "wrap", 0.0).TestCase
TestPageU16 = _machine("page", 16, "hijack", "clamp", 0.0).TestCase
TestAtomicU64 = _machine("atomic", 64, "hijack", "wrap", 0.0).TestCase
TestGlobalUntrackedFaults = _machine("global", 32, "untracked", "wrap", 0.3).TestCase
TestPageHijackFaults = _machine("page", 32, "hijack", "wrap", 0.5).TestCase
TestPagePoolFaults = _machine("page", 32, "pool", "wrap", 0.5).TestCase
TestAtomicHijackFaults = _machine("atomic", 32, "hijack", "wrap", 0.5).TestCase
TestAtomicPoolFaults = _machine("atomic", 16, "pool", "clamp", 0.5).TestCase
TestPageMempoolFaults = _machine("page", 32, "mempool", "wrap", 0.5).TestCase
TestAtomicMempoolFaults = _machine("atomic", 16, "mempool", "clamp", 0.5).TestCase
TestPageDeferred = _machine("page", 32, "hijack", "wrap", 0.5, free="deferred").TestCase
TestGlobalMempoolDeferred = _machine("global", 32, "mempool", "wrap", 0.5, free="deferred").TestCase
# A lowered maximum (md keeps 16383 in 16 bits): overflow within a few starts, hijacked halves included.
TestPageMax3Wrap = _machine("page", 32, "hijack", "wrap", 0.3, counter_max=3).TestCase
TestGlobalMax2Clamp = _machine("global", 16, "hijack", "clamp", 0.3, counter_max=2).TestCase
TestAtomicMax2Wrap = _machine("atomic", 64, "mempool", "wrap", 0.3, counter_max=2).TestCase
# The lock options: the same semantics whichever lock guards the slot (one thread: every lock mode's
# uncontended path, and the queued lock's registry entry for this thread).
TestGlobalTicket = _machine("global", 32, "mempool", "wrap", 0.3, lock="ticket").TestCase
TestPageMcs = _machine("page", 32, "hijack", "wrap", 0.3, lock="mcs").TestCase
TestGlobalMcsMax2Clamp = _machine("global", 16, "mempool", "clamp", 0.3, counter_max=2, lock="mcs").TestCase
