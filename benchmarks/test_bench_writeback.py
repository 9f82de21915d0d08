"""One simulated run of the v6 experiment per mechanism, side by side
(``pytest benchmarks/test_bench_writeback.py --benchmark-group-by=group``).

The scenario is the default one with a 2 GiB foreground job (about 12 simulated seconds) so a round takes a
fraction of a second. Read the ratio between mechanisms in the same run, not the absolute times: the owner-wb
baseline simulates far more writeback work per tick than the bdev mechanisms.
"""
from __future__ import annotations

import pytest

from pybcache.writeback import MECHANISMS, Scenario, run_once

SCENARIO = Scenario(foreground_total=2 << 30)


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_writeback_simulated_run(benchmark, mechanism):
    benchmark.group = "writeback-run"
    result = benchmark.pedantic(run_once, args=(mechanism, SCENARIO), kwargs={"seed": 0}, rounds=3,
                                iterations=1)
    assert result.foreground_bytes == SCENARIO.foreground_total
