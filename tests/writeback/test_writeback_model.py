"""The writeback model: ownership, the three foreign-flush mechanisms, devices, lifetimes, throttling."""
from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from pybcache.writeback import (ENOENT, JIFFIES_MASK, PAGE_SIZE, ForeignFlushWorkqueue, SimulatedClock,
                                SimulatedWorkqueue, TrackOutcome, WritebackModel, WritebackTunables, mkdev,
                                time_after_eq)
from pybcache.writeback import DirtyDomain, Throttle, WbCompletion, WritebackWork, jiffies_add
from pybcache.writeback import BlockDevice, Disk, Inode, Writeback
from pybcache.writeback.workqueue import WorkItem

MiB = 1 << 20
HZ = 100


def instant(request):
    return request.write(request.nr_pages)


def build(mechanism: str = "bdev-devt", *, factory=None, hz: int = HZ, start: int | None = None,
          memory_max: int = 4 * MiB) -> SimpleNamespace:
    clock = SimulatedClock(hz, start=start)
    model = WritebackModel(mechanism=mechanism, clock=clock,
                           workqueue_factory=factory or (lambda: SimulatedWorkqueue(io=instant)))
    disk = model.add_disk("vda", 200 * MiB)
    dev = model.add_block_device(mkdev(253, 0), disk)
    model.open_device(dev)
    model.dirty_pages(dev.mapping, 1, model.root)       # mount: root's wb owns the bdev inode
    model.write_pages(dev.mapping, 1)
    background = model.create_inode(disk, "bg", size=256 * PAGE_SIZE, label="background file")
    model.dirty_pages(background, 256, model.root)
    cg = model.create_memcg("cg", memory_max=memory_max)
    files = model.create_inode(disk, "cg/files", label="cgroup files")
    model.dirty_pages(files, 1, cg)
    return SimpleNamespace(model=model, clock=clock, disk=disk, dev=dev, bg=background, cg=cg, files=files,
                           cg_wb=files.wb, root_wb=background.wb)


def run_queue(ns) -> None:
    wq = ns.model.workqueue
    if isinstance(wq, SimulatedWorkqueue):
        wq.step()
        wq.drain()
    elif wq is not None:
        assert wq.drain(10.0)


def test_ownership_follows_the_first_dirtier_and_bdev_pages_are_foreign_to_their_memcg():
    ns = build()
    assert ns.dev.mapping.wb is ns.root_wb                  # attached at mount, by root
    assert ns.files.wb.memcg is ns.cg                       # the memcg's own file: its own wb
    ns.model.dirty_pages(ns.dev.mapping, 8, ns.cg)          # ext4 metadata charged to the memcg
    assert ns.cg.nr_dirty == 1 + 8                          # counts against the memcg's limits
    assert ns.cg.foreign_bdev.recorded() == [ns.dev.dev_t]  # recorded as a foreign bdev
    assert all(slot.bdi_id == 0 for slot in ns.cg.foreign_wb.slots)


def test_owner_wb_flush_writes_the_whole_root_wb_including_the_background_file():
    ns = build("owner-wb")
    ns.model.dirty_pages(ns.dev.mapping, 8, ns.cg)
    slot = ns.cg.foreign_wb.slots[0]
    assert (slot.bdi_id, slot.memcg_id) == (ns.disk.bdi_id, ns.model.root.css_id)
    assert ns.model.flush_foreign(ns.cg_wb) == 1
    (work,) = ns.root_wb.works
    assert work.nr_pages == ns.model.nr_dirty * 10 // 8     # 1.25 x root's (system-wide) dirty pages
    assert slot.in_flight
    ns.model.run_writeback_now(ns.root_wb)
    assert ns.bg.dirty == 0 and ns.dev.mapping.dirty == 0   # the unrelated file went too
    assert ns.model.stats.owner_wb_flush_pages_by_label == {"background file": 256, "bdev mapping": 8}
    assert not slot.in_flight


def test_bdev_flush_writes_only_the_bdev_mapping():
    ns = build("bdev-devt")
    ns.model.dirty_pages(ns.dev.mapping, 8, ns.cg)
    assert ns.model.flush_foreign(ns.cg_wb) == 1
    run_queue(ns)
    assert ns.dev.mapping.dirty == 0 and ns.bg.dirty == 256 and ns.files.dirty == 1
    assert ns.model.stats.bdev_flush_pages == 8 and ns.model.stats.bdev_flushes_wrote == 1
    assert ns.cg.nr_dirty == 1


def test_no_duplicate_flush_work_while_one_is_queued_for_the_same_dev_t():
    ns = build("bdev-devt", factory=lambda: SimulatedWorkqueue())   # I/O waits for the (absent) device
    ns.model.dirty_pages(ns.dev.mapping, 8, ns.cg)
    assert ns.model.flush_foreign(ns.cg_wb) == 1
    ns.clock.advance(2 * HZ)
    ns.model.dirty_pages(ns.dev.mapping, 8, ns.cg)          # re-armed while the first is queued
    assert ns.model.flush_foreign(ns.cg_wb) == 0
    assert ns.model.workqueue.stats.queued == 1


def test_closed_device_is_skipped():
    ns = build()
    ns.model.dirty_pages(ns.dev.mapping, 8, ns.cg)
    ns.dev.openers = 0          # closed without the last-close flush, to keep the dirty pages visible
    ns.model.flush_foreign(ns.cg_wb)
    run_queue(ns)
    assert ns.model.stats.bdev_skipped_closed == 1 and ns.dev.mapping.dirty == 8


def test_device_with_a_busy_open_mutex_is_skipped():
    ns = build()
    ns.model.dirty_pages(ns.dev.mapping, 8, ns.cg)
    with ns.dev.open_mutex:     # a long open or close in progress
        ns.model.flush_foreign(ns.cg_wb)
        run_queue(ns)
    assert ns.model.stats.bdev_skipped_busy == 1 and ns.dev.mapping.dirty == 8
    assert not ns.cg.foreign_bdev.slots[0].in_flight


def test_device_removed_between_record_and_flush_is_skipped():
    ns = build()
    ns.model.dirty_pages(ns.dev.mapping, 8, ns.cg)
    ns.model.remove_block_device(ns.dev.dev_t)
    assert ns.model.stats.pages_discarded == 8 and ns.cg.nr_dirty == 1
    ns.model.flush_foreign(ns.cg_wb)
    run_queue(ns)
    assert ns.model.stats.bdev_skipped_absent == 1
    assert ns.dev.released and ns.dev.refs == 0


def test_reused_dev_t_flushes_the_new_device_and_is_counted_stale():
    ns = build()
    ns.model.dirty_pages(ns.dev.mapping, 8, ns.cg)
    ns.model.remove_block_device(ns.dev.dev_t)
    new = ns.model.add_block_device(ns.dev.dev_t, ns.disk)   # same dev_t, new device
    ns.model.open_device(new)
    ns.model.dirty_pages(new.mapping, 1, ns.model.root)
    other = ns.model.create_memcg("other")
    ns.model.dirty_pages(new.mapping, 5, other)               # someone else's pages on the new device
    ns.model.flush_foreign(ns.cg_wb)
    run_queue(ns)
    s = ns.model.stats
    assert s.bdev_stale_flushes == 1 and s.bdev_stale_pages == 6
    assert new.mapping.dirty == 0 and other.nr_dirty == 0


def test_reference_holding_records_pin_a_removed_device_until_a_flush_consumes_them():
    ns = build("bdev-ref")
    ns.model.dirty_pages(ns.dev.mapping, 8, ns.cg)
    assert ns.dev.refs == 2                         # the table's and the record's
    ns.clock.advance(3 * HZ)
    ns.model.remove_block_device(ns.dev.dev_t)
    assert not ns.dev.released                      # pinned by the record
    ns.clock.advance(2 * HZ)
    ns.model.flush_foreign(ns.cg_wb)                # consumes the record: skipped, reference dropped
    run_queue(ns)
    assert ns.model.stats.bdev_skipped_removed == 1 and ns.model.stats.bdev_stale_flushes == 0
    assert ns.dev.released
    assert (ns.dev.released_at - ns.dev.removed_at) & JIFFIES_MASK == 2 * HZ


def test_reference_holding_record_is_dropped_when_the_memcg_dies():
    ns = build("bdev-ref")
    ns.model.dirty_pages(ns.dev.mapping, 8, ns.cg)
    ns.model.remove_block_device(ns.dev.dev_t)
    assert not ns.dev.released
    ns.model.destroy_memcg(ns.cg)
    assert ns.dev.released and ns.cg.freed


def test_workqueue_allocation_failure_falls_back_to_owner_wb_records():
    ns = build("bdev-devt", factory=lambda: None)
    assert ns.model.mechanism == "owner-wb" and ns.model.workqueue_fallback
    assert ns.cg.foreign_bdev is None
    ns.model.dirty_pages(ns.dev.mapping, 8, ns.cg)
    assert ns.cg.foreign_wb.slots[0].memcg_id == ns.model.root.css_id
    assert ns.model.flush_foreign(ns.cg_wb) == 1
    assert len(ns.root_wb.works) == 1


def test_memcg_destroyed_with_bdev_work_queued_cancels_it_and_frees_the_memcg():
    ns = build("bdev-devt", factory=lambda: SimulatedWorkqueue())
    ns.model.dirty_pages(ns.dev.mapping, 8, ns.cg)
    ns.model.flush_foreign(ns.cg_wb)
    ns.model.destroy_memcg(ns.cg)
    assert ns.cg.freed and ns.model.stats.memcgs_freed == 1
    assert ns.model.stats.bdev_flush_cancelled == 1 and ns.model.stats.bdev_flushes_run == 0
    assert ns.model.workqueue.idle


