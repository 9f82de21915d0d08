"""The model's shared state, which the modules named after kernel files extend (the facade in :mod:`.model`
composes them into :class:`~pybcache.writeback.model.WritebackModel`).

Every mixin subclasses :class:`ModelBase` and nothing else, so no mixin module imports another; a call from
one to a method another provides goes through ``self`` and is declared here for the type checker only.
Nothing here checks arguments: the facade's public methods do, once, and everything below them trusts them.
"""
from __future__ import annotations

import itertools
import threading
from typing import TYPE_CHECKING, Callable, Generator, Optional

from ..validate import check_instance, check_int
from .entities import (PAGE_SIZE, BlockDevice, DeviceTable, Disk, Inode, Memcg, ModelStats, Writeback,
                       WritebackWork)
from .jiffies import Clock, WritebackTunables
from .memcontrol import BdevSlot, ForeignBdevRecords, WbCompletion
from .workqueue import FlushExecutor, SimulatedWorkqueue, WriteRequest

__all__ = ["ModelBase", "WorkqueueFactory"]

WorkqueueFactory = Callable[[], Optional[FlushExecutor]]


class ModelBase:
    """The state of one model: clock, tunables, entities, statistics, locks, the mechanism in use.

    Locks: ``_struct_lock`` (the entity tables), ``_stat_lock`` (statistics, memcg dirty counts and
    references), ``_flusher_lock`` (the flusher-scan sets; a leaf). The order between them and the entities'
    own locks is in :mod:`.model`'s docstring.
    """

    def __init__(self, *, mechanism: str, clock: Clock, tunables: WritebackTunables, dirtyable_memory: int,
                 foreign_slots: int, bdev_slots: int, workqueue_factory: WorkqueueFactory | None,
                 dirty_ratelimit: float) -> None:
        """Set the state up from arguments the facade has checked."""
        self.requested_mechanism = mechanism
        self.clock = clock
        # the dirty limits' inputs; setting either (property setters) starts a new limits generation
        self._limits_gen = 0                                # changed only by the setters
        self._global_limits_cache: tuple[int, int] | None = None   # one store; racing readers compute the same
        self._tunables = tunables
        self._dirtyable_pages = dirtyable_memory // PAGE_SIZE
        self.foreign_slots = foreign_slots
        self.bdev_slots = bdev_slots
        self.dirty_ratelimit_pages = dirty_ratelimit / PAGE_SIZE
        self.stats = ModelStats()                           # under _stat_lock
        self._stat_lock = threading.Lock()
        self._struct_lock = threading.RLock()
        self._nr_dirty = 0                                  # under _stat_lock
        self._ino = itertools.count(1)
        self._css_id = itertools.count(1)
        self._bdi_id = itertools.count(1)
        self._wb_seq = itertools.count()                    # under _struct_lock (wbs are created under it)
        # Which flushers the per-tick scan visits (``_flushers_to_scan``), all under ``_flusher_lock``, a leaf
        # lock taken inside a wb's ``lock``. Invariant: a wb whose flusher has work queued, was kicked, is
        # awake or runs a work is in ``_ready``; one whose delayed wake-up is armed is in ``_ready`` or
        # ``_armed``. Any other wb is idle: its ``flusher_next_work`` would return None and change nothing.
        self._flusher_lock = threading.Lock()
        self._ready: dict[Writeback, None] = {}
        self._armed: dict[Writeback, int] = {}      # wb -> its wake-up as an offset from _jiffies_base
        self._next_armed: int | None = None         # the earliest offset in _armed, or earlier (never later)
        self._jiffies_base = clock.now()
        self.disks: dict[int, Disk] = {}                    # under _struct_lock
        self.memcgs: dict[int, Memcg] = {}                  # under _struct_lock
        self.wbs: dict[tuple[int, int], Writeback] = {}     # under _struct_lock
        self.inodes: list[Inode] = []                       # under _struct_lock
        self.devices = DeviceTable()                        # its own lock
        self.all_devices: list[BlockDevice] = []            # under _struct_lock

        self.workqueue: FlushExecutor | None = None
        self.mechanism = mechanism
        self.workqueue_fallback = False
        if mechanism != "owner-wb":
            factory = workqueue_factory or (lambda: SimulatedWorkqueue())
            self.workqueue = factory()
            if self.workqueue is None:
                self.mechanism = "owner-wb"
                self.workqueue_fallback = True
        self.root = self._new_memcg("root", None, None)

    @property
    def bdev_flush_enabled(self) -> bool:
        """True if bdev foreign records are kept (a bdev mechanism whose workqueue exists)."""
        return self.mechanism != "owner-wb"

    @property
    def nr_dirty(self) -> int:
        """Dirty pages in the whole model (the root memcg's hierarchical count)."""
        return self._nr_dirty

    @property
    def tunables(self) -> WritebackTunables:
        """The writeback sysctls; replacing them takes effect at the next call (dirty limits included)."""
        return self._tunables

    @tunables.setter
    def tunables(self, tunables: WritebackTunables) -> None:
        check_instance(tunables, "tunables", WritebackTunables, "a WritebackTunables")
        if tunables.hz != self.clock.hz:
            raise ValueError(f"tunables.hz ({tunables.hz}) must equal clock.hz ({self.clock.hz})")
        self._tunables = tunables
        self._new_limits_generation()

    @property
    def dirtyable_pages(self) -> int:
        """Pages of memory that can hold dirty page cache (the global domain's basis)."""
        return self._dirtyable_pages

    @dirtyable_pages.setter
    def dirtyable_pages(self, pages: int) -> None:
        self._dirtyable_pages = check_int(pages, "dirtyable_pages", 1, (1 << 60) // PAGE_SIZE)
        self._new_limits_generation()

    def _new_limits_generation(self) -> None:
        self._global_limits_cache = None
        self._limits_gen += 1

    if TYPE_CHECKING:  # provided by the mixins; declared here so that each mixin type-checks on its own
        # page_writeback
        def _write_pages(self, inode: Inode, pages: int, reason: str) -> int: ...
        def _discard_pages(self, inode: Inode) -> int: ...
        def _hierarchical_dirty(self, memcg: Memcg) -> int: ...
        def _global_limits(self) -> tuple[int, int]: ...
        def _over_background_thresh(self, wb: Writeback) -> bool: ...
        def _update_bandwidth(self, wb: Writeback, now: int) -> None: ...
        # fs_writeback
        def _wb_of(self, memcg: Memcg, disk: Disk, *, create: bool = False) -> Writeback | None: ...
        def _arm_wakeup(self, wb: Writeback, at: int) -> None: ...
        def _kick_background(self, wb: Writeback) -> None: ...
        def _cgroup_writeback_by_id(self, bdi_id: int, memcg_id: int, done: WbCompletion | None,
                                    issuer: str) -> int: ...
        def _wb_queue_work(self, wb: Writeback, work: WritebackWork) -> None: ...
        # memcg_writeback
        def _new_memcg(self, name: str, parent: Memcg | None, memory_max: int | None) -> Memcg: ...
        def _track_foreign(self, inode: Inode, memcg: Memcg, wb: Writeback, now: int) -> BlockDevice | None: ...
        def _flush_foreign(self, wb: Writeback) -> int: ...
        def _memcg_put(self, memcg: Memcg) -> None: ...
        # bdev_flush
        def _make_bdev_work(self, memcg: Memcg,
                            slot: BdevSlot[BlockDevice]) -> Callable[[], Generator[WriteRequest, int, None]]: ...
        def _make_bdev_cancel(self, memcg: Memcg, slot: BdevSlot[BlockDevice]) -> Callable[[], None]: ...
        def _put_device(self, device: BlockDevice, *, deferred: bool = False) -> None: ...
        def _abort_bdev_flush(self, records: ForeignBdevRecords[BlockDevice], slot: BdevSlot[BlockDevice]) -> None: ...
