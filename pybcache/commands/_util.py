"""Shared helpers of the command line: sizes, errors, JSON output, tables and the progress bar.

Every command reports bad arguments through :class:`UsageError`; :func:`pybcache.commands.main` (the
``pybcache`` console script, through :mod:`pybcache.cli`) turns it into one line on stderr and exit status 2,
never a traceback.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
from typing import Any, Callable, Iterable, Iterator, Sequence

from .. import units
from ..units import format_bytes
from ..validate import range_text

__all__ = ["UsageError", "add_tracking_arguments", "int_arg", "float_arg", "parse_size", "parse_size_list",
           "parse_choice_list", "emit_json", "progress",
           "format_bytes", "format_table"]



class UsageError(ValueError):
    """A command-line argument is invalid; the message is printed as one line, exit status 2."""


def add_tracking_arguments(parser: argparse.ArgumentParser, syncs: Sequence[str]) -> None:
    """The cached-device commands' tracker options: ``--sync`` (a variant, or a kernel patch's ``.c``
    file: pybcache/commands/_sync.py loads it), ``--check``, ``--alloc-failure`` (None when not given,
    so that a command can refuse it with a patch; the default is hijack)."""
    from ._sync import sync_arg
    parser.add_argument("--sync", type=sync_arg(syncs), default="page", metavar="VARIANT|PATCH.c",
                        help=f"tracking variant ({', '.join(syncs)}; none = unpatched), or a kernel patch's .c "
                             f"file, which is compiled and loaded (default page)")
    parser.add_argument("--check", choices=("entry", "miss", "after", "before"), default="after",
                        help="where a read consults the tracker: at request entry, in the miss path before the "
                             "check key, or after the check key (default after; before = entry, its old name)")
    parser.add_argument("--alloc-failure", choices=("untracked", "hijack", "pool"), default=None,
                        help="tracker policy on page-allocation failure (default hijack)")


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


@contextlib.contextmanager
def status_bar(desc: str, *, total: int | None = None, quiet: bool = False) -> Iterator[Any]:
    """The one progress bar of the command line: a tqdm bar on stderr, silent when ``quiet`` (``--json``)
    or when stderr is not a terminal. Yields the bar: ``update(n)`` advances it, ``set_postfix_str(text)``
    names the step running now. Closed (and erased) on exit, errors included."""
    from tqdm import tqdm
    bar = tqdm(total=total, desc=desc, file=sys.stderr, leave=False, disable=quiet or not sys.stderr.isatty(),
               bar_format=None if total else "{desc}: {elapsed}{postfix}")
    try:
        yield bar
    finally:
        bar.close()


def progress(iterable: Iterable[Any], *, total: int | None = None, desc: str = "",
             quiet: bool = False) -> Iterator[Any]:
    """Wrap ``iterable`` in :func:`status_bar`, one step per item."""
    with status_bar(desc, total=total, quiet=quiet) as bar:
        for item in iterable:
            yield item
            bar.update(1)


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain aligned text table: first column left-aligned, the others right-aligned."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    out = []
    for k, row in enumerate(cells):
        parts = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:])]
        out.append("  ".join(parts).rstrip())
        if k == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)
