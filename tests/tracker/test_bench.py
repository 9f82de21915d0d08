"""How ``pybcache bench`` turns measurements into figures and verdicts, on numbers chosen here.

The measuring calls (``native_stress``, ``floors``, ``lock_floors``, ``stress``, the clocks) are replaced by
stand-ins that return known figures, so each test checks the arithmetic of a row, its best-of choices and its
verdicts (``met``) exactly, with nothing timed.
"""
from __future__ import annotations

import types

import pytest

from pybcache.bcache.experiments import bench
from pybcache.units import GiB, MiB
from pybcache.bcache.variants import SYNCS

approx = pytest.approx


# ---- the small helpers -------------------------------------------------------------------------------------

def test_spread_is_the_min_median_max_and_count_of_the_runs():
    assert bench._spread([3.0, 1.0, 2.0]) == {"min": 1.0, "median": 2.0, "max": 3.0, "runs": 3}
    assert bench._spread([10.0, 1.0, 2.0, 3.0]) == {"min": 1.0, "median": 2.5, "max": 10.0, "runs": 4}


def _thread(start, elapsed, cpu, ops=1, pinned=True):
    return {"start_s": start, "elapsed_s": elapsed, "cpu_s": cpu, "ops": ops, "pinned": pinned}


def test_overlap_is_the_common_part_of_the_run_intervals_times_the_smaller_on_cpu_share():
    # intervals [0, 1] and [0.5, 1.5]: a third of the span in common; the second thread on a CPU a quarter
    assert bench._overlap([_thread(0.0, 1.0, 1.0), _thread(0.5, 1.0, 0.25)]) == approx(1 / 12)
    # both throughout, on a CPU throughout (a CPU time above the interval counts as 1)
    assert bench._overlap([_thread(2.0, 1.0, 1.0), _thread(2.0, 1.0, 2.0)]) == approx(1.0)
    assert bench._overlap([_thread(2.0, 1.0, 1.5), _thread(2.0, 1.0, 2.0)]) == approx(1.0)
    assert bench._overlap([_thread(0.0, 2.0, 1.5), _thread(0.0, 2.0, 1.0)]) == approx(0.5)


def test_threads_that_never_ran_together_or_did_not_run_overlap_by_nothing():
    assert bench._overlap([_thread(0.0, 1.0, 1.0), _thread(2.0, 1.0, 1.0)]) == 0.0    # disjoint intervals
    assert bench._overlap([_thread(0.0, 1.0, 1.0), _thread(1.0, 1.0, 1.0)]) == 0.0    # touching at one instant
    assert bench._overlap([_thread(1.0, 0.0, 0.0), _thread(1.0, 0.0, 0.0)]) == 0.0    # an empty span
    assert bench._overlap([_thread(0.0, 1.0, 1.0), _thread(0.0, 0.0, 0.0)]) == 0.0    # one ran for no time


def _stress_result(ops_per_s, per_thread_ops, cpu_s, invol=(0,), latency=None):
    per = [{"ops": o, "cpu_s": c, "invol_switches": i} for o, c, i in zip(per_thread_ops, cpu_s, invol)]
    return {"ops_per_s": ops_per_s, "ops": sum(per_thread_ops), "threads": len(per), "latency": latency,
            "per_thread": per}


def test_a_stress_summary_derives_times_per_op_latency_preemptions_and_the_slowest_threads_share():
    lat = {"p50_ns": 50, "p90_ns": 90, "p99_ns": 99, "p999_ns": 999, "max_ns": 5000, "sampled": 12}
    s = bench._summary(_stress_result(2_000_000.0, [300, 100], [0.25, 0.125], invol=(3, 4), latency=lat))
    # exact: binary fractions, so a conversion factor off by one part in 10^9 shows
    assert s == {"ops_per_s": 2_000_000.0, "ns_per_op": 500.0, "cpu_ns_per_op": 937_500.0,
                 "p50_ns": 50, "p90_ns": 90, "p99_ns": 99, "p999_ns": 999, "max_ns": 5000, "sampled": 12,
                 "invol_switches": 7, "slowest_thread_share": approx(0.5)}


def test_a_stress_summary_without_ops_or_latency_reports_infinite_times_and_zero_percentiles():
    s = bench._summary(_stress_result(0.0, [0, 0], [0.1, 0.1], invol=(1, 1), latency=None))
    assert s["ns_per_op"] == float("inf") and s["cpu_ns_per_op"] == float("inf")
    assert s["slowest_thread_share"] == 0.0
    assert [s[k] for k in ("p50_ns", "p90_ns", "p99_ns", "p999_ns", "max_ns", "sampled")] == [0] * 6
    partial = bench._summary(_stress_result(10.0, [5], [0.0], latency={"p99_ns": 7}))
    assert (partial["p50_ns"], partial["p99_ns"], partial["max_ns"]) == (0, 7, 0)


def _summary_row(**kw):
    row = {"ops_per_s": 1.0, "ns_per_op": 1.0, "cpu_ns_per_op": 1.0, "p50_ns": 1, "p90_ns": 1, "p99_ns": 1,
           "p999_ns": 1, "max_ns": 1, "invol_switches": 1, "slowest_thread_share": 0.5, "sampled": 1}
    row.update(kw)
    return row


def test_best_of_keeps_the_best_of_each_figure_the_worst_p99_and_max_and_sums_the_samples():
    a = _summary_row(ops_per_s=100.0, ns_per_op=30.0, cpu_ns_per_op=20.0, p50_ns=5, p90_ns=9, p99_ns=40,
                     p999_ns=70, max_ns=900, invol_switches=3, slowest_thread_share=0.4, sampled=10)
    b = _summary_row(ops_per_s=80.0, ns_per_op=25.0, cpu_ns_per_op=22.0, p50_ns=6, p90_ns=8, p99_ns=30,
                     p999_ns=80, max_ns=800, invol_switches=2, slowest_thread_share=0.45, sampled=5)
    assert bench._best_of([a, b]) == {
        "ops_per_s": 100.0, "ns_per_op": 25.0, "cpu_ns_per_op": 20.0, "p50_ns": 5, "p90_ns": 8, "p99_ns": 30,
        "p99_worst_ns": 40, "p999_ns": 70, "max_ns": 900, "invol_switches": 2, "slowest_thread_share": 0.45,
        "sampled": 15, "runs": 2}