def test_memcg_destroyed_with_bdev_work_running_does_not_wait_and_frees_once_it_ends():
    started, gate = threading.Event(), threading.Event()

    def blocking_io(request):
        started.set()
        assert gate.wait(10.0)
        return request.write(request.nr_pages)

    ns = build("bdev-devt", factory=lambda: ForeignFlushWorkqueue(workers=2, io=blocking_io))
    try:
        ns.model.dirty_pages(ns.dev.mapping, 8, ns.cg)
        ns.model.flush_foreign(ns.cg_wb)
        assert started.wait(10.0)
        ns.model.destroy_memcg(ns.cg)               # returns although the work is mid-I/O
        assert not ns.cg.freed
        gate.set()
        assert ns.model.workqueue.drain(10.0)
        assert ns.cg.freed and ns.model.stats.memcgs_freed == 1
        assert ns.dev.mapping.dirty == 0
    finally:
        gate.set()
        ns.model.shutdown()


def test_memcg_destroyed_with_owner_wb_flush_queued_releases_each_completion_once():
    ns = build("owner-wb")
    ns.model.dirty_pages(ns.dev.mapping, 8, ns.cg)
    ns.model.flush_foreign(ns.cg_wb)
    ns.model.destroy_memcg(ns.cg)                   # never waits on the in-flight flush
    assert ns.model.stats.completions_released == 3   # the three idle slots at once
    assert ns.cg.freed
    ns.model.run_writeback_now(ns.root_wb)          # the queued flush finishes later
    assert ns.model.stats.completions_released == 4
    assert all(slot.done.released for slot in ns.cg.foreign_wb.slots)
    assert ns.model.cgroup_writeback_by_id(ns.disk.bdi_id, ns.cg.css_id) == ENOENT   # offline target


def test_throttling_is_free_below_freerun_and_flushes_above_it():
    ns = build(memory_max=4 * MiB)     # thresh 20 % = 204 pages, bg 102, freerun 153
    m = ns.model
    t = m.balance_dirty_pages(ns.cg_wb, 32)
    assert t.pause == 0 and not t.throttled and m.stats.foreign_flush_calls == 0
    m.dirty_pages(ns.dev.mapping, 160, ns.cg)
    t = m.balance_dirty_pages(ns.cg_wb, 32)
    assert t.throttled and t.pause > 0 and not t.recheck and m.stats.foreign_flush_calls == 1
    m.dirty_pages(ns.dev.mapping, 100, ns.cg)        # over the limit
    t = m.balance_dirty_pages(ns.cg_wb, 32)
    assert t.recheck and t.pause == m.tunables.max_pause
    assert ns.cg_wb.background_kicked


def test_flush_window_and_lazy_stamps_work_through_the_model_across_the_wrap():
    ns = build("owner-wb", hz=1000, start=JIFFIES_MASK - 500)
    m = ns.model
    m.dirty_pages(ns.dev.mapping, 8, ns.cg)
    ns.clock.advance(31 * 1000)                     # past the wrap and past the 30 s window
    assert ns.clock.now() < 1 << 32
    assert m.flush_foreign(ns.cg_wb) == 0
    m.dirty_pages(ns.dev.mapping, 1, ns.cg)          # re-stamped (lazy interval long passed)
    assert m.flush_foreign(ns.cg_wb) == 1


def test_changing_dirty_expire_at_run_time_changes_the_window_at_the_next_call():
    ns = build("owner-wb")
    m = ns.model
    m.dirty_pages(ns.dev.mapping, 8, ns.cg)
    ns.clock.advance(10 * HZ)
    m.tunables = WritebackTunables(hz=HZ, dirty_expire_centisecs=500)   # 5 s window from now on
    assert m.flush_foreign(ns.cg_wb) == 0


def test_more_foreign_devices_than_slots_replace_and_then_drop():
    ns = build("bdev-devt", factory=lambda: SimulatedWorkqueue())
    m = ns.model
    devices = []
    for i in range(1, 7):
        dev = m.add_block_device(mkdev(7, i), ns.disk)
        m.open_device(dev)
        m.dirty_pages(dev.mapping, 1, m.root)
        devices.append(dev)
    for dev in devices[:4]:
        m.dirty_pages(dev.mapping, 1, ns.cg)
    m.flush_foreign(ns.cg_wb)                        # all four slots in flight
    outcomes = [m.dirty_pages(dev.mapping, 1, ns.cg) for dev in devices[4:]]
    assert outcomes == [1, 1]
    assert ns.cg.foreign_bdev.stats.dropped == 2
    assert sorted(ns.cg.foreign_bdev.recorded()) == sorted(d.dev_t for d in devices[:4])


@pytest.mark.parametrize("call, exc, word", [
    (lambda ns: ns.model.dirty_pages(ns.files, -1, ns.cg), ValueError, "pages"),
    (lambda ns: ns.model.dirty_pages(ns.files, 1.5, ns.cg), TypeError, "pages"),
    (lambda ns: ns.model.dirty_pages(ns.files, 1, "cg"), TypeError, "memcg"),
    (lambda ns: ns.model.dirty_pages(ns.files, 1, build().cg), ValueError, "memcg"),
    (lambda ns: ns.model.add_block_device(ns.dev.dev_t, ns.disk), ValueError, "already registered"),
    (lambda ns: ns.model.add_block_device(0, ns.disk), ValueError, "dev_t"),
    (lambda ns: ns.model.remove_block_device(mkdev(9, 9)), ValueError, "not registered"),
    (lambda ns: ns.model.create_memcg("x", memory_max=0), ValueError, "memory_max"),
    (lambda ns: ns.model.destroy_memcg(ns.model.root), ValueError, "root"),
    (lambda ns: ns.model.balance_dirty_pages(ns.cg_wb, -3), ValueError, "pages_dirtied"),
    (lambda ns: ns.model.close_device(ns.model.add_block_device(mkdev(8, 1), ns.disk)), ValueError, "not open"),
])
def test_bad_input_is_refused_and_changes_no_counter(call, exc, word):
    ns = build()
    before = (ns.model.nr_dirty, ns.cg.nr_dirty, ns.files.dirty, len(ns.model.memcgs), ns.model.stats.as_dict())
    with pytest.raises(exc, match=word):
        call(ns)
    after = (ns.model.nr_dirty, ns.cg.nr_dirty, ns.files.dirty, len(ns.model.memcgs), ns.model.stats.as_dict())
    assert after == before


@pytest.mark.parametrize("kwargs, exc, word", [
    ({"mechanism": "owner_wb"}, ValueError, "mechanism"),
    ({"dirtyable_memory": 0}, ValueError, "dirtyable_memory"),
    ({"bdev_slots": 0}, ValueError, "bdev_slots"),
    ({"clock": SimulatedClock(100), "tunables": WritebackTunables(hz=250)}, ValueError, "hz"),
    ({"workqueue_factory": 3}, TypeError, "workqueue_factory"),
])
def test_bad_model_arguments_are_refused(kwargs, exc, word):
    with pytest.raises(exc, match=word):
        WritebackModel(**kwargs)


def test_mkdev_packs_major_and_minor():
    assert mkdev(8, 1) == (8 << 20) | 1
    with pytest.raises(ValueError, match="major"):
        mkdev(4096, 0)
    with pytest.raises(ValueError, match="dev_t 0"):
        mkdev(0, 0)
    assert TrackOutcome.DROPPED == "dropped"


@pytest.mark.parametrize("executor", ["threads", "simulated"])
def test_a_bdev_flush_whose_io_raises_releases_open_mutex_slot_and_references(executor):
    failures = [OSError("EIO")]

    def io(request):
        if failures:
            raise failures.pop()
        return request.write(request.nr_pages)

    factory = ((lambda: ForeignFlushWorkqueue(workers=1, io=io)) if executor == "threads"
               else (lambda: SimulatedWorkqueue(io=io)))
    ns = build("bdev-devt", factory=factory)
    try:
        m, wq, slot = ns.model, ns.model.workqueue, ns.cg.foreign_bdev.slots[0]
        m.dirty_pages(ns.dev.mapping, 8, ns.cg)
        assert m.flush_foreign(ns.cg_wb) == 1
        run_queue(ns)
        assert wq.stats.failed == 1 and isinstance(wq.last_error, OSError)
        assert ns.dev.open_mutex.acquire(timeout=10.0), "open_mutex leaked by the failed flush"
        ns.dev.open_mutex.release()
        assert not slot.in_flight and ns.cg._refs == 1 and ns.dev.refs == 1
        assert ns.dev.mapping.dirty == 8                       # nothing written by the failed flush
        ns.clock.advance(2 * HZ)
        m.dirty_pages(ns.dev.mapping, 1, ns.cg)                # re-armed: the next flush runs and writes
        assert m.flush_foreign(ns.cg_wb) == 1
        run_queue(ns)
        assert ns.dev.mapping.dirty == 0 and m.stats.bdev_flushes_wrote == 1
        assert m.close_device(ns.dev) == 0                     # open_mutex is free: close does not block
    finally:
        m.shutdown(drain=False)


def test_bdev_ref_record_of_a_memcg_dying_between_take_due_and_its_reference_is_released():
    ns = build("bdev-ref", factory=lambda: SimulatedWorkqueue())
    m, records = ns.model, ns.cg.foreign_bdev
    m.dirty_pages(ns.dev.mapping, 8, ns.cg)
    assert ns.dev.refs == 2                          # the table's and the record's
    take_due = records.take_due

    def take_due_then_die(now, tunables):
        due = take_due(now, tunables)
        m.destroy_memcg(ns.cg)                       # dies before flush_foreign takes its reference
        return due

    records.take_due = take_due_then_die
    assert m.flush_foreign(ns.cg_wb) == 0
    assert ns.cg.freed and not records.slots[0].in_flight
    assert ns.dev.refs == 1                          # the record let go of its device
    m.remove_block_device(ns.dev.dev_t)
    assert ns.dev.released and m.stats.devices_released == 1


def _flusher_is_idle(m, wb) -> bool:
    """True if ``flusher_next_work(wb)`` would return None and change nothing now."""
    due = wb.next_wakeup is not None and time_after_eq(m.clock.now(), wb.next_wakeup)
    return wb.active is None and not wb.awake and not wb.works and not wb.background_kicked and not due


