"""The memcg writeback model: disks, block devices, inodes, memcgs, writeback owners and dirty throttling.

The model keeps the kernel's ownership rules (kernel-semantics D.6):

* a dirty page is charged to the memcg of whoever allocated it (``folio memcg``), and counts against that
  memcg's dirty limits;
* an inode is attached, at its first dirtying, to the writeback owner (``wb``) of the memcg that charged that
  first page, for that disk; only that wb writes its pages back;
* dirtying a page whose memcg differs from its inode's wb is *foreign*: the page's memcg records it, and flushes
  it from its throttling path because its own wb can never write that page.

A block device's own page cache (the bdev mapping, where ext4 metadata lives) is an inode on the blockdev
pseudo filesystem whose disk is the device's disk, so a foreign record for it names the same bdi as the
filesystem's files. Three mechanisms are selectable for what a memcg's throttling does about bdev records:

``"owner-wb"``
    the kernel today: the owner-wb records, a flush writes the whole owner wb (1.25 x the owner memcg's dirty
    pages), which for a bdev mapping owned by root includes every root-owned file on the disk;
``"bdev-devt"``
    the v6 series: a bounded set of dev_t per memcg, flushed by work on a dedicated workqueue that writes only
    the bdev mapping; records hold no references (falls back to ``"owner-wb"`` if the workqueue cannot be made);
``"bdev-ref"``
    the reviewer's alternative: the same, but a record pins the device object until a flush consumes it.

Thread safety: every public method may be called from any thread. Lock order: device table, a device's
``open_mutex``, an inode's lock, a wb's lock, a record set's lock, the statistics lock; the flusher-scan lock is a
leaf (nothing is taken while it is held); no lock is held while calling into a workqueue except the
workqueue's own.

Arguments are checked at the public methods only; the simulation's tick loop calls the unchecked ``_``
versions with entities checked when its workloads were built.
"""
from __future__ import annotations

import itertools
import math
import threading
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Callable, Generator, Iterator, Optional

from ._validate import check_bool, check_choice, check_instance, check_int, check_number
from .foreign import BdevSlot, DEFAULT_FOREIGN_SLOTS, ForeignBdevRecords, ForeignWbRecords, WbCompletion
from .jiffies import (Clock, JIFFIES_MASK, SimulatedClock, WritebackTunables, jiffies_add, time_after_eq,
                      time_before_eq)
from .workqueue import FlushExecutor, SimulatedWorkqueue, WorkItem, WriteRequest

__all__ = ["PAGE_SIZE", "KiB", "MiB", "GiB", "MECHANISMS", "MINORBITS", "mkdev", "Disk", "Memcg", "Inode",
           "Writeback", "WritebackWork", "BlockDevice", "DeviceTable", "DirtyDomain", "Throttle", "ModelStats",
           "WritebackModel", "ENOENT"]

PAGE_SIZE = 4096
KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
MINORBITS = 20
ENOENT = -2
MECHANISMS = ("owner-wb", "bdev-devt", "bdev-ref")
_MIN_WRITEBACK_PAGES = 4 * MiB // PAGE_SIZE   # writeback chunks are multiples of 4 MiB
_INIT_BW_PAGES = 100 * MiB // PAGE_SIZE       # the kernel's initial write bandwidth estimate (100 MiB/s)
_DIRTY_SCOPE = 8
_UNLIMITED = 1 << 62


def mkdev(major: int, minor: int) -> int:
    """A 32-bit dev_t from a 12-bit major and a 20-bit minor (the kernel's ``MKDEV``).

    :raises ValueError: outside major 0..4095, minor 0..2**20-1, or for the invalid dev_t 0.
    """
    major = check_int("major", major, minimum=0, maximum=(1 << 12) - 1)
    minor = check_int("minor", minor, minimum=0, maximum=(1 << MINORBITS) - 1)
    dev = (major << MINORBITS) | minor
    if dev == 0:
        raise ValueError("major and minor must not both be 0 (dev_t 0 is never a device)")
    return dev


class Disk:
    """A disk and its bdi: one writeback domain with a bandwidth shared by writeback and direct I/O.

    :param bdi_id: the bdi's id (>= 1, unique in the model).
    :param name: a label.
    :param bandwidth: bytes per second the device completes, > 0.
    """

    __slots__ = ("bdi_id", "name", "bandwidth")

    def __init__(self, bdi_id: int, name: str, bandwidth: float) -> None:
        self.bdi_id = check_int("bdi_id", bdi_id, minimum=1)
        self.name = str(name)
        self.bandwidth = check_number("bandwidth", bandwidth, minimum=0, exclusive_minimum=True)

    def __repr__(self) -> str:
        return f"Disk({self.name!r}, bdi_id={self.bdi_id}, {self.bandwidth / MiB:.0f} MiB/s)"


class Memcg:
    """A memory cgroup: dirty pages charged to it, its dirty limits and its foreign records.

    ``nr_dirty`` counts every dirty page charged here, including pages of inodes other memcgs' wbs own
    (foreign pages); it is only changed under the model's statistics lock.
    """

    def __init__(self, css_id: int, name: str, parent: Optional["Memcg"], memory_max: int | None,
                 foreign_wb: ForeignWbRecords, foreign_bdev: ForeignBdevRecords | None) -> None:
        self.css_id = css_id
        self.name = name
        self.parent = parent
        self.children: list[Memcg] = []
        self.memory_max = memory_max
        self.foreign_wb = foreign_wb
        self.foreign_bdev = foreign_bdev
        self.nr_dirty = 0
        self.online = True
        self.freed = False
        self._refs = 1
        # (the model's limits generation, memory_max, thresh, bg_thresh): the dirty limits cached at their last
        # computation; replaced whole (one store), recomputed when the generation or memory_max differs
        self._limits: tuple[int, int | None, int, int] | None = None

    @property
    def is_root(self) -> bool:
        return self.parent is None

    def subtree(self) -> Iterator["Memcg"]:
        """This memcg and all its descendants."""
        stack = [self]
        while stack:
            memcg = stack.pop()
            yield memcg
            stack.extend(memcg.children)

    def __repr__(self) -> str:
        return f"Memcg({self.name!r}, id={self.css_id}{'' if self.online else ', offline'})"


class Inode:
    """A file's (or a block device's) page cache on one disk.

    Dirty pages are kept as an ordered list of (memcg, count) runs, oldest first; writeback cleans from the
    front, so the pages written first are the ones dirtied first. ``dirty`` is the sum of the runs.
    ``dirtied_when`` is set when the inode goes from clean to dirty, as the kernel does.

    :param size_pages: the file's size in pages (rewrites of a fixed file), or None for a mapping that only
        grows (appends, metadata blocks spread over a large device).
    """

    def __init__(self, ino: int, name: str, disk: Disk, *, kind: str, size_pages: int | None, label: str) -> None:
        self.ino = ino
        self.name = name
        self.disk = disk
        self.kind = kind
        self.size_pages = size_pages
        self.label = label
        self.lock = threading.Lock()
        self.wb: Writeback | None = None
        self.dirtied_when = 0
        self.dirty = 0
        self._runs: deque[list] = deque()
        self.written = 0
        self.written_by_reason: Counter[str] = Counter()
        self.discarded = 0
        self.bdev: BlockDevice | None = None

    def dirty_by_memcg(self) -> dict[str, int]:
        """Dirty pages per memcg name (a snapshot)."""
        with self.lock:
            out: Counter[str] = Counter()
            for memcg, count in self._runs:
                out[memcg.name] += count
            return dict(out)

    def __repr__(self) -> str:
        return f"Inode({self.name!r}, dirty={self.dirty})"


