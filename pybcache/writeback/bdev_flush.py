"""Block devices and the v6 series' bdev flush works (block/bdev.c and the series' work function).

Models a device's registration and hot removal (its mapping's dirty pages dropped, the table's reference
put), open and the last close writing the whole mapping back under ``open_mutex`` (``blkdev_put`` →
``blkdev_flush_mapping``), the reference count with release on the last put, and the series' flush work of
one dev_t slot: look the device up without opening it (``blkdev_get_no_open``; with ``"bdev-ref"`` use the
device the record pins), skip it if absent, removed, closed or its ``open_mutex`` is busy
(``mutex_trylock``), else write only its mapping. The work items are queued by ``mem_cgroup_flush_foreign``
(:mod:`.memcg_writeback`) on the series' workqueue (:mod:`.workqueue`).
"""
from __future__ import annotations

from typing import Callable, Generator

from ._base import ModelBase
from ..validate import check_int
from .entities import _UNLIMITED, MINORBITS, BlockDevice, Disk, Inode, Memcg
from .memcontrol import BdevSlot, ForeignBdevRecords
from .workqueue import WriteRequest

__all__ = ["BdevFlush"]


class BdevFlush(ModelBase):
    """Block devices' lifetimes and the bdev flush works."""

    def _add_block_device(self, dev_t: int, disk: Disk) -> BlockDevice:
        """The body of ``WritebackModel.add_block_device``, whose arguments the facade has checked."""
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

    def _remove_block_device(self, dev_t: int) -> BlockDevice:
        """The body of ``WritebackModel.remove_block_device``, whose arguments the facade has checked."""
        with self.devices.lock:
            device = self.devices._by_dev_t.pop(dev_t, None)
            if device is None:
                raise ValueError(f"dev_t {dev_t:#x} is not registered")
            device.removed = True
            device.removed_at = self.clock.now()
        self._discard_pages(device.mapping)
        self._put_device(device)
        return device

    def _open_device(self, device: BlockDevice) -> None:
        """The body of ``WritebackModel.open_device``, whose arguments the facade has checked."""
        with device.open_mutex:
            if device.removed:
                raise ValueError(f"device {device.dev_t:#x} was removed")
            device.openers += 1

    def _close_device(self, device: BlockDevice) -> int:
        """The body of ``WritebackModel.close_device``, whose arguments the facade has checked."""
        with device.open_mutex:
            if device.openers <= 0:
                raise ValueError(f"device {device.dev_t:#x} is not open")
            device.openers -= 1
            if device.openers == 0:
                return self._write_pages(device.mapping, _UNLIMITED, "last_close")
        return 0

    def _abort_bdev_flush(self, records: ForeignBdevRecords[BlockDevice], slot: BdevSlot[BlockDevice]) -> None:
        """A slot taken by ``take_due`` will not get its work: idle it, and put the device it let go of."""
        device = records.abort(slot)
        if device is not None:
            self._put_device(device)

    def _make_bdev_work(self, memcg: Memcg,
                        slot: BdevSlot[BlockDevice]) -> Callable[[], Generator[WriteRequest, int, None]]:
        def work() -> Generator[WriteRequest, int, None]:
            return self._bdev_flush(memcg, slot)
        return work

    def _make_bdev_cancel(self, memcg: Memcg, slot: BdevSlot[BlockDevice]) -> Callable[[], None]:
        def cancelled() -> None:
            with self._stat_lock:
                self.stats.bdev_flush_cancelled += 1
            assert memcg.foreign_bdev is not None
            device = memcg.foreign_bdev.complete(slot)
            if device is not None:
                self._put_device(device)
            self._memcg_put(memcg)
        return cancelled

    def _bdev_flush(self, memcg: Memcg, slot: BdevSlot[BlockDevice]) -> Generator[WriteRequest, int, None]:
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
                    return self._write_pages(mapping, check_int(n, "n", 0), "bdev_flush")

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

    def _device_released(self, device: BlockDevice) -> None:
        with self._stat_lock:
            self.stats.devices_released += 1

    def _put_device(self, device: BlockDevice, *, deferred: bool = False) -> None:
        if deferred:
            with self._stat_lock:
                self.stats.deferred_device_puts += 1
        device.put()
