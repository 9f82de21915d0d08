"""docs/cli.md is the parsers' own reference: every command, option, value, default and help text in it is the
one ``pybcache`` parses with (issue 16: docs state only what the code does). ``make cli-docs`` rewrites it."""
from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from pybcache.commands import COMMANDS, _reference, build_parser

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "cli.md"


def test_the_cli_reference_is_current():
    assert DOC.read_text(encoding="utf-8") == _reference.reference(), \
        "docs/cli.md differs from the parsers: run `make cli-docs` and commit the result"


def _subparsers():
    parser = build_parser()
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_option_of_every_command_has_its_row_with_its_help(name):
    text = _reference.reference()
    section = text.split(f"## `pybcache {name}`\n", 1)[1].split("\n## ", 1)[0]
    for action in _subparsers()[name]._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        row = next((line for line in section.splitlines()
                    if line.startswith(f"| `{action.option_strings[0]}`" if action.option_strings
                                       else f"| `{action.dest}` (positional)")), None)
        assert row is not None, f"{name}: no row for {action.option_strings or action.dest}"
        assert row.endswith(f" | {' '.join((action.help or '').split()).replace('|', chr(92) + '|')} |")


def test_a_row_shows_the_value_its_choices_and_its_default():
    rows = _reference._options(_subparsers()["race"])
    assert rows[:2] == ["| option | value | default | what it does |", "|---|---|---|---|"]
    check = next(r for r in rows if r.startswith("| `--check` |"))
    assert check.startswith("| `--check` | `entry` \\| `miss` \\| `after` \\| `read-done` \\| `before` | `after` | ")
    threads = next(r for r in rows if r.startswith("| `--threads` |"))
    assert threads.startswith("| `--threads` | `N` | `2` | ")
    flag = next(r for r in rows if r.startswith("| `--json` |"))
    assert flag.startswith("| `--json` |  |  | ")  # a flag: no value, no default shown


def test_a_positional_a_pipe_and_a_missing_metavar_are_written_for_a_table():
    p = argparse.ArgumentParser()
    p.add_argument("patch", help="the patch's .c file")
    p.add_argument("--sync", metavar="A|B", default="x|y", help="one | two\n  lines")
    p.add_argument("--size")
    rows = _reference._options(p)
    assert rows[2:] == ["| `patch` (positional) | `PATCH` |  | the patch's .c file |",
                        "| `--sync` | `A\\|B` | `x\\|y` | one \\| two lines |",
                        "| `--size` | `SIZE` |  |  |"]


def test_main_writes_and_checks_the_file(tmp_path, capsys):
    path = tmp_path / "cli.md"
    assert _reference.main(["--check", str(path)]) == 1
    assert capsys.readouterr().err.startswith(f"{path}: ")  # the file and why it could not be read
    assert _reference.main([str(path)]) == 0
    assert path.read_text(encoding="utf-8") == _reference.reference()
    assert _reference.main(["--check", str(path)]) == 0
    path.write_text(path.read_text(encoding="utf-8") + "x", encoding="utf-8")
    assert _reference.main(["--check", str(path)]) == 1
    assert capsys.readouterr().err.endswith("is not current: run make cli-docs\n")


def test_an_option_with_several_names_lists_each():
    p = argparse.ArgumentParser()
    p.add_argument("-n", "--name", help="x")
    assert _reference._options(p)[2] == "| `-n`, `--name` | `NAME` |  | x |"


def test_main_says_what_it_does(capsys, plain_help):
    with pytest.raises(SystemExit) as exc:
        _reference.main(["--help"])
    assert exc.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert out.startswith("usage: python -m pybcache.commands._reference [-h] [--check] path "
                          "Write docs/cli.md from the parsers, or check that it is current. ")
    assert "path the reference file (docs/cli.md)" in out
    assert "--check exit 1 if the file differs, write nothing" in out


def test_options_that_exclude_each_other_are_said_to():
    p = argparse.ArgumentParser()
    g = p.add_mutually_exclusive_group()
    g.add_argument("--a", action="store_true", help="x")
    g.add_argument("--b", action="store_true", help="y")
    h = p.add_mutually_exclusive_group(required=True)
    for name in ("--c", "--d", "--e"):
        h.add_argument(name, action="store_true")
    assert _reference._options(p)[-4:] == ["", "`--a` and `--b` exclude each other.",
                                           "", "`--c`, `--d` and `--e` exclude each other; one of them is required."]
    assert "`--socket` and `--port` exclude each other." in _reference.reference()
