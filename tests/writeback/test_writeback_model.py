"""The writeback model: ownership, the three foreign-flush mechanisms, devices, lifetimes, throttling."""
from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from pybcache.writeback import (ENOENT, JIFFIES_MASK, PAGE_SIZE, ForeignFlushWorkqueue, SimulatedClock,
                                SimulatedWorkqueue, TrackOutcome, WritebackModel, WritebackTunables, mkdev,
                                time_after_eq)

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
