"""Hot-path costs of each tracker variant next to the machine's own floors, measured in one run.

Absolute times on a shared machine are noise; the ratios to floors measured in the same process a
moment earlier are the result. Every figure is the best of ``repeats`` timed runs.
"""
from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

from . import reference
from ._tracker import BypassWriteTracker, _EmptyPair, floors
from .stress import stress

__all__ = ["run_bench", "VARIANTS"]

VARIANTS = ("global", "page", "atomic")
GiB = 1 << 30
WRITE = 128 * 1024


def _best(fn: Callable[[], float], repeats: int) -> float:
    return min(fn() for _ in range(repeats))


def _single_pair_ns(obj: Any, offsets: list[int], length: int) -> float:
    start, end = obj.start, obj.end
    t0 = time.perf_counter_ns()
    for off in offsets:
        start(off, length)
        end(off, length)
    return (time.perf_counter_ns() - t0) / len(offsets)


def _batch_pair_ns(t: BypassWriteTracker, offsets: np.ndarray, length: int) -> float:
    t0 = time.perf_counter_ns()
    t.start_many(offsets, length)
    t.end_many(offsets, length)
    return (time.perf_counter_ns() - t0) / len(offsets)


def _batch_check_ns(t: BypassWriteTracker, offsets: np.ndarray) -> float:
    t0 = time.perf_counter_ns()
    t.is_active_many(offsets, 4096)
    return (time.perf_counter_ns() - t0) / len(offsets)


def run_bench(*, quick: bool = False, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Measure floors and per-variant hot paths.

    :param quick: fewer iterations (for tests and ``report --quick``).
    :param progress: called with a label before each step.
    :returns: ``{"floors": {...}, "results": [per variant {...}], "params": {...}}``.
    """
    note = progress or (lambda label: None)
    n_batch = 50_000 if quick else 400_000
    n_single = 20_000 if quick else 200_000
    n_ref = 2_000 if quick else 10_000
    repeats = 3 if quick else 5
    stress_ops = 100_000 if quick else 1_000_000
    rng = np.random.default_rng(0)
    size = 10 * GiB  # the seed's 10 GB workload: one tracking page
    offs = (rng.integers(0, (size - WRITE) // 4096, n_batch) * 4096).astype(np.int64)
    single = [int(x) for x in offs[:n_single]]

    note("floors")
    fl = _best_floor(n_batch * 4, repeats)
    empty = _EmptyPair()
    fl["cython_empty_pair_ns"] = _best(lambda: _single_pair_ns(empty, single, WRITE), repeats)

    results = []
    for sync in VARIANTS:
        note(sync)
        t = BypassWriteTracker(size, sync=sync)
        floor_key = "atomic_pair_ns" if sync == "atomic" else "spinlock_pair_ns"
        # Cold: every pair allocates and frees the page (nothing else in flight on it).
        cold = _best(lambda: _single_pair_ns(t, single[: n_single // 4], WRITE), repeats)
        # Steady state (the seed's fio: a tracking page stays active): one write held in flight
        # keeps the page resident while the measured pairs come and go.
        t.start(size - 4096, 4096)
        batch = _best(lambda: _batch_pair_ns(t, offs, WRITE), repeats)
        check = _best(lambda: _batch_check_ns(t, offs), repeats)
        one = _best(lambda: _single_pair_ns(t, single, WRITE), repeats)
        t.end(size - 4096, 4096)
        ref = reference.BypassWriteTracker(size, sync=sync)
        ref.start(size - 4096, 4096)
        ref_pair = _best(lambda: _single_pair_ns(ref, single[:n_ref], WRITE), 1)
        # Native scaling on distinct pages. Four 16-byte slots share a 64-byte cache line, so the
        # threads get 4 pages each: thread 0 pages 0-3, thread 1 pages 4-7 (different lines). The
        # adjacent-pages run (thread 0 page 0, thread 1 page 1: one line) shows the false sharing.
        big = BypassWriteTracker(8 * 64 * GiB, sync=sync)
        page_span = big.chunks_per_page * big.chunk_size
        kw = dict(ops=stress_ops, write_length=WRITE, partition=True)
        s1 = stress(big, threads=1, region=(0, 4 * page_span), **kw)
        s2 = stress(big, threads=2, region=(0, 8 * page_span), **kw)
        s1a = stress(big, threads=1, region=(0, page_span), **kw)
        s2a = stress(big, threads=2, region=(0, 2 * page_span), **kw)
        results.append({
            "variant": sync,
            "batch_pair_ns": batch,
            "batch_pair_vs_floor": batch / fl[floor_key],
            "floor": floor_key,
            "batch_check_ns": check,
            "single_pair_ns": one,
            "single_pair_vs_empty_call": one / fl["cython_empty_pair_ns"],
            "single_pair_cold_ns": cold,
            "reference_pair_ns": ref_pair,
            "speedup_vs_reference": ref_pair / one,
            "stress_1thread_ops_per_s": s1["ops_per_s"],
            "stress_2thread_ops_per_s": s2["ops_per_s"],
            "scaling_2_over_1": s2["ops_per_s"] / s1["ops_per_s"],
            "scaling_2_over_1_adjacent_slots": s2a["ops_per_s"] / s1a["ops_per_s"],
        })
    return {"floors": fl, "results": results,
            "params": {"batch_ops": n_batch, "single_ops": n_single, "repeats": repeats, "device_size": size,
                       "write_length": WRITE, "stress_ops_per_thread": stress_ops}}


def _best_floor(n: int, repeats: int) -> dict[str, float]:
    runs = [floors(n) for _ in range(repeats)]
    return {k: min(r[k] for r in runs) for k in runs[0]}