def test_best_floor_takes_each_floors_best_run_the_bounce_floors_spread_and_pinning_of_every_run(monkeypatch):
    runs = iter([
        {"atomic_pair_ns": 3.0, "spinlock_pair_ns": 9.0, "shared_atomic_pair_ns": 40.0, "shared_pinned": True,
         "cpus": [0, 1]},
        {"atomic_pair_ns": 2.0, "spinlock_pair_ns": 11.0, "shared_atomic_pair_ns": 20.0, "shared_pinned": False,
         "cpus": [5]},
        {"atomic_pair_ns": 4.0, "spinlock_pair_ns": 10.0, "shared_atomic_pair_ns": 30.0, "shared_pinned": True,
         "cpus": [7]},
    ])
    sizes = []
    monkeypatch.setattr(bench, "floors", lambda n: sizes.append(n) or next(runs))
    out = bench._best_floor(1234, 3)
    assert sizes == [1234] * 3
    assert out == {"atomic_pair_ns": 2.0, "spinlock_pair_ns": 9.0, "shared_atomic_pair_ns": 20.0,
                   "shared_atomic_pair_spread_ns": {"min": 20.0, "median": 30.0, "max": 40.0, "runs": 3},
                   "shared_pinned": False, "cpus": [0, 1]}


def test_best_floor_is_pinned_when_every_run_was():
    monkeypatch = pytest.MonkeyPatch()
    with monkeypatch.context() as m:
        m.setattr(bench, "floors", lambda n: {"atomic_pair_ns": 1.0, "spinlock_pair_ns": 1.0,
                                              "shared_atomic_pair_ns": 1.0, "shared_pinned": True, "cpus": [0]})
        assert bench._best_floor(10, 2)["shared_pinned"] is True


class _RecordingTracker:
    """A tracker stand-in that records its construction and calls."""

    chunks_per_page = 4
    chunk_size = 8192

    def __init__(self, size, sync="page", lock="pthread", free="eager"):
        self.size, self.sync, self.lock, self.free = size, sync, lock, free
        self.calls = []
        self.allocated = 5

    def start(self, off, length):
        self.calls.append(("start", off, length))

    def end(self, off, length):
        self.calls.append(("end", off, length))

    def start_many(self, offs, length):
        self.calls.append(("start_many", list(offs), length))

    def end_many(self, offs, length):
        self.calls.append(("end_many", list(offs), length))

    def stats(self):
        return {"pages_allocated": self.allocated}


@pytest.mark.parametrize("variant, sync, lock", [
    ("page", "page", "pthread"), ("atomic", "atomic", "pthread"), ("global+yield", "global", "spin_yield"),
    ("page+ticket", "page", "ticket"), ("global+mcs", "global", "mcs"),
])
def test_a_variant_name_is_a_sync_and_an_optional_lock_suffix(monkeypatch, variant, sync, lock):
    monkeypatch.setattr(bench, "BypassWriteTracker", _RecordingTracker)
    t = bench._tracker_for(variant, 3 * GiB)
    assert (t.size, t.sync, t.lock) == (3 * GiB, sync, lock)


# ---- the interleaved batch pair ----------------------------------------------------------------------------

def _clock(values):
    it = iter(values)
    return lambda: next(it)


def test_batch_vs_floor_judges_the_median_of_per_round_cpu_ratios_and_keeps_the_wall_ratios(monkeypatch):
    floor_calls = []
    monkeypatch.setattr(bench, "floor_pair_ns", lambda floor, n: floor_calls.append((floor, n)))
    # per round: floor start, floor end = pair start, pair end. CPU: floor 100/200/300 ns, pair 150/100/900 ns
    # over the 10 offsets; wall: floor 100/100/0 ns, pair 300/50/70 ns.
    cpu = _clock([0, 100, 250, 1000, 1200, 1300, 2000, 2300, 3200])
    wall = _clock([0, 100, 400, 1000, 1100, 1150, 2000, 2000, 2070])
    monkeypatch.setattr(bench, "time", types.SimpleNamespace(thread_time_ns=cpu, perf_counter_ns=wall))
    t = _RecordingTracker(GiB)
    offs = list(range(0, 10 * 4096, 4096))
    out = bench.batch_vs_floor(t, offs, 8192, "spinlock", 3)
    assert floor_calls == [("spinlock", 10)] * 4             # one untimed warm-up, then one per round
    assert t.calls == [("start_many", offs, 8192), ("end_many", offs, 8192)] * 4
    assert out["rounds"] == approx([1.5, 0.5, 3.0])
    assert out["ratio"] == approx(1.5)
    assert out["spread"] == {"min": approx(0.5), "median": approx(1.5), "max": approx(3.0), "runs": 3}
    assert out["floor_round_ns"] == approx([10.0, 20.0, 30.0])
    assert out["pair_round_ns"] == approx([15.0, 10.0, 90.0])
    assert (out["floor_ns"], out["pair_ns"]) == (approx(20.0), approx(15.0))
    assert out["wall_rounds"] == approx([3.0, 0.5, 70.0])    # a floor round of 0 ns counts as 1 ns
    assert out["wall_ratio"] == approx(3.0)
    assert out["clock"] == "thread CPU time"


def test_a_batch_round_whose_floor_took_no_cpu_time_divides_by_one_ns(monkeypatch):
    monkeypatch.setattr(bench, "floor_pair_ns", lambda floor, n: None)
    monkeypatch.setattr(bench, "time", types.SimpleNamespace(thread_time_ns=_clock([5, 5, 45]),
                                                             perf_counter_ns=_clock([0, 2, 6])))
    out = bench.batch_vs_floor(_RecordingTracker(GiB), [0, 4096], 4096, "atomic", 1)
    assert out["rounds"] == [40.0] and out["wall_rounds"] == [2.0]
    assert out["floor_ns"] == 0.0 and out["pair_ns"] == 20.0


@pytest.mark.parametrize("offs, rounds", [([0], 0), ([], 1)])
def test_batch_vs_floor_refuses_no_rounds_or_no_offsets_before_measuring(monkeypatch, offs, rounds):
    monkeypatch.setattr(bench, "floor_pair_ns", lambda floor, n: pytest.fail("measured"))
    t = _RecordingTracker(GiB)
    with pytest.raises(ValueError, match=rf"^rounds and len\(offsets\) must be >= 1, got {rounds} and {len(offs)}$"):
        bench.batch_vs_floor(t, offs, 4096, "atomic", rounds)
    assert t.calls == []


