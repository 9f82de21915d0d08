"""``run_sensitivity`` and ``pybcache writeback --sensitivity``: rows, verdicts from measured figures, the
summary derived from the rows, bad input."""
from __future__ import annotations

import json
import re
import time

import pytest

import pybcache.writeback as wb
from pybcache.commands import writeback as command
from pybcache.writeback import (FOREGROUND_GAIN_PERCENT, HOLDS_PERCENT, SENSITIVITY, VANISHES_PERCENT,
                                Perturbation, Scenario, SensitivityResult, run_experiment, run_once,
                                run_sensitivity, summary_text, verdict)
from pybcache.validate import range_text
from pybcache.writeback import sensitivity
from pybcache.writeback.model import MiB
from pybcache.writeback.sensitivity import QUICK_SENSITIVITY

from test_writeback_cli import METRIC_KEYS, _parser

GiB = 1 << 30
SMALL = Scenario(foreground_total=2 * GiB)     # long enough for the memcgs to be throttled (about 5 s in)
OWN_MEMCG = Perturbation.of("background job in its own memcg", background_in_root=False)
PAIR = (Perturbation.of("defaults"), OWN_MEMCG)


@pytest.fixture(scope="module")
def small_result() -> SensitivityResult:
    return run_sensitivity(1, 0, SMALL, perturbations=PAIR)


def test_each_row_has_its_params_and_the_four_changes_of_the_table(small_result):
    assert [row["name"] for row in small_result.rows] == [p.name for p in PAIR]
    assert small_result.rows[1]["params"] == {"background_in_root": False}
    for row in small_result.rows:
        assert set(row["change_percent"]) == METRIC_KEYS
        assert set(row["baseline"]) == set(row["patched"]) == METRIC_KEYS
        assert row["verdict"] == verdict(row["change_percent"])
    doc = json.loads(json.dumps(small_result.as_dict()))
    assert doc["thresholds"]["holds_background_reduction_percent"] == HOLDS_PERCENT


def test_the_unperturbed_row_is_the_experiment_itself(small_result):
    assert small_result.rows[0]["change_percent"] == run_experiment(1, 0, SMALL).change_percent
    assert small_result.rows[0]["change_percent"]["background_write_gib"] <= -VANISHES_PERCENT


def test_with_the_background_job_in_its_own_memcg_the_effect_vanishes_because_root_flushes_cannot_reach_it(
        small_result):
    baseline = run_once("owner-wb", OWN_MEMCG.apply(SMALL))
    assert baseline.flushes["foreign_flushes"] > 0                   # the memcgs still flush root's wb...
    assert "background file" not in baseline.flushes["pages_by_target"]   # ...which no longer holds the file
    row = small_result.rows[1]
    assert abs(row["change_percent"]["background_write_gib"]) < VANISHES_PERCENT
    assert row["verdict"] == "vanishes"


def test_verdicts_follow_the_stated_thresholds():
    def change(background: float) -> dict[str, float]:
        return dict.fromkeys(METRIC_KEYS, 0.0) | {"background_write_gib": background}
    assert verdict(change(-HOLDS_PERCENT)) == "holds"
    assert verdict(change(-HOLDS_PERCENT + 0.1)) == "weakened"
    assert verdict(change(-VANISHES_PERCENT)) == "weakened"
    assert verdict(change(-VANISHES_PERCENT + 0.1)) == "vanishes"
    assert verdict(change(+20.0)) == "vanishes"


def test_the_summary_names_the_rows_below_each_threshold_from_their_figures():
    def row(name: str, background: float, foreground: float) -> dict:
        ch = {"background_write_gib": background, "foreground_bandwidth_mib_s": foreground,
              "foreground_completion_s": 0.0, "foreground_mean_latency_ms": 0.0}
        return {"name": name, "params": {}, "change_percent": ch, "verdict": verdict(ch)}
    result = SensitivityResult(1, 0, Scenario(), [row("a", -80.0, 20.0), row("b", -30.0, 2.0),
                                                  row("c", 1.5, 0.0)])
    text = summary_text(result)
    assert "1 of 3 rows" in text
    assert "weakened" in text and "b (-30.0 %)" in text
    assert "vanishes" in text and "c (+1.5 %)" in text
    assert f"under {FOREGROUND_GAIN_PERCENT:g} % in: b (+2.0 %); c (+0.0 %)" in text
    assert "a (" not in text


