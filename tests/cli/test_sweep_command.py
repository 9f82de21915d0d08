"""``pybcache sweep`` (``pybcache/commands/sweep.py``). The experiment it starts is stood in for (no subprocess, no C
model): these tests state what the command hands on, prints, writes as JSON and returns for given arguments and
results."""
from __future__ import annotations

import contextlib
import json
import os

import pytest

from pybcache import commands
from pybcache.commands import sweep
from pybcache._console import format_table

from helpers.command_stand_ins import _args, _recording_progress


def _summary_entry(command, params, figures, reps=2):
    return {"command": command, "params": params, "reps": reps, "figures": figures}


def _fig(mean, low=None, high=None):
    return {"mean": mean, "ci_low": low, "ci_high": high}


def _sweep_result(interval="t"):
    summary = [
        _summary_entry("race", {"threads": 2, "sync": "page"},
                       {"stale_reads": _fig(0.0), "ops_per_s": _fig(1234.5678, 1000.0, 1500.0),
                        "untracked_writes": _fig(1.0), "stale_cached_blocks": _fig(0.0),
                        "ignored": _fig(9.0)}),
        _summary_entry("race", {"threads": 4, "sync": "page"},
                       {"stale_reads": _fig(0.0), "ops_per_s": _fig(2000.0, 1900.0, 2100.0),
                        "untracked_writes": _fig(3.0)}),
        _summary_entry("explore", {"bounds": "1w1r"}, {"schedules": _fig(6.0), "violations": _fig(0.0)}, reps=1),
    ]
    return {"rows": [{"command": "race"}] * 5, "summary": summary, "cached": 2, "ran": 3, "interval": interval}


def _fake_sweep(monkeypatch, result=None, exc=None, available=True):
    import pybcache.dist.cluster
    import pybcache.dist.sweep
    seen = {"grids": [], "sweeps": [], "clients": [], "tables": [], "plots": []}
    client = object()

    def load_grid(path):
        seen["grids"].append(path)
        return {"race": [{"threads": 2}]}

    def fake_sweep(points, *, reps, out, client=None, progress):
        seen["sweeps"].append(dict(points=points, reps=reps, out=out, client=client))
        list(progress(iter(range(3)), 3))
        if exc is not None:
            raise exc
        return result if result is not None else _sweep_result()

    @contextlib.contextmanager
    def client_for(*, scheduler, workers, dashboard):
        seen["clients"].append((scheduler, workers, dashboard))
        yield client

    def write_tables(rows, out):
        seen["tables"].append((len(rows), out))
        return [os.path.join(out, "race.csv"), os.path.join(out, "race.parquet")]

    def write_plots(summary, out):
        seen["plots"].append((len(summary), out))
        return [os.path.join(out, "a.png"), os.path.join(out, "b.png")]
    monkeypatch.setattr(pybcache.dist.sweep, "load_grid", load_grid)
    monkeypatch.setattr(pybcache.dist.sweep, "sweep", fake_sweep)
    monkeypatch.setattr(pybcache.dist.sweep, "write_tables", write_tables)
    monkeypatch.setattr(pybcache.dist.sweep, "write_plots", write_plots)
    monkeypatch.setattr(pybcache.dist.cluster, "dask_available", lambda: available)
    monkeypatch.setattr(pybcache.dist.cluster, "client_for", client_for)
    return seen, client


def test_sweep_with_no_workers_runs_in_this_process_and_writes_tables_plots_and_the_summary(monkeypatch, tmp_path):
    seen, _ = _fake_sweep(monkeypatch)
    out = tmp_path / "new" / "dir"
    assert sweep.run(_args("sweep", "g.toml", "--workers", "0", "--reps", "3", "--out", str(out))) == 0
    assert seen["grids"] == ["g.toml"] and seen["clients"] == []
    assert seen["sweeps"] == [dict(points={"race": [{"threads": 2}]}, reps=3, out=str(out), client=None)]
    assert seen["tables"] == [(5, str(out))] and seen["plots"] == [(3, str(out))]
    assert (out / "summary.json").read_text() == json.dumps({"summary": _sweep_result()["summary"], "interval": "t"},
                                                            indent=1)


def test_sweep_makes_its_out_directory_absolute(monkeypatch, tmp_path):
    seen, _ = _fake_sweep(monkeypatch)
    monkeypatch.chdir(tmp_path)
    assert sweep.run(_args("sweep", "g.toml", "--workers", "0", "--no-plots")) == 0
    assert seen["sweeps"][0]["out"] == str(tmp_path / "sweep-out") and (tmp_path / "sweep-out").is_dir()
    assert seen["plots"] == []


@pytest.mark.parametrize("argv, client", [([], (None, None, False)),
                                          (["--workers", "3", "--dashboard"], (None, 3, True)),
                                          (["--scheduler", "tcp://h:1"], ("tcp://h:1", None, False))])
def test_sweep_on_dask_hands_its_client_the_scheduler_workers_and_dashboard(monkeypatch, tmp_path, argv, client):
    seen, the_client = _fake_sweep(monkeypatch)
    assert sweep.run(_args("sweep", "g.toml", "--out", str(tmp_path), *argv)) == 0
    assert seen["clients"] == [client]
    assert seen["sweeps"] == [dict(points={"race": [{"threads": 2}]}, reps=1, out=str(tmp_path), client=the_client)]


def test_sweep_refuses_workers_with_a_scheduler_before_running(monkeypatch, tmp_path):
    seen, _ = _fake_sweep(monkeypatch)
    with pytest.raises(commands.UsageError) as err:
        sweep.run(_args("sweep", "g.toml", "--out", str(tmp_path), "--scheduler", "tcp://h:1", "--workers", "2"))
    assert str(err.value) == "--workers: only for the embedded cluster, not with --scheduler"
    assert seen["sweeps"] == []