def test_batch_vs_floor_takes_one_round_and_one_offset():
    monkeypatch = pytest.MonkeyPatch()
    with monkeypatch.context() as m:
        m.setattr(bench, "floor_pair_ns", lambda floor, n: None)
        m.setattr(bench, "time", types.SimpleNamespace(thread_time_ns=_clock([0, 4, 6]),
                                                       perf_counter_ns=_clock([0, 4, 6])))
        assert bench.batch_vs_floor(_RecordingTracker(GiB), [0], 4096, "atomic", 1)["ratio"] == 0.5


# ---- a single writer on an idle page, distinct pages ----------------------------------------------------------

def test_an_idle_page_run_is_the_best_pair_time_and_the_allocations_per_1000_writes_of_each_free_mode(monkeypatch):
    made = []

    def tracker(size, sync, free):
        made.append(_RecordingTracker(size, sync=sync, free=free))
        return made[-1]

    times = {"eager": iter([30.0, 20.0, 25.0]), "deferred": iter([12.0, 14.0, 11.0])}
    allocs = {"eager": 8, "deferred": 1}

    def pair(t, offsets, length):
        assert (offsets, length) == ([0, 4096], bench.WRITE)
        t.allocated += allocs[t.free]
        return next(times[t.free])

    monkeypatch.setattr(bench, "BypassWriteTracker", tracker)
    monkeypatch.setattr(bench, "_single_pair_ns", pair)
    out = bench._idle_page("global", 7 * GiB, [0, 4096], 3)
    assert [(t.size, t.sync, t.free) for t in made] == [(7 * GiB, "global", "eager"), (7 * GiB, "global", "deferred")]
    # 3 runs of 2 writes: 24 and 3 allocations
    assert out == {"eager": {"pair_ns": 20.0, "allocations_per_1000": 4000.0},
                   "deferred": {"pair_ns": 11.0, "allocations_per_1000": 500.0}}


def test_distinct_pages_scaling_keeps_each_runs_best_and_divides_two_threads_by_one(monkeypatch):
    made = []

    def tracker(size, sync):
        made.append(_RecordingTracker(size, sync=sync))
        return made[-1]

    span = _RecordingTracker.chunks_per_page * _RecordingTracker.chunk_size
    best_of_two = {(1, 4 * span): [100.0, 150.0], (2, 8 * span): [180.0, 160.0], (1, span): [90.0, 95.0],
                   (2, 2 * span): [0.0, 0.0]}   # the adjacent pair did nothing: 0, not a floor of 1
    calls = []

    def stress(t, threads, region, **kw):
        calls.append((t, threads, region, kw))
        assert region[0] == 0
        return {"ops_per_s": best_of_two[(threads, region[1])].pop(0)}

    independent = iter([170.0, 190.0])
    pairs = []
    monkeypatch.setattr(bench, "BypassWriteTracker", tracker)
    monkeypatch.setattr(bench, "stress", stress)
    monkeypatch.setattr(bench, "_independent_pair",
                        lambda ts, region_len, kw: pairs.append((ts, region_len, kw)) or next(independent))
    out = bench._distinct_pages_scaling("page", 5000, 2)
    assert out == {"stress_1thread_ops_per_s": 150.0, "stress_2thread_ops_per_s": 180.0,
                   "scaling_2_over_1": approx(1.2), "scaling_2_over_1_adjacent_slots": 0.0,
                   "machine_2_over_1": approx(190 / 150)}
    big, *others = made
    resident = [p * span + span - 4096 for p in range(8)]
    assert (big.size, big.sync) == (8 * 64 * GiB, "page")
    assert big.calls == [("start_many", resident, 4096), ("end_many", resident, 4096)]
    assert [(o.size, o.sync, o.calls) for o in others] == [(4 * 64 * GiB, "page",
                                                           [("start_many", resident[:4], 4096)])] * 2
    kw = {"ops": 5000, "write_length": bench.WRITE, "partition": True, "completions": "inline"}
    assert all(c[0] is big and c[3] == kw for c in calls) and len(calls) == 8
    assert pairs == [(others, 4 * span, kw)] * 2


# ---- the scaling runs ----------------------------------------------------------------------------------------

class _Named:
    def __init__(self, variant, size):
        self.variant, self.size = variant, size
        self.calls = []

    def start(self, off, length):
        self.calls.append(("start", off, length))

    def end(self, off, length):
        self.calls.append(("end", off, length))


def _scaling_stress(calls):
    base = {"atomic": 1e6, "page": 5e5}

    def native_stress(t, **kw):
        calls.append((t.variant, kw))
        n, seed = kw["threads"], kw["seed"]
        per = [{"ops": 1000, "cpu_s": 1e-3 * (2 - seed), "invol_switches": 1 + seed} for _ in range(n)]
        lat = {"p50_ns": 10 * (seed + 1), "p90_ns": 20, "p99_ns": 100 * (seed + 1), "p999_ns": 500,
               "max_ns": 1000 * (seed + 1), "sampled": 3}
        return {"ops_per_s": base.get(t.variant, 2e5) * n * (seed + 1), "ops": 1000 * n, "threads": n, "latency": lat,
                "per_thread": per}
    return native_stress


def test_scaling_rows_are_each_variants_best_of_its_runs_against_its_own_floor_and_one_thread(monkeypatch):
    calls, floor_args, labels, made = [], [], [], []
    monkeypatch.setattr(bench, "_tracker_for", lambda v, size: made.append(_Named(v, size)) or made[-1])
    monkeypatch.setattr(bench, "native_stress", _scaling_stress(calls))
    fl = {"atomic_pair_ns": 5.0, "spinlock_pair_ns": 10.0}
    monkeypatch.setattr(bench, "_best_floor", lambda n, repeats: floor_args.append((n, repeats)) or fl)
    out = bench.run_scaling(repeats=2, seconds=0.01, threads=(1, 2), cpus=3, sample_every=8,
                            variants=("atomic", "page"), progress=labels.append)
    assert floor_args == [(1_000_000, 2)]
    assert labels == ["scaling atomic", "scaling page"] * 2
    assert [(v, kw["threads"], kw["seed"]) for v, kw in calls] == [
        (v, n, rep) for rep in (0, 1) for v in ("atomic", "page") for n in (1, 2)]
    for _, kw in calls:
        assert {k: v for k, v in kw.items() if k not in ("threads", "seed")} == {
            "seconds": 0.01, "region": (0, 10 * GiB), "write_length": bench.WRITE, "depth": 4, "sample_every": 8,
            "cpus": 3, "completions": "inline"}
    assert out["floors"] is fl
    assert {t.size for t in made} == {10 * GiB} and [t.variant for t in made] == [v for v, _ in calls]
    assert out["params"] == {"threads": [1, 2], "cpus": 3, "seconds": 0.01, "repeats": 2, "sample_every": 8,
                             "device_size": 10 * GiB, "write_length": bench.WRITE, "depth": 4,
                             "online_cpus": bench.os.cpu_count()}
    for v, floor, ops in (("atomic", 5.0, 1e6), ("page", 10.0, 5e5)):
        rows = out["variants"][v]
        assert [r["threads"] for r in rows] == [1, 2]
        for n, r in zip((1, 2), rows):
            assert r["ops_per_s"] == 2 * n * ops                  # the second run's
            assert r["cpu_ns_per_op"] == approx(1000.0)           # the second run's
            assert r["cpu_ns_vs_floor"] == approx(1000.0 / floor)
            assert (r["p99_ns"], r["p99_worst_ns"], r["max_ns"], r["runs"], r["sampled"]) == (100, 200, 2000, 2, 6)
            assert r["invol_switches"] == n
        assert [r["speedup_vs_1"] for r in rows] == [1.0, 2.0]
        assert [r["speedup_not_measured"] for r in rows] == [None, None]


