"""fio: the v2 cover letter's table in the model at 10 GiB and 320 GiB, and a counts() heatmap during the write mix."""
from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np

from ..bcache.variants import LABELS, SYNCS
from ..units import GiB, KiB
from ._common import ReportContext, table
from ._template import render

__all__ = ["fio", "POSTED_FIO", "sample_counts"]

#: The v2 cover letter's fio rows that the model's columns stand beside (kernel CPU %, NVMe util %).
POSTED_FIO = {
    "10 GiB": {"kernel_cpu": {"none": 63.02, "global": 77.94, "page": 72.88, "atomic": 75.41},
               "nvme_util": {"none": 66.89, "global": 0.62, "page": 0.62, "atomic": 0.63}},
    "320 GiB": {"kernel_cpu": {"none": 70.39, "global": 70.70, "page": 60.85, "atomic": 62.20},
                "nvme_util": {"none": 67.74, "global": 0.66, "page": 0.61, "atomic": 0.62}},
}


def sample_counts(size: int, seconds: float, interval: float, seed: int) -> dict[str, Any]:
    """Sample ``counts()`` of a page-variant tracker while the native stress runs a fio-like write mix.

    One native thread keeps 160 writes of 128 KiB in flight (the fio model's default) so that the other
    CPU is left for the sampling Python thread; a frame taken after the workload ended is dropped.
    """
    from ..bcache._tracker import BypassWriteTracker, native_stress
    t = BypassWriteTracker(size, sync="page")
    done: list[dict[str, Any]] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            done.append(native_stress(t, threads=1, seconds=seconds, write_length=128 * KiB, depth=160,
                                      seed=seed))
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
            errors.append(exc)

    th = threading.Thread(target=work, daemon=True)
    t0 = time.perf_counter()
    th.start()
    times, frames = [], []
    while th.is_alive():
        frame = t.counts()
        now = time.perf_counter() - t0
        if not th.is_alive():
            break
        frames.append(frame)
        times.append(now)
        time.sleep(interval)
    th.join()
    if errors:
        raise errors[0]
    counts = np.array(frames, dtype=np.int64).reshape(len(frames), t.n_chunks)
    return {"times_s": times, "counts": counts, "chunk_size": t.chunk_size, "stress": done[0],
            "max_count": int(counts.max()) if counts.size else 0,
            "mean_in_flight_chunks": float((counts > 0).sum(axis=1).mean()) if counts.size else 0.0}


def _size_table(label: str, rows: list[dict[str, Any]], off: dict[str, dict[str, Any]]) -> str:
    posted = POSTED_FIO[label]
    base_cpu = posted["kernel_cpu"]["none"]

    def ratio(x: dict[str, Any]) -> str:
        return "—" if x["ns_per_io_vs_none"] is None else f"{x['ns_per_io_vs_none']:.3f}x"
    cells = [
        ["Total ops/s (model, bounce copy on)"] + [f"{x['ops_per_s']:,.0f}" for x in rows],
        ["CPU ns per I/O (model, bounce copy on)"] + [f"{x['ns_per_io']:.0f}" for x in rows],
        ["CPU vs unpatched (model, bounce copy on)"] + [ratio(x) for x in rows],
        ["CPU ns per I/O (model, bounce copy off)"] + [f"{off[x['variant']]['ns_per_io']:.0f}" for x in rows],
        ["CPU vs unpatched (model, bounce copy off)"] + [ratio(off[x["variant"]]) for x in rows],
        ["Kernel CPU vs unpatched (posted)"] + [f"{posted['kernel_cpu'][x['variant']] / base_cpu:.3f}x" for x in rows],
        ["Reads bypassing the cache (model)"] + [f"{100 * x['bypass_fraction']:.1f} %" for x in rows],
        ["Reads inserted in the cache (model)"] + [f"{100 * x['insert_fraction']:.1f} %" for x in rows],
        ["NVMe util (posted)"] + [f"{posted['nvme_util'][x['variant']]:.2f} %" for x in rows],
        ["Stale reads (model)"] + [f"{x['stale_reads']:,}" for x in rows],
        ["Tracking pages"] + [str(x["tracking_pages"]) for x in rows],
    ]
    return table(["metric"] + [LABELS[x["variant"]] for x in rows], cells)


def fio(ctx: ReportContext) -> str:
    from ..bcache.cachedev import fio as run_fio
    from .plots import plot_counts_heatmap, plot_fio
    plan = [("10 GiB", 10 * GiB, 0.25 if ctx.quick else 3.0), ("320 GiB", 320 * GiB, 0.25 if ctx.quick else 2.0)]
    runs, no_bounce = {}, {}
    for label, size, secs in plan:
        ctx.note(f"fio {label}")
        runs[label] = run_fio(size=size, seconds=secs, seed=ctx.seed)
        ctx.note(f"fio {label}, no bounce copy")
        no_bounce[label] = run_fio(size=size, seconds=secs, seed=ctx.seed, bounce_copy=False)
    ctx.note("fio 320 GiB, page-granular read check")
    gran = run_fio(size=320 * GiB, seconds=0.25 if ctx.quick else 1.0, seed=ctx.seed, variants=("none", "page"),
                   granularity="page")
    ctx.results["fio_granularity"] = {"size_gib": 320, "rows": gran["rows"], "config": gran["config"]}
    ctx.note("fio: counts() heatmap")
    interval = 0.005 if ctx.quick else 0.01
    heat = sample_counts(10 * GiB, 0.3 if ctx.quick else 1.0, interval, ctx.seed)
    ctx.results["fio"] = runs
    ctx.results["fio_no_bounce_copy"] = no_bounce
    ctx.results["counts_heatmap"] = {k: heat[k] for k in ("chunk_size", "max_count", "mean_in_flight_chunks")}
    ctx.results["counts_heatmap"]["samples"] = len(heat["times_s"])
    lines = [render("fio.main"), ""]
    for label, _, secs in plan:
        cfg = runs[label]["config"]
        off = {x["variant"]: x for x in no_bounce[label]["rows"]}
        lines += [render("fio.size", label=label, chunks=cfg["chunks"], jobs=cfg["jobs"], seconds=secs,
                         rounds=cfg["rounds"], table=_size_table(label, runs[label]["rows"], off)), ""]
    posted_ratios = {lb: {v: POSTED_FIO[lb]["kernel_cpu"][v] / POSTED_FIO[lb]["kernel_cpu"]["none"]
                        for v in SYNCS} for lb in runs}
    plot_fio(runs, ctx.plot("fio.png", "fio: CPU per I/O vs unpatched and cache inserts, beside the posted figures"),
             posted_ratios=posted_ratios, posted_util={lb: POSTED_FIO[lb]["nvme_util"] for lb in runs})
    plot_counts_heatmap(heat["times_s"], heat["counts"], ctx.plot("counts_heatmap.png", "counts() heatmap during a "
                        "fio-like run"), chunk_size=heat["chunk_size"],
                        title=render("fio.heatmap_title", samples=len(heat["times_s"])))
    lines += [render("fio.heatmap", samples=len(heat["times_s"]), interval_ms=f"{interval * 1000:g}",
                     max_count=heat["max_count"], mean_in_flight_chunks=heat["mean_in_flight_chunks"]), ""]
    return "\n".join(lines) + "\n"
