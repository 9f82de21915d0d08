"""pybcache sweep without Dask: grid validation, seeds, the cache, tables and the summary.
(The Dask path, with a real LocalCluster, is in test_distributed.py.)"""
from __future__ import annotations

import csv
import json
import os

import pytest

from pybcache.commands import main
from pybcache.dist.sweep import (
    GridError,
    load_grid,
    parse_grid,
    summarize,
    sweep,
    task_key,
    task_seed,
    write_tables,
)

pytestmark = [pytest.mark.native, pytest.mark.e2e]

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "sweeps")

SMALL = """
[explore]
bounds = ["1w1r"]
sync = ["none", "page"]

[stress]
sync = ["page", "atomic"]
ops = [50]
"""


def test_grid_is_the_product_of_each_tables_lists():
    points = parse_grid(SMALL)
    assert [p["sync"] for p in points["explore"]] == ["none", "page"]
    assert len(points["stress"]) == 2 and all(p["ops"] == 50 for p in points["stress"])


@pytest.mark.parametrize("text, names", [
    ('[race]\nsyncc = ["page"]\n', "syncc"),
    ('[race]\nsync = ["pagee"]\n', "--sync"),
    ('[race]\nthreads = [1]\n', "--threads"),
    ('[race]\nno_restart = ["yes"]\n', "no_restart"),
    ('[race]\njson = [true]\n', "json"),
    ('[fio]\nseconds = [0]\n', "--seconds"),
    ('[stress]\nthreads = [0]\n', "threads"),
    ('[stress]\nbogus = [1]\n', "bogus"),
    ('[stress]\nchunk_size = ["3K"]\n', "chunk_size"),
    ('[racer]\nsync = ["page"]\n', "racer"),
    ('[explore]\nbounds = []\n', "bounds"),
    ('[race\n', "TOML"),
])
def test_a_bad_key_or_value_is_refused_naming_it(text, names):
    with pytest.raises(GridError, match=names):
        parse_grid(text)


def test_the_example_grids_are_valid():
    assert len(load_grid(os.path.join(EXAMPLES, "race-faults.toml"))["race"]) == 15
    assert len(load_grid(os.path.join(EXAMPLES, "fio-chunks.toml"))["fio"]) == 8


def test_each_repetition_has_its_own_seed_and_deterministic_commands_none():
    p = {"sync": "page"}
    seeds = {task_seed("race", p, rep) for rep in range(5)}
    assert len(seeds) == 5 and task_seed("race", p, 0) == task_seed("race", dict(p), 0)
    assert task_seed("race", {"seed": 7}, 2) == 9
    assert task_seed("explore", p, 1) is None
    assert task_key("race", p, 0, 1) != task_key("race", p, 1, 1)


def test_a_repeated_sweep_runs_nothing_and_returns_the_same_rows(tmp_path):
    points = parse_grid(SMALL)
    first = sweep(points, reps=2, out=str(tmp_path))
    assert first["ran"] == 8 and first["cached"] == 0 and len(first["rows"]) == 8
    second = sweep(points, reps=2, out=str(tmp_path))
    assert second["ran"] == 0 and second["cached"] == 8
    assert second["rows"] == first["rows"]


def test_an_interrupted_sweep_resumes_where_it_stopped(tmp_path):
    points = parse_grid(SMALL)
    seen = []

    def interrupt(row):
        seen.append(row)
        if len(seen) == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        sweep(points, out=str(tmp_path), on_row=interrupt)
    res = sweep(points, out=str(tmp_path))
    assert res["cached"] == 3 and res["ran"] == 1 and len(res["rows"]) == 4


def test_explore_figures_come_from_the_model(tmp_path):
    res = sweep(parse_grid(SMALL), out=None)
    ex = {r["params"]["sync"]: r["figures"] for r in res["rows"] if r["command"] == "explore"}
    assert ex["none"]["violations"] > 0 and ex["page"]["violations"] == 0
    assert ex["page"]["1w1r.schedules"] == ex["page"]["schedules"]


def test_summary_mean_and_interval_over_repetitions():
    rows = [{"command": "race", "params": {"sync": "page"}, "rep": i, "seed": i, "wall_s": 1.0, "worker": "w",
             "figures": {"x": float(x)}} for i, x in enumerate([1, 2, 3, 4])]
    (s,) = summarize(rows)
    f = s["figures"]["x"]
    assert f["mean"] == 2.5 and f["n"] == 4
    assert f["ci_low"] < 2.5 < f["ci_high"] and f["ci_high"] - 2.5 == pytest.approx(2.5 - f["ci_low"])
    (one,) = summarize(rows[:1])
    assert one["figures"]["x"]["ci_low"] is None


def test_tidy_table_has_one_row_per_run_with_parameters_seed_and_figures(tmp_path):
    res = sweep(parse_grid(SMALL), reps=2, out=None)
    paths = write_tables(res["rows"], str(tmp_path))
    with open(tmp_path / "stress.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert len(table) == 4 and {"sync", "ops", "rep", "seed", "wall_s", "worker", "ops_per_s"} <= set(table[0])
    assert len({r["seed"] for r in table}) == 4
    assert str(tmp_path / "explore.csv") in paths


def test_cli_sweep_in_process_json(tmp_path, capsys):
    grid = tmp_path / "g.toml"
    grid.write_text(SMALL)
    assert main(["sweep", str(grid), "--workers", "0", "--out", str(tmp_path / "o"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"command", "params", "rep", "seed", "figures", "wall_s", "worker"} <= set(out["rows"][0])
    assert len(out["summary"]) == 4 and out["interval"] in ("t", "normal")
    assert (tmp_path / "o" / "explore-violations.png").exists()


@pytest.mark.parametrize("text", ['[race]\nsyncc = ["page"]\n', '[race]\nseconds = [-1]\n'])
def test_cli_bad_grid_exits_2_naming_it(tmp_path, capsys, text):
    grid = tmp_path / "g.toml"
    grid.write_text(text)
    assert main(["sweep", str(grid), "--workers", "0", "--out", str(tmp_path / "o")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and ("syncc" in err or "--seconds" in err)
