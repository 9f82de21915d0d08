"""The native stress's latency sampling, check-free mode, CPU affinity and scheduler counts
(``pybcache.bcache._tracker.native_stress`` options beyond :func:`pybcache.stress`)."""
from __future__ import annotations

import os

import numpy as np
import pytest

import pybcache
from pybcache.bcache._tracker import COMPLETIONS, _weighted_percentiles, native_stress

pytestmark = [pytest.mark.native, pytest.mark.xdist_group("native-threads")]

GiB = pybcache.GiB
MiB = pybcache.MiB


def _quiescent(t: pybcache.BypassWriteTracker) -> None:
    assert not t.counts().any()
    assert t.stats()["underflows"] == 0


@pytest.mark.parametrize("sync", ["global", "page", "atomic"])
def test_sampling_times_one_iteration_in_every_n_and_orders_the_percentiles(sync):
    t = pybcache.BypassWriteTracker(10 * GiB, sync=sync)
    res = native_stress(t, threads=2, ops=20_000, sample_every=16, seed=1)
    lat = res["latency"]
    assert lat["sampled"] == 2 * (20_000 // 16)
    assert lat["kept"] == lat["sampled"]  # under the default capacity every sample is kept
    assert 0 < lat["p50_ns"] <= lat["p90_ns"] <= lat["p99_ns"] <= lat["p999_ns"] <= lat["max_ns"]
    for p in res["per_thread"]:
        assert p["sampled"] == 20_000 // 16
        assert p["latency_ns"].dtype == np.uint64 and p["latency_ns"].size == p["sampled"]
        assert p["sample_max_ns"] == int(p["latency_ns"].max())
    _quiescent(t)


def test_past_its_capacity_a_thread_keeps_capacity_samples_and_counts_all_it_took():
    # Which samples the reservoir keeps is not reported (the kept values are timings), so its uniformity is
    # not checked here: what is checked is the count kept, the count taken, and that each kept one is real.
    t = pybcache.BypassWriteTracker(10 * GiB)
    res = native_stress(t, threads=1, ops=50_000, sample_every=2, sample_capacity=100, seed=2)
    p = res["per_thread"][0]
    assert p["sampled"] == 25_000 and p["latency_ns"].size == 100
    assert res["latency"]["kept"] == 100 and res["latency"]["sampled"] == 25_000
    assert (p["latency_ns"] > 0).all()
    _quiescent(t)


def test_sampling_leaves_the_workload_unchanged():
    # One thread, a fixed number of ops, its own ends inline: the offsets come from the seed alone, so the
    # checks that find an active write are identical with and without the (separately seeded) sampling.
    # (With completion threads, which writes are still in flight at a check depends on their timing.)
    runs = []
    for every in (0, 7):
        t = pybcache.BypassWriteTracker(8 * MiB, chunk_size=4096, counter_bits=32)
        runs.append(native_stress(t, threads=1, ops=30_000, write_length=8192, depth=3, sample_every=every,
                                  seed=9, completions="inline"))
        _quiescent(t)
    a, b = (r["per_thread"][0] for r in runs)
    assert (a["active_hits"], a["starts"], a["ends"]) == (b["active_hits"], b["starts"], b["ends"])
    assert runs[0]["latency"] is None and "latency_ns" not in a


def test_without_sampling_the_existing_fields_keep_their_meaning():
    t = pybcache.BypassWriteTracker(64 * GiB)
    res = native_stress(t, threads=2, ops=5_000, seed=3)
    assert res["latency"] is None and res["ops"] == 10_000
    for p in res["per_thread"]:
        assert p["starts"] == p["ends"] == p["checks"] == p["ops"] == 5_000
        assert isinstance(p["vol_switches"], int) and isinstance(p["invol_switches"], int)
        assert "sampled" not in p
    _quiescent(t)


def test_checks_false_runs_start_end_pairs_only():
    t = pybcache.BypassWriteTracker(10 * GiB, sync="atomic")
    res = native_stress(t, threads=2, ops=10_000, region=(0, 32 * MiB), write_length=4096, depth=1,
                        checks=False)
    for p in res["per_thread"]:
        assert p["checks"] == 0 and p["active_hits"] == 0 and p["starts"] == p["ends"] == 10_000
    _quiescent(t)


@pytest.mark.parametrize("completions", COMPLETIONS)
def test_the_null_tracker_runs_the_same_loop_and_leaves_the_tracker_untouched(completions):
    # The do-nothing tracker replaces the tracker's calls: the loop's counts are those of a real run, and the
    # tracker passed (which only sizes the device) sees no start, end or check and allocates no page.
    t = pybcache.BypassWriteTracker(10 * GiB, sync="page")
    real = pybcache.BypassWriteTracker(10 * GiB, sync="page")
    kw = dict(threads=2, ops=4_000, region=(0, 32 * MiB), write_length=4096, depth=3, seed=4,
              completions=completions)
    res = native_stress(t, null_tracker=True, **kw)
    ref = native_stress(real, **kw)
    for p, q in zip(res["per_thread"], ref["per_thread"]):
        assert p["starts"] == p["ends"] == p["checks"] == p["ops"] == q["ops"] == 4_000
        # a check reads the one counter: it is non-zero while this thread's own new write is in flight
        assert p["active_hits"] == p["checks"] and p["untracked"] == 0
    st = t.stats()
    assert (st["starts"], st["ends"], st["pages_allocated"]) == (0, 0, 0)
    assert t.memory()["peak_pages"] == 0 and real.stats()["starts"] == 8_000 and real.stats()["pages_allocated"] > 0
    _quiescent(t)
    _quiescent(real)


def test_pinned_threads_each_run_on_one_cpu_of_the_set_and_complete():
    # pin=True puts thread i on the (i mod cpus)-th CPU of the set; the driver does not report placement, so
    # what is checked is that a pinned run over more threads than CPUs completes, balanced, and that the
    # caller's own affinity is left alone.
    mine = os.sched_getaffinity(0)
    t = pybcache.BypassWriteTracker(10 * GiB, sync="atomic")
    res = native_stress(t, threads=3, ops=3000, cpus=2, pin=True, region=(0, 32 * MiB), write_length=4096,
                        depth=1, checks=False, completions="inline")
    assert res["ops"] == 9000 and all(p["starts"] == p["ends"] == 3000 for p in res["per_thread"])
    assert os.sched_getaffinity(0) == mine
    try:  # where this process may set affinities at all, every thread's pinning must have taken effect
        os.sched_setaffinity(0, mine)
        may_pin = True
    except OSError:
        may_pin = False
    assert [p["pinned"] for p in res["per_thread"]] == [may_pin] * 3
    # unpinned threads say so
    res = native_stress(t, threads=2, ops=100, cpus=2)
    assert [p["pinned"] for p in res["per_thread"]] == [False, False]
    _quiescent(t)


def test_cpus_runs_on_one_cpu_or_more_than_the_machine_has_and_leaves_the_callers_affinity():
    # The driver does not report where its threads ran, so the pinning itself is not checked here: what is
    # checked is that a pinned run completes, an oversized cpus is clamped (no error), and the calling thread
    # keeps its own CPU set (the threads are pinned, not the caller).
    mine = os.sched_getaffinity(0)
    t = pybcache.BypassWriteTracker(10 * GiB, sync="page")
    res = native_stress(t, threads=4, ops=2000, cpus=1, sample_every=8)
    assert res["ops"] == 8000 and res["latency"]["sampled"] == 4 * (2000 // 8)
    assert os.sched_getaffinity(0) == mine
    # more CPUs than the machine has: all of them are used, no error
    res = native_stress(t, threads=2, ops=1000, cpus=(os.cpu_count() or 1) + 3)
    assert res["ops"] == 2000
    _quiescent(t)


@pytest.mark.parametrize("kwargs, exc, named", [
    ({"sample_every": -1}, ValueError, "sample_every"),
    ({"sample_every": 2 ** 32}, ValueError, "sample_every"),
    ({"sample_every": 1.5}, TypeError, "sample_every"),
    ({"sample_every": 4, "sample_capacity": 0}, ValueError, "sample_capacity"),
    ({"sample_capacity": 2 ** 24 + 1}, ValueError, "sample_capacity"),
    ({"checks": 1}, TypeError, "checks"),
    ({"cpus": -1}, ValueError, "cpus"),
    ({"cpus": "2"}, TypeError, "cpus"),
    ({"completions": "irq"}, ValueError, "completions"),
    ({"completions": 1}, TypeError, "completions"),
    ({"wait_timeout": 0}, ValueError, "wait_timeout"),
    ({"null_tracker": 1}, TypeError, "null_tracker"),
    ({"null_tracker": "yes"}, TypeError, "null_tracker"),
    ({"null_tracker": True, "reclaim_every": 4}, ValueError, "null_tracker"),
    ({"pin": True}, ValueError, "pin"),  # pinning needs cpus > 0
    ({"pin": 1, "cpus": 2}, TypeError, "pin"),
])
def test_bad_sampling_options_are_refused_by_name_before_anything_runs(kwargs, exc, named):
    t = pybcache.BypassWriteTracker(GiB)
    with pytest.raises(exc, match=named):
        native_stress(t, threads=1, ops=10, **kwargs)
    assert t.stats()["starts"] == 0


def test_weighted_percentiles_weigh_each_sample_by_the_iterations_it_stands_for():
    xs = np.array([10, 20, 30, 1000], dtype=np.uint64)
    assert _weighted_percentiles(xs, np.ones(4), (50, 100)) == [20, 1000]
    # the last sample stands for 97 iterations: it is the median and the p99
    assert _weighted_percentiles(xs, np.array([1.0, 1.0, 1.0, 97.0]), (50, 99)) == [1000, 1000]


def test_latency_percentiles_weigh_each_sample_by_the_iterations_it_stands_for():
    # four samples, the last standing for five timed iterations: the median is that sample, not 2.5
    from pybcache.bcache._tracker import _weighted_percentiles
    xs = np.array([1, 2, 3, 4], dtype=np.uint64)
    assert _weighted_percentiles(xs, np.array([1.0, 1.0, 1.0, 5.0]), (25, 50, 100)) == [2, 4, 4]
    assert _weighted_percentiles(xs, np.ones(4), (25, 50, 100)) == [1, 2, 4]
