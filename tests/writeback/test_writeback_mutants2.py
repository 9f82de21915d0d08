"""More behaviours of the writeback model that mutation testing (``make mutate``, docs/robustness.md) found
unchecked: the second pass over the survivors of ``model.py``, ``fs_writeback.py``, ``entities.py`` and
``jiffies.py`` (issue #16).

Each test states one rule: an argument is refused by name with its type or range and nothing changes, the
bounds themselves are accepted, a valid call builds or hands on what it says, and a flush work writes in
chunks, inodes in turn, and only what its reason allows (docs/design.md; fs/fs-writeback.c
``writeback_sb_inodes``, ``wb_do_writeback``). The mutants each test kills are listed in docs/robustness.md
("The writeback model").
"""
from __future__ import annotations

import pytest

from pybcache.writeback import (PAGE_SIZE, BlockDevice, Disk, Inode, SimulatedClock, SimulatedWorkqueue, Writeback,
                                WritebackModel, WritebackTunables, WritebackWork, initial_jiffies, jiffies_add,
                                jiffies_diff, mkdev, msecs_to_jiffies, time_after)
from pybcache.writeback.workqueue import WorkItem

MiB = 1 << 20
HZ = 100


def make(mechanism: str = "owner-wb", *, pages: int = 1 << 20, **kw) -> WritebackModel:
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
    model = make()
    raises(lambda: model.add_disk("vda", 0), ValueError, "bandwidth must be in (0, inf), got 0")
    raises(lambda: model.add_disk("vda", "fast"), TypeError, "bandwidth must be a number in (0, inf), got str")
    assert model.disks == {}
    assert model.add_disk("vda", 0.5).bandwidth == 0.5


def test_a_memcg_needs_an_online_memcg_of_this_model_as_parent_and_a_bounded_memory_max():
    model = make()
    raises(lambda: model.create_memcg("cg", parent="root"), TypeError, "parent must be a Memcg, got str")
    raises(lambda: model.create_memcg("cg", memory_max=(1 << 60) + PAGE_SIZE), ValueError,
           f"memory_max must be in [{PAGE_SIZE}, {1 << 60}], got {(1 << 60) + PAGE_SIZE}")
    gone = model.create_memcg("gone")
    model.destroy_memcg(gone)
    raises(lambda: model.create_memcg("cg", parent=gone), ValueError, "parent must be online, 'gone' is offline")
    big = model.create_memcg("big", memory_max=1 << 60)
    assert big.memory_max == 1 << 60 and big.parent is model.root


def test_an_inode_is_a_file_labelled_file_by_default_with_its_size_rounded_up_to_whole_pages():
    model = make()
    disk = model.add_disk("vda", MiB)
    f = model.create_inode(disk, "f", size=PAGE_SIZE + 1)
    assert (f.name, f.kind, f.label) == ("f", "file", "file")
    assert f.size_pages == 2 and type(f.size_pages) is int
    assert model.create_inode(disk, "g", size=1).size_pages == 1
    assert model.create_inode(disk, "h", label="log").label == "log"
    raises(lambda: model.create_inode(disk, "z", size=0), ValueError, "size must be in [1, inf), got 0")
    assert [i.name for i in model.inodes] == ["f", "g", "h"]


def test_a_block_device_number_is_a_non_zero_32_bit_dev_t():
    model = make("bdev-devt")
    disk = model.add_disk("vda", MiB)
    raises(lambda: model.add_block_device(1 << 32, disk), ValueError,
           f"dev_t must be in [1, {(1 << 32) - 1}], got {1 << 32}")
    assert model.add_block_device((1 << 32) - 1, disk).dev_t == (1 << 32) - 1


def test_checks_of_entities_name_the_argument_and_refuse_those_of_another_model():
    model = make("bdev-devt")
    other = make("bdev-devt")
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
    model = make()
    f = model.create_inode(model.add_disk("vda", MiB), "f", size=PAGE_SIZE)
    raises(lambda: model.dirty_pages(f, (1 << 40) + 1, model.root), ValueError,
           f"pages must be in [0, {1 << 40}], got {(1 << 40) + 1}")
    raises(lambda: model.dirty_pages(f, 1, "root"), TypeError, "memcg must be a Memcg, got str")
    assert model.dirty_pages(f, 1 << 40, model.root) == 1      # a fixed-size file of one page


