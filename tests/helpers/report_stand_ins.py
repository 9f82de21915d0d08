"""Stand-ins shared by the report section tests (tests/report/test_report_*.py): a report context, the layout each
section's Markdown must have, and results of the real shape for the bench, fio and writeback sections (the design
answers and the docs generators read them too)."""
from __future__ import annotations

import json

from pybcache.report import _common


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
        "**Explorer**: every inte", "| configuration | schedu", "The hijack rows use `unh", "Counterexample, none (un",
        "```\n 1. 1w1r step 0\n 2. ", "Counterexample, page, ch", "```\n 1. 1w1r step 0\n 2. ",
        "Counterexample, page, mi", "```\n 1. 1w2r step 0\n 2. ", "Counterexample, page, W1",
        "```\n 1. 1w1r step 0\n 2. ", "Counterexample, page, un",
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
        "**Where does the read-si", "**A question for the ser",
        "**Does tracking pay for ", "**A question for the ser", "**memcg: dev_t records o",
        ""],
}


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


def _fio_run(scale, chunks=320):
    rows = [{"variant": v, "ops_per_s": 1_500_000.0 * (1 + i), "ns_per_io": 1000.0 * r * scale,
             "ns_per_io_vs_none": None if v == "none" else r * scale, "bypass_fraction": 0.381 * (v != "none"),
             "insert_fraction": 0.6 + i / 100, "stale_reads": 48 if v == "none" else 0,
             "tracking_pages": 0 if v == "none" else 1}
            for i, (v, r) in enumerate((("none", 1.0), ("global", 1.01), ("page", 1.06), ("atomic", 0.97)))]
    return {"rows": rows, "config": {"chunks": chunks, "jobs": 2, "rounds": 12}}


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
