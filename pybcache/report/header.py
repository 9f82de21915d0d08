"""The report's opening (what was run, on what) and its closing (how long each section took)."""
from __future__ import annotations

import os
import platform
import time

import numpy as np

from .. import __version__
from ._common import ReportContext, cpu_model, loadavg, mem_total, version_of
from ._template import render

__all__ = ["header", "this_run"]


def header(ctx: ReportContext) -> str:
    ctx.results["machine"] = {"load_start": loadavg(), "cpus": os.cpu_count(), "cpu": cpu_model()}
    # what `make docs` (pybcache.report.docs) states beside every figure it copies from this run
    ctx.results["run"] = {"generated_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                          "quick": ctx.quick, "seed": ctx.seed}
    return render(
        "header.main", version=__version__, python=platform.python_version(), numpy=np.__version__,
        matplotlib=version_of("matplotlib"), cython=version_of("Cython"), cpu=cpu_model(), cpus=os.cpu_count(),
        ram=mem_total(), system=platform.system(), release=platform.release(), machine=platform.machine(),
        load=loadavg(), mode=render("header.mode_quick" if ctx.quick else "header.mode_full"), seed=ctx.seed,
        generated=time.strftime("%Y-%m-%d %H:%M:%S %Z")) + "\n"


def this_run(ctx: ReportContext, timings: dict[str, float], total: float) -> str:
    return render(
        "header.this_run",
        timings="\n".join(render("header.timing", section=k, seconds=v) for k, v in timings.items()),
        total=total, load=loadavg(),
        plots=", ".join(render("header.plot", name=n, title=t) for n, t in ctx.plots)) + "\n"