def test_scaling_without_an_operation_at_one_thread_has_no_speed_up_instead_of_a_division_by_zero(monkeypatch):
    # every run of 1 thread made 0 operations (its one thread preempted past its whole run, under heavy load)
    stress = _scaling_stress([])

    def native_stress(t, **kw):
        res = stress(t, **kw)
        if kw["threads"] == 1:
            res.update(ops_per_s=0.0, ops=0, per_thread=[dict(p, ops=0) for p in res["per_thread"]])
        return res
    monkeypatch.setattr(bench, "_tracker_for", _Named)
    monkeypatch.setattr(bench, "native_stress", native_stress)
    monkeypatch.setattr(bench, "_best_floor", lambda n, r: {"atomic_pair_ns": 5.0, "spinlock_pair_ns": 10.0})
    out = bench.run_scaling(repeats=2, seconds=0.01, threads=(1, 2), variants=("atomic",))
    one, two = out["variants"]["atomic"]
    assert (one["ops_per_s"], one["cpu_ns_per_op"]) == (0.0, float("inf"))
    assert [r["speedup_vs_1"] for r in (one, two)] == [None, None]
    assert [r["speedup_not_measured"] for r in (one, two)] == ["not measured: 0 operations in the run"] * 2
    assert two["ops_per_s"] > 0 and two["cpu_ns_vs_floor"] == approx(1000.0 / 5.0)


@pytest.mark.parametrize("quick, repeats, seconds, floor_n", [(True, 1, 0.1, 200_000), (False, 3, 0.25, 1_000_000)])
def test_scaling_defaults_to_fewer_shorter_runs_when_quick(monkeypatch, quick, repeats, seconds, floor_n):
    calls, floor_args = [], []
    monkeypatch.setattr(bench, "_tracker_for", _Named)
    monkeypatch.setattr(bench, "native_stress", _scaling_stress(calls))
    monkeypatch.setattr(bench, "_best_floor", lambda n, r: floor_args.append((n, r)) or
                        {"atomic_pair_ns": 1.0, "spinlock_pair_ns": 1.0})
    out = bench.run_scaling(quick=quick, threads=(1,), variants=("page",))
    assert floor_args == [(floor_n, repeats)]
    assert {kw["seconds"] for _, kw in calls} == {seconds}
    assert [kw["seed"] for _, kw in calls] == list(range(repeats))
    assert {kw["cpus"] for _, kw in calls} == {bench.OVERSUBSCRIBED_CPUS}
    assert {kw["sample_every"] for _, kw in calls} == {32}
    assert (out["params"]["repeats"], out["params"]["seconds"]) == (repeats, seconds)


def test_scaling_runs_the_thread_counts_and_variants_of_the_issue_by_default(monkeypatch):
    calls = []
    monkeypatch.setattr(bench, "_tracker_for", _Named)
    monkeypatch.setattr(bench, "native_stress", _scaling_stress(calls))
    monkeypatch.setattr(bench, "_best_floor", lambda n, r: {"atomic_pair_ns": 1.0, "spinlock_pair_ns": 1.0})
    out = bench.run_scaling(quick=True)
    assert [(v, kw["threads"]) for v, kw in calls] == [(v, n) for v in bench.SCALING_VARIANTS for n in bench.THREADS]
    assert list(out["variants"]) == list(bench.SCALING_VARIANTS) and out["params"]["threads"] == [1, 2, 4, 8]
    assert bench.SCALING_VARIANTS == ("global", "page", "atomic", "global+yield", "page+yield")


# ---- same-chunk contention -----------------------------------------------------------------------------------

def _run(elapsed, cpu, ops, start=0.0, pinned=True):
    """Two threads alike: a pair takes elapsed/ops wall and cpu/ops CPU seconds; the overlap is cpu/elapsed."""
    return [_thread(start, elapsed, cpu, ops, pinned), _thread(start, elapsed, cpu, ops, pinned)]


# per (variant or None for the driver floor, round): the threads' figures -> (wall ns, CPU ns, overlap)
SAME_CHUNK_RUNS = {
    (None, 0): _run(1.0, 0.9, 2e7),             # 50, 45, 0.9: the driver floor
    (None, 1): _run(1.0, 0.9, 1e7),             # 100, 90, 0.9: the same overlap and dearer: not kept
    ("atomic", 0): [_thread(0.0, 1.0, 0.6, 1e7), _thread(0.0, 1.0, 0.8, 1e7)],   # 100, 70, 0.6: kept
    ("atomic", 1): _run(1.0, 0.4, 2e7),         # 50, 20, 0.4: cheaper but less overlap
    ("page+ticket", 0): _run(1.0, 0.3, 1e8),    # 10, 3, 0.3
    ("page+ticket", 1): _run(1.5, 0.75, 5e7),   # 30, 15, 0.5: exactly the target ratio at exactly 0.5 overlap
    ("global+yield", 0): _run(1.0, 0.4, 1e7),   # 100, 40, 0.4: under 0.5 overlap in both: inconclusive
    ("global+yield", 1): _run(1.0, 0.2, 1e7),   # 100, 20, 0.2
    ("global+mcs", 0): _run(1.0, 1.0, 1e8),     # 10, 10, 1.0
    ("global+mcs", 1): _run(0.5, 1.0, 1e8),     # 5, 10, 1.0: a tie on overlap and CPU: the first run is kept
    ("page", 0): _run(2.0, 1.0, 5e7),           # 40, 20, 0.5
    ("page", 1): _run(2.0, 0.8, 5e7),           # 40, 16, 0.4
}
FLOOR_RUNS = [20.0, 30.0, 10.0, 40.0]   # the bounce floor before and after each round: best 10
LOCK_FLOOR_RUNS = [
    {"shared_spin_pair_ns": 30.0, "shared_spin_colocated_pair_ns": 50.0, "shared_ticket_pair_ns": 60.0,
     "shared_mcs_pair_ns": 90.0},
    {"shared_spin_pair_ns": 20.0, "shared_spin_colocated_pair_ns": 45.0, "shared_ticket_pair_ns": 70.0,
     "shared_mcs_pair_ns": 80.0},
]


