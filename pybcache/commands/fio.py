"""``pybcache fio``: the v2 cover letter's fio table, reproduced in the cached-device model."""
from __future__ import annotations

import argparse
import sys

from ..bcache.variants import LABELS, VARIANTS
from ._util import float_arg, int_arg, UsageError, emit_json, parse_choice_list, parse_size
from .._console import format_table, progress
from ._sync import load_sync, refuse_lab_options, reports_text, sync_arg

TRACKS = ("bypass", "invalidations", "all")  # the model's (pybcache.bcache.cachedev.TRACKS), without loading it



def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("fio", help="the v2 cover letter's fio table in the model: every tracking variant, same run",
                       description="Random 4 KiB reads and 128 KiB bypass writes over a working set, from native "
                                   "threads, once per tracking variant in alternating slices; reports ops/s, CPU "
                                   "ns per I/O (and its ratio to the unpatched model), read bypasses and cache "
                                   "inserts (the v2 cover letter's NVMe-util analogue).")
    p.add_argument("--size", default="10G", metavar="SIZE", help="working set (default 10G; the v2 cover letter also "
                   "used 320G)")
    p.add_argument("--jobs", type=int_arg(1, 256), default=None, metavar="N",
                   help="threads (default min(16, CPUs))")
    p.add_argument("--seconds", type=float_arg(0, 3600, open_low=True), default=2.0, metavar="S",
                   help="measured time per variant (default 2)")
    p.add_argument("--variants", default="none,global,page,atomic", metavar="LIST",
                   help="comma-separated subset of none,global,page,atomic")
    p.add_argument("--read-percent", type=int_arg(0, 100), default=70, metavar="P", help="reads in %% (default 70)")
    p.add_argument("--inflight", type=int_arg(1, 1 << 20), default=160, metavar="N",
                   help="bypass writes in flight over all jobs (default 160)")
    p.add_argument("--no-bounce-copy", action="store_true",
                   help="do not charge inserted read misses their bounce-buffer copy (the CPU column depends on "
                        "it: the table header says which)")
    p.add_argument("--chunk-size", default="32M", metavar="SIZE", help="tracker chunk size (default 32M)")
    p.add_argument("--granularity", choices=("chunk", "page"), default="chunk",
                   help="what a read's tracker check covers: the chunks it overlaps (default) or the whole "
                        "tracking page (64 GiB with 32M chunks and 16-bit counters)")
    p.add_argument("--free", choices=("eager", "deferred"), default="eager",
                   help="the lock variants' page lifetime: freed when its last counter drops to zero (default) or "
                        "kept until reclaim (md's daemon); which one the posted patch does is not known")
    p.add_argument("--seed", type=int_arg(0, 2 ** 63 - 1), default=0, metavar="N", help="random seed (default 0)")
    p.add_argument("--sync", type=sync_arg(()), default=None, metavar="PATCH.c",
                   help="--engine model: also measure this kernel patch (compiled and loaded) as one more column, "
                        "its ends on the completion threads")
    p.add_argument("--hung-timeout", type=float_arg(0.0, 3600.0, open_low=True), default=None, metavar="S",
                   help="with --sync: seconds any wait or spinlock of the patch may last (default 10)")
    p.add_argument("--writes", dest="write_kind", choices=("bypass", "writethrough", "mixed", "discard"),
                   default="bypass",
                   help="--engine model: the writes: bypass (default), writethrough (inserted into the cache, or "
                        "invalidated when the cache allocation fails: the writethrough fallback), mixed (each "
                        "job's odd-numbered writes bypass, even-numbered writethrough) or discard (the bypass "
                        "branch)")
    p.add_argument("--cache-alloc-fail", type=float_arg(0.0, 1.0), default=0.0, metavar="P",
                   help="--engine model: chance that a writethrough write's cache allocation fails, 0..1 "
                        "(default 0; needs --writes writethrough or mixed)")
    p.add_argument("--track", default="bypass", metavar="LIST",
                   help="--engine model: which writes the tracker counts, a comma-separated subset of bypass "
                        "(default, the v2 patch), invalidations (also the writethrough fallbacks), all; several "
                        "run side by side in the same slices, each row's cost against track bypass")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    # --engine nbd: real fio against the served model (pybcache/commands/fio_nbd.py)
    p.add_argument("--engine", choices=("model", "nbd"), default="model",
                   help="model: the in-process mix (default); nbd: real fio (its nbd engine) against "
                        "`pybcache serve` per variant (needs the Debian packages fio, nbdkit, nbdkit-plugin-dev)")
    p.add_argument("--write-delay", default="5ms", metavar="TIME",
                   help="--engine nbd: the served model's write delay, e.g. 0, 500us, 5ms (default 5ms, as serve)")
    p.add_argument("--memory-baseline", action="store_true",
                   help="--engine nbd: also run the job against nbdkit's memory plugin (the ceiling)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.engine == "nbd":
        if args.sync is not None or args.hung_timeout is not None:
            raise UsageError("--sync: only with --engine model (serve a patch with `pybcache serve --sync`)")
        for opt, given in (("--writes", args.write_kind != "bypass"), ("--cache-alloc-fail", args.cache_alloc_fail),
                           ("--track", args.track != "bypass")):
            if given:
                raise UsageError(f"{opt}: only with --engine model")
        from .fio_nbd import run as run_nbd
        return run_nbd(args)
    from ..bcache.cachedev import fio

    patch = None if args.sync is None else load_sync(args.sync, ())
    refuse_lab_options(patch, {"--granularity page": args.granularity == "page"})
    if patch is None and args.hung_timeout is not None:
        raise UsageError("--hung-timeout: only with --sync PATCH.c")

    size = parse_size(args.size, name="--size")
    if size > 1 << 40:
        raise UsageError(f"--size: at most 1T (the model keeps 24 bytes per 4 KiB block), got {args.size!r}")
    chunk = parse_size(args.chunk_size, name="--chunk-size")
    if chunk < 512 or chunk & (chunk - 1):
        raise UsageError(f"--chunk-size: must be a power of two >= 512, got {args.chunk_size!r}")
    variants = parse_choice_list(args.variants, VARIANTS, name="--variants")
    tracks = parse_choice_list(args.track, TRACKS, name="--track")
    if args.cache_alloc_fail > 0 and args.write_kind not in ("writethrough", "mixed"):
        raise UsageError(f"--cache-alloc-fail: applies to writethrough writes (--writes writethrough or mixed), "
                         f"got --writes {args.write_kind}")
    try:
        res = fio(size=size, jobs=args.jobs, seconds=args.seconds, variants=variants,
                  read_percent=args.read_percent, inflight=args.inflight, bounce_copy=not args.no_bounce_copy,
                  chunk_size=chunk, granularity=args.granularity, free=args.free, seed=args.seed,
                  sync=patch, hung_timeout=args.hung_timeout, write_kind=args.write_kind,
                  cache_alloc_fail=args.cache_alloc_fail, track=tracks,
                  progress=lambda it, total: progress(it, total=total, desc="fio", quiet=args.json))
    except (ValueError, TypeError) as exc:
        raise UsageError(str(exc)) from None
    except (TimeoutError, RuntimeError) as exc:  # a start waited past wait_timeout, or a patch hung or failed:
        sys.stderr.write(f"pybcache fio: {exc}\n")  # the run was unwound, not a usage error
        return 1
    res["sync"] = res["config"]["patch"]
    if args.json:
        emit_json(res)
        return 0
    cfg = res["config"]
    rows = res["rows"]
    bounce = "on" if cfg["bounce_copy"] else "off"
    kind = "bypass " if cfg.get("write_kind", "bypass") == "bypass" else ""   # else the next line says which
    print(f"fio (model): working set {cfg['size'] / (1 << 30):g} GiB = {cfg['chunks']} chunks, bounce copy {bounce}, "
          f"{cfg['jobs']} jobs, {cfg['read_percent']}% 4 KiB reads / 128 KiB {kind}writes, "
          f"{cfg['inflight']} writes in flight, {cfg['seconds']:g} s per variant in {cfg['rounds']} rounds, "
          f"read check granularity {cfg['granularity']}, page lifetime {cfg['free']} (assumed)")
    extended = "tracks" in cfg
    if extended:
        print(f"writes {cfg['write_kind']}, cache allocation failure chance {cfg['cache_alloc_fail']:g}, tracked "
              f"writes: {', '.join(cfg['tracks'])} (\"none\" runs once: it has no tracker)")

    def ratio(r):
        return "-" if r["ns_per_io_vs_none"] is None else f"{r['ns_per_io_vs_none']:.3f}x"

    def pct(x):
        return "-" if x is None else f"{100 * x:.1f}%"

    table = [
        ["Total ops/s"] + [f"{r['ops_per_s']:,.0f}" for r in rows],
        [f"CPU ns per I/O (bounce {bounce})"] + [f"{r['ns_per_io']:.1f}" for r in rows],
        ["  vs unpatched"] + [ratio(r) for r in rows],
        ["Read bypasses"] + [f"{r['read_bypasses']:,} ({pct(r['bypass_fraction'])})" for r in rows],
        ["Cache inserts"] + [f"{r['cache_inserts']:,} ({pct(r['insert_fraction'])})" for r in rows],
        ["  inserts avoided"] + [pct(r["inserts_avoided"]) for r in rows],
        ["Stale reads"] + [f"{r['stale_reads']:,}" for r in rows],
        ["Tracking pages"] + [str(r["tracking_pages"]) for r in rows],
        ["Page allocations per 1,000 writes"] + [f"{r['allocations_per_1000_writes']:.2f}" for r in rows],
    ]
    if extended:
        table += [
            ["Writethrough writes"] + [f"{r['writethrough_writes']:,}" for r in rows],
            ["  fallbacks (invalidate)"] + [f"{r['writethrough_fallbacks']:,}" for r in rows],
            ["Tracker starts"] + [f"{r['tracker_starts']:,}" for r in rows],
        ]
        if "bypass" in cfg["tracks"]:
            def vs_bypass(r):
                x, rg = r["ns_per_io_vs_track_bypass"], r["ns_per_io_vs_track_bypass_range"]
                return "-" if x is None else f"{x:.3f}x [{rg[0]:.2f}-{rg[1]:.2f}]"

            def frac(x):
                return "-" if x is None else f"{x:.3f}x"
            table += [
                ["CPU ns per I/O vs track bypass [rounds]"] + [vs_bypass(r) for r in rows],
                ["Read bypass share vs track bypass"] + [frac(r["bypass_fraction_vs_track_bypass"]) for r in rows],
            ]
    labels = {**LABELS, "patch": "Patch"}

    def head(r):
        name = labels.get(r["variant"], r["variant"])
        return f"{name} ({r['track']})" if extended and len(cfg["tracks"]) > 1 and r["variant"] != "none" else name
    print(format_table(["Metric"] + [head(r) for r in rows], table))
    if patch is not None:
        print(f"Patch: {res['sync']}; {reports_text(res['kernel_reports'])}. Its tracking pages and allocations "
              f"count the patch's allocations, whatever their size.")
    print("CPU is every thread's, completion threads included. Cache inserts are the share of reads that populate "
          "the cache (the v2 cover letter's NVMe util analogue).")
    return 0