def test_the_full_set_covers_every_perturbation_the_issue_names():
    fields = {name for p in SENSITIVITY for name, _ in p.params}
    assert {"device_bandwidth", "foreground_iodepth", "wbt_normal_depth", "dirty_expire_centisecs",
            "cgroup_memory_max", "cgroup_ops_rate", "background_in_root", "cgroups"} <= fields
    assert SENSITIVITY[0].params == ()
    assert len({p.name for p in SENSITIVITY}) == len(SENSITIVITY)
    for p in SENSITIVITY:
        p.apply(Scenario())                         # every row is a valid scenario


@pytest.mark.parametrize("kwargs, exc, word", [
    ({"runs": 0}, ValueError, "runs"),
    ({"seed": -1}, ValueError, "seed"),
    ({"scenario": "default"}, TypeError, "scenario"),
    ({"perturbations": ()}, ValueError, "perturbations"),
    ({"perturbations": ("defaults",)}, TypeError, "perturbations"),
    ({"perturbations": (Perturbation.of("bad", cgroups=-1),)}, ValueError, "cgroups"),
    ({"wrap": 3}, TypeError, "wrap"),
])
def test_bad_arguments_are_refused_before_anything_runs(kwargs, exc, word):
    with pytest.raises(exc, match=word):
        run_sensitivity(**kwargs)


def test_scenario_refuses_bad_new_fields_by_name():
    with pytest.raises(ValueError, match="dirty_expire_centisecs"):
        Scenario(dirty_expire_centisecs=0)
    with pytest.raises(TypeError, match="background_in_root"):
        Scenario(background_in_root=1)


@pytest.fixture
def small_command(monkeypatch):
    """The command on the two-row set and the short scenario (the full set takes tens of seconds)."""
    real = wb.run_sensitivity
    monkeypatch.setattr(wb, "run_sensitivity",
                        lambda runs, seed, wrap=None: real(runs, seed, SMALL, perturbations=PAIR, wrap=wrap))


def test_command_json_has_one_row_per_perturbation_with_the_four_changes(small_command, capsys):
    args = _parser().parse_args(["writeback", "--sensitivity", "--json"])
    assert command.run(args) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [row["name"] for row in doc["rows"]] == [p.name for p in PAIR]
    for row in doc["rows"]:
        assert {"name", "params", "change_percent"} <= set(row) and set(row["change_percent"]) == METRIC_KEYS
    assert doc["runs"] == command.DEFAULT_SENSITIVITY_RUNS == 1


def test_command_text_prints_a_row_each_and_the_derived_summary(small_command, capsys):
    args = _parser().parse_args(["writeback", "--sensitivity", "--runs", "1"])
    assert command.run(args) == 0
    out = capsys.readouterr().out
    assert "defaults" in out and "background job in its own memcg" in out
    assert "vanishes (under" in out and f"at least {HOLDS_PERCENT:g} %" in out


@pytest.mark.parametrize("args", [["--sensitivity", "--churn"], ["--sensitivity", "--runs", "0"],
                                  ["--sensitivity=yes"]], ids=" ".join)
def test_hostile_sensitivity_arguments_exit_2_with_one_line(args, capsys):
    with pytest.raises(SystemExit) as exc:
        _parser().parse_args(["writeback", *args])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_sensitivity_plot_is_a_png(tmp_path, small_result):
    from pybcache.report import plots
    path = plots.plot_writeback_sensitivity(small_result.rows, str(tmp_path / "s.png"),
                                            holds_percent=HOLDS_PERCENT, vanishes_percent=VANISHES_PERCENT)
    with open(path, "rb") as fh:
        assert fh.read(8) == b"\x89PNG\r\n\x1a\n"


# A scenario small enough for a run in tens of milliseconds that still throttles its memcgs (a small
# memory.max, a high op rate), so the two mechanisms differ: the baseline's foreign flushes write the
# background file, the series' only the bdev mapping.
TINY = Scenario(foreground_total=256 * MiB, cgroups=2, background_file_size=16 * MiB, dirtyable_memory=64 * MiB,
                memory=1 * GiB, cgroup_memory_max=1 * MiB, cgroup_ops_rate=500.0)


# Smaller still, where nothing throttles (the pair's runs give the same figures).
QUIET = TINY.replace(foreground_total=16 * MiB, cgroup_ops_rate=1.0)


def _message(name: str, lo, hi=None, *, open_low: bool = False) -> str:
    return "^" + re.escape(f"{name} must be in {range_text(lo, hi, open_low=open_low)}")


