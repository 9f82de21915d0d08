"""Where the lab's kernel-side files (csrc/kernel/: config fragments, the guest's init script, the ptrace
wrapper's C) are found at run time: in the installed package first, then in the source tree."""
from __future__ import annotations

import os
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent.parent      # pybcache/


def kernel_file(name: str) -> Path:
    """The path of ``csrc/kernel/<name>``: ``<package>/csrc/kernel/<name>`` when the package carries it (a
    wheel), else the source tree's ``<repo>/csrc/kernel/<name>``, the repo being the nearest directory above
    the package that has it (the checkout of an editable install, or the one holding a copy of the package
    such as make sanitize's build/sanitize/py). Raises FileNotFoundError naming where it looked."""
    tried = [_PACKAGE / "csrc" / "kernel" / name]
    tried += [parent / "csrc" / "kernel" / name for parent in _PACKAGE.parents]
    for path in tried:
        if path.is_file():
            return path
    raise FileNotFoundError(f"csrc/kernel/{name} not found (looked in {tried[0].parent} and in csrc/kernel/ of "
                            f"each directory above {_PACKAGE})")


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
