"""``pybcache race``: the native race stress between read misses and bypass writes, with its oracle."""
from __future__ import annotations

import argparse
import sys
from typing import Any

from ..bcache.variants import VARIANTS
from ._util import UsageError, emit_json, float_arg, int_arg, parse_size
from .._console import format_table, progress
from ._sync import (add_tracking_arguments, add_write_arguments, load_sync, refuse_lab_options, reports_text,
                    sync_label, write_options)

KEYS = ("stale_reads", "stale_cached_blocks", "reads", "writes", "read_bypasses", "cache_inserts",
        "miss_collisions")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("race", help="race stress: stale reads with and without bypass-write tracking",
                       description="Reader and bypass-writer threads on a small hot region of the cached-device "
                                   "model; counts stale reads (a read older than a write completed before it "
                                   "began) and stale cached blocks at quiescence.")
    add_tracking_arguments(p, VARIANTS)
    p.add_argument("--no-restart", action="store_true",
                   help="the check key is placed even when the node changed since the lookup (no -EINTR restart)")
    p.add_argument("--granularity", choices=("chunk", "page"), default=None,
                   help="what a read's tracker check covers (default chunk)")
    p.add_argument("--fault-probability", type=float_arg(0.0, 1.0), default=0.0, metavar="P",
                   help="chance that a tracker page allocation fails, 0..1 (default 0)")
    p.add_argument("--threads", type=int_arg(2, 256), default=2, metavar="N", help="threads, 2..256 (default 2)")
    p.add_argument("--writers", type=int_arg(1, 255), default=None, metavar="N",
                   help="writer threads, 1..threads-1 (default threads/2)")
    p.add_argument("--seconds", type=float_arg(0.0, 3600.0, open_low=True), default=3.0, metavar="S",
                   help="run time (default 3)")
    p.add_argument("--min-ops", type=int_arg(0, 10 ** 12), default=0, metavar="N",
                   help="keep running until this many operations (default 0)")
    p.add_argument("--seed", type=int_arg(0, 2 ** 63 - 1), default=0, metavar="N", help="random seed (default 0)")
    p.add_argument("--write-delay-us", type=float_arg(0.0, 1e6), default=20.0, metavar="US",
                   help="time a bypass write takes to land after its submission, microseconds (default 20)")
    p.add_argument("--region-blocks", type=int_arg(1, 1 << 20), default=64, metavar="N",
                   help="hot region in 4 KiB blocks (default 64)")
    p.add_argument("--chunk-size", default=None, metavar="SIZE", help="tracker chunk size (default 4K)")
    p.add_argument("--reclaim-every", type=int_arg(0, 1 << 40), default=0, metavar="N",
                   help="writer 0 reclaims idle tracker pages every N writes (default 0 = never)")
    p.add_argument("--hung-timeout", type=float_arg(0.0, 3600.0, open_low=True), default=None, metavar="S",
                   help="with --sync PATCH.c: seconds any wait or spinlock of the patch may last before the run "
                        "stops as hung (default 10)")
    add_write_arguments(p, probability=True)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..bcache.cachedev import DEFAULT_ALLOC_FAILURE, race

    sync = load_sync(args.sync, VARIANTS)
    refuse_lab_options(sync, {"--alloc-failure": args.alloc_failure is not None,
                              "--unhijack": getattr(args, "unhijack", None) is not None,
                              "--chunk-size": args.chunk_size is not None,
                              "--granularity page": args.granularity == "page",
                              "--reclaim-every": args.reclaim_every != 0})
    if isinstance(sync, str) and args.hung_timeout is not None:
        raise UsageError("--hung-timeout: applies to a patch (--sync PATCH.c), not to the lab's trackers")
    lab: dict[str, Any] = ({} if not isinstance(sync, str)
                           else dict(alloc_failure=args.alloc_failure or DEFAULT_ALLOC_FAILURE))
    if getattr(args, "unhijack", None) is not None and isinstance(sync, str):
        lab["unhijack"] = args.unhijack
    chunk = parse_size("4K" if args.chunk_size is None else args.chunk_size, name="--chunk-size")
    if chunk < 512 or chunk & (chunk - 1):
        raise UsageError(f"--chunk-size: must be a power of two >= 512, got {args.chunk_size!r}")
    if args.writers is not None and args.writers >= args.threads:
        raise UsageError(f"--writers: must be in [1, {args.threads - 1}] (threads - 1), got {args.writers}")
    try:
        if isinstance(sync, str):
            lab.update(chunk_size=chunk, reclaim_every=args.reclaim_every)
        else:
            lab.update(hung_timeout=args.hung_timeout)
        res = race(sync=sync, check=args.check, restart=not args.no_restart, granularity=args.granularity or "chunk",
                   fault_probability=args.fault_probability, threads=args.threads, writers=args.writers,
                   seconds=args.seconds, min_ops=args.min_ops, seed=args.seed,
                   write_delay_ns=int(args.write_delay_us * 1000), region_blocks=args.region_blocks,
                   max_write_blocks=min(4, args.region_blocks), **lab, **write_options(args),
                   progress=lambda it, total: progress(it, total=total, desc="race", quiet=args.json))
    except (ValueError, TypeError) as exc:
        raise UsageError(str(exc)) from None
    except (TimeoutError, RuntimeError) as exc:  # a start waited past wait_timeout, or a patch hung or
        sys.stderr.write(f"pybcache race: {exc}\n")  # failed: the run was unwound, not a usage error
        return 1
    res["sync"] = sync_label(sync)
    res["invalidate"] = args.invalidate
    if args.json:
        emit_json(res)
        return 0
    cfg = res["config"]
    patch = not isinstance(sync, str)
    print(f"race: sync={res['sync']} check={cfg['check']} restart={'on' if cfg['restart'] else 'OFF'} "
          f"granularity={cfg['granularity']} alloc_failure={'-' if patch else cfg['alloc_failure']} "
          f"fault_probability={cfg['fault_probability']} threads={cfg['threads']} (writers {cfg['writers']}) "
          f"write delay {cfg['write_delay_ns'] / 1000:g} us (each write lands and ends on its writer's completion "
          f"thread), {res['seconds']:.2f} s")
    rows = [[k, f"{res[k]:,}"] for k in KEYS]
    rows += [["ops", f"{res['ops']:,}"], ["ops/s", f"{res['ops_per_s']:,.0f}"],
             ["stale reads/s", f"{res['stale_reads_per_s']:,.1f}"],
             ["untracked_writes", f"{res['untracked_writes']:,}"],
             ["underflows", f"{res['underflows']:,}"], ["faults_injected", f"{res['faults_injected']:,}"],
             ["tracker_checks", f"{res['tracker_checks']:,}"], ["check_key_restarts", f"{res['check_key_restarts']:,}"]]
    rows += [[k, f"{res[k]:,}"] for k in ("writethrough_writes", "writethrough_fallbacks") if k in res]
    if write_options(args):
        print("writes: " + ", ".join(f"{k}={v}" for k, v in write_options(args).items()))
    print(format_table(["metric", "value"], rows))
    if patch:
        print(reports_text(res["kernel_reports"]))
    verdict = "STALE DATA SERVED" if res["stale_reads"] or res["stale_cached_blocks"] else "no stale data"
    print(verdict)
    return 0