def test_writing_takes_zero_or_more_pages_and_a_str_reason_by_name():
    model = make()
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
    model = make("bdev-devt", workqueue_factory=lambda: queue)
    raises(lambda: model.shutdown(drain=1), TypeError, "drain must be a bool, got int")
    raises(lambda: model.shutdown(timeout=-1), ValueError, "timeout must be in [0, inf), got -1")
    assert queue.calls == []
    assert model.shutdown() == 3
    assert model.shutdown(drain=False, timeout=0.5) == 3
    assert queue.calls == [{"drain": True, "timeout": None}, {"drain": False, "timeout": 0.5}]


def test_shutdown_of_a_model_without_a_workqueue_cancels_nothing():
    model = make("owner-wb")
    assert model.workqueue is None and model.shutdown() == 0
    fallback = make("bdev-devt", workqueue_factory=lambda: None)
    assert fallback.workqueue is None and fallback.shutdown(drain=False) == 0


def test_shutdown_drains_by_default_and_cancels_when_told():
    for drain, cancelled, ran in ((None, 0, ["w"]), (False, 1, [])):
        queue = SimulatedWorkqueue(io=lambda r: r.write(r.nr_pages))
        model = make("bdev-devt", workqueue_factory=lambda q=queue: q)
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
    model = make()
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
    model = make("bdev-devt")
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


# -- jiffies.py ------------------------------------------------------------------------------------------------------
def test_stamps_half_the_counter_apart_compare_as_the_later_one_being_earlier():
    half = 1 << 63
    assert jiffies_diff(half, 0) == -half              # (s64)(a - b) of 2**63 is the most negative value
    assert not time_after(half, 0) and not time_after(0, half)   # each is before the other
    assert time_after(1, 0) and not time_after(0, 0)


def test_time_conversions_name_their_arguments_and_the_hz_range():
    raises(lambda: msecs_to_jiffies(-1, 100), ValueError, "msecs must be in [0, inf), got -1")
    raises(lambda: msecs_to_jiffies(1, 100_001), ValueError, "hz must be in [1, 100000], got 100001")
    raises(lambda: initial_jiffies(100_001), ValueError, "hz must be in [1, 100000], got 100001")
    raises(lambda: SimulatedClock(100_001), ValueError, "hz must be in [1, 100000], got 100001")
    raises(lambda: SimulatedClock(100_001, start=0), ValueError, "hz must be in [1, 100000], got 100001")
    raises(lambda: SimulatedClock(100, start=-1), ValueError, f"start must be in [0, {(1 << 64) - 1}], got -1")
    assert msecs_to_jiffies(1, 100_000) == 100 and initial_jiffies(100_000) == (1 << 32) - 30_000_000


def test_the_simulated_clock_runs_at_250_hz_by_default_from_the_start_it_is_given():
    assert SimulatedClock().hz == 250
    clock = SimulatedClock(100, start=5)
    assert clock.start == 5 and clock.now() == 5


@pytest.mark.parametrize("field, lo, hi", [
    ("hz", 1, 100_000),
    ("dirty_expire_centisecs", 1, 10**9),
    ("dirty_writeback_centisecs", 1, 10**9),
    ("dirty_ratio", 1, 100),
    ("dirty_background_ratio", 0, 100),
    ("ratelimit_pages", 1, 1 << 30),
])
def test_each_tunable_is_refused_by_name_outside_its_range_and_taken_at_its_bounds(field, lo, hi):
    raises(lambda: WritebackTunables(**{field: lo - 1}), ValueError, f"{field} must be in [{lo}, {hi}], got {lo - 1}")
    raises(lambda: WritebackTunables(**{field: hi + 1}), ValueError, f"{field} must be in [{lo}, {hi}], got {hi + 1}")
    assert getattr(WritebackTunables(**{field: lo}), field) == lo
    assert getattr(WritebackTunables(**{field: hi}), field) == hi


