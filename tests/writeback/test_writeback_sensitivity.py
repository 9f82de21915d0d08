"""``run_sensitivity`` and ``pybcache writeback --sensitivity``: rows, verdicts from measured figures, the
summary derived from the rows, bad input."""
from __future__ import annotations

import json

import pytest

import pybcache.writeback as wb
from pybcache.commands import writeback as command
from pybcache.writeback import (FOREGROUND_GAIN_PERCENT, HOLDS_PERCENT, SENSITIVITY, VANISHES_PERCENT,
                                Perturbation, Scenario, SensitivityResult, run_experiment, run_once,
                                run_sensitivity, summary_text, verdict)
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
