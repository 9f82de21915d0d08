"""pybcache/dist/sweep.py's parts one at a time, on inputs whose results are known: the command line of a point,
the stress keys, grid expansion and its messages, seeds and cache keys, the flattened figures, the cache
files, the summary's interval, the tidy tables and the plots' axis order."""
from __future__ import annotations

import csv
import hashlib
import json
import math
import os
import sys

import pytest

from pybcache.dist import sweep as sw
from pybcache.dist.sweep import GridError
from pybcache import __version__


def _refused(fn, *args, message):
    with pytest.raises(GridError) as info:
        fn(*args)
    assert str(info.value) == message


def test_argv_is_the_points_command_line_with_switches_only_when_true():
    assert sw._argv("race", {"sync": "none", "threads": 4, "seconds": 0.5}) == [
        "--sync=none", "--threads=4", "--seconds=0.5"]
    assert sw._argv("race", {"no_restart": True, "sync": "page"}) == ["--no-restart", "--sync=page"]
    assert sw._argv("race", {"no_restart": False}) == []


@pytest.mark.parametrize("params, message", [
    ({"json": True}, "[race] json: not allowed in a grid (the sweep always reads --json)"),
    ({"help": True}, "[race] help: not allowed in a grid (not an option)"),
    ({"command": "x"}, "[race] command: not allowed in a grid (not an option)"),
    ({"func": "x"}, "[race] func: not allowed in a grid (not an option)"),
    ({"sync_mode": "x"}, "[race] sync_mode: `pybcache race` has no option --sync-mode"),
    ({"no_restart": 1}, "[race] no_restart: a switch takes true or false, got 1"),
    ({"threads": True}, "[race] threads: expected a string or a number, got True"),
    ({"threads": [2]}, "[race] threads: expected a string or a number, got [2]"),
    ({"threads": 1}, "[race] argument --threads: must be in [2, 256], got 1"),
])
def test_argv_refuses_naming_the_table_and_key(params, message):
    _refused(sw._argv, "race", params, message=message)


def test_stress_keys_split_into_tracker_and_run_with_sizes_parsed():
    tracker, run = sw._stress_kwargs({"device_size": "1G", "chunk_size": 4096, "sync": "atomic", "threads": 2,
                                      "write_length": "8K", "seed": 5, "ops": 10})
    assert tracker == {"device_size": 1 << 30, "chunk_size": 4096, "sync": "atomic"}
    assert run == {"threads": 2, "write_length": 8192, "ops": 10}
    _refused(sw._stress_kwargs, {"bogus": 1}, message=(
        "[stress] bogus: not a stress key (allowed: device_size, chunk_size, sync, counter_bits, overflow, "
        "alloc_failure, pool_pages, free, fault_probability, threads, ops, seconds, write_length, depth, "
        "partition, reclaim_every, seed)"))
    _refused(sw._stress_kwargs, {"chunk_size": "4X"},
             message="[stress] chunk_size: '4X' is not a size (use e.g. 512, 4K, 32M, 10G, 1T)")


def test_stress_tracker_defaults_to_a_tib_without_faults_and_checks_the_probability():
    t = sw._build_stress_tracker({}, 0)
    assert t.device_size == 1 << 40 and t.stats()["alloc_failures"] == 0
    t = sw._build_stress_tracker({"device_size": 1 << 30, "fault_probability": 1, "alloc_failure": "untracked"}, 3)
    assert t.device_size == 1 << 30 and t.start(0, 1) is False     # every allocation fails
    for p in (True, "0.5"):                                          # not a number: TypeError naming the type
        with pytest.raises(TypeError) as info:
            sw._build_stress_tracker({"fault_probability": p}, 0)
        assert str(info.value) == f"fault_probability must be a number in [0, 1], got {type(p).__name__}"
    for p in (-0.1, 1.1):
        with pytest.raises(ValueError) as info:
            sw._build_stress_tracker({"fault_probability": p}, 0)
        assert str(info.value) == f"fault_probability must be in [0, 1], got {p!r}"