def test_the_thresholds_are_the_documented_ones():
    assert (HOLDS_PERCENT, VANISHES_PERCENT, FOREGROUND_GAIN_PERCENT) == (50.0, 10.0, 5.0)
    assert verdict({"background_write_gib": -50.0}) == "holds"
    assert verdict({"background_write_gib": -49.9}) == "weakened"
    assert verdict({"background_write_gib": -10.0}) == "weakened"
    assert verdict({"background_write_gib": -9.9}) == "vanishes"


def test_a_perturbation_sorts_its_fields_and_applies_them():
    p = Perturbation.of(7, hz=1000, cpus=2)
    assert p.name == "7" and p.params == (("cpus", 2), ("hz", 1000))
    assert p.apply(Scenario()) == Scenario(cpus=2, hz=1000)
    assert Perturbation("x").params == () and Perturbation("x").apply(TINY) == TINY


def test_each_perturbation_is_named_after_what_it_sets():
    assert [(p.name, dict(p.params)) for p in SENSITIVITY] == [
        ("defaults", {}),
        ("device bandwidth 100 MiB/s", {"device_bandwidth": 100 * MiB}),
        ("device bandwidth 400 MiB/s", {"device_bandwidth": 400 * MiB}),
        ("foreground iodepth 8", {"foreground_iodepth": 8}),
        ("foreground iodepth 128", {"foreground_iodepth": 128}),
        ("wbt depths halved (4 / 2)", {"wbt_normal_depth": 4, "wbt_background_depth": 2}),
        ("wbt depths doubled (16 / 8)", {"wbt_normal_depth": 16, "wbt_background_depth": 8}),
        ("dirty expiry 15 s", {"dirty_expire_centisecs": 1500}),
        ("dirty expiry 60 s", {"dirty_expire_centisecs": 6000}),
        ("memory.max 64 MiB", {"cgroup_memory_max": 64 * MiB}),
        ("op rate 32/s", {"cgroup_ops_rate": 32.0}),
        ("memory.max 64 MiB and op rate 32/s", {"cgroup_memory_max": 64 * MiB, "cgroup_ops_rate": 32.0}),
        ("background job in its own memcg", {"background_in_root": False}),
        ("1 memcg", {"cgroups": 1}),
        ("8 memcgs", {"cgroups": 8})]
    assert [(p.name, dict(p.params)) for p in QUICK_SENSITIVITY] == [
        ("defaults", {}), ("foreground iodepth 128", {"foreground_iodepth": 128}),
        ("background job in its own memcg", {"background_in_root": False})]


def _row(name: str, background: float, foreground: float) -> dict:
    change = {"background_write_gib": background, "foreground_bandwidth_mib_s": foreground,
              "foreground_completion_s": 0.0, "foreground_mean_latency_ms": 0.0}
    return {"name": name, "params": {}, "change_percent": change, "verdict": verdict(change)}


def test_rows_are_grouped_by_verdict_in_run_order_and_small_gains_found():
    rows = [_row("a", -80.0, 20.0), _row("b", -30.0, 5.0), _row("c", 1.5, 4.9), _row("d", -90.0, -1.0),
            _row("e", -20.0, 6.0)]
    result = SensitivityResult(1, 0, Scenario(), rows)
    groups = result.by_verdict()
    assert {k: [r["name"] for r in v] for k, v in groups.items()} == \
        {"holds": ["a", "d"], "weakened": ["b", "e"], "vanishes": ["c"]}
    assert [r["name"] for r in result.small_foreground_gain()] == ["c", "d"]
    assert SensitivityResult(1, 0, Scenario(), []).by_verdict() == {"holds": [], "weakened": [], "vanishes": []}


def test_the_sensitivity_json_names_its_thresholds_and_base_scenario():
    result = SensitivityResult(2, 9, TINY, [_row("a", -80.0, 20.0)], wall_seconds=3.5)
    assert result.as_dict() == {"rows": result.rows, "runs": 2, "seed": 9,
                                "thresholds": {"holds_background_reduction_percent": 50.0,
                                               "vanishes_background_reduction_percent": 10.0,
                                               "small_foreground_gain_percent": 5.0},
                                "base_scenario": TINY.as_dict(), "wall_seconds": 3.5}
    assert SensitivityResult(2, 9, TINY, []).wall_seconds == 0.0


