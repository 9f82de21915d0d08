"""pybcache: a userspace laboratory for two Linux storage-kernel designs.

* :class:`BypassWriteTracker` - bcache's per-chunk tracking of in-flight bypass writes (the 2026 v2
  series), with its three synchronisation variants and the allocation-failure and overflow policies.
* :mod:`pybcache.writeback` - memcg foreign-bdev writeback (the v6 series), in Python.
* :func:`load_patch` - a tracker patch written in kernel C, compiled against the shim
  (:func:`get_include`) and run as a tracker.
"""
from __future__ import annotations

from ._tracker import BypassWriteTracker, FaultInjection
from .stress import stress
from .cachedev import CachedDevice, explore, fio, race
from .distexplore import explore_distributed
from .kpatch import KernelPatch, get_include, load_patch
from .units import GiB, KiB, MiB, TiB

__version__ = "0.1.0"

__all__ = ["BypassWriteTracker", "FaultInjection", "stress", "KiB", "MiB", "GiB", "TiB", "__version__"]
__all__ += ["CachedDevice", "race", "explore", "fio", "explore_distributed"]
__all__ += ["load_patch", "get_include", "KernelPatch"]
