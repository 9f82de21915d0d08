"""One simulated run of the v6 experiment per mechanism, side by side
(``pytest benchmarks/test_bench_writeback.py --benchmark-group-by=group``).

The scenario is the default one with a 2 GiB foreground job (about 12 simulated seconds) so a round takes a
fraction of a second. Read the ratio between mechanisms in the same run, not the absolute times: the owner-wb
baseline simulates far more writeback work per tick than the bdev mechanisms.
"""
from __future__ import annotations

import pytest

from pybcache.writeback import MECHANISMS, Scenario, compare_churn, run_once

SCENARIO = Scenario(foreground_total=2 << 30)


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_writeback_simulated_run(benchmark, mechanism):
    benchmark.group = "writeback-run"
    result = benchmark.pedantic(run_once, args=(mechanism, SCENARIO), kwargs={"seed": 0}, rounds=3,
                                iterations=1)
    assert result.foreground_bytes == SCENARIO.foreground_total


@pytest.mark.parametrize("mechanism", ["owner-wb", "bdev-devt"])
def test_writeback_run_with_timeline_observer(benchmark, mechanism):
    benchmark.group = "writeback-run with a per-tick observer (the report's timeline)"
    ticks = []
    result = benchmark.pedantic(run_once, args=(mechanism, SCENARIO),
                                kwargs={"seed": 0, "observer": lambda sim: ticks.append(sim.ticks)},
                                rounds=3, iterations=1)
    assert ticks and result.ticks == ticks[-1]


def test_churn_comparison(benchmark):
    benchmark.group = "writeback dev_t churn (both designs)"
    res = benchmark.pedantic(compare_churn, kwargs={"seed": 0}, rounds=3, iterations=1)
    assert set(res) == {"bdev-devt", "bdev-ref"}
