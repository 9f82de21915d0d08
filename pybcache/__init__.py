"""pybcache: a userspace laboratory for two Linux storage-kernel designs.

* :class:`BypassWriteTracker` - bcache's per-chunk tracking of in-flight bypass writes (the v2 cover
  letter), with its three synchronisation variants and the allocation-failure and overflow policies; the
  rest of the bcache side is :mod:`pybcache.bcache`.
* :mod:`pybcache.writeback` - memcg foreign-bdev writeback (the v6 cover letter), in Python.
* :func:`load_patch` - a tracker patch written in kernel C, compiled against the shim
  (:func:`get_include`) and run as a tracker.
"""
from __future__ import annotations

from .bcache._tracker import BypassWriteTracker, FaultInjection
from .bcache.cachedev import CachedDevice, explore, fio, race
from .bcache.kpatch.load import KernelPatch, get_include, load_patch
from .bcache.stress import stress
from .dist.explore import explore_distributed
from .units import GiB, KiB, MiB, TiB

__version__ = "0.1.0"

__all__ = ["BypassWriteTracker", "FaultInjection", "stress", "KiB", "MiB", "GiB", "TiB", "__version__"]
__all__ += ["CachedDevice", "race", "explore", "fio", "explore_distributed"]
__all__ += ["load_patch", "get_include", "KernelPatch"]
