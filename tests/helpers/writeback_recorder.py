"""An observer of the writeback simulation shared by its tests (tests/writeback/)."""
from __future__ import annotations

from pybcache.writeback.simulation import Simulation


class _Recorder:
    """An observer keeping the simulation and counting the ticks it saw."""

    def __init__(self) -> None:
        self.sim: Simulation | None = None
        self.calls = 0
        self.first: dict | None = None

    def __call__(self, sim: Simulation) -> None:
        self.sim = sim
        self.calls += 1
        if self.first is None:
            self.first = {"next_op": [w.next_op for w in sim.workloads],
                          "rng": [w.rng.getstate() for w in sim.workloads]}
