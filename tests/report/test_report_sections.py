"""Each report section on small fake results of the real shape: the experiments a section runs are stood in
for (``monkeypatch``), and the tests check the Markdown it writes (figures formatted as stated, verdicts that
follow the figures), the results it stores, the plots it asks for (the data handed to the plot function and
the file named, not pixels) and what it hands on to the experiments (quick or full lengths, the seed).
Fast: no experiment, no real plot, no subprocess."""
from __future__ import annotations

import json
import os
import platform
import re
import sys
import types

import numpy as np
import pytest

import pybcache
import pybcache.bcache.cachedev as cachedev_mod
import pybcache.bcache.kpatch.check.runner as checkpatch_mod
import pybcache.writeback as writeback_pkg
from pybcache import _csrc, report
from pybcache.bcache.experiments.bench import TARGET_P99_NS
from pybcache.report import (_common, answers as ans, bench as rbench, check_patch as rcheck, docs, fio as rfio,
                             header as rheader, memory as rmemory, race as rrace, writeback as rwb)
from pybcache.units import GiB, KiB, MiB, TiB


# ---- shared stand-ins -------------------------------------------------------------------------------------------

@pytest.fixture
def plots(monkeypatch):
    """``pybcache.report.plots`` replaced by a module of recorders: {name: [(args, kwargs), ...]}; each returns the
    path, as the real ones do (the sections import it when they run; the real one would import matplotlib)."""
    calls: dict[str, list] = {}
    fake = types.ModuleType("pybcache.report.plots")
    for name in ("plot_memory", "plot_scaling", "plot_stale_reads", "plot_fio", "plot_counts_heatmap",
                 "plot_writeback_timeline", "plot_writeback_sensitivity"):
        def rec(*args, _name=name, **kwargs):
            calls.setdefault(_name, []).append((args, kwargs))
            return args[-1]
        setattr(fake, name, rec)
    monkeypatch.setitem(sys.modules, "pybcache.report.plots", fake)
    return calls


def _ctx(tmp_path, quick=False, seed=7):
    notes: list[str] = []
    ctx = _common.ReportContext(out_dir=str(tmp_path), quick=quick, seed=seed, note=notes.append)
    return ctx, notes


def _layout(text, name):
    """The section's blocks (cut at blank lines) by their first characters: headings, paragraphs, tables and
    images in order, each separated by one blank line, the section ending in one."""
    assert [b[:24] for b in text.split("\n\n")] == LAYOUTS[name]


LAYOUTS = {
    "memory": ["## Memory: the v2 cover ", "Measured from real track", "| backing | variant | id",
        "![memory vs device size]", ""],
    "bench": ["## Hot paths against thi", "Floors measured in the s", "### One thread", "A *pair* is start+end of",
        "| variant | batch pair n", "### 1, 2, 4 and 8 thread", "The native stress (pthre",
        "| variant | threads | Mo", "Scaling on distinct page", "### Same chunk, 2 thread",
        "Two threads doing start/", "| variant | pair ns (CPU", "![scaling](scaling.png)",
        "**Oversubscription.** `g", ""],
    "race": ["## The stale-read race a", "**Race stress**: 2 nativ", "| configuration | stale ",
        "**Explorer**: every inte", "| configuration | schedu", "Counterexample, none (un",
        "```\n 1. 1w1r step 0\n 2. ", "Counterexample, page, ch", "```\n 1. 1w1r step 0\n 2. ",
        "Counterexample, page, mi", "```\n 1. 1w2r step 0\n 2. ", "Counterexample, page, un",
        "```\n 1. 2w1r step 0\n 2. ", "![stale reads per config", ""],
    "fio": ["## fio: the v2 cover let", "Random 4 KiB reads (70 %", "**10 GiB** (320 chunks o",
        "| metric | Unpatched | G", "**320 GiB** (10,240 chun", "| metric | Unpatched | G",
        "![fio overhead and cache", "The heatmap samples `cou", "![counts() heatmap](coun", ""],
    "writeback": ["## memcg foreign-bdev wr", "The v6 experiment on sim", "| metric | baseline | pa",
        "Foreign flushes per run:", "**dev_t reuse churn** (d", "The timeline is run 0 of",
        "![writeback timeline](wr", "**Where the effect holds", "| perturbation | backgro", "SUMMARY-TEXT",
        "![writeback sensitivity]", ""],
    "answers": ["## Design answers", "One paragraph per open q", "**Which synchronisation ",
        "**Spinlocks under oversu", "**Same-chunk contention.", "**Question 1: is the unt", "**Question 2: u16 wrap, ",
        "**Where does the read-si", "**Does tracking pay for ", "**A question for the ser", "**memcg: dev_t records o",
        ""],
}


# ---- header, this_run, write_report ------------------------------------------------------------------------------

@pytest.fixture
def machine(monkeypatch):
    monkeypatch.setattr(rheader, "loadavg", lambda: "1.25, 1.50, 1.75")
    monkeypatch.setattr(rheader, "cpu_model", lambda: "Test CPU 9000")
    monkeypatch.setattr(rheader, "mem_total", lambda: "3.0 GiB")
    monkeypatch.setattr(rheader, "version_of", lambda m: f"{m}-v")
    monkeypatch.setattr(rheader.os, "cpu_count", lambda: 3)


@pytest.mark.parametrize("quick, mode", [(True, "mode: quick (short runs, noisier figures); seed 5"),
                                         (False, "mode: full; seed 5")])
def test_the_header_states_the_machine_mode_and_seed_and_records_the_run(tmp_path, machine, monkeypatch, quick,
                                                                         mode):
    import time
    utc = time.struct_time((2026, 12, 2, 0, 12, 30, 2, 336, 0))
    monkeypatch.setattr(rheader, "time", types.SimpleNamespace(strftime=time.strftime, gmtime=lambda: utc))
    ctx, _ = _ctx(tmp_path, quick=quick, seed=5)
    text = rheader.header(ctx)
    assert text.startswith("# pybcache report\n") and text.endswith("\n") and not text.endswith("\n\n")
    assert mode in text
    assert "machine: Test CPU 9000, 3 CPUs online, 3.0 GiB RAM" in text
    assert "matplotlib matplotlib-v, Cython Cython-v (build only)" in text
    assert "when the report started: 1.25, 1.50, 1.75" in text
    assert (f"- pybcache {pybcache.__version__}; Python {platform.python_version()}, numpy {np.__version__}, "
            "matplotlib") in text
    assert f" {platform.system()} {platform.release()} ({platform.machine()})\n" in text
    assert re.search(r"\n- generated \d{4}-\d\d-\d\d \d\d:\d\d:\d\d \S*; every figure below was measured in "
                     r"this run\n", text)
    assert ctx.results["machine"] == {"load_start": "1.25, 1.50, 1.75", "cpus": 3, "cpu": "Test CPU 9000"}
    run = ctx.results["run"]
    assert run["quick"] is quick and run["seed"] == 5
    assert run["generated_utc"] == "2026-12-02 00:12 UTC"                     # from the UTC clock


def test_this_run_lists_each_sections_time_the_total_the_load_and_the_plots(tmp_path, machine):
    ctx, _ = _ctx(tmp_path)
    ctx.plot("a.png", "the first")
    ctx.plot("b.png", "the second")
    text = rheader.this_run(ctx, {"memory": 1.26, "bench": 40.0}, 41.26)
    assert text == ("## This run\n\n- memory: 1.3 s\n- bench: 40.0 s\n- total: 41.3 s; load average at the end: "
                    "1.25, 1.50, 1.75\n- plots: `a.png` (the first), `b.png` (the second)\n- raw results: "
                    "`report.json`\n")


def test_a_plot_path_is_in_the_output_directory_and_recorded_with_its_title(tmp_path):
    ctx, _ = _ctx(tmp_path)
    assert ctx.plot("x.png", "title x") == str(tmp_path / "x.png")
    assert ctx.plots == [("x.png", "title x")]


def test_write_report_runs_the_sections_in_order_and_writes_the_markdown_and_the_json(tmp_path, machine,
                                                                                      monkeypatch):
    clock = iter([100.0, 101.0, 103.5, 104.0, 104.25, 110.0])
    monkeypatch.setattr(report, "time", types.SimpleNamespace(perf_counter=lambda: next(clock)))
    monkeypatch.setattr(report, "loadavg", lambda: "2.00, 2.00, 2.00")

    def first(ctx):
        ctx.note("inside first")
        ctx.results["first"] = {"n": np.int64(3), "big": np.zeros(5000)}
        ctx.plot("first.png", "the first plot")
        return "FIRST"

    def second(ctx):
        assert ctx.quick and ctx.seed == 9
        return "SECOND"
    monkeypatch.setattr(report, "SECTIONS", [("one", first), ("two", second)])
    seen, steps = [], []
    out = tmp_path / "out" / "deeper"
    path, summary = report.write_report(str(out), quick=True, seed=9, progress=seen.append, step=steps.append)
    assert seen == ["one", "two"] and steps == ["inside first"]
    assert path == str(out / "report.md")
    md = (out / "report.md").read_text("utf-8")
    assert md.startswith("# pybcache report\n") and "\nFIRST\nSECOND\n## This run\n" in md
    assert "- one: 2.5 s\n- two: 0.2 s\n- total: 10.0 s" in md and "`first.png` (the first plot)" in md
    doc = json.loads((out / "report.json").read_text("utf-8"))
    assert doc["first"] == {"n": 3, "big": None}
    assert doc["timings"] == {"one": 2.5, "two": 0.25}
    assert doc["machine"]["load_end"] == "2.00, 2.00, 2.00" and doc["run"]["seed"] == 9
    assert summary == {"timings": {"one": 2.5, "two": 0.25}, "total_s": 10.0, "plots": ["first.png"], "targets": {}}