@pytest.mark.parametrize("params, message", [
    ({"ops": 5, "seconds": 1}, "[stress] ops, seconds: give at most one of them"),
    ({"seconds": 0}, "[stress] seconds must be in (0, 3600], got 0"),
    ({"seconds": 3601}, "[stress] seconds must be in (0, 3600], got 3601"),
    ({"seconds": True}, "[stress] seconds must be a number in (0, 3600], got bool"),
    ({"ops": 0}, "[stress] ops must be in [1, inf), got 0"),
    ({"ops": 1.5}, "[stress] ops must be an int in [1, inf), got float"),
    ({"ops": True}, "[stress] ops must be an int in [1, inf), got bool"),
    ({"threads": 0}, "[stress] threads must be in [1, 256], got 0"),
])
def test_stress_points_are_checked_with_their_messages(params, message):
    _refused(sw._check_stress, params, message=message)


def test_stress_bounds_that_are_valid_pass():
    sw._check_stress({"seconds": 3600})
    sw._check_stress({"ops": 1, "threads": 1})


def test_expand_grid_is_the_product_in_command_order_with_scalars_as_one_value():
    points = sw.expand_grid({"explore": {"bounds": "1w1r", "sync": ["none", "page"]}, "race": {},
                             "stress": {"ops": [1, 2]}})
    assert list(points) == ["race", "stress", "explore"]
    assert points == {"race": [{}], "stress": [{"ops": 1}, {"ops": 2}],
                      "explore": [{"bounds": "1w1r", "sync": "none"}, {"bounds": "1w1r", "sync": "page"}]}


@pytest.mark.parametrize("data, message", [
    ({}, "grid: expected at least one table of race, stress, fio, explore, writeback"),
    ([], "grid: expected at least one table of race, stress, fio, explore, writeback"),
    ({"racer": {}}, "grid: unknown table [racer] (allowed: race, stress, fio, explore, writeback)"),
    ({"race": [1]}, "grid: [race] must be a table of key = [values]"),
    ({"race": {"sync": []}}, "[race] sync: an empty list gives no points"),
])
def test_expand_grid_refuses_naming_the_table_or_key(data, message):
    _refused(sw.expand_grid, data, message=message)


def test_a_grid_past_the_point_limit_is_refused_before_checking_points(monkeypatch):
    monkeypatch.setattr(sw, "MAX_POINTS", 3)
    assert len(sw.expand_grid({"stress": {"ops": [1, 2, 3]}})["stress"]) == 3
    _refused(sw.expand_grid, {"stress": {"ops": [1, 2]}, "explore": {"sync": ["none", "page"]}},
             message="grid: more than 3 points")


def test_parse_and_load_grid_name_what_they_could_not_read(tmp_path):
    with pytest.raises(GridError, match=r"^g\.toml: not valid TOML: "):
        sw.parse_grid("[race", name="g.toml")
    with pytest.raises(GridError, match=r"^grid: not valid TOML: "):
        sw.parse_grid("[race")
    p = tmp_path / "bad.toml"
    p.write_bytes(b"\xff[race]\n")
    _refused(sw.load_grid, p, message=f"GRID: {str(p)!r} is not UTF-8 text")
    _refused(sw.load_grid, tmp_path / "none.toml",
             message=f"GRID: cannot read {str(tmp_path / 'none.toml')!r}: No such file or directory")
    p.write_text("[racer]\n")
    _refused(sw.load_grid, p, message="grid: unknown table [racer] (allowed: race, stress, fio, explore, writeback)")
    p.write_text("[race\n")
    with pytest.raises(GridError, match="^" + str(p) + ": not valid TOML"):
        sw.load_grid(str(p))


def test_seeds_follow_the_grid_seed_or_the_sha256_of_the_point():
    assert sw.task_seed("race", {"seed": 5}, 2) == 7
    assert sw.task_seed("stress", {"seed": (1 << 62) - 1}, 1) == 0          # masked to 62 bits
    blob = json.dumps(["race", {"sync": "page"}, 3], sort_keys=True).encode()
    assert sw.task_seed("race", {"sync": "page"}, 3) == int.from_bytes(hashlib.sha256(blob).digest()[:8],
                                                                      "big") & ((1 << 62) - 1)
    assert sw.task_seed("explore", {"seed": 5}, 0) is None and sw._takes_seed("stress")


def test_task_key_is_the_sha256_of_the_task_and_the_version():
    blob = json.dumps({"command": "race", "params": {"a": 1}, "rep": 2, "seed": 3, "version": __version__},
                      sort_keys=True).encode()
    assert sw.task_key("race", {"a": 1}, 2, 3) == hashlib.sha256(blob).hexdigest()