class _SameChunkLab:
    """Stand-ins for the same-chunk run's measuring calls, recording what they were asked."""

    def __init__(self, monkeypatch, runs=SAME_CHUNK_RUNS, floor_pinned=(True,) * 4, pinned=True):
        self.runs, self.trackers, self.stress_calls, self.floor_calls, self.lock_calls = runs, [], [], [], []
        self.events = []
        floor_runs = iter(zip(FLOOR_RUNS * 3, floor_pinned * 3))
        lock_runs = iter(LOCK_FLOOR_RUNS * 3)
        self.pinned = pinned

        def tracker_for(variant, size):
            self.trackers.append(_Named(variant, size))
            return self.trackers[-1]

        def floors(n):
            self.floor_calls.append(n)
            self.events.append("floors")
            ns, p = next(floor_runs)
            return {"shared_atomic_pair_ns": ns, "shared_pinned": p}

        def lock_floors(n):
            self.lock_calls.append(n)
            self.events.append("lock_floors")
            return next(lock_runs)

        def native_stress(t, **kw):
            assert t.calls == [("start", 10 * GiB - 4096, 4096)]   # the page's last chunk held in flight
            self.stress_calls.append((t.variant, kw))
            self.events.append("stress")
            key = (None if kw["null_tracker"] else t.variant, kw["seed"] % 2)
            per = self.runs.get(key, self.runs[("atomic", key[1])])   # a variant not in the table runs as atomic
            return {"per_thread": [dict(p, pinned=p["pinned"] and self.pinned) for p in per]}

        monkeypatch.setattr(bench, "_tracker_for", tracker_for)
        monkeypatch.setattr(bench, "floors", floors)
        monkeypatch.setattr(bench, "lock_floors", lock_floors)
        monkeypatch.setattr(bench, "native_stress", native_stress)


VARIANTS = ("atomic", "page+ticket", "global+yield", "global+mcs", "page")


def test_same_chunk_rows_judge_each_variants_best_overlap_run_against_the_best_bounce_floor(monkeypatch):
    lab = _SameChunkLab(monkeypatch)
    rows = bench.run_same_chunk(repeats=2, ops=1000, variants=VARIANTS, seconds=0.5)
    assert lab.events == ["lock_floors", "floors", *["stress"] * 6, "floors"] * 2
    assert lab.floor_calls == [4000] * 4 and lab.lock_calls == [1000] * 2
    # each round: the driver floor (the do-nothing tracker on an atomic tracker), then every variant
    assert [(v, kw["null_tracker"], kw["seed"]) for v, kw in lab.stress_calls] == [
        (v or "atomic", v is None, rep) for rep in (0, 1) for v in (None, *VARIANTS)]
    for _, kw in lab.stress_calls:
        assert {k: v for k, v in kw.items() if k not in ("null_tracker", "seed")} == {
            "threads": 2, "seconds": 0.5, "region": (0, 32 * MiB), "write_length": 4096, "depth": 1,
            "checks": False, "cpus": bench.OVERSUBSCRIBED_CPUS, "pin": True, "completions": "inline"}
    held = [("start", 10 * GiB - 4096, 4096), ("end", 10 * GiB - 4096, 4096)]
    assert all(t.size == 10 * GiB and t.calls == held for t in lab.trackers)

    by = {r["variant"]: r for r in rows}
    assert [r["variant"] for r in rows] == list(VARIANTS)
    common = {"floor_ns": 10.0, "floor_spread_ns": {"min": 10.0, "median": 25.0, "max": 40.0, "runs": 4},
              "floor_pinned": True, "target": 1.5, "runs": 2, "threads": 2, "seconds": 0.5, "pinned": True,
              "driver_floor_ns": approx(45.0), "driver_floor_overlap": approx(0.9),
              "driver_floor_vs_floor": approx(4.5)}
    for r in rows:
        assert {k: r[k] for k in common} == common
    atomic = by["atomic"]
    assert (atomic["pair_ns"], atomic["pair_cpu_ns"], atomic["overlap"]) == (approx(100.0), approx(70.0),
                                                                            approx(0.6))
    assert (atomic["vs_floor"], atomic["wall_vs_floor"]) == (approx(7.0), approx(10.0))
    assert atomic["met"] is False
    assert (atomic["vs_driver_floor"], atomic["tracker_ns"]) == (approx(70 / 45), approx(25.0))
    assert not any(k.startswith("lock") or "lock_floor" in k for k in atomic)
    ticket = by["page+ticket"]
    assert (ticket["pair_ns"], ticket["pair_cpu_ns"], ticket["overlap"], ticket["vs_floor"]) == (30.0, 15.0, 0.5, 1.5)
    assert ticket["met"] is True                       # at the target, judged at an overlap of exactly 0.5
    assert ticket["tracker_ns"] == approx(-30.0)
    assert {k: ticket[k] for k in ("lock_floor_ns", "lock_floor_colocated_ns", "lock_floor_vs_floor",
                                   "colocated_vs_separate", "vs_lock_floor", "lock", "own_lock_floor_ns",
                                   "own_lock_floor_vs_floor", "vs_own_lock_floor")} == {
        "lock_floor_ns": 20.0, "lock_floor_colocated_ns": 45.0, "lock_floor_vs_floor": 2.0,
        "colocated_vs_separate": 2.25, "vs_lock_floor": 0.75, "lock": "ticket", "own_lock_floor_ns": 60.0,
        "own_lock_floor_vs_floor": 6.0, "vs_own_lock_floor": 0.25}
    yielding = by["global+yield"]
    assert yielding["met"] is None and yielding["vs_floor"] == approx(4.0)      # overlap 0.4: inconclusive
    assert yielding["lock_floor_ns"] == 20.0 and yielding["vs_lock_floor"] == approx(2.0)
    assert "lock" not in yielding and "own_lock_floor_ns" not in yielding   # spin_yield has no floor of its own
    mcs = by["global+mcs"]
    assert mcs["met"] is True and mcs["pair_ns"] == 10.0 and (mcs["lock"], mcs["own_lock_floor_ns"]) == ("mcs", 80.0)
    assert mcs["vs_own_lock_floor"] == approx(10 / 80) and mcs["own_lock_floor_vs_floor"] == 8.0
    page = by["page"]
    assert (page["overlap"], page["pair_cpu_ns"], page["met"]) == (0.5, 20.0, False)
    assert (page["lock"], page["own_lock_floor_ns"], page["vs_own_lock_floor"]) == ("pthread", 20.0, 1.0)


