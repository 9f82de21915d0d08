"""Dirty accounting and dirty throttling (mm/page-writeback.c).

Models ``folio_account_dirtied`` with the inode's first attachment and dirtied-when stamp
(``__inode_attach_wb`` and ``__mark_inode_dirty`` in fs/fs-writeback.c, which arm the flusher's delayed
wake-up) and, for writeback and discards, the clearing side of that accounting; the dirty domains and their
thresholds (``domain_dirty_limits`` for the global domain and a memcg's, ``mem_cgroup_wb_stats`` for the
memcg's hierarchical dirty count); ``wb_over_bg_thresh``; ``balance_dirty_pages`` with ``pos_ratio_polynom``
and ``MAX_PAUSE``, including its call of ``mem_cgroup_flush_foreign`` above the freerun ceiling; and the
write-bandwidth estimate (``wb_update_write_bandwidth``). Simplifications are in docs/writeback.md.

Dirty thresholds are cached: the global pair once per limits generation (a new :attr:`tunables` or
:attr:`dirtyable_pages` starts one), a memcg's pair until the generation or its ``memory_max`` changes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ._base import ModelBase
from .entities import PAGE_SIZE, BlockDevice, Inode, Memcg, Writeback
from .jiffies import JIFFIES_MASK, jiffies_add

__all__ = ["DirtyDomain", "Throttle", "PageWriteback"]


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


class PageWriteback(ModelBase):
    """Dirtying, cleaning, dirty limits and ``balance_dirty_pages``."""

    def _dirty_pages(self, inode: Inode, pages: int, memcg: Memcg) -> int:
        """The body of ``WritebackModel.dirty_pages``, whose arguments the facade has checked."""
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

    def _write_pages(self, inode: Inode, pages: int, reason: str) -> int:
        """The body of ``WritebackModel.write_pages``, whose arguments the facade has checked."""
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

    def _discard_pages(self, inode: Inode) -> int:
        """The body of ``WritebackModel.discard_pages``, whose arguments the facade has checked."""
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

    def _hierarchical_dirty(self, memcg: Memcg) -> int:
        """The body of ``WritebackModel.hierarchical_dirty``, whose arguments the facade has checked."""
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

    def _global_domain(self) -> DirtyDomain:
        """The body of ``WritebackModel.global_domain``, whose arguments the facade has checked."""
        thresh, bg = self._global_limits()
        return DirtyDomain(self._nr_dirty, thresh, bg)

    def _memcg_domain(self, memcg: Memcg) -> DirtyDomain | None:
        """The body of ``WritebackModel.memcg_domain``, whose arguments the facade has checked."""
        if memcg.parent is None:
            return None
        thresh, bg = self._memcg_limits(memcg)
        return DirtyDomain(self._hierarchical_dirty(memcg), thresh, bg)

    def _over_background_thresh(self, wb: Writeback) -> bool:
        """The body of ``WritebackModel.over_background_thresh``, whose arguments the facade has checked."""
        if self._nr_dirty > self._global_limits()[1]:
            return True
        memcg = wb.memcg
        return memcg.parent is not None and self._hierarchical_dirty(memcg) > self._memcg_limits(memcg)[1]

    def _balance_dirty_pages(self, wb: Writeback, pages_dirtied: int) -> Throttle:
        """The body of ``WritebackModel.balance_dirty_pages``, whose arguments the facade has checked."""
        gdom = self._global_domain()
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
