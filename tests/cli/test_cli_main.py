"""``pybcache``'s shared command line (``pybcache/commands/__init__.py``): the parser, its errors as one line and
the exit statuses, ``--version``, and what every command's parser has in common (help texts, documented synopses,
shared option names)."""
from __future__ import annotations

import argparse
import os
import re

import pytest

from pybcache import commands
from pybcache import __version__
from pybcache.commands import memory

from helpers.command_stand_ins import _args


_POSITIONAL = {"sweep": ["g.toml"], "check-patch": ["fix.c"]}


def _subparsers():
    parser = commands.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return parser, sub


@pytest.mark.parametrize("command, argv, changed", [
    ("memory", ["--sizes", "1K", "--json"], dict(sizes="1K", json=True)),
    ("bench", ["--quick", "--json"], dict(quick=True, json=True)),
    ("race", ["--sync", "none", "--check", "miss", "--alloc-failure", "untracked", "--no-restart", "--granularity",
              "page", "--fault-probability", "0.25", "--threads", "9", "--writers", "3", "--seconds", "1",
              "--min-ops", "12", "--seed", "5", "--write-delay-us", "7", "--region-blocks", "8", "--chunk-size", "8K",
              "--reclaim-every", "2", "--hung-timeout", "4", "--json"],
     dict(sync="none", check="miss", alloc_failure="untracked", no_restart=True, granularity="page",
          fault_probability=0.25, threads=9, writers=3, seconds=1.0, min_ops=12, seed=5, write_delay_us=7.0,
          region_blocks=8, chunk_size="8K", reclaim_every=2, hung_timeout=4.0, json=True)),
    ("explore", ["--sync", "atomic", "--check", "entry", "--alloc-failure", "pool", "--no-restart", "--granularity",
                 "chunk", "--fault-at", "2", "--bounds", "2w2r", "--reclaims", "1", "--overflow", "clamp",
                 "--counter-bits", "32", "--counter-max", "5", "--preload", "6", "--max-restarts", "0", "--no-reduce",
                 "--max-schedules", "7", "--scenario", "3w1r", "--distributed", "--scheduler", "tcp://h:1",
                 "--workers", "2", "--tasks-per-worker", "3", "--hung-timeout", "0.5", "--json"],
     dict(sync="atomic", check="entry", alloc_failure="pool", no_restart=True, granularity="chunk", fault_at=2,
          bounds=[(2, 2)], reclaims=1, overflow="clamp", counter_bits=32, counter_max=5, preload=6, max_restarts=0,
          no_reduce=True, max_schedules=7, scenario="3w1r", distributed=True, scheduler="tcp://h:1", workers=2,
          tasks_per_worker=3, hung_timeout=0.5, json=True)),
    ("fio", ["--size", "1G", "--jobs", "2", "--seconds", "3", "--variants", "page", "--read-percent", "50",
             "--inflight", "8", "--no-bounce-copy", "--chunk-size", "4K", "--granularity", "page", "--free",
             "deferred", "--seed", "3", "--sync", "fix.c", "--hung-timeout", "1", "--json", "--engine", "nbd",
             "--write-delay", "1ms", "--memory-baseline"],
     dict(size="1G", jobs=2, seconds=3.0, variants="page", read_percent=50, inflight=8, no_bounce_copy=True,
          chunk_size="4K", granularity="page", free="deferred", seed=3, sync="fix.c", hung_timeout=1.0, json=True,
          engine="nbd", write_delay="1ms", memory_baseline=True)),
    ("writeback", ["--runs", "2", "--seed", "4", "--churn", "--json"], dict(runs=2, seed=4, churn=True, json=True)),
    ("writeback", ["--sensitivity"], dict(sensitivity=True)),
    ("report", ["--out", "r", "--quick", "--seed", "2"], dict(out="r", quick=True, seed=2)),
    ("serve", ["--sync", "global", "--hung-timeout", "3", "--size", "4K", "--write-delay", "0", "--port", "9",
               "--threads", "2", "--json-stats", "s.json", "--json"],
     dict(sync="global", hung_timeout=3.0, size="4K", write_delay="0", port=9, threads=2, json_stats="s.json",
          json=True)),
    ("serve", ["--socket", "/tmp/s"], dict(socket="/tmp/s")),
    ("sweep", ["--reps", "2", "--out", "o", "--scheduler", "tcp://h:2", "--workers", "0", "--dashboard",
               "--no-plots", "--json"],
     dict(reps=2, out="o", scheduler="tcp://h:2", workers=0, dashboard=True, no_plots=True, json=True)),
    ("check-patch", ["--seconds", "0.5", "--tsan", "--json"], dict(seconds=0.5, tsan=True, json=True)),
])
def test_each_option_given_lands_in_its_own_field_with_its_type(command, argv, changed):
    args = vars(_args(command, *_POSITIONAL.get(command, []), *argv))
    assert {k: args[k] for k in changed} == changed
    assert all(type(args[k]) is type(v) for k, v in changed.items())