def test_flatten_keeps_finite_numbers_labelled_by_variant_bound_name_or_index():
    result = {"config": {"x": 1}, "semantics": 2, "per_thread": [3], "counterexample": 4,
              "counterexample_steps": 5, "ok": True, "no": False, "s": "text", "nan": math.nan, "inf": math.inf,
              "rows": [{"variant": "page", "v": 1.5}, {"bound": "1w1r", "v": 2}, {"name": "n", "v": 3},
                       {"v": 4}], "runs": [{"v": 5}],
              "nested": {"deep": {"v": 6}, "list": [7, {"variant": "x", "w": 8}]}}
    assert sw._flatten(result) == {"ok": 1, "no": 0, "page.v": 1.5, "1w1r.v": 2, "n.v": 3, "3.v": 4, "0.v": 5,
                                   "nested.deep.v": 6, "nested.list.0": 7, "nested.list.x.w": 8}


def test_the_cache_stores_rows_by_key_atomically_and_treats_a_torn_file_as_absent(tmp_path):
    out, key = str(tmp_path), "ab" + "c" * 62
    assert sw._cache_path(out, key) == os.path.join(out, "cache", "ab", key + ".json")
    assert sw._cache_get(out, key) is None
    sw._cache_put(out, key, {"x": 1})
    assert sw._cache_get(out, key) == {"x": 1} and os.listdir(tmp_path / "cache" / "ab") == [key + ".json"]
    with open(sw._cache_path(out, key), "w") as f:
        f.write('{"x": ')
    assert sw._cache_get(out, key) is None
    sw._cache_put(None, key, {"x": 2})
    assert sw._cache_get(None, key) is None


@pytest.mark.parametrize("reps, exc, message", [
    (0, ValueError, "reps must be in [1, 10000], got 0"), (10001, ValueError, "reps must be in [1, 10000], got 10001"),
    (True, TypeError, "reps must be an int in [1, 10000], got bool"),
    (1.0, TypeError, "reps must be an int in [1, 10000], got float"),
])
def test_sweep_checks_reps(reps, exc, message):
    with pytest.raises(exc) as info:
        sw.sweep({}, reps=reps)
    assert str(info.value) == message


def test_sweep_without_a_cache_runs_each_task_and_reports_rows_in_grid_order():
    seen = []
    res = sw.sweep({"explore": [{"bounds": "1w1r", "sync": "none"}]}, reps=2, on_row=seen.append,
                   progress=lambda it, n: (seen.append(n), it)[1])
    assert seen[0] == 2 and [r["rep"] for r in seen[1:]] == [0, 1] and res["cached"] == 0 and res["ran"] == 2
    assert [r["rep"] for r in res["rows"]] == [0, 1] and res["interval"] == sw.INTERVAL_METHOD
    assert res["rows"][0]["worker"] == "local" and res["rows"][0]["version"] == __version__
    assert res["summary"][0]["reps"] == 2


def test_summary_interval_is_the_normal_quantile_times_the_standard_error(monkeypatch):
    monkeypatch.setattr(sw, "INTERVAL_METHOD", "normal")
    assert sw._quantile(5) == 1.959963984540054
    rows = [{"command": "race", "params": {"p": 1}, "wall_s": w, "figures": {"x": x, "y": 1}}
            for w, x in ((1.0, 1.0), (3.0, 3.0))] + [
           {"command": "race", "params": {"p": 2}, "wall_s": 5.0, "figures": {"x": 7.0}}]
    rows[1]["figures"].pop("y")
    a, b = sw.summarize(rows)
    half = 1.959963984540054 * math.sqrt(2) / math.sqrt(2)
    assert a == {"command": "race", "params": {"p": 1}, "reps": 2, "wall_s_mean": 2.0,
                 "figures": {"x": {"mean": 2.0, "ci_low": 2.0 - half, "ci_high": 2.0 + half, "n": 2}}}
    assert b["figures"] == {"x": {"mean": 7.0, "ci_low": None, "ci_high": None, "n": 1}} and b["reps"] == 1


