"""The report's fio section (``pybcache/report/fio.py``).

The experiments the section runs are stood in for (``monkeypatch``); the tests check the Markdown it writes
(figures formatted as stated, verdicts that follow the figures), the results it stores, the plots it asks for
(the data handed to the plot function and the file named, not pixels) and what it hands on to the experiments.
Fast: no experiment, no real plot, no subprocess."""
from __future__ import annotations

import types

import numpy as np
import pytest

import pybcache.bcache.cachedev as cachedev_mod
from pybcache.report import fio as rfio
from pybcache.units import GiB, KiB, MiB

from helpers.report_stand_ins import _ctx, _fio_run, _layout


def test_the_fio_section_runs_both_sizes_with_and_without_the_bounce_copy_and_tables_them(tmp_path, monkeypatch,
                                                                                          plots):
    calls = []

    def run_fio(**kw):
        calls.append(kw)
        if kw.get("granularity") == "page":
            return {"rows": [{"variant": "page", "bypass_fraction": 0.99}], "config": {"granularity": "page"}}
        return _fio_run(1.0 if kw.get("bounce_copy", True) else 0.5, chunks=kw["size"] // (32 * MiB))
    monkeypatch.setattr(cachedev_mod, "fio", run_fio)
    heat = {"times_s": [0.0, 0.01, 0.02], "counts": np.array([[0, 1], [2, 0], [0, 0]]), "chunk_size": 32 * MiB,
            "stress": {}, "max_count": 2, "mean_in_flight_chunks": 2 / 3}
    sampled = []
    monkeypatch.setattr(rfio, "sample_counts", lambda *a: sampled.append(a) or heat)
    ctx, notes = _ctx(tmp_path, quick=False, seed=3)
    text = rfio.fio(ctx)
    _layout(text, "fio")
    assert calls == [dict(size=10 * GiB, seconds=3.0, seed=3), dict(size=10 * GiB, seconds=3.0, seed=3,
                                                                    bounce_copy=False),
                     dict(size=320 * GiB, seconds=2.0, seed=3), dict(size=320 * GiB, seconds=2.0, seed=3,
                                                                     bounce_copy=False),
                     dict(size=320 * GiB, seconds=1.0, seed=3, variants=("none", "page"), granularity="page")]
    assert sampled == [(10 * GiB, 1.0, 0.01, 3)]
    assert notes == ["fio 10 GiB", "fio 10 GiB, no bounce copy", "fio 320 GiB", "fio 320 GiB, no bounce copy",
                     "fio 320 GiB, page-granular read check", "fio: counts() heatmap"]
    assert ctx.results["fio_granularity"] == {"size_gib": 320, "rows": [{"variant": "page", "bypass_fraction": 0.99}],
                                              "config": {"granularity": "page"}}
    assert ctx.results["fio"]["10 GiB"]["rows"][2]["ns_per_io_vs_none"] == 1.06
    assert ctx.results["fio_no_bounce_copy"]["10 GiB"]["rows"][2]["ns_per_io_vs_none"] == 0.53
    assert ctx.results["counts_heatmap"] == {"chunk_size": 32 * MiB, "max_count": 2, "mean_in_flight_chunks": 2 / 3,
                                             "samples": 3}
    assert "**10 GiB** (320 chunks of 32 MiB, 2 jobs, 3 s per variant in 12 rounds):" in text
    assert "**320 GiB** (10,240 chunks of 32 MiB, 2 jobs, 2 s per variant in 12 rounds):" in text
    assert "| metric | Unpatched | Global lk | Page lk | Atomic |" in text
    assert "| Total ops/s (model, bounce copy on) | 1,500,000 | 3,000,000 | 4,500,000 | 6,000,000 |" in text
    assert "| CPU ns per I/O (model, bounce copy on) | 1000 | 1010 | 1060 | 970 |" in text
    assert "| CPU vs unpatched (model, bounce copy on) | — | 1.010x | 1.060x | 0.970x |" in text
    assert "| CPU ns per I/O (model, bounce copy off) | 500 | 505 | 530 | 485 |" in text
    assert "| CPU vs unpatched (model, bounce copy off) | — | 0.505x | 0.530x | 0.485x |" in text
    assert "| Kernel CPU vs unpatched (posted) | 1.000x | 1.237x | 1.156x | 1.197x |" in text      # 10 GiB
    assert "| Kernel CPU vs unpatched (posted) | 1.000x | 1.004x | 0.864x | 0.884x |" in text      # 320 GiB
    assert "| Reads bypassing the cache (model) | 0.0 % | 38.1 % | 38.1 % | 38.1 % |" in text
    assert "| Reads inserted in the cache (model) | 60.0 % | 61.0 % | 62.0 % | 63.0 % |" in text
    assert "| NVMe util (posted) | 66.89 % | 0.62 % | 0.62 % | 0.63 % |" in text
    assert "| Stale reads (model) | 48 | 0 | 0 | 0 |" in text and "| Tracking pages | 0 | 1 | 1 | 1 |" in text
    assert "(3 samples, asked for every 10 ms)" in text and "the highest counter seen was 2, and 1 chunks" in text
    (runs, path), kw = plots["plot_fio"][0]
    assert runs is ctx.results["fio"] and path == str(tmp_path / "fio.png")
    assert kw["posted_ratios"]["10 GiB"] == pytest.approx({"global": 77.94 / 63.02, "page": 72.88 / 63.02,
                                                         "atomic": 75.41 / 63.02})
    assert kw["posted_ratios"]["320 GiB"]["page"] == pytest.approx(60.85 / 70.39)
    assert kw["posted_util"] == {lb: rfio.POSTED_FIO[lb]["nvme_util"] for lb in ("10 GiB", "320 GiB")}
    (times, counts, path), kw = plots["plot_counts_heatmap"][0]
    assert times == heat["times_s"] and counts is heat["counts"] and path == str(tmp_path / "counts_heatmap.png")
    assert kw == {"chunk_size": 32 * MiB, "title": "counts() of a 10 GiB page-variant tracker (3 samples) while a "
                  "native thread keeps 160 random 128 KiB writes in flight"}
    assert ctx.plots == [("fio.png", "fio: CPU per I/O vs unpatched and cache inserts, beside the posted figures"),
                         ("counts_heatmap.png", "counts() heatmap during a fio-like run")]


def test_the_fio_section_in_quick_mode_runs_a_quarter_second_per_size(tmp_path, monkeypatch, plots):
    calls, sampled = [], []
    monkeypatch.setattr(cachedev_mod, "fio", lambda **kw: calls.append(kw) or _fio_run(1.0))
    monkeypatch.setattr(rfio, "sample_counts", lambda *a: sampled.append(a) or {
        "times_s": [], "counts": np.zeros((0, 2)), "chunk_size": 1, "max_count": 0, "mean_in_flight_chunks": 0.0})
    text = rfio.fio(_ctx(tmp_path, quick=True, seed=0)[0])
    assert [c["seconds"] for c in calls] == [0.25] * 5
    assert sampled == [(10 * GiB, 0.3, 0.005, 0)]
    assert "0.25 s per variant" in text and "asked for every 5 ms" in text


def test_sample_counts_samples_the_trackers_counters_while_the_native_stress_runs():
    out = rfio.sample_counts(GiB, 0.05, 0.002, 1)
    counts = out["counts"]
    assert counts.dtype == np.int64 and counts.shape == (len(out["times_s"]), GiB // out["chunk_size"])
    assert out["times_s"] == sorted(out["times_s"])
    assert out["stress"]["threads"] == 1 and len(out["stress"]["per_thread"]) == 1
    if counts.size:
        # (every frame may be all zero: taken before the first write or after the last end)
        assert out["max_count"] == counts.max() and 0 <= out["max_count"] <= 160
        assert out["mean_in_flight_chunks"] == pytest.approx((counts > 0).sum(axis=1).mean())
    else:                                            # a loaded machine may give the stress no sample at all
        assert out["max_count"] == 0 and out["mean_in_flight_chunks"] == 0.0


def test_sample_counts_keeps_the_frames_taken_while_one_native_thread_keeps_160_writes_of_128_kib(monkeypatch):
    import threading

    import pybcache.bcache._tracker as tracker
    real, made, asked, made_tracker = tracker.BypassWriteTracker, [], [], []
    reached = threading.Event()                      # the sampler asked for the frame after the last in flight

    class Counted:
        """The real tracker, its counts() calls counted."""

        def __init__(self, *args, **kwargs):
            self.t, self.calls, self.last, self.stress = real(*args, **kwargs), 0, None, None
            made.append((args, kwargs))
            made_tracker.append(self)

        def counts(self):
            self.calls += 1
            if self.last is not None and self.calls >= self.last:
                reached.set()
                self.stress.join(600)                # this frame is taken once the workload has ended
            return self.t.counts()

        def __getattr__(self, name):
            return getattr(self.t, name)

    def stress(t, **kw):
        asked.append(kw)
        t.start(0, 4096)
        t.start(0, 4096)
        t.start(3 * t.chunk_size, 4096)
        t.stress, t.last = threading.current_thread(), t.calls + 2   # one frame with the writes in flight
        assert reached.wait(600)                     # (a bound only a hang reaches)
        return {"stressed": True}
    monkeypatch.setattr(tracker, "BypassWriteTracker", Counted)
    monkeypatch.setattr(tracker, "native_stress", stress)
    out = rfio.sample_counts(GiB, 0.05, 0.001, 9)
    assert made == [((GiB,), {"sync": "page"})]
    assert asked == [{"threads": 1, "seconds": 0.05, "write_length": 128 * KiB, "depth": 160, "seed": 9}]
    assert out["stress"] == {"stressed": True} and out["chunk_size"] == 32 * MiB
    counts = out["counts"]
    assert counts.shape == (len(out["times_s"]), 32) and counts.dtype == np.int64
    assert out["max_count"] == 2 and counts[-1, 0] == 2 and counts[-1, 3] == 1
    assert out["mean_in_flight_chunks"] == pytest.approx((counts > 0).sum(axis=1).mean())
    assert out["times_s"] == sorted(out["times_s"]) and 0 <= out["times_s"][0]
    assert len(out["times_s"]) == made_tracker[0].calls - 1           # the frame taken after the end is dropped


def test_sample_counts_of_a_workload_over_before_the_first_sample_is_empty(monkeypatch):
    import pybcache.bcache._tracker as tracker
    threads = []

    class Finished:
        """A thread that has run its workload to the end by the time start() returns."""

        def __init__(self, target, daemon):
            self.target = target
            threads.append(daemon)

        def start(self):
            self.target()

        def is_alive(self):
            return False

        def join(self):
            pass
    monkeypatch.setattr(rfio, "threading", types.SimpleNamespace(Thread=Finished))
    monkeypatch.setattr(tracker, "native_stress", lambda t, **kw: {"ran": True})
    out = rfio.sample_counts(GiB, 0.05, 0.001, 1)
    assert threads == [True]                         # a daemon: never holds the interpreter open
    assert out["times_s"] == [] and out["counts"].shape == (0, 32) and out["stress"] == {"ran": True}
    assert out["max_count"] == 0 and out["mean_in_flight_chunks"] == 0.0


def test_sample_counts_re_raises_the_stress_threads_error(monkeypatch):
    import pybcache.bcache._tracker as tracker

    def broken(*a, **kw):
        raise RuntimeError("stress failed")
    monkeypatch.setattr(tracker, "native_stress", broken)
    with pytest.raises(RuntimeError, match="^stress failed$"):
        rfio.sample_counts(GiB, 0.05, 0.002, 1)
