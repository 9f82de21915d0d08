"""``pybcache sweep``: a TOML grid of race / stress / fio / explore / writeback runs on Dask."""
from __future__ import annotations

import argparse
import json
import os

from ._util import UsageError, emit_json, int_arg
from .._console import format_table, progress


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweep", help="run a parameter grid (TOML) on Dask, with a results cache",
                       description="Run every point of a TOML grid (one table per command, its option names "
                                   "as keys, a list of values each) --reps times, one Dask task per point and "
                                   "repetition, each with its own seed; write a tidy table per command (CSV, "
                                   "and Parquet with pyarrow), a summary with mean and 95%% interval per point, "
                                   "and plots. Results are cached in --out by the hash of their parameters, "
                                   "so an interrupted sweep resumes and a repeated one runs nothing.")
    p.add_argument("grid", metavar="GRID.toml", help="the grid file")
    p.add_argument("--reps", type=int_arg(1, 10_000), default=1, metavar="N",
                   help="repetitions per point, 1..10000 (default 1)")
    p.add_argument("--out", default="sweep-out", metavar="DIR",
                   help="directory for the cache, tables and plots (default ./sweep-out)")
    p.add_argument("--scheduler", default=None, metavar="ADDR",
                   help="an existing Dask scheduler, e.g. tcp://HOST:8786 (default $PYBCACHE_SCHEDULER, "
                        "else an embedded LocalCluster)")
    p.add_argument("--workers", type=int_arg(0, 256), default=None, metavar="N",
                   help="worker processes of the embedded cluster, 1..256 (default: CPUs); 0 runs every "
                        "task in this process, no Dask")
    p.add_argument("--dashboard", action="store_true", help="serve the embedded cluster's dashboard")
    p.add_argument("--no-plots", action="store_true", help="write the tables only")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..dist.cluster import DASK_MISSING, client_for, dask_available
    from ..dist.sweep import GridError, load_grid, sweep, write_plots, write_tables

    try:
        points = load_grid(args.grid)
    except GridError as exc:        # naming the table, key or value
        raise UsageError(str(exc)) from None
    if args.scheduler is not None and args.workers is not None:
        raise UsageError("--workers: only for the embedded cluster, not with --scheduler")
    out = os.path.abspath(args.out)
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out: cannot create {args.out!r}: {exc.strerror}") from None

    def bar(it, total):
        return progress(it, total=total, desc="sweep", quiet=args.json)

    try:
        if args.workers == 0:
            res = sweep(points, reps=args.reps, out=out, progress=bar)
        else:
            if not dask_available():
                raise UsageError(f"{DASK_MISSING} (or --workers 0 to run in this process)")
            with client_for(scheduler=args.scheduler, workers=args.workers, dashboard=args.dashboard) as client:
                res = sweep(points, reps=args.reps, out=out, client=client, progress=bar)
    except (ValueError, TypeError) as exc:
        raise UsageError(str(exc)) from None
    res["tables"] = write_tables(res["rows"], out)
    res["plots"] = [] if args.no_plots else write_plots(res["summary"], out)
    with open(os.path.join(out, "summary.json"), "w", encoding="utf-8") as f:
        json.dump({"summary": res["summary"], "interval": res["interval"]}, f, indent=1)
    if args.json:
        emit_json(res)
        return 0
    print(f"sweep: {len(res['rows'])} runs ({res['ran']} ran, {res['cached']} from the cache in {out}), "
          f"95% interval: {'Student t' if res['interval'] == 't' else 'normal approximation (scipy absent)'}")
    for command in dict.fromkeys(s["command"] for s in res["summary"]):
        pts = [s for s in res["summary"] if s["command"] == command]
        keys = list(pts[0]["params"])
        from fnmatch import fnmatch

        from ..dist.sweep import PLOT_FIGURES
        names = [n for pat in PLOT_FIGURES[command] for n in pts[0]["figures"] if fnmatch(n, pat)]
        moving = [n for n in names if len({s["figures"][n]["mean"] for s in pts if n in s["figures"]}) > 1]
        names = (moving or names)[:4]  # the figures that change across the points say the most

        def cell(f):
            if f is None:
                return "-"
            if f["ci_low"] is None:
                return f"{f['mean']:.4g}"
            return f"{f['mean']:.4g} [{f['ci_low']:.4g}, {f['ci_high']:.4g}]"
        print(f"\n[{command}]")
        print(format_table(keys + ["reps"] + names,
                           [[str(s["params"][k]) for k in keys] + [s["reps"]]
                            + [cell(s["figures"].get(n)) for n in names]
                            for s in pts]))
    print(f"\ntables: {', '.join(res['tables'])}")
    if res["plots"]:
        print(f"plots: {len(res['plots'])} in {out}")
    return 0