def test_write_report_without_callbacks_runs_and_its_json_is_indented(tmp_path, machine, monkeypatch):
    monkeypatch.setattr(report, "SECTIONS", [("only", lambda ctx: ctx.note("a step") or "ONLY")])
    path, summary = report.write_report(str(tmp_path))
    assert open(path, encoding="utf-8").read().count("ONLY") == 1
    run = json.loads((tmp_path / "report.json").read_text("utf-8"))["run"]
    assert run["quick"] is False and run["seed"] == 0                             # full mode, seed 0 by default
    assert '\n "machine": {\n' in (tmp_path / "report.json").read_text("utf-8")
    assert list(summary["timings"]) == ["only"]


def test_loadavg_is_the_three_averages_to_two_decimals_or_unknown(monkeypatch):
    monkeypatch.setattr(_common.os, "getloadavg", lambda: (1.0, 2.5, 0.125))
    assert _common.loadavg() == "1.00, 2.50, 0.12"

    def refused():
        raise OSError("no load average here")
    monkeypatch.setattr(_common.os, "getloadavg", refused)
    assert _common.loadavg() == "unknown"


def test_the_cpu_model_is_read_from_cpuinfo_else_the_platforms_name_else_unknown(monkeypatch):
    import io
    cpuinfo = "processor\t: 0\nvendor_id\t: Test\nmodel name\t: Test CPU: 9000 @ 2GHz \nmodel name\t: second\n"
    opened = []

    def fake_open(path, encoding):
        opened.append((path, encoding))
        if cpuinfo is None:
            raise OSError(path)
        return io.StringIO(cpuinfo)
    monkeypatch.setattr(_common, "open", fake_open, raising=False)
    monkeypatch.setattr(_common.platform, "processor", lambda: "x86_64")
    assert _common.cpu_model() == "Test CPU: 9000 @ 2GHz"
    assert opened == [("/proc/cpuinfo", "utf-8")]
    cpuinfo = "processor\t: 0\n"
    assert _common.cpu_model() == "x86_64"
    cpuinfo = None
    assert _common.cpu_model() == "x86_64"
    monkeypatch.setattr(_common.platform, "processor", lambda: "")
    assert _common.cpu_model() == "unknown CPU"


def test_the_memory_total_is_pages_times_page_size_else_unknown(monkeypatch):
    values = {"SC_PAGE_SIZE": 4096, "SC_PHYS_PAGES": 786_432}
    monkeypatch.setattr(_common.os, "sysconf", lambda name: values[name])
    assert _common.mem_total() == "3 GiB"

    def refused(name):
        raise ValueError(name)
    monkeypatch.setattr(_common.os, "sysconf", refused)
    assert _common.mem_total() == "unknown"


def test_a_modules_version_or_not_installed():
    assert _common.version_of("numpy") == np.__version__
    assert _common.version_of("pybcache_no_such_module") == "not installed"
    assert _common.version_of("types") == "not installed"          # imports, but has no __version__


# ---- memory ---------------------------------------------------------------------------------------------------

