"""``pybcache bench`` (``pybcache/commands/bench.py``): verdicts and the tables built from a result, and its run. The
experiment it starts is stood in for (no subprocess, no C model): these tests state what the command hands on,
prints, writes as JSON and returns for given arguments and results."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from pybcache.commands import bench
from pybcache._console import format_table


def test_a_verdict_is_met_missed_or_inconclusive():
    assert bench._verdict(True) == "met"
    assert bench._verdict(False) == "MISSED"
    assert bench._verdict(None) == "inconclusive"


def _target_row(variant, met, deferred_met):
    return {"variant": variant, "batch_pair_vs_floor": 1.234, "batch_pair_vs_floor_spread": {"min": 1.1, "max": 1.456},
            "batch_pair_target": 1.5, "batch_pair_met": met, "idle_pair_eager_vs_warm": 3.456,
            "allocations_per_1000_writes_eager": 999.6, "idle_pair_deferred_vs_warm": 1.044,
            "allocations_per_1000_writes_deferred": 0.126, "idle_pair_target": 1.25,
            "idle_pair_deferred_met": deferred_met}


def test_the_targets_table_gives_each_variants_ratios_ranges_and_verdicts():
    res = {"params": {"batch_rounds": 7},
           "results": [_target_row("atomic", True, None), _target_row("page", False, True)]}
    headers = ["variant", "batch vs floor", "rounds", "target", "idle page (eager) vs warm", "allocs/1000",
               "idle page (deferred) vs warm", "allocs/1000", "target"]
    rows = [["atomic", "1.23x", "1.10-1.46x", "<= 1.5x: met", "3.46x", "1000", "1.04x", "0.13",
             "<= 1.2x: inconclusive"],
            ["page", "1.23x", "1.10-1.46x", "<= 1.5x: MISSED", "3.46x", "1000", "1.04x", "0.13", "<= 1.2x: met"]]
    assert bench.format_targets(res) == (
        "Targets (issue 15), ratios measured in this run (batch vs floor: the median of 7 interleaved rounds,\n"
        "floor then pair on the same elements in this thread's CPU time, and the range of the rounds):\n"
        + format_table(headers, rows))


def _same_chunk(variant, met, **extra):
    return dict({"variant": variant, "pair_cpu_ns": 101.25, "pair_ns": 120.04, "overlap": 0.876, "floor_ns": 50.0,
                 "vs_floor": 2.025, "driver_floor_ns": 60.55, "vs_driver_floor": 1.6725, "target": 2.5, "met": met},
                **extra)


_SAME_HEADERS = ["variant", "pair ns (CPU)", "pair ns (wall)", "overlap", "floor ns", "vs floor", "drv floor ns",
                 "vs drv floor", "target"]


_SAME_INTRO = ("Same chunk, 2 threads (start+end pairs on one counter) vs the 2-thread cache-line bounce floor\n"
               "(the run where both threads overlapped most; overlap 1.00 = both on a CPU at the same time "
               "throughout,\n< 0.50 = inconclusive):\n")


_SAME_DRV = ("\ndrv floor: the same loop, threads and CPUs on a do-nothing tracker (one shared relaxed add and\n"
             "subtract per pair); over the floor it is the driver's cost, the pair over it the tracker's own work.")


def _same_cells(variant, verdict):
    return [variant, "101.2", "120.0", "0.88", "50.0", "2.02x", "60.5", "1.67x", f"<= 2.5x: {verdict}"]


def test_the_same_chunk_table_without_lock_floors_has_no_lock_paragraph():
    res = {"same_chunk": [_same_chunk("atomic", True), _same_chunk("page", None)]}
    assert bench.format_same_chunk(res) == (
        _SAME_INTRO + format_table(_SAME_HEADERS, [_same_cells("atomic", "met"), _same_cells("page", "inconclusive")])
        + _SAME_DRV)


def test_a_same_chunk_row_of_0_operations_prints_not_measured_and_dashes_for_its_figures():
    unmeasured = dict.fromkeys(("pair_cpu_ns", "pair_ns", "vs_floor", "vs_driver_floor", "vs_lock_floor"))
    floors = {"lock_floor_ns": 80.04, "lock_floor_vs_floor": 1.6008, "colocated_vs_separate": 1.125}
    res = {"same_chunk": [_same_chunk("atomic", True),
                          _same_chunk("page", None, not_measured="not measured: 0 operations in the run",
                                      **floors, **unmeasured)]}
    text = bench.format_same_chunk(res)
    assert text == (
        _SAME_INTRO
        + format_table(_SAME_HEADERS, [_same_cells("atomic", "met"),
                                       ["page", "-", "-", "0.88", "50.0", "-", "60.5", "-",
                                        "<= 2.5x: not measured: 0 operations in the run"]])
        + _SAME_DRV
        + "\nWhere a lock variant's pair goes (floors of a pthread spinlock bounced by 2 pinned threads):\n"
        + "  page: 2-thread lock floor 80.0 ns = 1.60x the atomic floor; lock and counter on one line: 1.12x of two "
          "lines; pair - the lock floor")
    # the driver floor unmeasured: its cells are dashes and a line says why
    res = {"same_chunk": [_same_chunk("atomic", None, driver_floor_ns=None, vs_driver_floor=None,
                                      driver_floor_not_measured="not measured: 0 operations in the run")]}
    assert bench.format_same_chunk(res) == (
        _SAME_INTRO
        + format_table(_SAME_HEADERS, [["atomic", "101.2", "120.0", "0.88", "50.0", "2.02x", "-", "-",
                                        "<= 2.5x: inconclusive"]])
        + _SAME_DRV + "\ndrv floor: not measured: 0 operations in the run.")


def test_the_same_chunk_table_adds_the_lock_options_and_says_where_each_lock_variants_pair_goes():
    floors = {"lock_floor_ns": 80.04, "lock_floor_vs_floor": 1.6008, "colocated_vs_separate": 1.125,
              "vs_lock_floor": 1.5}
    own = {"own_lock_floor_ns": 70.06, "own_lock_floor_vs_floor": 1.4012, "vs_own_lock_floor": 1.7149}
    res = {"same_chunk": [_same_chunk("atomic", True), _same_chunk("page", False, **floors)],
           "same_chunk_lock_options": [_same_chunk("page+pthread", False, lock="pthread", **floors),
                                       _same_chunk("page+ticket", True, lock="ticket", **floors, **own)]}
    where = ("pair 1.50x the lock floor")
    head = "2-thread lock floor 80.0 ns = 1.60x the atomic floor; lock and counter on one line: 1.12x of two lines; "
    assert bench.format_same_chunk(res) == (
        _SAME_INTRO
        + format_table(_SAME_HEADERS, [_same_cells("atomic", "met"), _same_cells("page", "MISSED"),
                                       _same_cells("page+pthread", "MISSED"), _same_cells("page+ticket", "met")])
        + _SAME_DRV
        + "\nWhere a lock variant's pair goes (floors of a pthread spinlock bounced by 2 pinned threads):\n"
        + f"  page: {head}{where}\n"
        + f"  page+pthread: {head}{where}\n"
        + f"  page+ticket: {head}{where}; its own (ticket) lock floor 70.1 ns = 1.40x the atomic floor, "
          "pair 1.71x it")


def _scaling_entry(threads, p99):
    # Mops/s is ops/s over exactly a million: 2,005,001 ops/s is 2.01 (over 1,000,001 it would be 2.00)
    return {"threads": threads, "ops_per_s": 2_005_001.0, "speedup_vs_1": 1.875, "cpu_ns_per_op": 81.4,
            "cpu_ns_vs_floor": 3.25, "p50_ns": 1234, "p99_ns": p99, "p99_worst_ns": 20_000, "p999_ns": 123_456,
            "max_ns": 2_345_678, "slowest_thread_share": 0.875}


def test_the_scaling_table_judges_the_p99_target_only_for_oversubscribed_thread_counts():
    res = {"targets": {"p99_ns": 10_000},
           "scaling": {"params": {"cpus": 2, "repeats": 3, "seconds": 0.5, "sample_every": 64},
                       "variants": {"atomic": [_scaling_entry(1, 99_999), _scaling_entry(2, 50_000),
                                               _scaling_entry(3, 10_000)],
                                    "page": [_scaling_entry(4, 10_001)]}}}
    headers = ["variant", "threads", "Mops/s", "vs 1 thr", "CPU ns/op", "vs floor", "p50 ns", "p99 ns", "p99 worst",
               "p99.9 ns", "max us", "slowest thr", "p99<=10us"]

    def cells(variant, threads, p99, verdict):
        return [variant, threads, "2.01", "1.88x", "81", "3.2x", "1,234", f"{p99:,}", "20,000", "123,456", "2,346",
                "0.88", verdict]

    rows = [cells("atomic", 1, 99_999, ""), cells("atomic", 2, 50_000, ""), cells("atomic", 3, 10_000, "met"),
            cells("page", 4, 10_001, "MISSED")]
    assert bench.format_scaling(res) == (
        "Threads on 2 CPUs, the v2 cover letter's 10 GiB workload (one tracking page shared by all threads), "
        "best of 3 x 0.5 s; "
        "1 op in 64 timed:\n" + format_table(headers, rows)
        + "\nslowest thr: the slowest thread's ops over a fair share (1.00 = fair, 0.00 = starved).")


def test_the_scaling_table_says_why_a_variant_has_no_speed_up_over_one_thread():
    nm = "not measured: 0 operations in the run"
    one = dict(_scaling_entry(1, 5_000), ops_per_s=0.0, speedup_vs_1=None, speedup_not_measured=nm,
               cpu_ns_per_op=float("inf"), cpu_ns_vs_floor=float("inf"))
    res = {"targets": {"p99_ns": 10_000},
           "scaling": {"params": {"cpus": 2, "repeats": 1, "seconds": 0.1, "sample_every": 64},
                       "variants": {"page": [one, dict(_scaling_entry(2, 5_000), speedup_vs_1=None,
                                                       speedup_not_measured=nm)]}}}
    text = bench.format_scaling(res)
    assert text.endswith("\nvs 1 thr of page: not measured: 0 operations in the run.")
    row1, row2 = [line.split() for line in text.splitlines() if line.startswith("page")]
    assert row1[:6] == ["page", "1", "0.00", "-", "inf", "infx"] and row2[:4] == ["page", "2", "2.01", "-"]


def _bench_result(pinned):
    row = dict(_target_row("atomic", True, True), batch_pair_ns=12.34, single_pair_ns=45.67,
               single_pair_vs_empty_call=1.875, speedup_vs_reference=123.4, batch_check_ns=3.21,
               scaling_2_over_1=1.955, scaling_2_over_1_adjacent_slots=1.004, machine_2_over_1=1.999,
               single_pair_cold_ns=987.6)
    return {"floors": {"atomic_pair_ns": 5.55, "spinlock_pair_ns": 11.04, "cython_empty_pair_ns": 20.25,
                       "shared_atomic_pair_ns": 40.44, "shared_pinned": pinned, "cpus": 1,
                       "shared_atomic_pair_spread_ns": {"runs": 5, "min": 30.04, "median": 40.44, "max": 50.06}},
            "load": {"before": 1.5, "after": 2.25}, "params": {"batch_rounds": 3}, "results": [row],
            "same_chunk": [_same_chunk("atomic", True)], "targets": {"p99_ns": 10_000},
            "scaling": {"params": {"cpus": 2, "repeats": 1, "seconds": 0.5, "sample_every": 64},
                        "variants": {"atomic": [_scaling_entry(3, 9_000)]}}}


@pytest.mark.parametrize("pinned", [True, False])
def test_bench_prints_the_floors_the_variants_table_and_each_targets_table(monkeypatch, capsys, pinned):
    res = _bench_result(pinned)
    seen = []
    monkeypatch.setattr(bench, "run_bench", lambda *, quick, progress: seen.append(quick) or res)
    assert bench.run(SimpleNamespace(quick=True, json=False)) == 0
    assert seen == [True]
    where = ("its threads pinned to 2 distinct CPUs" if pinned else "NOT pinned (this process may use 1 CPU(s))")
    assert capsys.readouterr().out == (
        "Floors (measured now): atomic pair 5.5 ns, spinlock pair 11.0 ns, empty Cython method pair 20.2 ns, "
        "2-thread shared-counter pair 40.4 ns\n"
        f"2-thread floor over 5 runs: min 30.0 / median 40.4 / max 50.1 ns, {where}; load average before/after "
        "1.5 / 2.25\n"
        + format_table(["variant", "batch pair ns", "vs floor", "call pair ns", "vs empty call", "vs reference",
                        "batch check ns", "2thr/1thr", "adjacent", "machine", "cold pair ns"],
                       [["atomic", "12.3", "1.23x", "45.7", "1.88x", "123x", "3.2", "1.96x", "1.00x", "2.00x",
                         "988"]]) + "\n"
        "Pairs are start+end of a 128 KiB write with the tracking page resident (one write held in flight);\n"
        "cold = the page is allocated and freed by every pair. floor: atomic pair for 'atomic', spinlock pair\n"
        "for the lock variants. 2thr/1thr: native stress throughput, threads on pages whose slots sit on\n"
        "different cache lines; adjacent: on neighbouring pages (their 16-byte slots share a line); machine:\n"
        "two independent trackers at once (what this machine gives 2 threads that share nothing).\n\n"
        + bench.format_targets(res) + "\n\n" + bench.format_same_chunk(res) + "\n\n" + bench.format_scaling(res)
        + "\n")


def test_bench_json_is_the_result_as_it_came(monkeypatch, capsys):
    import json
    res = _bench_result(True)
    monkeypatch.setattr(bench, "run_bench", lambda *, quick, progress: res)
    assert bench.run(SimpleNamespace(quick=False, json=True)) == 0
    assert json.loads(capsys.readouterr().out) == res


@pytest.mark.parametrize("as_json", [False, True])
def test_bench_names_its_bar_and_keeps_quiet_with_json_and_hands_its_postfix_to_the_benchmark(monkeypatch, capsys,
                                                                                             as_json):
    import contextlib
    bar = SimpleNamespace(set_postfix_str=lambda text: None)
    seen = []

    @contextlib.contextmanager
    def status_bar(desc, *, total=None, quiet=False):
        seen.append((desc, total, quiet))
        yield bar
    monkeypatch.setattr(bench, "status_bar", status_bar)
    monkeypatch.setattr(bench, "run_bench",
                        lambda *, quick, progress: seen.append(progress is bar.set_postfix_str) or _bench_result(True))
    bench.run(SimpleNamespace(quick=False, json=as_json))
    assert seen == [("bench", None, as_json), True]
