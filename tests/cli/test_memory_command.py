"""``pybcache memory`` (``pybcache/commands/memory.py``): size labels, the idle and peak tables, its JSON. The
experiment it starts is stood in for (no subprocess, no C model): these tests state what the command hands on,
prints, writes as JSON and returns for given arguments and results."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from pybcache import commands
from pybcache.commands import memory
from pybcache._console import format_table


@pytest.mark.parametrize("size, label", [
    (0, "0"), (1023, "1023"), (1 << 10, "1K"), (1536 << 10, "1536K"), (3 << 20, "3M"), (1 << 30, "1G"),
    ((1 << 30) + (1 << 20), "1025M"), (2 << 40, "2T"), (1 << 50, "1P"), (3 << 50, "3P"),
    ((1 << 50) + 1, str((1 << 50) + 1)),
])
def test_a_size_label_is_its_largest_exact_unit_else_bytes(size, label):
    assert memory._label(size) == label


def _fake_measure(calls):
    def measure(size, variant):
        calls.append((size, variant))
        k = {"global": 1, "page": 2, "atomic": 4}[variant]
        return {"size_bytes": size, "variant": variant, "idle_bytes": 256 * k, "peak_bytes": 65_792 * k,
                "not_printed": True}
    return measure


def test_memory_prints_an_idle_and_a_peak_table_with_the_posted_figures_where_it_has_them(monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(memory, "measure_memory", _fake_measure(calls))
    assert memory.run(SimpleNamespace(sizes="1T,3K", json=False)) == 0
    assert calls == [(1 << 40, v) for v in ("global", "page", "atomic")] + [(3 << 10, v)
                                                                             for v in ("global", "page", "atomic")]
    headers = ["Backing size", "Global lk", "Page lk", "Atomic", "Posted (global / page / atomic)"]
    idle = [["1T", "256 B", "512 B", "1 KiB", "256 bytes / 256 B / 1 KB"], ["3K", "256 B", "512 B", "1 KiB", "-"]]
    peak = [["1T", "64.25 KiB", "128.5 KiB", "257 KiB", "64.25 KB / 64.25 KB / 257 KB"],
            ["3K", "64.25 KiB", "128.5 KiB", "257 KiB", "-"]]
    assert capsys.readouterr().out == (
        "Idle memory (no active bypass writes)\n" + format_table(headers, idle) + "\n\n"
        "Peak memory (tracking pages fully allocated)\n" + format_table(headers, peak) + "\n\n"
        "Lock variants: u16 counters, 16 B per page slot; atomic: u64 counters. 1 page = 4096 B.\n")


def test_memory_json_has_each_rows_size_variant_idle_and_peak_only(monkeypatch, capsys):
    import json
    monkeypatch.setattr(memory, "measure_memory", _fake_measure([]))
    assert memory.run(SimpleNamespace(sizes="1P", json=True)) == 0   # 1P: the largest size it measures
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert rows == [{"size_bytes": 1 << 50, "variant": v, "idle_bytes": 256 * k, "peak_bytes": 65_792 * k}
                    for v, k in (("global", 1), ("page", 2), ("atomic", 4))]


def test_memory_refuses_a_size_over_1p_by_its_label_before_measuring_anything(monkeypatch):
    calls = []
    monkeypatch.setattr(memory, "measure_memory", _fake_measure(calls))
    with pytest.raises(commands.UsageError) as err:
        memory.run(SimpleNamespace(sizes="1T,2P", json=False))
    assert str(err.value) == "--sizes: 2P is larger than the 1P this command measures"
    assert calls == []


def test_memory_names_the_sizes_option_in_a_bad_size(monkeypatch):
    calls = []
    monkeypatch.setattr(memory, "measure_memory", _fake_measure(calls))
    with pytest.raises(commands.UsageError) as err:
        memory.run(SimpleNamespace(sizes="1T,bogus", json=False))
    assert str(err.value) == "--sizes: 'bogus' is not a size (use e.g. 512, 4K, 32M, 10G, 1T)"
    assert calls == []


@pytest.mark.parametrize("as_json", [False, True])
def test_memory_counts_its_progress_in_measurements_and_keeps_quiet_with_json(monkeypatch, capsys, as_json):
    seen = []

    def progress(items, *, total=None, desc="", quiet=False):
        seen.append((total, desc, quiet))
        return items
    monkeypatch.setattr(memory, "progress", progress)
    monkeypatch.setattr(memory, "measure_memory", _fake_measure([]))
    assert memory.run(SimpleNamespace(sizes="1T,10T", json=as_json)) == 0
    assert seen == [(6, "memory", as_json)]   # 2 sizes x 3 variants
