"""The foreign records: the kernel's four owner-wb slots (D.2-D.5) and the series' dev_t set."""
from __future__ import annotations

import pytest

from pybcache.writeback import (EXPIRED, JIFFIES_MASK, ForeignBdevRecords, ForeignWbRecords, TrackOutcome,
                                WbCompletion, WritebackTunables, jiffies_add)

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
