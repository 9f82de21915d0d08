"""The report section tests' shared fixture."""
from __future__ import annotations

import sys
import types

import pytest


@pytest.fixture
def plots(monkeypatch):
    """``pybcache.report.plots`` replaced by a module of recorders: {name: [(args, kwargs), ...]}; each returns the
    path, as the real ones do (the sections import it when they run; the real one would import matplotlib)."""
    calls: dict[str, list] = {}
    fake = types.ModuleType("pybcache.report.plots")
    for name in ("plot_memory", "plot_scaling", "plot_stale_reads", "plot_fio", "plot_counts_heatmap",
                 "plot_writeback_timeline", "plot_writeback_sensitivity"):
        def rec(*args, _name=name, **kwargs):
            calls.setdefault(_name, []).append((args, kwargs))
            return args[-1]
        setattr(fake, name, rec)
    monkeypatch.setitem(sys.modules, "pybcache.report.plots", fake)
    return calls
