"""The seed's memory table, reproduced to the byte from real trackers (18 cells)."""
from __future__ import annotations

import pytest

import pybcache
from pybcache.memory import measure_memory

TiB, KiB, MiB = pybcache.TiB, pybcache.KiB, pybcache.MiB

# (size, variant) -> (idle bytes, peak bytes): the v2 cover letter's figures in binary units.
SEED = {
    (1, "global"): (256, 64.25 * KiB), (1, "page"): (256, 64.25 * KiB), (1, "atomic"): (1 * KiB, 257 * KiB),
    (10, "global"): (2.5 * KiB, 642.5 * KiB), (10, "page"): (2.5 * KiB, 642.5 * KiB),
    (10, "atomic"): (10 * KiB, 2631680),  # "2.51 MB" = 2570 KiB exactly
    (100, "global"): (25 * KiB, 6579200), (100, "page"): (25 * KiB, 6579200),  # "6.27 MB" = 6425 KiB
    (100, "atomic"): (100 * KiB, 26316800),  # "25.10 MB" = 25700 KiB
}


@pytest.mark.parametrize("tib, variant", sorted(SEED))
def test_seed_memory_cell_is_reproduced_to_the_byte(tib, variant):
    row = measure_memory(tib * TiB, variant)
    idle, peak = SEED[(tib, variant)]
    assert row["idle_bytes"] == idle
    assert row["peak_bytes"] == peak


@pytest.mark.parametrize("tib, variant", sorted(SEED))
def test_seed_memory_cell_rounds_like_the_cover_letter(tib, variant):
    # The printed figures, to the cover letter's precision (2 decimals in its unit).
    row = measure_memory(tib * TiB, variant)
    printed_peak_mib = {(10, "atomic"): 2.51, (100, "global"): 6.27, (100, "page"): 6.27, (100, "atomic"): 25.10}
    if (tib, variant) in printed_peak_mib:
        assert round(row["peak_bytes"] / MiB, 2) == printed_peak_mib[(tib, variant)]


def test_memory_after_the_run_is_back_to_the_directory():
    t = pybcache.BypassWriteTracker(TiB)
    span = t.chunks_per_page * t.chunk_size
    for p in range(t.n_pages):
        t.start(p * span, 1)
    for p in range(t.n_pages):
        t.end(p * span, 1)
    m = t.memory()
    assert m["total_bytes"] == m["directory_bytes"] == 256 and m["peak_bytes"] == 256 + 16 * 4096


def test_pool_pages_are_counted_as_real_memory():
    t = pybcache.BypassWriteTracker(TiB, alloc_failure="pool", pool_pages=3)
    assert t.memory()["page_bytes"] == 3 * 4096 and t.memory()["pages"] == 0
