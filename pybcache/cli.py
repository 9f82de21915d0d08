"""The ``pybcache`` console script's entry point (``pybcache.cli:main``); the command line's code is the
:mod:`pybcache.commands` package."""
from __future__ import annotations

import sys

from .commands import COMMANDS, _Parser, build_parser, main  # noqa: F401 - _Parser: for tests building sub-parsers

__all__ = ["COMMANDS", "build_parser", "main"]

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
