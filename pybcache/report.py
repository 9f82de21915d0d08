"""``pybcache report``: every experiment into one Markdown report.

Sections are functions ``(ctx) -> str`` run in order; each measures what it prints. A section whose
part of the project is not built yet is left out, and the report says so rather than inventing it.
"""
from __future__ import annotations

import os
import platform
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from . import __version__
from ._cliutil import format_bytes
from .memory import SEED_TABLE, VARIANTS, measure_memory

__all__ = ["ReportContext", "SECTIONS", "write_report"]


@dataclass
class ReportContext:
    """What a section needs: where to write plots, how long to run, and the collected results."""

    out_dir: str
    quick: bool = False
    seed: int = 0
    results: dict[str, Any] = field(default_factory=dict)


def _header(ctx: ReportContext) -> str:
    return "\n".join([
        "# pybcache report", "",
        f"- pybcache {__version__}, Python {platform.python_version()}, numpy {np.__version__}",
        f"- machine: {platform.machine()}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}",
        f"- mode: {'quick' if ctx.quick else 'full'}; seed {ctx.seed}",
        f"- generated {time.strftime('%Y-%m-%d %H:%M:%S %Z')}", ""])


def _memory(ctx: ReportContext) -> str:
    rows = [measure_memory(s << 40, v) for s in (1, 10, 100) for v in VARIANTS]
    ctx.results["memory"] = rows
    by = {(r["size_bytes"] >> 40, r["variant"]): r for r in rows}
    lines = ["## Memory (seed table vs measured)", "",
             "Measured from real trackers with the defaults (lock variants u16, atomic u64): construct, "
             "start one write per page, read `memory()`.", "",
             "| backing | variant | idle (seed) | idle (measured) | peak (seed) | peak (measured) |",
             "|---|---|---|---|---|---|"]
    for s in (1, 10, 100):
        for col, v in enumerate(VARIANTS):
            seed = SEED_TABLE[f"{s}T"][v]
            r = by[(s, v)]
            lines.append(f"| {s} TiB | {v} | {seed[0]} | {format_bytes(r['idle_bytes'])} | {seed[1]} | "
                         f"{format_bytes(r['peak_bytes'])} |")
    return "\n".join(lines) + "\n"


def _bench(ctx: ReportContext) -> str:
    from .bench import run_bench
    res = run_bench(quick=ctx.quick)
    ctx.results["bench"] = res
    fl = res["floors"]
    lines = ["## Hot paths against this machine's floors", "",
             f"Floors measured in the same run: atomic pair {fl['atomic_pair_ns']:.1f} ns, spinlock pair "
             f"{fl['spinlock_pair_ns']:.1f} ns, empty Cython method pair {fl['cython_empty_pair_ns']:.1f} ns, "
             f"2-thread shared-counter pair {fl['shared_atomic_pair_ns']:.1f} ns.", "",
             "| variant | batch pair ns | vs floor | call pair ns | vs empty call | vs reference | 2 thr / 1 thr |",
             "|---|---|---|---|---|---|---|"]
    for r in res["results"]:
        lines.append(f"| {r['variant']} | {r['batch_pair_ns']:.1f} | {r['batch_pair_vs_floor']:.2f}x | "
                     f"{r['single_pair_ns']:.1f} | {r['single_pair_vs_empty_call']:.2f}x | "
                     f"{r['speedup_vs_reference']:.0f}x | {r['scaling_2_over_1']:.2f}x |")
    return "\n".join(lines) + "\n"


#: (title, function) in report order.
SECTIONS: list[tuple[str, Callable[[ReportContext], str]]] = [
    ("memory", _memory),
    ("bench", _bench),
]


def write_report(out_dir: str, *, quick: bool = False, seed: int = 0,
                 progress: Callable[[str], None] | None = None) -> tuple[str, dict[str, float]]:
    """Run every section, write ``out_dir/report.md``; returns its path and each section's seconds."""
    os.makedirs(out_dir, exist_ok=True)
    ctx = ReportContext(out_dir=out_dir, quick=quick, seed=seed)
    parts = [_header(ctx)]
    timings: dict[str, float] = {}
    for name, fn in SECTIONS:
        if progress:
            progress(name)
        t0 = time.perf_counter()
        parts.append(fn(ctx))
        timings[name] = time.perf_counter() - t0
    parts.append("## Timings\n\n" + "\n".join(f"- {k}: {v:.1f} s" for k, v in timings.items()) + "\n")
    path = os.path.join(out_dir, "report.md")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(parts))
    return path, timings
