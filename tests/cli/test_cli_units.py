"""The command modules' own logic, function by function, on small fake results: no subprocess and no experiment.

What each command prints is built by pure functions of its result dict (``commands/bench.py``'s ``format_*``,
``fio_nbd.table``, ``writeback``'s row builders, ``memory._label``, ``check_patch._counterexample_lines``); its
arguments are post-processed by ``explore._bounds`` and ``explore._config``; and ``commands/__init__.py`` turns
errors into one line and an exit status. The experiments themselves are tested elsewhere; these tests state what
the text and the exit statuses are for a given result or argument list (issue #16, mutation testing)."""
from __future__ import annotations

import argparse
from types import SimpleNamespace

import pytest

from pybcache import __version__
from pybcache import commands
from pybcache.commands import bench, check_patch, explore, memory, writeback
from pybcache._console import format_table
from pybcache.bcache.nbd.fio import fio_table


# ---------------------------------------------------------------------------------------------- __init__.py


def test_one_line_escapes_line_breaks_and_stringifies():
    assert commands._one_line("a\nb\rc") == "a\\nb\\rc"
    assert commands._one_line(ValueError("x\ny")) == "x\\ny"


def test_a_parser_error_is_one_line_on_stderr_and_exit_status_2(capsys):
    with pytest.raises(SystemExit) as ex:
        commands._Parser(prog="p").error("bad\nvalue")
    assert ex.value.code == 2
    assert capsys.readouterr().err == "pybcache: error: bad\\nvalue\n"


def test_the_parser_names_the_program_and_lists_every_command_as_COMMAND():
    parser = commands.build_parser()
    assert parser.prog == "pybcache"
    assert parser.description == ("A userspace laboratory for bcache bypass-write tracking and memcg "
                                  "foreign-bdev writeback.")
    usage = parser.format_usage()
    assert usage.startswith("usage: pybcache ") and "COMMAND" in usage
    listed = {line.split()[0] for line in parser.format_help().splitlines() if line.startswith("    ")}
    assert set(commands.COMMANDS) <= listed
    assert parser.parse_args(["memory"]).command == "memory"


def test_version_prints_the_package_version_and_exits_0(capsys):
    with pytest.raises(SystemExit) as ex:
        commands.main(["--version"])
    assert ex.value.code == 0
    assert capsys.readouterr().out == f"pybcache {__version__}\n"


def test_a_bad_subcommand_value_is_one_line_and_exit_status_2(capsys):
    # the subcommands' parsers are _Parser too: no usage dump, one line
    with pytest.raises(SystemExit) as ex:
        commands.main(["explore", "--bounds", "9w9r"])
    assert ex.value.code == 2
    err = capsys.readouterr().err
    assert err == "pybcache: error: argument --bounds: writes + reads must be in [1, 8], got '9w9r'\n"


