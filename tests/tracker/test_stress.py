"""``pybcache.bcache.stress``, the native stress entry point, with the native runner stood in for: what it
hands on and what it refuses."""
from __future__ import annotations

import importlib

import pytest

import pybcache


stress_mod = importlib.import_module("pybcache.bcache.stress")   # the package re-exports the function as `stress`


@pytest.mark.native   # a real tracker is handed on
def test_stress_hands_the_tracker_and_every_option_with_its_default_to_the_native_run(monkeypatch):
    calls = []
    monkeypatch.setattr(stress_mod, "native_stress", lambda tracker, **kw: calls.append((tracker, kw)) or "res")
    t = pybcache.BypassWriteTracker(pybcache.GiB)
    assert stress_mod.stress(t, ops=5) == "res"
    assert calls[-1] == (t, dict(threads=2, ops=5, seconds=None, region=None, write_length=128 * 1024, depth=4,
                                 partition=False, reclaim_every=0, seed=0, wait_timeout=None, completions="thread"))
    opts = dict(threads=3, ops=None, seconds=0.5, region=(0, 4096), write_length=4096, depth=9, partition=True,
                reclaim_every=7, seed=11, wait_timeout=2.0, completions="inline")
    stress_mod.stress(t, **opts)
    assert calls[-1] == (t, opts)


def test_stress_refuses_what_is_not_a_tracker_naming_both_kinds():
    with pytest.raises(TypeError) as e:
        stress_mod.stress(object(), ops=1)
    assert str(e.value) == ("tracker must be a pybcache.BypassWriteTracker or "
                            "pybcache.bcache.kpatch.load.PatchTracker, "
                            "got object")