def test_tables_have_each_parameter_and_figure_seen_in_first_seen_order(tmp_path):
    rows = [{"command": "race", "params": {"a": 1}, "rep": 0, "seed": 9, "wall_s": 0.5, "worker": "w",
             "figures": {"f": 1.0}},
            {"command": "race", "params": {"a": 2, "b": "x"}, "rep": 1, "seed": 10, "wall_s": 0.25, "worker": "v",
             "figures": {"g": 2.0, "f": 3.0}},
            {"command": "explore", "params": {}, "rep": 0, "seed": None, "wall_s": 1, "worker": "w", "figures": {}}]
    assert sw._columns(rows[:2]) == (["a", "b"], ["f", "g"])
    paths = sw.write_tables(rows, str(tmp_path / "t"))
    assert [os.path.basename(p) for p in paths if p.endswith(".csv")] == ["race.csv", "explore.csv"]
    with open(tmp_path / "t" / "race.csv", newline="") as f:
        assert list(csv.reader(f)) == [["a", "b", "rep", "seed", "wall_s", "worker", "f", "g"],
                                       ["1", "", "0", "9", "0.5", "w", "1.0", ""],
                                       ["2", "x", "1", "10", "0.25", "v", "3.0", "2.0"]]


def test_sort_key_orders_numbers_and_sizes_before_words():
    assert [sw._sort_key(v) for v in (5, 2.5, "4K", "abc", True)] == [(0, 5), (0, 2.5), (0, 4096), (1, "abc"),
                                                                     (1, "True")]


