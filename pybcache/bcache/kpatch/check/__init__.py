"""``pybcache check-patch``: the battery of checks a kernel patch runs through before it is posted.

* :mod:`.runner` - the parent: compiles the patch once, runs each check in a child process of its own
  (so a crash, hang or sanitizer report fails that check, named) and reads back its verdict;
* :mod:`.context` - what the child's checks share: their constants, the loaded patch wrapped so that each
  call is recorded in a heartbeat file (a hung child is reported *in that call*), the failure they raise;
* :mod:`.semantics` - random single-threaded operations against the reference model, shrunk on failure;
* :mod:`.checks` - overflow, balance, context, memory, explore and race, and the child's entry point.
"""
from __future__ import annotations

from .runner import CHECKS, CheckPatchResult, CheckResult, PatchLoadError, check_patch

__all__ = ["CHECKS", "CheckPatchResult", "CheckResult", "PatchLoadError", "check_patch"]