def _refused(capsys, *argv):
    with pytest.raises(SystemExit) as ex:
        _args(*argv)
    err = capsys.readouterr().err
    assert ex.value.code == 2 and len(err.splitlines()) == 1
    return err


@pytest.mark.parametrize("command, first, second", [("serve", ["--socket", "/tmp/s"], ["--port", "9"]),
                                                    ("writeback", ["--churn"], ["--sensitivity"])])
def test_exclusive_options_refuse_each_other(capsys, command, first, second):
    err = _refused(capsys, command, *first, *second)
    assert f"argument {second[0]}: not allowed with argument {first[0]}" in err


def _options():
    _, sub = _subparsers()
    for command, p in sub.choices.items():
        for a in p._actions:
            if not isinstance(a, argparse._HelpAction):
                yield command, a


def test_every_command_is_listed_with_a_help_line_and_has_a_description():
    parser, sub = _subparsers()
    listed = {c.dest: c.help for c in sub._choices_actions}
    assert set(listed) == set(commands.COMMANDS) and all(listed.values())
    for command, p in sub.choices.items():
        assert p.description and p.prog == f"pybcache {command}"
        assert p.format_help()   # every help text formats (a stray % would raise)


def test_every_option_has_a_help_text():
    assert all(a.help for _, a in _options())


def test_a_help_that_states_a_default_states_the_parsed_one_and_every_set_default_is_stated():
    for command, a in _options():
        if a.default in (None, False):
            continue
        # stated as "(default X)", "X (default)", or for --variants as the set it is a subset of
        assert "default" in a.help or f"subset of {a.default}" in a.help, (command, a.dest, a.help)
        m = re.search(r"\(default ([^;:)]+?)(?: = [^;)]*)?(?:[;)]|, )", a.help)
        if m is None or not isinstance(a.default, (int, float, str)):
            continue
        stated = m.group(1).removeprefix("./")
        assert (float(stated) == a.default) if isinstance(a.default, (int, float)) else stated == a.default, (
            command, a.dest, a.help)


def test_a_help_that_states_a_range_states_the_one_checked():
    for command, a in _options():
        m = re.search(r"(?<![\w.])(\d+(?:\.\d+)?)\.\.(\d+(?:\.\d+)?)\b", a.help or "")
        if m is None:
            continue
        pos = _POSITIONAL.get(command, [])
        lo, hi = (float(g) if "." in g else int(g) for g in m.groups())
        flag = a.option_strings[0]
        dest = a.dest
        assert getattr(_args(command, *pos, flag, str(lo)), dest) == lo
        assert getattr(_args(command, *pos, flag, str(hi)), dest) == hi
        for past in (hi + 1, lo - 1):
            try:
                _args(command, *pos, flag, str(past))
            except SystemExit:
                continue
            # taken only where the help says what that value does (sweep --workers: "0 runs every task ...")
            assert re.search(rf"; {past} \w", a.help), (command, flag, past, a.help)