def test_plots_one_per_command_and_plotted_figure_against_the_varying_parameter(tmp_path):
    def point(sync, size, x, ci=True):
        fig = {"mean": x, "ci_low": x - 1 if ci else None, "ci_high": x + 1 if ci else None, "n": 2}
        return {"command": "race", "params": {"sync": sync, "chunk_size": size, "seconds": 1},
                "figures": {"stale_reads": fig, "ops": fig}}
    summary = [point("none", "8K", 3.0), point("none", "4K", 2.0, ci=False), point("page", "4K", 1.0),
               {"command": "explore", "params": {"sync": "page"}, "figures": {"violations": {"mean": 0}}}]
    paths = sw.write_plots(summary, str(tmp_path))
    assert [os.path.basename(p) for p in paths] == ["race-stale_reads.png"]      # explore: nothing varies
    with open(paths[0], "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def _fake_scipy(monkeypatch, calls):
    import sys
    import types
    stats = types.ModuleType("scipy.stats")
    stats.t = types.SimpleNamespace(ppf=lambda q, df: calls.append((q, df)) or 4.25)
    scipy = types.ModuleType("scipy")
    scipy.stats = stats
    monkeypatch.setitem(sys.modules, "scipy", scipy)
    monkeypatch.setitem(sys.modules, "scipy.stats", stats)


def test_the_interval_is_students_t_with_scipy_and_normal_without(monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "scipy", None)          # import scipy fails
    assert sw._interval_method() == "normal"
    _fake_scipy(monkeypatch, [])
    assert sw._interval_method() == "t"


def test_the_t_quantile_is_the_975th_percentile_with_n_minus_one_degrees_of_freedom(monkeypatch):
    calls: list[tuple[float, int]] = []
    _fake_scipy(monkeypatch, calls)
    monkeypatch.setattr(sw, "INTERVAL_METHOD", "t")
    assert sw._quantile(5) == 4.25 and type(sw._quantile(5)) is float
    assert calls == [(0.975, 4), (0.975, 4)]


def test_tables_also_go_to_parquet_when_pyarrow_imports_with_parameters_as_text(tmp_path, monkeypatch):
    import sys
    import types
    written = []
    pa = types.ModuleType("pyarrow")
    pa.table = lambda cols: ("TABLE", cols)
    pq = types.ModuleType("pyarrow.parquet")
    pq.write_table = lambda table, path: written.append((table, path))
    pa.parquet = pq
    monkeypatch.setitem(sys.modules, "pyarrow", pa)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", pq)
    rows = [{"command": "race", "params": {"a": 1, "b": None}, "rep": 0, "seed": 9, "wall_s": 0.5, "worker": "w",
             "figures": {"f": 1.5}}]
    paths = sw.write_tables(rows, str(tmp_path))
    assert paths == [str(tmp_path / "race.csv"), str(tmp_path / "race.parquet")]
    assert written == [(("TABLE", {"a": ["1"], "b": [None], "rep": [0], "seed": [9], "wall_s": [0.5],
                                    "worker": ["w"], "f": [1.5]}), str(tmp_path / "race.parquet"))]


def test_plots_put_the_first_numeric_varying_parameter_on_x_in_size_order_one_line_per_other(tmp_path,
                                                                                           monkeypatch):
    import matplotlib.figure
    drawn: list[tuple] = []

    class Axes:
        def errorbar(self, x, y, yerr, **kw):
            drawn.append(("line", kw["label"], list(x), list(y), [list(e) for e in yerr]))

        def set_xticks(self, ticks, labels):
            drawn.append(("xticks", list(ticks), list(labels)))

        def set_xlabel(self, label):
            drawn.append(("xlabel", label))

        def set_ylabel(self, label):
            drawn.append(("ylabel", label))

        def set_title(self, title, **kw):
            drawn.append(("title", title))

        def legend(self, **kw):
            drawn.append(("legend",))

    class Figure:
        def __init__(self, **kw):
            pass

        def add_subplot(self):
            return Axes()

        def tight_layout(self):
            pass

        def savefig(self, path, **kw):
            drawn.append(("saved", os.path.basename(path)))

    monkeypatch.setattr(matplotlib.figure, "Figure", Figure)

    def point(sync, size, x):
        fig = {"mean": x, "ci_low": x - 1, "ci_high": x + 2, "n": 2}
        return {"command": "race", "params": {"sync": sync, "chunk_size": size},
                "figures": {"stale_reads": fig, "not_plotted": fig}}
    sw.write_plots([point("none", "8K", 3.0), point("none", "4K", 2.0), point("page", "4K", 1.0)], str(tmp_path))
    assert drawn == [
        ("line", "sync=none", [0, 1], [2.0, 3.0], [[1.0, 1.0], [2.0, 2.0]]),
        ("line", "sync=page", [0], [1.0], [[1.0], [2.0]]),
        ("xticks", [0, 1], ["4K", "8K"]), ("xlabel", "chunk_size"), ("ylabel", "stale_reads"),
        ("title", f"race: stale_reads (mean, 95% interval: {sw.INTERVAL_METHOD})"), ("legend",),
        ("saved", "race-stale_reads.png")]


# -- one task, with stand-ins for what it runs -----------------------------------------------------------

def _stand_in_stress(monkeypatch):
    import pybcache
    calls = []

    def stress(tracker, **kw):
        calls.append((tracker, kw))
        tracker.start(0, 4096)
        return {"ops_per_s": 5.0}

    monkeypatch.setattr(pybcache, "stress", stress)
    return calls


def test_a_stress_task_runs_a_second_unless_told_and_records_the_trackers_stats_and_memory(monkeypatch):
    import time
    calls = _stand_in_stress(monkeypatch)
    before = time.perf_counter()
    row = sw.run_task("stress", {"threads": 2, "fault_probability": 0.5, "seed": 3}, 1, 7)
    took = time.perf_counter() - before
    tracker, kw = calls[0]
    assert kw == {"seed": 7, "threads": 2, "seconds": 1.0}
    assert tracker.fault.seed == 7 and tracker.fault.probability == 0.5
    assert row["figures"]["ops_per_s"] == 5.0 and row["figures"]["stats.starts"] == 1
    assert row["figures"]["memory.pages"] == tracker.memory()["pages"] == 1
    assert (row["command"], row["params"]["threads"], row["rep"], row["seed"]) == ("stress", 2, 1, 7)
    assert 0 <= row["wall_s"] <= took
    sw.run_task("stress", {"ops": 10}, 0, None)                 # no seed: 0; ops given: no time limit
    tracker, kw = calls[1]
    assert kw == {"seed": 0, "ops": 10} and tracker.fault is None
    sw.run_task("stress", {"seconds": 0.5, "fault_probability": 0.5}, 0, None)
    tracker, kw = calls[2]
    assert kw == {"seed": 0, "seconds": 0.5} and tracker.fault.seed == 0


def _stand_in_race(monkeypatch, rc=0):
    import pybcache.commands.race as race_cmd
    seen = []

    def run(args):
        seen.append(args)
        if rc:
            sys.stderr.write("boom\n")
            return rc
        print(json.dumps({"stale_reads": 0, "seed": args.seed}))
        return 0

    monkeypatch.setattr(race_cmd, "run", run)
    return seen


def test_a_command_task_runs_with_the_tasks_seed_replacing_the_grids(monkeypatch):
    seen = _stand_in_race(monkeypatch)
    assert sw.run_task("race", {"sync": "page"}, 0, 11)["figures"] == {"stale_reads": 0, "seed": 11}
    assert sw.run_task("race", {"seed": 5, "sync": "page"}, 2, 7)["figures"]["seed"] == 7
    assert sw.run_task("race", {"sync": "page"}, 0, None)["figures"]["seed"] == 0   # the command's default
    assert [a.seed for a in seen] == [11, 7, 0] and all(a.json and a.sync == "page" for a in seen)


def test_a_command_task_that_fails_raises_with_its_command_line_and_stderr(monkeypatch):
    _stand_in_race(monkeypatch, rc=3)
    with pytest.raises(RuntimeError) as info:
        sw.run_task("race", {"seed": 5, "threads": 2}, 0, 7)
    assert str(info.value) == "pybcache race --threads=2 --seed=7 exited 3: boom"


def test_task_keys_are_per_command_and_seed():
    tasks = sw._tasks({"race": [{"sync": "page"}], "explore": [{"sync": "page"}]}, 2)
    assert [t[4] for t in tasks] == [sw.task_key(c, p, r, s) for c, p, r, s, _ in tasks]
    assert len({t[4] for t in tasks}) == 4
    assert [(t[0], t[2]) for t in tasks] == [("race", 0), ("race", 1), ("explore", 0), ("explore", 1)]


def test_summary_groups_repetitions_whatever_the_order_of_their_parameters():
    rows = [{"command": "race", "params": {"a": 1, "b": 2}, "wall_s": 1.0, "figures": {"x": 1.0}},
            {"command": "race", "params": {"b": 2, "a": 1}, "wall_s": 1.0, "figures": {"x": 3.0}}]
    (point,) = sw.summarize(rows)
    assert point["reps"] == 2 and point["figures"]["x"]["mean"] == 2.0


def test_seeds_and_cache_keys_do_not_depend_on_the_order_of_a_points_parameters():
    assert sw.task_seed("race", {"a": 1, "b": 2}, 0) == sw.task_seed("race", {"b": 2, "a": 1}, 0)
    assert sw.task_key("race", {"a": 1, "b": 2}, 0, 5) == sw.task_key("race", {"b": 2, "a": 1}, 0, 5)


def test_the_cache_keeps_rows_whose_keys_share_a_directory(tmp_path):
    out = str(tmp_path)
    sw._cache_put(out, "ab" + "0" * 62, {"x": 1})
    sw._cache_put(out, "ab" + "1" * 62, {"x": 2})
    assert sw._cache_get(out, "ab" + "0" * 62) == {"x": 1} and sw._cache_get(out, "ab" + "1" * 62) == {"x": 2}


def test_a_repeated_sweep_hands_each_cached_row_to_on_row(tmp_path, monkeypatch):
    _stand_in_race(monkeypatch)
    points = {"race": [{"sync": "page"}, {"sync": "none"}]}
    first = sw.sweep(points, out=str(tmp_path))
    seen = []
    again = sw.sweep(points, out=str(tmp_path), on_row=seen.append)
    assert again["cached"] == 2 and again["ran"] == 0 and seen == first["rows"] == again["rows"]


class _Future:
    def __init__(self, fn, args):
        self.fn, self.args, self.released = fn, args, False

    def result(self):
        return self.fn(*self.args)

    def release(self):
        self.released = True


class _Client:
    """Stands for a dask client: records what is submitted, runs it when its result is asked."""

    def __init__(self):
        self.submitted = []

    def submit(self, fn, *args, key, pure):
        fut = _Future(fn, args)
        self.submitted.append((fn, args, key, pure, fut))
        return fut


def test_a_sweep_with_a_client_submits_each_task_under_its_key_and_releases_the_futures(monkeypatch):
    import types
    _stand_in_race(monkeypatch)
    distributed = types.ModuleType("distributed")
    distributed.as_completed = lambda futures: reversed(list(futures))     # arrivals in another order
    monkeypatch.setitem(sys.modules, "distributed", distributed)
    client = _Client()
    points = {"race": [{"sync": "page"}, {"sync": "none"}]}
    res = sw.sweep(points, reps=2, client=client)
    tasks = sw._tasks(points, 2)
    assert [(fn, args, key, pure) for fn, args, key, pure, _ in client.submitted] == [
        (sw.run_task, (c, p, r, s), f"pybcache-sweep-{k}", False) for c, p, r, s, k in tasks]
    assert all(fut.released for *_, fut in client.submitted)
    assert [(r["params"]["sync"], r["rep"], r["seed"]) for r in res["rows"]] == [(p["sync"], r, s)
                                                                                for _, p, r, s, _ in tasks]
    assert res["ran"] == 4 and res["cached"] == 0


def _record_plots(monkeypatch):
    import matplotlib.figure
    drawn: list[tuple] = []

    class Axes:
        def errorbar(self, x, y, yerr, **kw):
            drawn.append(("line", kw["label"], list(x), list(y), [list(e) for e in yerr], kw["marker"],
                          kw["capsize"]))

        def set_xticks(self, ticks, labels):
            drawn.append(("xticks", list(ticks), list(labels)))

        def __getattr__(self, name):
            return lambda *a, **kw: None

    class Figure:
        def __init__(self, **kw):
            pass

        def add_subplot(self):
            return Axes()

        def __getattr__(self, name):
            return lambda *a, **kw: None

    monkeypatch.setattr(matplotlib.figure, "Figure", Figure)
    return drawn


def test_plots_order_sizes_by_value_join_other_parameters_and_draw_a_missing_figure_as_a_gap(tmp_path,
                                                                                           monkeypatch):
    drawn = _record_plots(monkeypatch)

    def point(size, seconds, x=None):
        figs = {} if x is None else {"stale_reads": {"mean": x, "ci_low": None, "ci_high": None, "n": 1}}
        return {"command": "race", "params": {"chunk_size": size, "sync": "none", "seconds": seconds,
                                              "reads": seconds}, "figures": figs}
    sw.write_plots([point("16K", 1, 2.0), point("4K", 1), point("4K", 2, 1.0)], str(tmp_path))
    assert drawn[-1] == ("xticks", [0, 1], ["4K", "16K"])
    lines = [d for d in drawn if d[0] == "line"]
    assert lines[0][:4] == ("line", "seconds=1, reads=1", [0, 1], lines[0][3])
    assert lines[0][3][1] == 2.0 and math.isnan(lines[0][3][0])          # 4K at seconds=1 has no figure
    assert lines[0][4] == [[0, 0], [0, 0]] and lines[0][5:] == ("o", 3)   # no interval with one repetition
    assert lines[1][1:5] == ("seconds=2, reads=2", [0], [1.0], [[0], [0]])


def test_a_command_with_nothing_varying_does_not_stop_the_plots_of_the_next(tmp_path, monkeypatch):
    _record_plots(monkeypatch)
    fig = {"mean": 1.0, "ci_low": None, "ci_high": None, "n": 1}
    summary = [{"command": "race", "params": {"sync": "page"}, "figures": {"stale_reads": fig}},
               {"command": "explore", "params": {"sync": "page"}, "figures": {"violations": fig}},
               {"command": "explore", "params": {"sync": "none"}, "figures": {"violations": fig}}]
    assert [os.path.basename(p) for p in sw.write_plots(summary, str(tmp_path))] == ["explore-violations.png"]


def test_a_plot_is_a_640_by_400_png(tmp_path):
    import struct
    fig = {"mean": 1.0, "ci_low": 0.5, "ci_high": 1.5, "n": 2}
    summary = [{"command": "explore", "params": {"writes": w}, "figures": {"violations": fig}} for w in (1, 2)]
    (path,) = sw.write_plots(summary, str(tmp_path))
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", head[16:24]) == (640, 400)


def test_summary_interval_over_three_repetitions_is_students_t_with_two_degrees_of_freedom(monkeypatch):
    calls: list[tuple[float, int]] = []
    _fake_scipy(monkeypatch, calls)
    monkeypatch.setattr(sw, "INTERVAL_METHOD", "t")
    rows = [{"command": "race", "params": {}, "wall_s": 1.0, "figures": {"x": x}} for x in (1.0, 2.0, 6.0)]
    (point,) = sw.summarize(rows)
    sd = math.sqrt(((1 - 3) ** 2 + (2 - 3) ** 2 + (6 - 3) ** 2) / 2)        # sample standard deviation
    half = 4.25 * sd / math.sqrt(3)
    assert point["figures"]["x"] == pytest.approx({"mean": 3.0, "ci_low": 3.0 - half, "ci_high": 3.0 + half, "n": 3})
    assert calls == [(0.975, 2)]


def test_a_stress_point_with_fault_injection_passes_the_check():
    sw._check_stress({"fault_probability": 0.5, "threads": 2, "ops": 10})
