"""check-patch's checks (``pybcache/bcache/kpatch/check/checks.py``): the quiescence sweep on a stand-in tracker.
No compiled patch, no child process: the parts that are pure, on inputs chosen here."""
from __future__ import annotations

from pybcache.bcache.kpatch.check import checks as cpchk
from pybcache.bcache.kpatch.check.context import CHUNK


class _Tracker:
    def __init__(self, active_chunks):
        self.active, self.calls = set(active_chunks), []

    def is_active(self, off, ln):
        self.calls.append((off, ln))
        return off // CHUNK in self.active


def test_the_sweep_reads_every_chunk_the_last_one_partial_and_lists_those_that_bypass():
    t = _Tracker({1, 3})
    assert cpchk._sweep(t, 3 * CHUNK + 512) == [1, 3]
    assert t.calls == [(0, CHUNK), (CHUNK, CHUNK), (2 * CHUNK, CHUNK), (3 * CHUNK, 512)]
    t = _Tracker(set())
    assert cpchk._sweep(t, 2 * CHUNK) == [] and t.calls == [(0, CHUNK), (CHUNK, CHUNK)]
    t = _Tracker({0})
    assert cpchk._sweep(t, 1) == [0] and t.calls == [(0, 1)]
