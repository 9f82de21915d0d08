"""The flusher: writeback owners, their works and how a work writes (fs/fs-writeback.c).

Models ``wb_queue_work`` and ``finish_writeback_work`` (with the work's ``wb_completion``);
``cgroup_writeback_by_id`` (the owner-wb foreign flush: look the wb up, never create it, queue 1.25 x the
memcg's dirty pages); the flusher's pass in ``wb_do_writeback``: queued works first, then
``wb_check_old_data_flush`` (periodic, once per ``dirty_writeback_interval``, for inodes dirty for
``dirty_expire_interval``) and ``wb_check_background_flush``; its sleep and delayed wake-up
(``wb_wakeup_delayed``, mm/backing-dev.c); ``wb_start_background_writeback``; ``wb_writeback`` with
``writeback_sb_inodes``' round robin and ``writeback_chunk_size``; and the final ``sync``. A wb is created
at an inode's first dirtying (``wb_get_create``, mm/backing-dev.c). Simplifications are in docs/writeback.md.

The per-tick scan of a simulation visits only the flushers that may have something to do
(:meth:`FsWriteback._flushers_to_scan`), in creation order; the invariant that makes this exact is stated
where the sets are made (:class:`~pybcache.writeback._base.ModelBase`).
"""
from __future__ import annotations

from ._base import ModelBase
from .entities import (_DIRTY_SCOPE, _MIN_WRITEBACK_PAGES, _UNLIMITED, ENOENT, Disk, Inode, Memcg, Writeback,
                       WritebackWork, _wb_seq)
from .jiffies import JIFFIES_MASK, jiffies_add, time_after_eq, time_before_eq
from .memcontrol import WbCompletion

__all__ = ["FsWriteback"]


class FsWriteback(ModelBase):
    """wbs, their work lists and their flushers."""

    def _wb_of(self, memcg: Memcg, disk: Disk, *, create: bool = False) -> Writeback | None:
        """The body of ``WritebackModel.wb_of``, whose arguments the facade has checked."""
        key = (memcg.css_id, disk.bdi_id)
        with self._struct_lock:
            wb = self.wbs.get(key)
            if wb is None and create:
                wb = Writeback(memcg, disk, self.clock.now(), next(self._wb_seq))
                self.wbs[key] = wb
            return wb

    def _kick_background(self, wb: Writeback) -> None:
        """Ask ``wb``'s flusher for background writeback (``wb_start_background_writeback``)."""
        with wb.lock:
            wb.background_kicked = True
            self._flusher_ready(wb)

    def _cgroup_writeback_by_id(self, bdi_id: int, memcg_id: int, done: WbCompletion | None, issuer: str) -> int:
        """The body of ``WritebackModel.cgroup_writeback_by_id``, whose arguments the facade has checked."""
        disk = self.disks.get(bdi_id)
        memcg = self.memcgs.get(memcg_id)
        wb = None
        if disk is not None and memcg is not None and memcg.online:
            wb = self._wb_of(memcg, disk)
        if wb is None:
            with self._stat_lock:
                self.stats.owner_wb_flush_enoent += 1
            return ENOENT
        nr_pages = self._hierarchical_dirty(wb.memcg) * 10 // 8
        work = WritebackWork("foreign_flush", nr_pages, "normal", done, issuer)
        self._wb_queue_work(wb, work)
        with self._stat_lock:
            self.stats.owner_wb_flushes += 1
        return 0

    def _wb_queue_work(self, wb: Writeback, work: WritebackWork) -> None:
        """The body of ``WritebackModel.wb_queue_work``, whose arguments the facade has checked."""
        if work.done is not None:
            work.done.get()
        with wb.lock:
            if wb.registered:
                wb.works.append(work)
                self._flusher_ready(wb)
                return
        self._finish_work(wb, work)

    def _flusher_next_work(self, wb: Writeback) -> WritebackWork | None:
        """The body of ``WritebackModel.flusher_next_work``, whose arguments the facade has checked."""
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

    def _dirtied_cutoff(self, work: WritebackWork, now: int) -> int | None:
        """The latest ``dirtied_when`` ``work`` writes now: expired inodes for periodic writeback, any inode
        for background writeback (None), inodes dirtied before the work started for the others."""
        if work.reason == "periodic":
            return jiffies_add(now, -self._tunables.expire_jiffies)
        if work.reason == "background":
            return None
        assert work.dirtied_before is not None
        return work.dirtied_before

    def _eligible(self, work: WritebackWork, inode: Inode, now: int) -> bool:
        if inode.dirty == 0 or inode.ino in work.retired:
            return False
        cutoff = self._dirtied_cutoff(work, now)
        return cutoff is None or time_before_eq(inode.dirtied_when, cutoff)

    def _writeback_demand(self, wb: Writeback) -> int:
        """The body of ``WritebackModel.writeback_demand``, whose arguments the facade has checked."""
        work = wb.active
        if work is None or work.remaining <= 0:
            return 0
        if work.reason in ("periodic", "background") and wb.works:
            return 0  # periodic and background writeback yield to queued works
        if work.reason == "background" and not self._over_background_thresh(wb):
            return 0
        cutoff = self._dirtied_cutoff(work, self.clock.now())
        retired = work.retired
        avail = 0
        for inode in wb.inodes:    # the _eligible rule, with the cutoff computed once per call
            dirty = inode.dirty
            if dirty and inode.ino not in retired and (cutoff is None or time_before_eq(inode.dirtied_when, cutoff)):
                avail += dirty
        return min(avail, work.remaining)

    def _chunk_pages(self, wb: Writeback, work: WritebackWork) -> int:
        """Pages written from one inode before moving to the next: half a second of the wb's bandwidth or an
        eighth of the dirty limit, rounded down to 4 MiB after adding 4 MiB (``writeback_chunk_size``)."""
        if work.reason == "sync":
            return _UNLIMITED
        pages = min(int(wb.avg_write_bandwidth / 2), self._global_limits()[0] // _DIRTY_SCOPE, work.remaining)
        return (pages + _MIN_WRITEBACK_PAGES) // _MIN_WRITEBACK_PAGES * _MIN_WRITEBACK_PAGES

    def _writeback_run(self, wb: Writeback, max_pages: int) -> int:
        """The body of ``WritebackModel.writeback_run``, whose arguments the facade has checked."""
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

    def _run_writeback_now(self, wb: Writeback, max_works: int) -> int:
        """The body of ``WritebackModel.run_writeback_now``, whose arguments the facade has checked."""
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

    def _sync_all(self) -> int:
        """The body of ``WritebackModel.sync_all``, whose arguments the facade has checked."""
        total = 0
        for inode in list(self.inodes):
            total += self._write_pages(inode, _UNLIMITED, "sync")
        return total
