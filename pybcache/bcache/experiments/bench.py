"""Hot-path costs of each tracker variant next to the machine's own floors, measured in one run.

Absolute times on a shared machine are noise; the ratios to floors measured in the same process a
moment earlier are the result. Every figure is the best of ``repeats`` timed runs, except the batch pair
against its floor: a best of N of each, taken at different moments, swung with the load (1.5x in one run,
4x in the next), so the two are timed in interleaved rounds and judged on the median ratio
(:func:`batch_vs_floor`).

Beyond the single-thread hot paths (:func:`run_bench`):

* *scaling and oversubscription* (:func:`run_scaling`): the native stress with 1, 2, 4 and 8 threads, all
  pinned to the same 2 CPUs, on the v2 cover letter's 10 GiB workload (one tracking page shared by every thread),
  with one iteration in ``sample_every`` timed for p50/p99 per-op latency. 4 and 8 threads on 2 cores is
  where a preempted ``pthread_spin_lock`` holder makes the spinners burn their time slice;
* *same-chunk contention* (:func:`run_same_chunk`): 2 threads doing start/end pairs on one chunk against
  the 2-thread cache-line bounce floor (one atomic counter, fetch_add/fetch_sub from both threads).

Every stress here runs with ``completions="inline"`` (each thread ends its own writes): these figures
are the tracker's start/end/check cost per thread, which a hand-over to completion threads would mix
with the cost of the hand-over itself.
"""
from __future__ import annotations

import os
import time
from typing import Any, Callable

import numpy as np

from .. import reference
from .._tracker import BypassWriteTracker, _EmptyPair, floor_pair_ns, floors, lock_floors, native_stress
from ..stress import stress
from ..variants import SYNCS
from ...units import GiB, MiB
from ...validate import check_int, check_number

__all__ = ["run_bench", "run_scaling", "run_same_chunk", "THREADS", "OVERSUBSCRIBED_CPUS",
           "TARGET_P99_NS", "TARGET_SAME_CHUNK_VS_FLOOR", "TARGET_BATCH_VS_FLOOR", "TARGET_IDLE_VS_WARM",
           "BATCH_ROUNDS", "NOT_MEASURED", "batch_vs_floor"]

#: The scaling runs add the lock variants with the spin-then-yield lock (``lock="spin_yield"``).
SCALING_VARIANTS = SYNCS + ("global+yield", "page+yield")


#: Same-chunk options beside the default (issue 15): the lock variants with a FIFO ticket lock and with
#: the queued lock (``lock="mcs"``).
SAME_CHUNK_LOCK_OPTIONS = ("global+ticket", "page+ticket", "global+mcs", "page+mcs")
#: A variant name's lock suffix -> the tracker's ``lock=`` (no suffix: the default, ``"pthread"``).
_LOCK_OF_SUFFIX = {"yield": "spin_yield", "ticket": "ticket", "mcs": "mcs"}
#: The lock_floors key of each lock's 2-thread floor (counter on its own line, as in the tracker).
_LOCK_FLOOR_KEY = {"pthread": "shared_spin_pair_ns", "ticket": "shared_ticket_pair_ns", "mcs": "shared_mcs_pair_ns"}
#: Why a figure is None: a run in which a thread made no operation has no time per operation (seen under heavy
#: load), so the comparisons that need it are not measured rather than a division by zero or a made-up number.
NOT_MEASURED = "not measured: 0 operations in the run"


def _tracker_for(variant: str, size: int) -> BypassWriteTracker:
    """A tracker for a variant name: a sync name, optionally with ``+yield``, ``+ticket`` or ``+mcs`` (the
    lock)."""
    sync, _, lock = variant.partition("+")
    return BypassWriteTracker(size, sync=sync, lock=_LOCK_OF_SUFFIX.get(lock, "pthread"))
WRITE = 128 * 1024
#: Thread counts of the scaling runs, all on OVERSUBSCRIBED_CPUS CPUs (4 and 8 oversubscribe them).
THREADS = (1, 2, 4, 8)
OVERSUBSCRIBED_CPUS = 2
#: The tracker core's targets (issue 6): p99 per-op latency with 4 and 8 threads on 2 cores, and 2
#: threads on one chunk against the 2-thread cache-line bounce floor.
TARGET_P99_NS = 20_000
TARGET_SAME_CHUNK_VS_FLOOR = 1.5
#: Issue 15: a batch start+end pair against the bare floor of the same primitive, and a single writer on
#: an otherwise idle page (pages kept with ``free="deferred"``) against the warm single-call pair.
TARGET_BATCH_VS_FLOOR = 1.5
TARGET_IDLE_VS_WARM = 1.5
#: Rounds of the interleaved batch-pair measurement (:func:`batch_vs_floor`), full run / ``quick``.
BATCH_ROUNDS = (7, 3)


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


