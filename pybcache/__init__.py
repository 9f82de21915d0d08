"""pybcache: a userspace laboratory for two Linux storage-kernel designs.

* :class:`BypassWriteTracker` - bcache's per-chunk tracking of in-flight bypass writes (the 2026 v2
  series), with its three synchronisation variants and the allocation-failure and overflow policies.
* :mod:`pybcache.writeback` - memcg foreign-bdev writeback (the v6 series), in Python.
* :func:`load_patch` - a tracker patch written in kernel C, compiled against the shim
  (:func:`get_include`) and run as a tracker.
"""
from __future__ import annotations

import sys as _sys

from ._tracker import BypassWriteTracker, FaultInjection
from .bcache.stress import stress
from .bcache.cachedev import CachedDevice, explore, fio, race
from .distexplore import explore_distributed
from .kpatch import KernelPatch, get_include, load_patch
from .units import GiB, KiB, MiB, TiB

# The bcache modules' former top-level names stay importable: ``import pybcache.cachedev`` finds the module
# of pybcache.bcache (registered here, so the import system binds nothing new on the package: the attribute
# ``pybcache.stress`` stays the function).
for _name in ("cachedev", "stress", "reference"):
    _sys.modules.setdefault(f"{__name__}.{_name}", _sys.modules[f"{__name__}.bcache.{_name}"])
del _name

__version__ = "0.1.0"

__all__ = ["BypassWriteTracker", "FaultInjection", "stress", "KiB", "MiB", "GiB", "TiB", "__version__"]
__all__ += ["CachedDevice", "race", "explore", "fio", "explore_distributed"]
__all__ += ["load_patch", "get_include", "KernelPatch"]
