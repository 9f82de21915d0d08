"""The ``pybcache`` command line: all of its code lives in this package.

* this module: the parser of every command and :func:`main` (the console script ``pybcache``, whose entry
  point :mod:`pybcache.commands` re-exports it);
* :mod:`._util`: the helpers every command shares (sizes, :class:`UsageError`, JSON, tables, the one
  progress bar);
* one module per command, with ``add_parser(subparsers)`` and ``run(args) -> int``.

Invalid arguments exit with status 2 and one line on stderr.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from typing import NoReturn, Sequence

from .. import __version__
from ._util import UsageError

# command name -> module of this package (imported when the parser is built)
COMMANDS = {
    "memory": "memory",
    "bench": "bench",
    "race": "race",
    "explore": "explore",
    "fio": "fio",
    "writeback": "writeback",
    "report": "report",
    "serve": "serve",
    "sweep": "sweep",
    "check-patch": "check_patch",
    "kernel": "kernel",
}


def _one_line(text: object) -> str:
    """``text`` with line breaks escaped, so that an error stays one line whatever the user typed."""
    return str(text).replace("\r", "\\r").replace("\n", "\\n")


class _Parser(argparse.ArgumentParser):
    """argparse that reports errors as one line and exit status 2 (no usage dump)."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"pybcache: error: {_one_line(message)}\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="pybcache", description="A userspace laboratory for bcache bypass-write tracking "
                                                  "and memcg foreign-bdev writeback.")
    parser.add_argument("--version", action="version", version=f"pybcache {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for module in COMMANDS.values():
        importlib.import_module(f"pybcache.commands.{module}").add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        # Bare `pybcache`: what it can do, on stderr (nothing was asked for, so it is a usage error).
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except UsageError as exc:
        sys.stderr.write(f"pybcache {args.command}: error: {_one_line(exc)}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("pybcache: interrupted\n")
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
