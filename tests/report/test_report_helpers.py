"""The report's small helpers, each on inputs whose output is known: number formats, the Markdown table, the
seed's sizes, the oversubscription note and the targets summary (fast: no experiment runs)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from pybcache import report
from pybcache.bcache.experiments.bench import OVERSUBSCRIBED_CPUS, TARGET_P99_NS
from pybcache.report import _common, bench as report_bench, memory as report_memory


@pytest.mark.parametrize("ns, text", [
    (0, "0 ns"), (999.4, "999 ns"), (1000, "1.0 µs"), (9_949, "9.9 µs"), (10_000, "10 µs"), (999_999, "1000 µs"),
    (1_000_000, "1.0 ms"), (2_340_000, "2.3 ms"), (1_050_000, "1.1 ms"), (1_050, "1.1 µs"),
])
def test_fmt_ns_picks_the_unit_and_precision_by_magnitude(ns, text):
    assert _common.fmt_ns(ns) == text


def test_table_is_a_markdown_table_with_one_separator_per_column():
    assert _common.table(["a", "b"], [[1, "x"], [2.5, None]]) == (
        "| a | b |\n|---|---|\n| 1 | x |\n| 2.5 | None |")
    assert _common.table(["only"], []) == "| only |\n|---|"


@pytest.mark.parametrize("text, n", [
    ("256 bytes", 256), ("256 B", 256), ("1 KB", 1024), ("64.25 KB", 65792), ("2.51 MB", 2631926),
    ("25.10 MB", 26319258), ("2 GB", 2 << 30), ("10KB", 10240),
])
def test_posted_bytes_reads_the_seeds_sizes_in_binary_units(text, n):
    assert report_memory.posted_bytes(text) == n


@pytest.mark.parametrize("text", ["", "KB", "1 TB", "one KB", "x 1 KB"])
def test_posted_bytes_refuses_what_is_not_a_seed_size(text):
    with pytest.raises(ValueError, match="^" + text + "$"):
        report_memory.posted_bytes(text)


def test_json_default_turns_numpy_into_json_and_drops_large_arrays():
    dumps = lambda x: json.dumps(x, default=report._json_default)  # noqa: E731
    assert dumps({"a": np.int64(3), "b": np.float32(0.5), "c": np.bool_(True)}) == '{"a": 3, "b": 0.5, "c": true}'
    assert dumps(np.arange(3)) == "[0, 1, 2]"
    assert json.loads(dumps(np.zeros(4096))) == [0.0] * 4096
    assert dumps(np.zeros(4097)) == "null"
    with pytest.raises(TypeError, match="^not JSON serialisable: object$"):
        report._json_default(object())


def _row(threads, ops_per_s, cpu=100.0, p99=1000, share=1.0, max_ns=5000):
    return {"threads": threads, "ops_per_s": ops_per_s, "cpu_ns_per_op": cpu, "p99_ns": p99,
            "slowest_thread_share": share, "max_ns": max_ns}


def test_targets_lists_each_oversubscribed_p99_and_each_same_chunk_target():
    assert report._targets({}) == {}
    bench = {"scaling": {"variants": {"page": [_row(1, 1e6), _row(2, 2e6, p99=TARGET_P99_NS + 1),
                                               _row(4, 2e6, p99=TARGET_P99_NS + 1), _row(8, 1e6, p99=TARGET_P99_NS)]}},
             "same_chunk": [{"variant": "atomic", "target": 3, "overlap": 0.456, "vs_floor": 2.345, "met": True}]}
    us = TARGET_P99_NS // 1000
    assert OVERSUBSCRIBED_CPUS == 2
    assert report._targets({"bench": bench}) == {
        f"p99 page 4 threads on 2 cores ≤ {us} µs": (TARGET_P99_NS + 1, False),
        f"p99 page 8 threads on 2 cores ≤ {us} µs": (TARGET_P99_NS, True),   # at the target: met
        "same chunk atomic ≤ 3x floor (overlap 0.46)": (2.35, True),   # 2.345 rounds half-even in binary
    }
    # a same-chunk run of 0 operations has no ratio to round
    bench["same_chunk"][0].update(vs_floor=None, met=None, not_measured="not measured: 0 operations in the run")
    assert report._targets({"bench": bench})["same chunk atomic ≤ 3x floor (overlap 0.46)"] == (None, None)


def _scaling(page8, yields=True):
    sc = {"global": [_row(2, 4e6, cpu=50), _row(8, 3.2e6, cpu=60, share=0.5, max_ns=2_000_000)],
          "page": [_row(2, 4e6, cpu=50), page8],
          "atomic": [_row(2, 8e6, cpu=25), _row(8, 8e6, cpu=25, share=0.9, max_ns=20_000)]}
    if yields:
        sc["page+yield"] = [_row(2, 4e6, cpu=50), _row(8, 3.6e6, cpu=55, share=0.75)]
    return {"scaling": {"variants": sc}}


def test_oversubscription_note_names_the_lock_variants_that_collapsed_and_the_p99_within_target():
    # page keeps 0.5x (< 0.75: collapsed), global 0.8x (kept); p99s within the target.
    text = report_bench.oversubscription_note(_scaling(_row(8, 2e6, cpu=80, share=0.25, max_ns=15_000)), 2)
    assert text == (
        "**Oversubscription.** "
        "`global` keeps 0.80x of its 2-thread throughput at 8 threads (CPU per op 1.20x, slowest thread 0.50 of "
        "a fair share, longest sampled op 2.0 ms); "
        "`page` keeps 0.50x of its 2-thread throughput at 8 threads (CPU per op 1.60x, slowest thread 0.25 of a "
        "fair share, longest sampled op 15 µs); "
        "`atomic` keeps 1.00x of its 2-thread throughput at 8 threads (CPU per op 1.00x, slowest thread 0.90 of "
        "a fair share, longest sampled op 20 µs); "
        "`page+yield` keeps 0.90x of its 2-thread throughput at 8 threads (CPU per op 1.10x, slowest thread 0.75 "
        "of a fair share, longest sampled op 5.0 µs). "
        "A thread preempted while it holds a `pthread_spin_lock` leaves every thread that wants the lock spinning "
        "until the holder runs again, a time slice later; here `page` lost throughput and grew CPU per op, while "
        "the per-op p99 stayed within the target: few ops wait, but each of those waits milliseconds, so read the "
        "throughput, CPU and slowest-thread columns with the percentiles. "
        "With `lock=\"spin_yield\"` (spin briefly, then yield the CPU to a preempted holder), at 8 threads: "
        "`page+yield` 3.60 Mops/s against `page` 2.00 (1.80x), CPU per op 55 ns against 80, slowest thread 0.75 "
        "against 0.25. The atomic variant has no lock a preempted thread could hold.")


def test_oversubscription_note_says_when_the_p99_exceeds_the_target_or_nothing_collapsed():
    over = _row(8, 2e6, cpu=80, p99=TARGET_P99_NS + 1)
    text = report_bench.oversubscription_note(_scaling(over, yields=False), 2)
    assert "here `page` lost throughput and grew CPU per op, and the p99 exceeds the target. The atomic" in text
    assert "spin_yield" not in text
    at_limit = _row(8, 3e6, cpu=80, p99=TARGET_P99_NS)     # 0.75x exactly: not collapsed
    text = report_bench.oversubscription_note(_scaling(at_limit, yields=False), 2)
    assert text.endswith("). No lock variant lost more than a quarter of its 2-thread throughput in this run. "
                         "The atomic variant has no lock a preempted thread could hold.")


def test_oversubscription_note_lists_every_collapsed_lock_and_every_yield_variant():
    # Both lock variants collapse (0.5x and 0.31x); the p99 exactly at the target is within it.
    sc = {"global": [_row(2, 4e6), _row(8, 2e6)], "page": [_row(2, 4e6), _row(8, 1_235_000, p99=TARGET_P99_NS)],
          "global+yield": [_row(2, 4e6), _row(8, 2_995_000)], "page+yield": [_row(2, 4e6), _row(8, 1_015_000)]}
    text = report_bench.oversubscription_note({"scaling": {"variants": sc}}, 2)
    assert "; here `global`, `page` lost throughput, while the per-op p99 stayed within" in text  # CPU per op flat
    assert ("at 8 threads: `global+yield` 3.00 Mops/s against `global` 2.00 (1.50x), CPU per op 100 ns against "
            "100, slowest thread 1.00 against 1.00; `page+yield` 1.01 Mops/s against `page` 1.24 (0.82x)") in text


def test_oversubscription_note_names_the_variant_whose_row_is_missing():
    sc = {"page": [_row(2, 4e6), _row(8, 2e6)], "global": [_row(8, 2e6)]}   # global has no 2-thread row
    with pytest.raises(KeyError, match=r"report: no scaling global row with \{'threads': 2\}"):
        report_bench.oversubscription_note({"scaling": {"variants": sc}}, 2)
