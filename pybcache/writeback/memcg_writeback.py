"""What a memcg does with its foreign records (mm/memcontrol.c): create and offline memcgs, record foreign
dirtying, flush it.

Models ``mem_cgroup_track_foreign_dirty`` (called on every newly dirtied page whose memcg differs from its
inode's wb's: owner-wb records, or with a bdev mechanism dev_t records for a bdev mapping);
``mem_cgroup_flush_foreign`` (every recent idle owner-wb record queues ``cgroup_writeback_by_id``; with a
bdev mechanism every recent idle dev_t record queues its slot's flush work, holding a memcg reference);
memcg creation with the series' per-slot work items, and offlining: where the kernel's
``mem_cgroup_css_free`` waits for each record's completion, the model's memcg drops its reference on them
and never waits (the records themselves are in :mod:`.memcontrol`); and the css reference count
(``css_tryget`` / ``css_put``).
"""
from __future__ import annotations

from ._base import ModelBase
from .entities import BlockDevice, Inode, Memcg, Writeback
from .memcontrol import ForeignBdevRecords, ForeignWbRecords
from .workqueue import WorkItem

__all__ = ["MemcgWriteback"]


class MemcgWriteback(ModelBase):
    """Memcgs: their lifetime, foreign records and foreign flushes."""

    def _new_memcg(self, name: str, parent: Memcg | None, memory_max: int | None) -> Memcg:
        css_id = next(self._css_id)
        foreign_wb = ForeignWbRecords(self.foreign_slots, on_release=self._completion_released)
        foreign_bdev: ForeignBdevRecords[BlockDevice] | None = None
        if self.bdev_flush_enabled:
            foreign_bdev = ForeignBdevRecords(self.bdev_slots, hold_reference=self.mechanism == "bdev-ref")
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

    def _destroy_memcg(self, memcg: Memcg) -> None:
        """The body of ``WritebackModel.destroy_memcg``, whose arguments the facade has checked."""
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

    def _track_foreign(self, inode: Inode, memcg: Memcg, wb: Writeback, now: int) -> BlockDevice | None:
        """Record a foreign dirtying in ``memcg`` (inode lock held)."""
        if inode.kind == "bdev" and memcg.foreign_bdev is not None and inode.bdev is not None:
            device = inode.bdev
            records = memcg.foreign_bdev
            _, evicted = records._track(device.dev_t, now, self._tunables,
                                        device if records.hold_reference else None, device.generation)
            return evicted
        memcg.foreign_wb._track(inode.disk.bdi_id, wb.memcg.css_id, now, self._tunables)
        return None

    def _flush_foreign(self, wb: Writeback) -> int:
        """The body of ``WritebackModel.flush_foreign``, whose arguments the facade has checked."""
        memcg = wb.memcg
        now = self.clock.now()
        issued = 0
        with self._stat_lock:
            self.stats.foreign_flush_calls += 1
        for wb_slot in memcg.foreign_wb.take_due(now, self.tunables):
            if self._cgroup_writeback_by_id(wb_slot.bdi_id, wb_slot.memcg_id, wb_slot.done, memcg.name) == 0:
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
