"""A user's bypass-write tracker written in kernel C.

* :mod:`.load` - :func:`load_patch` compiles the file against the kernel-API shim (``csrc/kpatch/include``,
  :func:`get_include`) and the shim's runtime (``csrc/kpatch/kpatch_rt.c``) and loads it (:mod:`._kpatch`);
  the loaded patch runs wherever the lab takes a tracker;
* :mod:`.check` - ``pybcache check-patch``: the battery of checks a patch runs through.
"""
from __future__ import annotations

from .load import KernelPatch, PatchCompileError, get_include, load_patch

__all__ = ["KernelPatch", "PatchCompileError", "get_include", "load_patch"]
