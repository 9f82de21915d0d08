"""What the lab prints for people while it works: the one progress bar and plain text tables.

A low module (it imports nothing of the package), so that an experiment can show its progress without
reaching up into the command line; :mod:`pybcache.commands` and :mod:`pybcache.report` use it too.
"""
from __future__ import annotations

import contextlib
import sys
from typing import Any, Iterable, Iterator, Sequence

__all__ = ["status_bar", "progress", "format_table"]


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
