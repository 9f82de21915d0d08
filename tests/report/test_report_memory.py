"""The report's memory section (``pybcache/report/memory.py``).

The experiments the section runs are stood in for (``monkeypatch``); the tests check the Markdown it writes
(figures formatted as stated, verdicts that follow the figures), the results it stores, the plots it asks for
(the data handed to the plot function and the file named, not pixels) and what it hands on to the experiments.
Fast: no experiment, no real plot, no subprocess."""
from __future__ import annotations

import pytest

from pybcache.report import memory as rmemory
from pybcache.units import GiB, MiB, TiB

from helpers.report_stand_ins import _ctx, _layout


def test_the_memory_section_compares_each_size_with_the_posted_and_plots_the_curve(tmp_path, monkeypatch, plots):
    asked = []

    def measure(size, variant):
        asked.append((size, variant))
        idle = {"global": 256, "page": 256, "atomic": 1024}[variant] * max(1, size // TiB)
        peak = {"global": 65792, "page": 65792, "atomic": 263168}[variant] * max(1, size // TiB)
        if (size, variant) == (10 * TiB, "page"):
            peak *= 2                                   # far from the v2 cover letter's 642.5 KB
        if (size, variant) == (100 * TiB, "global"):
            idle = 25 * 1024 + 200                      # 25 KB + 0.8 %: within 1 %
        return {"size_bytes": size, "variant": variant, "idle_bytes": idle, "peak_bytes": peak}
    monkeypatch.setattr(rmemory, "measure_memory", measure)
    ctx, _ = _ctx(tmp_path)
    text = rmemory.memory(ctx)
    _layout(text, "memory")
    assert asked[:9] == [(s * TiB, v) for s in (1, 10, 100) for v in ("global", "page", "atomic")]
    sizes = [GiB << k for k in range(0, 17, 2)] + [100 * TiB]
    assert asked[9:] == [(s, v) for s in sizes for v in ("global", "page", "atomic")]
    assert text.startswith("## Memory: the v2 cover letter's tables next to ours\n") and text.endswith(".png)\n\n")
    assert "| backing | variant | idle (posted) | idle (measured) | peak (posted) | peak (measured) | match |" in text
    assert "| 1 TiB | global | 256 bytes | 256 B | 64.25 KB | 64.25 KiB | yes |" in text
    assert "| 10 TiB | page | 2.5 KB | 2.5 KiB | 642.5 KB | 1.25 MiB | no |" in text
    assert "| 100 TiB | global | 25 KB | 25.2 KiB | 6.27 MB | 6.27 MiB | yes |" in text
    assert text.count("| yes |") == 8
    mem = ctx.results["memory"]
    assert mem["rows"] == [measure(s * TiB, v) for s in (1, 10, 100) for v in ("global", "page", "atomic")]
    assert len(mem["curve"]) == 30
    # the u32 page tracker of 1 TiB is real: 16 tracking pages of 2^15 u32 counters... its peak with one write
    # in flight per page is twice the u16 one (65,792 bytes)
    assert mem["page_u32_1tib_idle_bytes"] == 512 and mem["page_u32_1tib_peak_bytes"] == 131584
    (curve, path), kw = plots["plot_memory"][0]
    assert curve == mem["curve"] and path == str(tmp_path / "memory.png")
    assert kw["posted_points"][0] == {"size_bytes": TiB, "variant": "global", "idle_bytes": 256, "peak_bytes": 65792}
    assert kw["posted_points"][-1] == {"size_bytes": 100 * TiB, "variant": "atomic", "idle_bytes": 100 * 1024,
                                     "peak_bytes": round(25.10 * MiB)}
    assert len(kw["posted_points"]) == 9
    assert ctx.plots == [("memory.png", "tracker memory vs device size (log-log)")]


@pytest.mark.parametrize("seed, measured, close", [("1 KB", 1024, True), ("1 KB", 1035, True), ("1 KB", 1036, False),
                                                   ("1 KB", 1013, True), ("1 KB", 1012, False),
                                                   ("256 bytes", 259, True), ("256 bytes", 260, False),
                                                   ("98 bytes", 100, True)])              # 2 <= 0.01 * 100 + 1
def test_a_posted_size_matches_within_one_percent_and_one_byte(seed, measured, close):
    assert rmemory._close(seed, measured) is close