def test_a_same_chunk_run_with_a_thread_of_0_operations_has_no_time_per_pair():
    # seen under heavy load: a thread that made no pair in its seconds divided by 0 here
    run = bench._pair_run([_thread(0.0, 1.0, 0.5, 1e7), _thread(0.0, 1.0, 0.0, 0)])
    assert (run["pair_ns"], run["pair_cpu_ns"]) == (None, None) and run["overlap"] == 0.0
    assert bench._pair_run([])["pair_cpu_ns"] is None
    measured = bench._pair_run(_run(1.0, 0.5, 1e7))
    assert (measured["pair_ns"], measured["pair_cpu_ns"]) == (approx(100.0), approx(50.0))
    # a measured run is kept over an unmeasured one whatever their overlaps; two unmeasured: the first stays
    assert bench._better_pair_run(measured, run) and not bench._better_pair_run(run, measured)
    assert bench._better_pair_run(run, None) and not bench._better_pair_run(dict(run, overlap=1.0), run)


def test_a_same_chunk_row_from_a_run_of_0_operations_says_not_measured_instead_of_a_ratio():
    common = {"floor_ns": 10.0, "floor_spread_ns": {}, "floor_pinned": True, "runs": 1, "threads": 2,
              "seconds": 0.05, "pinned": True}
    lock_floor = {"shared_spin_pair_ns": 20.0, "shared_spin_colocated_pair_ns": 40.0,
                  "shared_ticket_pair_ns": 30.0, "shared_mcs_pair_ns": 50.0}
    zero = bench._pair_run([_thread(0.0, 1.0, 0.9, 0), _thread(0.0, 1.0, 0.9, 1e7)])
    drv = bench._pair_run(_run(1.0, 0.9, 2e7))                       # 45 ns CPU per pair
    row = bench._same_chunk_row("page+ticket", zero, drv, common, lock_floor)
    assert row["not_measured"] == bench.NOT_MEASURED == "not measured: 0 operations in the run"
    assert all(row[k] is None for k in ("pair_ns", "pair_cpu_ns", "vs_floor", "wall_vs_floor", "met",
                                        "vs_driver_floor", "tracker_ns", "vs_lock_floor", "vs_own_lock_floor"))
    # what needs only the floors and the driver floor is still there
    assert (row["driver_floor_vs_floor"], row["lock_floor_vs_floor"], row["own_lock_floor_vs_floor"]) == (
        approx(4.5), 2.0, 3.0)
    assert row["driver_floor_not_measured"] is None
    # the driver floor unmeasured: the pair still has its floor ratio, not its driver-floor ones
    row = bench._same_chunk_row("atomic", drv, zero, common, {})
    assert (row["not_measured"], row["vs_floor"], row["met"]) == (None, approx(4.5), False)
    assert row["driver_floor_not_measured"] == bench.NOT_MEASURED
    assert (row["driver_floor_ns"], row["driver_floor_vs_floor"], row["vs_driver_floor"], row["tracker_ns"]) == (
        None, None, None, None)


def test_same_chunk_keeps_a_measured_run_over_one_of_0_operations_and_reports_a_variant_with_none(monkeypatch):
    zero = [_thread(0.0, 1.0, 1.0, 1e7), _thread(0.0, 1.0, 1.0, 0)]    # overlap 1.0, but no pair from one thread
    runs = dict(SAME_CHUNK_RUNS)
    runs[("atomic", 0)] = zero                           # round 1's run (overlap 0.4) is kept instead
    runs[("page", 0)] = runs[("page", 1)] = zero          # no run of page made pairs in both threads
    _SameChunkLab(monkeypatch, runs=runs)
    rows = {r["variant"]: r for r in bench.run_same_chunk(repeats=2, ops=10, variants=("atomic", "page"),
                                                         seconds=0.5)}
    assert (rows["atomic"]["pair_cpu_ns"], rows["atomic"]["overlap"], rows["atomic"]["not_measured"]) == (
        approx(20.0), approx(0.4), None)
    page = rows["page"]
    assert (page["pair_cpu_ns"], page["vs_floor"], page["met"], page["not_measured"]) == (
        None, None, None, bench.NOT_MEASURED)
    assert page["lock_floor_ns"] == 20.0 and page["vs_lock_floor"] is None


def test_same_chunk_with_only_the_atomic_variant_measures_no_lock_floors(monkeypatch):
    lab = _SameChunkLab(monkeypatch)
    rows = bench.run_same_chunk(repeats=2, ops=1000, variants=("atomic",), seconds=0.5)
    assert lab.lock_calls == [] and lab.events == ["floors", "stress", "stress", "floors"] * 2
    assert len(rows) == 1 and not any("lock" in k for k in rows[0])


def test_same_chunk_is_not_pinned_when_one_floor_run_or_one_thread_was_not(monkeypatch):
    _SameChunkLab(monkeypatch, floor_pinned=(True, True, False, True))
    row, = bench.run_same_chunk(repeats=2, ops=10, variants=("atomic",), seconds=0.5)
    assert (row["floor_pinned"], row["pinned"]) == (False, True)
    _SameChunkLab(monkeypatch, pinned=False)
    row, = bench.run_same_chunk(repeats=2, ops=10, variants=("atomic",), seconds=0.5)
    assert (row["floor_pinned"], row["pinned"]) == (True, False)


def test_same_chunk_with_more_threads_than_cpus_does_not_pin_them(monkeypatch):
    lab = _SameChunkLab(monkeypatch)
    row, = bench.run_same_chunk(repeats=2, ops=10, variants=("atomic",), threads=3, seconds=0.5)
    assert {(kw["threads"], kw["pin"]) for _, kw in lab.stress_calls} == {(3, False)}
    assert row["threads"] == 3 and row["pinned"] is False


