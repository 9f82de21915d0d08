"""bcache bypass-write tracking (the v2 cover letter), beside :mod:`pybcache.writeback`.

==========================  ==============================================================================
module                      what it holds
==========================  ==============================================================================
:mod:`._tracker`            :class:`BypassWriteTracker`, :class:`FaultInjection` (C ``csrc/pyb_tracker.*``;
                            Cython ``_tracker.pyx``, declarations ``includes/*.pxd``, types ``_tracker.pyi``)
:mod:`.variants`            the names of the synchronisation variants, defined once
:mod:`.cachedev`            the cached-device model (:class:`CachedDevice`) and its drivers :func:`race`,
                            :func:`explore`, :func:`fio` (C ``csrc/pyb_cachedev.*``, ``pyb_explore.*``,
                            ``pyb_workload.*``; Cython ``_cachedev.pyx``)
:mod:`.stress`              :func:`stress`: native threads on one tracker (C ``csrc/pyb_stress.*``)
:mod:`.reference`           the reference model: the tracker's semantics in pure Python, the tests' oracle
:mod:`.experiments`         what measures the trackers: memory, bench, sustained load
:mod:`.kpatch`              a user's tracker in kernel C: loading (:mod:`.kpatch.load`) and the
                            ``check-patch`` battery (:mod:`.kpatch.check`)
:mod:`.nbd`                 the model served over NBD to real clients (:mod:`.nbd.server`) and real fio
                            against it (:mod:`.nbd.fio`)
==========================  ==============================================================================

Data flows down: the command line (:mod:`pybcache.commands`) and the report (:mod:`pybcache.report`) call
these modules; these call only each other, :mod:`pybcache.units`, :mod:`pybcache.validate` and the C core.
"""
from __future__ import annotations

from ._tracker import BypassWriteTracker, FaultInjection
from .cachedev import CachedDevice, explore, fio, race
from .stress import stress

__all__ = ["BypassWriteTracker", "FaultInjection", "CachedDevice", "race", "explore", "fio", "stress"]
