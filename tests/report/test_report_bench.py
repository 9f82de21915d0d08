"""The report's hot-path section (``pybcache/report/bench.py``).

The experiments the section runs are stood in for (``monkeypatch``); the tests check the Markdown it writes
(figures formatted as stated, verdicts that follow the figures), the results it stores, the plots it asks for
(the data handed to the plot function and the file named, not pixels) and what it hands on to the experiments.
Fast: no experiment, no real plot, no subprocess."""
from __future__ import annotations

from pybcache.bcache.experiments.bench import TARGET_P99_NS
from pybcache.report import bench as rbench

from helpers.report_stand_ins import _bench_result, _ctx, _layout


def test_the_bench_section_tables_its_figures_and_judges_p99_only_when_oversubscribed(tmp_path, monkeypatch, plots):
    import pybcache.bcache.experiments.bench as ebench
    res = _bench_result()
    asked = []

    def run_bench(quick, progress):
        asked.append(quick)
        progress("floors")
        return res
    monkeypatch.setattr(ebench, "run_bench", run_bench)
    ctx, notes = _ctx(tmp_path, quick=True)
    text = rbench.bench(ctx)
    _layout(text, "bench")
    assert asked == [True] and notes == ["bench: floors"] and ctx.results["bench"] is res
    assert text.startswith("## Hot paths against this machine's floors\n") and text.endswith("\n\n")
    assert ("best of 3): bare C atomic pair 4.0 ns, pthread spinlock pair 5.8 ns, empty Cython method pair 38.8 ns, "
            "2-thread shared-counter pair 9.9 ns. Load average during the bench: 4.18, 3.49, 3.59 before, "
            "4.5, 3.6, 3.62 after.") in text
    assert "| global | 14.8 | 2.01x (1.91–2.12) | 79.6 | 2.05x | 62x faster | 8.7 | 205 |" in text
    assert "timed in 7 interleaved rounds" in text and "pinned to the same 2 CPUs" in text
    assert "One op in 64 is timed" in text and "best of 3 runs of 0.5 s" in text
    # p99 judged only above the 2 CPUs: 25 µs missed, 20 µs (the target itself) met, atomic's 110 ns met
    assert ("| global | 8 | 5.00 | 0.50x | 400 | 80.0x | 80 ns | 25 µs | 50 µs | 5.0 µs | 30.0 ms | 0.10 | "
            "**missed** |") in text
    assert "| page | 8 | 11.01 | 1.10x | 210 | 42.0x | 80 ns | 20 µs | 40 µs | 5.0 µs | 2.0 ms | 0.80 | met |" in text
    assert "| global | 2 | 10.00 | 1.00x | 200 | 40.0x | 80 ns | 150 ns | 300 ns | 5.0 µs | 2.0 ms | 0.90 | — |" in text
    assert "| page | 2 | 12.01 | 1.20x |" in text          # Mops/s: 12,005,001 ops/s over 1e6
    assert ("| variant | batch pair ns | vs floor | call pair ns | vs empty call | vs Python reference | "
            "batch check ns | cold call pair ns |\n|---|") in text
    assert ("| variant | threads | Mops/s | vs 1 thread | CPU ns/op | vs floor | p50 | p99 | p99 worst | p99.9 | max | "
            f"slowest thread | p99 ≤ {TARGET_P99_NS // 1000} µs |\n|---|") in text
    assert ("| variant | pair ns (CPU) | pair ns (wall) | overlap | floor ns | vs floor | driver floor ns | "
            "vs driver floor | target |\n|---|") in text
    assert ("| global | 342.7 | 343.2 | 1.00 | 10.2 | 33.60x | 12.3 | 28.00x | ≤ 1.5x: **missed** |" in text)
    assert "| page | 342.7 | 343.2 | 0.30 | 10.2 | 1.20x | 12.3 | 1.00x | ≤ 1.5x: inconclusive |" in text
    assert "| atomic | 342.7 | 343.2 | 0.90 | 10.2 | 1.44x | 12.3 | 1.20x | ≤ 1.5x: met |" in text
    assert ("2 threads over 1: global 1.39x (adjacent 0.27x), page 2.39x (adjacent 0.27x), atomic 3.39x "
            "(adjacent 0.27x).") in text
    assert "share nothing: global 1.38x, page 1.38x, atomic 1.38x." in text
    assert "target ≤ 1.5x" in text and "each of 5 runs" in text and "(0.25 s)" in text
    assert "**Oversubscription.**" in text and "`global` keeps 0.50x of its 2-thread throughput" in text
    (sc, path), kw = plots["plot_scaling"][0]
    assert sc is res["scaling"] and path == str(tmp_path / "scaling.png") and kw == {"target_ns": TARGET_P99_NS}
    assert ctx.plots == [("scaling.png", "ns/op, throughput and p50/p99 per variant and thread count")]


def test_the_bench_section_passes_full_mode_on(tmp_path, monkeypatch, plots):
    import pybcache.bcache.experiments.bench as ebench
    asked = []
    monkeypatch.setattr(ebench, "run_bench", lambda quick, progress: asked.append(quick) or _bench_result())
    rbench.bench(_ctx(tmp_path, quick=False)[0])
    assert asked == [False]


def test_the_same_chunk_table_says_not_measured_for_a_variant_whose_runs_made_no_pair(tmp_path, monkeypatch, plots):
    import pybcache.bcache.experiments.bench as ebench
    res = _bench_result()
    res["same_chunk"][1].update(pair_cpu_ns=None, pair_ns=None, vs_floor=None, vs_driver_floor=None, met=None,
                                not_measured="not measured: 0 operations in the run")
    monkeypatch.setattr(ebench, "run_bench", lambda quick, progress: res)
    text = rbench.bench(_ctx(tmp_path, quick=True)[0])
    assert "| page | — | — | 0.30 | 10.2 | — | 12.3 | — | ≤ 1.5x: not measured: 0 operations in the run |" in text
    assert "| atomic | 342.7 | 343.2 | 0.90 | 10.2 | 1.44x | 12.3 | 1.20x | ≤ 1.5x: met |" in text


def test_the_scaling_table_says_not_measured_for_a_speed_up_over_a_thread_of_0_operations(tmp_path, monkeypatch,
                                                                                          plots):
    import pybcache.bcache.experiments.bench as ebench
    res = _bench_result()
    for r in res["scaling"]["variants"]["page"]:
        r.update(speedup_vs_1=None, speedup_not_measured="not measured: 0 operations in the run")
    monkeypatch.setattr(ebench, "run_bench", lambda quick, progress: res)
    text = rbench.bench(_ctx(tmp_path, quick=True)[0])
    assert "| page | 8 | 11.01 | not measured: 0 operations in the run | 210 | 42.0x |" in text
    assert "| global | 8 | 5.00 | 0.50x | 400 | 80.0x |" in text
