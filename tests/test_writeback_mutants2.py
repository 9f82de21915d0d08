"""More behaviours of the writeback model that mutation testing (``make mutate``, docs/robustness.md) found
unchecked: the second pass over ``model.py``'s survivors (issue #16).

Each test states one rule of the model's facade: every argument is refused by name with its type or range
(docs/STYLE: bad input names the argument and the allowed range, nothing changed), boundary values are
accepted, and what a valid call builds or hands on. The mutants each test kills are listed in
docs/robustness.md ("The writeback model").
"""
from __future__ import annotations

import pytest

from pybcache.writeback import PAGE_SIZE, SimulatedClock, SimulatedWorkqueue, WritebackModel
from pybcache.writeback.workqueue import WorkItem

MiB = 1 << 20
HZ = 100


def make(mechanism: str = "owner-wb", **kw) -> WritebackModel:
    return WritebackModel(mechanism=mechanism, clock=SimulatedClock(HZ), dirtyable_memory=(1 << 20) * PAGE_SIZE,
                          **kw)


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
