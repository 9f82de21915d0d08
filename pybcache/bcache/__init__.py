"""bcache bypass-write tracking (the 2026 v2 series), beside :mod:`pybcache.writeback`.

==========================  ==============================================================================
module                      what it holds
==========================  ==============================================================================
:mod:`.tracker`             :class:`BypassWriteTracker`, :class:`FaultInjection` (C core ``csrc/pyb_tracker.*``)
:mod:`.cachedev`            the cached-device model (:class:`CachedDevice`) and its drivers :func:`race`,
                            :func:`explore`, :func:`fio` (C ``csrc/pyb_cachedev.*``, ``pyb_explore.*``,
                            ``pyb_workload.*``; Cython ``pybcache/_cachedev.pyx``)
:mod:`.stress`              :func:`stress`: native threads on one tracker (C ``csrc/pyb_stress.*``)
:mod:`.reference`           the reference model: the tracker's semantics in pure Python, the tests' oracle
==========================  ==============================================================================

A user's own tracker, written in kernel C, runs wherever these take a tracker: :mod:`pybcache.kpatch`
(loading) and :mod:`pybcache.checkpatch` (the battery). The experiments that measure the trackers are
:mod:`pybcache.experiments` (memory, bench, sustained); the report is
:mod:`pybcache.report`; the command line is :mod:`pybcache.commands`.

The modules were top-level before (``pybcache.cachedev``, ``pybcache.stress``, ``pybcache.reference``);
those names stay importable as aliases of these modules (the same module objects).
"""
from __future__ import annotations

from . import reference
from .cachedev import CachedDevice, explore, fio, race
from .stress import stress
from .tracker import BypassWriteTracker, FaultInjection

__all__ = ["BypassWriteTracker", "FaultInjection", "CachedDevice", "race", "explore", "fio", "stress", "reference"]
