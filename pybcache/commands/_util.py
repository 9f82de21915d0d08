"""Shared helpers of the command line: argument types, sizes, errors and JSON output (the progress bar and
tables are :mod:`pybcache._console`).

Every command reports bad arguments through :class:`UsageError`; :func:`pybcache.commands.main` (the
``pybcache`` console script, through :mod:`pybcache.commands`) turns it into one line on stderr and exit status 2,
never a traceback.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Callable, Sequence

from .. import units
from ..validate import range_text

__all__ = ["UsageError", "int_arg", "float_arg", "parse_size", "parse_size_list", "parse_choice_list", "emit_json"]



class UsageError(ValueError):
    """A command-line argument is invalid; the message is printed as one line, exit status 2."""


def int_arg(lo: int, hi: int) -> Callable[[str], int]:
    """An argparse ``type=`` accepting a decimal integer in [lo, hi] (errors exit 2, one line)."""
    def parse(text: str) -> int:
        try:
            value = int(str(text).strip(), 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer in {range_text(lo, hi)}, got {text!r}") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"must be in {range_text(lo, hi)}, got {value}")
        return value
    return parse


def float_arg(lo: float, hi: float, *, open_low: bool = False) -> Callable[[str], float]:
    """An argparse ``type=`` accepting a number in [lo, hi] (or (lo, hi] with ``open_low``); NaN and
    infinities are refused."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not ((lo < value <= hi) if open_low else (lo <= value <= hi)):
            raise argparse.ArgumentTypeError(f"must be in {range_text(lo, hi, open_low=open_low)}, got {text}")
        return value
    return parse


def parse_size(text: str, *, name: str = "size") -> int:
    """Parse ``512``, ``4K``, ``32M``, ``10G``, ``1T`` (binary units) into bytes: :func:`pybcache.units.parse_size`
    with its error as a :class:`UsageError`.

    :param text: the size as typed.
    :param name: the argument's name, used in the error message.
    :raises UsageError: if the text is not a positive size.
    """
    try:
        return units.parse_size(text, name=name)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def parse_size_list(text: str, *, name: str = "sizes") -> list[int]:
    """Parse a comma-separated list of sizes (``1T,10T,100T``)."""
    parts = [p for p in str(text).split(",") if p.strip()]
    if not parts:
        raise UsageError(f"{name}: expected a comma-separated list of sizes, got {text!r}")
    return [parse_size(p, name=name) for p in parts]


def parse_choice_list(text: str, allowed: Sequence[str], *, name: str) -> list[str]:
    """Parse a comma-separated list whose items must all be in ``allowed``."""
    items = [p.strip() for p in str(text).split(",") if p.strip()]
    if not items:
        raise UsageError(f"{name}: expected a comma-separated list from {', '.join(allowed)}")
    for item in items:
        if item not in allowed:
            raise UsageError(f"{name}: unknown value {item!r} (allowed: {', '.join(allowed)})")
    return items


def emit_json(obj: Any) -> None:
    """Print ``obj`` as indented JSON on stdout."""
    json.dump(obj, sys.stdout, indent=2, sort_keys=False, default=_json_default)
    sys.stdout.write("\n")


def _json_default(obj: Any) -> Any:
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy is a dependency
        raise TypeError(f"not JSON serialisable: {type(obj).__name__}")
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


