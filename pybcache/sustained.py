"""``python -m pybcache.sustained``: the old name of :mod:`pybcache.experiments.sustained`, kept so that the
command the docs have quoted keeps working (a module of its own, since ``-m`` runs a file)."""
from __future__ import annotations

import sys

from .experiments.sustained import POLICIES, main, sustained_load

__all__ = ["sustained_load", "POLICIES", "main"]

if __name__ == "__main__":
    sys.exit(main())