@pytest.mark.parametrize("quick, repeats, ops, seconds", [(True, 2, 100_000, 0.02), (False, 5, 300_000, 0.05)])
def test_same_chunk_defaults_to_fewer_smaller_shorter_runs_when_quick(monkeypatch, quick, repeats, ops, seconds):
    lab = _SameChunkLab(monkeypatch)
    row, *_ = bench.run_same_chunk(quick=True) if quick else bench.run_same_chunk()
    assert [r["variant"] for r in [row, *_]] == list(SYNCS)
    assert lab.lock_calls == [ops] * repeats and lab.floor_calls == [4 * ops] * (2 * repeats)
    assert {kw["seconds"] for _, kw in lab.stress_calls} == {seconds}
    assert (row["runs"], row["seconds"], row["threads"]) == (repeats, seconds, 2)


@pytest.mark.parametrize("kw, match", [
    ({"threads": 1}, r"^threads must be in \[2, 16\], got 1$"),
    ({"threads": 17}, r"^threads must be in \[2, 16\], got 17$"),
    ({"threads": 2.0}, r"^threads must be an int in \[2, 16\], got float$"),
    ({"seconds": 0.0005}, r"^seconds must be in \[0.001, 10.0\], got 0.0005$"),
    ({"seconds": 10.5}, r"^seconds must be in \[0.001, 10.0\], got 10.5$"),
])
def test_same_chunk_refuses_thread_counts_and_durations_out_of_range_before_measuring(monkeypatch, kw, match):
    lab = _SameChunkLab(monkeypatch)
    with pytest.raises((ValueError, TypeError), match=match):
        bench.run_same_chunk(repeats=1, ops=10, **kw)
    assert lab.events == []


def test_same_chunk_takes_the_bounds_of_its_ranges(monkeypatch):
    _SameChunkLab(monkeypatch)
    row, = bench.run_same_chunk(repeats=1, ops=10, variants=("atomic",), threads=16, seconds=0.001)
    assert (row["threads"], row["seconds"]) == (16, 0.001)
    _SameChunkLab(monkeypatch)
    row, = bench.run_same_chunk(repeats=1, ops=10, variants=("atomic",), threads=2, seconds=10.0)
    assert (row["threads"], row["seconds"]) == (2, 10.0)


# ---- the single-thread hot paths (run_bench's rows) ----------------------------------------------------------

WARM = {"global": 8.0, "page": 10.0, "atomic": 5.0}        # the warm single-call pair per variant
BATCH = {"global": 1.6, "page": 1.5, "atomic": 1.2}        # the batch pair's median ratio to its floor
IDLE_DEFERRED = {"global": 16.0, "page": 15.0, "atomic": 5.0}


def _bench_lab(monkeypatch):
    rec = {"pairs": [], "checks": [], "batch_offs": [], "trackers": [], "batch": [], "same": [], "scaling": [],
           "idle": [], "distinct": [], "refs": []}

    class Empty:
        pass

    def tracker(size, sync):
        rec["trackers"].append(_RecordingTracker(size, sync=sync))
        return rec["trackers"][-1]

    def ref_tracker(size, sync):
        rec["refs"].append(_RecordingTracker(size, sync=sync))
        return rec["refs"][-1]

    def pair(obj, offsets, length):
        assert length == bench.WRITE
        rec["pairs"].append((obj, offsets))
        if isinstance(obj, Empty):
            return 2.0
        if obj in rec["refs"]:
            return 400.0 + len(offsets)                     # the reference model's 2,000 pairs
        return WARM[obj.sync] * (3 if len(offsets) in (5000, 50_000) else 1)   # cold: a quarter of the offsets

    def batch(t, offs, length, floor, rounds):
        rec["batch"].append((t.sync, len(offs), length, floor, rounds))
        rec["batch_offs"].append(offs)
        r = BATCH[t.sync]
        return {"pair_ns": 3.0 * r, "floor_ns": 3.0, "ratio": r, "rounds": [r], "spread": {"runs": 1},
                "pair_round_ns": [3.0 * r], "floor_round_ns": [3.0], "wall_ratio": r + 1, "wall_rounds": [r + 1]}

    monkeypatch.setattr(bench, "_loadavg", iter([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]).__next__)
    monkeypatch.setattr(bench, "_best_floor", lambda n, repeats: rec.setdefault("floor", (n, repeats)) and
                        {"atomic_pair_ns": 1.0, "spinlock_pair_ns": 2.0})
    monkeypatch.setattr(bench, "_EmptyPair", Empty)
    monkeypatch.setattr(bench, "BypassWriteTracker", tracker)
    monkeypatch.setattr(bench, "reference", types.SimpleNamespace(BypassWriteTracker=ref_tracker))
    monkeypatch.setattr(bench, "_single_pair_ns", pair)
    monkeypatch.setattr(bench, "batch_vs_floor", batch)
    monkeypatch.setattr(bench, "_batch_check_ns",
                        lambda t, offs: rec["checks"].append((t, offs)) or 7.0 + len(offs) / 50_000)
    monkeypatch.setattr(bench, "_idle_page", lambda sync, size, offs, repeats: rec["idle"].append(
        (sync, size, len(offs), repeats)) or {"eager": {"pair_ns": 30.0, "allocations_per_1000": 1000.0},
                                               "deferred": {"pair_ns": IDLE_DEFERRED[sync],
                                                            "allocations_per_1000": 0.5}})
    monkeypatch.setattr(bench, "_distinct_pages_scaling", lambda sync, ops, repeats: rec["distinct"].append(
        (sync, ops, repeats)) or {"scaling_2_over_1": 1.9})
    monkeypatch.setattr(bench, "run_same_chunk", lambda **kw: rec["same"].append(kw) or [kw.get("variants")])
    monkeypatch.setattr(bench, "run_scaling", lambda **kw: rec["scaling"].append(kw) or {"variants": {}})
    return rec


