"""The per-memcg foreign records under their old module name: they live in :mod:`.memcontrol` now (named
after mm/memcontrol.c, whose slot logic they model). Kept so that ``pybcache.writeback.foreign`` imports keep
working."""
from __future__ import annotations

from .memcontrol import (DEFAULT_FOREIGN_SLOTS, EXPIRED, BdevSlot, ForeignBdevRecords, ForeignRecordStats,
                         ForeignWbRecords, ForeignWbSlot, PinnableDevice, TrackOutcome, WbCompletion)

__all__ = ["EXPIRED", "WbCompletion", "ForeignWbSlot", "ForeignWbRecords", "BdevSlot", "ForeignBdevRecords",
           "TrackOutcome", "DEFAULT_FOREIGN_SLOTS", "ForeignRecordStats", "PinnableDevice"]
