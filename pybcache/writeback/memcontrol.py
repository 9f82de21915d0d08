"""Per-memcg records of foreign dirtying (mm/memcontrol.c): the kernel's four owner-wb slots and the v6
series' dev_t set.

Models the slot logic of ``mem_cgroup_track_foreign_dirty_slowpath`` (find the (bdi id, memcg id) slot or
the oldest idle one, refresh its stamp lazily) and the slot scan of ``mem_cgroup_flush_foreign`` (consume every
recent idle slot), plus ``struct wb_completion``'s in-flight count (include/linux/backing-dev-defs.h, released
by ``finish_writeback_work`` in fs/fs-writeback.c). What a flush then does is the model's
(:mod:`.memcg_writeback`); this module imports nothing of the model, so the model's modules import it and
never the other way round.

* :class:`ForeignWbRecords` keeps what the kernel keeps per memcg in its ``memcg_cgwb_frn`` array (the
  name to search the kernel for): four slots keyed by (bdi id, owner memcg id), each with a lazily
  refreshed stamp and a :class:`WbCompletion` whose count is 1 while no flush is in flight.
* :class:`ForeignBdevRecords` is the series' bounded set of block-device numbers in preallocated slots. With
  ``hold_reference=False`` (the series) a slot remembers only the dev_t; with ``hold_reference=True`` (the
  reviewer's alternative) it pins the device object until a flush consumes the record.

Both use the same stamp rules, so the mechanisms differ only in what a flush does. Stamps are 64-bit jiffies;
0 means "expired or consumed" and a live stamp is never 0 (a stamp taken when the counter reads 0 becomes 1),
so the sentinel stays unambiguous when the counter wraps. The kernel updates these slots locklessly and
accepts lost updates; each record set here has a lock so that tests can assert exact accounting.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Callable, Generic, Optional, Protocol, TypeVar

from ..validate import check_bool, check_callable, check_int
from .jiffies import WritebackTunables, jiffies_add, time_after, time_before
from .workqueue import WorkItem

__all__ = ["EXPIRED", "WbCompletion", "ForeignWbSlot", "ForeignWbRecords", "BdevSlot", "ForeignBdevRecords",
           "TrackOutcome", "DEFAULT_FOREIGN_SLOTS", "ForeignRecordStats", "PinnableDevice"]

EXPIRED = 0
DEFAULT_FOREIGN_SLOTS = 4  # the kernel's slot count per memcg


class PinnableDevice(Protocol):
    """What a reference-holding record needs of a device: a reference taken unless it is already released
    (the model's :class:`~pybcache.writeback.entities.BlockDevice`)."""

    def tryget(self) -> bool: ...


DeviceT = TypeVar("DeviceT", bound=PinnableDevice)


class TrackOutcome:
    """What recording one foreign dirtying did to a record set."""

    STAMPED = "stamped"      # an existing record's stamp was refreshed
    UNCHANGED = "unchanged"  # an existing record was recent enough: lazy, nothing written
    RECORDED = "recorded"    # an empty slot was filled
    REPLACED = "replaced"    # the oldest idle record was overwritten
    DROPPED = "dropped"      # every slot is in flight: the event is lost


def _stamp(now: int) -> int:
    """A live stamp for ``now``: never the EXPIRED sentinel."""
    return now if now != EXPIRED else 1


def _older(at: int, than: int) -> bool:
    """True if stamp ``at`` is before the time ``than``; EXPIRED is older than any time."""
    return at == EXPIRED or time_before(at, than)


def _older_candidate(at: int, oldest_at: int) -> bool:
    """The replacement scan: is ``at`` older than the best candidate's stamp ``oldest_at`` (which may itself
    be EXPIRED)? Not strictly older than an equal stamp, so among empty slots the first one wins."""
    if oldest_at == EXPIRED:
        return False
    return _older(at, oldest_at)


class WbCompletion:
    """An in-flight counter that starts at 1, the owner's own reference (the kernel's ``wb_completion``).

    Queueing a flush adds one, finishing it removes one; the count is 1 exactly when nothing is in flight.
    The owner never waits: when it goes away it drops its reference instead, and whoever takes the count to 0
    releases the completion. Invariant: release happens exactly once, and no count changes after it.

    :param on_release: called once, outside the lock, when the count reaches 0.
    """

    __slots__ = ("_lock", "_count", "_released", "_owner_dropped", "_on_release")

    def __init__(self, on_release: Callable[[], None] | None = None) -> None:
        check_callable(on_release, "on_release", allow_none=True)
        self._lock = threading.Lock()
        self._count = 1
        self._released = False
        self._owner_dropped = False
        self._on_release = on_release

    @property
    def count(self) -> int:
        """The current count (1 = idle while the owner lives)."""
        return self._count

    @property
    def idle(self) -> bool:
        """True if no flush holds the completion."""
        return self._count == 1 and not self._owner_dropped

    @property
    def released(self) -> bool:
        """True once the count reached 0."""
        return self._released

    def get(self) -> None:
        """A flush was queued against this completion.

        :raises RuntimeError: if the completion was already released.
        """
        with self._lock:
            if self._released:
                raise RuntimeError("wb completion used after release")
            self._count += 1

    def put(self) -> bool:
        """A flush finished. Returns True if this released the completion.

        :raises RuntimeError: on a put without a matching get (the count would go below 0).
        """
        return self._drop(owner=False)

    def drop_owner(self) -> bool:
        """The owner (a dying memcg) gives up its reference without waiting; idempotent.

        :returns: True if this released the completion.
        """
        return self._drop(owner=True)

    def _drop(self, *, owner: bool) -> bool:
        with self._lock:
            if owner:
                if self._owner_dropped:
                    return False
                self._owner_dropped = True
            if self._count <= 0 or self._released:
                raise RuntimeError("wb completion released twice")
            self._count -= 1
            release = self._count == 0
            if release:
                self._released = True
        if release and self._on_release is not None:
            self._on_release()
        return release


@dataclass
class ForeignWbSlot:
    """One owner-wb record: which (bdi, memcg) writeback this memcg's pages were dirtied against, and when."""

    bdi_id: int = 0
    memcg_id: int = 0
    at: int = EXPIRED
    done: WbCompletion = field(default_factory=WbCompletion)

    @property
    def in_flight(self) -> bool:
        """True while a flush issued from this slot has not finished."""
        return not self.done.idle


@dataclass
class ForeignRecordStats:
    """Counters of one record set."""

    stamped: int = 0
    unchanged: int = 0
    recorded: int = 0
    replaced: int = 0
    dropped: int = 0
    flushes: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


class ForeignWbRecords:
    """The kernel's owner-wb foreign records of one memcg.

    Invariants: at most one record per (bdi_id, memcg_id); a record with a flush in flight is never replaced
    and never flushed again until that flush finishes; a flush consumes a record (stamp set to EXPIRED) and
    only a new foreign dirtying re-arms it.

    :param slots: number of slots, 1..64; default 4 (the kernel's).
    :param on_release: called when a slot's completion is released (after the memcg dropped it and the last
        flush finished).
    """

    def __init__(self, slots: int = DEFAULT_FOREIGN_SLOTS, *,
                 on_release: Callable[[], None] | None = None) -> None:
        slots = check_int(slots, "slots", 1, 64)
        self._lock = threading.Lock()
        self.slots = [ForeignWbSlot(done=WbCompletion(on_release)) for _ in range(slots)]
        self.stats = ForeignRecordStats()

    def track(self, bdi_id: int, memcg_id: int, now: int, tunables: WritebackTunables) -> str:
        """Record that one of this memcg's pages was dirtied against writeback (bdi_id, memcg_id).

        :param bdi_id: the disk's bdi id (>= 1).
        :param memcg_id: the owner wb's memcg id (>= 1).
        :param now: the current jiffies.
        :param tunables: gives the lazy-update interval (min(1 s, expire/8)).
        :returns: one of the :class:`TrackOutcome` values.
        """
        check_int(bdi_id, "bdi_id", 1)
        check_int(memcg_id, "memcg_id", 1)
        return self._track(bdi_id, memcg_id, now, tunables)

    def _track(self, bdi_id: int, memcg_id: int, now: int, tunables: WritebackTunables) -> str:
        """:meth:`track` without the argument checks (the model passes ids it made)."""
        update_interval = tunables.foreign_update_interval
        with self._lock:
            oldest: ForeignWbSlot | None = None
            oldest_at = _stamp(now)
            match: ForeignWbSlot | None = None
            for slot in self.slots:
                if slot.bdi_id == bdi_id and slot.memcg_id == memcg_id:
                    match = slot
                    break
                if _older_candidate(slot.at, oldest_at) and slot.done.idle:
                    oldest, oldest_at = slot, slot.at
            if match is not None:
                if _older(match.at, jiffies_add(now, -update_interval)):
                    match.at = _stamp(now)
                    self.stats.stamped += 1
                    return TrackOutcome.STAMPED
                self.stats.unchanged += 1
                return TrackOutcome.UNCHANGED
            if oldest is None:
                self.stats.dropped += 1
                return TrackOutcome.DROPPED
            outcome = TrackOutcome.RECORDED if oldest.bdi_id == 0 else TrackOutcome.REPLACED
            oldest.bdi_id, oldest.memcg_id, oldest.at = bdi_id, memcg_id, _stamp(now)
            if outcome == TrackOutcome.RECORDED:
                self.stats.recorded += 1
            else:
                self.stats.replaced += 1
            return outcome

    def take_due(self, now: int, tunables: WritebackTunables) -> list[ForeignWbSlot]:
        """Consume every record stamped within the foreign window (30 s) whose slot is idle.

        The caller issues one flush per returned slot against ``slot.done``.
        """
        window = tunables.foreign_window
        due: list[ForeignWbSlot] = []
        with self._lock:
            for slot in self.slots:
                if (slot.at != EXPIRED and time_after(slot.at, jiffies_add(now, -window))
                        and slot.done.idle):
                    slot.at = EXPIRED
                    due.append(slot)
            self.stats.flushes += len(due)
        return due

    def drop_owner(self) -> int:
        """The memcg is going away: drop its reference on every slot's completion, never waiting.

        :returns: how many completions this released at once (those with nothing in flight).
        """
        return sum(1 for slot in self.slots if slot.done.drop_owner())


@dataclass(eq=False)
class BdevSlot(Generic[DeviceT]):
    """One preallocated foreign-bdev slot.

    ``dev_t`` 0 means empty. ``device`` is set only by the reference-holding alternative. ``generation``
    is measurement only (which incarnation of the dev_t was last recorded): the mechanism never reads it.
    """

    index: int
    dev_t: int = 0
    at: int = EXPIRED
    in_flight: bool = False
    device: Optional[DeviceT] = None
    generation: int = 0
    work: Optional[WorkItem] = None


class ForeignBdevRecords(Generic[DeviceT]):
    """A memcg's bounded set of foreign block devices (the v6 series), or the reviewer's variant.

    Invariants: at most one slot per dev_t (per device object when holding references); a slot whose flush
    work is queued or running (``in_flight``) is neither replaced nor queued again; with
    ``hold_reference=True`` every slot that names a device holds exactly one reference on it, dropped when the
    record is consumed, replaced or the memcg dies.

    :param capacity: number of preallocated slots, 1..64; default 4.
    :param hold_reference: pin the device object while it is recorded (the reviewer's alternative).
    """

    def __init__(self, capacity: int = DEFAULT_FOREIGN_SLOTS, *, hold_reference: bool = False) -> None:
        capacity = check_int(capacity, "capacity", 1, 64)
        check_bool(hold_reference, "hold_reference")
        self.lock = threading.Lock()
        self.hold_reference = hold_reference
        self.slots: list[BdevSlot[DeviceT]] = [BdevSlot(index=i) for i in range(capacity)]
        self.stats = ForeignRecordStats()
        self.dead = False

    def track(self, dev_t: int, now: int, tunables: WritebackTunables, *,
              device: Optional[DeviceT] = None, generation: int = 0) -> tuple[str, Optional[DeviceT]]:
        """Record that this memcg dirtied a page of the block device ``dev_t``.

        With ``hold_reference`` the record takes a reference on ``device`` (required then). A replaced record's
        reference is not dropped under the record lock: the evicted device is returned and the caller puts it
        (dropping the last reference may sleep in the kernel, which the reviewer's design has to allow for).

        :returns: (one of the :class:`TrackOutcome` values, the evicted device to put or None).
        """
        check_int(dev_t, "dev_t", 1, (1 << 32) - 1)
        if self.hold_reference and device is None:
            raise ValueError("device is required when records hold references")
        return self._track(dev_t, now, tunables, device, generation)

    def _track(self, dev_t: int, now: int, tunables: WritebackTunables, device: Optional[DeviceT],
               generation: int) -> tuple[str, Optional[DeviceT]]:
        """:meth:`track` without the argument checks (the model passes a registered device's dev_t, and the
        device itself when records hold references)."""
        update_interval = tunables.foreign_update_interval
        with self.lock:
            if self.dead:
                self.stats.dropped += 1
                return TrackOutcome.DROPPED, None
            match: BdevSlot[DeviceT] | None = None
            oldest: BdevSlot[DeviceT] | None = None
            oldest_at = _stamp(now)
            for slot in self.slots:
                same = slot.device is device if self.hold_reference else slot.dev_t == dev_t
                if same and slot.dev_t != 0:
                    match = slot
                    break
                if _older_candidate(slot.at, oldest_at) and not slot.in_flight:
                    oldest, oldest_at = slot, slot.at
            if match is not None:
                match.generation = generation
                if _older(match.at, jiffies_add(now, -update_interval)):
                    match.at = _stamp(now)
                    self.stats.stamped += 1
                    return TrackOutcome.STAMPED, None
                self.stats.unchanged += 1
                return TrackOutcome.UNCHANGED, None
            if oldest is None:
                self.stats.dropped += 1
                return TrackOutcome.DROPPED, None
            if self.hold_reference:
                assert device is not None
                if not device.tryget():      # already released: nothing left to pin
                    self.stats.dropped += 1
                    return TrackOutcome.DROPPED, None
            outcome = TrackOutcome.RECORDED if oldest.dev_t == 0 else TrackOutcome.REPLACED
            evicted = oldest.device
            if self.hold_reference:
                oldest.device = device
            oldest.dev_t, oldest.at, oldest.generation = dev_t, _stamp(now), generation
            if outcome == TrackOutcome.RECORDED:
                self.stats.recorded += 1
            else:
                self.stats.replaced += 1
            return outcome, evicted

    def take_due(self, now: int, tunables: WritebackTunables) -> list[BdevSlot[DeviceT]]:
        """Consume every record stamped within the foreign window whose slot has no work in flight, and mark
        those slots in flight. The caller queues each slot's work, and calls :meth:`abort` if queueing fails."""
        window = tunables.foreign_window
        due: list[BdevSlot[DeviceT]] = []
        with self.lock:
            if self.dead:
                return due
            for slot in self.slots:
                if (slot.dev_t != 0 and slot.at != EXPIRED and not slot.in_flight
                        and time_after(slot.at, jiffies_add(now, -window))):
                    slot.at = EXPIRED
                    slot.in_flight = True
                    due.append(slot)
            self.stats.flushes += len(due)
        return due

    def abort(self, slot: BdevSlot[DeviceT]) -> Optional[DeviceT]:
        """``slot`` was taken by :meth:`take_due` but its work will not run (queueing failed, or the memcg
        died before its reference could be taken): the slot is idle again and its record stays consumed.
        As in :meth:`complete`, with references a consumed record, or any record of a dead memcg (whose
        :meth:`release_all` left this in-flight slot alone), lets go of its device, returned for the caller
        to put; otherwise the dead memcg's record would pin the device for good."""
        return self.complete(slot)

    def complete(self, slot: BdevSlot[DeviceT]) -> Optional[DeviceT]:
        """``slot``'s work finished or was cancelled. With references, a consumed record (or any record of a
        dead memcg) lets go of its device, which is returned for the caller to put."""
        with self.lock:
            slot.in_flight = False
            if self.hold_reference and (slot.at == EXPIRED or self.dead):
                device, slot.device = slot.device, None
                slot.dev_t = 0
                return device
        return None

    def release_all(self) -> list[DeviceT]:
        """The memcg dies: no more tracking; returns the devices of idle slots for the caller to put (slots
        with a work in flight let go in :meth:`complete`)."""
        devices: list[DeviceT] = []
        with self.lock:
            self.dead = True
            for slot in self.slots:
                if not slot.in_flight and slot.device is not None:
                    devices.append(slot.device)
                    slot.device = None
                    slot.dev_t = 0
        return devices

    def recorded(self) -> list[int]:
        """The dev_t values currently recorded (a snapshot)."""
        with self.lock:
            return [slot.dev_t for slot in self.slots if slot.dev_t != 0]
