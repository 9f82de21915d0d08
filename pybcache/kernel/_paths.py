"""Where the kernel lab's files are: its own (csrc/kernel/: config fragments, the guest's init script, the
ptrace wrapper's C, the semantic patches), the kernel cache, Debian's source tarball; and the host tools'
environment."""
from __future__ import annotations

import os
from pathlib import Path

from .._csrc import csrc_path


def kernel_file(name: str) -> Path:
    """The path of ``csrc/kernel/<name>``, found where :mod:`pybcache._csrc` finds the C that ships as source
    (the wheel's ``pybcache/csrc``, else the source tree's ``csrc``). Raises FileNotFoundError naming it."""
    return csrc_path(f"kernel/{name}")


def cache_dir() -> Path:
    """The kernel cache: ``$PYBCACHE_KERNEL_CACHE``, default ``~/.cache/pybcache/kernel``."""
    env = os.environ.get("PYBCACHE_KERNEL_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "pybcache" / "kernel"


def source_tarball() -> Path:
    """Debian's kernel source tarball: ``$PYBCACHE_KERNEL_SOURCE``, default
    ``/usr/src/linux-source-6.12.tar.xz`` (package linux-source-6.12)."""
    return Path(os.environ.get("PYBCACHE_KERNEL_SOURCE") or "/usr/src/linux-source-6.12.tar.xz")


def host_env(**extra: str) -> dict:
    """The environment for the host tools the lab runs (make, spatch, make-bcache, nm, UML): this one without
    LD_PRELOAD, which a sanitizer run of the test suite sets for Python alone (libasan), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    env.update(extra)
    return env
