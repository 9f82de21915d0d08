"""Behaviours of the writeback model that mutation testing (``make mutate``, docs/robustness.md) found unchecked.

Each test states one rule of the model; the mutants it kills are listed in docs/robustness.md. The flusher's
rules are the kernel's (docs/design.md; fs/fs-writeback.c ``wb_do_writeback``, ``wb_check_old_data_flush``,
``wb_check_background_flush``; mm/backing-dev.c ``wb_wakeup_delayed``; mm/page-writeback.c
``wb_over_bg_thresh`` and ``wb_update_write_bandwidth``).
"""
from __future__ import annotations

import pytest

from pybcache.writeback import (ENOENT, PAGE_SIZE, BlockDevice, DirtyDomain, Disk, ForeignBdevRecords,
                                ForeignWbRecords, SimulatedClock, SimulatedWorkqueue, Throttle, WbCompletion,
                                WritebackModel, WritebackTunables, WritebackWork, jiffies_add, mkdev)

MiB = 1 << 20
HZ = 100
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


def test_a_released_device_cannot_be_pinned_again():
    model, clock = make("bdev-ref")
    disk = model.add_disk("vda", 100 * MiB)
    dev = model.add_block_device(mkdev(8, 0), disk)
    model.remove_block_device(dev.dev_t)
    assert dev.released and dev.refs == 0
    assert dev.tryget() is False and dev.refs == 0


def test_the_simulated_clock_advances_by_0_to_2_63_minus_1_jiffies():
    clock = SimulatedClock(HZ, start=0)
    assert clock.advance(0) == 0
    assert clock.advance((1 << 63) - 1) == (1 << 63) - 1
    for bad, exc, message in (("1", TypeError, "jiffies must be an int in [0, 9223372036854775807], got str"),
                              (-1, ValueError, "jiffies must be in [0, 9223372036854775807], got -1"),
                              (1 << 63, ValueError, "jiffies must be in [0, 9223372036854775807], got "
                                                    "9223372036854775808")):
        with pytest.raises(exc) as info:
            clock.advance(bad)
        assert str(info.value) == message
    assert clock.elapsed_jiffies == (1 << 63) - 1


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


def test_the_monotonic_clock_counts_hz_ticks_of_host_time_from_its_start_across_the_wrap(monkeypatch):
    import pybcache.writeback.jiffies as jiffies_module
    host = iter([100.0, 100.5, 102.0])
    monkeypatch.setattr(jiffies_module.time, "monotonic", lambda: next(host))
    clock = jiffies_module.MonotonicClock(start=(1 << 64) - 10)
    assert clock.hz == 250
    assert clock.now() == 125 - 10                          # half a second at HZ 250, wrapped
    assert clock.now() == 500 - 10
    monkeypatch.undo()
    default = jiffies_module.MonotonicClock(1)
    assert default.start == jiffies_module.initial_jiffies(1)
    assert jiffies_module.MonotonicClock(start=0).start == 0
    for kwargs, exc, message in (({"hz": 0}, ValueError, "hz must be in [1, 100000], got 0"),
                                 ({"hz": "1"}, TypeError, "hz must be an int in [1, 100000], got str"),
                                 ({"start": -1}, ValueError, "start must be in [0, 18446744073709551615], got -1"),
                                 ({"start": 1 << 64}, ValueError,
                                  "start must be in [0, 18446744073709551615], got 18446744073709551616")):
        with pytest.raises(exc) as info:
            jiffies_module.MonotonicClock(**kwargs)
        assert str(info.value) == message


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