@dataclass(eq=False)
class WritebackWork:
    """A unit of work on a wb's flusher (the kernel's ``wb_writeback_work``).

    :param reason: ``"foreign_flush"``, ``"background"``, ``"periodic"`` or ``"sync"``.
    :param nr_pages: the page budget.
    :param io_class: ``"normal"`` or ``"background"`` (the write-throttling class of its I/O).
    :param done: the completion to release when the work finishes, or None.
    """

    reason: str
    nr_pages: int
    io_class: str = "normal"
    done: WbCompletion | None = None
    issuer: str = ""
    remaining: int = 0
    dirtied_before: int | None = None
    written: int = 0
    finished: bool = False
    retired: set[int] = field(default_factory=set)
    cursor: Optional[Inode] = None
    chunk_left: int = 0
    last_index: int = -1
    written_by_label: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.remaining = self.nr_pages


class Writeback:
    """The writeback owner of one (memcg, disk): its attached inodes and its flusher's work list.

    Only this wb ever writes its inodes' pages (plus whole-mapping flushes of a bdev mapping and the final
    sync); works run one at a time, in queue order. Every field but ``memcg`` and ``disk`` (fixed) changes
    only with ``lock`` held, so a dirtier's kick or wake-up and the flusher's check of them never interleave.

    :param now: the jiffies at creation (the start of the first periodic-writeback interval).
    :param seq: the creation order in its model (the flusher scan visits wbs in this order).
    """

    def __init__(self, memcg: Memcg, disk: Disk, now: int = 0, seq: int = 0) -> None:
        self.memcg = memcg
        self.disk = disk
        self.seq = seq
        self.lock = threading.Lock()
        # all protected by ``lock``:
        self.inodes: list[Inode] = []                   # attached inodes, in attach order
        self.works: deque[WritebackWork] = deque()      # queued works
        self.active: WritebackWork | None = None        # the work the flusher runs now
        self.registered = True
        self.avg_write_bandwidth = float(_INIT_BW_PAGES)
        self.last_old_flush = now                       # last periodic-writeback check that found it due
        self.background_kicked = False                  # a dirtier asked for background writeback
        self.awake = False                              # the flusher is in a pass (runs works, then checks)
        self.next_wakeup: int | None = None             # the flusher's delayed wake-up, if armed
        self._checked_periodic = False                  # this pass has checked periodic writeback
        self._checked_background = False                # this pass has checked background writeback
        self._bw_stamp: int | None = None               # start of the bandwidth sample
        self._bw_written = 0                            # pages written in the bandwidth sample
        self.pages_written = 0

    def __repr__(self) -> str:
        return f"Writeback({self.memcg.name!r}, {self.disk.name!r})"


class BlockDevice:
    """A block device: dev_t, openers, ``open_mutex``, its page cache, and a reference count.

    The device table holds one reference while the device is registered; lookups and (in the reviewer's
    alternative) foreign records hold more. Invariant: the device is released exactly once, when it has been
    removed and its last reference is dropped; ``release_delay`` is then how long references kept it alive.
    """

    def __init__(self, dev_t: int, disk: Disk, generation: int, mapping: Inode) -> None:
        self.dev_t = dev_t
        self.disk = disk
        self.generation = generation
        self.mapping = mapping
        self.openers = 0
        self.open_mutex = threading.Lock()
        self.removed = False
        self.removed_at: int | None = None
        self.released_at: int | None = None
        self._refs = 1
        self._ref_lock = threading.Lock()
        self._clock: Clock | None = None
        self.on_release: Callable[["BlockDevice"], None] | None = None

    @property
    def refs(self) -> int:
        return self._refs

    @property
    def released(self) -> bool:
        return self.released_at is not None

    def get(self) -> None:
        """Take a reference.

        :raises RuntimeError: if the device was already released.
        """
        with self._ref_lock:
            if self._refs <= 0:
                raise RuntimeError(f"device {self.dev_t:#x} used after release")
            self._refs += 1

    def tryget(self) -> bool:
        """Take a reference unless the device was already released."""
        with self._ref_lock:
            if self._refs <= 0:
                return False
            self._refs += 1
            return True

    def get_unless_zero(self) -> bool:
        """Take a reference unless the device is being torn down (``kobject_get_unless_zero``)."""
        with self._ref_lock:
            if self._refs <= 0 or self.removed:
                return False
            self._refs += 1
            return True

    def put(self) -> bool:
        """Drop a reference; True if this released the device.

        :raises RuntimeError: on more puts than gets.
        """
        with self._ref_lock:
            if self._refs <= 0:
                raise RuntimeError(f"device {self.dev_t:#x} released twice")
            self._refs -= 1
            release = self._refs == 0
            if release:
                self.released_at = self._clock.now() if self._clock is not None else 0
        if release and self.on_release is not None:
            self.on_release(self)
        return release

    def __repr__(self) -> str:
        state = "removed" if self.removed else f"openers={self.openers}"
        return f"BlockDevice({self.dev_t >> MINORBITS}:{self.dev_t & ((1 << MINORBITS) - 1)}, " \
               f"gen={self.generation}, {state})"