@pytest.mark.parametrize("mechanism", ["owner-wb", "bdev-devt"])
def test_the_per_tick_flusher_scan_leaves_out_only_idle_wbs(mechanism):
    """The simulation visits only ``_flushers_to_scan()``; every wb it leaves out must be idle, on every
    tick of a run that throttles, flushes foreign pages and wakes flushers periodically."""
    from pybcache.writeback import Scenario, run_once

    left_out_busy: list[str] = []
    left_out = 0

    def observer(sim):
        nonlocal left_out
        m = sim.model
        scanned = set(m._flushers_to_scan())
        for wb in m.wbs.values():
            if wb not in scanned:
                left_out += 1
                if not _flusher_is_idle(m, wb):
                    left_out_busy.append(f"{wb} at {m.clock.now()}")

    result = run_once(mechanism, Scenario(foreground_total=2 * 1024 * MiB), observer=observer)
    assert result.throttled > 0                            # the run did reach the throttled path
    assert left_out_busy == []
    assert left_out > 0                                    # and the scan did leave idle wbs out


def test_dirty_limits_follow_tunables_dirtyable_memory_and_memory_max():
    ns = build(memory_max=4 * MiB)                         # 1024 pages: thresh 204, bg 102
    m = ns.model
    assert (m.memcg_domain(ns.cg).thresh, m.memcg_domain(ns.cg).bg_thresh) == (204, 102)
    ns.cg.memory_max = 8 * MiB
    assert (m.memcg_domain(ns.cg).thresh, m.memcg_domain(ns.cg).bg_thresh) == (409, 204)
    m.tunables = WritebackTunables(hz=HZ, dirty_ratio=40, dirty_background_ratio=20)
    assert (m.memcg_domain(ns.cg).thresh, m.memcg_domain(ns.cg).bg_thresh) == (819, 409)
    g = m.global_domain()
    m.dirtyable_pages = 1000
    assert (g.thresh, m.global_domain().thresh, m.global_domain().bg_thresh) == (g.thresh, 400, 200)
    with pytest.raises(ValueError, match="tunables.hz"):
        m.tunables = WritebackTunables(hz=HZ + 1)
    with pytest.raises(ValueError, match="dirtyable_pages"):
        m.dirtyable_pages = 0
    assert m.global_domain().thresh == 400


FLUSHER_FLAGS = ("awake", "next_wakeup", "background_kicked", "_checked_periodic", "_checked_background",
                 "last_old_flush", "active", "registered", "pages_written", "avg_write_bandwidth",
                 "_bw_stamp", "_bw_written")


def test_flusher_flags_change_only_under_the_wb_lock(monkeypatch):
    """Every change of a wb's flusher state after construction happens with ``wb.lock`` held (a dirtier's
    kick and the flusher's check must not interleave)."""
    from pybcache.writeback import Scenario, Writeback, run_once

    unlocked: set[str] = set()
    plain_setattr = object.__setattr__

    def checked_setattr(self, name, value):
        if name in FLUSHER_FLAGS and name in self.__dict__ and not self.lock.locked():
            unlocked.add(name)
        plain_setattr(self, name, value)

    monkeypatch.setattr(Writeback, "__setattr__", checked_setattr)
    run_once("owner-wb", Scenario(foreground_total=2 * 1024 * MiB))   # long enough to throttle (about 5 s in)
    ns = build("owner-wb", memory_max=4 * MiB)      # thresh 204 pages, bg 102, freerun 153
    m = ns.model
    m.dirty_pages(ns.files, 119, ns.cg)             # over bg, under freerun: the free-run kick
    assert not m.balance_dirty_pages(ns.cg_wb, 32).throttled and ns.cg_wb.background_kicked
    m.dirty_pages(ns.dev.mapping, 60, ns.cg)        # over freerun: the throttled kick and a foreign flush
    assert m.balance_dirty_pages(ns.cg_wb, 32).throttled
    for _ in range(3):                              # flusher passes: works, periodic and background checks
        ns.clock.advance(40 * HZ)
        for wb in (ns.cg_wb, ns.root_wb):
            while m.flusher_next_work(wb) is not None:
                m.writeback_run(wb, 1 << 20)
        m.dirty_pages(ns.files, 1, ns.cg)
    assert m.stats.written_by_reason["periodic"] > 0 and m.stats.owner_wb_flushes_finished == 1
    assert unlocked == set()


def test_model_shutdown_refuses_a_bad_timeout_and_passes_a_good_one_through():
    ns = build("bdev-devt")
    with pytest.raises(ValueError, match="timeout"):
        ns.model.shutdown(timeout=-1)
    with pytest.raises(TypeError, match="drain"):
        ns.model.shutdown(drain="no")
    assert not ns.model.workqueue.closed              # nothing changed
    assert ns.model.shutdown(drain=False, timeout=1.0) == 0 and ns.model.workqueue.closed


INTERVAL = 5 * HZ          # dirty_writeback_centisecs 500


EXPIRE = 30 * HZ           # dirty_expire_centisecs 3000


def make(mechanism: str = "owner-wb", *, pages: int = 1 << 20) -> tuple[WritebackModel, SimulatedClock]:
    clock = SimulatedClock(HZ)
    model = WritebackModel(mechanism=mechanism, clock=clock, dirtyable_memory=pages * PAGE_SIZE,
                           workqueue_factory=lambda: SimulatedWorkqueue(io=lambda r: r.write(r.nr_pages)))
    return model, clock


def scan(model: WritebackModel) -> list:
    return model._flushers_to_scan()


