"""``tracker_impl``: every implementation of the tracker's semantics behind one fixture, so that one suite
(tests/tracker/test_tracker_semantics.py) runs over all of them - the lab's C tracker in each sync variant and
counter width, the pure-Python reference model (``pybcache.bcache.reference``) in the same, and a loaded example
patch (``examples/patches/v3_proposal.c``, compiled once per session).

``tracker_impl(size=200 GiB, **settings)`` makes a new tracker of a ``size``-byte device. A test states what it
uses beyond start/end/is_active/stats()["starts"/"ends"] with ``tracker_impl.require(...)``; an implementation
without it is skipped with the reason, e.g. a patch has no ``count()``: its counters are its own.
"""
from __future__ import annotations

import itertools
import os

import pytest

import pybcache
from pybcache.bcache import reference

SYNCS = ("global", "page", "atomic")
BITS = (16, 32, 64)
GiB = pybcache.GiB
PATCH = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "patches", "v3_proposal.c")

# What a loaded patch does not have (PatchTracker: start, end, is_active, stats, memory, close): the lab's
# settings, its geometry and per-chunk counters, batches, reclaim, and the lab's stats and memory layout.
_PATCH_LACKS = {
    "settings": "a patch's tracker takes no lab settings (chunk size, counter width, policies): the patch has its own",
    "geometry": "a patch has no n_chunks/chunks_per_page: its layout is its own",
    "count": "a patch has no count()/counts(): its counters are its own",
    "batch": "a patch has no start_many/end_many/is_active_many",
    "reclaim": "a patch has no reclaim(): it frees as it decides",
    "underflows": "a patch's stats() has no 'underflows' (an end without a start is its WARN and kernel report)",
    "lab_memory": "a patch's memory() counts its own directory and pages, not the lab's 16-byte slots",
    "pages_allocated": "a patch's stats() counts 'allocations'/'frees', not the lab's pages_allocated/pages_freed",
}


class TrackerImpl:
    """One implementation: ``name`` (the test id), ``kind`` ("c", "reference" or "patch"), ``sync`` and
    ``counter_bits`` (None for a patch)."""

    def __init__(self, name: str, kind: str, factory, sync: str | None = None, counter_bits: int | None = None,
                 lacks: dict[str, str] | None = None) -> None:
        self.name, self.kind, self._factory = name, kind, factory
        self.sync, self.counter_bits = sync, counter_bits
        self.lacks = lacks or {}

    def __call__(self, size: int = 200 * GiB, **settings):
        if settings:
            self.require("settings")
        return self._factory(size, **settings)

    def require(self, *features: str) -> None:
        for feature in features:
            if feature in self.lacks:
                pytest.skip(f"{self.name}: {self.lacks[feature]}")

    def __repr__(self) -> str:
        return f"<tracker_impl {self.name}>"


@pytest.fixture(scope="session")
def v3_proposal_patch():
    """examples/patches/v3_proposal.c compiled and loaded, once per session (the compile is cached on disk)."""
    return pybcache.load_patch(PATCH)


_IMPLS = ([f"c-{s}-u{b}" for s, b in itertools.product(SYNCS, BITS)]
          + [f"reference-{s}-u{b}" for s, b in itertools.product(SYNCS, BITS)])


@pytest.fixture(params=_IMPLS + [pytest.param("patch-v3_proposal", marks=pytest.mark.e2e)])
def tracker_impl(request: pytest.FixtureRequest) -> TrackerImpl:
    name = request.param
    if name.startswith("patch-"):
        patch = request.getfixturevalue("v3_proposal_patch")
        return TrackerImpl(name, "patch", lambda size: patch.tracker(size), lacks=_PATCH_LACKS)
    kind, sync, bits = name.split("-")
    bits = int(bits[1:])
    cls = pybcache.BypassWriteTracker if kind == "c" else reference.BypassWriteTracker
    return TrackerImpl(name, kind, lambda size, **kw: cls(size, sync=sync, counter_bits=bits, **kw), sync, bits)
