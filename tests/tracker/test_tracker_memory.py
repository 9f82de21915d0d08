"""The v2 cover letter's memory table, reproduced to the byte from real trackers (18 cells)."""
from __future__ import annotations

import pytest

import pybcache
from pybcache.bcache.experiments.memory import measure_memory

pytestmark = pytest.mark.native

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
def test_posted_memory_cell_is_reproduced_to_the_byte(tib, variant):
    row = measure_memory(tib * TiB, variant)
    idle, peak = SEED[(tib, variant)]
    assert row["idle_bytes"] == idle
    assert row["peak_bytes"] == peak


# The cover letter's printed (idle, peak) figures, as printed: binary units, its own precision per cell.
PRINTED = {
    (1, "global"): ("256 bytes", "64.25 KB"), (1, "page"): ("256 B", "64.25 KB"), (1, "atomic"): ("1 KB", "257 KB"),
    (10, "global"): ("2.5 KB", "642.5 KB"), (10, "page"): ("2.5 KB", "642.5 KB"), (10, "atomic"): ("10 KB", "2.51 MB"),
    (100, "global"): ("25 KB", "6.27 MB"), (100, "page"): ("25 KB", "6.27 MB"),
    (100, "atomic"): ("100 KB", "25.10 MB"),
}
UNITS = {"bytes": 1, "B": 1, "KB": KiB, "MB": MiB}


@pytest.mark.parametrize("tib, variant", sorted(SEED))
def test_posted_memory_cell_rounds_to_the_cover_letters_printed_figures(tib, variant):
    # Each measured cell, idle and peak, rounded in the printed unit to the printed number of decimals, is
    # the printed figure.
    row = measure_memory(tib * TiB, variant)
    for measured, printed in zip((row["idle_bytes"], row["peak_bytes"]), PRINTED[(tib, variant)]):
        number, unit = printed.split()
        decimals = len(number.partition(".")[2])
        assert round(measured / UNITS[unit], decimals) == float(number), (printed, measured)


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



@pytest.mark.parametrize("variant, bits, idle, pages", [("page", 16, 256, 16), ("atomic", 64, 1024, 64)])
def test_measure_memory_returns_its_documented_row_with_the_trackers_geometry(variant, bits, idle, pages):
    # 1 TiB of 32 MiB chunks: 32768 counters, 2048 u16 (or 512 u64) per 4 KiB page; peak = directory + pages.
    row = measure_memory(TiB, variant)
    assert row == {"size_bytes": TiB, "variant": variant, "idle_bytes": idle, "peak_bytes": idle + pages * 4096,
                   "pages": pages, "chunk_size": 32 * MiB, "counter_bits": bits}