def _documented_synopses():
    """(command, [options with their value words]) from docs/cachedev.md's hand-written synopses (docs/cli.md, the
    parsers' own reference, is checked by tests/docs/test_cli_reference.py)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    doc = open(os.path.join(root, "docs", "cachedev.md"), encoding="utf-8").read()
    block = doc.split("## Command line\n\n```\n", 1)[1].split("```", 1)[0]
    lines = [s.replace("\n", " ") for s in re.split(r"\npybcache ", "\n" + block) if s.strip()]
    for line in lines:
        command = line.split()[0]
        yield command, re.findall(r"(--[a-z][a-z-]*)(?: ([^\s\[\]]+))?", line)


def test_the_documented_synopses_name_real_options_metavars_and_values():
    _, sub = _subparsers()
    seen = set()
    for command, options in _documented_synopses():
        actions = {s: a for a in sub.choices[command]._actions for s in a.option_strings}
        pos = _POSITIONAL.get(command, [])
        for option, word in options:
            assert option in actions, (command, option)
            if not word or word in ("...", "|"):
                continue
            if re.fullmatch(r"[A-Z][A-Z0-9]*(\|[A-Z][A-Za-z0-9.]*)*|[A-Z]+\.c", word):
                assert actions[option].metavar == word, (command, option, word)
                seen.add((command, option))
            else:   # an example value, or the choices joined by |: each one parses
                for value in word.split("|"):
                    _args(command, *pos, option, value)
    assert len(seen) >= 15   # race, explore and fio: 19 option metavars today


def test_an_option_several_commands_share_names_its_value_alike_in_each_and_in_capitals():
    metavars = {}
    for command, a in _options():
        if a.option_strings and a.nargs != 0:
            shown = a.metavar if a.metavar is not None else None if a.choices else a.dest.upper()   # as argparse
            assert shown is None or shown == shown.upper().replace(".C", ".c"), (command, a.option_strings)
            metavars.setdefault(a.option_strings[0], {})[command] = shown
    shared = {option: set(by.values()) for option, by in metavars.items() if len(by) > 1}
    # fio's --sync takes only a patch (its variants are --variants); everywhere else a variant or a patch
    assert shared.pop("--sync") == {"VARIANT|PATCH.c", "PATCH.c"} and metavars["--sync"]["fio"] == "PATCH.c"
    # the race's writethrough failures are a probability, the explorer's the K-th allocation
    assert shared.pop("--cache-alloc-fail") == {"P", "K"} and metavars["--cache-alloc-fail"]["explore"] == "K"
    # check-patch's --check names a check of the battery (NAME); race's and explore's a read-check placement
    assert shared.pop("--check") == {None, "NAME"} and metavars["--check"]["check-patch"] == "NAME"
    # kernel race's --fail-alloc names the kernel function failslab fails (SYMBOL); check-patch's a mode (choices)
    assert shared.pop("--fail-alloc") == {"SYMBOL", None} and metavars["--fail-alloc"]["check-patch"] is None
    # fio's --track takes a list of placements (measured side by side); race's and explore's one of them
    assert shared.pop("--track") == {None, "LIST"} and metavars["--track"]["fio"] == "LIST"
    assert shared == {"--alloc-failure": {None}, "--granularity": {None}, "--writes": {None},
                      "--invalidate": {None}, "--unhijack": {None}} | {
        o: {m} for o, m in (("--seconds", "S"), ("--hung-timeout", "S"), ("--seed", "N"), ("--threads", "N"),
                            ("--workers", "N"), ("--scheduler", "ADDR"), ("--out", "DIR"), ("--size", "SIZE"),
                            ("--chunk-size", "SIZE"), ("--write-delay", "TIME"), ("--writers", "N"),
                            ("--jobs", "N"))}


def test_every_commands_json_flag_is_described_alike():
    # serve's adds where its banner goes; report has none (it writes report.json beside report.md)
    helps = {command: a.help for command, a in _options() if a.option_strings == ["--json"]}
    assert set(helps) == set(commands.COMMANDS) - {"report"}
    assert helps.pop("serve").startswith("print the final counters as JSON") and len(set(helps.values())) == 1


def test_fios_sync_takes_a_patch_file_and_no_variant_name(capsys, tmp_path, monkeypatch):
    # fio measures the variants by --variants; --sync adds a patch's column, so a variant's name is refused
    monkeypatch.chdir(tmp_path)  # (an existing file is taken for a patch: none named "page" here)
    err = _refused(capsys, "fio", "--sync", "page")
    assert "argument --sync: expected a kernel patch's .c file, got 'page'" in err
    path = tmp_path / "patch"
    path.write_text("")
    assert _args("fio", "--sync", str(path)).sync == str(path) and _args("fio", "--sync", "x.c").sync == "x.c"


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
