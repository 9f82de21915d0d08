"""``pybcache explore``: every interleaving of a few reads and bypass writes, through the real C model."""
from __future__ import annotations

import argparse
import contextlib
import re
import time
from typing import Any

from ..bcache.variants import VARIANTS
from ._util import float_arg, int_arg, UsageError, emit_json
from .._console import format_table, progress
from ._sync import add_tracking_arguments, add_write_arguments, load_sync, refuse_lab_options, sync_label, write_options

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
                                   "violations of the stale-read oracle with the first counterexample. It checks "
                                   "the protocol under sequential consistency with each step atomic.")
    add_tracking_arguments(p, VARIANTS)
    p.add_argument("--no-restart", action="store_true",
                   help="the check key is placed even when the node's sequence moved since the lookup "
                        "(removes the -EINTR restart, to show what it prevents)")
    p.add_argument("--granularity", choices=("chunk", "page"), default=None,
                   help="what a read's tracker check covers (default chunk)")
    p.add_argument("--fault-at", type=int_arg(0, 1 << 62), default=0, metavar="K",
                   help="the K-th tracker page allocation of every schedule fails (with --sync PATCH.c: the "
                        "K-th allocation of the patch's operations; default 0 = none)")
    p.add_argument("--bounds", type=_bounds, default="1w1r,2w1r,1w2r", metavar="LIST",
                   help="operation sets to explore (default 1w1r,2w1r,1w2r: the smallest first, for the "
                        "shortest counterexample)")
    p.add_argument("--reclaims", type=int_arg(0, 4), default=None, metavar="N",
                   help="daemon reclaim() calls interleaved with the operations, 0..4 (default 0)")
    p.add_argument("--overflow", choices=("wrap", "clamp", "wait"), default=None,
                   help="tracker policy at a counter's maximum (default wait)")
    p.add_argument("--counter-bits", type=int, choices=(16, 32, 64), default=None,
                   help="counter width (default 16 for the lock variants, 64 for atomic)")
    p.add_argument("--counter-max", type=int_arg(1, (1 << 62)), default=None, metavar="N",
                   help="a lowered counter maximum (default: the width's), so that overflow is a few steps "
                        "away: --counter-max 1 with 2 writes makes the second start find its counter full")
    p.add_argument("--preload", type=int_arg(0, (1 << 32) - 1), default=None, metavar="N",
                   help="other writes to chunk 0 in flight throughout, so a counter's maximum is reachable "
                        "(default 0; 65534 with 16-bit counters puts it one write below the maximum)")
    p.add_argument("--max-restarts", type=int_arg(0, 16), default=3, metavar="N",
                   help="cut a read restarted more than N times (counted; the reads that returned before the cut are "
                        "still judged; default 3)")
    p.add_argument("--no-reduce", action="store_true",
                   help="run every interleaving instead of one per class of equivalent orders")
    p.add_argument("--max-schedules", type=int_arg(0, 1 << 62), default=0, metavar="N",
                   help="stop each bound after N runs (default 0 = all)")
    p.add_argument("--scenario", choices=("1w1r", "2w1r", "1w2r", "2w2r", "3w1r"), default=None,
                   help="one named operation set instead of --bounds (2w2r: about 8 million schedules for page "
                        "with reduction)")
    p.add_argument("--distributed", action="store_true",
                   help="split the schedule tree by prefix into Dask tasks (same totals and counterexample)")
    p.add_argument("--scheduler", default=None, metavar="ADDR",
                   help="with --distributed: an existing Dask scheduler, e.g. tcp://HOST:8786 (default "
                        "$PYBCACHE_SCHEDULER, else an embedded LocalCluster)")
    p.add_argument("--workers", type=int_arg(1, 256), default=None, metavar="N",
                   help="with --distributed: worker processes of the embedded cluster (default: CPUs)")
    p.add_argument("--tasks-per-worker", type=int_arg(1, 1024), default=16, metavar="N",
                   help="with --distributed: tasks per worker (default 16)")
    p.add_argument("--hung-timeout", type=float_arg(0.0, 3600.0, open_low=True), default=None, metavar="S",
                   help="with --sync PATCH.c: seconds any wait or spinlock of the patch may last before the "
                        "search stops as hung (default 10)")
    add_write_arguments(p, probability=False)
    p.add_argument("--detached", action="store_true",
                   help="W1 is submitted while the device has no cache set (the detached path: no tracker call, "
                        "no cache step) and the device attaches right after; counted only with --track all")
    p.add_argument("--patch-level", action="store_true",
                   help="with --sync PATCH.c: step inside the patch's calls, at every lock, atomic, allocation and "
                        "shared access (source-DPOR; --no-reduce: every interleaving), and report data races as "
                        "KCSAN does (bounds 1w1r, 2w1r, 1w2r, 2w1r-page; docs/check-patch.md)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def _config(args: argparse.Namespace, w: int, r: int) -> dict:
    from ..bcache.cachedev import DEFAULT_ALLOC_FAILURE
    common = dict(sync=args.sync, check=args.check, restart=not args.no_restart, fault_at=args.fault_at, writes=w,
                  reads=r, max_restarts=args.max_restarts, reduce=not args.no_reduce, **write_options(args),
                  **({"detached": True} if getattr(args, "detached", False) else {}))
    if not isinstance(args.sync, str):   # a loaded patch (by path when the search is distributed)
        common["sync"] = args.sync.path if args.distributed else args.sync
        return dict(common, hung_timeout=args.hung_timeout)
    return dict(common, granularity=args.granularity or "chunk",
                alloc_failure=args.alloc_failure or DEFAULT_ALLOC_FAILURE,
                **({"unhijack": args.unhijack} if getattr(args, "unhijack", None) else {}),
                reclaims=args.reclaims or 0, counter_bits=args.counter_bits, counter_max=args.counter_max,
                overflow=args.overflow or "wait", preload=args.preload or 0)


def run(args: argparse.Namespace) -> int:
    from ..bcache.cachedev import EXPLORER_SEMANTICS, explore

    runs = []
    if args.patch_level:
        return _run_patch_level(args)
    if args.scenario is not None:
        args.bounds = _bounds(args.scenario)
    args.sync = load_sync(args.sync, VARIANTS)
    refuse_lab_options(args.sync, {"--alloc-failure": args.alloc_failure is not None,
                                   "--unhijack": getattr(args, "unhijack", None) is not None,
                                   "--granularity page": args.granularity == "page",
                                   "--reclaims": args.reclaims is not None,
                                   "--overflow": args.overflow is not None,
                                   "--counter-bits": args.counter_bits is not None,
                                   "--counter-max": args.counter_max is not None,
                                   "--preload": args.preload is not None})
    if isinstance(args.sync, str) and args.hung_timeout is not None:
        raise UsageError("--hung-timeout: applies to a patch (--sync PATCH.c), not to the lab's trackers")
    reclaims = args.reclaims or 0
    if not args.distributed:
        for option in ("scheduler", "workers"):
            if getattr(args, option) is not None:
                raise UsageError(f"--{option}: only with --distributed")
    elif args.max_schedules:
        raise UsageError("--max-schedules: not with --distributed (a cap has no meaning once the tree is split)")
    elif args.scheduler is not None and args.workers is not None:
        raise UsageError("--workers: only for the embedded cluster, not with --scheduler")
    try:
        client_cm: contextlib.AbstractContextManager[Any] = contextlib.nullcontext(None)
        if args.distributed:
            from ..dist.cluster import DASK_MISSING, client_for, dask_available
            if not dask_available():
                raise UsageError(f"--distributed: {DASK_MISSING}")
            for w, r in args.bounds:  # check the configuration before a cluster starts
                explore(**_config(args, w, r), max_schedules=1)
            client_cm = client_for(scheduler=args.scheduler, workers=args.workers)
        with client_cm as client:
            for w, r in args.bounds:
                if w + r + reclaims > 8:
                    raise UsageError(f"--reclaims: writes + reads + reclaims must be at most 8, "
                                     f"got {w}w{r}r + {reclaims}")
                t0 = time.perf_counter()
                if client is not None:
                    from ..dist.explore import explore_distributed
                    res = explore_distributed(client=client, tasks_per_worker=args.tasks_per_worker,
                                              **_config(args, w, r))
                else:
                    res = explore(**_config(args, w, r), max_schedules=args.max_schedules,
                                  progress=lambda it, total: progress(it, total=total, desc=f"explore {w}w{r}r",
                                                                      quiet=args.json))
                res["wall_s"] = time.perf_counter() - t0
                res["bound"] = f"{w}w{r}r"
                runs.append(res)
    except (ValueError, TypeError) as exc:
        raise UsageError(str(exc)) from None
    except (TimeoutError, RuntimeError) as exc:   # a patch hung or failed: the search stopped there
        import sys
        sys.stderr.write(f"pybcache explore: {exc}\n")
        return 1
    first = next((x for x in runs if x["counterexample"]), None)
    out = {
        "sync": sync_label(args.sync),
        "invalidate": args.invalidate,
        "kernel_report_schedules": sum(x["report_schedules"] for x in runs),
        "schedules": sum(x["schedules"] for x in runs),
        "violations": sum(x["violations"] for x in runs),
        "counterexample": first["counterexample"] if first else None,
        "counterexample_bound": first["bound"] if first else None,
        "finished": all(x["finished"] for x in runs),
        "semantics": EXPLORER_SEMANTICS,
        "runs": runs,
    }
    if args.json:
        emit_json(out)
        return 0
    cfg = runs[0]["config"]
    if isinstance(args.sync, str):
        print(f"explore: sync={args.sync} check={cfg['check']} restart={'on' if cfg['restart'] else 'OFF'} "
              f"granularity={cfg['granularity']} alloc_failure={cfg['alloc_failure']} fault_at={args.fault_at} "
              f"overflow={cfg['overflow']} counter_bits={cfg['counter_bits']} preload={cfg['preload']} "
              f"reclaims={cfg['reclaims']} max_restarts={cfg['max_restarts']} "
              f"reduction={'sleep sets' if cfg['reduce'] else 'none'}")
    else:
        print(f"explore: sync={out['sync']} (a fresh instance per schedule; its write_start, write_end and "
              f"read_bypass one step each) check={cfg['check']} restart={'on' if cfg['restart'] else 'OFF'} "
              f"fault_at={args.fault_at} max_restarts={cfg['max_restarts']} "
              f"reduction={'sleep sets' if cfg['reduce'] else 'none'}; schedules with a kernel report: "
              f"{out['kernel_report_schedules']:,}")
    if write_options(args):
        print("writes: " + ", ".join(f"{k}={v}" for k, v in write_options(args).items()))
    if getattr(args, "detached", False):
        print("W1 is submitted on the detached path (no cache set), then the device attaches")
    if getattr(args, "unhijack", None):
        print(f"unhijack={args.unhijack}")
    print(f"checks {EXPLORER_SEMANTICS}")
    print(format_table(
        ["bound", "schedules", "violations", "stale reads", "stale cached", "bypassing", "restarted",
         "cut at max restarts", "untracked", "underflow", "wrapped", "blocked", "stuck", "complete", "wall s",
         "workers"],
        [[x["bound"], f"{x['schedules']:,}", f"{x['violations']:,}", f"{x['stale_read_schedules']:,}",
          f"{x['stale_cache_schedules']:,}", f"{x['bypass_schedules']:,}", f"{x['restart_schedules']:,}",
          f"{x['restart_capped_schedules']:,}", f"{x['untracked_schedules']:,}",
          f"{x['underflow_schedules']:,}", f"{x['wrap_schedules']:,}", f"{x['blocked_schedules']:,}",
          f"{x['stuck_schedules']:,}", "yes" if x["finished"] else "no", f"{x['wall_s']:.2f}",
          x["distributed"]["workers"] if "distributed" in x else "-"] for x in runs]))
    cut = sum(x["restart_capped_schedules"] for x in runs)
    stuck = sum(x["stuck_schedules"] for x in runs)
    if cut or stuck:
        partial = sum(x["partial_violation_schedules"] for x in runs)
        print(f"\n{cut:,} schedule(s) cut at max restarts and {stuck:,} stuck are counted in schedules and "
              f"judged on the reads that returned before the end ({partial:,} violation(s) among them); "
              f"only their check at quiescence is skipped")
    if first:
        print(f"\nfirst counterexample ({first['bound']}):")
        for i, line in enumerate(first["counterexample"], 1):
            print(f"  {i:2d}. {line}")
    else:
        print("\nno violation in any schedule")
    return 0


# -- --patch-level (issue 26) -----------------------------------------------------------------------------

def _run_patch_level(args: argparse.Namespace) -> int:
    """The patch-level explorer over the bounds (pybcache/bcache/kpatch/interleave.py)."""
    from ..bcache.kpatch.interleave import SCENARIOS, explore_patch
    if not (isinstance(args.sync, str) and args.sync.endswith(".c")):
        raise UsageError("--patch-level: applies to a kernel patch (--sync PATCH.c)")
    for flag, given in (("--distributed", args.distributed), ("--reclaims", args.reclaims is not None),
                        ("--hung-timeout", args.hung_timeout is not None), ("--no-restart", args.no_restart),
                        ("--granularity", args.granularity is not None),
                        ("--writes/--track", bool(write_options(args)))):
        if given:
            raise UsageError(f"{flag}: not with --patch-level (it explores the patch's own steps)")
    if args.fault_at > 64:
        raise UsageError(f"--fault-at: with --patch-level at most 64, got {args.fault_at}")
    if args.scenario is not None:
        names = [args.scenario]
    elif list(args.bounds) == [(1, 1), (2, 1), (1, 2)]:        # the default bounds: and the contended page
        names = ["1w1r", "2w1r", "1w2r", "2w1r-page"]
    else:
        names = [f"{w}w{r}r" for w, r in args.bounds]
    for n in names:
        if n not in SCENARIOS:
            raise UsageError(f"--bounds/--scenario: with --patch-level one of {', '.join(SCENARIOS)}, got {n}")
    mode = "exhaustive" if args.no_reduce else "dpor"
    runs = []
    try:
        for n in names:
            t0 = time.perf_counter()
            res = explore_patch(args.sync, n, mode=mode, fault_at=args.fault_at,
                                max_executions=args.max_schedules or 200_000)
            res["wall_s"] = time.perf_counter() - t0
            runs.append(res)
    except (ValueError, TypeError) as exc:
        raise UsageError(str(exc)) from None
    first = next((x for x in runs if x["failures"]), None)
    if args.json:
        emit_json({"sync": args.sync, "patch_level": True, "mode": mode, "fault_at": args.fault_at,
                   "executions": sum(x["executions"] for x in runs),
                   "failures": first["failures"] if first else [],
                   "failure_scenario": first["scenario"] if first else None,
                   "finished": all(x["complete"] for x in runs), "runs": runs})
        return 0
    print(f"explore --patch-level: sync={args.sync} fault_at={args.fault_at} reduction="
          f"{'none (every interleaving)' if args.no_reduce else 'source-DPOR with sleep sets'}")
    def state(x: dict) -> str:
        return "yes" if x["complete"] else (x["error"] or ("stopped at a failure" if x["failures"] else "no (cap)"))
    print(format_table(["bound", "executions", "cut (sleep sets)", "events", "failures", "complete", "wall s"],
                       [[x["scenario"], f"{x['executions']:,}", f"{x['blocked']:,}", f"{x['events']:,}",
                         f"{len(x['failures'])}", state(x),
                         f"{x['wall_s']:.2f}"] for x in runs]))
    if first:
        for f in first["failures"]:
            print(f"\n{first['scenario']}: {f['message']}")
            for i, line in enumerate(f["steps"], 1):
                print(f"  {i:2d}. {line}")
    else:
        print("\nno data race and no oracle failure in any execution")
    return 0
