"""``pybcache writeback``: JSON and table output, and hostile arguments (exit 2, one line, no traceback)."""
from __future__ import annotations

import json
import subprocess

import pytest

from helpers.clirun import run_pybcache

import pybcache.commands as cli
from pybcache.commands import writeback as command

pytestmark = pytest.mark.e2e

METRIC_KEYS = {"background_write_gib", "foreground_bandwidth_mib_s", "foreground_completion_s",
               "foreground_mean_latency_ms"}
HOSTILE = [
    ["--runs", "0"], ["--runs", "-1"], ["--runs", "abc"], ["--runs", "1e3"], ["--runs", "1001"],
    ["--runs", ""], ["--seed", "-1"], ["--seed", "x"], ["--seed", "9" * 30], ["--runs"], ["--bogus"],
]


def _pybcache(*args: str) -> subprocess.CompletedProcess:
    return run_pybcache(*args, timeout=120)


def _parser() -> cli._Parser:
    parser = cli._Parser(prog="pybcache")
    sub = parser.add_subparsers(dest="command", parser_class=cli._Parser)
    command.add_parser(sub)
    return parser


def test_json_output_has_the_table_flush_counts_and_posted_numbers():
    proc = _pybcache("writeback", "--runs", "1", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert set(doc["baseline"]) == METRIC_KEYS and set(doc["patched"]) == METRIC_KEYS
    assert set(doc["change_percent"]) == METRIC_KEYS
    assert doc["runs"] == 1 and doc["seed"] == 0
    assert doc["posted_table"]["change_percent"]["background_write_gib"] == -72.7
    assert doc["flushes"]["baseline"]["foreign_flushes_per_run"] > 0
    assert doc["flushes"]["patched"]["pages_per_flush"] < doc["flushes"]["baseline"]["pages_per_flush"]
    assert doc["patched"]["foreground_bandwidth_mib_s"] < 200
    assert proc.stderr == ""


@pytest.mark.parametrize("args", HOSTILE, ids=" ".join)
def test_hostile_arguments_exit_2_with_one_line_and_no_traceback(args):
    proc = _pybcache("writeback", *args)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("args", HOSTILE, ids=" ".join)
def test_hostile_arguments_are_refused_by_the_parser(args, capsys):
    with pytest.raises(SystemExit) as exc:
        _parser().parse_args(["writeback", *args])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_defaults_are_three_runs_seed_zero_and_text_output():
    args = _parser().parse_args(["writeback"])
    assert (args.runs, args.seed, args.json, args.churn, args.sensitivity) == (None, 0, False, False, False)
    assert command.DEFAULT_RUNS == 3          # what run() uses when --runs is not given
    assert args.func is command.run


def test_text_output_prints_the_posted_table_rows_and_flush_counts(capsys):
    args = _parser().parse_args(["writeback", "--runs", "1", "--seed", "4", "--churn"])
    assert command.run(args) == 0
    out = capsys.readouterr().out
    for label in ("Background file write I/O (GiB)", "Foreground bandwidth (MiB/s)",
                  "Foreground completion time (s)", "Foreground mean latency (ms)"):
        assert label in out
    assert "Posted change" in out and "-72.7%" in out
    assert "Foreign flushes issued" in out and "MiB per flush" in out
    assert "Stale flushes" in out and "device references (reviewer)" in out
