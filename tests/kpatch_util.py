"""Shared helpers of the kernel-patch tests: where the example and purpose-built patches are."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "patches"
BAD = Path(__file__).resolve().parent / "kpatches"
