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


_DEFAULTS = {
    "memory": dict(sizes="1T,10T,100T", json=False),
    "bench": dict(quick=False, json=False),
    "race": dict(sync="page", check="after", alloc_failure=None, no_restart=False, granularity=None,
                 fault_probability=0.0, threads=2, writers=None, seconds=3.0, min_ops=0, seed=0, write_delay_us=20.0,
                 region_blocks=64, chunk_size=None, reclaim_every=0, hung_timeout=None, json=False),
    "explore": dict(sync="page", check="after", alloc_failure=None, no_restart=False, granularity=None, fault_at=0,
                    bounds=[(1, 1), (2, 1), (1, 2)], reclaims=None, overflow=None, counter_bits=None,
                    counter_max=None, preload=None, max_restarts=3, no_reduce=False, max_schedules=0, scenario=None,
                    distributed=False, scheduler=None, workers=None, tasks_per_worker=16, hung_timeout=None,
                    json=False),
    "fio": dict(size="10G", jobs=None, seconds=2.0, variants="none,global,page,atomic", read_percent=70,
                inflight=160, no_bounce_copy=False, chunk_size="32M", granularity="chunk", free="eager", seed=0,
                sync=None, hung_timeout=None, json=False, engine="model", write_delay="5ms", memory_baseline=False),
    "writeback": dict(runs=None, seed=0, churn=False, sensitivity=False, json=False),
    "report": dict(out="report", quick=False, seed=0),
    "serve": dict(sync="page", hung_timeout=None, size="10G", write_delay="5ms", socket=None, port=None, threads=64,
                  json_stats=None, json=False),
    "sweep": dict(grid="g.toml", reps=1, out="sweep-out", scheduler=None, workers=None, dashboard=False,
                  no_plots=False, json=False),
    "check-patch": dict(file="fix.c", seconds=2.0, tsan=False, json=False),
}


_POSITIONAL = {"sweep": ["g.toml"], "check-patch": ["fix.c"]}


def _module(command):
    import importlib
    return importlib.import_module(f"pybcache.commands.{commands.COMMANDS[command]}")


def _subparsers():
    parser = commands.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return parser, sub


@pytest.mark.parametrize("command", sorted(_DEFAULTS))
def test_each_command_parses_no_options_to_its_defaults_and_runs_its_own_run(command):
    assert set(_DEFAULTS) == set(commands.COMMANDS)
    args = vars(_args(command, *_POSITIONAL.get(command, [])))
    assert args.pop("command") == command and args.pop("func") is _module(command).run
    assert args == _DEFAULTS[command]
    assert all(type(args[k]) is type(v) for k, v in _DEFAULTS[command].items())   # 3.0, not 3


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
    want = dict(_DEFAULTS[command], **changed)
    assert {k: args[k] for k in want} == want
    assert all(type(args[k]) is type(v) for k, v in changed.items())


_CHOICES = [
    ("race", "--check", ("entry", "miss", "after", "read-done", "before")),
    ("race", "--alloc-failure", ("untracked", "hijack", "pool")),
    ("race", "--granularity", ("chunk", "page")),
    ("explore", "--check", ("entry", "miss", "after", "read-done", "before")),
    ("explore", "--alloc-failure", ("untracked", "hijack", "pool")), ("explore", "--granularity", ("chunk", "page")),
    ("explore", "--overflow", ("wrap", "clamp", "wait")), ("explore", "--counter-bits", ("16", "32", "64")),
    ("explore", "--scenario", ("1w1r", "2w1r", "1w2r", "2w2r", "3w1r")), ("fio", "--granularity", ("chunk", "page")),
    ("fio", "--free", ("eager", "deferred")), ("fio", "--engine", ("model", "nbd")),
]


def _refused(capsys, *argv):
    with pytest.raises(SystemExit) as ex:
        _args(*argv)
    err = capsys.readouterr().err
    assert ex.value.code == 2 and len(err.splitlines()) == 1
    return err


@pytest.mark.parametrize("command, option, choices", _CHOICES)
def test_a_choice_option_takes_each_of_its_choices_and_nothing_else(capsys, command, option, choices):
    dest = option[2:].replace("-", "_")
    for choice in choices:
        value = getattr(_args(command, option, choice), dest)
        assert str(value) == choice
    bogus = "8" if choices[0].isdigit() else "bogus"
    err = _refused(capsys, command, option, bogus)
    assert f"argument {option}: invalid choice: " in err and bogus in err


