"""The model's objects and constants: disks, memcgs, inodes, writeback owners and their works, block devices.

Each stands for a kernel structure, reduced to what the foreign-writeback question needs:
:class:`Disk` a disk with its ``backing_dev_info``; :class:`Memcg` a ``struct mem_cgroup`` (its dirty pages,
limits basis and foreign records); :class:`Inode` an inode's page cache (``address_space``), a file's or a
block device's; :class:`Writeback` a ``struct bdi_writeback`` (include/linux/backing-dev-defs.h);
:class:`WritebackWork` a ``struct wb_writeback_work`` (fs/fs-writeback.c); :class:`BlockDevice` and
:class:`DeviceTable` a ``struct block_device`` with its reference count and the dev_t lookup of
``blkdev_get_no_open`` (block/bdev.c). Behaviour lives in the modules named after the kernel files
(:mod:`.page_writeback`, :mod:`.fs_writeback`, :mod:`.memcg_writeback`, :mod:`.bdev_flush`); this module
imports none of them.
"""
from __future__ import annotations

import itertools
import threading
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional

from ..units import GiB, KiB, MiB
from ..validate import check_int, check_number
from .jiffies import Clock
from .memcontrol import ForeignBdevRecords, ForeignWbRecords, WbCompletion

__all__ = ["PAGE_SIZE", "KiB", "MiB", "GiB", "MECHANISMS", "MINORBITS", "ENOENT", "mkdev", "Disk", "Memcg",
           "Inode", "Writeback", "WritebackWork", "BlockDevice", "DeviceTable", "ModelStats"]

PAGE_SIZE = 4096
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
    major = check_int(major, "major", 0, (1 << 12) - 1)
    minor = check_int(minor, "minor", 0, (1 << MINORBITS) - 1)
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
        self.bdi_id = check_int(bdi_id, "bdi_id", 1)
        self.name = str(name)
        self.bandwidth = check_number(bandwidth, "bandwidth", 0, open_low=True)

    def __repr__(self) -> str:
        return f"Disk({self.name!r}, bdi_id={self.bdi_id}, {self.bandwidth / MiB:.0f} MiB/s)"


class Memcg:
    """A memory cgroup: dirty pages charged to it, its dirty limits and its foreign records.

    ``nr_dirty`` counts every dirty page charged here, including pages of inodes other memcgs' wbs own
    (foreign pages); it is only changed under the model's statistics lock.
    """

    def __init__(self, css_id: int, name: str, parent: Optional["Memcg"], memory_max: int | None,
                 foreign_wb: ForeignWbRecords, foreign_bdev: ForeignBdevRecords[BlockDevice] | None) -> None:
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


def _wb_seq(wb: Writeback) -> int:
    return wb.seq