def test_the_memory_section_compares_each_size_with_the_posted_and_plots_the_curve(tmp_path, monkeypatch, plots):
    asked = []

    def measure(size, variant):
        asked.append((size, variant))
        idle = {"global": 256, "page": 256, "atomic": 1024}[variant] * max(1, size // TiB)
        peak = {"global": 65792, "page": 65792, "atomic": 263168}[variant] * max(1, size // TiB)
        if (size, variant) == (10 * TiB, "page"):
            peak *= 2                                   # far from the v2 cover letter's 642.5 KB
        if (size, variant) == (100 * TiB, "global"):
            idle = 25 * 1024 + 200                      # 25 KB + 0.8 %: within 1 %
        return {"size_bytes": size, "variant": variant, "idle_bytes": idle, "peak_bytes": peak}
    monkeypatch.setattr(rmemory, "measure_memory", measure)
    ctx, _ = _ctx(tmp_path)
    text = rmemory.memory(ctx)
    _layout(text, "memory")
    assert asked[:9] == [(s * TiB, v) for s in (1, 10, 100) for v in ("global", "page", "atomic")]
    sizes = [GiB << k for k in range(0, 17, 2)] + [100 * TiB]
    assert asked[9:] == [(s, v) for s in sizes for v in ("global", "page", "atomic")]
    assert text.startswith("## Memory: the v2 cover letter's tables next to ours\n") and text.endswith(".png)\n\n")
    assert "| backing | variant | idle (posted) | idle (measured) | peak (posted) | peak (measured) | match |" in text
    assert "| 1 TiB | global | 256 bytes | 256 B | 64.25 KB | 64.25 KiB | yes |" in text
    assert "| 10 TiB | page | 2.5 KB | 2.5 KiB | 642.5 KB | 1.25 MiB | no |" in text
    assert "| 100 TiB | global | 25 KB | 25.2 KiB | 6.27 MB | 6.27 MiB | yes |" in text
    assert text.count("| yes |") == 8
    mem = ctx.results["memory"]
    assert mem["rows"] == [measure(s * TiB, v) for s in (1, 10, 100) for v in ("global", "page", "atomic")]
    assert len(mem["curve"]) == 30
    # the u32 page tracker of 1 TiB is real: 16 tracking pages of 2^15 u32 counters... its peak with one write
    # in flight per page is twice the u16 one (65,792 bytes)
    assert mem["page_u32_1tib_idle_bytes"] == 512 and mem["page_u32_1tib_peak_bytes"] == 131584
    (curve, path), kw = plots["plot_memory"][0]
    assert curve == mem["curve"] and path == str(tmp_path / "memory.png")
    assert kw["posted_points"][0] == {"size_bytes": TiB, "variant": "global", "idle_bytes": 256, "peak_bytes": 65792}
    assert kw["posted_points"][-1] == {"size_bytes": 100 * TiB, "variant": "atomic", "idle_bytes": 100 * 1024,
                                     "peak_bytes": round(25.10 * MiB)}
    assert len(kw["posted_points"]) == 9
    assert ctx.plots == [("memory.png", "tracker memory vs device size (log-log)")]


@pytest.mark.parametrize("seed, measured, close", [("1 KB", 1024, True), ("1 KB", 1035, True), ("1 KB", 1036, False),
                                                   ("1 KB", 1013, True), ("1 KB", 1012, False),
                                                   ("256 bytes", 259, True), ("256 bytes", 260, False),
                                                   ("98 bytes", 100, True)])              # 2 <= 0.01 * 100 + 1
def test_a_posted_size_matches_within_one_percent_and_one_byte(seed, measured, close):
    assert rmemory._close(seed, measured) is close


# ---- bench ----------------------------------------------------------------------------------------------------

def _scaling_row(threads, mops, cpu_ns, p99_ns, slowest=0.9, max_ns=2e6):
    return {"threads": threads, "ops_per_s": mops * 1e6, "speedup_vs_1": mops / 10.0, "cpu_ns_per_op": cpu_ns,
            "cpu_ns_vs_floor": cpu_ns / 5.0, "p50_ns": 80.0, "p99_ns": p99_ns, "p99_worst_ns": 2 * p99_ns,
            "p999_ns": 5000.0, "max_ns": max_ns, "slowest_thread_share": slowest}


def _bench_result():
    variants = ("global", "page", "atomic")
    return {
        "params": {"repeats": 3, "batch_rounds": 7},
        "floors": {"atomic_pair_ns": 4.04, "spinlock_pair_ns": 5.83, "cython_empty_pair_ns": 38.77,
                   "shared_atomic_pair_ns": 9.87},
        "load": {"before": [4.18, 3.49, 3.59], "after": [4.5, 3.6, 3.62]},
        "results": [{"variant": v, "batch_pair_ns": 14.83 + i, "batch_pair_vs_floor": 2.006 - i / 10,
                     "batch_pair_vs_floor_spread": {"min": 1.914, "max": 2.115},
                     "single_pair_ns": 79.64, "single_pair_vs_empty_call": 2.054, "speedup_vs_reference": 61.6,
                     "batch_check_ns": 8.71, "single_pair_cold_ns": 204.8, "scaling_2_over_1": 1.391 + i,
                     "scaling_2_over_1_adjacent_slots": 0.274, "machine_2_over_1": 1.384}
                    for i, v in enumerate(variants)],
        "scaling": {"params": {"cpus": 2, "sample_every": 64, "repeats": 3, "seconds": 0.5},
                    "variants": {
                        "global": [_scaling_row(1, 10, 100, 100), _scaling_row(2, 10, 200, 150),
                                   _scaling_row(8, 5, 400, 25_000, 0.1, 30e6)],
                        "page": [_scaling_row(1, 10, 100, 100), _scaling_row(2, 12.005001, 200, 150),
                                 _scaling_row(8, 11.005001, 210, 20_000, 0.8)],
                        "atomic": [_scaling_row(1, 20, 50, 90), _scaling_row(2, 30, 60, 100),
                                   _scaling_row(8, 29, 61, 110)]}},
        "same_chunk": [{"variant": v, "pair_cpu_ns": 342.7, "pair_ns": 343.21, "overlap": ov, "floor_ns": 10.2,
                        "vs_floor": vs, "driver_floor_ns": 12.34, "vs_driver_floor": vs / 1.2, "target": 1.5,
                        "met": met, "runs": runs, "seconds": secs}
                       for v, ov, vs, met, runs, secs in (("global", 0.996, 33.6, False, 5, 0.25),
                                                          ("page", 0.3, 1.2, None, 4, 0.5),
                                                          ("atomic", 0.9, 1.44, True, 3, 1.0))],
    }


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


# ---- race and explore ------------------------------------------------------------------------------------------

def _race_stub(calls):
    def run_race(seconds, seed, **kw):
        calls.append((seconds, seed, kw))
        n = len(calls)
        stale = 0 if kw.get("sync") not in ("none",) else 1_234_567
        out = {k: n for k in rrace._RACE_KEYS}
        out.update(stale_reads=stale, stale_reads_per_s=stale / 0.4, reads=2_000_000 + n, writes=30_720,
                   read_bypasses=4_321, underflows=1_000 if kw.get("alloc_failure") == "untracked" else 0,
                   faults_injected=5_000 if "fault_probability" in kw else 0, stale_cached_blocks=2)
        out["config"] = {"sync": kw["sync"], "seed": seed}
        return out
    return run_race


def _explore_stub(calls):
    def explore(writes, reads, **kw):
        calls.append((writes, reads, kw))
        bound = f"{writes}w{reads}r"
        bad = kw.get("sync") == "none" or kw.get("check") == "entry" or (
            kw.get("alloc_failure") == "untracked" and bound == "2w1r") or (kw.get("restart") is False
                                                                            and bound == "1w2r")
        counterexample = [f"{bound} step {i}" for i in range(3 + writes)] if bad else None
        return {"schedules": 1000 * writes + reads, "violations": 7 if bad else 0,
                "underflow_schedules": 1 if kw.get("alloc_failure") == "untracked" else 0,
                "restart_schedules": 2, "restart_capped_schedules": 0 if reads == 1 else 3,
                "finished": kw.get("restart") is not False or bound != "1w2r", "counterexample": counterexample}
    return explore


def test_an_explorer_row_sums_its_bounds_and_keeps_the_first_counterexample(monkeypatch):
    calls = []
    monkeypatch.setattr(cachedev_mod, "explore", _explore_stub(calls))
    row = rrace._explore_row("untracked", {"sync": "page", "alloc_failure": "untracked"})
    assert calls == [(1, 1, {"sync": "page", "alloc_failure": "untracked"}),
                     (2, 1, {"sync": "page", "alloc_failure": "untracked"}),
                     (1, 2, {"sync": "page", "alloc_failure": "untracked"})]
    assert row["label"] == "untracked" and row["config"] == {"sync": "page", "alloc_failure": "untracked"}
    assert row["schedules"] == 1001 + 2001 + 1002 and row["violations"] == 7
    assert row["underflow_schedules"] == 3 and row["restart_schedules"] == 6 and row["restart_capped_schedules"] == 3
    assert row["finished"] is True
    assert row["per_bound"] == {"1w1r": {"schedules": 1001, "violations": 0, "counterexample": None},
                                "2w1r": {"schedules": 2001, "violations": 7,
                                         "counterexample": [f"2w1r step {i}" for i in range(5)]},
                                "1w2r": {"schedules": 1002, "violations": 0, "counterexample": None}}
    assert row["counterexample_bound"] == "2w1r" and row["counterexample"] == [f"2w1r step {i}" for i in range(5)]


def test_an_explorer_row_without_a_counterexample_has_none_and_one_unfinished_bound_makes_it_incomplete(monkeypatch):
    monkeypatch.setattr(cachedev_mod, "explore", _explore_stub([]))
    row = rrace._explore_row("miss", {"sync": "page", "check": "miss"})
    assert row["counterexample_bound"] is None and row["counterexample"] is None and row["finished"] is True
    assert rrace._explore_row("no restart", {"sync": "page", "restart": False})["finished"] is False


@pytest.mark.parametrize("quick, seconds", [(True, 0.4), (False, 1.0)])
def test_the_race_section_runs_every_configuration_tables_it_and_shows_the_counterexamples(
        tmp_path, monkeypatch, plots, quick, seconds):
    race_calls, explore_calls = [], []
    monkeypatch.setattr(cachedev_mod, "race", _race_stub(race_calls))
    monkeypatch.setattr(cachedev_mod, "explore", _explore_stub(explore_calls))
    monkeypatch.setattr(cachedev_mod, "EXPLORER_SEMANTICS", "SEMANTICS-TEXT")
    ctx, notes = _ctx(tmp_path, quick=quick, seed=11)
    text = rrace.race(ctx)
    _layout(text, "race")
    assert [c[2] for c in race_calls] == [kw for _, kw in rrace.RACE_CONFIGS]
    assert all(c[:2] == (seconds, 11) for c in race_calls)
    assert len(explore_calls) == 3 * len(rrace.EXPLORE_CONFIGS)
    assert notes == [f"race: {lb}" for lb, _ in rrace.RACE_CONFIGS] + [f"explore: {lb}" for lb, _ in
                                                                          rrace.EXPLORE_CONFIGS]
    rows = ctx.results["race"]
    assert [r["label"] for r in rows] == [lb for lb, _ in rrace.RACE_CONFIGS]
    assert rows[0]["stale_reads"] == 1_234_567 and rows[0]["config"] == {"sync": "none", "seed": 11}
    assert set(rows[0]) == set(rrace._RACE_KEYS) | {"label", "config"}
    assert [r["label"] for r in ctx.results["explore"]] == [lb for lb, _ in rrace.EXPLORE_CONFIGS]
    assert f"{seconds:g} s per configuration, seed 11" in text and "It checks SEMANTICS-TEXT." in text
    assert ("| configuration | stale reads | per second | stale cached at end | reads | writes | read bypasses | "
            "underflows | faults injected |\n|---|") in text
    assert ("| configuration | schedules | violations | with an underflow | with a restart | cut at the restart "
            "bound | complete | first counterexample |\n|---|") in text
    per_s = f"{1_234_567 / 0.4:,.0f}"
    assert f"| none (unpatched) | 1,234,567 | {per_s} | 2 | 2,000,001 | 30,720 | 4,321 | 0 | 0 |" in text
    assert "| page, untracked, 30% alloc faults | 0 | 0 | 2 | 2,000,007 | 30,720 | 4,321 | 1,000 | 5,000 |" in text
    assert "| none (unpatched) | 4,004 | 21 | 0 | 6 | 3 | yes | 1w1r, 4 steps |" in text
    assert "| page, miss path without the -EINTR restart | 4,004 | 7 | 0 | 6 | 3 | no | 1w2r, 4 steps |" in text
    assert "| page, check in the miss path | 4,004 | 0 | 0 | 6 | 3 | yes | — |" in text
    assert "| page, untracked, 1st alloc fails | 4,004 | 7 | 3 | 6 | 3 | yes | 2w1r, 5 steps |" in text
    # counterexamples: the unpatched one, the placements with a check (entry), and the stolen increment
    assert "Counterexample, none (unpatched) (1w1r):\n\n```\n 1. 1w1r step 0\n 2. 1w1r step 1\n" in text
    assert "Counterexample, page, check at request entry (1w1r):" in text
    assert ("Counterexample, page, untracked, 1st alloc fails (the stolen increment) (2w1r):\n\n```\n"
            " 1. 2w1r step 0\n") in text
    assert "Counterexample, page, miss path without the -EINTR restart (1w2r):" in text
    assert text.count("Counterexample, ") == 4
    assert text.rstrip().endswith("![stale reads per configuration](stale_reads.png)") and text.endswith("\n\n")
    (race_rows, explore_rows, path), _ = plots["plot_stale_reads"][0]
    assert race_rows == rows and explore_rows == ctx.results["explore"] and path == str(tmp_path / "stale_reads.png")
    assert ctx.plots == [("stale_reads.png", "stale reads per configuration")]


def test_the_race_section_shows_no_stolen_increment_when_the_untracked_fallback_found_none(tmp_path, monkeypatch,
                                                                                          plots):
    stub = _explore_stub([])

    def explore(writes, reads, **kw):
        out = stub(writes, reads, **kw)
        if kw.get("alloc_failure") == "untracked":
            out.update(violations=0, counterexample=None)
        return out
    monkeypatch.setattr(cachedev_mod, "race", _race_stub([]))
    monkeypatch.setattr(cachedev_mod, "explore", explore)
    text = rrace.race(_ctx(tmp_path)[0])
    assert "stolen increment" not in text and text.count("Counterexample, ") == 3


# ---- fio ------------------------------------------------------------------------------------------------------

def _fio_run(scale, chunks=320):
    rows = [{"variant": v, "ops_per_s": 1_500_000.0 * (1 + i), "ns_per_io": 1000.0 * r * scale,
             "ns_per_io_vs_none": None if v == "none" else r * scale, "bypass_fraction": 0.381 * (v != "none"),
             "insert_fraction": 0.6 + i / 100, "stale_reads": 48 if v == "none" else 0,
             "tracking_pages": 0 if v == "none" else 1}
            for i, (v, r) in enumerate((("none", 1.0), ("global", 1.01), ("page", 1.06), ("atomic", 0.97)))]
    return {"rows": rows, "config": {"chunks": chunks, "jobs": 2, "rounds": 12}}


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


# ---- writeback ------------------------------------------------------------------------------------------------

def _inode(label, written, dirty, ff=0):
    return types.SimpleNamespace(label=label, written=written, dirty=dirty,
                                 written_by_reason={"foreign_flush": ff} if ff else {})


def _sim(t, served, inodes, nr_dirty, direct=True):
    return types.SimpleNamespace(clock=types.SimpleNamespace(elapsed_seconds=t),
                                 direct=types.SimpleNamespace(served=served) if direct else None,
                                 model=types.SimpleNamespace(inodes=inodes, nr_dirty=nr_dirty))


def test_the_timeline_bins_device_bandwidth_by_source_and_dirty_pages_by_inode():
    tl = rwb._Timeline(0.5)
    tl(_sim(0.2, 0, [], 0))                                   # before the first bin's end: not recorded
    assert tl.t == []
    inodes = [_inode("background file", 256, 10, ff=64), _inode("background file", 0, 6),
              _inode("bdev mapping", 512, 4), _inode("cgroup files", 100, 1), _inode("cgroup files", 28, 1)]
    tl(_sim(0.5 - 1e-9, 2 * MiB, inodes, 40))                 # at the bin's end, within rounding
    assert tl.t == [0.5 - 1e-9]
    assert tl.bw["foreground direct I/O"] == [pytest.approx(4.0)]             # 2 MiB in 0.5 s
    assert tl.bw["background file: owner-wb foreign flush"] == [pytest.approx(64 * 4096 / MiB / 0.5)]
    assert tl.bw["background file: other writeback"] == [pytest.approx(192 * 4096 / MiB / 0.5)]
    assert tl.bw["bdev mapping (metadata)"] == [pytest.approx(512 * 4096 / MiB / 0.5)]
    assert tl.bw["cgroup files"] == [pytest.approx(128 * 4096 / MiB / 0.5)]
    assert tl.dirty["all dirty pages"] == [40 * 4096 / MiB] and tl.dirty["background file"] == [16 * 4096 / MiB]
    assert tl.dirty["bdev mapping"] == [4 * 4096 / MiB]
    tl(_sim(0.7, 3 * MiB, inodes, 40))                        # inside the second bin: not recorded
    inodes.append(_inode("new files", 256, 1))
    tl(_sim(1.5, 3 * MiB, inodes, 8, direct=False))           # a source and an inode appear later
    assert tl.t == [0.5 - 1e-9, 1.5] and tl.prev["foreground direct I/O"] == 0.0
    assert tl.bw["foreground direct I/O"] == [pytest.approx(4.0), pytest.approx(-2.0)]  # no direct writer: 0
    assert tl.bw["new files"] == [0.0, pytest.approx(256 * 4096 / MiB / (1.5 - 0.5 + 1e-9))]
    assert tl.bw["bdev mapping (metadata)"][1] == 0.0
    assert tl.dirty["new files"] == [0.0, 4096 / MiB] and tl.dirty["all dirty pages"][1] == 8 * 4096 / MiB
    assert tl.next_t == 1.5
    assert tl.as_dict() == {"t": tl.t, "dirty_mib": tl.dirty, "bandwidth_mib_s": tl.bw}


class _Result:
    def __init__(self, doc, **attrs):
        self.doc = doc
        self.__dict__.update(attrs)

    def as_dict(self):
        return json.loads(json.dumps(self.doc))


def _metrics(bg, bw, comp, lat):
    return {"background_write_gib": bg, "foreground_bandwidth_mib_s": bw, "foreground_completion_s": comp,
            "foreground_mean_latency_ms": lat}


def _churn(**kw):
    base = {"stale_flushes": 8, "flushes": 340, "stale_pages": 36, "release_delayed": 0, "release_delay_mean_s": 0.0,
            "release_delay_max_s": 0.0, "still_pinned_at_end": 0, "pinned_device_seconds": 0.0}
    base.update(kw)
    return _Result(base)


@pytest.fixture
def wb_stand_ins(monkeypatch):
    calls: dict[str, list] = {"experiment": [], "churn": [], "sensitivity": [], "summary": []}
    base, pat = _metrics(4.357, 155.179, 105.581, 205.791), _metrics(1.179, 184.297, 88.9, 173.346)
    change = _metrics(-72.93, 18.76, -15.8, -15.77)
    sims = {"owner-wb": [_sim(1.0, 100 * MiB, [_inode("cgroup files", 10, 1)], 1)],
            "bdev-devt": [_sim(1.0, 200 * MiB, [_inode("cgroup files", 20, 2)], 2)]}

    def run_experiment(runs, seed, scenario, observer):
        calls["experiment"].append((runs, seed, scenario))
        for mech, ss in sims.items():
            for index in (0, 1):                               # run 1 serves twice as much: not drawn
                for s in ss:
                    observer(mech, index, _sim(1.0, (index + 1) * s.direct.served, s.model.inodes, 1))
        flushes = {"baseline": {"foreign_flushes_per_run": 16.667, "mib_per_flush": 277.71},
                   "patched": {"foreign_flushes_per_run": 17.333, "mib_per_flush": 17.87}}
        return _Result({"runs": runs, "baseline": base, "per_run": [1, 2], "flushes": flushes}, baseline=base,
                       patched=pat, change_percent=change, baseline_mechanism="owner-wb",
                       patched_mechanism="bdev-devt")

    def compare_churn(seed):
        calls["churn"].append(seed)
        return {"bdev-devt": _churn(), "bdev-ref": _churn(stale_flushes=0, release_delayed=86,
                                                          release_delay_mean_s=0.7554, release_delay_max_s=1.496,
                                                          still_pinned_at_end=5, pinned_device_seconds=444.36)}

    def run_sensitivity(runs, seed, scenario, perturbations):
        calls["sensitivity"].append((runs, seed, scenario, perturbations))
        rows = [{"name": "defaults", "baseline": base, "patched": pat, "change_percent": change, "verdict": "holds"},
                {"name": "fast device", "baseline": _metrics(2.0, 300.0, 50.0, 90.0),
                 "patched": _metrics(1.9, 301.0, 49.5, 89.0), "change_percent": _metrics(-5.0, 0.33, -1.0, -1.11),
                 "verdict": "vanishes"}]
        return _Result({"rows": rows, "runs": runs})

    def summary_text(result):
        calls["summary"].append(result)
        return "SUMMARY-TEXT"
    for name, fn in (("run_experiment", run_experiment), ("compare_churn", compare_churn),
                     ("run_sensitivity", run_sensitivity), ("summary_text", summary_text)):
        monkeypatch.setattr(writeback_pkg, name, fn)
    return calls


def test_the_writeback_section_tables_the_run_beside_the_posted_with_churn_and_sensitivity(tmp_path, wb_stand_ins,
                                                                                         plots):
    ctx, notes = _ctx(tmp_path, quick=False, seed=4)
    text = rwb.writeback(ctx)
    _layout(text, "writeback")
    (runs, seed, scenario), = wb_stand_ins["experiment"]
    assert (runs, seed, scenario.foreground_total) == (3, 4, 16 * GiB)
    assert wb_stand_ins["churn"] == [4]
    (s_runs, s_seed, s_scenario, perturbations), = wb_stand_ins["sensitivity"]
    assert (s_runs, s_seed, perturbations) == (1, 4, writeback_pkg.SENSITIVITY) and s_scenario is scenario
    assert notes == ["writeback", "writeback: churn", "writeback: sensitivity"]
    assert "per_run" not in ctx.results["writeback"] and ctx.results["writeback"]["runs"] == 3
    assert ctx.results["churn"]["bdev-ref"]["release_delayed"] == 86
    flat = text.replace("\n", " ")
    assert "a 16 GiB foreground direct writer" in flat
    assert "mean of 3 run(s) per kernel, seed 4;" in flat and "Quick mode" not in text
    assert ("the series' bdev-mapping flushes.\n\n| metric | baseline | patched | change | posted baseline | "
            "posted patched | posted change |\n|---|") in text
    assert ("| perturbation | background GiB base / patched | change | foreground MiB/s base / patched | change | "
            "completion | latency | effect |\n|---|") in text
    assert ("| Background file write I/O (GiB) | 4.357 | 1.179 | -72.9% | 6.154 | 1.680 | -72.7% |") in text
    assert "| Foreground bandwidth (MiB/s) | 155.18 | 184.30 | +18.8% | 150.29 | 184.81 | +23.0% |" in text
    assert "| Foreground completion time (s) | 105.581 | 88.900 | -15.8% | 109.203 | 88.652 | -18.8% |" in text
    assert "| Foreground mean latency (ms) | 205.79 | 173.35 | -15.8% | 212.84 | 172.74 | -18.8% |" in text
    assert "baseline 16.7 writing 277.7 MiB each, patched 17.3 writing 17.9 MiB each" in flat
    assert "made 8 stale flushes of 340 (36 pages written" in flat
    assert "delayed 86 device releases (mean 0.76 s, max 1.50 s) and left 5 removed devices pinned at the end " \
           "(444 pinned device-seconds)" in flat
    assert "in 1 s bins" in flat
    assert "| defaults | 4.36 / 1.18 | -72.9% | 155.2 / 184.3 | +18.8% | -15.8% | -15.8% | holds |" in text
    assert "| fast device | 2.00 / 1.90 | -5.0% | 300.0 / 301.0 | +0.3% | -1.0% | -1.1% | vanishes |" in text
    assert "1 run per kernel and row, seed 4." in flat and "at least 50 %" in flat and "between 10 and 50 %" in flat
    assert "SUMMARY-TEXT" in text and text.endswith("(writeback_sensitivity.png)\n\n")
    (summarised,) = wb_stand_ins["summary"]
    assert summarised.doc["rows"][1]["name"] == "fast device"          # the summary is of the sensitivity run
    assert ctx.results["writeback_sensitivity"]["rows"][1]["verdict"] == "vanishes"
    (timelines, path), _ = plots["plot_writeback_timeline"][0]
    assert set(timelines) == {"baseline (owner-wb)", "patched (bdev-devt)"}
    assert timelines["patched (bdev-devt)"]["bandwidth_mib_s"]["foreground direct I/O"] == [200.0]  # run 0 only
    assert timelines["baseline (owner-wb)"]["t"] == [1.0]
    assert ctx.results["writeback_timeline"] == timelines and path == str(tmp_path / "writeback_timeline.png")
    (rows, path), kw = plots["plot_writeback_sensitivity"][0]
    assert rows == ctx.results["writeback_sensitivity"]["rows"] and path == str(tmp_path / "writeback_sensitivity.png")
    assert kw == {"holds_percent": 50.0, "vanishes_percent": 10.0}
    assert ctx.plots == [
        ("writeback_timeline.png",
         "writeback timeline: dirty pages and device bandwidth by source, baseline vs patched"),
        ("writeback_sensitivity.png", "writeback sensitivity: the patched kernel's change per perturbation")]


def test_the_writeback_section_in_quick_mode_says_so_and_runs_the_short_cases(tmp_path, wb_stand_ins, plots):
    text = rwb.writeback(_ctx(tmp_path, quick=True, seed=0)[0])
    (runs, _, scenario), = wb_stand_ins["experiment"]
    assert runs == 1 and scenario.foreground_total == 2 * GiB
    assert wb_stand_ins["sensitivity"][0][3] == writeback_pkg.QUICK_SENSITIVITY
    flat = text.replace("\n", " ")
    assert "a 2 GiB foreground direct writer" in flat and "Quick mode: a 2 GiB foreground job" in flat
    assert "in 0.25 s bins" in flat and "(quick mode: three rows on the 2 GiB foreground job)" in flat


# ---- check-patch ---------------------------------------------------------------------------------------------

def _check(name, passed, figure, counterexample=None):
    return types.SimpleNamespace(name=name, passed=passed, figure=figure, counterexample=counterexample)


def test_the_check_patch_section_tables_each_example_and_numbers_a_failed_checks_counterexample(
        tmp_path, monkeypatch):
    calls = []

    def battery(path, seconds):
        calls.append((path, seconds))
        checks = [_check("race", False, "3 stale | 2 runs", ["W1 start", "R1 read"]),
                  _check("explore", True, "0 violations", ["never shown"]),
                  _check("memory", False, "over", [])]
        return types.SimpleNamespace(name=f"{path}-name", checks=checks, wall_s=9.27,
                                     to_json=lambda: {"path": path})
    monkeypatch.setattr(checkpatch_mod, "check_patch", battery)
    monkeypatch.setattr(_csrc, "example_patches", lambda: {"v2_posted": "P2", "v3_atomic": "P3A"})
    ctx, notes = _ctx(tmp_path, quick=True)
    text = rcheck.check_patch(ctx)
    assert calls == [("P2", 0.5), ("P3A", 0.5)] and notes == ["check-patch: v2_posted", "check-patch: v3_atomic"]
    blocks = text.split("\n\n")
    table_ = ("| check | passed | figure |\n|---|---|---|\n| race | **FAILED** | 3 stale / 2 runs |\n"
              "| explore | yes | 0 violations |\n| memory | **FAILED** | over |")
    assert blocks[0] == "## check-patch: the shipped example patches"
    assert blocks[1].endswith("each check in a child process; stress time 0.5 s (quick).")
    assert blocks[2:6] == ["**v2_posted.c** (`P2-name`): 1 of 3 checks passed, battery wall time 9.3 s", table_,
                           "race counterexample:", "1. W1 start\n2. R1 read"]
    assert blocks[6].startswith("`v3_proposal.c`: not found (neither in the package")
    assert blocks[7:] == ["**v3_atomic.c** (`P3A-name`): 1 of 3 checks passed, battery wall time 9.3 s", table_,
                          "race counterexample:", "1. W1 start\n2. R1 read", ""]
    assert ctx.results["check_patch"] == {"v2_posted": {"path": "P2"}, "v3_atomic": {"path": "P3A"}}
    assert "stress time 0.5 s (quick)." in text
    assert "`v3_proposal.c`: not found" in text
    assert "**v2_posted.c** (`P2-name`): 1 of 3 checks passed, battery wall time 9.3 s" in text
    assert ("| race | **FAILED** | 3 stale / 2 runs |\n| explore | yes | 0 violations |\n"
            "| memory | **FAILED** | over |") in text
    assert "race counterexample:\n\n1. W1 start\n2. R1 read" in text
    assert text.count("counterexample:") == 2 and "never shown" not in text
    assert text.endswith("\n\n")


def test_the_check_patch_section_in_full_mode_stresses_two_seconds(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(checkpatch_mod, "check_patch", lambda path, seconds: calls.append(seconds) or
                        types.SimpleNamespace(name="n", checks=[], wall_s=1.0, to_json=dict))
    monkeypatch.setattr(_csrc, "example_patches", lambda: {n: n for n in rcheck.PATCH_EXAMPLES})
    text = rcheck.check_patch(_ctx(tmp_path, quick=False)[0])
    assert calls == [2.0, 2.0, 2.0] and "stress time the default 2 s." in text and "not found" not in text


# ---- design answers ----------------------------------------------------------------------------------------------

def _answer_results():
    bench = _bench_result()
    bench["scaling"]["variants"]["global+yield"] = [_scaling_row(2, 10, 200, 150), _scaling_row(8, 7.5, 300, 900,
                                                                                                0.5)]
    bench["scaling"]["variants"]["page+yield"] = [_scaling_row(2, 12, 200, 150), _scaling_row(8, 13.2, 190, 800,
                                                                                              0.95)]
    race = [{"label": lb, "stale_reads": 0, "underflows": 0, "tracker_checks": 10, "reads": 20}
            for lb, _ in rrace.RACE_CONFIGS]
    race[0]["stale_reads"] = 100
    race[6].update(stale_reads=12, underflows=3)
    explore = [{"label": lb, "violations": 0, "schedules": 100 + i} for i, (lb, _) in enumerate(rrace.EXPLORE_CONFIGS)]
    explore[0]["violations"] = 9
    explore[1]["violations"] = 4
    mem_rows = [{"size_bytes": TiB, "variant": v, "idle_bytes": b, "peak_bytes": 257 * b}
                for v, b in (("global", 256), ("page", 256), ("atomic", 1024))]
    mem_rows.append({"size_bytes": 10 * TiB, "variant": "page", "idle_bytes": 1, "peak_bytes": 1})
    return {
        "bench": bench, "race": race, "explore": explore,
        "fio": {"10 GiB": _fio_run(1.0), "320 GiB": _fio_run(1.1, chunks=10240)},
        "fio_granularity": {"rows": [{"variant": "none", "bypass_fraction": 0.0, "insert_fraction": 0.99},
                                     {"variant": "page", "bypass_fraction": 0.9876, "insert_fraction": 0.0054}]},
        "counts_heatmap": {"max_count": 6},
        "memory": {"rows": mem_rows, "page_u32_1tib_peak_bytes": 131584},
        "writeback": {"change_percent": _metrics(-72.93, 18.76, -15.8, -15.77)},
        "churn": {"bdev-devt": _churn().doc, "bdev-ref": _churn(stale_flushes=0, release_delayed=86,
                                                                 still_pinned_at_end=5,
                                                                 pinned_device_seconds=444.36).doc},
    }


_OVERFLOW = {"wrap": {"count": 0, "is_active": False, "wraps": 1},
             "clamp": {"count_after_all_but_one_end": 0, "is_active": False, "clamps": 1},
             "wait": {"blocked_at_max": True, "released_by_end": True, "count": 65535, "waits": 1}}


def _answers(tmp_path, monkeypatch, results, overflow=_OVERFLOW):
    monkeypatch.setattr(ans, "overflow_demo", lambda: json.loads(json.dumps(overflow)))
    ctx, notes = _ctx(tmp_path)
    ctx.results.update(results)
    text = ans.answers(ctx)
    assert notes == ["design answers: overflow"] and ctx.results["overflow_demo"] == overflow
    return text, text.replace("\n", " ")


def _paragraph(text, title):
    start = text.index(f"**{title}**")
    end = text.find("\n\n", start)
    return text[start:end].replace("\n", " ")


def test_the_design_answers_cite_this_runs_figures_in_every_paragraph(tmp_path, monkeypatch):
    text, flat = _answers(tmp_path, monkeypatch, _answer_results())
    assert text.startswith("## Design answers\n") and text.endswith("\n\n") and "Not answered" not in text
    _layout(text, "answers")
    v = _paragraph(text, "Which synchronisation variant?")
    assert ("costs global 14.8 ns (2.01x its floor), page 15.8 ns (1.91x its floor), atomic 16.8 ns (1.81x its "
            "floor);") in v
    assert "tracking costs global 1.01x, page 1.06x, atomic 0.97x of the unpatched" in v
    assert "reach global 1.00x, page 1.20x, atomic 3.00x of one thread's throughput, and 8 threads on 2 cores " \
           "global 0.50x, page 1.10x, atomic 2.90x." in v
    assert "distinct pages: global 1.39x, page 2.39x, atomic 3.39x)" in v
    assert "(1 TiB idle: 1 KiB against 256 B; peak 257 KiB against 64.25 KiB)" in v
    s = _paragraph(text, "Spinlocks under oversubscription (spin-then-yield?).")
    assert "With 8 threads on 2 cores the p99 per-op latency is 25 µs (global), 20 µs (page) and 110 ns " \
           "(atomic) against the 20 µs target." in s
    assert "The page lock did not collapse in this run: it keeps 0.92x of its 2-thread throughput, its CPU per op " \
           "changes 1.1x, the slowest thread gets 0.80 of a fair share and the longest sampled op took 2.0 ms " \
           "(atomic: 0.90 and 2.0 ms)." in s
    # 7.5 / 5 = 1.50 and 13.2 / 11 = 1.20: both at least 1.1
    assert "At 8 threads its throughput over the pthread spinlock's is `global` 1.50x (slowest thread 0.50 against " \
           "0.10), `page` 1.20x (slowest thread 0.95 against 0.80): spin-then-yield is the better lock" in s
    c = _paragraph(text, "Same-chunk contention.")
    assert "pay global 33.60x (overlap 1.00), page 1.20x (overlap 0.30), atomic 1.44x (overlap 0.90) the 2-thread " \
           "bounce floor (10.2 ns per pair)" in c
    assert "against the ≤ 1.5x target: global missed, page inconclusive, atomic met." in c
    assert "(page: the two threads rarely ran at the same time" in c
    res = _answer_results()
    res["bench"]["same_chunk"][2]["met"] = None
    text, _ = _answers(tmp_path, monkeypatch, res)
    assert "(page, atomic: the two threads rarely ran" in _paragraph(text, "Same-chunk contention.")
    q1 = _paragraph(text, "Question 1: is the untracked fallback enough when the page allocation fails?")
    assert q1.startswith("**Question 1: is the untracked fallback enough when the page allocation fails?** No. ")
    assert "`untracked` served 12 stale reads (3 underflows" in q1 and "`hijack` 0 and `pool` 0" in q1
    assert "finds 0 violating interleavings of 107" in q1
    assert q1.endswith("closed it in every run here.")
    q2 = _paragraph(text, "Question 2: u16 wrap, clamp, or u32?")
    assert "`wrap` reads a count of 0 (is_active False" in q2 and "blocked the 65,536th start (yes) until an end " \
           "made room (released)" in q2
    assert "(1 TiB page variant peak 64.25 KiB with u16, 128.5 KiB with u32; idle 256 B either way)" in q2
    assert "highest counter was 6 of 65,535" in q2 and q2.endswith("not clamp, which silently reopens the race.")
    p = _paragraph(text, "Where does the read-side check go?")
    assert "finds 4 violations in 101 schedules with the check at request entry" in p
    assert "0 in 102 in the miss path, 0 in 105 after the check key, and 9 without tracking" in p
    assert "finds 0 violations in 103 schedules." in p and "served 0 / 0 / 0 stale reads" in p
    f = _paragraph(text, "Does tracking pay for itself (the v2 cover letter's fio claims)?")
    assert "At 10 GiB 38.1 % of reads bypass the cache under `page` and the tracking costs 1.06x the unpatched CPU " \
           "per I/O (posted: 72.88 / 63.02 = 1.16x kernel CPU); at 320 GiB only 38.1 % bypass and it costs 1.17x " \
           "(posted: 0.86x," in f
    assert "the model inserts 62.0 % of reads there." in f
    g = _paragraph(text, "A question for the series: what does the read-side check cover?")
    assert "over 10,240 chunks make only 38.1 % of reads bypass (the model inserts 62.0 % of reads)" in g
    assert "bypasses 98.76 % of reads and inserts 0.54 %" in g
    m = _paragraph(text, "memcg: dev_t records or device references?")
    assert "(background file write I/O -72.9 %, foreground bandwidth +18.8 %, completion -15.8 %; posted -72.7 %, " \
           "+23.0 %, -18.8 %)" in m
    assert "dev_t records made 8 stale flushes (36 pages)" in m and "references delayed 86 releases and left 5 " \
           "removed devices pinned (444 device-seconds) behind an idle memcg: a few small stale flushes" in m


def test_the_design_answers_verdicts_follow_the_figures(tmp_path, monkeypatch):
    res = _answer_results()
    sc = res["bench"]["scaling"]["variants"]
    sc["page"][2]["ops_per_s"] = 8.9e6            # below 0.75 x 12 Mops/s: collapsed
    sc["page+yield"][1]["ops_per_s"] = 0.8 * 8.9e6  # yield hurts page; global's 1.50x helps: mixed
    res["race"][6].update(stale_reads=0)            # untracked: no stale read, no violation
    res["race"][7]["stale_reads"] = 1               # hijack served one: investigate
    res["churn"]["bdev-ref"]["still_pinned_at_end"] = 0
    for r in res["bench"]["same_chunk"]:
        r["met"] = bool(r["met"])
    overflow = json.loads(json.dumps(_OVERFLOW))
    overflow["wait"]["released_by_end"] = False
    text, _ = _answers(tmp_path, monkeypatch, res, overflow)
    s = _paragraph(text, "Spinlocks under oversubscription (spin-then-yield?).")
    assert "But the locks collapse in a way a per-op percentile hides: page's throughput falls to 0.74x of 2 " \
           "threads, its CPU per op grows 1.1x" in s
    assert "spin-then-yield helps one lock and not the other" in s
    assert _paragraph(text, "Same-chunk contention.").endswith("the atomic pair bounces only the counter.")
    q1 = _paragraph(text, "Question 1: is the untracked fallback enough when the page allocation fails?")
    assert "This run found no stale read with it, but that proves little:" in q1
    assert q1.endswith("**Hijack or pool also served stale data in this run: investigate.**")
    q2 = _paragraph(text, "Question 2: u16 wrap, clamp, or u32?")
    assert "until an end made room (NOT released)" in q2 and "did not block and release as it should" in q2
    m = _paragraph(text, "memcg: dev_t records or device references?")
    assert m.endswith("behind an idle memcg.")


@pytest.mark.parametrize("yield_mops, verdict", [
    ({"global": 9.0, "page": 8.5}, "spin-then-yield does not help here"),
    ({"global": 11.0, "page": 11.0}, "spin-then-yield is the better lock"),     # exactly 1.1: better
    ({"global": 9.1, "page": 9.0}, "helps one lock and not the other"),         # 0.91 is not at most 0.9
    ({"global": 10.9, "page": 15.0}, "helps one lock and not the other"),       # 1.09 is not at least 1.1
])
def test_spin_then_yield_is_called_better_or_worse_only_when_both_locks_agree(tmp_path, monkeypatch, yield_mops,
                                                                              verdict):
    res = _answer_results()
    sc = res["bench"]["scaling"]["variants"]
    for v, mops in yield_mops.items():
        sc[v][2]["ops_per_s"] = 10e6                 # ratios of whole numbers: 11 / 10 is the float 1.1 exactly
        sc[f"{v}+yield"][1]["ops_per_s"] = mops * 1e6
    text, _ = _answers(tmp_path, monkeypatch, res)
    assert verdict in _paragraph(text, "Spinlocks under oversubscription (spin-then-yield?).")


@pytest.mark.parametrize("where, key, value, unsafe, safe", [
    ("race", "page, untracked, 30% alloc faults", 1, True, True),      # one stale read is evidence
    ("explore", "page, untracked, 1st alloc fails", 1, True, True),    # so is one violating schedule
    ("race", "page, pool, 30% alloc faults", 1, False, False),
    ("explore", "page, hijack, 1st alloc fails", 1, False, False),
    ("explore", "page, pool, 1st alloc fails", 1, False, False),
    ("race", "page, hijack, 30% alloc faults", 1, False, False),
])
def test_question_1s_verdicts_follow_each_race_and_explorer_figure(tmp_path, monkeypatch, where, key, value, unsafe,
                                                                  safe):
    res = _answer_results()
    res["race"][6].update(stale_reads=0, underflows=0)
    field = "stale_reads" if where == "race" else "violations"
    next(r for r in res[where] if r["label"] == key)[field] = value
    text, _ = _answers(tmp_path, monkeypatch, res)
    q1 = _paragraph(text, "Question 1: is the untracked fallback enough when the page allocation fails?")
    assert ("** No. " in q1) is unsafe and ("This run found no stale read with it" in q1) is not unsafe
    assert q1.endswith("closed it in every run here.") is safe
    assert q1.endswith("investigate.**") is not safe


@pytest.mark.parametrize("blocked, released, works", [(True, True, True), (False, True, False), (True, False, False)])
def test_question_2_says_wait_works_only_if_it_blocked_and_was_released(tmp_path, monkeypatch, blocked, released,
                                                                       works):
    overflow = json.loads(json.dumps(_OVERFLOW))
    overflow["wait"].update(blocked_at_max=blocked, released_by_end=released)
    text, _ = _answers(tmp_path, monkeypatch, _answer_results(), overflow)
    q2 = _paragraph(text, "Question 2: u16 wrap, clamp, or u32?")
    assert f"blocked the 65,536th start ({'yes' if blocked else 'no'})" in q2
    assert q2.endswith("reopens the race.") is works and ("did not block and release" in q2) is not works


@pytest.mark.parametrize("pinned, delayed, supports", [(1, 0, True), (0, 0, False), (5, 1, False)])
def test_the_memcg_answer_supports_dev_t_records_only_if_references_pinned_and_records_delayed_nothing(
        tmp_path, monkeypatch, pinned, delayed, supports):
    res = _answer_results()
    res["churn"]["bdev-ref"]["still_pinned_at_end"] = pinned
    res["churn"]["bdev-devt"]["release_delayed"] = delayed
    text, _ = _answers(tmp_path, monkeypatch, res)
    m = _paragraph(text, "memcg: dev_t records or device references?")
    assert m.endswith("best-effort dev_t records.") is supports and m.endswith("idle memcg.") is not supports


def test_without_yield_variants_the_spin_answer_says_spin_then_yield_was_not_measured(tmp_path, monkeypatch):
    res = _answer_results()
    del res["bench"]["scaling"]["variants"]["page+yield"], res["bench"]["scaling"]["variants"]["global+yield"]
    sc = res["bench"]["scaling"]["variants"]
    sc["page"][2]["ops_per_s"] = 0.75 * sc["page"][1]["ops_per_s"]       # exactly 0.75: held, not collapsed
    text, _ = _answers(tmp_path, monkeypatch, res)
    s = _paragraph(text, "Spinlocks under oversubscription (spin-then-yield?).")
    assert "had no `+yield` variant in this run" in s and "`global` 1.50x" not in s
    assert "The page lock did not collapse in this run: it keeps 0.75x" in s


def test_a_design_answer_whose_sections_did_not_run_says_which(tmp_path, monkeypatch):
    res = _answer_results()
    for k in ("fio", "race", "churn"):
        del res[k]
    text, flat = _answers(tmp_path, monkeypatch, res)
    assert ("**Which synchronisation variant?** Not answered in this report: `fio` did not run.") in flat
    assert "**Question 1: is the untracked fallback enough when the page allocation fails?** Not answered in this " \
           "report: `race and explore` did not run." in flat
    assert "**A question for the series: what does the read-side check cover?** Not answered in this report: `fio` " \
           "did not run." in flat
    assert "**memcg: dev_t records or device references?** Not answered in this report: `writeback` did not run." \
        in flat
    assert "**Spinlocks under oversubscription (spin-then-yield?).** With 8 threads" in flat
    assert text.count("Not answered") == 6


def test_answers_name_both_missing_sections_sorted(tmp_path, monkeypatch):
    res = _answer_results()
    del res["bench"], res["memory"]
    text, flat = _answers(tmp_path, monkeypatch, res)
    assert "**Which synchronisation variant?** Not answered in this report: `bench`, `memory` did not run." in flat


def test_the_answers_cite_the_concepts_doc_where_there_is_no_design_answers_doc(tmp_path, monkeypatch):
    monkeypatch.setattr(ans, "_repo_root", lambda: str(tmp_path))
    text, flat = _answers(tmp_path, monkeypatch, _answer_results())
    assert "the reasoning behind them is in `docs/concepts.md`" in flat
    (tmp_path / "docs").mkdir()
    text, flat = _answers(tmp_path, monkeypatch, _answer_results())
    assert "the reasoning behind them is in `docs/concepts.md`" in flat
    (tmp_path / "docs" / "design-answers.md").write_text("x")
    text, flat = _answers(tmp_path, monkeypatch, _answer_results())
    assert "`docs/design-answers.md`" in flat


def test_a_missing_figure_in_a_section_that_ran_raises_naming_it(tmp_path, monkeypatch):
    res = _answer_results()
    res["bench"]["scaling"]["variants"]["page"].pop()
    with pytest.raises(KeyError, match=r"report: no scaling page row with \{'threads': 8\}"):
        _answers(tmp_path, monkeypatch, res)
    for key, label, named in [("race", "page (posted)", r"race row with \{'label': 'page \(posted\)'\}"),
                              ("fio_granularity", None, r"fio page-granular row with \{'variant': 'page'\}"),
                              ("fio", None, r"fio 10 GiB row with \{'variant': 'global'\}")]:
        res = _answer_results()
        if key == "race":
            res["race"] = [r for r in res["race"] if r["label"] != label]
        elif key == "fio":
            res["fio"]["10 GiB"]["rows"] = [r for r in res["fio"]["10 GiB"]["rows"] if r["variant"] != "global"]
        else:
            res["fio_granularity"]["rows"] = res["fio_granularity"]["rows"][:1]
        with pytest.raises(KeyError, match="report: no " + named):
            _answers(tmp_path, monkeypatch, res)
    res = _answer_results()
    res["explore"] = [r for r in res["explore"] if r["label"] != "page (posted)"]
    with pytest.raises(KeyError, match=r"report: no explore row with \{'label': 'page \(posted\)'\}"):
        _answers(tmp_path, monkeypatch, res)
    res = _answer_results()
    res["memory"]["rows"] = [r for r in res["memory"]["rows"] if r["variant"] != "atomic"]
    with pytest.raises(KeyError, match=r"no memory row with \{'size_bytes': 1099511627776, 'variant': 'atomic'\}"):
        _answers(tmp_path, monkeypatch, res)


def test_overflow_demo_measures_wrap_clamp_and_wait_on_a_real_tracker():
    out = ans.overflow_demo()
    assert out["wrap"] == {"count": 0, "is_active": False, "wraps": 1}
    assert out["clamp"] == {"count_after_all_but_one_end": 0, "is_active": False, "clamps": 1}
    # the 65,536th start cannot finish before an end makes room: it is still running when the end comes
    assert out["wait"]["blocked_at_max"] is True
    assert out["wait"]["released_by_end"] is True and out["wait"]["count"] == 65_535
    assert out["wait"]["waits"] in (0, 1)     # 0 only if the 65,536th start ran after the end made room


def test_a_fio_ratio_is_two_decimals_and_a_dash_for_the_unpatched_row():
    f = ans._Figures(_answer_results())
    assert f.fio_ratio("10 GiB", "page") == "1.06x" and f.fio_ratio("320 GiB", "page") == "1.17x"
    assert f.fio_ratio("10 GiB", "none") == "—"


def test_the_answers_look_for_the_docs_beside_the_package():
    assert ans._repo_root() == os.path.dirname(os.path.dirname(os.path.abspath(pybcache.__file__)))


# ---- make docs generators (beyond tests/test_docs_generated.py) -------------------------------------------------

def _docs_report():
    bench = _bench_result()
    for r in bench["same_chunk"]:
        r["driver_floor_vs_floor"] = 1.21
    bench["targets"] = {"p99_ns": 20_000}
    return {"run": {"generated_utc": "2026-12-02 00:12 UTC", "quick": False, "seed": 3},
            "machine": {"cpus": 2, "load_start": "4.18", "load_end": "4.87"},
            "bench": bench, "fio": {"10 GiB": _fio_run(1.0)}, "fio_no_bounce_copy": {"10 GiB": _fio_run(1.2)},
            "timings": {"a": 30.4, "b": "569.6"}}


def test_the_stamp_of_a_full_run_names_its_mode_seed_and_loads():
    assert docs.stamp(_docs_report()) == (
        "*Generated by `make docs` from one `pybcache report --seed 3` run, full (not `--quick`), 2026-12-02 00:12 "
        "UTC, 2 CPUs, load average 4.18 at its start and 4.87 at its end; `make docs` reruns it, `make docs "
        "REPORT=DIR` refreshes from an existing run.*")


def test_the_oversubscribed_block_is_the_top_thread_count_of_each_variant_with_its_verdict():
    text = docs._oversubscribed(_docs_report())
    assert text.startswith("All threads pinned to the same 2 CPUs; each figure the best of 3 runs of 0.5 s (*max*: "
                           "the worst).\n\n| variant | threads | Mops/s |")
    assert "| global | 8 | 5.00 | 0.50x | 400 | 80 ns | 25 µs | 30.0 ms | 0.10 | **missed** |" in text
    assert "| page | 8 | 11.01 | 1.10x | 210 | 80 ns | 20 µs | 2.0 ms | 0.80 | met |" in text   # over 1e6
    assert ("\n\n| variant | threads | Mops/s | vs 1 thread | CPU ns/op | p50 | p99 | max | slowest thread | "
            "p99 ≤ 20 µs |\n|---|") in text


def test_the_same_chunk_block_gives_the_driver_floor_and_an_unpinned_floors_spread():
    rep = _docs_report()
    rep["bench"]["same_chunk"][0].update(floor_spread_ns={"min": 9.9, "median": 12.0, "max": 36.3, "runs": 5},
                                         floor_pinned=False)
    text = docs._same_chunk(rep)
    assert text.startswith("Same chunk, 2 threads, CPU time per start+end pair against the 2-thread bounce floor "
                           "(10.2 ns, spread 9.9–36.3 ns (median 12.0) over 5 runs, threads not pinned); target "
                           "≤ 1.5x, the run with the highest overlap of 5 kept: `global` 33.60x (overlap 1.00, "
                           "**missed**), `page` 1.20x (overlap 0.30, inconclusive), `atomic` 1.44x (overlap 0.90, "
                           "met).")
    assert text.endswith(" The same loop on a do-nothing tracker (the driver floor) cost 12.3 ns, 1.21x the bounce "
                         "floor; each pair over it: `global` 28.00x, `page` 1.00x, `atomic` 1.20x.")
    del rep["bench"]["same_chunk"][0]["floor_pinned"]
    assert "over 5 runs); target" in docs._same_chunk(rep)
    for r in rep["bench"]["same_chunk"]:
        del r["driver_floor_ns"]
    assert "driver floor" not in docs._same_chunk(rep)
    rep["bench"]["same_chunk"] = []
    with pytest.raises(docs.MissingFigure, match="^report.json has no bench/same_chunk rows$"):
        docs._same_chunk(rep)


def test_the_targets_block_is_one_row_per_target_one_column_per_variant():
    assert docs._bench_targets(_docs_report()) == (
        "| target | global | page | atomic |\n|---|---|---|---|\n"
        "| batch start+end pair vs its floor (spinlock pair / atomic pair), target ≤ 1.5× | 2.01× | 1.91× | 1.81× |\n"
        "| single-call pair vs an empty Cython method pair, target ≤ 1.3× | 2.05× | 2.05× | 2.05× |\n"
        "| faster than the reference model per call, target ≥ 15× | 62× | 62× | 62× |\n"
        "| 2 threads on distinct pages over 1 thread, target ≥ 1.8× | 1.39× | 2.39× | 3.39× |\n"
        "| …the machine's own ceiling in the same run (independent trackers) | 1.38× | 1.38× | 1.38× |\n"
        "| 2 threads on adjacent pages (slots share a line) | 0.27× | 0.27× | 0.27× |\n"
        "| same chunk, 2 threads vs the bounce floor, target ≤ 1.5× (overlap) | 33.60× (1.00, **missed**) | "
        "1.20× (0.30, inconclusive) | 1.44× (0.90, met) |")


def test_the_targets_block_marks_a_variant_without_a_same_chunk_run():
    rep = _docs_report()
    rep["bench"]["same_chunk"] = rep["bench"]["same_chunk"][:2]
    text = docs._bench_targets(rep)
    assert text.startswith("| target | global | page | atomic |\n|---|---|---|---|\n")
    assert ("| batch start+end pair vs its floor (spinlock pair / atomic pair), target ≤ 1.5× | 2.01× | 1.91× | "
            "1.81× |") in text
    assert "| faster than the reference model per call, target ≥ 15× | 62× | 62× | 62× |" in text
    assert ("| same chunk, 2 threads vs the bounce floor, target ≤ 1.5× (overlap) | 33.60× (1.00, **missed**) | "
            "1.20× (0.30, inconclusive) | — |") in text


def test_the_fio_block_counts_tracking_pages_and_states_each_verdict():
    rep = _docs_report()
    for r in rep["fio"]["10 GiB"]["rows"]:
        r["tracking_pages"] = 2
    text = docs._fio_model(rep)
    assert text.startswith("2 jobs, CPU ns per I/O of every thread as a ratio to the unpatched model in the same run, "
                           "12 alternating rounds per size")
    assert ("\n\n| working set | bounce copy | global | page | atomic | reads bypassed (page) | "
            "stale reads (none / page) |\n|---|") in text
    assert "| 10 GiB (2 tracking pages) | on | 1.01× | 1.06× | 0.97× | 38.1 % | 48 / 0 |" in text
    assert "| 10 GiB (1 tracking page) | off | 1.21× | 1.27× | 1.16× | 38.1 % | 48 / 0 |" in text
    assert "| 48 / 0 |\n\nTarget ≤ 1.10× for `page`" in text
    assert text.endswith("Target ≤ 1.10× for `page`, computed from the rows: 10 GiB, bounce copy on: `page` 1.060× — "
                         "met; 10 GiB, bounce copy off: `page` 1.272× — **missed**.")
    rep["fio"]["10 GiB"]["rows"][2]["ns_per_io_vs_none"] = 1.10
    assert "bounce copy on: `page` 1.100× — met" in docs._fio_model(rep)


def test_the_report_time_block_sums_the_sections_in_minutes():
    assert docs._report_time(_docs_report()) == ("That run took 10.0 minutes of wall time over its sections (a 30 s, "
                                                 "b 570 s).")
    with pytest.raises(docs.MissingFigure, match="^report.json has no timings$"):
        docs._report_time({"timings": {}})


def test_a_missing_row_names_what_and_the_match():
    with pytest.raises(docs.MissingFigure, match=r"^report.json has no scaling page row with \{'threads': 8\}$"):
        docs._row([{"threads": 2}], "scaling page", threads=8)
    assert docs._row([{"a": 1, "b": 2}, {"a": 1, "b": 3}], "x", a=1, b=3) == {"a": 1, "b": 3}


def test_get_names_the_path_up_to_the_missing_step():
    rep = {"a": {"b": [{"c": 1}]}}
    assert docs._get(rep, "a", "b", 0, "c") == 1
    for path, named in [(("a", "x", "y"), "a/x"), (("a", "b", 3), "a/b/3"), (("a", "b", 0, "c", "d"), "a/b/0/c/d")]:
        with pytest.raises(docs.MissingFigure) as err:
            docs._get(rep, *path)
        assert str(err.value) == f"report.json has no {named}"


def test_a_block_is_found_with_its_line_and_its_body_bounds():
    text = "x\n\n<!-- generated: report-time (make docs) -->  \nbody\n<!-- end generated -->\ntail\n"
    (name, body, end), = docs.blocks_in(text)
    assert name == "report-time" and text[body:end] == "body\n"
    with pytest.raises(docs.UnknownBlock, match=r"^f\.md:3: generated block 'report-time' has no "):
        docs.blocks_in(text.replace("<!-- end generated -->", ""), "f.md")


def test_a_refreshed_block_is_the_generated_text_without_its_surrounding_newlines(monkeypatch):
    monkeypatch.setitem(docs.GENERATORS, "report-time", lambda report: "\nbody  \n\n")
    text = "a\n<!-- generated: report-time (make docs) -->\nold\n<!-- end generated -->\nb\n"
    new, names = docs.refresh_text(text, _docs_report())
    assert names == ["report-time"]
    assert new == "a\n<!-- generated: report-time (make docs) -->\nbody  \n<!-- end generated -->\nb\n"


def test_a_bad_block_is_named_by_its_line_and_the_text_it_came_from():
    known = "(known: bench-oversubscribed, bench-same-chunk, bench-targets, fio-model, report-time, run)"
    with pytest.raises(docs.UnknownBlock) as err:
        docs.blocks_in("\n<!-- generated: nope (make docs) -->\n<!-- end generated -->\n")
    assert str(err.value) == "<text>:2: generated block 'nope' names no generator " + known
    with pytest.raises(docs.UnknownBlock) as err:
        docs.refresh_text("<!-- generated: report-time (make docs) -->\n", _docs_report())
    assert str(err.value) == "<text>:1: generated block 'report-time' has no '<!-- end generated -->' line"


def test_docs_main_writes_figures_md_by_default_and_prints_what_it_wrote(tmp_path, monkeypatch, capsys):
    (tmp_path / "rep").mkdir()
    (tmp_path / "rep" / "report.json").write_text(json.dumps(_docs_report()))
    (tmp_path / "docs").mkdir()
    monkeypatch.chdir(tmp_path)
    assert docs.main(["--report", "rep"]) == 0
    assert capsys.readouterr().out == "docs/figures.md: " + ", ".join(docs.GENERATORS) + "\n"
    assert (tmp_path / "docs" / "figures.md").read_text(encoding="utf-8") == docs.render(_docs_report())
    (tmp_path / "rep" / "report.json").write_text("{not json")
    assert docs.main(["--report", "rep"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("docs: --report: cannot read rep/report.json: ") and err.count("\n") == 1


def test_docs_main_has_its_own_usage_and_requires_the_report_directory(capsys, plain_help):
    with pytest.raises(SystemExit) as exit_:
        docs.main(["--help"])
    assert exit_.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert out.startswith("usage: python -m pybcache.report.docs [-h] --report REPORT [--out OUT] write "
                          "docs/figures.md, the generated figures, from a report ")
    assert "--report REPORT a `pybcache report` output directory (holds report.json)" in out
    assert "--out OUT the file to write (default docs/figures.md)" in out
    with pytest.raises(SystemExit) as exit_:
        docs.main([])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.endswith("error: the following arguments are required: --report\n")
