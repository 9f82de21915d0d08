"""``pybcache writeback`` (``pybcache/commands/writeback.py``): the cover-letter, flush, churn and sensitivity rows,
and its run. The experiment it starts is stood in for (no subprocess, no C model): these tests state what the
command hands on, prints, writes as JSON and returns for given arguments and results."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from pybcache.commands import writeback
from pybcache._console import format_table

from helpers.command_stand_ins import _args, _recording_progress


_WB_KEYS = ("background_write_gib", "foreground_bandwidth_mib_s", "foreground_completion_s",
            "foreground_mean_latency_ms")


def _wb_flushes(k):
    return {"foreign_flushes_per_run": 10.0 * k, "pages_written_per_run": 512.0 * k, "pages_per_flush": 51.2,
            "mib_per_flush": 0.2, "pages_by_target_per_run": {"sdb": 256.0 * k},
            "background_file_gib_by_writer_per_run": {"periodic": 0.5 * k}, "throttle_events_per_run": 3.0 * k,
            "bdev_skipped_busy_per_run": 0.0}


def _wb_result():
    base = dict(zip(_WB_KEYS, (6.0, 150.0, 100.0, 200.0)))
    pat = dict(zip(_WB_KEYS, (2.0, 180.0, 90.0, 170.0)))
    change = dict(zip(_WB_KEYS, (-66.7, 20.0, -10.0, -15.0)))
    doc = {"baseline": base, "patched": pat, "flushes": {"baseline": _wb_flushes(1), "patched": _wb_flushes(2)}}
    return SimpleNamespace(baseline=base, patched=pat, change_percent=change, as_dict=lambda: dict(doc))


def _wb_churn(k):
    return SimpleNamespace(as_dict=lambda: {
        "device_incarnations": 3 + k, "flushes": 40 + k, "stale_flushes": 5 * k, "stale_pages": 100 * k,
        "skipped_absent": 1, "skipped_removed": 2, "skipped_closed": 6, "skipped_busy": 7, "release_delayed": 8,
        "release_delay_mean_s": 0.125, "release_delay_max_s": 2.5, "still_pinned_at_end": 9,
        "pinned_device_seconds": 12.34, "deferred_puts": 11})


def _fake_writeback(monkeypatch):
    import pybcache.writeback
    seen = {"runs": [], "churn": [], "sensitivity": []}

    def run_experiment(runs, seed, *, wrap):
        seen["runs"].append((runs, seed, list(wrap(iter(range(runs))))))
        return _wb_result()

    def compare_churn(*, seed):
        seen["churn"].append(seed)
        return {"bdev-devt": _wb_churn(1), "bdev-ref": _wb_churn(0)}

    def run_sensitivity(runs, seed, *, wrap):
        seen["sensitivity"].append((runs, seed, list(wrap(iter(range(2))))))
        row = {"name": "hz=1000", "verdict": "holds", "baseline": _wb_result().baseline,
               "patched": _wb_result().patched, "change_percent": _wb_result().change_percent}
        return SimpleNamespace(as_dict=lambda: {"rows": [row]}, summary="it holds")
    monkeypatch.setattr(pybcache.writeback, "run_experiment", run_experiment)
    monkeypatch.setattr(pybcache.writeback, "compare_churn", compare_churn)
    monkeypatch.setattr(pybcache.writeback, "run_sensitivity", run_sensitivity)
    monkeypatch.setattr(pybcache.writeback, "summary_text", lambda result: result.summary)
    monkeypatch.setattr(pybcache.writeback, "SENSITIVITY", ("a", "b", "c"))
    ticks = iter((100.0, 103.25))
    monkeypatch.setattr(writeback, "time", SimpleNamespace(perf_counter=lambda: next(ticks)))
    return seen


def test_writeback_runs_three_runs_of_seed_0_and_prints_the_table_and_the_flushes(monkeypatch, capsys):
    seen = _fake_writeback(monkeypatch)
    assert writeback.run(_args("writeback")) == 0
    assert [r[:2] for r in seen["runs"]] == [(3, 0)] and seen["churn"] == [] and seen["sensitivity"] == []
    doc = _wb_result().as_dict()
    assert capsys.readouterr().out == (
        "memcg foreign-bdev writeback (v6): mean of 3 simulated run(s) per kernel, seed 0\n"
        "baseline = owner-wb foreign flushes (today), patched = bdev-mapping flushes (the series)\n\n"
        + format_table(["Metric", "Baseline", "Patched", "Change", "Posted change"], writeback._rows(_wb_result()))
        + "\n\n" + format_table(["Foreign flushes (per run)", "Baseline", "Patched"],
                                writeback._flush_rows(doc["flushes"]))
        + "\n\nwall time 3.2 s\n")


def test_writeback_with_churn_compares_the_two_records_on_the_same_seed(monkeypatch, capsys):
    seen = _fake_writeback(monkeypatch)
    assert writeback.run(_args("writeback", "--churn", "--runs", "2", "--seed", "9")) == 0
    assert [r[:2] for r in seen["runs"]] == [(2, 9)] and seen["churn"] == [9]
    out = capsys.readouterr().out
    churn = {"bdev-devt": _wb_churn(1).as_dict(), "bdev-ref": _wb_churn(0).as_dict()}
    assert out.startswith("memcg foreign-bdev writeback (v6): mean of 2 simulated run(s) per kernel, seed 9\n")
    assert out.endswith(
        "\n\ndev_t reuse churn (devices removed and re-created with the same dev_t):\n"
        + format_table(["Churn", "dev_t records (series)", "device references (reviewer)"],
                       writeback._churn_rows(churn)) + "\n\nwall time 3.2 s\n")


def test_writeback_json_is_the_result_with_the_churn_and_the_wall_time(monkeypatch, capsys):
    _fake_writeback(monkeypatch)
    assert writeback.run(_args("writeback", "--json", "--churn")) == 0
    churn = {"bdev-devt": _wb_churn(1).as_dict(), "bdev-ref": _wb_churn(0).as_dict()}
    assert json.loads(capsys.readouterr().out) == dict(_wb_result().as_dict(), churn=churn, wall_seconds=3.25)
    _fake_writeback(monkeypatch)
    writeback.run(_args("writeback", "--json"))
    assert "churn" not in json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("as_json", [False, True])
def test_writeback_counts_its_progress_in_runs_and_keeps_quiet_with_json(monkeypatch, capsys, as_json):
    bars = _recording_progress(monkeypatch, writeback)
    seen = _fake_writeback(monkeypatch)
    writeback.run(_args("writeback", "--runs", "4", *(["--json"] if as_json else [])))
    assert bars == [([0, 1, 2, 3], 4, "writeback runs", as_json)] and seen["runs"][0][2] == []


def test_writeback_sensitivity_runs_one_run_per_perturbation_and_prints_the_changes(monkeypatch, capsys):
    seen = _fake_writeback(monkeypatch)
    assert writeback.run(_args("writeback", "--sensitivity", "--seed", "4")) == 0
    assert [s[:2] for s in seen["sensitivity"]] == [(1, 4)] and seen["runs"] == []
    row = {"name": "hz=1000", "verdict": "holds", "baseline": _wb_result().baseline,
           "patched": _wb_result().patched, "change_percent": _wb_result().change_percent}
    assert capsys.readouterr().out == (
        "memcg foreign-bdev writeback (v6) sensitivity: 1 simulated run(s) per kernel and row, seed 4; "
        "change = patched vs baseline\n\n"
        + format_table(["Perturbation", "Background GiB base / patched", "Change", "Foreground MiB/s base / patched",
                        "Change", "Completion", "Latency", "Effect"], writeback._sensitivity_rows([row]))
        + "\n\nit holds\n\nwall time 3.2 s\n")


@pytest.mark.parametrize("as_json", [False, True])
def test_writeback_sensitivity_counts_its_progress_in_perturbations_and_its_json_has_the_wall_time(
        monkeypatch, capsys, as_json):
    bars = _recording_progress(monkeypatch, writeback)
    seen = _fake_writeback(monkeypatch)
    assert writeback.run(_args("writeback", "--sensitivity", "--runs", "2", *(["--json"] if as_json else []))) == 0
    assert bars == [([0, 1], 3, "sensitivity", as_json)] and seen["sensitivity"][0][:2] == (2, 0)
    if as_json:
        doc = json.loads(capsys.readouterr().out)
        assert doc["wall_seconds"] == 3.25 and doc["rows"][0]["name"] == "hz=1000"


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
