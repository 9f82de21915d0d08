"""``pybcache memory``: the v2 cover letter's idle and peak memory tables, measured from real trackers."""
from __future__ import annotations

import argparse

from ._util import UsageError, emit_json, parse_size_list
from .._console import format_table, progress
from ..units import format_bytes
from ..bcache.experiments.memory import POSTED_TABLE, measure_memory
from ..bcache.variants import SYNCS

MAX_SIZE = 1 << 50  # 1 PiB: the atomic variant then allocates 256 MiB of pages


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("memory", help="the v2 cover letter's memory tables, measured from real trackers",
                       description="Build a default tracker per backing size and variant, touch every page, "
                                   "and print the idle and peak memory it counted.")
    p.add_argument("--sizes", default="1T,10T,100T", help="comma-separated backing sizes (default 1T,10T,100T)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def _label(size: int) -> str:
    for unit, shift in (("P", 50), ("T", 40), ("G", 30), ("M", 20), ("K", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift}{unit}"
    return str(size)


def run(args: argparse.Namespace) -> int:
    sizes = parse_size_list(args.sizes, name="--sizes")
    for s in sizes:
        if s > MAX_SIZE:
            raise UsageError(f"--sizes: {_label(s)} is larger than the 1P this command measures")
    jobs = [(s, v) for s in sizes for v in SYNCS]
    rows = [measure_memory(s, v) for s, v in progress(jobs, total=len(jobs), desc="memory", quiet=args.json)]
    if args.json:
        emit_json({"rows": [{k: r[k] for k in ("size_bytes", "variant", "idle_bytes", "peak_bytes")}
                            for r in rows]})
        return 0
    by = {(r["size_bytes"], r["variant"]): r for r in rows}
    for title, key, col in (("Idle memory (no active bypass writes)", "idle_bytes", 0),
                            ("Peak memory (tracking pages fully allocated)", "peak_bytes", 1)):
        table = []
        for s in sizes:
            label = _label(s)
            row = [label] + [format_bytes(by[(s, v)][key]) for v in SYNCS]
            posted = POSTED_TABLE.get(label)
            row.append(" / ".join(posted[v][col] for v in SYNCS) if posted else "-")
            table.append(row)
        print(title)
        print(format_table(["Backing size", "Global lk", "Page lk", "Atomic", "Posted (global / page / atomic)"],
                           table))
        print()
    print("Lock variants: u16 counters, 16 B per page slot; atomic: u64 counters. 1 page = 4096 B.")
    return 0