def batch_vs_floor(t: BypassWriteTracker, offsets: np.ndarray, length: int, floor: str,
                   rounds: int) -> dict[str, Any]:
    """A batch start+end pair against its floor, interleaved so that both see the same load.

    Each of ``rounds`` rounds times the floor (:func:`~pybcache.bcache._tracker.floor_pair_ns`, ``floor``
    ``"spinlock"`` or ``"atomic"``) over ``len(offsets)`` pairs, then ``t.start_many`` + ``t.end_many``
    over the same ``offsets``, back to back, and takes their ratio. Both are timed in this thread's CPU
    time, so a round in which the scheduler ran something else does not count that time against either;
    the wall-clock ratio of each round is kept beside it. One untimed round first warms both. The verdict
    is the median of the per-round ratios; their min and max say how far a round strayed.

    :returns: ``{"pair_ns", "floor_ns" (medians, CPU ns per pair), "ratio" (median of the per-round ratios),
        "rounds": [ratio per round], "spread": {min, median, max, runs}, "pair_round_ns", "floor_round_ns"
        (CPU ns per pair, per round), "wall_rounds": [wall-clock ratio per round], "wall_ratio" (their
        median), "clock": "thread CPU time"}``.
    """
    n = len(offsets)
    if rounds < 1 or n < 1:
        raise ValueError(f"rounds and len(offsets) must be >= 1, got {rounds} and {n}")
    floor_pair_ns(floor, n)  # warm-up, untimed
    t.start_many(offsets, length)
    t.end_many(offsets, length)
    cpu = time.thread_time_ns
    wall = time.perf_counter_ns
    pair_ns, floor_ns, ratios, wall_ratios = [], [], [], []
    for _ in range(rounds):
        c0, w0 = cpu(), wall()
        floor_pair_ns(floor, n)
        c1, w1 = cpu(), wall()
        t.start_many(offsets, length)
        t.end_many(offsets, length)
        c2, w2 = cpu(), wall()
        floor_ns.append((c1 - c0) / n)
        pair_ns.append((c2 - c1) / n)
        ratios.append((c2 - c1) / max(c1 - c0, 1))
        wall_ratios.append((w2 - w1) / max(w1 - w0, 1))
    return {"pair_ns": float(np.median(pair_ns)), "floor_ns": float(np.median(floor_ns)),
            "ratio": float(np.median(ratios)), "rounds": ratios, "spread": _spread(ratios),
            "pair_round_ns": pair_ns, "floor_round_ns": floor_ns,
            "wall_rounds": wall_ratios, "wall_ratio": float(np.median(wall_ratios)), "clock": "thread CPU time"}


def _batch_check_ns(t: BypassWriteTracker, offsets: np.ndarray) -> float:
    t0 = time.perf_counter_ns()
    t.is_active_many(offsets, 4096)
    return (time.perf_counter_ns() - t0) / len(offsets)


