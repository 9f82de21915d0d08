"""The tracker's synchronisation variants, named once for the whole package.

``SYNCS`` are the lab's three trackers, in the order of the C core's ``enum pyb_sync`` (csrc/pyb_tracker.h):
one global spinlock, a spinlock per page (the v2 cover letter's choice), lockless atomics. ``VARIANTS`` adds
``none``, the unpatched kernel, where the cached-device model and its experiments run without a tracker.
"""
from __future__ import annotations

__all__ = ["SYNCS", "VARIANTS", "LABELS"]

SYNCS = ("global", "page", "atomic")
VARIANTS = ("none",) + SYNCS
#: column headers of the tables that set the variants side by side, as the v2 cover letter's fio table does
LABELS = {"none": "Unpatched", "global": "Global lk", "page": "Page lk", "atomic": "Atomic"}
