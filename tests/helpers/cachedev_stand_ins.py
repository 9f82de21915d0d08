"""Stand-ins shared by the cached-device tests that replace the C model (tests/cachedev/test_*_assembly.py,
test_cachedev_helpers.py): a step record of a counterexample, a patch and its tracker."""
from __future__ import annotations

from pybcache.bcache import cachedev


def _rec(op="W1", step="start", flags=(), lo=0, hi=4096, version=1, count=1, seq_now=0, a=(), b=()):
    return {"op": op, "kind": "write", "step": step, "flags": list(flags), "lo": lo, "hi": hi,
            "version": version, "count": count, "seq_now": seq_now, "a": list(a), "b": list(b)}


class FakePatch:
    def __init__(self, reports=()):
        self.name, self.path, self._module = "fake", "/p/fake.c", object()
        self.reports = list(reports)
        self.trackers = []

    def tracker(self, size, hung_timeout):
        t = FakePatchTracker(self.reports)
        self.trackers.append((size, hung_timeout, t))
        return t


class FakePatchTracker:
    def __init__(self, reports):
        self.reports = reports

    def kernel_reports(self):
        return self.reports


def _with_patch(monkeypatch, patch):
    monkeypatch.setattr(cachedev, "_as_patch", lambda s: patch if s == "PATCH" else None)
    monkeypatch.setattr(cachedev, "PatchTracker", FakePatchTracker)
