"""``pybcache explore`` (``pybcache/commands/explore.py``): its bounds and configuration, and its run. The experiment
it starts is stood in for (no subprocess, no C model): these tests state what the command hands on, prints, writes
as JSON and returns for given arguments and results."""
from __future__ import annotations

import argparse
from types import SimpleNamespace

import pytest

from pybcache import commands
from pybcache.commands import explore
from pybcache._console import format_table


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
        granularity="chunk", alloc_failure="mempool", reclaims=0, counter_bits=None, counter_max=None,
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
        "explore: sync=page check=entry restart=on granularity=chunk alloc_failure=mempool fault_at=0 overflow=wait "
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
    assert out == {"sync": "page", "invalidate": "at-submit", "kernel_report_schedules": 3, "schedules": 93,
                   "violations": 3, "counterexample": ["a"], "counterexample_bound": "2w1r", "finished": False,
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
    assert str(err.value) == ("--distributed: dask.distributed is not installed: run python3 -m pip install "
                              "'.[distributed]' in the pybcache clone, or pip install 'PATH[distributed]' with PATH "
                              "the clone")
    assert calls == []
