"""Memory: the v2 cover letter's tables next to trackers measured now."""
from __future__ import annotations

import re

from ..bcache.experiments.memory import POSTED_TABLE, measure_memory
from ..bcache.variants import SYNCS
from ..units import GiB, KiB, MiB, TiB, format_bytes
from ._common import ReportContext, table
from ._template import render

__all__ = ["memory", "posted_bytes"]


def posted_bytes(text: str) -> int:
    """The posted table's sizes ("256 bytes", "64.25 KB", "2.51 MB") in bytes (binary units, as its 1 TB = 1 TiB)."""
    m = re.match(r"([\d.]+)\s*(bytes|B|KB|MB|GB)", text)
    if not m:
        raise ValueError(text)
    mult = {"bytes": 1, "B": 1, "KB": KiB, "MB": MiB, "GB": GiB}[m.group(2)]
    return round(float(m.group(1)) * mult)


def _close(posted: str, measured: int) -> bool:
    return abs(posted_bytes(posted) - measured) <= 0.01 * measured + 1


def memory(ctx: ReportContext) -> str:
    rows = [measure_memory(s * TiB, v) for s in (1, 10, 100) for v in SYNCS]
    curve_sizes = [GiB << k for k in range(0, 17, 2)] + [100 * TiB]
    curve = [measure_memory(s, v) for s in curve_sizes for v in SYNCS]
    from ..bcache._tracker import BypassWriteTracker
    t32 = BypassWriteTracker(TiB, sync="page", counter_bits=32)   # the cover letter's "bump to u32"
    idle32 = t32.memory()["total_bytes"]
    span = t32.chunks_per_page * t32.chunk_size
    for page in range(t32.n_pages):
        t32.start(page * span, 1)
    ctx.results["memory"] = {"rows": rows, "curve": curve, "page_u32_1tib_idle_bytes": idle32,
                             "page_u32_1tib_peak_bytes": t32.memory()["peak_bytes"]}
    by = {(r["size_bytes"] // TiB, r["variant"]): r for r in rows}
    cells = []
    for s in (1, 10, 100):
        for v in SYNCS:
            (posted_idle, posted_peak), got = POSTED_TABLE[f"{s}T"][v], by[(s, v)]
            match = _close(posted_idle, got["idle_bytes"]) and _close(posted_peak, got["peak_bytes"])
            cells.append([f"{s} TiB", v, posted_idle, format_bytes(got["idle_bytes"]), posted_peak,
                          format_bytes(got["peak_bytes"]), "yes" if match else "no"])
    posted_pts = [{"size_bytes": s * TiB, "variant": v, "idle_bytes": posted_bytes(POSTED_TABLE[f"{s}T"][v][0]),
                   "peak_bytes": posted_bytes(POSTED_TABLE[f"{s}T"][v][1])} for s in (1, 10, 100) for v in SYNCS]
    from .plots import plot_memory
    plot_memory(curve, ctx.plot("memory.png", "tracker memory vs device size (log-log)"), posted_points=posted_pts)
    return render("memory.main", table=table(["backing", "variant", "idle (posted)", "idle (measured)",
                                              "peak (posted)", "peak (measured)", "match"], cells)) + "\n\n"