def run_bench(*, quick: bool = False, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Measure floors and per-variant hot paths.

    :param quick: fewer iterations (for tests and ``report --quick``).
    :param progress: called with a label before each step.
    :returns: ``{"floors": {...}, "results": [per variant {...}], "same_chunk": [...] (see
        :func:`run_same_chunk`), "same_chunk_lock_options": [the same for SAME_CHUNK_LOCK_OPTIONS],
        "scaling": {...} (see :func:`run_scaling`), "targets": {...},
        "load": {"before", "after"} (1/5/15-minute load averages), "params": {...}}``.
    """
    note = progress or (lambda label: None)
    load0 = _loadavg()
    n_batch = 50_000 if quick else 400_000
    n_single = 20_000 if quick else 200_000
    n_ref = 2_000 if quick else 10_000
    repeats = 3 if quick else 5
    stress_ops = 100_000 if quick else 1_000_000
    rng = np.random.default_rng(0)
    size = 10 * GiB  # the v2 cover letter's 10 GB workload: one tracking page
    offs = (rng.integers(0, (size - WRITE) // 4096, n_batch) * 4096).astype(np.int64)
    single = [int(x) for x in offs[:n_single]]

    note("floors")
    fl = _best_floor(n_batch * 4, repeats)
    empty = _EmptyPair()
    fl["cython_empty_pair_ns"] = _best(lambda: _single_pair_ns(empty, single, WRITE), repeats)

    results = []
    for sync in SYNCS:
        note(sync)
        t = BypassWriteTracker(size, sync=sync)
        floor_key = "atomic_pair_ns" if sync == "atomic" else "spinlock_pair_ns"
        # Cold: every pair allocates and frees the page (nothing else in flight on it).
        cold = _best(lambda: _single_pair_ns(t, single[: n_single // 4], WRITE), repeats)
        # Steady state (the v2 cover letter's fio: a tracking page stays active): one write held in flight
        # keeps the page resident while the measured pairs come and go.
        t.start(size - 4096, 4096)
        batch = batch_vs_floor(t, offs, WRITE, "atomic" if sync == "atomic" else "spinlock",
                               BATCH_ROUNDS[1] if quick else BATCH_ROUNDS[0])
        check = _best(lambda: _batch_check_ns(t, offs), repeats)
        one = _best(lambda: _single_pair_ns(t, single, WRITE), repeats)
        t.end(size - 4096, 4096)
        idle = _idle_page(sync, size, single[: n_single // 4], repeats)
        ref = reference.BypassWriteTracker(size, sync=sync)
        ref.start(size - 4096, 4096)
        ref_pair = _best(lambda: _single_pair_ns(ref, single[:n_ref], WRITE), 1)
        sc = _distinct_pages_scaling(sync, stress_ops, repeats)
        results.append({
            "variant": sync,
            "batch_pair_ns": batch["pair_ns"],
            "batch_floor_ns": batch["floor_ns"],
            "batch_pair_vs_floor": batch["ratio"],
            "batch_pair_vs_floor_rounds": batch["rounds"],
            "batch_pair_vs_floor_spread": batch["spread"],
            "batch_pair_round_ns": batch["pair_round_ns"],
            "batch_floor_round_ns": batch["floor_round_ns"],
            "batch_pair_vs_floor_wall": batch["wall_ratio"],
            "batch_pair_vs_floor_wall_rounds": batch["wall_rounds"],
            "batch_pair_target": TARGET_BATCH_VS_FLOOR,
            "batch_pair_met": batch["ratio"] <= TARGET_BATCH_VS_FLOOR,
            "floor": floor_key,
            "batch_check_ns": check,
            "single_pair_ns": one,
            "single_pair_vs_empty_call": one / fl["cython_empty_pair_ns"],
            "single_pair_cold_ns": cold,
            "idle_pair_eager_ns": idle["eager"]["pair_ns"],
            "idle_pair_deferred_ns": idle["deferred"]["pair_ns"],
            "idle_pair_eager_vs_warm": idle["eager"]["pair_ns"] / one,
            "idle_pair_deferred_vs_warm": idle["deferred"]["pair_ns"] / one,
            "idle_pair_target": TARGET_IDLE_VS_WARM,
            "idle_pair_deferred_met": idle["deferred"]["pair_ns"] / one <= TARGET_IDLE_VS_WARM,
            "allocations_per_1000_writes_eager": idle["eager"]["allocations_per_1000"],
            "allocations_per_1000_writes_deferred": idle["deferred"]["allocations_per_1000"],
            "reference_pair_ns": ref_pair,
            "speedup_vs_reference": ref_pair / one,
            **sc,
        })
    note("same chunk")
    same = run_same_chunk(quick=quick, repeats=repeats)
    note("same chunk, lock options")
    same_locks = run_same_chunk(quick=quick, repeats=repeats, variants=SAME_CHUNK_LOCK_OPTIONS)
    note("scaling")
    scaling = run_scaling(quick=quick, repeats=None if quick else repeats, progress=progress)
    return {"floors": fl, "results": results, "same_chunk": same, "same_chunk_lock_options": same_locks,
            "scaling": scaling,
            "targets": {"p99_ns": TARGET_P99_NS, "same_chunk_vs_floor": TARGET_SAME_CHUNK_VS_FLOOR,
                        "batch_pair_vs_floor": TARGET_BATCH_VS_FLOOR, "idle_pair_vs_warm": TARGET_IDLE_VS_WARM},
            "load": {"before": load0, "after": _loadavg()},
            "params": {"batch_ops": n_batch, "single_ops": n_single, "repeats": repeats, "device_size": size,
                       "write_length": WRITE, "stress_ops_per_thread": stress_ops,
                       "batch_rounds": BATCH_ROUNDS[1] if quick else BATCH_ROUNDS[0]}}


def _idle_page(sync: str, size: int, offsets: list[int], repeats: int) -> dict[str, dict[str, float]]:
    """A single writer on an otherwise idle page: single-call pairs with nothing else in flight, pages
    freed eagerly (the default) or kept until reclaim (``free="deferred"``), best of ``repeats``, with
    the page allocations per 1,000 writes counted from the tracker's own statistics over all runs. The
    atomic variant frees only in reclaim under either setting."""
    out = {}
    for free in ("eager", "deferred"):
        t = BypassWriteTracker(size, sync=sync, free=free)
        a0 = t.stats()["pages_allocated"]
        ns = _best(lambda: _single_pair_ns(t, offsets, WRITE), repeats)
        allocs = t.stats()["pages_allocated"] - a0
        out[free] = {"pair_ns": ns, "allocations_per_1000": allocs * 1000 / (len(offsets) * repeats)}
    return out


def _distinct_pages_scaling(sync: str, ops: int, repeats: int) -> dict[str, float]:
    """Native stress throughput of 2 threads on distinct pages over 1 thread, best of ``repeats`` each.

    Four 16-byte slots share a 64-byte cache line, so each thread gets 4 pages of its own (thread 0
    pages 0-3, thread 1 pages 4-7: different lines); the *adjacent* run puts thread 1 on the page next
    to thread 0's (one line). One write is held in flight on every page so that the pages stay
    resident (the steady state) and the run measures the tracker, not the allocator behind the lock
    variants' eager free. The *machine* ratio runs the same 1-thread workload on two independent
    trackers at once: the parallel speed-up this machine gives work that shares nothing, measured now.
    """
    big = BypassWriteTracker(8 * 64 * GiB, sync=sync)
    span = big.chunks_per_page * big.chunk_size
    resident = [p * span + span - 4096 for p in range(8)]
    big.start_many(resident, 4096)
    kw: dict[str, Any] = dict(ops=ops, write_length=WRITE, partition=True, completions="inline")
    best: dict[str, float] = {}

    def keep(key: str, ops_per_s: float) -> None:
        best[key] = max(best.get(key, 0.0), ops_per_s)

    others = [BypassWriteTracker(4 * 64 * GiB, sync=sync) for _ in range(2)]
    for o in others:
        o.start_many(resident[:4], 4096)
    for _ in range(repeats):
        keep("one", stress(big, threads=1, region=(0, 4 * span), **kw)["ops_per_s"])
        keep("two", stress(big, threads=2, region=(0, 8 * span), **kw)["ops_per_s"])
        keep("one_adjacent", stress(big, threads=1, region=(0, span), **kw)["ops_per_s"])
        keep("two_adjacent", stress(big, threads=2, region=(0, 2 * span), **kw)["ops_per_s"])
        keep("independent", _independent_pair(others, 4 * span, kw))
    big.end_many(resident, 4096)
    return {
        "stress_1thread_ops_per_s": best["one"],
        "stress_2thread_ops_per_s": best["two"],
        "scaling_2_over_1": best["two"] / best["one"],
        "scaling_2_over_1_adjacent_slots": best["two_adjacent"] / best["one_adjacent"],
        "machine_2_over_1": best["independent"] / best["one"],
    }


def _independent_pair(trackers: list[BypassWriteTracker], region_len: int, kw: dict[str, Any]) -> float:
    """Ops/s of one native stress thread on each of two trackers, run at the same time."""
    import threading
    out: list[dict[str, Any]] = [{}, {}]

    def run(i: int) -> None:
        out[i] = stress(trackers[i], threads=1, region=(0, region_len), **kw)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    t0 = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return sum(r["ops"] for r in out) / (time.perf_counter() - t0)


def _spread(values: list[float]) -> dict[str, float]:
    """min / median / max of a floor's runs, and how many."""
    return {"min": min(values), "median": float(np.median(values)), "max": max(values), "runs": len(values)}


def _best_floor(n: int, repeats: int) -> dict[str, Any]:
    """Each floor's best of ``repeats`` runs, with the 2-thread bounce floor's spread over those runs,
    whether its two threads were pinned to distinct CPUs, and the CPUs this process may use."""
    runs = [floors(n) for _ in range(repeats)]
    out: dict[str, Any] = {k: min(r[k] for r in runs)
                           for k in ("atomic_pair_ns", "spinlock_pair_ns", "shared_atomic_pair_ns")}
    out["shared_atomic_pair_spread_ns"] = _spread([r["shared_atomic_pair_ns"] for r in runs])
    out["shared_pinned"] = all(r["shared_pinned"] for r in runs)
    out["cpus"] = runs[0]["cpus"]
    return out


def _loadavg() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # pragma: no cover - not on Linux
        return []


def _summary(res: dict[str, Any]) -> dict[str, Any]:
    """One stress run's figures: throughput, wall and CPU ns per op, latency percentiles, preemptions."""
    lat = res["latency"] or {}
    cpu = sum(p["cpu_s"] for p in res["per_thread"])
    return {
        "ops_per_s": res["ops_per_s"],
        "ns_per_op": 1e9 / res["ops_per_s"] if res["ops_per_s"] else float("inf"),
        "cpu_ns_per_op": cpu * 1e9 / res["ops"] if res["ops"] else float("inf"),
        "p50_ns": lat.get("p50_ns", 0), "p90_ns": lat.get("p90_ns", 0), "p99_ns": lat.get("p99_ns", 0),
        "p999_ns": lat.get("p999_ns", 0), "max_ns": lat.get("max_ns", 0), "sampled": lat.get("sampled", 0),
        "invol_switches": sum(p["invol_switches"] for p in res["per_thread"]),
        "slowest_thread_share": (min(p["ops"] for p in res["per_thread"]) * res["threads"] / res["ops"]
                                 if res["ops"] else 0.0),
    }


def _best_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Best of N per figure (highest throughput, lowest times); the worst p99 and max are kept too."""
    return {
        "ops_per_s": max(r["ops_per_s"] for r in runs),
        "ns_per_op": min(r["ns_per_op"] for r in runs),
        "cpu_ns_per_op": min(r["cpu_ns_per_op"] for r in runs),
        "p50_ns": min(r["p50_ns"] for r in runs),
        "p90_ns": min(r["p90_ns"] for r in runs),
        "p99_ns": min(r["p99_ns"] for r in runs),
        "p99_worst_ns": max(r["p99_ns"] for r in runs),
        "p999_ns": min(r["p999_ns"] for r in runs),
        "max_ns": max(r["max_ns"] for r in runs),
        "invol_switches": min(r["invol_switches"] for r in runs),
        "slowest_thread_share": max(r["slowest_thread_share"] for r in runs),
        "sampled": sum(r["sampled"] for r in runs),
        "runs": len(runs),
    }


def run_scaling(*, quick: bool = False, repeats: int | None = None, seconds: float | None = None,
                threads: tuple[int, ...] = THREADS, cpus: int = OVERSUBSCRIBED_CPUS, sample_every: int = 32,
                variants: tuple[str, ...] = SCALING_VARIANTS,
                progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Native stress with each thread count on ``cpus`` CPUs, per variant, with per-op latency.

    The workload is the v2 cover letter's 10 GiB one: 128 KiB writes at random offsets of a 10 GiB device (one
    tracking page, so every thread works on the same page: the lock variants contend on its lock),
    4 writes in flight per thread, one ``is_active`` check per iteration. An *op* is one iteration: the
    end of the oldest write, the start of a new one and the check. One op in ``sample_every`` is timed
    (two clock reads, included in the samples) and percentiles are weighted per thread.

    ``variants`` are sync names, or ``"global+yield"`` / ``"page+yield"`` for the lock variants with
    ``lock="spin_yield"`` (spin briefly, then yield the CPU) instead of a pthread spinlock.

    The runs are interleaved (every variant and thread count once, then again), so machine load drifts
    over all of them alike; each figure is the best of ``repeats``.

    :returns: ``{"params": {...}, "variants": {variant: [per thread count {threads, ops_per_s, ns_per_op,
        cpu_ns_per_op, p50_ns, p90_ns, p99_ns, p99_worst_ns, p999_ns, max_ns, invol_switches,
        slowest_thread_share, speedup_vs_1, speedup_not_measured, cpu_ns_vs_floor}]}}`` where ``cpu_ns_vs_floor``
        divides the CPU ns per op by the variant's bare floor pair measured in the same call. ``speedup_vs_1`` is
        None, and ``speedup_not_measured`` :data:`NOT_MEASURED`, when no run of the first thread count made an
        operation (else None). A row whose runs made no operation has infinite times per op.
    """
    note = progress or (lambda label: None)
    repeats = repeats if repeats is not None else (1 if quick else 3)
    seconds = seconds if seconds is not None else (0.1 if quick else 0.25)
    size = 10 * GiB
    fl = _best_floor(200_000 if quick else 1_000_000, repeats)
    runs: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for rep in range(repeats):
        for sync in variants:
            note(f"scaling {sync}")
            for n in threads:
                t = _tracker_for(sync, size)
                res = native_stress(t, threads=n, seconds=seconds, region=(0, size), write_length=WRITE, depth=4,
                                    sample_every=sample_every, cpus=cpus, seed=rep, completions="inline")
                runs.setdefault((sync, n), []).append(_summary(res))
    out: dict[str, list[dict[str, Any]]] = {}
    for sync in variants:
        floor = fl["atomic_pair_ns"] if sync == "atomic" else fl["spinlock_pair_ns"]  # the pthread lock's floor
        rows = []
        for n in threads:
            row = {"threads": n, **_best_of(runs[(sync, n)])}
            row["cpu_ns_vs_floor"] = row["cpu_ns_per_op"] / floor
            rows.append(row)
        for row in rows:
            # no run of the first thread count made an operation (a thread preempted past its whole run):
            # nothing to compare the others with
            row["speedup_vs_1"] = _ratio(row["ops_per_s"], rows[0]["ops_per_s"])
            row["speedup_not_measured"] = NOT_MEASURED if row["speedup_vs_1"] is None else None
        out[sync] = rows
    return {"variants": out, "floors": fl,
            "params": {"threads": list(threads), "cpus": cpus, "seconds": seconds, "repeats": repeats,
                       "sample_every": sample_every, "device_size": size, "write_length": WRITE, "depth": 4,
                       "online_cpus": os.cpu_count()}}


def _overlap(per_thread: list[dict[str, Any]]) -> float:
    """How much of a 2-thread run both threads spent on a CPU at once, in [0, 1].

    The common part of their run intervals over the whole span (a thread that woke late from the start
    gate ran partly alone), times the smaller share of its interval a thread spent on a CPU (a thread
    waiting for a CPU is not bouncing anything).
    """
    starts = [p["start_s"] for p in per_thread]
    ends = [p["start_s"] + p["elapsed_s"] for p in per_thread]
    span = max(ends) - min(starts)
    if span <= 0:
        return 0.0
    common = max(0.0, min(ends) - max(starts)) / span
    on_cpu = min(p["cpu_s"] / p["elapsed_s"] if p["elapsed_s"] else 0.0 for p in per_thread)
    return common * min(1.0, on_cpu)


def run_same_chunk(*, quick: bool = False, repeats: int | None = None, ops: int | None = None,
                   variants: tuple[str, ...] = SYNCS, threads: int = 2,
                   seconds: float | None = None) -> list[dict[str, Any]]:
    """2 threads doing start/end pairs of 4 KiB writes inside one 32 MiB chunk, against the floor.

    Each thread keeps one write in flight (``depth=1``), so every op ends its previous write and starts
    the next one on the same counter as the other thread: a start+end pair with the counter's cache line
    bouncing between the two cores. No ``is_active`` check, so the op is exactly the floor's pair plus
    the tracker's own work. A write held in flight on the page's last chunk keeps the page resident (the
    lock variants would otherwise free and reallocate it). The floor (``shared_atomic_pair_ns``: one
    atomic counter, fetch_add and fetch_sub from both threads, each pinned to its own CPU) is measured
    before and after each round: the best of all is the floor, and its spread (min/median/max) is kept
    beside it, since on a loaded machine it swings.

    The lines only bounce while both threads are on a CPU at once. On a loaded machine they often are not:
    a thread waiting for a CPU inflates the wall time per pair, and a thread running alone makes cheap,
    uncontended pairs. So each run's *overlap* is measured (the common part of the two threads' run
    intervals over the whole span, times the smaller share of its interval a thread spent on a CPU: 1.0 =
    both ran throughout, together), the run with the highest overlap is kept, and the target is judged
    on its CPU time per pair (``pair_cpu_ns``: what a pair costs while running, bounce stalls included).
    With an overlap below 0.5 the figure is mostly uncontended pairs: the verdict is then "inconclusive".

    Each run lasts ``seconds`` per thread (default 0.05, quick 0.02), not a number of pairs: a run of a few
    milliseconds (300,000 pairs at ~15 ns) overlapped little whenever one thread woke late from the start gate.
    With ``threads`` <= OVERSUBSCRIBED_CPUS each thread is pinned to a CPU of its own (``pinned``: the system
    took every thread's pinning in every run), as the floor's two threads are, so the scheduler does not
    stack both on one CPU. ``ops`` sizes the floors' runs (4x ``ops`` pairs for the bounce floor, ``ops`` for
    the lock floors; default 300,000, quick 100,000).

    ``threads`` > 2 (all on the same OVERSUBSCRIBED_CPUS CPUs, not pinned) measures the convoy of a FIFO lock
    whose next owner is not on a CPU; the floors stay 2-thread floors and the overlap is then at most 2/threads.

    Where a pair's cost goes: each round also runs the same driver loop on the do-nothing tracker
    (``native_stress(null_tracker=True)``: one shared relaxed add and subtract per pair, the bounce floor's
    primitive) with the same threads, CPUs and ops; its best-overlap run is the *driver floor*. The driver
    floor over the bounce floor is what the measuring loop itself adds; the pair over the driver floor
    (and ``tracker_ns``, the difference) is the tracker's own work and its extra line transfers.

    :returns: per variant ``{variant, pair_ns (wall), pair_cpu_ns, overlap, floor_ns, floor_spread_ns
        ({min, median, max, runs}), floor_pinned, vs_floor (CPU), wall_vs_floor, target, met (True, False or
        None when inconclusive), runs, threads, seconds, pinned, driver_floor_ns, driver_floor_overlap,
        driver_floor_vs_floor, vs_driver_floor, tracker_ns}``; a lock variant's row adds the pthread lock floor
        (``lock_floor_ns``, ``lock_floor_colocated_ns``, ``lock_floor_vs_floor``, ``colocated_vs_separate``,
        ``vs_lock_floor``) and the floor of its own lock (``lock``, ``own_lock_floor_ns``,
        ``own_lock_floor_vs_floor``, ``vs_own_lock_floor``: the same as the pthread figures for the default).
        A run in which a thread made no pair (seen under heavy load) is kept only if no run was measured: its
        pair figures and every ratio that needs them are then None, ``met`` is None and ``not_measured`` is
        :data:`NOT_MEASURED` (None when measured); ``driver_floor_not_measured`` likewise for the driver floor.
    """
    threads = check_int(threads, "threads", 2, 16)
    seconds = check_number(seconds, "seconds", 0.001, 10.0) if seconds is not None else (0.02 if quick else 0.05)
    repeats = repeats if repeats is not None else (2 if quick else 5)
    ops = ops if ops is not None else (100_000 if quick else 300_000)
    pin = threads <= OVERSUBSCRIBED_CPUS
    runs_pinned = pin  # every thread of every run pinned, as the system reports
    size = 10 * GiB
    best: dict[str | None, dict[str, float]] = {}  # None: the driver floor
    floor_runs: list[float] = []
    lock_runs: list[dict[str, float]] = []
    with_locks = any(not v.startswith("atomic") for v in variants)
    floor_pinned = True  # every bounce floor run had its two threads pinned
    for rep in range(repeats):
        if with_locks:
            lock_runs.append(lock_floors(ops))
        fl = floors(ops * 4)
        floor_runs.append(fl["shared_atomic_pair_ns"])
        floor_pinned = floor_pinned and bool(fl["shared_pinned"])
        # The driver's floor (key None): the same loop on the do-nothing tracker, once per round.
        for sync in (None, *variants):
            t = _tracker_for(sync or "atomic", size)
            t.start(size - 4096, 4096)
            res = native_stress(t, threads=threads, seconds=seconds, region=(0, 32 * MiB), write_length=4096,
                                depth=1, checks=False, cpus=OVERSUBSCRIBED_CPUS, pin=pin, seed=rep,
                                completions="inline", null_tracker=sync is None)
            t.end(size - 4096, 4096)
            per = res["per_thread"]
            runs_pinned = runs_pinned and all(p["pinned"] for p in per)
            run = _pair_run(per)
            if _better_pair_run(run, best.get(sync)):
                best[sync] = run
        fl = floors(ops * 4)
        floor_runs.append(fl["shared_atomic_pair_ns"])
        floor_pinned = floor_pinned and bool(fl["shared_pinned"])
    floor = min(floor_runs)
    spread = _spread(floor_runs)
    lock_floor = {k: min(r[k] for r in lock_runs) for k in ("shared_spin_pair_ns", "shared_spin_colocated_pair_ns",
                                                           *_LOCK_FLOOR_KEY.values())} if lock_runs else {}
    common = {"floor_ns": floor, "floor_spread_ns": spread, "floor_pinned": floor_pinned, "runs": repeats,
              "threads": threads, "seconds": seconds, "pinned": runs_pinned}
    return [_same_chunk_row(v, best[v], best[None], common, lock_floor) for v in variants]


def _ratio(num: float | None, den: float | None) -> float | None:
    """``num / den``, or None (not measured) when either is None or ``den`` is 0."""
    return None if num is None or den is None or den == 0 else num / den


def _pair_run(per_thread: list[dict[str, Any]]) -> dict[str, Any]:
    """One same-chunk run's figures: wall and CPU ns per pair (the threads' mean) and the overlap. A thread that
    made no pair has no time per pair: the run's pair figures are then None (:data:`NOT_MEASURED`)."""
    measured = bool(per_thread) and all(p["ops"] > 0 for p in per_thread)
    n = len(per_thread)
    return {"pair_ns": sum(p["elapsed_s"] * 1e9 / p["ops"] for p in per_thread) / n if measured else None,
            "pair_cpu_ns": sum(p["cpu_s"] * 1e9 / p["ops"] for p in per_thread) / n if measured else None,
            "overlap": _overlap(per_thread) if per_thread else 0.0}


def _better_pair_run(run: dict[str, Any], cur: dict[str, Any] | None) -> bool:
    """Whether ``run`` replaces ``cur`` as the kept run: a measured run beats an unmeasured one, then the higher
    overlap, then the lower CPU time per pair."""
    if cur is None:
        return True
    if (run["pair_cpu_ns"] is None) != (cur["pair_cpu_ns"] is None):
        return cur["pair_cpu_ns"] is None
    if run["pair_cpu_ns"] is None:
        return False
    return (run["overlap"], -run["pair_cpu_ns"]) > (cur["overlap"], -cur["pair_cpu_ns"])


def _same_chunk_row(v: str, b: dict[str, Any], drv: dict[str, Any], common: dict[str, Any],
                    lock_floor: dict[str, float]) -> dict[str, Any]:
    """The row of variant ``v`` from its kept run ``b``, the driver floor's kept run ``drv``, the floors and the
    run parameters (``common``). A figure that needs an unmeasured run is None, and ``not_measured`` (the pair)
    or ``driver_floor_not_measured`` says why (:data:`NOT_MEASURED`; else None)."""
    floor = common["floor_ns"]
    ratio = _ratio(b["pair_cpu_ns"], floor)
    row = {"variant": v, "pair_ns": b["pair_ns"], "pair_cpu_ns": b["pair_cpu_ns"], "overlap": b["overlap"],
           "floor_ns": floor, "floor_spread_ns": common["floor_spread_ns"], "floor_pinned": common["floor_pinned"],
           "vs_floor": ratio, "wall_vs_floor": _ratio(b["pair_ns"], floor),
           "target": TARGET_SAME_CHUNK_VS_FLOOR,
           "met": (ratio <= TARGET_SAME_CHUNK_VS_FLOOR) if ratio is not None and b["overlap"] >= 0.5 else None,
           "not_measured": NOT_MEASURED if b["pair_cpu_ns"] is None else None,
           "runs": common["runs"], "threads": common["threads"], "seconds": common["seconds"],
           "pinned": common["pinned"],
           # Where the pair goes: the driver floor (the same loop on the do-nothing tracker, the
           # same threads and CPUs, its best-overlap run) over the bounce floor is the driver's
           # share; the pair over the driver floor is the tracker's own work and extra bounces.
           "driver_floor_ns": drv["pair_cpu_ns"], "driver_floor_overlap": drv["overlap"],
           "driver_floor_not_measured": NOT_MEASURED if drv["pair_cpu_ns"] is None else None,
           "driver_floor_vs_floor": _ratio(drv["pair_cpu_ns"], floor),
           "vs_driver_floor": _ratio(b["pair_cpu_ns"], drv["pair_cpu_ns"]),
           "tracker_ns": (None if b["pair_cpu_ns"] is None or drv["pair_cpu_ns"] is None
                          else b["pair_cpu_ns"] - drv["pair_cpu_ns"])}
    if lock_floor and not v.startswith("atomic"):
        # Where a lock variant's pair goes: the 2-thread lock floor (lock and counter on two lines, as
        # in the tracker) over the atomic floor is the lock's own cost; colocated over separate is what
        # one line for both would save; the pair over the lock floor is the tracker's own work.
        row.update({"lock_floor_ns": lock_floor["shared_spin_pair_ns"],
                    "lock_floor_colocated_ns": lock_floor["shared_spin_colocated_pair_ns"],
                    "lock_floor_vs_floor": lock_floor["shared_spin_pair_ns"] / floor,
                    "colocated_vs_separate": (lock_floor["shared_spin_colocated_pair_ns"]
                                              / lock_floor["shared_spin_pair_ns"]),
                    "vs_lock_floor": _ratio(b["pair_cpu_ns"], lock_floor["shared_spin_pair_ns"])})
        # The floor of the lock this row runs on (pthread, ticket or mcs; spin_yield has none).
        lock = _LOCK_OF_SUFFIX.get(v.partition("+")[2], "pthread")
        if lock in _LOCK_FLOOR_KEY:
            own = lock_floor[_LOCK_FLOOR_KEY[lock]]
            row.update({"lock": lock, "own_lock_floor_ns": own, "own_lock_floor_vs_floor": own / floor,
                        "vs_own_lock_floor": _ratio(b["pair_cpu_ns"], own)})
    return row
