"""``pybcache report``: run the experiments and write one Markdown report with plots."""
from __future__ import annotations

import argparse
import os
import time

from ._util import UsageError, int_arg
from .._console import status_bar


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="run every experiment into one Markdown report with plots",
                       description="Run memory, bench (with scaling and oversubscription), race, explore, fio "
                                   "(10 GiB and 320 GiB) and writeback, and write DIR/report.md, DIR/report.json "
                                   "and PNG plots. About 1-3 minutes on a 2-core machine; --quick under 30 s.")
    p.add_argument("--out", default="report", metavar="DIR", help="output directory (default ./report)")
    p.add_argument("--quick", action="store_true", help="short runs (noisier figures, smaller writeback job)")
    p.add_argument("--kernel", action="store_true",
                   help="run `pybcache kernel compare` for the real-driver section (builds Linux 6.12 under UML "
                        "and boots it: about 8 more minutes); without it the section shows the last saved "
                        "comparison, or how to get one")
    p.add_argument("--seed", type=int_arg(0, (1 << 48) - 1), default=0, metavar="N",
                   help="seed of every randomised run (default 0)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    out = args.out
    if os.path.exists(out) and not os.path.isdir(out):
        raise UsageError(f"--out: {out!r} exists and is not a directory")
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out: cannot create {out!r}: {exc.strerror}") from None
    if not os.access(out, os.W_OK):
        raise UsageError(f"--out: {out!r} is not writable")
    from ..report import SECTIONS, write_report
    started: list[str] = []
    t0 = time.perf_counter()
    with status_bar("report", total=len(SECTIONS)) as bar:
        def section(name: str) -> None:
            if started:
                bar.update(1)
            started.append(name)
            bar.set_postfix_str(name)

        path, summary = write_report(out, quick=args.quick, seed=args.seed, kernel=args.kernel, progress=section,
                                     step=bar.set_postfix_str)
    wall = time.perf_counter() - t0
    print(f"wrote {path} and {len(summary['plots'])} plots in {wall:.1f} s "
          f"({', '.join(f'{k} {v:.1f} s' for k, v in summary['timings'].items())})")
    for name, (value, met) in summary["targets"].items():
        if value is None:  # a same-chunk run in which a thread made no pair
            from ..bcache.experiments.bench import NOT_MEASURED
            print(f"  target {name}: {NOT_MEASURED}")
            continue
        shown = f"{value / 1000:.1f} µs" if name.startswith("p99") else f"{value}x"
        print(f"  target {name}: {shown} {'inconclusive' if met is None else 'met' if met else 'MISSED'}")
    return 0
