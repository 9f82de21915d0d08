"""The memcg writeback model: disks, block devices, inodes, memcgs, writeback owners and dirty throttling.

The model keeps the kernel's ownership rules (docs/design.md, "The writeback model";
in Linux 6.12: block/bdev.c ``bd_init_fs_context``, fs/fs-writeback.c ``__inode_attach_wb``, mm/memcontrol.c
``mem_cgroup_track_foreign_dirty_slowpath`` and ``mem_cgroup_flush_foreign``):

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

Module map (each module's docstring names the kernel functions it models): :mod:`.entities` (the objects),
:mod:`.memcontrol` (per-memcg foreign records, mm/memcontrol.c), :mod:`.memcg_writeback` (what a memcg does
with them, mm/memcontrol.c), :mod:`.page_writeback` (dirty accounting and throttling, mm/page-writeback.c),
:mod:`.fs_writeback` (the flusher, fs/fs-writeback.c), :mod:`.bdev_flush` (block devices and the series'
flush works, block/bdev.c); this module is the facade that composes them and checks every argument of every
public method, once.

Thread safety: every public method may be called from any thread. Lock order: device table, a device's
``open_mutex``, an inode's lock, a wb's lock, a record set's lock, the statistics lock; the flusher-scan lock is a
leaf (nothing is taken while it is held); no lock is held while calling into a workqueue except the
workqueue's own.

Arguments are checked at the public methods only; the simulation's tick loop calls the unchecked ``_``
versions with entities checked when its workloads were built.
"""
from __future__ import annotations

from ._base import ModelBase, WorkqueueFactory
from ..validate import check_bool, check_callable, check_choice, check_instance, check_int, check_number
from .bdev_flush import BdevFlush
from .entities import (ENOENT, GiB, KiB, MECHANISMS, MINORBITS, MiB, PAGE_SIZE, BlockDevice, DeviceTable, Disk,
                       Inode, Memcg, ModelStats, Writeback, WritebackWork, mkdev)
from .fs_writeback import FsWriteback
from .jiffies import Clock, SimulatedClock, WritebackTunables
from .memcg_writeback import MemcgWriteback
from .memcontrol import DEFAULT_FOREIGN_SLOTS, WbCompletion
from .page_writeback import DirtyDomain, PageWriteback, Throttle

__all__ = ["PAGE_SIZE", "KiB", "MiB", "GiB", "MECHANISMS", "MINORBITS", "mkdev", "Disk", "Memcg", "Inode",
           "Writeback", "WritebackWork", "BlockDevice", "DeviceTable", "DirtyDomain", "Throttle", "ModelStats",
           "WritebackModel", "ENOENT", "WorkqueueFactory"]


