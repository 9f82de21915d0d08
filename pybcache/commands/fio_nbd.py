"""``pybcache fio --engine nbd``: the v2 cover letter's table from real fio against the served model.

Not a command of its own: :mod:`pybcache.commands.fio` parses the options and hands over here.
"""
from __future__ import annotations

import argparse
import sys

from ..units import GiB, KiB, TiB
from ..bcache.variants import VARIANTS
from ._util import UsageError, emit_json, parse_choice_list, parse_size
from .._console import progress

def run(args: argparse.Namespace) -> int:
    from ..bcache.nbd.fio import fio_nbd, fio_table
    from ..bcache.nbd.server import ToolMissing
    from ..units import parse_duration

    size = parse_size(args.size, name="--size")
    if size > TiB or size % (128 * KiB):
        raise UsageError(f"--size: must be a multiple of 128K up to 1T for --engine nbd, got {args.size!r}")
    variants = parse_choice_list(args.variants, VARIANTS, name="--variants")
    if len(set(variants)) != len(variants):
        raise UsageError(f"--variants: must not repeat, got {args.variants!r}")
    try:
        delay = parse_duration(args.write_delay, name="--write-delay")
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    try:
        res = fio_nbd(size=size, jobs=args.jobs, seconds=args.seconds, variants=variants, write_delay_ns=delay,
                      memory_baseline=args.memory_baseline,
                      progress=lambda it, total: progress(it, total=total, desc="fio nbd", quiet=args.json))
    except ToolMissing as exc:
        raise UsageError(str(exc)) from None
    except RuntimeError as exc:
        sys.stderr.write(f"pybcache fio: error: {exc}\n")
        return 1
    if args.json:
        emit_json(res)
        return 0
    cfg = res["config"]
    print(f"fio (real fio, nbd engine, against `pybcache serve`): {cfg['size'] / GiB:g} GiB, "
          f"rw=randrw, bs=4k,128k, iodepth={cfg['iodepth']}, {cfg['jobs']} jobs, {cfg['seconds']:g} s per variant "
          f"in {cfg['rounds']} rotating rounds, "
          f"write delay {cfg['write_delay_ns'] / 1e6:g} ms")
    print(fio_table(res))
    print("IOPS and latencies are fio's own; the counters are the served model's at quiescence. Cache inserts "
          "are the share of reads that populate the cache (the v2 cover letter's NVMe util analogue).")
    return 0
