"""``pybcache report``: run the experiments and write one Markdown report."""
from __future__ import annotations

import argparse
import os
import sys
import time

from .._cliutil import UsageError
from ..report import SECTIONS, write_report


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="run every experiment into one Markdown report",
                       description="Run the memory, bench and the other experiments, write DIR/report.md.")
    p.add_argument("--out", default="report", metavar="DIR", help="output directory (default ./report)")
    p.add_argument("--quick", action="store_true", help="short runs (noisier figures)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    out = args.out
    if os.path.exists(out) and not os.path.isdir(out):
        raise UsageError(f"--out: {out!r} exists and is not a directory")
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out: cannot create {out!r}: {exc.strerror}") from None
    from tqdm import tqdm
    bar = tqdm(total=len(SECTIONS), desc="report", file=sys.stderr, disable=not sys.stderr.isatty())

    def note(name: str) -> None:
        bar.set_postfix_str(name)
        bar.update(0 if bar.n == 0 and name == SECTIONS[0][0] else 1)

    t0 = time.perf_counter()
    path, timings = write_report(out, quick=args.quick, progress=note)
    bar.update(bar.total - bar.n)
    bar.close()
    print(f"wrote {path} in {time.perf_counter() - t0:.1f} s "
          f"({', '.join(f'{k} {v:.1f} s' for k, v in timings.items())})")
    return 0