# -- the flusher's sleep, delayed wake-up and periodic writeback ------------------------------------------------
def test_a_dirty_wb_sleeps_one_interval_writes_expired_inodes_periodically_and_goes_idle_once_clean():
    model, clock = make()
    disk = model.add_disk("vda", 100 * MiB)
    f = model.create_inode(disk, "f", size=PAGE_SIZE)
    t0 = clock.now()
    model.dirty_pages(f, 1, model.root)
    wb = f.wb
    assert wb.next_wakeup == jiffies_add(t0, INTERVAL)      # armed when the wb got a dirty inode
    assert scan(model) == [] and model.flusher_next_work(wb) is None and not wb.awake
    for k in range(1, EXPIRE // INTERVAL):                  # each wake-up before expiry finds nothing expired
        clock.advance(INTERVAL)
        assert scan(model) == [wb]
        assert model.flusher_next_work(wb) is None
        assert not wb.awake and wb.next_wakeup == jiffies_add(t0, (k + 1) * INTERVAL)   # asleep, re-armed
        assert scan(model) == []
    clock.advance(INTERVAL)                                 # dirty for the expire interval: periodic writeback
    work = model.flusher_next_work(wb)
    assert (work.reason, work.nr_pages, work.io_class) == ("periodic", 1, "background")
    assert work.dirtied_before == clock.now() and model.flusher_next_work(wb) is work
    assert model.writeback_run(wb, 10) == 1 and f.written_by_reason == {"periodic": 1}
    assert model.flusher_next_work(wb) is None
    assert not wb.awake and wb.next_wakeup is None          # clean: no wake-up armed
    assert scan(model) == []                                # and the per-tick scan leaves it out


def test_periodic_writeback_writes_only_inodes_dirty_for_the_expire_interval():
    model, clock = make()
    disk = model.add_disk("vda", 100 * MiB)
    old = model.create_inode(disk, "old")
    recent = model.create_inode(disk, "recent")
    model.dirty_pages(old, 2, model.root)
    wb = old.wb
    for _ in range(EXPIRE // INTERVAL - 1):
        clock.advance(INTERVAL)
        assert model.flusher_next_work(wb) is None
    model.dirty_pages(recent, 3, model.root)
    clock.advance(INTERVAL)
    work = model.flusher_next_work(wb)
    assert work.reason == "periodic"
    assert model.writeback_run(wb, 100) == 2 and old.dirty == 0 and recent.dirty == 3


def test_a_flush_work_leaves_out_inodes_dirtied_after_it_started():
    model, clock = make()
    disk = model.add_disk("vda", 100 * MiB)
    first = model.create_inode(disk, "first")
    later = model.create_inode(disk, "later")
    model.dirty_pages(first, 2, model.root)
    wb = first.wb
    model.wb_queue_work(wb, WritebackWork("foreign_flush", 100))
    assert model.flusher_next_work(wb).dirtied_before == clock.now()
    clock.advance(1)
    model.dirty_pages(later, 3, model.root)
    assert model.writeback_run(wb, 100) == 2 and later.dirty == 3


def test_a_clean_inode_dirtied_long_ago_does_not_make_its_wb_expired():
    model, clock = make()
    disk = model.add_disk("vda", 100 * MiB)
    old = model.create_inode(disk, "old", size=PAGE_SIZE)
    new = model.create_inode(disk, "new", size=PAGE_SIZE)
    model.dirty_pages(old, 1, model.root)
    model.write_pages(old, 1)                               # clean again, its dirtied_when stays old
    wb = old.wb
    clock.advance(INTERVAL)
    assert model.flusher_next_work(wb) is None and wb.next_wakeup is None
    clock.advance(EXPIRE - INTERVAL - 100)
    model.dirty_pages(new, 1, model.root)
    clock.advance(INTERVAL)                                 # old is past the expire interval, but clean
    assert model.flusher_next_work(wb) is None
    assert new.dirty == 1 and wb.next_wakeup is not None


def test_wake_ups_armed_at_different_times_each_bring_their_wb_into_the_scan():
    model, clock = make()
    disk = model.add_disk("vda", 100 * MiB)
    a = model.create_inode(disk, "a", size=PAGE_SIZE)
    cg = model.create_memcg("cg")
    b = model.create_inode(disk, "b", size=PAGE_SIZE)
    model.dirty_pages(a, 1, model.root)
    clock.advance(7)
    model.dirty_pages(b, 1, cg)
    clock.advance(INTERVAL - 7)
    assert scan(model) == [a.wb]
    model.flusher_next_work(a.wb)
    clock.advance(7)
    assert scan(model) == [a.wb, b.wb] or scan(model) == [b.wb]
    assert b.wb in scan(model)


def test_a_queued_work_wakes_the_flusher_and_its_pass_then_checks_background_writeback():
    model, clock = make(pages=100)                          # thresh 20, bg_thresh 10 pages
    disk = model.add_disk("vda", 100 * MiB)
    f = model.create_inode(disk, "f")
    model.dirty_pages(f, 12, model.root)                    # over the background threshold, after one written
    wb = f.wb
    model.wb_queue_work(wb, WritebackWork("foreign_flush", 1))
    work = model.flusher_next_work(wb)                      # woken by the work, not by its timer
    assert work.reason == "foreign_flush"
    assert model.writeback_run(wb, 10) == 1
    bg = model.flusher_next_work(wb)                        # the same pass goes on to background writeback
    assert (bg.reason, bg.nr_pages, bg.io_class) == ("background", 1 << 62, "background")


def test_a_background_kick_is_consumed_by_one_check_and_does_not_start_writeback_under_the_threshold():
    model, clock = make(pages=100)
    disk = model.add_disk("vda", 100 * MiB)
    f = model.create_inode(disk, "f")
    model.dirty_pages(f, 11, model.root)
    wb = f.wb
    assert model.balance_dirty_pages(wb, 1).pause == 0      # below freerun (15): only a kick
    assert wb.background_kicked and wb in scan(model)
    work = model.flusher_next_work(wb)
    assert work.reason == "background" and not wb.background_kicked
    model.writeback_run(wb, 1 << 20)
    assert model.flusher_next_work(wb) is None and not wb.awake     # the pass ends
    model.dirty_pages(f, 5, model.root)                     # 5 dirty: under bg_thresh
    model._kick_background(wb)
    assert model.flusher_next_work(wb) is None and not wb.background_kicked and not wb.awake


# -- wb_over_bg_thresh: strictly over, globally or in the wb's memcg ------------------------------------------
def test_over_background_threshold_is_strictly_above_it_globally_and_in_the_memcg_domain():
    model, clock = make(pages=100)                          # global bg_thresh 10 pages
    disk = model.add_disk("vda", 100 * MiB)
    f = model.create_inode(disk, "f")
    model.dirty_pages(f, 10, model.root)
    assert not model.over_background_thresh(f.wb)
    model.dirty_pages(f, 1, model.root)
    assert model.over_background_thresh(f.wb)

    model, clock = make()                                   # a large global domain
    disk = model.add_disk("vda", 100 * MiB)
    cg = model.create_memcg("cg", memory_max=100 * PAGE_SIZE)   # its bg_thresh 10 pages
    g = model.create_inode(disk, "g")
    r = model.create_inode(disk, "r")
    model.dirty_pages(g, 10, cg)
    model.dirty_pages(r, 10, model.root)
    assert not model.over_background_thresh(g.wb) and not model.over_background_thresh(r.wb)
    model.dirty_pages(g, 1, cg)
    assert model.over_background_thresh(g.wb) and not model.over_background_thresh(r.wb)


# -- the write-bandwidth estimate --------------------------------------------------------------------------
@pytest.mark.parametrize("hz", [100, 1, 3, 5, 300])
def test_the_bandwidth_estimate_folds_a_sample_from_the_start_of_the_work_in_by_its_share_of_the_period(hz):
    clock = SimulatedClock(hz)
    model = WritebackModel(mechanism="owner-wb", clock=clock)
    disk = model.add_disk("vda", 100 * MiB)
    f = model.create_inode(disk, "f")
    model.dirty_pages(f, 500, model.root)
    wb = f.wb
    model.wb_queue_work(wb, WritebackWork("foreign_flush", 500))
    model.flusher_next_work(wb)                             # the work starts the sample
    elapsed = max(hz // 5, 1)                               # BANDWIDTH_INTERVAL: the shortest sample
    clock.advance(elapsed)
    assert model.writeback_run(wb, 100) == 100
    period = 1                                              # roundup_pow_of_two(3 * HZ)
    while period < 3 * hz:
        period *= 2
    init = 100 * MiB // PAGE_SIZE
    bw = 100 * hz / elapsed
    assert wb.avg_write_bandwidth == pytest.approx((init * (period - elapsed) + bw * elapsed) / period, rel=1e-12)


# -- balance_dirty_pages: the position ratio and the pause ------------------------------------------------
@pytest.mark.parametrize("dirty, thresh, bg, expected", [
    (175, 200, 100, 1.0),                                  # at the setpoint, halfway from freerun to the limit
    (162, 200, 100, 1 + 0.5 ** 3),                         # below it: faster, by the cube of the distance
    (188, 200, 100, 1 - 0.5 ** 3),
    (199, 200, 100, 1 - (24 / 26) ** 3),
    (200, 200, 100, 0.0),                                  # at the limit: stop
    (0, 200, 100, 2.0),                                    # far below: at most twice the rate
    (10, 10, 10, 1 + (0.5 / 1.5) ** 3),                    # limit no lower than freerun + 1
])
def test_the_position_ratio_is_the_kernels_cubic_around_the_setpoint(dirty, thresh, bg, expected):
    assert DirtyDomain(dirty, thresh, bg).pos_ratio() == pytest.approx(expected, rel=1e-12)


def test_a_throttled_task_pauses_for_its_pages_at_the_position_scaled_rate():
    clock = SimulatedClock(HZ)
    model = WritebackModel(mechanism="owner-wb", clock=clock, dirtyable_memory=1000 * PAGE_SIZE,
                           dirty_ratelimit=100 * PAGE_SIZE)  # thresh 200, bg 100, freerun 150; 100 pages/s
    disk = model.add_disk("vda", 100 * MiB)
    f = model.create_inode(disk, "f")
    model.dirty_pages(f, 140, model.root)
    wb = f.wb
    assert model.balance_dirty_pages(wb, 10) == Throttle(0, False, False)
    model.dirty_pages(f, 22, model.root)                    # 162: pos 1.125
    assert model.balance_dirty_pages(wb, 10) == Throttle(9, False, True)       # ceil(10 * HZ / 112.5)
    assert model.balance_dirty_pages(wb, 0) == Throttle(0, False, True)
    model.dirty_pages(f, 26, model.root)                    # 188: pos 0.875
    assert model.balance_dirty_pages(wb, 10) == Throttle(12, False, True)      # ceil(10 * HZ / 87.5)
    model.dirty_pages(f, 12, model.root)                    # 200: at the limit
    assert model.balance_dirty_pages(wb, 10) == Throttle(HZ // 5, True, True)  # MAX_PAUSE, check again
    assert (model.stats.throttle_calls, model.stats.throttled) == (5, 4)


# -- running works at once, sync -------------------------------------------------------------------------
def test_run_writeback_now_returns_the_pages_of_every_work_it_ran_and_sync_writes_every_inode():
    model, clock = make()
    disk = model.add_disk("vda", 100 * MiB)
    f = model.create_inode(disk, "f")
    model.dirty_pages(f, 8, model.root)
    wb = f.wb
    model.wb_queue_work(wb, WritebackWork("foreign_flush", 3))
    model.wb_queue_work(wb, WritebackWork("foreign_flush", 5))
    assert model.run_writeback_now(wb) == 8
    assert model.run_writeback_now(wb, max_works=0) == 0
    g = model.create_inode(disk, "g")
    model.dirty_pages(f, 2, model.root)
    model.dirty_pages(g, 3, model.root)
    assert model.sync_all() == 5
    assert model.stats.written_by_reason["sync"] == 5 and g.written_by_reason == {"sync": 3}


# -- cgroup_writeback_by_id -------------------------------------------------------------------------------
def test_cgroup_writeback_by_id_counts_each_enoent_once_and_queues_a_normal_work_for_its_issuer():
    model, clock = make()
    disk = model.add_disk("vda", 100 * MiB)
    f = model.create_inode(disk, "f")
    model.dirty_pages(f, 4, model.root)
    cg = model.create_memcg("cg")
    dead = model.create_memcg("dead")
    model.destroy_memcg(dead)
    assert model.cgroup_writeback_by_id(99, model.root.css_id) == ENOENT      # no such bdi
    assert model.cgroup_writeback_by_id(disk.bdi_id, 99) == ENOENT            # no such memcg
    assert model.cgroup_writeback_by_id(disk.bdi_id, dead.css_id) == ENOENT   # offline
    assert model.cgroup_writeback_by_id(disk.bdi_id, cg.css_id) == ENOENT     # no wb (never created)
    assert model.cgroup_writeback_by_id(0, 0) == ENOENT                       # 0 is a valid id to look up
    assert model.stats.owner_wb_flush_enoent == 5 and not f.wb.works
    done = WbCompletion()
    assert model.cgroup_writeback_by_id(disk.bdi_id, model.root.css_id, done=done, issuer="cg") == 0
    assert model.cgroup_writeback_by_id(disk.bdi_id, model.root.css_id) == 0
    first, second = f.wb.works
    assert (first.reason, first.nr_pages, first.io_class, first.issuer) == ("foreign_flush", 5, "normal", "cg")
    assert first.done is done and done.count == 2 and second.issuer == ""
    assert model.stats.owner_wb_flushes == 2


# -- the facade's results and argument checks -------------------------------------------------------------
def test_the_facade_returns_what_its_bodies_compute():
    model, clock = make(pages=100)
    disk = model.add_disk("vda", 100 * MiB)
    cg = model.create_memcg("cg")
    f = model.create_inode(disk, "f")
    model.dirty_pages(f, 12, cg)
    assert model.hierarchical_dirty(cg) == 12 and model.hierarchical_dirty(model.root) == 12
    assert model.over_background_thresh(f.wb) is True
    model.wb_queue_work(f.wb, WritebackWork("foreign_flush", 5))
    model.flusher_next_work(f.wb)
    assert model.writeback_demand(f.wb) == 5
    assert model.writeback_run(f.wb, 0) == 0
    assert model.balance_dirty_pages(f.wb, 0).pause == 0
    assert model.discard_pages(f) == 12 and f.dirty == 0 and cg.nr_dirty == 0


def other_wb():
    other, _ = make()
    f = other.create_inode(other.add_disk("vdb", MiB), "f")
    other.dirty_pages(f, 1, other.root)
    return f.wb


def _other(model: WritebackModel):
    other, _ = make()
    return other.create_memcg("x")


@pytest.mark.parametrize("call, exc, message", [
    (lambda m, w: m.cgroup_writeback_by_id("1", 1), TypeError, "bdi_id must be an int in [0, inf), got str"),
    (lambda m, w: m.cgroup_writeback_by_id(1, -1), ValueError, "memcg_id must be in [0, inf), got -1"),
    (lambda m, w: m.cgroup_writeback_by_id(1, 1, done="x"), TypeError,
     "done must be a WbCompletion or None, got str"),
    (lambda m, w: m.writeback_run(w, -1), ValueError, "max_pages must be in [0, inf), got -1"),
    (lambda m, w: m.balance_dirty_pages(w, -1), ValueError, "pages_dirtied must be in [0, inf), got -1"),
    (lambda m, w: m.flush_foreign("wb"), TypeError, "wb must be a Writeback, got str"),
    (lambda m, w: m.wb_queue_work(w, "work"), TypeError, "work must be a WritebackWork, got str"),
    (lambda m, w: m.flush_foreign(other_wb()), ValueError, "wb must be a wb of this model"),
    (lambda m, w: m.run_writeback_now(w, max_works=-1), ValueError, "max_works must be in [0, inf), got -1"),
    (lambda m, w: m.hierarchical_dirty(_other(m)), ValueError, "memcg must be a memcg of this model"),
    (lambda m, w: m.memcg_domain(_other(m)), ValueError, "memcg must be a memcg of this model"),
])
def test_facade_errors_name_the_argument_and_its_range(call, exc, message):
    model, clock = make()
    disk = model.add_disk("vda", 100 * MiB)
    f = model.create_inode(disk, "f")
    model.dirty_pages(f, 1, model.root)
    before = model.stats.as_dict()
    with pytest.raises(exc) as info:
        call(model, f.wb)
    assert str(info.value) == message
    assert model.stats.as_dict() == before


def test_stats_as_dict_gives_plain_counts_and_plain_dicts():
    model, clock = make()
    disk = model.add_disk("vda", 100 * MiB)
    f = model.create_inode(disk, "f")
    model.dirty_pages(f, 3, model.root)
    model.dirty_pages(f, 2, model.root)
    model.write_pages(f, 2)
    model.write_pages(f, 1)
    d = model.stats.as_dict()
    assert d["pages_dirtied"] == 5 and d["pages_written"] == 3
    assert type(d["written_by_reason"]) is dict and d["written_by_reason"] == {"writeback": 3}
    assert f.written == 3 and f.written_by_reason == {"writeback": 3}


def test_each_new_tunables_recomputes_a_memcgs_cached_dirty_limits():
    model, clock = make()
    cg = model.create_memcg("cg", memory_max=1000 * PAGE_SIZE)
    assert model.memcg_domain(cg).thresh == 200
    for ratio in (30, 40, 50):
        model.tunables = WritebackTunables(hz=HZ, dirty_ratio=ratio)
        assert model.memcg_domain(cg).thresh == 10 * ratio


def test_a_released_device_cannot_be_pinned_again():
    model, clock = make("bdev-ref")
    disk = model.add_disk("vda", 100 * MiB)
    dev = model.add_block_device(mkdev(8, 0), disk)
    model.remove_block_device(dev.dev_t)
    assert dev.released and dev.refs == 0
    assert dev.tryget() is False and dev.refs == 0


# -- block devices: open and last close, hot removal, references ------------------------------------------
def test_only_the_last_close_writes_the_whole_mapping_and_a_close_without_open_is_refused():
    model, clock = make()
    disk = model.add_disk("vda", 100 * MiB)
    dev = model.add_block_device(mkdev(8, 0), disk)
    model.open_device(dev)
    model.open_device(dev)
    model.dirty_pages(dev.mapping, 4, model.root)
    assert model.close_device(dev) == 0 and dev.openers == 1 and dev.mapping.dirty == 4
    assert model.close_device(dev) == 4 and dev.openers == 0
    assert dev.mapping.written_by_reason == {"last_close": 4}
    with pytest.raises(ValueError) as info:
        model.close_device(dev)
    assert str(info.value) == "device 0x800000 is not open" and dev.openers == 0


def test_hot_removal_discards_the_mapping_and_each_release_is_counted():
    model, clock = make()
    disk = model.add_disk("vda", 100 * MiB)
    f = model.create_inode(disk, "f")
    model.dirty_pages(f, 5, model.root)
    assert model.discard_pages(f) == 5 and model.discard_pages(f) == 0
    model.dirty_pages(f, 1, model.root)
    assert model.discard_pages(f) == 1 and f.discarded == 6
    assert model.nr_dirty == 0 and model.stats.pages_discarded == 6
    lo = model.add_block_device(1, disk)                    # the smallest and the largest dev_t
    hi = model.add_block_device((1 << 32) - 1, disk)
    model.dirty_pages(hi.mapping, 3, model.root)
    assert model.remove_block_device(1) is lo and model.remove_block_device((1 << 32) - 1) is hi
    assert hi.mapping.discarded == 3 and model.nr_dirty == 0 and model.stats.pages_discarded == 9
    assert lo.released and hi.released and model.stats.devices_released == 2
    for bad, exc, message in (("1", TypeError, "dev_t must be an int in [1, 4294967295], got str"),
                              (0, ValueError, "dev_t must be in [1, 4294967295], got 0"),
                              (1 << 32, ValueError, "dev_t must be in [1, 4294967295], got 4294967296")):
        with pytest.raises(exc) as info:
            model.remove_block_device(bad)
        assert str(info.value) == message


def test_a_removed_device_still_referenced_is_not_found_by_a_lookup():
    model, clock = make("bdev-ref")
    disk = model.add_disk("vda", 100 * MiB)
    dev = model.add_block_device(mkdev(8, 0), disk)
    dev.get()                                               # someone still holds it
    assert dev.get_unless_zero() and dev.refs == 3
    dev.put()
    model.remove_block_device(dev.dev_t)
    assert dev.refs == 1 and not dev.released
    assert dev.get_unless_zero() is False and dev.refs == 1


def test_a_pinning_record_flushes_its_live_device_and_then_lets_go_of_its_reference():
    model, clock = make("bdev-ref")
    disk = model.add_disk("vda", 100 * MiB)
    dev = model.add_block_device(mkdev(8, 0), disk)
    model.open_device(dev)
    model.dirty_pages(dev.mapping, 1, model.root)           # root's wb owns the bdev inode
    cg = model.create_memcg("cg")
    files = model.create_inode(disk, "cg/files")
    model.dirty_pages(files, 1, cg)
    for _ in range(2):
        model.dirty_pages(dev.mapping, 4, cg)
        assert dev.refs == 2                                # the table's and the record's
        assert model.flush_foreign(files.wb) == 1
        model.workqueue.step()
        model.workqueue.drain()
        assert dev.mapping.dirty == 0 and dev.refs == 1     # written, and the consumed record let go
    assert model.stats.bdev_flushes_run == 2 and model.stats.bdev_flush_pages == 9
    assert model.stats.bdev_flushes_wrote == 2
    model.dirty_pages(dev.mapping, 2, cg)
    model.remove_block_device(dev.dev_t)                    # pinned by the record, but removed
    model.flush_foreign(files.wb)
    model.workqueue.step()
    model.workqueue.drain()
    assert model.stats.bdev_skipped_removed == 1 and dev.released
    model.add_block_device(dev.dev_t, disk)
    assert model.stats.bdev_flushes_run == 3


# -- the entities' own accounting and how they print ---------------------------------------------------------
def test_dirty_pages_are_attributed_per_memcg_and_a_parent_counts_its_subtree():
    model, clock = make()
    disk = model.add_disk("vda", 100 * MiB)
    parent = model.create_memcg("p")
    child = model.create_memcg("c", parent=parent)
    grandchild = model.create_memcg("g", parent=child)
    f = model.create_inode(disk, "f")
    for memcg, pages in ((parent, 2), (child, 3), (parent, 2), (grandchild, 1)):
        model.dirty_pages(f, pages, memcg)
    assert f.dirty_by_memcg() == {"p": 4, "c": 3, "g": 1}
    assert model.hierarchical_dirty(parent) == 8 and model.hierarchical_dirty(child) == 4
    assert [m.name for m in parent.subtree()] == ["p", "c", "g"]
    assert parent.foreign_wb.stats.as_dict() == {"stamped": 0, "unchanged": 0, "recorded": 0, "replaced": 0,
                                                 "dropped": 0, "flushes": 0}


def test_the_device_table_finds_registered_dev_ts_and_a_reference_is_taken_one_at_a_time():
    model, clock = make()
    disk = model.add_disk("vda", 100 * MiB)
    dev = model.add_block_device(mkdev(8, 0), disk)
    assert dev.dev_t in model.devices and mkdev(8, 16) not in model.devices
    assert model.devices.devices() == [dev]
    dev.get()
    assert dev.refs == 2
    dev.put()
    model.remove_block_device(dev.dev_t)
    assert dev.dev_t not in model.devices and model.devices.devices() == []
    with pytest.raises(RuntimeError) as info:
        dev.get()
    assert str(info.value) == "device 0x800000 used after release" and dev.refs == 0


def test_entities_print_their_identity_and_state():
    model, clock = make()
    disk = model.add_disk("vda", 100 * MiB)
    dev = model.add_block_device(mkdev(259, 1), disk)
    cg = model.create_memcg("cg")
    assert repr(disk) == "Disk('vda', bdi_id=1, 100 MiB/s)"
    assert repr(cg) == "Memcg('cg', id=2)"
    assert repr(dev) == "BlockDevice(259:1, gen=1, openers=0)"
    model.destroy_memcg(cg)
    model.remove_block_device(dev.dev_t)
    assert repr(cg) == "Memcg('cg', id=2, offline)" and repr(dev) == "BlockDevice(259:1, gen=1, removed)"


# -- the model's initial state -----------------------------------------------------------------------------
def test_a_new_model_numbers_from_one_rounds_memory_down_to_pages_and_makes_the_workqueue_only_when_needed():
    model = WritebackModel(mechanism="owner-wb", dirtyable_memory=1000 * PAGE_SIZE + 1, dirty_ratelimit=8 * MiB)
    assert model.dirtyable_pages == 1000 and model.dirty_ratelimit_pages == 2048
    assert model.root.name == "root" and model.root.css_id == 1
    disk = model.add_disk("vda", MiB)
    assert disk.bdi_id == 1 and model.create_inode(disk, "f").ino == 1
    assert model.workqueue is None and model.workqueue_fallback is False
    series = WritebackModel(mechanism="bdev-devt")
    assert isinstance(series.workqueue, SimulatedWorkqueue) and series.workqueue_fallback is False
    failed = WritebackModel(mechanism="bdev-ref", workqueue_factory=lambda: None)
    assert (failed.requested_mechanism, failed.mechanism, failed.workqueue_fallback) == ("bdev-ref", "owner-wb", True)


def test_a_bdev_mapping_is_named_major_minor_and_incarnation_and_opens_count_up():
    model, clock = make()
    disk = model.add_disk("vda", 100 * MiB)
    dev = model.add_block_device(mkdev(259, 3), disk)
    assert dev.mapping.name == "bdev:259:3#1" and dev.mapping.ino == 1
    for _ in range(3):
        model.open_device(dev)
    assert dev.openers == 3
    model.remove_block_device(dev.dev_t)
    again = model.add_block_device(mkdev(259, 3), disk)
    assert again.mapping.name == "bdev:259:3#2" and again.mapping.ino == 2
    with pytest.raises(ValueError) as info:
        model.open_device(dev)
    assert str(info.value) == "device 0x10300003 was removed" and dev.openers == 3


def test_memcgs_get_the_models_slot_counts_and_named_flush_works():
    model = WritebackModel(mechanism="bdev-devt", foreign_slots=2, bdev_slots=3)
    cg = model.create_memcg("cg")
    assert cg.name == "cg" and len(cg.foreign_wb.slots) == 2 and len(cg.foreign_bdev.slots) == 3
    assert [s.work.name for s in cg.foreign_bdev.slots] == ["cg/bdev0", "cg/bdev1", "cg/bdev2"]
    assert [s.index for s in cg.foreign_bdev.slots] == [0, 1, 2]


# -- dirtying rules and the dirty limits ------------------------------------------------------------------
def test_a_fixed_size_file_never_has_more_dirty_pages_than_its_size_and_a_full_rewrite_is_not_foreign():
    model, clock = make()
    disk = model.add_disk("vda", 100 * MiB)
    f = model.create_inode(disk, "f", size=4 * PAGE_SIZE)
    assert model.dirty_pages(f, 0, model.root) == 0
    assert model.dirty_pages(f, 3, model.root) == 3 and model.dirty_pages(f, 3, model.root) == 1
    cg = model.create_memcg("cg")
    assert model.dirty_pages(f, 1, cg) == 0 and f.dirty == 4
    assert all(slot.bdi_id == 0 for slot in cg.foreign_wb.slots)     # nothing newly dirty: nothing recorded


def test_a_second_inode_getting_dirty_keeps_the_wake_up_already_armed():
    model, clock = make()
    disk = model.add_disk("vda", 100 * MiB)
    a = model.create_inode(disk, "a")
    b = model.create_inode(disk, "b")
    t0 = clock.now()
    model.dirty_pages(a, 1, model.root)
    clock.advance(100)
    model.dirty_pages(b, 1, model.root)
    assert a.wb.next_wakeup == jiffies_add(t0, INTERVAL)


@pytest.mark.parametrize("dirtyable, ratio, bg_ratio, thresh, bg", [
    (1005, 20, 10, 201, 100),
    (1005, 20, 20, 201, 100),          # a background ratio not below the hard one: half the threshold
    (1005, 20, 30, 201, 100),
])
def test_the_background_threshold_stays_below_the_hard_one(dirtyable, ratio, bg_ratio, thresh, bg):
    model = WritebackModel(mechanism="owner-wb", dirtyable_memory=dirtyable * PAGE_SIZE,
                           tunables=WritebackTunables(dirty_ratio=ratio, dirty_background_ratio=bg_ratio))
    domain = model.global_domain()
    assert (domain.thresh, domain.bg_thresh) == (thresh, bg) and type(domain.bg_thresh) is int


def test_memory_max_counts_whole_pages_of_the_memcgs_dirty_limit():
    model = WritebackModel(mechanism="owner-wb", tunables=WritebackTunables(dirty_ratio=30))
    cg = model.create_memcg("cg", memory_max=3 * PAGE_SIZE + PAGE_SIZE // 2)    # 3 whole pages
    assert model.memcg_domain(cg).thresh == 0


def test_bandwidth_samples_follow_one_another_and_a_long_one_replaces_the_estimate():
    clock = SimulatedClock(HZ)
    model = WritebackModel(mechanism="owner-wb", clock=clock)
    disk = model.add_disk("vda", 100 * MiB)
    f = model.create_inode(disk, "f")
    model.dirty_pages(f, 1000, model.root)
    wb = f.wb
    model.wb_queue_work(wb, WritebackWork("foreign_flush", 1000))
    model.flusher_next_work(wb)
    period, avg = 512, float(100 * MiB // PAGE_SIZE)
    for elapsed in (20, 20):
        clock.advance(elapsed)
        model.writeback_run(wb, 100)
        avg = (avg * (period - elapsed) + 100 * HZ / elapsed * elapsed) / period
        assert wb.avg_write_bandwidth == pytest.approx(avg, rel=1e-12)
    clock.advance(600)                                      # longer than the period: the sample alone
    model.writeback_run(wb, 100)
    assert wb.avg_write_bandwidth == pytest.approx(100 * HZ / 600, rel=1e-12)


def test_works_run_at_once_start_a_bandwidth_sample_that_the_next_run_folds_in():
    clock = SimulatedClock(HZ)
    model = WritebackModel(mechanism="owner-wb", clock=clock)
    disk = model.add_disk("vda", 100 * MiB)
    f = model.create_inode(disk, "f")
    model.dirty_pages(f, 200, model.root)
    wb = f.wb
    model.wb_queue_work(wb, WritebackWork("foreign_flush", 100))
    model.run_writeback_now(wb)                             # starts the sample
    clock.advance(20)
    model.wb_queue_work(wb, WritebackWork("foreign_flush", 100))
    model.run_writeback_now(wb)
    assert wb.avg_write_bandwidth != 100 * MiB // PAGE_SIZE  # folded in (how much: see the tests above)


# -- how a work writes: chunks, retired inodes, finishing ---------------------------------------------------
@pytest.mark.parametrize("pages, chunk", [
    (1 << 20, 13312),      # half a second of the initial bandwidth (12,800 pages), + 4 MiB, down to 4 MiB
    (80000, 2048),         # an eighth of the dirty threshold (2,000 pages), + 4 MiB, down to 4 MiB
])
def test_a_work_writes_one_chunk_per_inode_before_moving_on(pages, chunk):
    model, clock = make(pages=pages)
    disk = model.add_disk("vda", 100 * MiB)
    a = model.create_inode(disk, "a")
    b = model.create_inode(disk, "b")
    model.dirty_pages(a, 20000, model.root)
    model.dirty_pages(b, 20000, model.root)
    wb = a.wb
    model.wb_queue_work(wb, WritebackWork("foreign_flush", 40000))
    model.flusher_next_work(wb)
    assert model.writeback_run(wb, chunk + 1000) == chunk + 1000
    assert (a.written, b.written) == (chunk, 1000)


def test_an_inode_that_ran_dry_waits_for_the_next_work_and_finished_works_are_counted():
    model, clock = make()
    disk = model.add_disk("vda", 100 * MiB)
    a = model.create_inode(disk, "a")
    b = model.create_inode(disk, "b")
    model.dirty_pages(a, 2, model.root)
    model.dirty_pages(b, 2, model.root)
    wb = a.wb
    work = WritebackWork("foreign_flush", 100)
    model.wb_queue_work(wb, work)
    model.flusher_next_work(wb)
    assert model.writeback_run(wb, 3) == 3                  # a ran dry inside its chunk, then one of b
    model.dirty_pages(a, 5, model.root)                     # redirtied in the same jiffy
    assert model.writeback_run(wb, 100) == 1 and a.dirty == 5
    assert work.finished is True and wb.active is None
    model.wb_queue_work(wb, WritebackWork("foreign_flush", 100))
    model.run_writeback_now(wb)
    assert model.stats.owner_wb_flushes_finished == 2


def test_background_writeback_needs_dirty_pages_of_the_wb_itself():
    model, clock = make(pages=100)                          # bg_thresh 10 pages
    disk = model.add_disk("vda", 100 * MiB)
    cg = model.create_memcg("cg")
    theirs = model.create_inode(disk, "theirs")
    ours = model.create_inode(disk, "ours")
    model.dirty_pages(theirs, 20, cg)                       # over the global background threshold
    model.dirty_pages(ours, 1, model.root)
    wb = ours.wb
    model.write_pages(ours, 1)
    model._kick_background(wb)
    assert model.flusher_next_work(wb) is None              # clean: nothing to write in the background
    model.flusher_next_work(wb)
    model.dirty_pages(ours, 1, model.root)                  # one dirty page is enough
    model._kick_background(wb)
    work = model.flusher_next_work(wb)
    assert work is not None and work.reason == "background"


def new_model(mechanism: str = "owner-wb", *, pages: int = 1 << 20, **kw) -> WritebackModel:
    return WritebackModel(mechanism=mechanism, clock=SimulatedClock(HZ), dirtyable_memory=pages * PAGE_SIZE, **kw)


def raises(call, exc: type[Exception], message: str) -> None:
    with pytest.raises(exc) as info:
        call()
    assert str(info.value) == message


# -- the constructor ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, exc, message", [
    ({"mechanism": "v7"}, ValueError, "mechanism must be one of ('owner-wb', 'bdev-devt', 'bdev-ref'), got 'v7'"),
    ({"clock": "jiffies"}, TypeError, "clock must be a Clock, got str"),
    ({"tunables": {}}, TypeError, "tunables must be a WritebackTunables, got dict"),
    ({"dirtyable_memory": (1 << 60) + PAGE_SIZE}, ValueError,
     f"dirtyable_memory must be in [{PAGE_SIZE}, {1 << 60}], got {(1 << 60) + PAGE_SIZE}"),
    ({"foreign_slots": 65}, ValueError, "foreign_slots must be in [1, 64], got 65"),
    ({"bdev_slots": 65}, ValueError, "bdev_slots must be in [1, 64], got 65"),
    ({"workqueue_factory": 1}, TypeError, "workqueue_factory must be callable or None, got int"),
    ({"dirty_ratelimit": 0}, ValueError, "dirty_ratelimit must be in (0, inf), got 0"),
])
def test_the_constructor_names_each_refused_argument_with_its_type_or_range(kwargs, exc, message):
    raises(lambda: WritebackModel(**kwargs), exc, message)


def test_the_constructor_takes_the_largest_memory_and_slot_counts_and_any_positive_rate():
    model = WritebackModel(dirtyable_memory=1 << 60, foreign_slots=64, bdev_slots=64, dirty_ratelimit=0.5)
    assert model._dirtyable_pages == (1 << 60) // PAGE_SIZE
    assert (model.foreign_slots, model.bdev_slots) == (64, 64)
    assert model.dirty_ratelimit_pages == 0.5 / PAGE_SIZE


# -- entities ------------------------------------------------------------------------------------------------------
def test_a_disk_needs_a_positive_bandwidth_named_as_such():
    model = new_model()
    raises(lambda: model.add_disk("vda", 0), ValueError, "bandwidth must be in (0, inf), got 0")
    raises(lambda: model.add_disk("vda", "fast"), TypeError, "bandwidth must be a number in (0, inf), got str")
    assert model.disks == {}
    assert model.add_disk("vda", 0.5).bandwidth == 0.5


def test_a_memcg_needs_an_online_memcg_of_this_model_as_parent_and_a_bounded_memory_max():
    model = new_model()
    raises(lambda: model.create_memcg("cg", parent="root"), TypeError, "parent must be a Memcg, got str")
    raises(lambda: model.create_memcg("cg", memory_max=(1 << 60) + PAGE_SIZE), ValueError,
           f"memory_max must be in [{PAGE_SIZE}, {1 << 60}], got {(1 << 60) + PAGE_SIZE}")
    gone = model.create_memcg("gone")
    model.destroy_memcg(gone)
    raises(lambda: model.create_memcg("cg", parent=gone), ValueError, "parent must be online, 'gone' is offline")
    big = model.create_memcg("big", memory_max=1 << 60)
    assert big.memory_max == 1 << 60 and big.parent is model.root


def test_an_inode_is_a_file_labelled_file_by_default_with_its_size_rounded_up_to_whole_pages():
    model = new_model()
    disk = model.add_disk("vda", MiB)
    f = model.create_inode(disk, "f", size=PAGE_SIZE + 1)
    assert (f.name, f.kind, f.label) == ("f", "file", "file")
    assert f.size_pages == 2 and type(f.size_pages) is int
    assert model.create_inode(disk, "g", size=1).size_pages == 1
    assert model.create_inode(disk, "h", label="log").label == "log"
    raises(lambda: model.create_inode(disk, "z", size=0), ValueError, "size must be in [1, inf), got 0")
    assert [i.name for i in model.inodes] == ["f", "g", "h"]


def test_a_block_device_number_is_a_non_zero_32_bit_dev_t():
    model = new_model("bdev-devt")
    disk = model.add_disk("vda", MiB)
    raises(lambda: model.add_block_device(1 << 32, disk), ValueError,
           f"dev_t must be in [1, {(1 << 32) - 1}], got {1 << 32}")
    assert model.add_block_device((1 << 32) - 1, disk).dev_t == (1 << 32) - 1


def test_checks_of_entities_name_the_argument_and_refuse_those_of_another_model():
    model = new_model("bdev-devt")
    other = new_model("bdev-devt")
    disk = model.add_disk("vda", MiB)
    theirs = other.add_disk("vdb", MiB)
    raises(lambda: model.create_inode("vda", "f"), TypeError, "disk must be a Disk, got str")
    raises(lambda: model.create_inode(theirs, "f"), ValueError, "disk must be a disk of this model")
    raises(lambda: model.write_pages("f", 1), TypeError, "inode must be an Inode, got str")
    raises(lambda: model.open_device(7), TypeError, "device must be a BlockDevice, got int")
    raises(lambda: model.open_device(other.add_block_device(7, theirs)), ValueError,
           "device must be a block device of this model")
    model.open_device(model.add_block_device(7, disk))


# -- dirtying and cleaning -----------------------------------------------------------------------------------------
def test_dirtying_takes_up_to_2_40_pages_charged_to_a_named_memcg():
    model = new_model()
    f = model.create_inode(model.add_disk("vda", MiB), "f", size=PAGE_SIZE)
    raises(lambda: model.dirty_pages(f, (1 << 40) + 1, model.root), ValueError,
           f"pages must be in [0, {1 << 40}], got {(1 << 40) + 1}")
    raises(lambda: model.dirty_pages(f, 1, "root"), TypeError, "memcg must be a Memcg, got str")
    assert model.dirty_pages(f, 1 << 40, model.root) == 1      # a fixed-size file of one page


def test_writing_takes_zero_or_more_pages_and_a_str_reason_by_name():
    model = new_model()
    f = model.create_inode(model.add_disk("vda", MiB), "f")
    model.dirty_pages(f, 3, model.root)
    raises(lambda: model.write_pages(f, -1), ValueError, "pages must be in [0, inf), got -1")
    raises(lambda: model.write_pages(f, 1, reason=5), TypeError, "reason must be a str, got int")
    assert model.write_pages(f, 0) == 0 and f.dirty == 3
    assert model.write_pages(f, 2) == 2 and f.written_by_reason == {"writeback": 2}


# -- shutdown ------------------------------------------------------------------------------------------------------
class RecordingQueue:
    """A stand-in workqueue that records what the model's shutdown asks of it."""

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def shutdown(self, **kw) -> int:
        self.calls.append(kw)
        return 3


def test_shutdown_hands_drain_and_timeout_to_the_workqueue_and_checks_them_by_name():
    queue = RecordingQueue()
    model = new_model("bdev-devt", workqueue_factory=lambda: queue)
    raises(lambda: model.shutdown(drain=1), TypeError, "drain must be a bool, got int")
    raises(lambda: model.shutdown(timeout=-1), ValueError, "timeout must be in [0, inf), got -1")
    assert queue.calls == []
    assert model.shutdown() == 3
    assert model.shutdown(drain=False, timeout=0.5) == 3
    assert queue.calls == [{"drain": True, "timeout": None}, {"drain": False, "timeout": 0.5}]


def test_shutdown_of_a_model_without_a_workqueue_cancels_nothing():
    model = new_model("owner-wb")
    assert model.workqueue is None and model.shutdown() == 0
    fallback = new_model("bdev-devt", workqueue_factory=lambda: None)
    assert fallback.workqueue is None and fallback.shutdown(drain=False) == 0


def test_shutdown_drains_by_default_and_cancels_when_told():
    for drain, cancelled, ran in ((None, 0, ["w"]), (False, 1, [])):
        queue = SimulatedWorkqueue(io=lambda r: r.write(r.nr_pages))
        model = new_model("bdev-devt", workqueue_factory=lambda q=queue: q)
        done: list[str] = []
        queue.queue(WorkItem(lambda: done.append("w"), name="w"))
        kw = {} if drain is None else {"drain": drain}
        assert model.shutdown(**kw) == cancelled
        assert done == ran


# -- entities.py -----------------------------------------------------------------------------------------------------
def test_mkdev_names_a_major_or_minor_out_of_range_and_refuses_dev_t_0():
    assert mkdev(4095, (1 << 20) - 1) == (1 << 32) - 1
    raises(lambda: mkdev(4096, 0), ValueError, "major must be in [0, 4095], got 4096")
    raises(lambda: mkdev(0, 1 << 20), ValueError, f"minor must be in [0, {(1 << 20) - 1}], got {1 << 20}")
    raises(lambda: mkdev(0, 0), ValueError, "major and minor must not both be 0 (dev_t 0 is never a device)")


def test_a_disk_is_built_from_a_positive_bdi_id_and_a_positive_bandwidth():
    raises(lambda: Disk(0, "d", 1.0), ValueError, "bdi_id must be in [1, inf), got 0")
    raises(lambda: Disk(1, "d", 0), ValueError, "bandwidth must be in (0, inf), got 0")
    assert Disk(1, "d", 0.5).bandwidth == 0.5


def test_a_wb_is_stamped_with_its_creation_time_and_order_and_counts_the_pages_its_flusher_wrote():
    model = new_model()
    clock = model.clock
    disk = model.add_disk("vda", MiB)
    f, g = model.create_inode(disk, "f"), model.create_inode(disk, "g")
    clock.advance(7)
    model.dirty_pages(f, 2, model.root)
    clock.advance(5)
    model.dirty_pages(g, 1, model.create_memcg("cg"))
    assert (f.wb.seq, g.wb.seq) == (0, 1)
    assert g.wb.last_old_flush == jiffies_add(f.wb.last_old_flush, 5) == jiffies_add(clock.now(), 0)
    assert f.wb.pages_written == 0
    model.write_pages(f, 1)                                 # not by the flusher
    model.wb_queue_work(f.wb, WritebackWork("sync", 5))
    model.flusher_next_work(f.wb)
    assert model.writeback_run(f.wb, 5) == 1 and f.wb.pages_written == 1
    bare = Writeback(model.root, disk)
    assert (bare.seq, bare.last_old_flush, bare.pages_written) == (0, 0, 0)


def test_a_file_has_no_block_device_and_a_device_is_removed_only_when_unregistered():
    model = new_model("bdev-devt")
    disk = model.add_disk("vda", MiB)
    assert model.create_inode(disk, "f").bdev is None
    dev = model.add_block_device(7, disk)
    assert dev.removed is False and dev.removed_at is None
    model.clock.advance(3)
    model.remove_block_device(7)
    assert dev.removed is True and dev.removed_at == model.clock.now()


def test_a_block_device_built_on_its_own_is_released_by_its_last_put_without_a_hook():
    disk = Disk(1, "vda", 1.0)
    mapping = Inode(1, "bdev", disk, kind="bdev", size_pages=None, label="bdev mapping")
    dev = BlockDevice(7, disk, 1, mapping)
    assert dev.on_release is None and dev.put() is True and dev.released_at == 0


# -- fs_writeback.py: how a flush work writes ------------------------------------------------------------------------
def started(model: WritebackModel, wb, work: WritebackWork) -> WritebackWork:
    model.wb_queue_work(wb, work)
    assert model.flusher_next_work(wb) is work
    return work


def test_a_work_keeps_to_its_inode_for_a_whole_chunk_across_calls_then_takes_the_next_dirty_one_in_turn():
    model = new_model(pages=80000)                               # chunks of 2,048 pages (see test_writeback_mutants.py)
    disk = model.add_disk("vda", 100 * MiB)
    a, b = model.create_inode(disk, "a"), model.create_inode(disk, "b")
    c = model.create_inode(disk, "c", label="log")
    for inode in (a, b, c):
        model.dirty_pages(inode, 5000, model.root)
    model.write_pages(b, 5000)                              # b is clean: every turn passes it by
    wb = a.wb
    work = started(model, wb, WritebackWork("foreign_flush", 15000))
    assert model.writeback_run(wb, 2047) == 2047 and a.written == 2047
    assert model.writeback_run(wb, 1) == 1 and a.written == 2048          # the chunk's last page: still a
    assert model.writeback_run(wb, 2048) == 2048 and c.written == 2048    # b passed by, c next
    assert model.writeback_run(wb, 2048) == 2048 and a.written == 4096    # b passed by again: back to a
    assert (work.written, work.remaining) == (6144, 15000 - 6144)
    assert work.written_by_label == {"file": 4096, "log": 2048}
    assert model.stats.owner_wb_flush_pages == 6144
    assert model.stats.owner_wb_flush_pages_by_label == {"file": 4096, "log": 2048}
    assert wb.pages_written == 6144
    total = model.writeback_run(wb, 2500)                   # c's chunk whole, then a's: counts stay ints
    assert total == 2500 and type(total) is int and type(work.written) is int


def test_a_sync_work_writes_each_inode_whole_and_counts_no_foreign_flush_pages():
    model = new_model(pages=80000)                               # other works take chunks of 2,048 pages
    disk = model.add_disk("vda", 100 * MiB)
    a, b = model.create_inode(disk, "a"), model.create_inode(disk, "b")
    model.dirty_pages(a, 3000, model.root)
    model.dirty_pages(b, 3000, model.root)
    started(model, a.wb, WritebackWork("sync", 6000))
    assert model.writeback_run(a.wb, 3000) == 3000 and (a.written, b.written) == (3000, 0)
    assert model.stats.owner_wb_flush_pages == 0 and a.wb.pages_written == 3000


def test_an_idle_flusher_has_no_demand_and_writes_nothing():
    model = new_model()
    f = model.create_inode(model.add_disk("vda", MiB), "f")
    model.dirty_pages(f, 3, model.root)
    assert model.writeback_demand(f.wb) == 0 and model.writeback_run(f.wb, 10) == 0 and f.dirty == 3


def test_a_flush_works_demand_is_every_page_dirtied_before_it_started():
    model = new_model()
    disk = model.add_disk("vda", MiB)
    a, b, late = (model.create_inode(disk, n) for n in "abl")
    model.dirty_pages(a, 3, model.root)
    model.dirty_pages(b, 4, model.root)
    work = started(model, a.wb, WritebackWork("foreign_flush", 100))
    model.clock.advance(1)
    model.dirty_pages(late, 5, model.root)
    assert model.writeback_demand(a.wb) == 7
    model.writeback_run(a.wb, 5)
    assert model.writeback_demand(a.wb) == 2 and work.remaining == 95 and a.wb.active is work
    assert model.writeback_run(a.wb, 100) == 2 and late.dirty == 5 and work.finished


def test_a_work_one_page_short_of_its_count_stays_active():
    model = new_model()
    f = model.create_inode(model.add_disk("vda", MiB), "f")
    model.dirty_pages(f, 10, model.root)
    work = started(model, f.wb, WritebackWork("foreign_flush", 5))
    assert model.writeback_run(f.wb, 4) == 4
    assert work.remaining == 1 and not work.finished and f.wb.active is work
    assert model.writeback_demand(f.wb) == 1


def test_background_writeback_takes_pages_dirtied_after_it_started_and_yields_to_queued_works():
    model = new_model(pages=100)                                 # bg_thresh 10 pages
    disk = model.add_disk("vda", 100 * MiB)
    f, g = model.create_inode(disk, "f"), model.create_inode(disk, "g")
    model.dirty_pages(f, 20, model.root)
    model._kick_background(f.wb)
    work = model.flusher_next_work(f.wb)
    assert work.reason == "background"
    model.clock.advance(1)
    model.dirty_pages(g, 3, model.root)
    assert model.writeback_demand(f.wb) == 23
    model.wb_queue_work(f.wb, WritebackWork("foreign_flush", 1))
    assert model.writeback_demand(f.wb) == 0 and model.writeback_run(f.wb, 10) == 0
    assert work.finished and f.wb.active is None


def test_background_writeback_stops_and_finishes_once_under_the_threshold():
    model = new_model(pages=100)                                 # bg_thresh 10 pages
    f = model.create_inode(model.add_disk("vda", 100 * MiB), "f")
    model.dirty_pages(f, 20, model.root)
    model._kick_background(f.wb)
    work = model.flusher_next_work(f.wb)
    assert work.reason == "background"
    model.write_pages(f, 15)                                # under the threshold by other means
    assert model.writeback_demand(f.wb) == 0
    assert model.writeback_run(f.wb, 10) == 0 and f.dirty == 5
    assert work.finished and f.wb.active is None


def test_periodic_writeback_yields_to_queued_works():
    model = new_model()
    f = model.create_inode(model.add_disk("vda", MiB), "f")
    model.dirty_pages(f, 2, model.root)
    model.clock.advance(30 * HZ)                            # dirty for the expire interval
    work = model.flusher_next_work(f.wb)
    assert work.reason == "periodic" and model.writeback_demand(f.wb) == 2
    model.wb_queue_work(f.wb, WritebackWork("foreign_flush", 1))
    assert model.writeback_demand(f.wb) == 0


def test_a_periodic_work_continues_on_its_inode_across_calls():
    model = new_model()
    f = model.create_inode(model.add_disk("vda", MiB), "f")
    model.dirty_pages(f, 3, model.root)
    model.clock.advance(30 * HZ)                            # dirty for the expire interval
    assert model.flusher_next_work(f.wb).reason == "periodic"
    assert [model.writeback_run(f.wb, 1) for _ in range(3)] == [1, 1, 1] and f.dirty == 0


def test_a_flusher_pass_checks_periodic_writeback_once_and_sleeps_after_its_work():
    model = new_model()
    f = model.create_inode(model.add_disk("vda", MiB), "f")
    model.dirty_pages(f, 2, model.root)
    model.clock.advance(30 * HZ)                            # dirty for the expire interval
    work = model.flusher_next_work(f.wb)
    assert work.reason == "periodic" and work.nr_pages == 2
    model.dirty_pages(f, 3, model.root)                     # more pages of the expired inode
    model.clock.advance(5 * HZ)                             # a whole writeback interval later
    assert model.writeback_run(f.wb, 100) == 2 and work.finished
    assert model.flusher_next_work(f.wb) is None and not f.wb.awake   # this pass checked already
    assert f.wb.next_wakeup == jiffies_add(model.clock.now(), 5 * HZ)
    model.clock.advance(5 * HZ)
    assert model.flusher_next_work(f.wb).reason == "periodic"        # the next pass does


def test_a_flusher_pass_checks_background_writeback_once_and_sleeps_after_its_work():
    model = new_model(pages=100)                                 # bg_thresh 10 pages
    f = model.create_inode(model.add_disk("vda", 100 * MiB), "f")
    model.dirty_pages(f, 20, model.root)
    model._kick_background(f.wb)
    work = model.flusher_next_work(f.wb)
    assert work.reason == "background"
    model.writeback_run(f.wb, 15)                           # under the threshold: the work ends
    assert work.finished
    model.dirty_pages(f, 20, model.root)                    # over it again
    assert model.flusher_next_work(f.wb) is None and not f.wb.awake   # this pass checked already
    model._kick_background(f.wb)
    assert model.flusher_next_work(f.wb).reason == "background"      # a kick starts a new pass


def test_a_bandwidth_sample_is_the_pages_written_over_its_jiffies():
    model = new_model()
    f = model.create_inode(model.add_disk("vda", MiB), "f")
    model.dirty_pages(f, 100, model.root)
    model.wb_queue_work(f.wb, WritebackWork("foreign_flush", 100))
    assert model.run_writeback_now(f.wb) == 100             # the sample starts here, with these pages
    model.clock.advance(512)                                # a whole period (3 HZ up to a power of two)
    model.dirty_pages(f, 28, model.root)
    model.wb_queue_work(f.wb, WritebackWork("foreign_flush", 28))
    assert model.run_writeback_now(f.wb) == 28
    assert f.wb.avg_write_bandwidth == 128 * HZ / 512