def test_bench_rows_are_each_variants_figures_over_its_floors_and_warm_pair_with_verdicts_at_the_targets(
        monkeypatch):
    rec = _bench_lab(monkeypatch)
    labels = []
    out = bench.run_bench(quick=True, progress=labels.append)
    assert labels == ["floors", "global", "page", "atomic", "same chunk", "same chunk, lock options", "scaling"]
    assert rec["floor"] == (200_000, 3)
    assert out["floors"] == {"atomic_pair_ns": 1.0, "spinlock_pair_ns": 2.0, "cython_empty_pair_ns": 2.0}
    assert rec["batch"] == [(s, 50_000, bench.WRITE, "atomic" if s == "atomic" else "spinlock", 3)
                            for s in SYNCS]
    assert rec["idle"] == [(s, 10 * GiB, 5000, 3) for s in SYNCS]
    assert rec["distinct"] == [(s, 100_000, 3) for s in SYNCS]
    assert [(r.size, r.sync) for r in rec["refs"]] == [(10 * GiB, s) for s in SYNCS]
    assert all(r.calls == [("start", 10 * GiB - 4096, 4096)] for r in rec["refs"])
    held = [("start", 10 * GiB - 4096, 4096), ("end", 10 * GiB - 4096, 4096)]
    assert [(t.size, t.sync, t.calls) for t in rec["trackers"]] == [(10 * GiB, s, held) for s in SYNCS]
    rows = {r["variant"]: r for r in out["results"]}
    assert list(rows) == list(SYNCS)
    page = rows["page"]
    assert page == {
        "variant": "page", "batch_pair_ns": 4.5, "batch_floor_ns": 3.0, "batch_pair_vs_floor": 1.5,
        "batch_pair_vs_floor_rounds": [1.5], "batch_pair_vs_floor_spread": {"runs": 1},
        "batch_pair_round_ns": [4.5], "batch_floor_round_ns": [3.0], "batch_pair_vs_floor_wall": 2.5,
        "batch_pair_vs_floor_wall_rounds": [2.5], "batch_pair_target": 1.5, "batch_pair_met": True,
        "floor": "spinlock_pair_ns", "batch_check_ns": 8.0, "single_pair_ns": 10.0, "single_pair_vs_empty_call": 5.0,
        "single_pair_cold_ns": 30.0, "idle_pair_eager_ns": 30.0, "idle_pair_deferred_ns": 15.0,
        "idle_pair_eager_vs_warm": 3.0, "idle_pair_deferred_vs_warm": 1.5, "idle_pair_target": 1.5,
        "idle_pair_deferred_met": True, "allocations_per_1000_writes_eager": 1000.0,
        "allocations_per_1000_writes_deferred": 0.5, "reference_pair_ns": 2400.0, "speedup_vs_reference": 240.0,
        "scaling_2_over_1": 1.9}
    assert (rows["global"]["batch_pair_met"], rows["global"]["idle_pair_deferred_met"]) == (False, False)
    assert rows["atomic"]["floor"] == "atomic_pair_ns" and rows["atomic"]["batch_pair_met"] is True
    assert rows["atomic"]["idle_pair_deferred_met"] is True
    assert rec["same"] == [{"quick": True, "repeats": 3},
                           {"quick": True, "repeats": 3, "variants": bench.SAME_CHUNK_LOCK_OPTIONS}]
    assert out["same_chunk"] == [None] and out["same_chunk_lock_options"] == [bench.SAME_CHUNK_LOCK_OPTIONS]
    assert rec["scaling"] == [{"quick": True, "repeats": None, "progress": labels.append}]
    assert out["scaling"] == {"variants": {}}
    assert out["targets"] == {"p99_ns": 20_000, "same_chunk_vs_floor": 1.5, "batch_pair_vs_floor": 1.5,
                              "idle_pair_vs_warm": 1.5}
    assert out["load"] == {"before": [1.0, 2.0, 3.0], "after": [4.0, 5.0, 6.0]}
    assert out["params"] == {"batch_ops": 50_000, "single_ops": 20_000, "repeats": 3, "device_size": 10 * GiB,
                             "write_length": bench.WRITE, "stress_ops_per_thread": 100_000, "batch_rounds": 3}


def test_a_full_bench_runs_more_and_longer_than_a_quick_one(monkeypatch):
    rec = _bench_lab(monkeypatch)
    out = bench.run_bench()
    assert rec["floor"] == (1_600_000, 5)
    assert rec["batch"] == [(s, 400_000, bench.WRITE, "atomic" if s == "atomic" else "spinlock", 7)
                            for s in SYNCS]
    assert rec["idle"] == [(s, 10 * GiB, 50_000, 5) for s in SYNCS]
    assert rec["distinct"] == [(s, 1_000_000, 5) for s in SYNCS]
    assert rec["same"] == [{"quick": False, "repeats": 5},
                           {"quick": False, "repeats": 5, "variants": bench.SAME_CHUNK_LOCK_OPTIONS}]
    assert rec["scaling"] == [{"quick": False, "repeats": 5, "progress": None}]
    assert out["params"] == {"batch_ops": 400_000, "single_ops": 200_000, "repeats": 5, "device_size": 10 * GiB,
                             "write_length": bench.WRITE, "stress_ops_per_thread": 1_000_000, "batch_rounds": 7}
    page = out["results"][1]
    assert (page["batch_check_ns"], page["single_pair_cold_ns"], page["reference_pair_ns"]) == (15.0, 30.0, 10_400.0)


def test_bench_offsets_are_one_seeded_draw_of_aligned_writes_inside_the_device_shared_by_every_measurement(
        monkeypatch):
    import numpy as np
    rec = _bench_lab(monkeypatch)
    bench.run_bench(quick=True)
    offs = rec["batch_offs"][0]
    assert offs.dtype == np.int64 and len(offs) == 50_000
    assert (offs % 4096 == 0).all() and offs.min() >= 0 and offs.max() + bench.WRITE <= 10 * GiB
    assert len(np.unique(offs)) > 49_000                      # spread over the device, not one spot
    assert all(o is offs for o in rec["batch_offs"])
    assert [t for t, _ in rec["checks"]] == [t for t in rec["trackers"] for _ in range(3)]   # best of 3 each
    assert all(o is offs for _, o in rec["checks"])
    single = [int(x) for x in offs[:20_000]]
    # the empty call and every variant's warm pairs on the same 20,000 offsets, cold on the first 5,000, the
    # reference model once on the first 2,000
    assert [o for obj, o in rec["pairs"] if isinstance(obj, bench._EmptyPair)] == [single] * 3
    for t in rec["trackers"]:
        assert [o for obj, o in rec["pairs"] if obj is t] == [single[:5000]] * 3 + [single] * 3
    for r in rec["refs"]:
        assert [o for obj, o in rec["pairs"] if obj is r] == [single[:2000]]
    again = _bench_lab(monkeypatch)
    bench.run_bench(quick=True)
    assert (again["batch_offs"][0] == offs).all()             # the same draw in every run
