"""Stand-ins shared by the cached-device tests that replace the C model (tests/cachedev/test_*_assembly.py,
test_cachedev_helpers.py): a step record of a counterexample, a patch and its tracker, a device and the race
slices (the ``race_model`` fixture)."""
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

    def tracker(self, size, hung_timeout, **kw):
        t = FakePatchTracker(self.reports)
        t.kw = kw
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


class FakeDevice:
    made: list = []

    def __init__(self, size, **kw):
        self.size, self.kw = size, kw
        self.sync, self.check = kw.get("sync"), kw["check"]
        self.restart, self.granularity = kw["restart"], kw["granularity"]
        self.tracker = object()
        self.stats = {"underflows": 1, "alloc_failures": 2, "hijack_events": 3, "faults_injected": 4,
                      "mempool_waits": 5, "mempool_rounds": 6}
        FakeDevice.made.append(self)

    def tracker_stats(self):
        return self.stats

    def stale_cached_blocks(self):
        return 6


_SLICE_KEYS = ("reads", "read_hits", "read_bypasses", "cache_inserts", "miss_collisions", "stale_reads", "writes",
               "untracked_writes", "tracker_checks", "check_key_restarts", "ops", "reclaimed")
