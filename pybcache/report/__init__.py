"""``pybcache report``: every experiment into one Markdown report with plots.

Sections are functions ``(ctx) -> str`` run in the order of :data:`SECTIONS`; each measures what it prints,
in this run, and stores its raw results in ``ctx.results`` (written to ``report.json`` beside ``report.md``).
Speed figures are ratios against floors measured in the same run, never saved absolute times; a target
missed is printed as missed. The last section answers the design questions with figures taken from
``ctx.results``; a question whose experiments did not run says so.

Layout: one module per section (``header``, ``memory``, ``bench``, ``race``, ``fio``, ``writeback``,
``check_patch``, ``kernel``, ``answers``; the real-fio section is :mod:`pybcache.report.nbd`), their prose in
``templates/<section>.md`` rendered by :mod:`._template` (a missing value raises, naming the template and the
field).

Adding a section: write ``pybcache/report/<name>.py`` with a function ``(ctx: ReportContext) -> str`` (its
prose in ``templates/<name>.md``) and add one ``(name, function)`` entry to :data:`SECTIONS` below.
"""
from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, Callable

import numpy as np

from .nbd import section as _fio_nbd
from ._common import ReportContext, loadavg
from ._template import MissingValue, render
from .answers import answers as _answers
from .bench import bench as _bench
from .check_patch import PATCH_EXAMPLES, check_patch as _check_patch
from .fio import POSTED_FIO, fio as _fio
from .header import header as _header, this_run as _this_run
from .kernel import kernel as _kernel
from .memory import memory as _memory
from .race import EXPLORE_BOUNDS, EXPLORE_CONFIGS, RACE_CONFIGS, race as _race
from .writeback import writeback as _writeback

__all__ = ["ReportContext", "SECTIONS", "write_report", "RACE_CONFIGS", "EXPLORE_CONFIGS", "EXPLORE_BOUNDS",
           "POSTED_FIO", "PATCH_EXAMPLES", "MissingValue", "render"]

#: (name, function) in report order: the one list of sections (add a section here).
SECTIONS: list[tuple[str, Callable[[ReportContext], str]]] = [
    ("memory", _memory),
    ("bench", _bench),
    ("race and explore", _race),
    ("fio", _fio),
    ("fio over NBD", _fio_nbd),
    ("writeback", _writeback),
    ("check-patch", _check_patch),
    ("the real driver", _kernel),
    ("design answers", _answers),
]


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return None if obj.size > 4096 else obj.tolist()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def write_report(out_dir: str, *, quick: bool = False, seed: int = 0, kernel: bool = False,
                 progress: Callable[[str], None] | None = None,
                 step: Callable[[str], None] | None = None) -> tuple[str, dict[str, Any]]:
    """Run every section, write ``out_dir/report.md``, ``out_dir/report.json`` and the PNG plots.

    :param quick: short runs (for tests and a first look; noisier figures).
    :param seed: seed of every randomised experiment.
    :param kernel: run ``pybcache kernel compare`` for the real-driver section (builds and boots kernels:
        minutes); without it the section shows the last saved comparison.
    :param progress: called with a section's name before it runs.
    :param step: called with a finer label inside a section (for a progress bar's postfix).
    :returns: the report's path and a summary ``{"timings": {section: s}, "plots": [...], "targets": {...}}``.
    """
    os.makedirs(out_dir, exist_ok=True)
    ctx = ReportContext(out_dir=out_dir, quick=quick, seed=seed, kernel=kernel, note=step or (lambda label: None))
    parts = [_header(ctx)]
    timings: dict[str, float] = {}
    t_start = time.perf_counter()
    for name, fn in SECTIONS:
        if progress:
            progress(name)
        t0 = time.perf_counter()
        parts.append(fn(ctx))
        timings[name] = time.perf_counter() - t0
    total = time.perf_counter() - t_start
    ctx.results["machine"]["load_end"] = loadavg()
    parts.append(_this_run(ctx, timings, total))
    path = os.path.join(out_dir, "report.md")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(parts))
    ctx.results["timings"] = timings
    with open(os.path.join(out_dir, "report.json"), "w", encoding="utf-8") as fh:
        json.dump(ctx.results, fh, indent=1, default=_json_default)
    return path, {"timings": timings, "total_s": total, "plots": [n for n, _ in ctx.plots],
                  "targets": _targets(ctx.results)}


def _targets(results: dict[str, Any]) -> dict[str, Any]:
    """Where each performance target stands in this run (for the command's summary)."""
    from ..bcache.experiments.bench import OVERSUBSCRIBED_CPUS, TARGET_P99_NS
    out: dict[str, Any] = {}
    bench = results.get("bench")
    if not bench:  # the bench section did not run: no target to report
        return out
    for v, rows in bench["scaling"]["variants"].items():
        for r in rows:
            if r["threads"] > OVERSUBSCRIBED_CPUS:
                out[f"p99 {v} {r['threads']} threads on {OVERSUBSCRIBED_CPUS} cores ≤ {TARGET_P99_NS // 1000} µs"] = (
                    r["p99_ns"], r["p99_ns"] <= TARGET_P99_NS)
    for r in bench["same_chunk"]:
        out[f"same chunk {r['variant']} ≤ {r['target']}x floor (overlap {r['overlap']:.2f})"] = (
            None if r["vs_floor"] is None else round(r["vs_floor"], 2), r["met"])
    return out


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use: pybcache report [--out DIR] [--quick]")