class WritebackModel(MemcgWriteback, PageWriteback, FsWriteback, BdevFlush, ModelBase):
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
        mechanism = check_choice(mechanism, "mechanism", MECHANISMS)
        if clock is not None:
            check_instance(clock, "clock", Clock, "a Clock")
        if tunables is None:
            tunables = WritebackTunables(hz=clock.hz) if clock is not None else WritebackTunables()
        check_instance(tunables, "tunables", WritebackTunables, "a WritebackTunables")
        if clock is None:
            clock = SimulatedClock(tunables.hz)
        check_instance(clock, "clock", Clock, "a Clock")
        if clock.hz != tunables.hz:
            raise ValueError(f"clock.hz ({clock.hz}) must equal tunables.hz ({tunables.hz})")
        dirtyable_memory = check_int(dirtyable_memory, "dirtyable_memory", PAGE_SIZE, 1 << 60)
        foreign_slots = check_int(foreign_slots, "foreign_slots", 1, 64)
        bdev_slots = check_int(bdev_slots, "bdev_slots", 1, 64)
        check_callable(workqueue_factory, "workqueue_factory", allow_none=True)
        dirty_ratelimit = check_number(dirty_ratelimit, "dirty_ratelimit", 0, open_low=True)

        super().__init__(mechanism=mechanism, clock=clock, tunables=tunables, dirtyable_memory=dirtyable_memory,
                         foreign_slots=foreign_slots, bdev_slots=bdev_slots, workqueue_factory=workqueue_factory,
                         dirty_ratelimit=dirty_ratelimit)

    # ------------------------------------------------------------------------------------------------
    # entities
    def add_disk(self, name: str, bandwidth: float) -> Disk:
        """Add a disk with its bdi.

        :param name: a label.
        :param bandwidth: bytes/s, > 0.
        """
        bandwidth = check_number(bandwidth, "bandwidth", 0, open_low=True)
        disk = Disk(next(self._bdi_id), str(name), bandwidth)
        with self._struct_lock:
            self.disks[disk.bdi_id] = disk
        return disk

    def create_memcg(self, name: str, *, parent: Memcg | None = None, memory_max: int | None = None) -> Memcg:
        """Create a memcg under ``parent`` (default root).

        :param name: a label.
        :param parent: an online memcg of this model.
        :param memory_max: ``memory.max`` in bytes (>= one page) bounding its dirty limits, or None (unlimited).
        """
        parent = self.root if parent is None else self._check_memcg("parent", parent)
        if memory_max is not None:
            memory_max = check_int(memory_max, "memory_max", PAGE_SIZE, 1 << 60)
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
        self._destroy_memcg(memcg)

    def create_inode(self, disk: Disk, name: str, *, size: int | None = None, label: str = "file") -> Inode:
        """Create a regular file on ``disk``.

        :param size: bytes (a multiple of nothing in particular; rounded up to pages), or None for a file that
            only grows.
        :param label: the category reports use for its written pages.
        """
        self._check_disk(disk)
        size_pages = None if size is None else -(-check_int(size, "size", 1) // PAGE_SIZE)
        inode = Inode(next(self._ino), str(name), disk, kind="file", size_pages=size_pages, label=str(label))
        with self._struct_lock:
            self.inodes.append(inode)
        return inode

    def add_block_device(self, dev_t: int, disk: Disk) -> BlockDevice:
        """Register a block device (a new incarnation if ``dev_t`` was used before) with an empty mapping.

        :raises ValueError: if ``dev_t`` is registered already or is not a valid 32-bit, non-zero dev_t.
        """
        dev_t = check_int(dev_t, "dev_t", 1, (1 << 32) - 1)
        self._check_disk(disk)
        return self._add_block_device(dev_t, disk)

    def remove_block_device(self, dev_t: int) -> BlockDevice:
        """Unregister ``dev_t`` (hot removal, open or not): the device's dirty pages are discarded and the
        table's reference dropped; the device object lives on while references remain.

        :raises ValueError: if ``dev_t`` is not registered.
        """
        dev_t = check_int(dev_t, "dev_t", 1, (1 << 32) - 1)
        return self._remove_block_device(dev_t)

    def open_device(self, device: BlockDevice) -> None:
        """Open ``device`` (takes ``open_mutex``, blocking).

        :raises ValueError: if the device was removed.
        """
        self._check_device(device)
        self._open_device(device)

    def close_device(self, device: BlockDevice) -> int:
        """Close ``device``; the last close writes the whole mapping back under ``open_mutex``.

        :returns: pages written by the last close (0 otherwise).
        :raises ValueError: if the device is not open.
        """
        self._check_device(device)
        return self._close_device(device)

    # ------------------------------------------------------------------------------------------------
    # dirtying and cleaning (page_writeback)
    def wb_of(self, memcg: Memcg, disk: Disk, *, create: bool = False) -> Writeback | None:
        """The wb of (memcg, disk); created if ``create`` (at a first dirtying), else only looked up."""
        self._check_memcg("memcg", memcg)
        self._check_disk(disk)
        return self._wb_of(memcg, disk, create=create)

    def dirty_pages(self, inode: Inode, pages: int, memcg: Memcg) -> int:
        """Dirty up to ``pages`` clean pages of ``inode``, charged to ``memcg`` (the folio's memcg).

        The first dirtying attaches the inode to ``memcg``'s wb on the inode's disk. A page whose memcg is not
        the inode's wb's memcg is recorded as foreign in ``memcg``. A fixed-size file never has more dirty
        pages than its size: rewriting a dirty page dirties nothing new.

        :returns: the pages that became dirty.
        """
        self._check_inode(inode)
        pages = check_int(pages, "pages", 0, 1 << 40)
        self._check_memcg("memcg", memcg)
        return self._dirty_pages(inode, pages, memcg)

    def write_pages(self, inode: Inode, pages: int, *, reason: str = "writeback") -> int:
        """Write back (clean) up to ``pages`` of ``inode``'s dirty pages, oldest first.

        :returns: the pages written.
        """
        self._check_inode(inode)
        pages = check_int(pages, "pages", 0)
        check_instance(reason, "reason", str, "a str")
        return self._write_pages(inode, pages, reason)

    def discard_pages(self, inode: Inode) -> int:
        """Drop every dirty page of ``inode`` without writing it (a removed device's mapping)."""
        self._check_inode(inode)
        return self._discard_pages(inode)

    # ------------------------------------------------------------------------------------------------
    # dirty limits and throttling (page_writeback)
    def hierarchical_dirty(self, memcg: Memcg) -> int:
        """Dirty pages charged to ``memcg`` and its descendants (the root's is the whole model's)."""
        self._check_memcg("memcg", memcg)
        return self._hierarchical_dirty(memcg)

    def global_domain(self) -> DirtyDomain:
        """The global domain: every dirty page against ratios of the dirtyable memory."""
        return self._global_domain()

    def memcg_domain(self, memcg: Memcg) -> DirtyDomain | None:
        """The memcg's own domain (None for root): its hierarchical dirty pages against ratios of
        ``min(memory.max, dirtyable memory)``. The kernel uses the memcg's file pages plus headroom, which is
        memory.max for a memcg whose memory is page cache; this model uses memory.max directly."""
        self._check_memcg("memcg", memcg)
        return self._memcg_domain(memcg)

    def over_background_thresh(self, wb: Writeback) -> bool:
        """Should ``wb`` keep doing background writeback (global or its memcg's domain over bg_thresh)?"""
        self._check_wb(wb)
        return self._over_background_thresh(wb)

    def balance_dirty_pages(self, wb: Writeback, pages_dirtied: int) -> Throttle:
        """One throttling check for a task that dirtied ``pages_dirtied`` pages against ``wb``.

        Below both freerun ceilings the task runs free (background writeback is kicked if over a background
        threshold). Above: kick background writeback on ``wb``, attempt the foreign flush for ``wb``'s memcg
        (every such call), then pause for ``pages_dirtied / (ratelimit x pos_ratio)``, at most ``MAX_PAUSE``;
        at or over the limit the pause is ``MAX_PAUSE`` and the task must check again before dirtying.
        """
        self._check_wb(wb)
        pages_dirtied = check_int(pages_dirtied, "pages_dirtied", 0)
        return self._balance_dirty_pages(wb, pages_dirtied)

    # ------------------------------------------------------------------------------------------------
    # foreign flushing (memcg_writeback, fs_writeback)
    def flush_foreign(self, wb: Writeback) -> int:
        """Flush what ``wb``'s memcg recorded as foreign (``mem_cgroup_flush_foreign``).

        Owner-wb records: each recent, idle record queues a whole-wb flush on its target. bdev records (if the
        mechanism keeps them): each recent slot without work in flight queues its flush work.

        :returns: how many flushes were issued.
        """
        self._check_wb(wb)
        return self._flush_foreign(wb)

    def cgroup_writeback_by_id(self, bdi_id: int, memcg_id: int, *, done: WbCompletion | None = None,
                               issuer: str = "") -> int:
        """Queue a foreign flush of the wb (bdi_id, memcg_id): 1.25 x that memcg's hierarchical dirty pages.

        Looks the wb up only (never creates one). :returns: 0, or ``ENOENT`` if the bdi, the memcg (or it is
        offline) or its wb does not exist.
        """
        bdi_id = check_int(bdi_id, "bdi_id", 0)
        memcg_id = check_int(memcg_id, "memcg_id", 0)
        if done is not None:
            check_instance(done, "done", WbCompletion, "a WbCompletion or None")
        return self._cgroup_writeback_by_id(bdi_id, memcg_id, done, str(issuer))

    def wb_queue_work(self, wb: Writeback, work: WritebackWork) -> None:
        """Queue ``work`` on ``wb``'s flusher; its completion (if any) counts it until it finishes."""
        self._check_wb(wb)
        check_instance(work, "work", WritebackWork, "a WritebackWork")
        self._wb_queue_work(wb, work)

    # ------------------------------------------------------------------------------------------------
    # the flusher (fs_writeback)
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

    def writeback_demand(self, wb: Writeback) -> int:
        """Pages ``wb``'s active work could write now (0 finishes it at the next :meth:`writeback_run`)."""
        self._check_wb(wb)
        return self._writeback_demand(wb)

    def writeback_run(self, wb: Writeback, max_pages: int) -> int:
        """Let ``wb``'s active work write up to ``max_pages``, round-robin over its eligible inodes a chunk
        at a time. An inode that runs out of dirty pages before its chunk is used up is done for this work
        (a redirtied inode waits for the next work); one that uses its whole chunk stays in the rotation.
        Finishes the work when it has nothing left to write.

        :returns: pages written.
        """
        self._check_wb(wb)
        max_pages = check_int(max_pages, "max_pages", 0)
        return self._writeback_run(wb, max_pages)

    def run_writeback_now(self, wb: Writeback, *, max_works: int = 1 << 20) -> int:
        """Run ``wb``'s queued works to completion at once (no device time); returns pages written."""
        self._check_wb(wb)
        max_works = check_int(max_works, "max_works", 0)
        return self._run_writeback_now(wb, max_works)

    def sync_all(self) -> int:
        """Write every dirty page at once (the final ``sync``); returns pages written."""
        return self._sync_all()

    # ------------------------------------------------------------------------------------------------
    # checks
    def _check_memcg(self, name: str, memcg: object) -> Memcg:
        check_instance(memcg, name, Memcg, "a Memcg")
        assert isinstance(memcg, Memcg)
        if self.memcgs.get(memcg.css_id) is not memcg:
            raise ValueError(f"{name} must be a memcg of this model")
        return memcg

    def _check_disk(self, disk: object) -> Disk:
        check_instance(disk, "disk", Disk, "a Disk")
        assert isinstance(disk, Disk)
        if self.disks.get(disk.bdi_id) is not disk:
            raise ValueError("disk must be a disk of this model")
        return disk

    def _check_inode(self, inode: object, name: str = "inode") -> Inode:
        check_instance(inode, name, Inode, "an Inode")
        assert isinstance(inode, Inode)
        if self.disks.get(inode.disk.bdi_id) is not inode.disk:  # disks are never removed
            raise ValueError(f"{name} must be an inode of this model")
        return inode

    def _check_device(self, device: object) -> BlockDevice:
        check_instance(device, "device", BlockDevice, "a BlockDevice")
        assert isinstance(device, BlockDevice)
        if self.disks.get(device.disk.bdi_id) is not device.disk:
            raise ValueError("device must be a block device of this model")
        return device

    def _check_wb(self, wb: object) -> Writeback:
        if type(wb) is Writeback and self.wbs.get((wb.memcg.css_id, wb.disk.bdi_id)) is wb:
            return wb  # the common case first: this runs on the flusher's every tick
        check_instance(wb, "wb", Writeback, "a Writeback")
        assert isinstance(wb, Writeback)
        if self.wbs.get((wb.memcg.css_id, wb.disk.bdi_id)) is not wb:  # wbs are never removed
            raise ValueError("wb must be a wb of this model")
        return wb

    def shutdown(self, *, drain: bool = True, timeout: float | None = None) -> int:
        """Shut the flush workqueue down (drain or cancel); returns how many works were cancelled.

        :param timeout: seconds the workqueue's shutdown may take at most (see its ``shutdown``), or None.
        """
        check_bool(drain, "drain")
        if timeout is not None:
            timeout = check_number(timeout, "timeout", 0)
        if self.workqueue is None:
            return 0
        return int(self.workqueue.shutdown(drain=drain, timeout=timeout))
