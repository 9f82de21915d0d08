"""``pybcache explore``: every interleaving of a few reads and bypass writes, through the real C model."""
from __future__ import annotations

import argparse
import re

from .._cliutil import add_tracking_arguments, int_arg, UsageError, emit_json, format_table, progress

SYNCS = ("none", "global", "page", "atomic")
_BOUND = re.compile(r"^\s*(\d+)\s*w\s*(\d+)\s*r\s*$", re.IGNORECASE)


def _bounds(text: str) -> list[tuple[int, int]]:
    out = []
    for part in str(text).split(","):
        if not part.strip():
            continue
        m = _BOUND.match(part)
        if not m:
            raise argparse.ArgumentTypeError(f"expected bounds like 2w1r,1w2r, got {part.strip()!r}")
        w, r = int(m.group(1)), int(m.group(2))
        if not 1 <= w + r <= 8:
            raise argparse.ArgumentTypeError(f"writes + reads must be in [1, 8], got {part.strip()!r}")
        out.append((w, r))
    if not out:
        raise argparse.ArgumentTypeError(f"expected bounds like 2w1r,1w2r, got {text!r}")
    return out


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("explore", help="exhaustive interleavings of reads and bypass writes",
                       description="Run a few bypass writes and reads of block 0 under every interleaving of "
                                   "their steps (each step a call into the C model and tracker) and report "
                                   "violations of the stale-read oracle with the first counterexample.")
    add_tracking_arguments(p, SYNCS)
    p.add_argument("--fault-at", type=int_arg(0, 1 << 62), default=0, metavar="K",
                   help="the K-th tracker page allocation of every schedule fails (default 0 = none)")
    p.add_argument("--bounds", type=_bounds, default=_bounds("1w1r,2w1r,1w2r"), metavar="LIST",
                   help="operation sets to explore (default 1w1r,2w1r,1w2r: the smallest first, for the shortest counterexample)")
    p.add_argument("--max-schedules", type=int_arg(0, 1 << 62), default=0, metavar="N",
                   help="stop each bound after N schedules (default 0 = all)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..cachedev import explore

    runs = []
    try:
        for w, r in args.bounds:
            res = explore(sync=args.sync, check=args.check, alloc_failure=args.alloc_failure,
                          fault_at=args.fault_at, writes=w, reads=r, max_schedules=args.max_schedules,
                          progress=lambda it, total: progress(it, total=total, desc=f"explore {w}w{r}r",
                                                              quiet=args.json))
            res["bound"] = f"{w}w{r}r"
            runs.append(res)
    except (ValueError, TypeError) as exc:
        raise UsageError(str(exc)) from None
    first = next((x for x in runs if x["counterexample"]), None)
    out = {
        "schedules": sum(x["schedules"] for x in runs),
        "violations": sum(x["violations"] for x in runs),
        "counterexample": first["counterexample"] if first else None,
        "counterexample_bound": first["bound"] if first else None,
        "finished": all(x["finished"] for x in runs),
        "runs": runs,
    }
    if args.json:
        emit_json(out)
        return 0
    print(f"explore: sync={args.sync} check={args.check} alloc_failure={args.alloc_failure} fault_at={args.fault_at}")
    print(format_table(
        ["bound", "schedules", "violations", "stale reads", "stale cached", "bypassing", "untracked", "underflow",
         "complete"],
        [[x["bound"], f"{x['schedules']:,}", f"{x['violations']:,}", f"{x['stale_read_schedules']:,}",
          f"{x['stale_cache_schedules']:,}", f"{x['bypass_schedules']:,}", f"{x['untracked_schedules']:,}",
          f"{x['underflow_schedules']:,}", "yes" if x["finished"] else "no"] for x in runs]))
    if first:
        print(f"\nfirst counterexample ({first['bound']}):")
        for i, line in enumerate(first["counterexample"], 1):
            print(f"  {i:2d}. {line}")
    else:
        print("\nno violation in any schedule")
    return 0
