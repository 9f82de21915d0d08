"""The foreign records: the kernel's four owner-wb slots (D.2-D.5) and the series' dev_t set."""
from __future__ import annotations

import pytest

from pybcache.writeback import (EXPIRED, JIFFIES_MASK, ForeignBdevRecords, ForeignWbRecords, TrackOutcome,
                                WbCompletion, WritebackTunables, jiffies_add)
from pybcache.writeback import PAGE_SIZE, BlockDevice, Disk, SimulatedClock, SimulatedWorkqueue, WritebackModel, mkdev

HZ = 100
T = WritebackTunables(hz=HZ)
START = 10_000


def test_same_key_reuses_its_slot_and_stamps_lazily():
    rec = ForeignWbRecords()
    assert rec.track(1, 1, START, T) == TrackOutcome.RECORDED
    assert rec.track(1, 1, START + HZ // 2, T) == TrackOutcome.UNCHANGED   # within update_intv (1 s)
    assert rec.slots[0].at == START
    assert rec.track(1, 1, START + HZ + 1, T) == TrackOutcome.STAMPED      # older than 1 s: refreshed
    assert rec.slots[0].at == START + HZ + 1
    assert [s.bdi_id for s in rec.slots] == [1, 0, 0, 0]


def test_lazy_stamp_interval_follows_hz():
    for hz in (100, 250, 1000):
        t = WritebackTunables(hz=hz)
        rec = ForeignWbRecords()
        rec.track(1, 1, START, t)
        assert rec.track(1, 1, START + hz, t) == TrackOutcome.UNCHANGED    # exactly 1 s: not yet older
        assert rec.track(1, 1, START + hz + 1, t) == TrackOutcome.STAMPED


def test_new_key_replaces_the_oldest_idle_slot():
    rec = ForeignWbRecords()
    for i in range(4):
        rec.track(1, 10 + i, START + i, T)
    assert rec.track(1, 99, START + 10, T) == TrackOutcome.REPLACED
    assert [s.memcg_id for s in rec.slots] == [99, 11, 12, 13]


def test_replacement_skips_slots_with_a_flush_in_flight():
    rec = ForeignWbRecords()
    for i in range(4):
        rec.track(1, 10 + i, START + i, T)
    rec.slots[0].done.get()   # a flush from the oldest slot is in flight
    assert rec.track(1, 99, START + 10, T) == TrackOutcome.REPLACED
    assert [s.memcg_id for s in rec.slots] == [10, 99, 12, 13]


def test_more_foreign_targets_than_slots_drops_events_when_all_are_in_flight():
    rec = ForeignWbRecords()
    for i in range(4):
        rec.track(1, 10 + i, START, T)
    for slot in rec.take_due(START + 1, T):
        slot.done.get()
    assert rec.track(1, 99, START + 2, T) == TrackOutcome.DROPPED
    assert rec.stats.dropped == 1
    assert 99 not in [s.memcg_id for s in rec.slots]


def test_flush_takes_only_recent_idle_records_and_consumes_them():
    rec = ForeignWbRecords()
    rec.track(1, 10, START, T)
    rec.track(1, 11, START + 5 * HZ, T)
    now = START + 30 * HZ + 1       # the first record is now older than the 30 s window
    due = rec.take_due(now, T)
    assert [s.memcg_id for s in due] == [11]
    assert due[0].at == EXPIRED
    assert rec.take_due(now, T) == []   # consumed: only a new dirtying re-arms it
    assert rec.track(1, 11, now + 1, T) == TrackOutcome.STAMPED
    assert [s.memcg_id for s in rec.take_due(now + 2, T)] == [11]


def test_no_second_flush_while_a_slot_is_in_flight():
    rec = ForeignWbRecords()
    rec.track(1, 10, START, T)
    (slot,) = rec.take_due(START + 1, T)
    slot.done.get()                          # the flush is queued
    rec.track(1, 10, START + 2 * HZ, T)      # re-dirtied while in flight
    assert rec.take_due(START + 2 * HZ + 1, T) == []
    slot.done.put()                          # the flush finished
    assert rec.take_due(START + 2 * HZ + 2, T) == [slot]


def test_records_near_the_jiffies_wrap_expire_and_stamp_correctly():
    start = JIFFIES_MASK - 2 * HZ
    rec = ForeignWbRecords()
    rec.track(1, 10, start, T)
    later = jiffies_add(start, 5 * HZ)       # past the wrap
    assert later < start
    assert rec.track(1, 10, later, T) == TrackOutcome.STAMPED
    assert [s.memcg_id for s in rec.take_due(jiffies_add(later, 29 * HZ), T)] == [10]
    rec.track(1, 10, jiffies_add(later, 31 * HZ), T)
    assert rec.take_due(jiffies_add(later, 62 * HZ), T) == []   # expired after the wrap


def test_a_stamp_taken_when_jiffies_reads_zero_is_not_the_expired_sentinel():
    rec = ForeignWbRecords()
    rec.track(1, 10, 0, T)
    assert rec.slots[0].at != EXPIRED
    assert len(rec.take_due(1, T)) == 1


def test_completion_starts_at_one_and_is_released_exactly_once_after_the_owner_drops_it():
    releases = []
    done = WbCompletion(lambda: releases.append(1))
    assert done.idle and done.count == 1
    done.get()
    assert not done.idle
    assert done.drop_owner() is False        # a flush is still in flight: no wait, no release
    assert done.drop_owner() is False        # idempotent
    assert done.put() is True                # the last flush releases it
    assert releases == [1] and done.released
    with pytest.raises(RuntimeError):
        done.put()
    with pytest.raises(RuntimeError):
        done.get()


def test_bdev_records_hold_a_bounded_set_of_dev_t():
    rec = ForeignBdevRecords(capacity=2)
    assert rec.track(0x800001, START, T)[0] == TrackOutcome.RECORDED
    assert rec.track(0x800002, START + 1, T)[0] == TrackOutcome.RECORDED
    assert rec.track(0x800001, START + 2, T)[0] == TrackOutcome.UNCHANGED
    assert rec.track(0x800003, START + 3, T)[0] == TrackOutcome.REPLACED   # replaces the oldest
    assert sorted(rec.recorded()) == [0x800002, 0x800003]


def test_bdev_slot_in_flight_is_neither_replaced_nor_taken_again():
    rec = ForeignBdevRecords(capacity=1)
    rec.track(0x800001, START, T)
    (slot,) = rec.take_due(START + 1, T)
    assert slot.in_flight
    assert rec.track(0x800002, START + 2, T)[0] == TrackOutcome.DROPPED
    rec.track(0x800001, START + 2 * HZ, T)
    assert rec.take_due(START + 2 * HZ + 1, T) == []
    rec.complete(slot)
    assert rec.take_due(START + 2 * HZ + 2, T) == [slot]


@pytest.mark.parametrize("call, exc, word", [
    (lambda r: r.track(0, 1, START, T), ValueError, "bdi_id"),
    (lambda r: r.track(1, -1, START, T), ValueError, "memcg_id"),
    (lambda r: r.track(1.0, 1, START, T), TypeError, "bdi_id"),
])
def test_bad_track_arguments_change_nothing(call, exc, word):
    rec = ForeignWbRecords()
    rec.track(1, 1, START, T)
    before = [(s.bdi_id, s.memcg_id, s.at) for s in rec.slots]
    with pytest.raises(exc, match=word):
        call(rec)
    assert [(s.bdi_id, s.memcg_id, s.at) for s in rec.slots] == before


def test_bad_record_set_sizes_are_refused():
    with pytest.raises(ValueError, match="slots"):
        ForeignWbRecords(0)
    with pytest.raises(ValueError, match="capacity"):
        ForeignBdevRecords(65)
    with pytest.raises(TypeError, match="hold_reference"):
        ForeignBdevRecords(4, hold_reference=1)
    with pytest.raises(ValueError, match="dev_t"):
        ForeignBdevRecords().track(0, START, T)


MiB = 1 << 20


def make(mechanism: str = "owner-wb", *, pages: int = 1 << 20) -> tuple[WritebackModel, SimulatedClock]:
    clock = SimulatedClock(HZ)
    model = WritebackModel(mechanism=mechanism, clock=clock, dirtyable_memory=pages * PAGE_SIZE,
                           workqueue_factory=lambda: SimulatedWorkqueue(io=lambda r: r.write(r.nr_pages)))
    return model, clock


def _other(model: WritebackModel):
    other, _ = make()
    return other.create_memcg("x")


# -- the record sets ---------------------------------------------------------------------------------------
def test_bdev_record_arguments_are_checked_with_their_range_and_the_generation_is_kept():
    t = WritebackTunables(hz=HZ)
    records = ForeignBdevRecords()
    for bad, exc, message in (("1", TypeError, "dev_t must be an int in [1, 4294967295], got str"),
                              (0, ValueError, "dev_t must be in [1, 4294967295], got 0"),
                              (1 << 32, ValueError, "dev_t must be in [1, 4294967295], got 4294967296")):
        with pytest.raises(exc) as info:
            records.track(bad, 1, t)
        assert str(info.value) == message
    assert records.track(1, 1, t) == ("recorded", None)
    assert records.track((1 << 32) - 1, 1, t, generation=7) == ("recorded", None)
    assert [(s.dev_t, s.generation) for s in records.slots[:2]] == [(1, 0), ((1 << 32) - 1, 7)]
    pinning = ForeignBdevRecords(hold_reference=True)
    with pytest.raises(ValueError) as info:
        pinning.track(5, 1, t)
    assert str(info.value) == "device is required when records hold references"

    class Device:
        refs = 0

        def tryget(self) -> bool:
            self.refs += 1
            return True

    device = Device()
    assert pinning.track(5, 1, t, device=device, generation=3) == ("recorded", None)
    assert pinning.slots[0].device is device and device.refs == 1 and pinning.slots[0].generation == 3


def test_owner_wb_record_arguments_are_named_and_each_outcome_is_counted_once():
    t = WritebackTunables(hz=HZ)
    records = ForeignWbRecords(3)
    for args, message in (((0, 1), "bdi_id must be in [1, inf), got 0"),
                          ((1, 0), "memcg_id must be in [1, inf), got 0")):
        with pytest.raises(ValueError) as info:
            records.track(*args, 1000, t)
        assert str(info.value) == message
    assert [records.track(bdi, 1, 1000, t) for bdi in (1, 2, 3)] == ["recorded"] * 3
    outcomes = [records.track(1, 1, now, t) for now in (1001, 1002, 1001 + HZ, 1002 + 2 * HZ)]
    assert outcomes == ["unchanged", "unchanged", "stamped", "stamped"]    # lazy for 1 s, refreshed after it
    assert [records.track(bdi, 1, 1300, t) for bdi in (4, 5)] == ["replaced"] * 2
    assert [(s.bdi_id, s.at) for s in records.slots] == [(1, 1202), (4, 1300), (5, 1300)]   # the oldest went
    for slot in records.slots:
        slot.done.get()                                    # all in flight
    assert [records.track(bdi, 1, 1300, t) for bdi in (6, 7)] == ["dropped"] * 2
    stats = records.stats
    assert (stats.recorded, stats.unchanged, stats.stamped, stats.replaced, stats.dropped) == (3, 2, 2, 2, 2)


def test_a_released_completion_refuses_a_new_flush_with_its_reason():
    done = WbCompletion()
    assert done.drop_owner() and done.released
    with pytest.raises(RuntimeError) as info:
        done.get()
    assert str(info.value) == "wb completion used after release"


# -- memcg lifetime and records of a dead memcg ------------------------------------------------------------
def test_destroying_a_memcg_is_refused_with_the_reason_for_root_offline_parents_and_strangers():
    model, clock = make()
    parent = model.create_memcg("p")
    model.create_memcg("c", parent=parent)
    gone = model.create_memcg("gone")
    model.destroy_memcg(gone)
    for memcg, message in ((model.root, "memcg must not be the root memcg"),
                           (gone, "memcg 'gone' is already offline"),
                           (parent, "memcg 'p' has online children"),
                           (_other(model), "memcg must be a memcg of this model")):
        with pytest.raises(ValueError) as info:
            model.destroy_memcg(memcg)
        assert str(info.value) == message
    assert parent.online and model.stats.memcgs_freed == 1
    other = model.create_memcg("other")
    model.destroy_memcg(other)
    assert model.stats.memcgs_freed == 2
    with pytest.raises(RuntimeError) as info:
        model._memcg_put(other)                             # a reference dropped twice is caught, not hidden
    assert str(info.value) == "memcg 'other' freed twice"


def test_a_dead_memcgs_bdev_records_forget_their_devices_and_record_nothing_more():
    t = WritebackTunables(hz=HZ)
    records = ForeignBdevRecords(hold_reference=True)

    class Device:
        def tryget(self) -> bool:
            return True

    device = Device()
    records.track(5, 1000, t, device=device)
    assert records.release_all() == [device]
    assert records.recorded() == [] and records.slots[0].device is None and records.slots[0].dev_t == 0
    assert records.track(5, 1001, t, device=device) == ("dropped", None) and records.take_due(1002, t) == []
    wb_records = ForeignWbRecords(3)
    assert wb_records.drop_owner() == 3                     # nothing in flight: every completion released


def test_wb_of_only_looks_up_unless_asked_to_create():
    model, clock = make()
    disk = model.add_disk("vda", 100 * MiB)
    cg = model.create_memcg("cg")
    assert model.wb_of(cg, disk) is None and model.wbs == {}
    wb = model.wb_of(cg, disk, create=True)
    assert wb.memcg is cg and model.wb_of(cg, disk) is wb
    with pytest.raises(ValueError) as info:
        model.wb_of(_other(model), disk)
    assert str(info.value) == "memcg must be a memcg of this model"


# -- the series' flush work: each outcome counted once per work, and the request it makes ----------------------
def two_recorders(mechanism: str = "bdev-devt", io=None):
    clock = SimulatedClock(HZ)
    model = WritebackModel(mechanism=mechanism, clock=clock,
                           workqueue_factory=lambda: SimulatedWorkqueue(io=io or (lambda r: r.write(r.nr_pages))))
    disk = model.add_disk("vda", 100 * MiB)
    dev = model.add_block_device(mkdev(8, 0), disk)
    model.open_device(dev)
    model.dirty_pages(dev.mapping, 1, model.root)           # root's wb owns the bdev inode
    wbs = []
    for name in ("a", "b"):
        cg = model.create_memcg(name)
        own = model.create_inode(disk, f"{name}/files")
        model.dirty_pages(own, 1, cg)
        model.dirty_pages(dev.mapping, 2, cg)
        wbs.append(own.wb)
    return model, dev, wbs


def flush_both(model, wbs) -> None:
    for wb in wbs:
        assert model.flush_foreign(wb) == 1
    model.workqueue.step()
    model.workqueue.drain()


def test_each_skipped_bdev_flush_is_counted_once_per_work():
    model, dev, wbs = two_recorders()
    model.close_device(dev)
    flush_both(model, wbs)
    assert model.stats.bdev_skipped_closed == 2
    model, dev, wbs = two_recorders()
    with dev.open_mutex:                                    # held by an opener: mutex_trylock fails
        flush_both(model, wbs)
    assert model.stats.bdev_skipped_busy == 2 and dev.mapping.dirty == 5
    model, dev, wbs = two_recorders()
    model.remove_block_device(dev.dev_t)
    flush_both(model, wbs)
    assert model.stats.bdev_skipped_absent == 2 and model.stats.bdev_flushes_run == 2


def test_flushes_of_a_reused_dev_t_are_each_counted_stale_with_the_pages_they_wrote():
    model, dev, wbs = two_recorders()
    model.remove_block_device(dev.dev_t)
    new = model.add_block_device(dev.dev_t, dev.disk)
    model.open_device(new)
    model.dirty_pages(new.mapping, 3, model.root)
    flush_both(model, wbs)
    s = model.stats
    assert (s.bdev_stale_flushes, s.bdev_stale_pages, s.bdev_flushes_wrote, s.bdev_flush_pages) == (2, 3, 1, 3)


def test_a_bdev_flush_asks_to_write_its_mapping_as_normal_io_capped_by_what_is_dirty():
    seen = []

    def io(request):
        seen.append((request.target, request.nr_pages, request.io_class, request.available()))
        assert request.write(0) == 0
        with pytest.raises(ValueError) as info:
            request.write(-1)
        assert str(info.value) == "n must be in [0, inf), got -1"
        return request.write(request.nr_pages)

    model, dev, wbs = two_recorders(io=io)
    flush_both(model, wbs)
    assert seen == [("bdev:8:0#1", 5, "normal", 5), ("bdev:8:0#1", 0, "normal", 0)]
    assert dev.mapping.written_by_reason == {"bdev_flush": 5}


def test_bdev_records_count_each_outcome_once_and_keep_the_dev_t_after_a_flush():
    t = WritebackTunables(hz=HZ)
    records = ForeignBdevRecords(3)
    assert [records.track(d, 1000, t)[0] for d in (1, 2, 9)] == ["recorded"] * 3
    outcomes = [records.track(1, now, t, generation=g)[0] for g, now in enumerate((1001, 1002, 1101, 1202), 1)]
    assert outcomes == ["unchanged", "unchanged", "stamped", "stamped"] and records.slots[0].generation == 4
    due = records.take_due(1300, t)
    assert [s.dev_t for s in due] == [1, 2, 9] and records.stats.flushes == 3
    assert [records.track(d, 1300, t)[0] for d in (3, 4)] == ["dropped"] * 2     # all in flight
    for slot in due:
        assert records.complete(slot) is None
    assert records.recorded() == [1, 2, 9]                 # the series remembers the dev_t, consumed
    assert [records.track(d, 1400, t)[0] for d in (3, 4)] == ["replaced"] * 2
    records.track(3, 1400, t)
    assert len(records.take_due(1500, t)) == 2 and records.stats.flushes == 5
    stats = records.stats
    assert (stats.recorded, stats.unchanged, stats.stamped, stats.replaced, stats.dropped) == (3, 3, 2, 2, 2)


def test_a_dead_memcg_or_a_released_device_drops_each_dirtying():
    t = WritebackTunables(hz=HZ)

    class Gone:
        def tryget(self) -> bool:
            return False

    pinning = ForeignBdevRecords(hold_reference=True)
    assert [pinning.track(5, now, t, device=Gone())[0] for now in (1, 2)] == ["dropped"] * 2
    assert pinning.stats.dropped == 2 and pinning.recorded() == []
    dead = ForeignBdevRecords()
    dead.release_all()
    assert [dead.track(5, now, t)[0] for now in (1, 2)] == ["dropped"] * 2 and dead.stats.dropped == 2


def test_pinning_records_key_on_the_device_object_and_hand_back_what_they_evict():
    t = WritebackTunables(hz=HZ)

    class Device:
        def tryget(self) -> bool:
            return True

    old, new = Device(), Device()
    records = ForeignBdevRecords(2, hold_reference=True)
    assert records.track(5, 1000, t, device=old) == ("recorded", None)
    assert records.track(5, 1001, t, device=old) == ("unchanged", None)
    assert records.track(5, 1002, t, device=new) == ("recorded", None)   # the dev_t's next incarnation
    assert records.track(6, 1003, t, device=Device())[0] == "replaced"
    assert [s.device for s in records.slots].count(old) == 0
    single = ForeignBdevRecords(1, hold_reference=True)
    single.track(5, 1000, t, device=old)
    assert single.track(6, 1001, t, device=new) == ("replaced", old)       # the caller puts it
    (slot,) = single.take_due(1002, t)
    assert single.complete(slot) is new and single.recorded() == [] and slot.dev_t == 0


def test_evicted_pins_are_put_deferred_and_counted_each_time():
    clock = SimulatedClock(HZ)
    model = WritebackModel(mechanism="bdev-ref", clock=clock, bdev_slots=1,
                           workqueue_factory=lambda: SimulatedWorkqueue(io=lambda r: r.write(r.nr_pages)))
    disk = model.add_disk("vda", 100 * MiB)
    a = model.add_block_device(mkdev(8, 0), disk)
    b = model.add_block_device(mkdev(8, 16), disk)
    for dev in (a, b):
        model.dirty_pages(dev.mapping, 1, model.root)
    cg = model.create_memcg("cg")
    for dev in (b, a, b):
        clock.advance(1)                                    # the older record is the one replaced
        model.dirty_pages(dev.mapping, 1, cg)
    assert model.stats.deferred_device_puts == 2            # b evicted by a, a by b
    assert (a.refs, b.refs) == (1, 2)
    model.remove_block_device(a.dev_t)
    assert a.released and model.stats.deferred_device_puts == 2     # a plain put is not deferred


def test_a_device_is_released_once_when_its_last_reference_goes_and_says_when():
    released = []
    dev = BlockDevice(mkdev(8, 0), Disk(1, "d", 1.0), 1, None)
    dev.on_release = released.append
    dev.get()
    assert dev.put() is False and not dev.released
    assert dev.put() is True and released == [dev] and dev.released_at == 0     # no clock: time 0
    with pytest.raises(RuntimeError) as info:
        dev.put()
    assert str(info.value) == "device 0x800000 released twice" and dev.refs == 0
    model, clock = make()
    disk = model.add_disk("vda", 100 * MiB)
    dev = model.add_block_device(mkdev(8, 0), disk)
    clock.advance(7)
    model.remove_block_device(dev.dev_t)
    assert dev.released_at == clock.now()


# -- mem_cgroup_flush_foreign: what one call issues and counts ----------------------------------------------
def two_foreign_devices(mechanism: str):
    model, clock = make(mechanism)
    disk = model.add_disk("vda", 100 * MiB)
    other = model.add_disk("vdb", 100 * MiB)
    devs = [model.add_block_device(mkdev(8, 0), disk), model.add_block_device(mkdev(8, 16), other)]
    for dev in devs:
        model.open_device(dev)
        model.dirty_pages(dev.mapping, 1, model.root)       # root's wbs own both bdev inodes
    cg = model.create_memcg("cg")
    own = model.create_inode(disk, "cg/files")
    model.dirty_pages(own, 1, cg)
    for dev in devs:
        model.dirty_pages(dev.mapping, 2, cg)
    return model, cg, own.wb, devs


@pytest.mark.parametrize("mechanism", ["owner-wb", "bdev-devt"])
def test_one_foreign_flush_issues_one_flush_per_recent_record_and_names_its_issuer(mechanism):
    model, cg, wb, devs = two_foreign_devices(mechanism)
    assert model.flush_foreign(wb) == 2 and model.flush_foreign(wb) == 0   # consumed
    assert model.stats.foreign_flush_calls == 2
    if mechanism == "owner-wb":
        assert [w.issuer for dev in devs for w in dev.mapping.wb.works] == ["cg", "cg"]
        assert model.stats.owner_wb_flushes == 2
    else:
        assert model.stats.bdev_flushes_queued == 2


def test_a_flush_the_closed_workqueue_refuses_idles_its_slot_and_drops_the_memcg_reference():
    model, cg, wb, devs = two_foreign_devices("bdev-devt")
    model.shutdown()
    assert model.flush_foreign(wb) == 0
    assert model.stats.bdev_flush_queue_failed == 2 and model.stats.bdev_flushes_queued == 0
    assert not any(slot.in_flight for slot in cg.foreign_bdev.slots)
    model.destroy_memcg(cg)
    assert cg.freed                                         # no reference leaked by the failed queueing


def test_every_record_of_a_memcg_that_dies_before_its_flushes_are_queued_lets_go_of_its_device():
    model, cg, wb, devs = two_foreign_devices("bdev-ref")
    records = cg.foreign_bdev
    assert [dev.refs for dev in devs] == [2, 2]
    take_due = records.take_due

    def take_due_then_die(now, tunables):
        due = take_due(now, tunables)
        model.destroy_memcg(cg)
        return due

    records.take_due = take_due_then_die
    assert model.flush_foreign(wb) == 0
    assert cg.freed and not any(slot.in_flight for slot in records.slots)
    assert [dev.refs for dev in devs] == [1, 1]


def test_a_completion_released_once_refuses_another_put_with_its_reason():
    done = WbCompletion()
    done.get()
    done.drop_owner()
    assert done.put() is True and done.released
    with pytest.raises(RuntimeError) as info:
        done.put()
    assert str(info.value) == "wb completion released twice" and done.count == 0


def test_a_record_remembers_which_incarnation_of_its_dev_t_it_saw():
    model, cg, wb, devs = two_foreign_devices("bdev-devt")
    model.remove_block_device(devs[0].dev_t)
    new = model.add_block_device(devs[0].dev_t, devs[0].disk)
    model.dirty_pages(new.mapping, 1, model.root)
    model.dirty_pages(new.mapping, 1, cg)
    assert [s.generation for s in cg.foreign_bdev.slots[:2]] == [new.generation, devs[1].generation]
    assert new.generation == 3


def test_cancelled_pinning_flushes_are_each_counted_and_put_their_devices():
    model, cg, wb, devs = two_foreign_devices("bdev-ref")
    assert model.flush_foreign(wb) == 2
    model.destroy_memcg(cg)                                 # cancels both pending works
    assert model.stats.bdev_flush_cancelled == 2
    assert [dev.refs for dev in devs] == [1, 1] and cg.freed


def test_record_set_sizes_and_hooks_are_checked_with_their_range():
    for make_records, message in ((lambda: ForeignWbRecords(65), "slots must be in [1, 64], got 65"),
                                  (lambda: ForeignWbRecords(0), "slots must be in [1, 64], got 0"),
                                  (lambda: ForeignBdevRecords(65), "capacity must be in [1, 64], got 65")):
        with pytest.raises(ValueError) as info:
            make_records()
        assert str(info.value) == message
    assert len(ForeignWbRecords(64).slots) == 64 and len(ForeignWbRecords(1).slots) == 1
    for make_records, message in ((lambda: ForeignBdevRecords(hold_reference=1),
                                   "hold_reference must be a bool, got int"),
                                  (lambda: WbCompletion("x"), "on_release must be callable or None, got str")):
        with pytest.raises(TypeError) as info:
            make_records()
        assert str(info.value) == message
    assert WbCompletion().released is False


def test_a_stamp_taken_at_jiffies_zero_is_one_and_owner_wb_flushes_are_counted_over_calls():
    t = WritebackTunables(hz=HZ)
    records = ForeignWbRecords()
    records.track(1, 1, 0, t)
    assert records.slots[0].at == 1
    assert len(records.take_due(1, t)) == 1
    records.track(1, 1, 2 * HZ, t)
    assert len(records.take_due(2 * HZ, t)) == 1 and records.stats.flushes == 2


def test_pinned_removed_devices_and_devices_closed_before_the_trylock_are_each_skipped_once_per_work():
    model, dev, wbs = two_recorders("bdev-ref")
    model.remove_block_device(dev.dev_t)
    flush_both(model, wbs)
    assert model.stats.bdev_skipped_removed == 2 and dev.released

    model, dev, wbs = two_recorders()
    real = dev.open_mutex

    class ClosedMeanwhile:
        """The last close runs between a work's openers check and its trylock (a race the work re-checks), and
        the device is opened again once the work lets go of the mutex."""

        def acquire(self, blocking: bool = True) -> bool:
            dev.openers = 0
            return real.acquire(blocking)

        def release(self) -> None:
            real.release()
            dev.openers = 1

    dev.open_mutex = ClosedMeanwhile()
    flush_both(model, wbs)
    assert model.stats.bdev_skipped_closed == 2 and dev.mapping.dirty == 5 and not real.locked()