def test_the_summary_states_the_counts_ranges_and_rows_of_each_verdict():
    result = SensitivityResult(1, 0, Scenario(), [_row("a", -80.0, 20.0), _row("b", -30.0, 2.0),
                                                  _row("c", 1.5, 0.0), _row("d", -60.25, 30.0)])
    assert summary_text(result) == (
        "The patched kernel cuts the background file's write I/O by at least 50 % in 2 of 4 rows (changes from "
        "-60.2 % to -80.0 %). It is weakened (10-50 %) in: b (-30.0 %). It vanishes (under 10 %) in: c (+1.5 %). "
        "The foreground bandwidth gain is under 5 % in: b (+2.0 %); c (+0.0 %).")
    one = SensitivityResult(1, 0, Scenario(), [_row("only", -70.0, 10.0)])
    assert summary_text(one) == (
        "The patched kernel cuts the background file's write I/O by at least 50 % in 1 of 1 rows (only, -70.0 %). "
        "It is weakened (10-50 %) in: none. It vanishes (under 10 %) in: none. The foreground bandwidth gain is "
        "under 5 % in: none.")
    assert "in 0 of 1 rows (no row)" in summary_text(SensitivityResult(1, 0, Scenario(), [_row("x", 0.0, 0.0)]))


def test_a_sensitivity_run_has_one_row_per_perturbation_from_the_experiment_on_it(monkeypatch):
    calls = []
    real = sensitivity.run_experiment

    def recording(runs, seed, scenario):
        calls.append((runs, seed, scenario))
        return real(runs, seed, scenario)
    monkeypatch.setattr(sensitivity, "run_experiment", recording)
    pair = (Perturbation.of("defaults"), Perturbation.of("deeper", foreground_iodepth=64))
    handed = []
    t0 = time.perf_counter()
    result = run_sensitivity(2, 4, QUIET, perturbations=pair, wrap=lambda pairs: handed.append(pairs) or pairs)
    assert 0 < result.wall_seconds <= time.perf_counter() - t0
    assert calls == [(2, 4, QUIET), (2, 4, QUIET.replace(foreground_iodepth=64))]
    assert handed == [list(zip(pair, [QUIET, QUIET.replace(foreground_iodepth=64)]))]
    assert (result.runs, result.seed, result.base_scenario) == (2, 4, QUIET) and result.wall_seconds > 0
    experiment_result = real(2, 4, QUIET.replace(foreground_iodepth=64))
    row = result.rows[1]
    assert row == {"name": "deeper", "params": {"foreground_iodepth": 64},
                   "change_percent": experiment_result.change_percent, "baseline": experiment_result.baseline,
                   "patched": experiment_result.patched, "verdict": verdict(experiment_result.change_percent)}
    assert [r["name"] for r in result.rows] == ["defaults", "deeper"]


def test_a_sensitivity_run_defaults_to_one_run_of_seed_zero_on_the_full_set(monkeypatch):
    handed = []
    result = run_sensitivity(wrap=lambda pairs: handed.append(list(pairs)) or [])
    assert [p for p, _ in handed[0]] == list(SENSITIVITY) and handed[0][0][1] == Scenario()
    assert (result.runs, result.seed, result.rows) == (1, 0, [])
    result = run_sensitivity(1000, (1 << 48) - 1, wrap=lambda pairs: [])
    assert (result.runs, result.seed) == (1000, (1 << 48) - 1)


@pytest.mark.parametrize("kwargs, exc, message", [
    ({"runs": 0}, ValueError, _message("runs", 1, 1000)),
    ({"runs": 1001}, ValueError, _message("runs", 1, 1000)),
    ({"seed": -1}, ValueError, _message("seed", 0, (1 << 48) - 1)),
    ({"seed": 1 << 48}, ValueError, _message("seed", 0, (1 << 48) - 1)),
    ({"scenario": "default"}, TypeError, "^scenario must be a Scenario"),
    ({"perturbations": ()}, ValueError, "^perturbations must hold at least one Perturbation$"),
    ({"perturbations": ("defaults",)}, TypeError, "^perturbations must be a sequence of Perturbation"),
    ({"perturbations": (Perturbation.of("ok"), Perturbation.of("bad", cgroups=-1))}, ValueError, "^cgroups"),
    ({"wrap": 3}, TypeError, "^wrap must be"),
])
def test_a_sensitivity_run_refuses_bad_arguments_before_anything_runs(kwargs, exc, message, monkeypatch):
    monkeypatch.setattr(sensitivity, "run_experiment", lambda *a, **k: pytest.fail("ran"))
    with pytest.raises(exc, match=message):
        run_sensitivity(**kwargs)
