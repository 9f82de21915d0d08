"""``pybcache fio --engine nbd``: the seed's table from real fio against the served model.

Not a command of its own: :mod:`pybcache.commands.fio` parses the options and hands over here.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

from ..units import GiB, KiB, TiB
from ._util import UsageError, emit_json, format_table, parse_choice_list, parse_size, progress

VARIANTS = ("none", "global", "page", "atomic")
LABELS = {"none": "Unpatched", "global": "Global lk", "page": "Page lk", "atomic": "Atomic"}


def table(res: dict[str, Any]) -> str:
    """The seed's table layout: fio's figures, then the lab's counters, one column per variant (and
    nbdkit's memory plugin last when it was measured)."""
    rows = res["rows"]
    base = res.get("baseline")
    cols = [r["fio"] for r in rows] + ([base["fio"]] if base else [])
    pad = [""] if base else []
    none = next((r for r in rows if r["variant"] == "none"), None)

    def total(f: dict[str, float]) -> float:
        return f["read_iops"] + f["write_iops"]

    def vs(f: dict[str, float], ref: dict[str, float] | None) -> str:
        return f"{total(f) / total(ref):.3f}x" if ref and total(ref) else "-"

    def model(key: str, fmt: Any = "{:,}".format) -> list[str]:
        return [fmt(r["model"][key]) for r in rows] + pad

    def inserts(r: dict[str, Any]) -> str:
        reads = r["model"]["reads"]
        share = f" ({100 * r['model']['cache_inserts'] / reads:.1f}%)" if reads else ""
        return f"{r['model']['cache_inserts']:,}{share}"

    body = [
        ["Read IOPS"] + [f"{f['read_iops']:,.0f}" for f in cols],
        ["Write IOPS"] + [f"{f['write_iops']:,.0f}" for f in cols],
        ["Total IOPS"] + [f"{total(f):,.0f}" for f in cols],
        ["  vs unpatched"] + [vs(f, none["fio"] if none else None) for f in cols],
        ["Avg R Lat"] + [f"{f['read_lat_mean_ms']:.2f} ms" for f in cols],
        ["p99 R Lat"] + [f"{f['read_lat_p99_ms']:.2f} ms" for f in cols],
        ["Avg W Lat"] + [f"{f['write_lat_mean_ms']:.2f} ms" for f in cols],
        ["p99 W Lat"] + [f"{f['write_lat_p99_ms']:.2f} ms" for f in cols],
    ]
    if base:
        body.append(["  vs nbdkit memory"] + [vs(f, base["fio"]) for f in cols])
    body += [
        ["Read bypasses"] + model("read_bypasses"),
        ["Cache inserts"] + [inserts(r) for r in rows] + pad,
        ["Stale reads"] + model("stale_reads"),
        ["Stale cached blocks"] + model("stale_cached_blocks"),
    ]
    headers = ["Metric"] + [LABELS[r["variant"]] for r in rows] + (["nbdkit memory"] if base else [])
    return format_table(headers, body)


def run(args: argparse.Namespace) -> int:
    from ..nbdfio import fio_nbd
    from ..serve import ToolMissing, parse_duration

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
    print(table(res))
    print("IOPS and latencies are fio's own; the counters are the served model's at quiescence. Cache inserts "
          "are the share of reads that populate the cache (the seed's NVMe util analogue).")
    return 0
