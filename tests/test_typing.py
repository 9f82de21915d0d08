"""The type stubs of the compiled core agree with how the tests and the pure-Python layer use it."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECKED = ["pybcache/reference.py", "pybcache/memory.py", "pybcache/stress.py",
           "tests/test_tracker_semantics.py", "tests/test_tracker_threads.py", "tests/test_tracker_memory.py"]


def test_mypy_accepts_the_stubs_and_their_users():
    pytest.importorskip("mypy")
    proc = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary", "--ignore-missing-imports",
                           "--cache-dir", os.path.join(ROOT, "build", ".mypy_cache"), *CHECKED],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