def test_sweep_refuses_an_out_it_cannot_create_naming_it_and_why(monkeypatch, tmp_path):
    seen, _ = _fake_sweep(monkeypatch)
    (tmp_path / "file").write_text("x")
    with pytest.raises(commands.UsageError) as err:
        sweep.run(_args("sweep", "g.toml", "--workers", "0", "--out", str(tmp_path / "file" / "sub")))
    assert str(err.value) == f"--out: cannot create {str(tmp_path / 'file' / 'sub')!r}: Not a directory"
    assert seen["sweeps"] == []


def test_sweep_without_dask_is_a_usage_error_naming_the_extra_and_the_way_round(monkeypatch, tmp_path):
    seen, _ = _fake_sweep(monkeypatch, available=False)
    with pytest.raises(commands.UsageError) as err:
        sweep.run(_args("sweep", "g.toml", "--out", str(tmp_path)))
    assert str(err.value) == ("dask.distributed is not installed: run python3 -m pip install '.[distributed]' in the "
                              "pybcache clone, or pip install 'PATH[distributed]' with PATH the clone "
                              "(or --workers 0 to run in this process)")
    assert seen["sweeps"] == [] and seen["clients"] == []


@pytest.mark.parametrize("exc", [ValueError("reps: bad"), TypeError("grid: not a table")])
def test_sweep_turns_a_refused_grid_into_a_usage_error(monkeypatch, tmp_path, exc):
    _fake_sweep(monkeypatch, exc=exc)
    with pytest.raises(commands.UsageError) as err:
        sweep.run(_args("sweep", "g.toml", "--workers", "0", "--out", str(tmp_path)))
    assert str(err.value) == str(exc)


@pytest.mark.parametrize("interval, text", [("t", "Student t"), ("normal", "normal approximation (scipy absent)")])
def test_sweep_prints_a_table_per_command_of_the_figures_that_move_with_their_intervals(monkeypatch, capsys,
                                                                                       tmp_path, interval, text):
    _fake_sweep(monkeypatch, _sweep_result(interval))
    assert sweep.run(_args("sweep", "g.toml", "--workers", "0", "--out", str(tmp_path))) == 0
    race_table = format_table(["threads", "sync", "reps", "ops_per_s", "untracked_writes"],
                              [["2", "page", 2, "1235 [1000, 1500]", "1"], ["4", "page", 2, "2000 [1900, 2100]", "3"]])
    explore_table = format_table(["bounds", "reps", "schedules", "violations"], [["1w1r", 1, "6", "0"]])
    assert capsys.readouterr().out == (
        f"sweep: 5 runs (3 ran, 2 from the cache in {tmp_path}), 95% interval: {text}\n"
        f"\n[race]\n{race_table}\n\n[explore]\n{explore_table}\n"
        f"\ntables: {tmp_path}/race.csv, {tmp_path}/race.parquet\nplots: 2 in {tmp_path}\n")


def test_sweep_shows_a_missing_figure_as_a_dash_and_at_most_four_figures(monkeypatch, capsys, tmp_path):
    figures = {n: _fig(1.0) for n in ("a.bypass_fraction", "b.bypass_fraction", "a.tracking_pages",
                                      "b.tracking_pages", "a.ns_per_io_vs_none")}
    res = _sweep_result()
    res["summary"] = [_summary_entry("fio", {"size": "1G"}, figures),
                      _summary_entry("fio", {"size": "2G"}, {"a.bypass_fraction": _fig(2.0)})]
    _fake_sweep(monkeypatch, res)
    assert sweep.run(_args("sweep", "g.toml", "--workers", "0", "--out", str(tmp_path), "--no-plots")) == 0
    out = capsys.readouterr().out
    # only a.bypass_fraction moves across the points: it alone is shown
    assert format_table(["size", "reps", "a.bypass_fraction"], [["1G", 2, "1"], ["2G", 2, "2"]]) in out
    res["summary"] = [_summary_entry("fio", {"size": "1G"}, figures),
                      _summary_entry("fio", {"size": "2G"}, {"a.bypass_fraction": _fig(1.0)})]
    sweep.run(_args("sweep", "g.toml", "--workers", "0", "--out", str(tmp_path), "--no-plots"))
    out = capsys.readouterr().out
    assert format_table(["size", "reps", "a.bypass_fraction", "b.bypass_fraction", "a.tracking_pages",
                         "b.tracking_pages"],
                        [["1G", 2, "1", "1", "1", "1"], ["2G", 2, "1", "-", "-", "-"]]) in out
    assert "plots:" not in out


def test_sweep_json_is_the_result_with_its_tables_and_plots_and_its_bar_keeps_quiet(monkeypatch, capsys, tmp_path):
    seen = _recording_progress(monkeypatch, sweep)
    _fake_sweep(monkeypatch)
    assert sweep.run(_args("sweep", "g.toml", "--workers", "0", "--out", str(tmp_path), "--json")) == 0
    assert json.loads(capsys.readouterr().out) == dict(
        _sweep_result(), tables=[f"{tmp_path}/race.csv", f"{tmp_path}/race.parquet"],
        plots=[f"{tmp_path}/a.png", f"{tmp_path}/b.png"])
    assert seen == [([0, 1, 2], 3, "sweep", True)]
    seen.clear()
    sweep.run(_args("sweep", "g.toml", "--workers", "0", "--out", str(tmp_path)))
    assert seen == [([0, 1, 2], 3, "sweep", False)]
