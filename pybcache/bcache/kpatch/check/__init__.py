"""``pybcache check-patch``: the battery of checks a kernel patch runs through before it is posted."""
from __future__ import annotations

from .runner import CHECKS, CheckPatchResult, CheckResult, PatchLoadError, check_patch

__all__ = ["CHECKS", "CheckPatchResult", "CheckResult", "PatchLoadError", "check_patch"]
