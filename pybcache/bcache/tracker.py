"""The bypass-write tracker: the public face of the C core.

One concept, one hop each way:

* C: ``csrc/pyb_tracker.h`` (the contract: states, invariants, memory orders), ``csrc/pyb_tracker.c``;
* Cython: ``pybcache/includes/pyb_tracker.pxd`` (the C declarations), ``pybcache/_tracker.pxd`` (the
  exported cdef classes, cimported by ``_cachedev`` and ``_kpatch``), ``pybcache/_tracker.pyx`` (the
  bindings), ``pybcache/_tracker.pyi`` (types);
* reference model: :mod:`pybcache.bcache.reference` (the same API in pure Python, the oracle of the
  property tests);
* tests: ``tests/test_tracker_*.py``, ``tests/test_fuzz_tracker.py``, ``csrc/tests/test_tracker.c``;
* docs: ``docs/tracker-api.md``.
"""
from __future__ import annotations

from .._tracker import (ALLOC_FAILURES, COUNTER_BITS, FREES, LOCKS, OVERFLOWS, PAGE_SIZE, SYNCS,
                        BypassWriteTracker, FaultInjection, floors)

__all__ = ["BypassWriteTracker", "FaultInjection", "floors", "SYNCS", "OVERFLOWS", "ALLOC_FAILURES", "FREES",
           "COUNTER_BITS", "LOCKS", "PAGE_SIZE"]
