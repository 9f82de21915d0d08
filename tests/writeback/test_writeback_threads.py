"""Multi-threaded stress with real threads: dirtiers in several memcgs, the real flush workqueue, devices
opened, closed, removed and re-created, memcgs created and destroyed, all at once. Invariants are checked
at quiescence: no exception, no deadlock, and no flush or page lost or counted twice."""
from __future__ import annotations

import random
import threading
import time

import pytest

from pybcache.writeback import (ForeignFlushWorkqueue, MonotonicClock, WorkItem, WritebackModel,
                                WritebackTunables, mkdev)

MiB = 1 << 20
JOIN_TIMEOUT = 60.0


@pytest.mark.parametrize("mechanism", ["bdev-devt", "bdev-ref", "owner-wb"])
def test_concurrent_dirtying_flushing_and_device_churn_keep_exact_accounting(mechanism, iterations=3000):
    hz = 1000
    model = WritebackModel(mechanism=mechanism, clock=MonotonicClock(hz),
                           tunables=WritebackTunables(hz=hz, ratelimit_pages=8),
                           workqueue_factory=lambda: ForeignFlushWorkqueue(workers=4))
    disk = model.add_disk("vda", 200 * MiB)
    dev_ts = [mkdev(7, i) for i in range(4)]
    for dev_t in dev_ts:
        device = model.add_block_device(dev_t, disk)
        model.open_device(device)
        model.dirty_pages(device.mapping, 1, model.root)     # root owns these bdev inodes
        model.write_pages(device.mapping, 1)
    memcgs = [model.create_memcg(f"cg{i}", memory_max=1 * MiB) for i in range(3)]
    files = [model.create_inode(disk, f"cg{i}/f") for i in range(3)]
    for memcg, inode in zip(memcgs, files):
        model.dirty_pages(inode, 1, memcg)
    root_wb = model.wb_of(model.root, disk)
    assert root_wb is not None

    errors: list[BaseException] = []
    stop_flusher = threading.Event()
    destroyed: list = []
    n_threads = 6 + 1 + 1 + (1 if mechanism == "owner-wb" else 0)
    barrier = threading.Barrier(n_threads)

    def guarded(fn):
        def run(*args):
            try:
                barrier.wait(JOIN_TIMEOUT)
                fn(*args)
            except BaseException as exc:  # noqa: BLE001 - collected and asserted below
                errors.append(exc)
        return run

    def dirtier(k: int) -> None:
        rng = random.Random(k)
        memcg, inode = memcgs[k % 3], files[k % 3]
        wb = inode.wb
        for _ in range(iterations):
            device = model.devices.get_no_open(rng.choice(dev_ts))
            if device is not None:
                try:
                    model.dirty_pages(device.mapping, rng.randint(1, 4), memcg)
                finally:
                    device.put()
            model.dirty_pages(inode, 1, memcg)
            model.balance_dirty_pages(wb, 8)          # may queue flushes; the pause is not slept
            if rng.random() < 0.05:
                model.flush_foreign(wb)
                time.sleep(0)

    def device_churn() -> None:
        rng = random.Random(99)
        for _ in range(iterations // 3):
            dev_t = rng.choice(dev_ts)
            device = model.devices.get_no_open(dev_t)
            if device is None:
                continue
            try:
                action = rng.random()
                if action < 0.3:
                    with device.open_mutex:           # a slow open elsewhere: flushes must skip it
                        time.sleep(0.0002)
                elif action < 0.55:
                    if device.openers > 0:
                        model.close_device(device)
                    else:
                        model.open_device(device)
                elif action < 0.75:
                    model.remove_block_device(dev_t)
                    fresh = model.add_block_device(dev_t, disk)   # dev_t reused at once
                    model.open_device(fresh)
                    model.dirty_pages(fresh.mapping, 1, model.root)
                    model.write_pages(fresh.mapping, 1)
            finally:
                device.put()

    def memcg_churn() -> None:
        rng = random.Random(7)
        for i in range(iterations // 30):
            memcg = model.create_memcg(f"tmp{i}", memory_max=1 * MiB)
            inode = model.create_inode(disk, f"tmp{i}/f")
            model.dirty_pages(inode, 1, memcg)
            device = model.devices.get_no_open(rng.choice(dev_ts))
            if device is not None:
                try:
                    model.dirty_pages(device.mapping, 2, memcg)
                finally:
                    device.put()
            model.flush_foreign(inode.wb)             # work queued, maybe running...
            if rng.random() < 0.5:
                time.sleep(0.0005)                    # (let a worker pick it up)
            model.destroy_memcg(memcg)                # ...when the memcg dies
            destroyed.append(memcg)

    def flusher() -> None:
        while not stop_flusher.is_set():
            model.run_writeback_now(root_wb)
            time.sleep(0.0005)
        model.run_writeback_now(root_wb)

    threads = [threading.Thread(target=guarded(dirtier), args=(k,)) for k in range(6)]
    threads.append(threading.Thread(target=guarded(device_churn)))
    threads.append(threading.Thread(target=guarded(memcg_churn)))
    flusher_thread = threading.Thread(target=guarded(flusher)) if mechanism == "owner-wb" else None
    if flusher_thread is not None:
        threads.append(flusher_thread)
    for t in threads:
        t.start()
    for t in threads:
        if t is not flusher_thread:
            t.join(JOIN_TIMEOUT)
    stop_flusher.set()
    if flusher_thread is not None:
        flusher_thread.join(JOIN_TIMEOUT)
    assert not any(t.is_alive() for t in threads), "deadlock: a thread did not finish"
    assert model.shutdown(drain=True) == 0
    if mechanism == "owner-wb":
        # Drain every wb, not only root's: a device re-created by device_churn is visible before churn
        # dirties it as root, so a dirtier can dirty it first and its memcg owns that inode (the first
        # dirtier owns an inode); that memcg's wb then receives the owner flushes, and only the flusher
        # thread above (root's) ran during the stress.  Single-threaded here: every thread has finished.
        for wb in list(model.wbs.values()):
            model.run_writeback_now(wb)
    assert errors == []

    s = model.stats
    wq = model.workqueue
    # every queued flush ran or was cancelled, exactly once
    if wq is not None:
        assert wq.stats.failed == 0 and wq.idle
        assert wq.stats.queued == wq.stats.completed + wq.stats.cancelled
        assert wq.stats.started == wq.stats.completed
        assert s.bdev_flushes_queued == s.bdev_flushes_run + s.bdev_flush_cancelled
        assert s.bdev_flush_pages == s.written_by_reason.get("bdev_flush", 0)
        assert s.bdev_flushes_queued > 0
    else:
        assert s.owner_wb_flushes == s.owner_wb_flushes_finished > 0
    # pages: dirtied = written + discarded + still dirty, and every counter agrees
    assert s.pages_dirtied == s.pages_written + s.pages_discarded + model.nr_dirty
    assert model.nr_dirty == sum(inode.dirty for inode in model.inodes)
    assert model.nr_dirty == sum(m.nr_dirty for m in model.memcgs.values())
    for m in model.memcgs.values():
        assert m.nr_dirty >= 0
    # lifetimes: destroyed memcgs freed once, live ones hold only their own reference
    assert all(m.freed for m in destroyed) and s.memcgs_freed == len(destroyed)
    for m in memcgs:
        assert m._refs == 1 and not m.freed
        assert all(slot.done.idle for slot in m.foreign_wb.slots)
        if m.foreign_bdev is not None:
            assert not any(slot.in_flight for slot in m.foreign_bdev.slots)
    if mechanism == "owner-wb":
        assert s.completions_released == 4 * len(destroyed)
    # devices: removed ones released unless a live record pins them; registered ones hold the table's ref.
    # Every live memcg's records count, root's too: a device that device_churn re-creates is visible before
    # churn dirties it as root, so a dirtier can dirty it first, its memcg then owns the bdev inode, and
    # root's own pages there are foreign, recorded in root's set, which pins the device (shown without
    # threads in test_roots_records_pin_a_device_whose_inode_a_memcg_dirtied_first).
    pinned: dict[int, int] = {}
    for m in model.memcgs.values():
        if m.foreign_bdev is not None and m.foreign_bdev.hold_reference:
            for slot in m.foreign_bdev.slots:
                if slot.device is not None:
                    pinned[id(slot.device)] = pinned.get(id(slot.device), 0) + 1
    for device in model.all_devices:
        expected = (0 if device.removed else 1) + pinned.get(id(device), 0)
        assert device.refs == expected, device
        assert device.released == (expected == 0)
    assert s.devices_released == sum(1 for d in model.all_devices if d.released)


TIMEOUT = 10.0


def _wait_until(predicate, timeout: float = TIMEOUT) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


def test_a_second_shutdown_waits_for_the_first_instead_of_cancelling_what_it_drains():
    wq = ForeignFlushWorkqueue(workers=1)
    started, gate = threading.Event(), threading.Event()
    runs, cancelled, results = [], [], {}
    wq.queue(WorkItem(lambda: (started.set(), gate.wait(TIMEOUT)), name="blocker"))
    assert started.wait(TIMEOUT)
    for i in range(3):
        wq.queue(WorkItem(lambda i=i: runs.append(i), name=str(i), on_cancel=lambda: cancelled.append(1)))
    barrier = threading.Barrier(2)

    def first():
        barrier.wait(TIMEOUT)
        results["first"] = wq.shutdown(drain=True)

    def second():
        barrier.wait(TIMEOUT)
        assert _wait_until(lambda: wq.closed)       # the first has begun
        results["second"] = wq.shutdown(drain=False)

    threads = [threading.Thread(target=first, daemon=True), threading.Thread(target=second, daemon=True)]
    for t in threads:
        t.start()
    # give a wrong second shutdown the chance to cancel the three pending items before the blocker ends
    _wait_until(lambda: wq.pending_count == 0, 0.5)
    gate.set()
    for t in threads:
        t.join(TIMEOUT)
    assert not any(t.is_alive() for t in threads), "a shutdown did not return"
    assert results == {"first": 0, "second": 0}
    assert sorted(runs) == [0, 1, 2] and cancelled == []
    assert wq.stopped


def test_queued_work_starts_at_once_while_drain_waiters_block():
    """Drain waiters and idle workers wait for different things; a wake-up meant for a worker must never
    be taken by a drain waiter (which would leave the work pending until something else wakes a worker)."""
    wq = ForeignFlushWorkqueue(workers=2)
    gate = threading.Event()
    blocker = WorkItem(lambda: gate.wait(6 * TIMEOUT), name="blocker")
    wq.queue(blocker)
    assert _wait_until(lambda: wq.running_count == 1)
    n_waiters = 6
    barrier = threading.Barrier(n_waiters + 1)
    drained = []

    def drainer():
        barrier.wait(TIMEOUT)
        drained.append(wq.drain(6 * TIMEOUT))

    waiters = [threading.Thread(target=drainer, daemon=True) for _ in range(n_waiters)]
    for t in waiters:
        t.start()
    barrier.wait(TIMEOUT)
    try:
        for i in range(30):
            # wake everyone waiting on the queue (re-queue the running blocker, cancel the re-queue), so that
            # the idle worker and the drain waiters go back to waiting in an arbitrary order
            assert wq.queue(blocker) and wq.cancel(blocker)
            time.sleep(0.005)
            ran = threading.Event()
            assert wq.queue(WorkItem(ran.set, name=f"w{i}"))
            assert ran.wait(TIMEOUT), f"round {i}: a queued work did not start while a worker was idle"
    finally:
        gate.set()
    for t in waiters:
        t.join(TIMEOUT)
    assert drained == [True] * n_waiters
    wq.shutdown()


def test_roots_records_pin_a_device_whose_inode_a_memcg_dirtied_first():
    """The case behind a failure of the bdev-ref stress (a removed device with one reference left that the
    test had expected released), run without threads: the first memcg to dirty a bdev inode owns it, so
    root's pages there are foreign and root's records hold a reference, which outlives the device's
    removal until root's record is consumed. A delayed release of the reviewer's design, not a leak."""
    model = WritebackModel(mechanism="bdev-ref", clock=MonotonicClock(1000),
                           tunables=WritebackTunables(hz=1000, ratelimit_pages=8),
                           workqueue_factory=lambda: ForeignFlushWorkqueue(workers=1))
    disk = model.add_disk("vda", 200 * MiB)
    device = model.add_block_device(mkdev(7, 1), disk)
    model.open_device(device)
    memcg = model.create_memcg("cg0", memory_max=1 * MiB)
    model.dirty_pages(device.mapping, 2, memcg)
    model.dirty_pages(device.mapping, 1, model.root)
    assert device.mapping.wb is model.wb_of(memcg, disk)
    assert [s.device for s in model.root.foreign_bdev.slots if s.device is not None] == [device]
    model.close_device(device)
    model.remove_block_device(mkdev(7, 1))
    assert model.shutdown(drain=True) == 0
    assert device.removed and device.refs == 1 and not device.released       # root's record pins it
    model.destroy_memcg(memcg)
    assert device.refs == 1                                                 # cg0's death does not free it


def test_a_device_dirtied_first_by_a_memcg_sends_its_owner_flushes_to_that_memcgs_wb():
    """The case the stress's final drain covers, run without threads: the first memcg to dirty an inode
    owns it, so root's pages there are the foreign ones and the owner flush is queued on that memcg's wb,
    which running root's wb does not finish."""
    model = WritebackModel(mechanism="owner-wb", clock=MonotonicClock(1000),
                           tunables=WritebackTunables(hz=1000, ratelimit_pages=8))
    disk = model.add_disk("vda", 200 * MiB)
    device = model.add_block_device(mkdev(7, 0), disk)
    model.open_device(device)
    memcg = model.create_memcg("cg0", memory_max=1 * MiB)
    model.dirty_pages(device.mapping, 2, memcg)
    model.dirty_pages(device.mapping, 1, model.root)
    assert device.mapping.wb is model.wb_of(memcg, disk)
    inode = model.create_inode(disk, "f")
    model.dirty_pages(inode, 1, model.root)
    model.flush_foreign(inode.wb)
    model.run_writeback_now(inode.wb)
    assert (model.stats.owner_wb_flushes, model.stats.owner_wb_flushes_finished) == (1, 0)
    model.run_writeback_now(device.mapping.wb)
    assert (model.stats.owner_wb_flushes, model.stats.owner_wb_flushes_finished) == (1, 1)