def test_bare_pybcache_prints_the_help_on_stderr_and_returns_2(capsys):
    assert commands.main([]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.startswith("usage: pybcache ") and "COMMAND" in out.err


def test_a_usage_error_of_a_command_is_one_line_naming_the_command_and_returns_2(capsys):
    # refused by explore's own checks before anything runs
    assert commands.main(["explore", "--scheduler", "tcp://h:1"]) == 2
    assert capsys.readouterr().err == "pybcache explore: error: --scheduler: only with --distributed\n"


@pytest.mark.parametrize("returned, status", [(None, 0), (0, 0), (1, 1), (3, 3), (True, 1)])
def test_main_returns_what_the_command_returns_as_an_int(monkeypatch, returned, status):
    monkeypatch.setattr(memory, "run", lambda args: returned)
    assert commands.main(["memory"]) == status


def test_a_usage_error_message_with_line_breaks_stays_one_line(monkeypatch, capsys):
    def run(args):
        raise commands.UsageError("--sizes: first\nsecond")
    monkeypatch.setattr(memory, "run", run)
    assert commands.main(["memory"]) == 2
    assert capsys.readouterr().err == "pybcache memory: error: --sizes: first\\nsecond\n"


def test_an_interrupt_is_one_line_and_exit_status_130(monkeypatch, capsys):
    def run(args):
        raise KeyboardInterrupt
    monkeypatch.setattr(memory, "run", run)
    assert commands.main(["memory"]) == 130
    assert capsys.readouterr().err == "pybcache: interrupted\n"


# ---------------------------------------------------------------------------------------------- explore.py


@pytest.mark.parametrize("text, bounds", [
    ("1w1r", [(1, 1)]),
    ("2w1r, 1W2R", [(2, 1), (1, 2)]),
    ("  3 w 0 r ", [(3, 0)]),
    ("0w1r,1w0r,8w0r,0w8r,4w4r", [(0, 1), (1, 0), (8, 0), (0, 8), (4, 4)]),
    ("1w1r,,2w1r,", [(1, 1), (2, 1)]),
])
def test_bounds_are_comma_separated_writes_and_reads_blank_parts_skipped(text, bounds):
    assert explore._bounds(text) == bounds


@pytest.mark.parametrize("text, message", [
    ("", "expected bounds like 2w1r,1w2r, got ''"),
    (" , ", "expected bounds like 2w1r,1w2r, got ' , '"),
    ("1w1r,abc", "expected bounds like 2w1r,1w2r, got 'abc'"),
    ("1r1w", "expected bounds like 2w1r,1w2r, got '1r1w'"),
    ("0w0r", "writes + reads must be in [1, 8], got '0w0r'"),
    (" 5w4r ", "writes + reads must be in [1, 8], got '5w4r'"),
    ("0w9r", "writes + reads must be in [1, 8], got '0w9r'"),
])
def test_bad_bounds_are_refused_naming_the_part(text, message):
    with pytest.raises(argparse.ArgumentTypeError) as err:
        explore._bounds(text)
    assert str(err.value) == message


def test_the_default_bounds_are_the_three_smallest_sets_smallest_first():
    args = commands.build_parser().parse_args(["explore"])
    assert args.bounds == [(1, 1), (2, 1), (1, 2)]


def _explore_args(**kw):
    base = dict(sync="page", check="fixed", no_restart=False, fault_at=0, max_restarts=3, no_reduce=False,
                distributed=False, granularity=None, alloc_failure=None, reclaims=None, counter_bits=None,
                counter_max=None, overflow=None, preload=None, hung_timeout=None)
    base.update(kw)
    return SimpleNamespace(**base)


def test_a_lab_config_fills_each_unset_option_with_its_default():
    assert explore._config(_explore_args(), 2, 1) == dict(
        sync="page", check="fixed", restart=True, fault_at=0, writes=2, reads=1, max_restarts=3, reduce=True,
        granularity="chunk", alloc_failure="hijack", reclaims=0, counter_bits=None, counter_max=None,
        overflow="wait", preload=0)


def test_a_lab_config_keeps_every_option_given():
    args = _explore_args(no_restart=True, fault_at=5, max_restarts=0, no_reduce=True, granularity="page",
                         alloc_failure="fail", reclaims=2, counter_bits=16, counter_max=1, overflow="clamp",
                         preload=7)
    assert explore._config(args, 1, 2) == dict(
        sync="page", check="fixed", restart=False, fault_at=5, writes=1, reads=2, max_restarts=0, reduce=False,
        granularity="page", alloc_failure="fail", reclaims=2, counter_bits=16, counter_max=1, overflow="clamp",
        preload=7)


def test_a_patch_config_passes_the_patch_itself_or_its_path_when_distributed_and_the_hung_timeout():
    patch = SimpleNamespace(path="/p/fix.c")
    local = explore._config(_explore_args(sync=patch, hung_timeout=2.5, granularity="page"), 1, 1)
    assert local == dict(sync=patch, check="fixed", restart=True, fault_at=0, writes=1, reads=1, max_restarts=3,
                         reduce=True, hung_timeout=2.5)
    dist = explore._config(_explore_args(sync=patch, distributed=True), 1, 1)
    assert dist["sync"] == "/p/fix.c" and dist["hung_timeout"] is None and "granularity" not in dist


# ---------------------------------------------------------------------------------------- memory, check-patch


@pytest.mark.parametrize("size, label", [
    (0, "0"), (1023, "1023"), (1 << 10, "1K"), (1536 << 10, "1536K"), (3 << 20, "3M"), (1 << 30, "1G"),
    ((1 << 30) + (1 << 20), "1025M"), (2 << 40, "2T"), (1 << 50, "1P"), (3 << 50, "3P"),
    ((1 << 50) + 1, str((1 << 50) + 1)),
])
def test_a_size_label_is_its_largest_exact_unit_else_bytes(size, label):
    assert memory._label(size) == label


def test_counterexample_lines_are_numbered_from_1_indented_and_aligned():
    lines = [f"step {i}" for i in range(10)]
    out = check_patch._counterexample_lines(lines)
    assert out[0] == "     1. step 0"
    assert out[9] == "    10. step 9"
    assert check_patch._counterexample_lines([]) == []


# ---------------------------------------------------------------------------------------------- writeback.py


def test_a_change_is_signed_with_one_decimal_and_a_percent_sign():
    assert writeback._fmt_change(3.14159) == "+3.1%"
    assert writeback._fmt_change(-2.0) == "-2.0%"
    assert writeback._fmt_change(0) == "+0.0%"


def test_the_cover_letter_rows_give_each_metric_its_digits_and_the_posted_change():
    keys = ("background_write_gib", "foreground_bandwidth_mib_s", "foreground_completion_s",
            "foreground_mean_latency_ms")
    result = SimpleNamespace(baseline=dict(zip(keys, (6.15449, 150.2949, 109.20349, 212.8449))),
                             patched=dict(zip(keys, (1.6801, 184.811, 88.6521, 172.741))),
                             change_percent=dict(zip(keys, (-72.71, 22.96, -18.84, 0.0))))
    assert writeback._rows(result) == [
        ["Background file write I/O (GiB)", "6.154", "1.680", "-72.7%", "-72.7%"],
        ["Foreground bandwidth (MiB/s)", "150.29", "184.81", "+23.0%", "+23.0%"],
        ["Foreground completion time (s)", "109.203", "88.652", "-18.8%", "-18.8%"],
        ["Foreground mean latency (ms)", "212.84", "172.74", "+0.0%", "-18.8%"],
    ]


def _flushes(foreign, pages, by_target, by_writer):
    return {"foreign_flushes_per_run": foreign, "pages_written_per_run": pages, "pages_per_flush": pages / foreign,
            "mib_per_flush": pages / foreign / 256, "pages_by_target_per_run": by_target,
            "background_file_gib_by_writer_per_run": by_writer, "throttle_events_per_run": 12.4,
            "bdev_skipped_busy_per_run": 0.25}


def test_flush_rows_list_each_target_and_writer_of_either_side_by_name_zero_where_absent():
    b = _flushes(10.0, 5120.0, {"sdb": 2560.0}, {"foreign_flush": 1.5, "sync": 0.25})
    p = _flushes(4.0, 1024.0, {"sdc": 512.0}, {"periodic": 0.125, "mystery": 2.0})
    p["throttle_events_per_run"] = 3.6
    assert writeback._flush_rows({"baseline": b, "patched": p}) == [
        ["Foreign flushes issued", "10.0", "4.0"],
        ["Pages written by them", "5120", "1024"],
        ["Pages per flush", "512", "256"],
        ["MiB per flush", "2.0", "1.0"],
        ["  of which sdb (MiB)", "10", "0"],
        ["  of which sdc (MiB)", "0", "2"],
        ["Background file GiB written by owner-wb foreign flushes", "1.500", "0.000"],
        ["Background file GiB written by mystery", "0.000", "2.000"],
        ["Background file GiB written by periodic writeback", "0.000", "0.125"],
        ["Background file GiB written by the final sync", "0.250", "0.000"],
        ["Throttled balance_dirty_pages calls", "12", "4"],
        ["Flush works skipped, open_mutex busy", "0.2", "0.2"],
    ]
    one = writeback._flush_rows({"baseline": b, "patched": _flushes(1.0, 1.0, {}, {"background": 1.0})})
    assert ["Background file GiB written by background writeback", "0.000", "1.000"] in one


def _churn(k):
    return {"device_incarnations": 3 + k, "flushes": 40 + k, "stale_flushes": 5 * k, "stale_pages": 100 * k,
            "skipped_absent": 1 + k, "skipped_removed": 2 + k, "skipped_closed": 6 + k, "skipped_busy": 7 + k,
            "release_delayed": 8 + k, "release_delay_mean_s": 0.125 + k, "release_delay_max_s": 2.5 + k,
            "still_pinned_at_end": 9 + k, "pinned_device_seconds": 12.34 + k, "deferred_puts": 11 + k}


def test_churn_rows_put_the_devt_flushes_beside_the_reference_ones():
    assert writeback._churn_rows({"bdev-devt": _churn(1), "bdev-ref": _churn(0)}) == [
        ["Device incarnations (dev_t reused)", "4", "3"],
        ["Flush works run", "41", "40"],
        ["Stale flushes (hit the new device)", "5", "0"],
        ["Pages written by stale flushes", "100", "0"],
        ["Skipped: dev_t absent", "2", "1"],
        ["Skipped: pinned device removed", "3", "2"],
        ["Skipped: closed / open_mutex busy", "7 / 8", "6 / 7"],
        ["Removed devices released late", "9", "8"],
        ["Release delay mean / max of released (s)", "1.12 / 3.50", "0.12 / 2.50"],
        ["Removed devices still pinned at end", "10", "9"],
        ["Pinned device-seconds", "13.3", "12.3"],
        ["Reference drops deferred off the record path", "12", "11"],
    ]


def test_sensitivity_rows_show_each_perturbation_with_its_figures_changes_and_verdict():
    row = {"name": "hz=1000", "verdict": "holds",
           "baseline": {"background_write_gib": 6.154, "foreground_bandwidth_mib_s": 150.29},
           "patched": {"background_write_gib": 1.678, "foreground_bandwidth_mib_s": 184.86},
           "change_percent": {"background_write_gib": -72.71, "foreground_bandwidth_mib_s": 23.04,
                              "foreground_completion_s": -18.75, "foreground_mean_latency_ms": 1.25}}
    assert writeback._sensitivity_rows([row, dict(row, name="other", verdict="WEAKER")]) == [
        ["hz=1000", "6.15 / 1.68", "-72.7%", "150.3 / 184.9", "+23.0%", "-18.8%", "+1.2%", "holds"],
        ["other", "6.15 / 1.68", "-72.7%", "150.3 / 184.9", "+23.0%", "-18.8%", "+1.2%", "WEAKER"],
    ]
    assert writeback._sensitivity_rows([]) == []


# ---------------------------------------------------------------------------------------------- fio_nbd.py


def _fio(read, write, lat):
    return {"read_iops": read, "write_iops": write, "read_lat_mean_ms": lat, "read_lat_p99_ms": lat * 4,
            "write_lat_mean_ms": lat * 2, "write_lat_p99_ms": lat * 8}


def _nbd_row(variant, read, write, lat, reads, inserts, stale=0):
    return {"variant": variant, "fio": _fio(read, write, lat),
            "model": {"read_bypasses": 1234 * (stale + 1), "cache_inserts": inserts, "reads": reads,
                      "stale_reads": stale, "stale_cached_blocks": 2 * stale}}


_NBD_METRICS = ["Read IOPS", "Write IOPS", "Total IOPS", "  vs unpatched", "Avg R Lat", "p99 R Lat", "Avg W Lat",
                "p99 W Lat"]


def test_the_nbd_table_has_one_column_per_variant_and_compares_each_to_unpatched_and_nbdkit_memory():
    res = {"rows": [_nbd_row("none", 3000.4, 1000.4, 0.5, 4000, 1000),
                    _nbd_row("atomic", 1500, 500, 1.25, 2000, 0, stale=3)],
           "baseline": {"fio": _fio(6000, 2000, 0.125)}}
    body = [
        ["Read IOPS", "3,000", "1,500", "6,000"],
        ["Write IOPS", "1,000", "500", "2,000"],
        ["Total IOPS", "4,001", "2,000", "8,000"],
        ["  vs unpatched", "1.000x", "0.500x", "2.000x"],
        ["Avg R Lat", "0.50 ms", "1.25 ms", "0.12 ms"],
        ["p99 R Lat", "2.00 ms", "5.00 ms", "0.50 ms"],
        ["Avg W Lat", "1.00 ms", "2.50 ms", "0.25 ms"],
        ["p99 W Lat", "4.00 ms", "10.00 ms", "1.00 ms"],
        ["  vs nbdkit memory", "0.500x", "0.250x", "1.000x"],
        ["Read bypasses", "1,234", "4,936", ""],
        ["Cache inserts", "1,000 (25.0%)", "0 (0.0%)", ""],
        ["Stale reads", "0", "3", ""],
        ["Stale cached blocks", "0", "6", ""],
    ]
    assert fio_table(res) == format_table(["Metric", "Unpatched", "Atomic", "nbdkit memory"], body)


def test_the_nbd_table_without_unpatched_or_baseline_or_reads_shows_dashes_and_no_share():
    res = {"rows": [_nbd_row("page", 10, 0, 1.0, 0, 0), _nbd_row("global", 0, 0, 1.0, 5, 1)], "baseline": None}
    body = [
        ["Read IOPS", "10", "0"],
        ["Write IOPS", "0", "0"],
        ["Total IOPS", "10", "0"],
        ["  vs unpatched", "-", "-"],
        ["Avg R Lat", "1.00 ms", "1.00 ms"],
        ["p99 R Lat", "4.00 ms", "4.00 ms"],
        ["Avg W Lat", "2.00 ms", "2.00 ms"],
        ["p99 W Lat", "8.00 ms", "8.00 ms"],
        ["Read bypasses", "1,234", "1,234"],
        ["Cache inserts", "0", "1 (20.0%)"],
        ["Stale reads", "0", "0"],
        ["Stale cached blocks", "0", "0"],
    ]
    assert fio_table(res) == format_table(["Metric", "Page lk", "Global lk"], body)
    # an unpatched column with no I/O at all: nothing to compare against
    zero = {"rows": [_nbd_row("none", 0, 0, 1.0, 0, 0), _nbd_row("page", 5, 5, 1.0, 0, 0)]}
    assert fio_table(zero).splitlines()[5].split() == ["vs", "unpatched", "-", "-"]


# ------------------------------------------------------------------------------------------------ bench.py


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


# --------------------------------------------------------------------------- memory.run, check_patch.run (faked)


def _fake_measure(calls):
    def measure(size, variant):
        calls.append((size, variant))
        k = {"global": 1, "page": 2, "atomic": 4}[variant]
        return {"size_bytes": size, "variant": variant, "idle_bytes": 256 * k, "peak_bytes": 65_792 * k,
                "not_printed": True}
    return measure


def test_memory_prints_an_idle_and_a_peak_table_with_the_posted_figures_where_it_has_them(monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(memory, "measure_memory", _fake_measure(calls))
    assert memory.run(SimpleNamespace(sizes="1T,3K", json=False)) == 0
    assert calls == [(1 << 40, v) for v in ("global", "page", "atomic")] + [(3 << 10, v)
                                                                             for v in ("global", "page", "atomic")]
    headers = ["Backing size", "Global lk", "Page lk", "Atomic", "Posted (global / page / atomic)"]
    idle = [["1T", "256 B", "512 B", "1 KiB", "256 bytes / 256 B / 1 KB"], ["3K", "256 B", "512 B", "1 KiB", "-"]]
    peak = [["1T", "64.25 KiB", "128.5 KiB", "257 KiB", "64.25 KB / 64.25 KB / 257 KB"],
            ["3K", "64.25 KiB", "128.5 KiB", "257 KiB", "-"]]
    assert capsys.readouterr().out == (
        "Idle memory (no active bypass writes)\n" + format_table(headers, idle) + "\n\n"
        "Peak memory (tracking pages fully allocated)\n" + format_table(headers, peak) + "\n\n"
        "Lock variants: u16 counters, 16 B per page slot; atomic: u64 counters. 1 page = 4096 B.\n")


def test_memory_json_has_each_rows_size_variant_idle_and_peak_only(monkeypatch, capsys):
    import json
    monkeypatch.setattr(memory, "measure_memory", _fake_measure([]))
    assert memory.run(SimpleNamespace(sizes="1P", json=True)) == 0   # 1P: the largest size it measures
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert rows == [{"size_bytes": 1 << 50, "variant": v, "idle_bytes": 256 * k, "peak_bytes": 65_792 * k}
                    for v, k in (("global", 1), ("page", 2), ("atomic", 4))]


def test_memory_refuses_a_size_over_1p_by_its_label_before_measuring_anything(monkeypatch):
    calls = []
    monkeypatch.setattr(memory, "measure_memory", _fake_measure(calls))
    with pytest.raises(commands.UsageError) as err:
        memory.run(SimpleNamespace(sizes="1T,2P", json=False))
    assert str(err.value) == "--sizes: 2P is larger than the 1P this command measures"
    assert calls == []


def _check(name, passed, counterexample=()):
    return SimpleNamespace(name=name, passed=passed, figure=f"{name} fig", wall_s=1.25, detail=f"{name} detail",
                           counterexample=list(counterexample))


def _patch_result(checks, memory_rows=(), tsan=False):
    return SimpleNamespace(patch="fix.c", name="v3", tsan=tsan, checks=checks, wall_s=12.34,
                           memory=list(memory_rows), passed=all(c.passed for c in checks),
                           to_json=lambda: {"passed": all(c.passed for c in checks), "name": "v3"})


def _fake_check_patch(monkeypatch, result=None, exc=None):
    import pybcache.bcache.kpatch.check.runner

    seen = {}

    def fake(path, *, seconds, tsan, progress):
        seen.update(path=path, seconds=seconds, tsan=tsan)
        progress("semantics", 1, 7)
        if exc is not None:
            raise exc
        return result
    monkeypatch.setattr(pybcache.bcache.kpatch.check.runner, "check_patch", fake)
    return seen


def _cp_args(json=False, tsan=False):
    return SimpleNamespace(file="fix.c", seconds=2.0, tsan=tsan, json=json)


def test_check_patch_prints_each_check_and_exits_0_when_all_pass(monkeypatch, capsys):
    seen = _fake_check_patch(monkeypatch, _patch_result([_check("semantics", True, ["note one"]),
                                                         _check("race", True)]))
    assert check_patch.run(_cp_args(tsan=True)) == 0
    assert seen == {"path": "fix.c", "seconds": 2.0, "tsan": True}
    assert capsys.readouterr().out == (
        "check-patch fix.c (v3): 2 of 2 checks passed, 12.3 s\n"
        + format_table(["check", "result", "figure", "s"], [["semantics", "passed", "semantics fig", "1.2"],
                                                            ["race", "passed", "race fig", "1.2"]])
        + "\n\nsemantics: semantics detail\n  notes:\n     1. note one\n\nrace: race detail\n")


def test_check_patch_shows_a_failed_checks_counterexample_and_the_memory_table_and_exits_1(monkeypatch, capsys):
    mem = [{"size_bytes": 1 << 40, "idle_bytes": 256, "peak_bytes": 1024, "posted": {"page": ["256 B", "64 KB"]}},
           {"size_bytes": 10 << 40, "idle_bytes": 2560, "peak_bytes": 2048, "posted": {"atomic": ["1 KB", "2 KB"]}}]
    _fake_check_patch(monkeypatch, _patch_result([_check("semantics", True), _check("race", False, ["a", "b"])],
                                                 mem, tsan=True))
    assert check_patch.run(_cp_args()) == 1
    assert capsys.readouterr().out == (
        "check-patch fix.c (v3) under ThreadSanitizer: 1 of 2 checks passed, 12.3 s\n"
        + format_table(["check", "result", "figure", "s"], [["semantics", "passed", "semantics fig", "1.2"],
                                                            ["race", "FAILED", "race fig", "1.2"]])
        + "\n\nsemantics: semantics detail\n\nrace: race detail\n  counterexample:\n     1. a\n     2. b\n"
        + "\nmemory (bytes the patch allocated, beside the v2 cover letter's table)\n"
        + format_table(["backing size", "idle", "peak", "posted page lock idle / peak", "posted atomic idle / peak"],
                       [["1T", "256 B", "1 KiB", "256 B / 64 KB", "- / -"],
                        ["10T", "2.5 KiB", "2 KiB", "- / -", "1 KB / 2 KB"]]) + "\n")


@pytest.mark.parametrize("passed, status", [(True, 0), (False, 1)])
def test_check_patch_json_is_the_results_json_and_the_status_its_verdict(monkeypatch, capsys, passed, status):
    import json
    _fake_check_patch(monkeypatch, _patch_result([_check("semantics", passed)]))
    assert check_patch.run(_cp_args(json=True)) == status
    assert json.loads(capsys.readouterr().out) == {"passed": passed, "name": "v3"}


def test_a_patch_that_does_not_compile_is_the_compilers_lines_on_stderr_and_status_2(monkeypatch, capsys):
    from pybcache.bcache.kpatch.load import PatchCompileError
    _fake_check_patch(monkeypatch, exc=PatchCompileError("fix.c: the C compiler failed", "fix.c:1: error: x"))
    assert check_patch.run(_cp_args()) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err == "pybcache check-patch: error: fix.c: the C compiler failed\nfix.c:1: error: x\n"


@pytest.mark.parametrize("exc_type", ["PatchLoadError", "ValueError"])
def test_a_patch_that_cannot_be_loaded_or_a_bad_value_is_a_usage_error(monkeypatch, exc_type):
    import pybcache.bcache.kpatch.check.runner
    exc = getattr(pybcache.bcache.kpatch.check.runner, exc_type, ValueError)("fix.c: no PYBCACHE_PATCH")
    _fake_check_patch(monkeypatch, exc=exc)
    with pytest.raises(commands.UsageError) as err:
        check_patch.run(_cp_args())
    assert str(err.value) == "fix.c: no PYBCACHE_PATCH"


def test_memory_names_the_sizes_option_in_a_bad_size(monkeypatch):
    calls = []
    monkeypatch.setattr(memory, "measure_memory", _fake_measure(calls))
    with pytest.raises(commands.UsageError) as err:
        memory.run(SimpleNamespace(sizes="1T,bogus", json=False))
    assert str(err.value) == "--sizes: 'bogus' is not a size (use e.g. 512, 4K, 32M, 10G, 1T)"
    assert calls == []


@pytest.mark.parametrize("as_json", [False, True])
def test_memory_counts_its_progress_in_measurements_and_keeps_quiet_with_json(monkeypatch, capsys, as_json):
    seen = []

    def progress(items, *, total=None, desc="", quiet=False):
        seen.append((total, desc, quiet))
        return items
    monkeypatch.setattr(memory, "progress", progress)
    monkeypatch.setattr(memory, "measure_memory", _fake_measure([]))
    assert memory.run(SimpleNamespace(sizes="1T,10T", json=as_json)) == 0
    assert seen == [(6, "memory", as_json)]   # 2 sizes x 3 variants


@pytest.mark.parametrize("as_json", [False, True])
def test_check_patch_names_its_bar_after_the_file_counts_checks_and_keeps_quiet_with_json(monkeypatch, capsys,
                                                                                         as_json):
    import contextlib
    bar = SimpleNamespace(n=0, postfix=None)
    bar.set_postfix_str = lambda text: setattr(bar, "postfix", text)
    seen = []

    @contextlib.contextmanager
    def status_bar(desc, *, total=None, quiet=False):
        seen.append((desc, total, quiet))
        yield bar
    monkeypatch.setattr(check_patch, "status_bar", status_bar)
    _fake_check_patch(monkeypatch, _patch_result([_check("semantics", True)]))   # reports ("semantics", 1, 7)
    check_patch.run(_cp_args(json=as_json))
    assert seen == [("check-patch fix.c", 7, as_json)]
    assert (bar.n, bar.postfix) == (1, "semantics")


# ---------------------------------------------------------------------------------------- bench.run (faked)


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


# -------------------------------------------------------------------------------------- explore.run (faked)

_EXPLORE_COUNTS = ("stale_read_schedules", "stale_cache_schedules", "bypass_schedules", "restart_schedules",
                   "restart_capped_schedules", "untracked_schedules", "underflow_schedules", "wrap_schedules",
                   "blocked_schedules", "stuck_schedules")


def _fake_explore(monkeypatch, outcomes=None, exc=None):
    """explore() stood in for: each call returns the next outcome (a dict of counts; the config it was given is
    echoed back); the wall clock ticks 1.5 s per call."""
    import pybcache.bcache.cachedev
    calls = []
    ticks = iter(range(1000))
    monkeypatch.setattr(explore, "time", SimpleNamespace(perf_counter=lambda: 0.75 * next(ticks)))

    def fake(**kw):
        calls.append(kw)
        if exc is not None:
            raise exc
        o = dict(outcomes[len(calls) - 1])
        config = {k: v for k, v in kw.items() if k not in ("max_schedules", "progress")}
        counts = {k: o.pop(k, 0) for k in _EXPLORE_COUNTS}
        return dict(counts, config=config, report_schedules=o.pop("report", 0), schedules=o.pop("schedules", 10),
                    violations=o.pop("violations", 0), counterexample=o.pop("counterexample", []),
                    finished=o.pop("finished", True), partial_violation_schedules=o.pop("partial", 0))
    monkeypatch.setattr(pybcache.bcache.cachedev, "explore", fake)
    return calls


def _explore_run(*argv):
    return explore.run(commands.build_parser().parse_args(["explore", *argv]))


def _explore_table(rows):
    return format_table(["bound", "schedules", "violations", "stale reads", "stale cached", "bypassing", "restarted",
                         "cut at max restarts", "untracked", "underflow", "wrapped", "blocked", "stuck", "complete",
                         "wall s", "workers"], rows)


def test_explore_runs_each_bound_and_prints_the_config_the_table_and_no_violation(monkeypatch, capsys):
    from pybcache.bcache.cachedev import EXPLORER_SEMANTICS
    calls = _fake_explore(monkeypatch, [{"schedules": 1234, "bypass_schedules": 5, "finished": False},
                                        {"schedules": 20, "restart_schedules": 2}])
    assert _explore_run("--bounds", "1w1r,2w1r", "--max-schedules", "7", "--check", "entry") == 0
    assert [(c["writes"], c["reads"], c["max_schedules"], c["check"]) for c in calls] == [(1, 1, 7, "entry"),
                                                                                       (2, 1, 7, "entry")]
    assert all(callable(c["progress"]) for c in calls)
    assert capsys.readouterr().out == (
        "explore: sync=page check=entry restart=on granularity=chunk alloc_failure=hijack fault_at=0 overflow=wait "
        "counter_bits=None preload=0 reclaims=0 max_restarts=3 reduction=sleep sets\n"
        f"checks {EXPLORER_SEMANTICS}\n"
        + _explore_table([["1w1r", "1,234", "0", "0", "0", "5", "0", "0", "0", "0", "0", "0", "0", "no", "0.75", "-"],
                          ["2w1r", "20", "0", "0", "0", "0", "2", "0", "0", "0", "0", "0", "0", "yes", "0.75", "-"]])
        + "\n\nno violation in any schedule\n")


def test_explore_prints_the_first_counterexample_and_the_cut_and_stuck_schedules(monkeypatch, capsys):
    calls = _fake_explore(monkeypatch, [
        {"schedules": 3, "restart_capped_schedules": 1, "partial": 1},
        {"schedules": 40, "violations": 2, "stale_read_schedules": 2, "stuck_schedules": 1500, "partial": 1000,
         "counterexample": ["w0 start", "r0 read"]},
        {"schedules": 50, "violations": 1, "counterexample": ["never shown"]}])
    assert _explore_run("--bounds", "1w1r,2w1r,1w2r", "--no-restart", "--no-reduce", "--granularity", "page",
                        "--alloc-failure", "pool", "--overflow", "clamp", "--counter-bits", "16", "--preload", "3",
                        "--reclaims", "1", "--max-restarts", "0", "--fault-at", "2") == 0
    assert calls[0]["reclaims"] == 1 and calls[0]["counter_bits"] == 16
    out = capsys.readouterr().out
    assert out.startswith(
        "explore: sync=page check=after restart=OFF granularity=page alloc_failure=pool fault_at=2 overflow=clamp "
        "counter_bits=16 preload=3 reclaims=1 max_restarts=0 reduction=none\n")
    assert out.endswith(
        "\n\n1 schedule(s) cut at max restarts and 1,500 stuck are counted in schedules and judged on the reads that "
        "returned before the end (1,001 violation(s) among them); only their check at quiescence is skipped\n"
        "\nfirst counterexample (2w1r):\n   1. w0 start\n   2. r0 read\n")


def test_a_scenario_replaces_the_bounds(monkeypatch, capsys):
    import json
    calls = _fake_explore(monkeypatch, [{"schedules": 3}])
    assert _explore_run("--scenario", "2w1r", "--json", "--bounds", "1w1r,1w2r") == 0
    assert [(c["writes"], c["reads"]) for c in calls] == [(2, 1)]
    assert [r["bound"] for r in json.loads(capsys.readouterr().out)["runs"]] == ["2w1r"]


def test_explore_json_sums_the_bounds_and_keeps_the_first_counterexample(monkeypatch, capsys):
    import json
    from pybcache.bcache.cachedev import EXPLORER_SEMANTICS
    _fake_explore(monkeypatch, [{"schedules": 3, "report": 1},
                                {"schedules": 40, "violations": 2, "report": 2, "counterexample": ["a"]},
                                {"schedules": 50, "violations": 1, "counterexample": ["b"], "finished": False}])
    assert _explore_run("--json") == 0
    out = json.loads(capsys.readouterr().out)
    runs = out.pop("runs")
    assert out == {"sync": "page", "kernel_report_schedules": 3, "schedules": 93, "violations": 3,
                   "counterexample": ["a"], "counterexample_bound": "2w1r", "finished": False,
                   "semantics": EXPLORER_SEMANTICS}
    assert [(r["bound"], r["wall_s"]) for r in runs] == [("1w1r", 0.75), ("2w1r", 0.75), ("1w2r", 0.75)]


def test_explore_json_with_nothing_found_and_every_bound_finished(monkeypatch, capsys):
    import json
    _fake_explore(monkeypatch, [{}, {}, {}])
    assert _explore_run("--json") == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["counterexample"], out["counterexample_bound"], out["finished"]) == (None, None, True)


@pytest.mark.parametrize("exc, line", [(TimeoutError("the patch hung in write_start"), "the patch hung in write_start"),
                                       (RuntimeError("child died"), "child died")])
def test_a_hung_or_failed_search_is_one_line_on_stderr_and_status_1(monkeypatch, capsys, exc, line):
    _fake_explore(monkeypatch, exc=exc)
    assert _explore_run() == 1
    out = capsys.readouterr()
    assert out.out == "" and out.err == f"pybcache explore: {line}\n"


def test_a_refused_configuration_is_a_usage_error_with_its_message(monkeypatch):
    _fake_explore(monkeypatch, exc=ValueError("counter_max: must be in [1, 65535], got 70000"))
    with pytest.raises(commands.UsageError) as err:
        _explore_run()
    assert str(err.value) == "counter_max: must be in [1, 65535], got 70000"


@pytest.mark.parametrize("argv, message", [
    (["--workers", "2"], "--workers: only with --distributed"),
    (["--scheduler", "tcp://h:1", "--workers", "2"], "--scheduler: only with --distributed"),
    (["--distributed", "--max-schedules", "5"],
     "--max-schedules: not with --distributed (a cap has no meaning once the tree is split)"),
    (["--distributed", "--scheduler", "tcp://h:1", "--workers", "2"],
     "--workers: only for the embedded cluster, not with --scheduler"),
    (["--hung-timeout", "1"], "--hung-timeout: applies to a patch (--sync PATCH.c), not to the lab's trackers"),
    (["--bounds", "1w1r,4w3r", "--reclaims", "2"],
     "--reclaims: writes + reads + reclaims must be at most 8, got 4w3r + 2"),
])
def test_explore_refuses_option_combinations_by_name_before_searching_further(monkeypatch, argv, message):
    calls = _fake_explore(monkeypatch, [{}, {}])
    with pytest.raises(commands.UsageError) as err:
        _explore_run(*argv)
    assert str(err.value) == message
    assert len(calls) == (1 if "--reclaims" in argv else 0)


def test_seven_operations_and_one_reclaim_are_allowed(monkeypatch):
    calls = _fake_explore(monkeypatch, [{}])
    assert _explore_run("--bounds", "4w3r", "--reclaims", "1", "--json") == 0
    assert calls[0]["reclaims"] == 1


def test_explore_with_one_bound_and_a_cut_schedule_only_says_so_and_hands_its_progress_to_the_bar(monkeypatch,
                                                                                               capsys):
    calls = _fake_explore(monkeypatch, [{"schedules": 4, "restart_capped_schedules": 2}])
    seen = []
    monkeypatch.setattr(explore, "progress", lambda it, *, total, desc, quiet: seen.append((it, total, desc, quiet)))
    assert _explore_run("--bounds", "4w4r") == 0   # 8 operations and no reclaim: allowed
    calls[0]["progress"](3, 9)
    assert seen == [(3, 9, "explore 4w4r", False)]
    out = capsys.readouterr().out
    assert "reclaims=0 max_restarts=3" in out.splitlines()[0]
    assert ("\n2 schedule(s) cut at max restarts and 0 stuck are counted in schedules and judged on the reads "
            "that returned before the end (0 violation(s) among them)") in out


def _fake_patch(monkeypatch):
    patch = SimpleNamespace(name="v3", path="/p/fix.c")
    monkeypatch.setattr(explore, "load_sync", lambda sync, syncs: patch if sync == "fix.c" else sync)
    return patch


@pytest.mark.parametrize("option", [["--alloc-failure", "pool"], ["--granularity", "page"], ["--reclaims", "0"],
                                    ["--overflow", "wrap"], ["--counter-bits", "16"], ["--counter-max", "3"],
                                    ["--preload", "0"]])
def test_a_patch_refuses_each_lab_only_option_by_name(monkeypatch, option):
    _fake_patch(monkeypatch)
    calls = _fake_explore(monkeypatch, [{}])
    with pytest.raises(commands.UsageError) as err:
        _explore_run("--sync", "fix.c", *option)
    name = " ".join(option) if option[0] == "--granularity" else option[0]
    assert str(err.value).startswith(f"{name}: ") and calls == []


def test_a_patch_is_explored_with_chunk_granularity_and_named_with_its_kernel_reports(monkeypatch, capsys):
    from pybcache.bcache.cachedev import EXPLORER_SEMANTICS
    patch = _fake_patch(monkeypatch)
    calls = _fake_explore(monkeypatch, [{"schedules": 5, "report": 1234}])
    assert _explore_run("--sync", "fix.c", "--bounds", "1w1r", "--granularity", "chunk", "--no-restart",
                        "--hung-timeout", "2") == 0
    assert calls[0]["sync"] is patch and calls[0]["hung_timeout"] == 2.0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == ("explore: sync=v3 (/p/fix.c) (a fresh instance per schedule; its write_start, write_end and "
                        "read_bypass one step each) check=after restart=OFF fault_at=0 max_restarts=3 "
                        "reduction=sleep sets; schedules with a kernel report: 1,234")
    assert lines[1] == f"checks {EXPLORER_SEMANTICS}"


def test_a_patch_explored_without_reduction_says_none(monkeypatch, capsys):
    _fake_patch(monkeypatch)
    _fake_explore(monkeypatch, [{}])
    assert _explore_run("--sync", "fix.c", "--bounds", "1w1r", "--no-reduce") == 0
    assert capsys.readouterr().out.splitlines()[0].endswith(
        "check=after restart=on fault_at=0 max_restarts=3 reduction=none; schedules with a kernel report: 0")


def _fake_cluster(monkeypatch, available=True):
    """dask stood in for: the client factory records its arguments; explore_distributed echoes its config."""
    import contextlib

    import pybcache.dist.cluster
    import pybcache.dist.explore
    seen = {"clients": [], "runs": []}
    client = object()

    @contextlib.contextmanager
    def client_for(*, scheduler, workers):
        seen["clients"].append((scheduler, workers))
        yield client

    def explore_distributed(*, client: object, tasks_per_worker: int, **config):
        seen["runs"].append((client, tasks_per_worker, config))
        return {"config": config, "report_schedules": 0, "schedules": 6, "violations": 0, "counterexample": [],
                "finished": True, "partial_violation_schedules": 0, "distributed": {"workers": 3},
                **{k: 0 for k in _EXPLORE_COUNTS}}
    monkeypatch.setattr(pybcache.dist.cluster, "dask_available", lambda: available)
    monkeypatch.setattr(pybcache.dist.cluster, "client_for", client_for)
    monkeypatch.setattr(pybcache.dist.explore, "explore_distributed", explore_distributed)
    return seen, client


def test_a_distributed_search_checks_each_bound_once_locally_then_hands_it_to_the_cluster(monkeypatch, capsys):
    checks = _fake_explore(monkeypatch, [{}, {}])
    seen, client = _fake_cluster(monkeypatch)
    assert _explore_run("--distributed", "--bounds", "1w1r,2w1r", "--workers", "2", "--tasks-per-worker", "5") == 0
    assert [(c["writes"], c["reads"], c["max_schedules"]) for c in checks] == [(1, 1, 1), (2, 1, 1)]
    assert seen["clients"] == [(None, 2)]
    assert [(cl is client, t, cfg["writes"], cfg["reads"], cfg["sync"]) for cl, t, cfg in seen["runs"]] == [
        (True, 5, 1, 1, "page"), (True, 5, 2, 1, "page")]
    table = capsys.readouterr().out.split("\n\n")[0].splitlines()[-2:]
    assert [row.split()[-1] for row in table] == ["3", "3"]   # the workers column


def test_a_distributed_search_on_a_given_scheduler_starts_no_workers(monkeypatch, capsys):
    _fake_explore(monkeypatch, [{}])
    seen, _ = _fake_cluster(monkeypatch)
    assert _explore_run("--distributed", "--scheduler", "tcp://h:1", "--bounds", "1w1r") == 0
    assert seen["clients"] == [("tcp://h:1", None)]


def test_a_distributed_search_without_dask_is_a_usage_error_naming_the_extra(monkeypatch):
    calls = _fake_explore(monkeypatch, [{}])
    _fake_cluster(monkeypatch, available=False)
    with pytest.raises(commands.UsageError) as err:
        _explore_run("--distributed")
    assert str(err.value) == ("--distributed: dask.distributed is not installed: "
                              "pip install 'pybcache[distributed]'")
    assert calls == []
