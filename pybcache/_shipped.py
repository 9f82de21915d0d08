"""C sources that a user's machine compiles at run time (the kernel-patch shim's runtime for load_patch, the
nbdkit plugin for ``pybcache serve``). They are kept in the source tree's ``csrc/`` and copied into the package
by the build (setup.py ``build_py``): an installed wheel has the package copy, an editable install or a checkout
reads ``csrc/``."""
from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent
_TREE = _PACKAGE.parent / "csrc"
_EXAMPLES_TREE = _PACKAGE.parent / "examples" / "patches"

#: installed path (relative to the package) -> source-tree path (relative to csrc/)
SHIPPED = {"kpatch_rt/kpatch_rt.c": "kpatch/kpatch_rt.c", "_nbdkit/pyb_nbdkit.c": "nbdkit/pyb_nbdkit.c"}


def shipped_source(installed: str) -> Path:
    """The file for ``installed`` (a key of SHIPPED): the package's copy, else the source tree's."""
    for candidate in (_PACKAGE / installed, _TREE / SHIPPED[installed]):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"{installed}: neither {_PACKAGE / installed} nor {_TREE / SHIPPED[installed]} "
                            "exists (a broken install: reinstall pybcache)")


def example_patches() -> dict[str, Path]:
    """The shipped example patches, name (file stem) -> path: the package's copy (an installed wheel), else
    the source tree's ``examples/patches/`` (a checkout or an editable install); {} if neither exists."""
    for folder in (_PACKAGE / "examples" / "patches", _EXAMPLES_TREE):
        found = {p.stem: p for p in sorted(folder.glob("*.c"))}
        if found:
            return found
    return {}
