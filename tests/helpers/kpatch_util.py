"""Shared helpers of the kernel-patch tests: where the example and purpose-built patches are, and the
single-point mutants of the proposal (tests/data/mutants/table.py)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
ROOT = TESTS.parent
EXAMPLES = ROOT / "examples" / "patches"
BAD = TESTS / "data"


def mutant_table():
    """tests/data/mutants/table.py as a module (data, not a package on sys.path: no name to clash)."""
    name = "pybcache_tests_mutant_table"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, BAD / "mutants" / "table.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module   # dataclasses look their module up while the class is made
        spec.loader.exec_module(module)
    return sys.modules[name]
