"""The v2 cover letter's memory tables, measured from real trackers.

For every backing size and variant a tracker is built with the defaults, its idle memory is read,
then one write per page slot is started so that every page is allocated, and the peak is read. Nothing
is computed from a formula: the numbers are what :meth:`BypassWriteTracker.memory` counted.
"""
from __future__ import annotations

from typing import Any

from .._tracker import BypassWriteTracker

__all__ = ["measure_memory", "POSTED_TABLE"]


#: The v2 cover letter's tables as printed there (decimal-looking "TB" means TiB: 16 slots per 1 TB).
POSTED_TABLE: dict[str, dict[str, tuple[str, str]]] = {
    "1T": {"global": ("256 bytes", "64.25 KB"), "page": ("256 B", "64.25 KB"), "atomic": ("1 KB", "257 KB")},
    "10T": {"global": ("2.5 KB", "642.5 KB"), "page": ("2.5 KB", "642.5 KB"), "atomic": ("10 KB", "2.51 MB")},
    "100T": {"global": ("25 KB", "6.27 MB"), "page": ("25 KB", "6.27 MB"), "atomic": ("100 KB", "25.10 MB")},
}


def measure_memory(size_bytes: int, sync: str) -> dict[str, Any]:
    """Idle and peak bytes of a default tracker of ``size_bytes`` with ``sync``, measured.

    :returns: ``{size_bytes, variant, idle_bytes, peak_bytes, pages, chunk_size, counter_bits}``.
    """
    t = BypassWriteTracker(size_bytes, sync=sync)
    idle = t.memory()["total_bytes"]
    span = t.chunks_per_page * t.chunk_size
    for page in range(t.n_pages):
        t.start(page * span, 1)
    mem = t.memory()
    for page in range(t.n_pages):
        t.end(page * span, 1)
    t.reclaim()
    return {"size_bytes": size_bytes, "variant": sync, "idle_bytes": idle, "peak_bytes": mem["peak_bytes"],
            "pages": mem["peak_pages"], "chunk_size": t.chunk_size, "counter_bits": t.counter_bits}