class DeviceTable:
    """dev_t to device, as ``blkdev_get_no_open`` sees it: a removed dev_t may be re-created, and a lookup
    then finds the new device."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._by_dev_t: dict[int, BlockDevice] = {}
        self._generation = itertools.count(1)

    def get_no_open(self, dev_t: int) -> BlockDevice | None:
        """Look ``dev_t`` up and take a reference, without opening it; None if absent or being removed."""
        with self.lock:
            device = self._by_dev_t.get(dev_t)
            if device is None or not device.get_unless_zero():
                return None
            return device

    def __contains__(self, dev_t: int) -> bool:
        with self.lock:
            return dev_t in self._by_dev_t

    def devices(self) -> list[BlockDevice]:
        with self.lock:
            return list(self._by_dev_t.values())


@dataclass(frozen=True)
class DirtyDomain:
    """Dirty pages and thresholds of one domain (global, or one memcg), in pages."""

    dirty: int
    thresh: int
    bg_thresh: int

    @property
    def freerun(self) -> int:
        """Below this no task is throttled: (thresh + bg_thresh) / 2."""
        return (self.thresh + self.bg_thresh) // 2

    @property
    def over_freerun(self) -> bool:
        return self.dirty > self.freerun

    @property
    def over_background(self) -> bool:
        return self.dirty > self.bg_thresh

    def pos_ratio(self) -> float:
        """The throttling position ratio: 1 at the setpoint halfway between freerun and the limit, a cubic
        around it, 0 at or above the limit (the kernel's ``pos_ratio_polynom``)."""
        limit = max(self.thresh, self.freerun + 1)
        if self.dirty >= limit:
            return 0.0
        setpoint = (self.freerun + limit) / 2
        x = (setpoint - self.dirty) / (limit - setpoint + 1)
        return min(2.0, max(0.0, 1.0 + x * x * x))


@dataclass(frozen=True)
class Throttle:
    """What one ``balance_dirty_pages`` call decided for the task.

    :param pause: jiffies the task sleeps before dirtying again (0 = free run).
    :param recheck: True if the task must call again after the pause before it may dirty (over the limit).
    :param throttled: True if the task was over a freerun ceiling (so the foreign flush was attempted).
    """

    pause: int
    recheck: bool
    throttled: bool


@dataclass
class ModelStats:
    """Model-wide counters (updated under the model's statistics lock)."""

    pages_dirtied: int = 0
    pages_written: int = 0
    pages_discarded: int = 0
    throttle_calls: int = 0
    throttled: int = 0
    foreign_flush_calls: int = 0
    owner_wb_flushes: int = 0
    owner_wb_flush_enoent: int = 0
    owner_wb_flushes_finished: int = 0
    owner_wb_flush_pages: int = 0
    owner_wb_flush_pages_by_label: Counter[str] = field(default_factory=Counter)
    bdev_flushes_queued: int = 0
    bdev_flush_queue_failed: int = 0
    bdev_flushes_run: int = 0
    bdev_flushes_wrote: int = 0
    bdev_flush_pages: int = 0
    bdev_skipped_absent: int = 0
    bdev_skipped_removed: int = 0
    bdev_skipped_closed: int = 0
    bdev_skipped_busy: int = 0
    bdev_stale_flushes: int = 0
    bdev_stale_pages: int = 0
    bdev_flush_cancelled: int = 0
    completions_released: int = 0
    memcgs_freed: int = 0
    devices_released: int = 0
    deferred_device_puts: int = 0
    written_by_reason: Counter[str] = field(default_factory=Counter)

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {}
        for key, value in self.__dict__.items():
            out[key] = dict(value) if isinstance(value, Counter) else value
        return out


WorkqueueFactory = Callable[[], Optional[FlushExecutor]]


def _wb_seq(wb: Writeback) -> int:
    return wb.seq


class WritebackModel:
    """The whole model: one clock, disks, block devices, memcgs, wbs and the chosen foreign mechanism.

    :param mechanism: ``"owner-wb"`` (the kernel today), ``"bdev-devt"`` (the v6 series) or ``"bdev-ref"``
        (the reviewer's alternative); default ``"bdev-devt"``.
    :param clock: where jiffies come from; default a :class:`~pybcache.writeback.jiffies.SimulatedClock` at
        the tunables' HZ.
    :param tunables: the writeback sysctls and HZ; default the kernel's (HZ 250).
    :param dirtyable_memory: bytes of memory that can hold dirty page cache (the global domain's basis), > 0;
        default 7 GiB.
    :param foreign_slots: owner-wb record slots per memcg, 1..64; default 4.
    :param bdev_slots: dev_t slots per memcg for the bdev mechanisms, 1..64; default 4.
    :param workqueue_factory: called once at construction (as ``mem_cgroup_init`` allocates the series'
        workqueue) for the bdev mechanisms; returning None means the allocation failed and the model falls back
        to ``"owner-wb"``. Default: a :class:`~pybcache.writeback.workqueue.SimulatedWorkqueue`.
    :param dirty_ratelimit: the throttled task's base dirty rate in bytes/s, > 0; default 100 MiB/s (the
        kernel's initial estimate; the model does not adapt it).
    """

    def __init__(self, *, mechanism: str = "bdev-devt", clock: Clock | None = None,
                 tunables: WritebackTunables | None = None, dirtyable_memory: int = 7 * GiB,
                 foreign_slots: int = DEFAULT_FOREIGN_SLOTS, bdev_slots: int = DEFAULT_FOREIGN_SLOTS,
                 workqueue_factory: WorkqueueFactory | None = None, dirty_ratelimit: float = 100 * MiB) -> None:
        mechanism = check_choice("mechanism", mechanism, MECHANISMS)
        if clock is not None:
            check_instance("clock", clock, Clock, "a Clock")
        if tunables is None:
            tunables = WritebackTunables(hz=clock.hz) if clock is not None else WritebackTunables()
        check_instance("tunables", tunables, WritebackTunables, "a WritebackTunables")
        if clock is None:
            clock = SimulatedClock(tunables.hz)
        check_instance("clock", clock, Clock, "a Clock")
        if clock.hz != tunables.hz:
            raise ValueError(f"clock.hz ({clock.hz}) must equal tunables.hz ({tunables.hz})")
        dirtyable_memory = check_int("dirtyable_memory", dirtyable_memory, minimum=PAGE_SIZE, maximum=1 << 60)
        foreign_slots = check_int("foreign_slots", foreign_slots, minimum=1, maximum=64)
        bdev_slots = check_int("bdev_slots", bdev_slots, minimum=1, maximum=64)
        if workqueue_factory is not None and not callable(workqueue_factory):
            raise TypeError(f"workqueue_factory must be callable or None, got {type(workqueue_factory).__name__}")
        dirty_ratelimit = check_number("dirty_ratelimit", dirty_ratelimit, minimum=0, exclusive_minimum=True)

        self.requested_mechanism = mechanism
        self.clock = clock
        # the dirty limits' inputs; setting either (property setters) starts a new limits generation
        self._limits_gen = 0
        self._global_limits_cache: tuple[int, int] | None = None
        self._tunables = tunables
        self._dirtyable_pages = dirtyable_memory // PAGE_SIZE
        self.foreign_slots = foreign_slots
        self.bdev_slots = bdev_slots
        self.dirty_ratelimit_pages = dirty_ratelimit / PAGE_SIZE
        self.stats = ModelStats()
        self._stat_lock = threading.Lock()
        self._struct_lock = threading.RLock()
        self._nr_dirty = 0
        self._ino = itertools.count(1)
        self._css_id = itertools.count(1)
        self._bdi_id = itertools.count(1)
        self._wb_seq = itertools.count()
        # Which flushers the per-tick scan visits (:meth:`_flushers_to_scan`), all under ``_flusher_lock``, a
        # leaf lock taken inside a wb's ``lock``. Invariant: a wb whose flusher has work queued, was kicked, is
        # awake or runs a work is in ``_ready``; one whose delayed wake-up is armed is in ``_ready`` or
        # ``_armed``. Any other wb is idle: its :meth:`flusher_next_work` would return None and change nothing.
        self._flusher_lock = threading.Lock()
        self._ready: dict[Writeback, None] = {}
        self._armed: dict[Writeback, int] = {}      # wb -> its wake-up as an offset from _jiffies_base
        self._next_armed: int | None = None         # the earliest offset in _armed, or earlier (never later)
        self._jiffies_base = clock.now()
        self.disks: dict[int, Disk] = {}
        self.memcgs: dict[int, Memcg] = {}
        self.wbs: dict[tuple[int, int], Writeback] = {}
        self.inodes: list[Inode] = []
        self.devices = DeviceTable()
        self.all_devices: list[BlockDevice] = []

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

    # ------------------------------------------------------------------------------------------------
    # construction of entities
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
        check_instance("tunables", tunables, WritebackTunables, "a WritebackTunables")
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
        self._dirtyable_pages = check_int("dirtyable_pages", pages, minimum=1, maximum=(1 << 60) // PAGE_SIZE)
        self._new_limits_generation()

    def _new_limits_generation(self) -> None:
        self._global_limits_cache = None
        self._limits_gen += 1

    def add_disk(self, name: str, bandwidth: float) -> Disk:
        """Add a disk with its bdi.

        :param name: a label.
        :param bandwidth: bytes/s, > 0.
        """
        bandwidth = check_number("bandwidth", bandwidth, minimum=0, exclusive_minimum=True)
        disk = Disk(next(self._bdi_id), str(name), bandwidth)
        with self._struct_lock:
            self.disks[disk.bdi_id] = disk
        return disk

    def _new_memcg(self, name: str, parent: Memcg | None, memory_max: int | None) -> Memcg:
        css_id = next(self._css_id)
        foreign_wb = ForeignWbRecords(self.foreign_slots, on_release=self._completion_released)
        foreign_bdev = (ForeignBdevRecords(self.bdev_slots, hold_reference=self.mechanism == "bdev-ref")
                        if self.bdev_flush_enabled else None)
        memcg = Memcg(css_id, name, parent, memory_max, foreign_wb, foreign_bdev)
        if foreign_bdev is not None:
            for slot in foreign_bdev.slots:
                slot.work = WorkItem(self._make_bdev_work(memcg, slot), name=f"{name}/bdev{slot.index}",
                                     on_cancel=self._make_bdev_cancel(memcg, slot))
        with self._struct_lock:
            self.memcgs[css_id] = memcg
            if parent is not None:
                parent.children.append(memcg)
        return memcg

    def create_memcg(self, name: str, *, parent: Memcg | None = None, memory_max: int | None = None) -> Memcg:
        """Create a memcg under ``parent`` (default root).

        :param name: a label.
        :param parent: an online memcg of this model.
        :param memory_max: ``memory.max`` in bytes (>= one page) bounding its dirty limits, or None (unlimited).
        """
        parent = self.root if parent is None else self._check_memcg("parent", parent)
        if memory_max is not None:
            memory_max = check_int("memory_max", memory_max, minimum=PAGE_SIZE, maximum=1 << 60)
        if not parent.online:
            raise ValueError(f"parent must be online, {parent.name!r} is offline")
        return self._new_memcg(str(name), parent, memory_max)

    def destroy_memcg(self, memcg: Memcg) -> None:
        """Take ``memcg`` offline without waiting for anything it started.

        Pending bdev flush works are cancelled, running ones finish on their own; owner-wb completions drop the
        memcg's reference and are released by whichever flush finishes last; device references held by records
        are dropped. The memcg is freed when its last reference goes. Its dirty pages stay charged to it until
        written (the model does not reparent them).

        :raises ValueError: for the root memcg, an offline memcg, or one with online children.
        """
        self._check_memcg("memcg", memcg)
        if memcg.is_root:
            raise ValueError("memcg must not be the root memcg")
        if not memcg.online:
            raise ValueError(f"memcg {memcg.name!r} is already offline")
        if any(child.online for child in memcg.children):
            raise ValueError(f"memcg {memcg.name!r} has online children")
        memcg.online = False
        released = memcg.foreign_wb.drop_owner()
        del released  # released completions were counted by their callback
        if memcg.foreign_bdev is not None:
            for slot in memcg.foreign_bdev.slots:
                if slot.work is not None and self.workqueue is not None:
                    self.workqueue.cancel(slot.work)
            for device in memcg.foreign_bdev.release_all():
                self._put_device(device)
        self._memcg_put(memcg)

    def create_inode(self, disk: Disk, name: str, *, size: int | None = None, label: str = "file") -> Inode:
        """Create a regular file on ``disk``.

        :param size: bytes (a multiple of nothing in particular; rounded up to pages), or None for a file that
            only grows.
        :param label: the category reports use for its written pages.
        """
        self._check_disk(disk)
        size_pages = None if size is None else -(-check_int("size", size, minimum=1) // PAGE_SIZE)
        inode = Inode(next(self._ino), str(name), disk, kind="file", size_pages=size_pages, label=str(label))
        with self._struct_lock:
            self.inodes.append(inode)
        return inode

    def add_block_device(self, dev_t: int, disk: Disk) -> BlockDevice:
        """Register a block device (a new incarnation if ``dev_t`` was used before) with an empty mapping.

        :raises ValueError: if ``dev_t`` is registered already or is not a valid 32-bit, non-zero dev_t.
        """
        dev_t = check_int("dev_t", dev_t, minimum=1, maximum=(1 << 32) - 1)
        self._check_disk(disk)
        with self.devices.lock:
            if dev_t in self.devices._by_dev_t:
                raise ValueError(f"dev_t {dev_t:#x} is already registered")
            generation = next(self.devices._generation)
            mapping = Inode(next(self._ino), f"bdev:{dev_t >> MINORBITS}:{dev_t & ((1 << MINORBITS) - 1)}#"
                            f"{generation}", disk, kind="bdev", size_pages=None, label="bdev mapping")
            device = BlockDevice(dev_t, disk, generation, mapping)
            device._clock = self.clock
            device.on_release = self._device_released
            mapping.bdev = device
            self.devices._by_dev_t[dev_t] = device
        with self._struct_lock:
            self.inodes.append(mapping)
            self.all_devices.append(device)
        return device

    def remove_block_device(self, dev_t: int) -> BlockDevice:
        """Unregister ``dev_t`` (hot removal, open or not): the device's dirty pages are discarded and the
        table's reference dropped; the device object lives on while references remain.

        :raises ValueError: if ``dev_t`` is not registered.
        """
        dev_t = check_int("dev_t", dev_t, minimum=1, maximum=(1 << 32) - 1)
        with self.devices.lock:
            device = self.devices._by_dev_t.pop(dev_t, None)
            if device is None:
                raise ValueError(f"dev_t {dev_t:#x} is not registered")
            device.removed = True
            device.removed_at = self.clock.now()
        self.discard_pages(device.mapping)
        self._put_device(device)
        return device

    def open_device(self, device: BlockDevice) -> None:
        """Open ``device`` (takes ``open_mutex``, blocking).

        :raises ValueError: if the device was removed.
        """
        self._check_device(device)
        with device.open_mutex:
            if device.removed:
                raise ValueError(f"device {device.dev_t:#x} was removed")
            device.openers += 1

    def close_device(self, device: BlockDevice) -> int:
        """Close ``device``; the last close writes the whole mapping back under ``open_mutex``.

        :returns: pages written by the last close (0 otherwise).
        :raises ValueError: if the device is not open.
        """
        self._check_device(device)
        with device.open_mutex:
            if device.openers <= 0:
                raise ValueError(f"device {device.dev_t:#x} is not open")
            device.openers -= 1
            if device.openers == 0:
                return self.write_pages(device.mapping, _UNLIMITED, reason="last_close")
        return 0

    # ------------------------------------------------------------------------------------------------
    # dirtying and cleaning
    def wb_of(self, memcg: Memcg, disk: Disk, *, create: bool = False) -> Writeback | None:
        """The wb of (memcg, disk); created if ``create`` (at a first dirtying), else only looked up."""
        self._check_memcg("memcg", memcg)
        self._check_disk(disk)
        return self._wb_of(memcg, disk, create=create)

    def _wb_of(self, memcg: Memcg, disk: Disk, *, create: bool = False) -> Writeback | None:
        key = (memcg.css_id, disk.bdi_id)
        with self._struct_lock:
            wb = self.wbs.get(key)
            if wb is None and create:
                wb = Writeback(memcg, disk, self.clock.now(), next(self._wb_seq))
                self.wbs[key] = wb
            return wb

    def dirty_pages(self, inode: Inode, pages: int, memcg: Memcg) -> int:
        """Dirty up to ``pages`` clean pages of ``inode``, charged to ``memcg`` (the folio's memcg).

        The first dirtying attaches the inode to ``memcg``'s wb on the inode's disk. A page whose memcg is not
        the inode's wb's memcg is recorded as foreign in ``memcg``. A fixed-size file never has more dirty
        pages than its size: rewriting a dirty page dirties nothing new.

        :returns: the pages that became dirty.
        """
        self._check_inode(inode)
        pages = check_int("pages", pages, minimum=0, maximum=1 << 40)
        self._check_memcg("memcg", memcg)
        return self._dirty_pages(inode, pages, memcg)

    def _dirty_pages(self, inode: Inode, pages: int, memcg: Memcg) -> int:
        if pages == 0:
            return 0
        now = self.clock.now()
        with inode.lock:
            if inode.size_pages is not None:
                pages = min(pages, inode.size_pages - inode.dirty)
                if pages <= 0:
                    return 0
            if inode.wb is None:
                wb = self._wb_of(memcg, inode.disk, create=True)
                assert wb is not None
                inode.wb = wb
                with wb.lock:
                    wb.inodes.append(inode)
            wb = inode.wb
            if inode.dirty == 0:
                inode.dirtied_when = now
                with wb.lock:
                    if not wb.awake and wb.next_wakeup is None:
                        # the flusher's delayed wake-up is armed when the wb gets dirty inodes
                        self._arm_wakeup(wb, jiffies_add(now, self._tunables.writeback_interval_jiffies))
            if inode._runs and inode._runs[-1][0] is memcg:
                inode._runs[-1][1] += pages
            else:
                inode._runs.append([memcg, pages])
            inode.dirty += pages
            with self._stat_lock:
                memcg.nr_dirty += pages
                self._nr_dirty += pages
                self.stats.pages_dirtied += pages
            foreign = memcg is not wb.memcg
            evicted: BlockDevice | None = None
            if foreign:
                evicted = self._track_foreign(inode, memcg, wb, now)
        if evicted is not None:
            self._put_device(evicted, deferred=True)
        return pages

    def _track_foreign(self, inode: Inode, memcg: Memcg, wb: Writeback, now: int) -> BlockDevice | None:
        """Record a foreign dirtying in ``memcg`` (inode lock held)."""
        if inode.kind == "bdev" and memcg.foreign_bdev is not None and inode.bdev is not None:
            device = inode.bdev
            _, evicted = memcg.foreign_bdev.track(device.dev_t, now, self._tunables,
                                                  device=device if memcg.foreign_bdev.hold_reference else None,
                                                  generation=device.generation)
            return evicted
        memcg.foreign_wb.track(inode.disk.bdi_id, wb.memcg.css_id, now, self._tunables)
        return None

    def write_pages(self, inode: Inode, pages: int, *, reason: str = "writeback") -> int:
        """Write back (clean) up to ``pages`` of ``inode``'s dirty pages, oldest first.

        :returns: the pages written.
        """
        self._check_inode(inode)
        pages = check_int("pages", pages, minimum=0)
        if not isinstance(reason, str):
            raise TypeError(f"reason must be a str, got {type(reason).__name__}")
        return self._write_pages(inode, pages, reason)

    def _write_pages(self, inode: Inode, pages: int, reason: str) -> int:
        if pages == 0:
            return 0
        with inode.lock:
            pages = min(pages, inode.dirty)
            if pages == 0:
                return 0
            uncharged = self._remove_runs(inode, pages)
            inode.written += pages
            inode.written_by_reason[reason] += pages
            with self._stat_lock:
                for memcg, count in uncharged:
                    memcg.nr_dirty -= count
                self._nr_dirty -= pages
                self.stats.pages_written += pages
                self.stats.written_by_reason[reason] += pages
        return pages

    def discard_pages(self, inode: Inode) -> int:
        """Drop every dirty page of ``inode`` without writing it (a removed device's mapping)."""
        self._check_inode(inode)
        with inode.lock:
            pages = inode.dirty
            if pages == 0:
                return 0
            uncharged = self._remove_runs(inode, pages)
            inode.discarded += pages
            with self._stat_lock:
                for memcg, count in uncharged:
                    memcg.nr_dirty -= count
                self._nr_dirty -= pages
                self.stats.pages_discarded += pages
        return pages

    @staticmethod
    def _remove_runs(inode: Inode, pages: int) -> list[tuple[Memcg, int]]:
        out: list[tuple[Memcg, int]] = []
        left = pages
        runs = inode._runs
        while left:
            run = runs[0]
            take = min(left, run[1])
            out.append((run[0], take))
            run[1] -= take
            left -= take
            if run[1] == 0:
                runs.popleft()
        inode.dirty -= pages
        return out

    # ------------------------------------------------------------------------------------------------
    # dirty limits and throttling
    def hierarchical_dirty(self, memcg: Memcg) -> int:
        """Dirty pages charged to ``memcg`` and its descendants (the root's is the whole model's)."""
        self._check_memcg("memcg", memcg)
        return self._hierarchical_dirty(memcg)

    def _hierarchical_dirty(self, memcg: Memcg) -> int:
        if memcg.parent is None:
            return self._nr_dirty
        with self._stat_lock:
            if not memcg.children:
                return memcg.nr_dirty
            return sum(m.nr_dirty for m in memcg.subtree())

    def _dirty_limits(self, basis: int) -> tuple[int, int]:
        """(thresh, bg_thresh) in pages for a domain of ``basis`` dirtyable pages."""
        t = self._tunables
        thresh = t.dirty_ratio * basis // 100
        bg = t.dirty_background_ratio * basis // 100
        if bg >= thresh:
            bg = thresh // 2
        return thresh, bg

    def _global_limits(self) -> tuple[int, int]:
        """The global (thresh, bg_thresh), computed once per limits generation (one store: a racing reader
        recomputes the same value)."""
        limits = self._global_limits_cache
        if limits is None:
            limits = self._global_limits_cache = self._dirty_limits(self._dirtyable_pages)
        return limits

    def _memcg_limits(self, memcg: Memcg) -> tuple[int, int]:
        """``memcg``'s (thresh, bg_thresh), recomputed only when the limits generation or its memory_max changed."""
        cached = memcg._limits
        if cached is None or cached[0] != self._limits_gen or cached[1] != memcg.memory_max:
            basis = self._dirtyable_pages
            if memcg.memory_max is not None:
                basis = min(basis, memcg.memory_max // PAGE_SIZE)
            cached = memcg._limits = (self._limits_gen, memcg.memory_max, *self._dirty_limits(basis))
        return cached[2], cached[3]

    def global_domain(self) -> DirtyDomain:
        """The global domain: every dirty page against ratios of the dirtyable memory."""
        thresh, bg = self._global_limits()
        return DirtyDomain(self._nr_dirty, thresh, bg)

    def memcg_domain(self, memcg: Memcg) -> DirtyDomain | None:
        """The memcg's own domain (None for root): its hierarchical dirty pages against ratios of
        ``min(memory.max, dirtyable memory)``. The kernel uses the memcg's file pages plus headroom, which is
        memory.max for a memcg whose memory is page cache; this model uses memory.max directly."""
        self._check_memcg("memcg", memcg)
        return self._memcg_domain(memcg)

    def _memcg_domain(self, memcg: Memcg) -> DirtyDomain | None:
        if memcg.parent is None:
            return None
        thresh, bg = self._memcg_limits(memcg)
        return DirtyDomain(self._hierarchical_dirty(memcg), thresh, bg)

    def over_background_thresh(self, wb: Writeback) -> bool:
        """Should ``wb`` keep doing background writeback (global or its memcg's domain over bg_thresh)?"""
        self._check_wb(wb)
        return self._over_background_thresh(wb)

    def _over_background_thresh(self, wb: Writeback) -> bool:
        if self._nr_dirty > self._global_limits()[1]:
            return True
        memcg = wb.memcg
        return memcg.parent is not None and self._hierarchical_dirty(memcg) > self._memcg_limits(memcg)[1]

    def balance_dirty_pages(self, wb: Writeback, pages_dirtied: int) -> Throttle:
        """One throttling check for a task that dirtied ``pages_dirtied`` pages against ``wb``.

        Below both freerun ceilings the task runs free (background writeback is kicked if over a background
        threshold). Above: kick background writeback on ``wb``, attempt the foreign flush for ``wb``'s memcg
        (every such call), then pause for ``pages_dirtied / (ratelimit x pos_ratio)``, at most ``MAX_PAUSE``;
        at or over the limit the pause is ``MAX_PAUSE`` and the task must check again before dirtying.
        """
        self._check_wb(wb)
        pages_dirtied = check_int("pages_dirtied", pages_dirtied, minimum=0)
        return self._balance_dirty_pages(wb, pages_dirtied)

    def _balance_dirty_pages(self, wb: Writeback, pages_dirtied: int) -> Throttle:
        gdom = self.global_domain()
        mdom = self._memcg_domain(wb.memcg)
        with self._stat_lock:
            self.stats.throttle_calls += 1
        if not gdom.over_freerun and (mdom is None or not mdom.over_freerun):
            if gdom.over_background or (mdom is not None and mdom.over_background):
                self._kick_background(wb)
            return Throttle(0, False, False)
        with self._stat_lock:
            self.stats.throttled += 1
        self._kick_background(wb)
        self._flush_foreign(wb)
        pos = gdom.pos_ratio()
        if mdom is not None:
            pos = min(pos, mdom.pos_ratio())
        tunables = self._tunables
        max_pause = tunables.max_pause
        if pos <= 0.0:
            return Throttle(max_pause, True, True)
        rate = self.dirty_ratelimit_pages * pos
        pause = min(max_pause, math.ceil(pages_dirtied * tunables.hz / rate)) if pages_dirtied else 0
        return Throttle(pause, False, True)

    def _kick_background(self, wb: Writeback) -> None:
        """Ask ``wb``'s flusher for background writeback (``wb_start_background_writeback``)."""
        with wb.lock:
            wb.background_kicked = True
            self._flusher_ready(wb)

    # ------------------------------------------------------------------------------------------------
    # foreign flushing
    def flush_foreign(self, wb: Writeback) -> int:
        """Flush what ``wb``'s memcg recorded as foreign (``mem_cgroup_flush_foreign``).

        Owner-wb records: each recent, idle record queues a whole-wb flush on its target. bdev records (if the
        mechanism keeps them): each recent slot without work in flight queues its flush work.

        :returns: how many flushes were issued.
        """
        self._check_wb(wb)
        return self._flush_foreign(wb)

    def _flush_foreign(self, wb: Writeback) -> int:
        memcg = wb.memcg
        now = self.clock.now()
        issued = 0
        with self._stat_lock:
            self.stats.foreign_flush_calls += 1
        for wb_slot in memcg.foreign_wb.take_due(now, self.tunables):
            if self.cgroup_writeback_by_id(wb_slot.bdi_id, wb_slot.memcg_id, done=wb_slot.done,
                                           issuer=memcg.name) == 0:
                issued += 1
        records = memcg.foreign_bdev
        if records is not None and self.workqueue is not None:
            for bdev_slot in records.take_due(now, self.tunables):
                assert bdev_slot.work is not None
                if not self._memcg_tryget(memcg):
                    # the memcg died since take_due: its records let go of their devices here
                    self._abort_bdev_flush(records, bdev_slot)
                    continue
                if self.workqueue.queue(bdev_slot.work):
                    issued += 1
                    with self._stat_lock:
                        self.stats.bdev_flushes_queued += 1
                else:
                    self._abort_bdev_flush(records, bdev_slot)
                    self._memcg_put(memcg)
                    with self._stat_lock:
                        self.stats.bdev_flush_queue_failed += 1
        return issued

    def _abort_bdev_flush(self, records: ForeignBdevRecords, slot: BdevSlot) -> None:
        """A slot taken by ``take_due`` will not get its work: idle it, and put the device it let go of."""
        device = records.abort(slot)
        if device is not None:
            self._put_device(device)

    def cgroup_writeback_by_id(self, bdi_id: int, memcg_id: int, *, done: WbCompletion | None = None,
                               issuer: str = "") -> int:
        """Queue a foreign flush of the wb (bdi_id, memcg_id): 1.25 x that memcg's hierarchical dirty pages.

        Looks the wb up only (never creates one). :returns: 0, or ``ENOENT`` if the bdi, the memcg (or it is
        offline) or its wb does not exist.
        """
        bdi_id = check_int("bdi_id", bdi_id, minimum=0)
        memcg_id = check_int("memcg_id", memcg_id, minimum=0)
        if done is not None:
            check_instance("done", done, WbCompletion, "a WbCompletion or None")
        disk = self.disks.get(bdi_id)
        memcg = self.memcgs.get(memcg_id)
        wb = None
        if disk is not None and memcg is not None and memcg.online:
            wb = self.wb_of(memcg, disk)
        if wb is None:
            with self._stat_lock:
                self.stats.owner_wb_flush_enoent += 1
            return ENOENT
        nr_pages = self._hierarchical_dirty(wb.memcg) * 10 // 8
        work = WritebackWork("foreign_flush", nr_pages, "normal", done, issuer)
        self.wb_queue_work(wb, work)
        with self._stat_lock:
            self.stats.owner_wb_flushes += 1
        return 0

    def wb_queue_work(self, wb: Writeback, work: WritebackWork) -> None:
        """Queue ``work`` on ``wb``'s flusher; its completion (if any) counts it until it finishes."""
        if work.done is not None:
            work.done.get()
        with wb.lock:
            if wb.registered:
                wb.works.append(work)
                self._flusher_ready(wb)
                return
        self._finish_work(wb, work)

    def _make_bdev_work(self, memcg: Memcg, slot: BdevSlot) -> Callable[[], Generator[WriteRequest, int, None]]:
        def work() -> Generator[WriteRequest, int, None]:
            return self._bdev_flush(memcg, slot)
        return work

    def _make_bdev_cancel(self, memcg: Memcg, slot: BdevSlot) -> Callable[[], None]:
        def cancelled() -> None:
            with self._stat_lock:
                self.stats.bdev_flush_cancelled += 1
            assert memcg.foreign_bdev is not None
            device = memcg.foreign_bdev.complete(slot)
            if device is not None:
                self._put_device(device)
            self._memcg_put(memcg)
        return cancelled

    def _bdev_flush(self, memcg: Memcg, slot: BdevSlot) -> Generator[WriteRequest, int, None]:
        """The flush work of one bdev slot: find the device, skip it if absent, closed or busy, else write
        only its mapping. A dev_t that was removed and re-created finds the new device (counted as stale)."""
        records = memcg.foreign_bdev
        assert records is not None
        device: BlockDevice | None = None
        held_lookup = False
        try:
            with self._stat_lock:
                self.stats.bdev_flushes_run += 1
            if records.hold_reference:
                device = slot.device
                if device is None or device.removed:
                    with self._stat_lock:
                        self.stats.bdev_skipped_removed += 1
                    return
            else:
                device = self.devices.get_no_open(slot.dev_t)
                if device is None:
                    with self._stat_lock:
                        self.stats.bdev_skipped_absent += 1
                    return
                held_lookup = True
            if device.openers == 0:
                with self._stat_lock:
                    self.stats.bdev_skipped_closed += 1
                return
            if not device.open_mutex.acquire(blocking=False):
                with self._stat_lock:
                    self.stats.bdev_skipped_busy += 1
                return
            try:
                if device.openers == 0:
                    with self._stat_lock:
                        self.stats.bdev_skipped_closed += 1
                    return
                stale = device.generation != slot.generation
                mapping = device.mapping

                def write(n: int) -> int:
                    return self._write_pages(mapping, check_int("n", n, minimum=0), "bdev_flush")

                def available() -> int:
                    return mapping.dirty

                written = yield WriteRequest(target=mapping.name, nr_pages=mapping.dirty, write=write,
                                             io_class="normal", available=available)
                with self._stat_lock:
                    self.stats.bdev_flush_pages += written
                    if written:
                        self.stats.bdev_flushes_wrote += 1
                    if stale:
                        self.stats.bdev_stale_flushes += 1
                        self.stats.bdev_stale_pages += written
            finally:
                device.open_mutex.release()
        finally:
            if held_lookup and device is not None:
                self._put_device(device)
            evicted = records.complete(slot)
            if evicted is not None:
                self._put_device(evicted)
            self._memcg_put(memcg)

    # ------------------------------------------------------------------------------------------------
    # the flusher: works, chunks, bandwidth
    def flusher_next_work(self, wb: Writeback) -> WritebackWork | None:
        """Give ``wb``'s flusher its next work, if it is idle and has something to do.

        The flusher sleeps until a work is queued, background writeback is kicked, or its delayed wake-up
        (``dirty_writeback_interval`` after it last went to sleep with dirty inodes) fires. Once awake it runs
        the queued works, then checks once for periodic writeback (if the interval has passed since the last
        one and some inode has expired) and once for background writeback (if over a background threshold),
        then sleeps again. So periodic writeback of a file that is being rewritten runs one interval apart,
        not back to back.
        """
        self._check_wb(wb)
        return self._flusher_next_work(wb)

    def _flusher_next_work(self, wb: Writeback) -> WritebackWork | None:
        now = self.clock.now()
        with wb.lock:
            work = self._flusher_pass(wb, now)
            idle = work is None and not wb.awake and not wb.works and not wb.background_kicked
            with self._flusher_lock:
                if idle:
                    self._ready.pop(wb, None)
                else:
                    self._ready[wb] = None
        return work

    def _flusher_pass(self, wb: Writeback, now: int) -> WritebackWork | None:
        """The body of :meth:`flusher_next_work` (``wb.lock`` held)."""
        if wb.active is not None:
            return wb.active
        if not wb.awake:
            due = wb.next_wakeup is not None and time_after_eq(now, wb.next_wakeup)
            if not (wb.works or wb.background_kicked or due):
                return None
            wb.awake = True
            if wb.next_wakeup is not None:
                wb.next_wakeup = None
                with self._flusher_lock:
                    self._armed.pop(wb, None)
            wb._checked_periodic = wb._checked_background = False
        work = wb.works.popleft() if wb.works else None
        if work is None and not wb._checked_periodic:
            wb._checked_periodic = True
            interval = self._tunables.writeback_interval_jiffies
            if time_after_eq(now, jiffies_add(wb.last_old_flush, interval)):
                wb.last_old_flush = now
                if self._has_expired(wb, now):
                    work = WritebackWork("periodic", max(1, self._nr_dirty), "background")
        if work is None and not wb._checked_background:
            wb._checked_background = True
            wb.background_kicked = False
            if self._over_background_thresh(wb) and self._wb_dirty(wb) > 0:
                work = WritebackWork("background", _UNLIMITED, "background")
        if work is None:
            if wb.works:
                # queued while checking: run them in a fresh pass (the next tick)
                wb._checked_periodic = wb._checked_background = False
                return None
            wb.awake = False
            if self._wb_dirty(wb) > 0:
                self._arm_wakeup(wb, jiffies_add(now, self._tunables.writeback_interval_jiffies))
            return None
        work.dirtied_before = now
        wb.active = work
        wb._bw_stamp = now
        wb._bw_written = 0
        return work

    def _flusher_ready(self, wb: Writeback) -> None:
        """``wb``'s flusher has something to do (work queued or background kicked); ``wb.lock`` held."""
        with self._flusher_lock:
            self._ready[wb] = None

    def _arm_wakeup(self, wb: Writeback, at: int) -> None:
        """Arm ``wb``'s delayed wake-up for jiffies ``at`` (``wb_wakeup_delayed``); ``wb.lock`` held."""
        wb.next_wakeup = at
        offset = (at - self._jiffies_base) & JIFFIES_MASK
        with self._flusher_lock:
            self._armed[wb] = offset
            if self._next_armed is None or offset < self._next_armed:
                self._next_armed = offset

    def _flushers_to_scan(self) -> list[Writeback]:
        """The wbs whose flusher may have something to do now, in creation order: those in ``_ready`` and
        those whose delayed wake-up is due. Every other wb is idle (see ``_ready``), so a per-tick scan that
        visits only these finds what a scan of every wb would."""
        with self._flusher_lock:
            nxt = self._next_armed
            if nxt is not None:
                now_offset = (self.clock.now() - self._jiffies_base) & JIFFIES_MASK
                if now_offset >= nxt:
                    for wb, offset in list(self._armed.items()):
                        if offset <= now_offset:
                            del self._armed[wb]
                            self._ready[wb] = None
                    self._next_armed = min(self._armed.values(), default=None)
            return sorted(self._ready, key=_wb_seq)

    def _has_expired(self, wb: Writeback, now: int) -> bool:
        cutoff = jiffies_add(now, -self._tunables.expire_jiffies)
        return any(inode.dirty and time_before_eq(inode.dirtied_when, cutoff) for inode in wb.inodes)

    @staticmethod
    def _wb_dirty(wb: Writeback) -> int:
        return sum(inode.dirty for inode in wb.inodes)

    def _eligible(self, work: WritebackWork, inode: Inode, now: int) -> bool:
        if inode.dirty == 0 or inode.ino in work.retired:
            return False
        if work.reason == "periodic":
            return time_before_eq(inode.dirtied_when, jiffies_add(now, -self._tunables.expire_jiffies))
        if work.reason == "background":
            return True
        assert work.dirtied_before is not None
        return time_before_eq(inode.dirtied_when, work.dirtied_before)

    def writeback_demand(self, wb: Writeback) -> int:
        """Pages ``wb``'s active work could write now (0 finishes it at the next :meth:`writeback_run`)."""
        self._check_wb(wb)
        return self._writeback_demand(wb)

    def _writeback_demand(self, wb: Writeback) -> int:
        work = wb.active
        if work is None or work.remaining <= 0:
            return 0
        if work.reason in ("periodic", "background") and wb.works:
            return 0  # periodic and background writeback yield to queued works
        if work.reason == "background" and not self._over_background_thresh(wb):
            return 0
        now = self.clock.now()
        avail = sum(inode.dirty for inode in wb.inodes if self._eligible(work, inode, now))
        return min(avail, work.remaining)

    def _chunk_pages(self, wb: Writeback, work: WritebackWork) -> int:
        """Pages written from one inode before moving to the next: half a second of the wb's bandwidth or an
        eighth of the dirty limit, rounded down to 4 MiB after adding 4 MiB (``writeback_chunk_size``)."""
        if work.reason == "sync":
            return _UNLIMITED
        pages = min(int(wb.avg_write_bandwidth / 2), self._global_limits()[0] // _DIRTY_SCOPE, work.remaining)
        return (pages + _MIN_WRITEBACK_PAGES) // _MIN_WRITEBACK_PAGES * _MIN_WRITEBACK_PAGES

    def writeback_run(self, wb: Writeback, max_pages: int) -> int:
        """Let ``wb``'s active work write up to ``max_pages``, round-robin over its eligible inodes a chunk
        at a time. An inode that runs out of dirty pages before its chunk is used up is done for this work
        (a redirtied inode waits for the next work); one that uses its whole chunk stays in the rotation.
        Finishes the work when it has nothing left to write.

        :returns: pages written.
        """
        self._check_wb(wb)
        max_pages = check_int("max_pages", max_pages, minimum=0)
        return self._writeback_run(wb, max_pages)

    def _writeback_run(self, wb: Writeback, max_pages: int) -> int:
        work = wb.active
        if work is None:
            return 0
        now = self.clock.now()
        total = 0
        if self._writeback_demand(wb) == 0:
            self._finish_active(wb)
            return 0
        while total < max_pages and work.remaining > 0:
            inode = work.cursor
            if inode is None or work.chunk_left <= 0 or not self._eligible(work, inode, now):
                inode = self._next_inode(wb, work, now)
                if inode is None:
                    break
                work.cursor = inode
                work.chunk_left = self._chunk_pages(wb, work)
            want = min(max_pages - total, work.chunk_left, work.remaining)
            written = self._write_pages(inode, want, work.reason)
            total += written
            work.remaining -= written
            work.chunk_left -= written
            work.written += written
            work.written_by_label[inode.label] += written
            if work.reason == "foreign_flush" and written:
                with self._stat_lock:
                    self.stats.owner_wb_flush_pages += written
                    self.stats.owner_wb_flush_pages_by_label[inode.label] += written
            if written < want:
                # the inode ran dry inside its chunk: done for this work
                work.retired.add(inode.ino)
                work.cursor = None
            elif work.chunk_left <= 0:
                work.cursor = None
        with wb.lock:
            wb.pages_written += total
            wb._bw_written += total
            self._update_bandwidth(wb, now)
        if work.remaining <= 0 or self._writeback_demand(wb) == 0:
            self._finish_active(wb)
        return total

    def _next_inode(self, wb: Writeback, work: WritebackWork, now: int) -> Inode | None:
        inodes = wb.inodes
        if not inodes:
            return None
        n = len(inodes)
        start = work.last_index + 1
        for k in range(n):
            idx = (start + k) % n
            inode = inodes[idx]
            if self._eligible(work, inode, now):
                work.last_index = idx
                return inode
        return None

    def _update_bandwidth(self, wb: Writeback, now: int) -> None:
        """Fold the pages written since the sample began into ``avg_write_bandwidth`` (wb lock held)."""
        if wb._bw_stamp is None:
            wb._bw_stamp = now
            return
        elapsed = (now - wb._bw_stamp) & JIFFIES_MASK
        if elapsed < self._tunables.bandwidth_interval:
            return
        hz = self._tunables.hz
        bw = wb._bw_written * hz / elapsed
        period = 1 << max(0, (3 * hz - 1).bit_length())
        if elapsed >= period:
            wb.avg_write_bandwidth = bw
        else:
            wb.avg_write_bandwidth = (wb.avg_write_bandwidth * (period - elapsed) + bw * elapsed) / period
        wb._bw_stamp = now
        wb._bw_written = 0

    def _finish_active(self, wb: Writeback) -> None:
        with wb.lock:
            work = wb.active
            wb.active = None
        if work is not None:
            self._finish_work(wb, work)

    def _finish_work(self, wb: Writeback, work: WritebackWork) -> None:
        work.finished = True
        if work.reason == "foreign_flush":
            with self._stat_lock:
                self.stats.owner_wb_flushes_finished += 1
        if work.done is not None:
            work.done.put()

    def run_writeback_now(self, wb: Writeback, *, max_works: int = 1 << 20) -> int:
        """Run ``wb``'s queued works to completion at once (no device time); returns pages written."""
        self._check_wb(wb)
        max_works = check_int("max_works", max_works, minimum=0)
        total = 0
        for _ in range(max_works):
            with wb.lock:
                if wb.active is None and not wb.works:
                    break
                if wb.active is None:
                    work = wb.works.popleft()
                    work.dirtied_before = self.clock.now()
                    wb.active = work
            written = self._writeback_run(wb, _UNLIMITED)
            total += written
            if wb.active is not None and written == 0:
                self._finish_active(wb)
        return total

    def sync_all(self) -> int:
        """Write every dirty page at once (the final ``sync``); returns pages written."""
        total = 0
        for inode in list(self.inodes):
            total += self.write_pages(inode, _UNLIMITED, reason="sync")
        return total

    # ------------------------------------------------------------------------------------------------
    # references and lifetimes
    def _memcg_tryget(self, memcg: Memcg) -> bool:
        """Take a reference unless the memcg was already freed (``css_tryget``)."""
        with self._stat_lock:
            if memcg._refs <= 0:
                return False
            memcg._refs += 1
            return True

    def _memcg_put(self, memcg: Memcg) -> None:
        with self._stat_lock:
            if memcg._refs <= 0:
                raise RuntimeError(f"memcg {memcg.name!r} freed twice")
            memcg._refs -= 1
            if memcg._refs == 0:
                memcg.freed = True
                self.stats.memcgs_freed += 1

    def _completion_released(self) -> None:
        with self._stat_lock:
            self.stats.completions_released += 1

    def _device_released(self, device: BlockDevice) -> None:
        with self._stat_lock:
            self.stats.devices_released += 1

    def _put_device(self, device: BlockDevice, *, deferred: bool = False) -> None:
        if deferred:
            with self._stat_lock:
                self.stats.deferred_device_puts += 1
        device.put()

    # ------------------------------------------------------------------------------------------------
    # checks
    def _check_memcg(self, name: str, memcg: object) -> Memcg:
        check_instance(name, memcg, Memcg, "a Memcg")
        assert isinstance(memcg, Memcg)
        if self.memcgs.get(memcg.css_id) is not memcg:
            raise ValueError(f"{name} must be a memcg of this model")
        return memcg

    def _check_disk(self, disk: object) -> Disk:
        check_instance("disk", disk, Disk, "a Disk")
        assert isinstance(disk, Disk)
        if self.disks.get(disk.bdi_id) is not disk:
            raise ValueError("disk must be a disk of this model")
        return disk

    def _check_inode(self, inode: object, name: str = "inode") -> Inode:
        check_instance(name, inode, Inode, "an Inode")
        assert isinstance(inode, Inode)
        if self.disks.get(inode.disk.bdi_id) is not inode.disk:  # disks are never removed
            raise ValueError(f"{name} must be an inode of this model")
        return inode

    def _check_device(self, device: object) -> BlockDevice:
        check_instance("device", device, BlockDevice, "a BlockDevice")
        assert isinstance(device, BlockDevice)
        if self.disks.get(device.disk.bdi_id) is not device.disk:
            raise ValueError("device must be a block device of this model")
        return device

    def _check_wb(self, wb: object) -> Writeback:
        if type(wb) is Writeback and self.wbs.get((wb.memcg.css_id, wb.disk.bdi_id)) is wb:
            return wb  # the common case first: this runs on the flusher's every tick
        check_instance("wb", wb, Writeback, "a Writeback")
        assert isinstance(wb, Writeback)
        if self.wbs.get((wb.memcg.css_id, wb.disk.bdi_id)) is not wb:  # wbs are never removed
            raise ValueError("wb must be a wb of this model")
        return wb

    def shutdown(self, *, drain: bool = True, timeout: float | None = None) -> int:
        """Shut the flush workqueue down (drain or cancel); returns how many works were cancelled.

        :param timeout: seconds the workqueue's shutdown may take at most (see its ``shutdown``), or None.
        """
        check_bool("drain", drain)
        if timeout is not None:
            timeout = check_number("timeout", timeout, minimum=0)
        if self.workqueue is None:
            return 0
        return int(self.workqueue.shutdown(drain=drain, timeout=timeout))
