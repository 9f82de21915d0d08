"""Shared helpers of the kernel-patch tests: where the example and purpose-built patches are, and the
single-point mutants of the proposal (pybcache/bcache/kpatch/mutants.py)."""
from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
ROOT = TESTS.parent
EXAMPLES = ROOT / "examples" / "patches"
BAD = TESTS / "data"


def mutant_table():
    """The single-point mutants of the proposal (shipped: pybcache kernel compare uses their twins)."""
    from pybcache.bcache.kpatch import mutants
    return mutants


def write_mutant(name: str, directory: Path) -> Path:
    """The mutant ``name`` of the proposal, generated now and written as ``<directory>/<name>.c``."""
    mutants = mutant_table()
    path = Path(directory) / f"{name.replace('-', '_')}.c"
    path.write_text(mutants.apply(mutants.mutant(name), mutants.proposal().read_text()))
    return path
