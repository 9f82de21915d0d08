"""mypy over the whole package: the .pyi stubs of the compiled modules agree with how the pure-Python layer
and the tests use them."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.e2e

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The whole package (against the .pyi stubs of every extension module) and the tests that use the
# compiled API most directly.
CHECKED = ["pybcache", "tests/tracker/test_tracker_semantics.py", "tests/tracker/test_tracker_threads.py",
           "tests/tracker/test_tracker_memory.py", "tests/cachedev/test_cachedev.py"]


def test_mypy_accepts_the_stubs_and_their_users():
    pytest.importorskip("mypy")
    proc = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary", "--ignore-missing-imports",
                           "--cache-dir", os.path.join(ROOT, "build", ".mypy_cache"), *CHECKED],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_extension_module_has_a_stub():
    import pathlib

    import pybcache
    package = pathlib.Path(pybcache.__file__).parent
    extensions = {p.parent / p.name.split(".")[0] for p in package.rglob("_*.so")}
    assert {p.name for p in extensions} >= {"_tracker", "_cachedev", "_kpatch"}
    missing = {p.name for p in extensions if not p.with_suffix(".pyi").exists()}
    assert not missing, f"extension modules without a .pyi stub: {sorted(missing)}"
