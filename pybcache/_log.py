"""Rate-limited reporting of untracked bypass writes through the ``pybcache`` logger.

The kernel patch warns with a rate-limited printk when an allocation failure leaves a write untracked;
this is the same: at most one warning per ``INTERVAL_S`` seconds, carrying the count suppressed since.
"""
from __future__ import annotations

import logging
import threading
import time

logger = logging.getLogger("pybcache")

INTERVAL_S = 5.0

_clock = time.monotonic     # seconds; tests substitute a fake clock to step through the window
_lock = threading.Lock()
_last = -float("inf")
_suppressed = 0


def log_untracked(n: int) -> None:
    """Record ``n`` writes left untracked by an allocation failure; warn at most once per interval."""
    global _last, _suppressed
    now = _clock()
    with _lock:
        if now - _last < INTERVAL_S:
            _suppressed += n
            return
        total, _suppressed, _last = _suppressed + n, 0, now
    logger.warning("bypass write tracking: page allocation failed, %d write(s) left untracked "
                   "(reads overlapping them may cache stale data)", total)


def reset() -> None:
    """Forget the rate-limit window (for tests)."""
    global _last, _suppressed
    with _lock:
        _last, _suppressed = -float("inf"), 0
