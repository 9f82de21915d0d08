"""The command-line reference, docs/cli.md, written from the parsers themselves.

Every command's one-line summary, description and options (names, value, choices, default, help text) as
Markdown tables, built from the same ``argparse`` objects ``pybcache`` parses with, not from argparse's own help
formatter (whose layout changes between Python versions and terminal widths). ``make cli-docs`` rewrites the
file; ``tests/docs/test_cli_reference.py`` fails when the file and the parsers disagree.

    python -m pybcache.commands._reference docs/cli.md            # rewrite it
    python -m pybcache.commands._reference --check docs/cli.md    # exit 1 if it is not current
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from . import COMMANDS, build_parser

__all__ = ["reference", "main"]

HEADER = """# Command-line reference

<!-- Written by `make cli-docs` from the parsers (pybcache/commands/_reference.py); do not edit by hand:
tests/docs/test_cli_reference.py fails when this file and the parsers disagree. -->

Every command of `pybcache`, as its parser defines it. Invalid arguments exit with status 2 and one line on
stderr; `--json` prints the machine-readable result instead of the table. Guides: [README](../README.md),
[cachedev.md](cachedev.md) (race, explore, fio), [writeback.md](writeback.md), [serve.md](serve.md),
[check-patch.md](check-patch.md), [distributed.md](distributed.md) (sweep, explore --distributed),
[benchmarks.md](benchmarks.md) (bench).
"""


def _cell(text: object) -> str:
    """``text`` fit for one Markdown table cell: one line, ``|`` escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _value(action: argparse.Action) -> str:
    if action.nargs == 0:  # a flag
        return ""
    if action.choices is not None:
        return " \\| ".join(f"`{_cell(c)}`" for c in action.choices)
    metavar = action.metavar if action.metavar is not None else action.dest.upper()
    return f"`{_cell(metavar)}`"


def _default(action: argparse.Action) -> str:
    if action.nargs == 0 or action.default is None or action.default is argparse.SUPPRESS:
        return ""
    return f"`{_cell(action.default)}`"


def _options(parser: argparse.ArgumentParser) -> list[str]:
    rows = ["| option | value | default | what it does |", "|---|---|---|---|"]
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        names = ", ".join(f"`{s}`" for s in action.option_strings) or f"`{action.dest}` (positional)"
        rows.append(f"| {names} | {_value(action)} | {_default(action)} | {_cell(action.help or '')} |")
    for group in parser._mutually_exclusive_groups:
        members = [f"`{a.option_strings[0]}`" for a in group._group_actions]
        rows += ["", f"{', '.join(members[:-1])} and {members[-1]} exclude each other"
                     + ("; one of them is required." if group.required else ".")]
    return rows


def reference() -> str:
    """docs/cli.md's text, from the parsers."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    summary = {a.dest: a.help for a in sub._choices_actions}
    out = [HEADER, "## `pybcache`", "", _cell(parser.description), "", *_options(parser), "",
           "| command | what it does |", "|---|---|"]
    out += [f"| [`{name}`](#pybcache-{name}) | {_cell(summary[name])} |" for name in COMMANDS]
    for name in COMMANDS:
        p = sub.choices[name]
        out += ["", f"## `pybcache {name}`", "", _cell(summary[name]) + "."]
        if p.description:
            out += ["", _cell(p.description)]
        out += ["", *_options(p)]
    return "\n".join(out) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pybcache.commands._reference",
                                 description="Write docs/cli.md from the parsers, or check that it is current.")
    ap.add_argument("path", type=Path, help="the reference file (docs/cli.md)")
    ap.add_argument("--check", action="store_true", help="exit 1 if the file differs, write nothing")
    args = ap.parse_args(argv)
    text = reference()
    if args.check:
        try:
            current = args.path.read_text(encoding="utf-8")
        except OSError as exc:
            print(f"{args.path}: {exc.strerror}", file=sys.stderr)
            return 1
        if current != text:
            print(f"{args.path} is not current: run make cli-docs", file=sys.stderr)
            return 1
        return 0
    args.path.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
