"""The C that ships as source: the one place that knows where it is and what ``csrc/sources.mk`` lists.

A wheel carries ``csrc/`` as ``pybcache/csrc/`` (package data mapped from the source tree by setup.py) and
``examples/`` as ``pybcache/examples/``; a checkout or an editable install reads the tree's ``csrc/`` and
``examples/`` beside the package. What is compiled on a user's machine at run time comes from here: the
kernel-patch shim (headers and runtime, for :func:`pybcache.load_patch`) and the nbdkit plugin with the
model's sources (``pybcache serve``). setup.py runs this file on its own (no import of the package, which
is not built yet) for :func:`read_sources_mk`, so the list of C sources is read by one parser.
"""
from __future__ import annotations

import os
from pathlib import Path

__all__ = ["csrc_dir", "csrc_path", "read_sources_mk", "sources", "example_patches"]

_PACKAGE = Path(__file__).resolve().parent


def _first_dir(name: str) -> Path:
    for candidate in (_PACKAGE / name, _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"{name}/: neither {_PACKAGE / name} nor {_PACKAGE.parent / name} exists "
                            "(a broken install: reinstall pybcache)")


def csrc_dir() -> Path:
    """The folder of the C sources: the package's copy (a wheel), else the source tree's ``csrc/``."""
    return _first_dir("csrc")


def csrc_path(relative: str) -> Path:
    """A file below :func:`csrc_dir`, which must exist."""
    path = csrc_dir() / relative
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing (a broken install: reinstall pybcache)")
    return path


def read_sources_mk(path: str | os.PathLike[str]) -> dict[str, list[str]]:
    """The variables of a ``sources.mk`` (``NAME = a.c b.c`` lines; ``#`` comments), name -> words."""
    out: dict[str, list[str]] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            name, sep, value = line.split("#", 1)[0].partition("=")
            if sep:
                out[name.strip()] = value.split()
    return out


def sources(*variables: str) -> list[Path]:
    """The files that ``csrc/sources.mk`` lists under ``variables``, in order, as paths."""
    listed = read_sources_mk(csrc_path("sources.mk"))
    missing = [v for v in variables if v not in listed]
    if missing:
        raise KeyError(f"csrc/sources.mk does not define {', '.join(missing)}")
    return [csrc_dir() / name for v in variables for name in listed[v]]


def example_patches() -> dict[str, Path]:
    """The shipped example patches, name (file stem) -> path; {} if there are none."""
    try:
        folder = _first_dir("examples") / "patches"
    except FileNotFoundError:
        return {}
    return {p.stem: p for p in sorted(folder.glob("*.c"))}
