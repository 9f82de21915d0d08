"""The report's writeback section (``pybcache/report/writeback.py``).

The experiments the section runs are stood in for (``monkeypatch``); the tests check the Markdown it writes
(figures formatted as stated, verdicts that follow the figures), the results it stores, the plots it asks for
(the data handed to the plot function and the file named, not pixels) and what it hands on to the experiments.
Fast: no experiment, no real plot, no subprocess."""
from __future__ import annotations

import types

import pytest

import pybcache.writeback as writeback_pkg
from pybcache.report import writeback as rwb
from pybcache.units import GiB, MiB

from helpers.report_stand_ins import _Result, _churn, _ctx, _layout, _metrics


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
