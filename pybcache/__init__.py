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
from .experiments import bench as _bench, memory as _memory  # noqa: F401 (aliases below)
from .bcache import reference as _reference  # noqa: F401 (alias below)

# The former top-level names of the bcache modules and the experiments stay importable: ``import
# pybcache.cachedev`` finds the module of pybcache.bcache (registered here, so the import system binds nothing
# new on the package: the attribute ``pybcache.stress`` stays the function). ``pybcache.sustained`` is a module
# of its own, so that ``python -m pybcache.sustained`` still runs.
for _old, _new in (("cachedev", "bcache.cachedev"), ("stress", "bcache.stress"), ("reference", "bcache.reference"),
                   ("memory", "experiments.memory"), ("bench", "experiments.bench")):
    _sys.modules.setdefault(f"{__name__}.{_old}", _sys.modules[f"{__name__}.{_new}"])
    if _old != "stress":            # as before the move, pybcache.cachedev etc. are also the package's attributes
        globals()[_old] = _sys.modules[f"{__name__}.{_new}"]
del _old, _new

__version__ = "0.1.0"

__all__ = ["BypassWriteTracker", "FaultInjection", "stress", "KiB", "MiB", "GiB", "TiB", "__version__"]
__all__ += ["CachedDevice", "race", "explore", "fio", "explore_distributed"]
__all__ += ["load_patch", "get_include", "KernelPatch"]