# (command, option, low, high, kind): the range each number option accepts, as its errors and help state it
_RANGES = [
    ("race", "--fault-probability", 0.0, 1.0, "closed"), ("race", "--threads", 2, 256, "int"),
    ("race", "--writers", 1, 255, "int"), ("race", "--seconds", 0.0, 3600.0, "open"),
    ("race", "--min-ops", 0, 10 ** 12, "int"), ("race", "--seed", 0, 2 ** 63 - 1, "int"),
    ("race", "--write-delay-us", 0.0, 1e6, "closed"), ("race", "--region-blocks", 1, 1 << 20, "int"),
    ("race", "--reclaim-every", 0, 1 << 40, "int"), ("race", "--hung-timeout", 0.0, 3600.0, "open"),
    ("explore", "--fault-at", 0, 1 << 62, "int"), ("explore", "--reclaims", 0, 4, "int"),
    ("explore", "--counter-max", 1, 1 << 62, "int"), ("explore", "--preload", 0, (1 << 32) - 1, "int"),
    ("explore", "--max-restarts", 0, 16, "int"), ("explore", "--max-schedules", 0, 1 << 62, "int"),
    ("explore", "--workers", 1, 256, "int"), ("explore", "--tasks-per-worker", 1, 1024, "int"),
    ("explore", "--hung-timeout", 0.0, 3600.0, "open"),
    ("fio", "--jobs", 1, 256, "int"), ("fio", "--seconds", 0, 3600, "open"),
    ("fio", "--read-percent", 0, 100, "int"), ("fio", "--inflight", 1, 1 << 20, "int"),
    ("fio", "--seed", 0, 2 ** 63 - 1, "int"), ("fio", "--hung-timeout", 0.0, 3600.0, "open"),
    ("writeback", "--runs", 1, 1000, "int"), ("writeback", "--seed", 0, (1 << 48) - 1, "int"),
    ("report", "--seed", 0, (1 << 48) - 1, "int"),
    ("serve", "--hung-timeout", 0.0, 3600.0, "open"), ("serve", "--port", 1, 65535, "int"),
    ("serve", "--threads", 1, 1024, "int"),
    ("sweep", "--reps", 1, 10_000, "int"), ("sweep", "--workers", 0, 256, "int"),
    ("check-patch", "--seconds", 0.0, 600.0, "open"),
]


def _number_cases(lo, hi, kind):
    """(accepted, refused) values at and just past each end of the range."""
    if kind == "int":
        return [lo, hi], [lo - 1, hi + 1]
    step = (hi - lo) / 7200
    accepted = [hi, lo + step] + ([] if kind == "open" else [lo])
    return accepted, [lo - step, hi + step] + ([lo] if kind == "open" else [])


@pytest.mark.parametrize("command, option, lo, hi, kind", _RANGES)
def test_a_number_option_takes_its_range_ends_and_refuses_just_past_them_naming_the_range(capsys, command, option,
                                                                                        lo, hi, kind):
    dest = option[2:].replace("-", "_")
    pos = _POSITIONAL.get(command, [])
    accepted, refused = _number_cases(lo, hi, kind)
    for value in accepted:
        got = getattr(_args(command, *pos, option, repr(value)), dest)
        assert got == value and type(got) is (int if kind == "int" else float)
    for value in refused:
        err = _refused(capsys, command, *pos, option, repr(value))
        assert f"argument {option}: must be in " in err
        assert f"{'(' if kind == 'open' else '['}{lo}, {hi}]" in err
    if kind == "int":
        assert "expected an integer" in _refused(capsys, command, *pos, option, "1.5")


def test_the_range_table_covers_every_number_option():
    _, sub = _subparsers()
    numbers = {(command, a.option_strings[0]) for command, p in sub.choices.items() for a in p._actions
               if a.type is not None and getattr(a.type, "__qualname__", "").startswith(("int_arg", "float_arg"))}
    assert numbers == {(c, o) for c, o, *_ in _RANGES}


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
    """(command, [options with their value words]) from README.md's command table and docs/cachedev.md's."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    text = open(os.path.join(root, "README.md"), encoding="utf-8").read()
    lines = [m.group(1).replace("\\|", "|") for m in re.finditer(r"^\| `pybcache (.+?)` \|", text, re.M)]
    doc = open(os.path.join(root, "docs", "cachedev.md"), encoding="utf-8").read()
    block = doc.split("## Command line\n\n```\n", 1)[1].split("```", 1)[0]
    lines += [s.replace("\n", " ") for s in re.split(r"\npybcache ", "\n" + block) if s.strip()]
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
    assert len(seen) >= 30


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
    assert shared == {"--check": {None}, "--alloc-failure": {None}, "--granularity": {None}} | {
        o: {m} for o, m in (("--seconds", "S"), ("--hung-timeout", "S"), ("--seed", "N"), ("--threads", "N"),
                            ("--workers", "N"), ("--scheduler", "ADDR"), ("--out", "DIR"), ("--size", "SIZE"),
                            ("--chunk-size", "SIZE"), ("--write-delay", "TIME"))}


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