# -- fs_writeback.py: how a flush work writes ------------------------------------------------------------------------
def started(model: WritebackModel, wb, work: WritebackWork) -> WritebackWork:
    model.wb_queue_work(wb, work)
    assert model.flusher_next_work(wb) is work
    return work


def test_a_work_keeps_to_its_inode_for_a_whole_chunk_across_calls_then_takes_the_next_dirty_one_in_turn():
    model = make(pages=80000)                               # chunks of 2,048 pages (see test_writeback_mutants.py)
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
    model = make(pages=80000)                               # other works take chunks of 2,048 pages
    disk = model.add_disk("vda", 100 * MiB)
    a, b = model.create_inode(disk, "a"), model.create_inode(disk, "b")
    model.dirty_pages(a, 3000, model.root)
    model.dirty_pages(b, 3000, model.root)
    started(model, a.wb, WritebackWork("sync", 6000))
    assert model.writeback_run(a.wb, 3000) == 3000 and (a.written, b.written) == (3000, 0)
    assert model.stats.owner_wb_flush_pages == 0 and a.wb.pages_written == 3000


def test_an_idle_flusher_has_no_demand_and_writes_nothing():
    model = make()
    f = model.create_inode(model.add_disk("vda", MiB), "f")
    model.dirty_pages(f, 3, model.root)
    assert model.writeback_demand(f.wb) == 0 and model.writeback_run(f.wb, 10) == 0 and f.dirty == 3


def test_a_flush_works_demand_is_every_page_dirtied_before_it_started():
    model = make()
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
    model = make()
    f = model.create_inode(model.add_disk("vda", MiB), "f")
    model.dirty_pages(f, 10, model.root)
    work = started(model, f.wb, WritebackWork("foreign_flush", 5))
    assert model.writeback_run(f.wb, 4) == 4
    assert work.remaining == 1 and not work.finished and f.wb.active is work
    assert model.writeback_demand(f.wb) == 1


def test_background_writeback_takes_pages_dirtied_after_it_started_and_yields_to_queued_works():
    model = make(pages=100)                                 # bg_thresh 10 pages
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
    model = make(pages=100)                                 # bg_thresh 10 pages
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
    model = make()
    f = model.create_inode(model.add_disk("vda", MiB), "f")
    model.dirty_pages(f, 2, model.root)
    model.clock.advance(30 * HZ)                            # dirty for the expire interval
    work = model.flusher_next_work(f.wb)
    assert work.reason == "periodic" and model.writeback_demand(f.wb) == 2
    model.wb_queue_work(f.wb, WritebackWork("foreign_flush", 1))
    assert model.writeback_demand(f.wb) == 0


def test_a_periodic_work_continues_on_its_inode_across_calls():
    model = make()
    f = model.create_inode(model.add_disk("vda", MiB), "f")
    model.dirty_pages(f, 3, model.root)
    model.clock.advance(30 * HZ)                            # dirty for the expire interval
    assert model.flusher_next_work(f.wb).reason == "periodic"
    assert [model.writeback_run(f.wb, 1) for _ in range(3)] == [1, 1, 1] and f.dirty == 0


def test_a_flusher_pass_checks_periodic_writeback_once_and_sleeps_after_its_work():
    model = make()
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
    model = make(pages=100)                                 # bg_thresh 10 pages
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
    model = make()
    f = model.create_inode(model.add_disk("vda", MiB), "f")
    model.dirty_pages(f, 100, model.root)
    model.wb_queue_work(f.wb, WritebackWork("foreign_flush", 100))
    assert model.run_writeback_now(f.wb) == 100             # the sample starts here, with these pages
    model.clock.advance(512)                                # a whole period (3 HZ up to a power of two)
    model.dirty_pages(f, 28, model.root)
    model.wb_queue_work(f.wb, WritebackWork("foreign_flush", 28))
    assert model.run_writeback_now(f.wb) == 28
    assert f.wb.avg_write_bandwidth == 128 * HZ / 512
