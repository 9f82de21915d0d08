"""dev_t-reuse churn: the series' dev_t records against the reviewer's reference-holding records.

Block devices (loop devices, say) are created, opened, used, closed, removed and re-created with the same
dev_t, over and over, while memcgs dirty their metadata and now and then throttle (which flushes what they
recorded). The two designs pay differently:

* dev_t records hold nothing, so a removed device is released at once, but a record that outlives its
  device may be flushed after the dev_t was reused: the flush then writes the *new* device's mapping, which
  this memcg did not dirty (a stale flush);
* reference-holding records never flush the wrong device, but a removed device stays allocated until every
  record naming it is consumed by a flush, which waits for that memcg's next throttling (or forever).

The comparison runs on simulated time with flush I/O performed instantly (time here is about lifetimes,
not bandwidth), deterministic per seed; both designs see the same device and workload schedule.
"""
from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from typing import Any

from ..validate import check_choice, check_instance, check_int, check_number
from .jiffies import MAX_HZ, SimulatedClock, WritebackTunables, jiffies_diff
from .model import MiB, BlockDevice, WritebackModel, mkdev
from .workqueue import SimulatedWorkqueue

__all__ = ["ChurnScenario", "ChurnResult", "run_churn", "compare_churn", "CHURN_MECHANISMS"]

CHURN_MECHANISMS = ("bdev-devt", "bdev-ref")


@dataclass(frozen=True)
class ChurnScenario:
    """Parameters of the churn workload (all chosen; ``docs/writeback.md`` explains them).

    :param devices: dev_t values cycled (loop devices 7:0, 7:1, ...).
    :param cgroups: memcgs dirtying metadata on whichever devices are open.
    :param idle_cgroups: how many of them stop dirtying after ``idle_after`` seconds and throttle only rarely
        (the reviewer's worry: a memcg that does not enter throttling for a long time never consumes its
        records).
    :param idle_after: seconds after which the idle memcgs stop dirtying.
    :param duration: simulated seconds.
    :param lifetime_min, lifetime_max: seconds a device stays open between creation and close.
    :param gap_min, gap_max: seconds between removal and re-creation with the same dev_t.
    :param mutex_hold: seconds ``open_mutex`` is held while a device opens or closes.
    :param ops_rate: metadata operations per second per memcg; each dirties ``pages_per_op`` pages.
    :param throttle_interval: mean seconds between throttling events of a busy memcg (Poisson).
    :param idle_throttle_interval: the same for the idle memcgs.
    :param bdev_slots: dev_t slots per memcg.
    """

    devices: int = 4
    cgroups: int = 4
    idle_cgroups: int = 1
    idle_after: float = 20.0
    duration: float = 120.0
    lifetime_min: float = 2.0
    lifetime_max: float = 8.0
    gap_min: float = 0.05
    gap_max: float = 0.5
    mutex_hold: float = 0.05
    ops_rate: float = 20.0
    pages_per_op: int = 2
    throttle_interval: float = 3.0
    idle_throttle_interval: float = 60.0
    bdev_slots: int = 4
    hz: int = 250
    tick_ms: int = 10

    def __post_init__(self) -> None:
        check_int(self.devices, "devices", 1, 1 << 12)
        check_int(self.cgroups, "cgroups", 1, 256)
        check_int(self.idle_cgroups, "idle_cgroups", 0, self.cgroups)
        check_number(self.idle_after, "idle_after", 0)
        check_number(self.duration, "duration", 0, open_low=True)
        check_number(self.lifetime_min, "lifetime_min", 0, open_low=True)
        check_number(self.lifetime_max, "lifetime_max", self.lifetime_min)
        check_number(self.gap_min, "gap_min", 0)
        check_number(self.gap_max, "gap_max", self.gap_min)
        check_number(self.mutex_hold, "mutex_hold", 0)
        check_number(self.ops_rate, "ops_rate", 0, open_low=True)
        check_int(self.pages_per_op, "pages_per_op", 1, 1 << 20)
        check_number(self.throttle_interval, "throttle_interval", 0, open_low=True)
        check_number(self.idle_throttle_interval, "idle_throttle_interval", 0, open_low=True)
        check_int(self.bdev_slots, "bdev_slots", 1, 64)
        check_int(self.hz, "hz", 1, MAX_HZ)
        check_int(self.tick_ms, "tick_ms", 1, 1000)

    def replace(self, **changes: Any) -> "ChurnScenario":
        return dataclasses.replace(self, **changes)


@dataclass
class ChurnResult:
    """What one design cost on the churn workload."""

    mechanism: str
    device_incarnations: int
    flushes: int
    flushes_that_wrote: int
    pages_flushed: int
    stale_flushes: int
    stale_pages: int
    skipped_absent: int
    skipped_removed: int
    skipped_closed: int
    skipped_busy: int
    records_dropped: int
    devices_removed: int
    release_delayed: int
    release_delay_mean_s: float
    release_delay_p95_s: float
    release_delay_max_s: float
    still_pinned_at_end: int
    pinned_device_seconds: float
    deferred_puts: int

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class _Slot:
    """One dev_t's lifecycle: absent -> opening -> open -> closing -> (removed) absent -> ..."""

    def __init__(self, dev_t: int) -> None:
        self.dev_t = dev_t
        self.device: BlockDevice | None = None
        self.state = "absent"
        self.until = 0.0


def run_churn(mechanism: str, scenario: ChurnScenario | None = None, *, seed: int = 0) -> ChurnResult:
    """Run the churn workload with one design.

    :param mechanism: ``"bdev-devt"`` (the series) or ``"bdev-ref"`` (the reviewer's alternative).
    :param scenario: the parameters; default :class:`ChurnScenario`\\ ().
    :param seed: >= 0; the same seed gives the same device and workload schedule to both designs.
    """
    mechanism = check_choice(mechanism, "mechanism", CHURN_MECHANISMS)
    scenario = ChurnScenario() if scenario is None else scenario
    check_instance(scenario, "scenario", ChurnScenario, "a ChurnScenario")
    seed = check_int(seed, "seed", 0, (1 << 63) - 1)
    sc = scenario
    hz = sc.hz
    tick = max(1, round(hz * sc.tick_ms / 1000))
    dt = tick / hz
    clock = SimulatedClock(hz)
    model = WritebackModel(mechanism=mechanism, clock=clock, tunables=WritebackTunables(hz=hz),
                           bdev_slots=sc.bdev_slots,
                           workqueue_factory=lambda: SimulatedWorkqueue(max_active=4, io=_instant))
    disk = model.add_disk("loop", 200 * MiB)
    schedule = random.Random(seed)           # device lifecycles
    work_rng = random.Random(seed ^ 0x5DEECE66D)  # dirtying and throttling
    slots = [_Slot(mkdev(7, i)) for i in range(sc.devices)]
    for slot in slots:
        slot.until = schedule.uniform(0.0, sc.gap_max)
    memcgs = [model.create_memcg(f"churn{i}") for i in range(sc.cgroups)]
    wbs = [model.wb_of(memcg, disk, create=True) for memcg in memcgs]
    assert all(wb is not None for wb in wbs)
    intervals = [sc.idle_throttle_interval if i < sc.idle_cgroups else sc.throttle_interval
                 for i in range(sc.cgroups)]
    next_throttle = [work_rng.expovariate(1.0 / iv) for iv in intervals]
    next_op = [work_rng.expovariate(sc.ops_rate) for _ in memcgs]
    incarnations = 0
    t = 0.0
    steps = int(round(sc.duration / dt))
    workqueue = model.workqueue
    assert isinstance(workqueue, SimulatedWorkqueue)
    for _ in range(steps):
        clock.advance(tick)
        t += dt
        # device lifecycles
        for slot in slots:
            if t < slot.until:
                continue
            if slot.state == "absent":
                slot.device = model.add_block_device(slot.dev_t, disk)
                incarnations += 1
                # mounting dirties the superblock from root: the mapping is owned by root's wb
                model.dirty_pages(slot.device.mapping, 1, model.root)
                model.write_pages(slot.device.mapping, 1, reason="mount")
                slot.device.open_mutex.acquire()
                slot.state, slot.until = "opening", t + sc.mutex_hold
            elif slot.state == "opening":
                assert slot.device is not None
                slot.device.openers += 1
                slot.device.open_mutex.release()
                slot.state, slot.until = "open", t + schedule.uniform(sc.lifetime_min, sc.lifetime_max)
            elif slot.state == "open":
                assert slot.device is not None
                slot.device.open_mutex.acquire()
                slot.state, slot.until = "closing", t + sc.mutex_hold
            elif slot.state == "closing":
                device = slot.device
                assert device is not None
                device.openers -= 1
                model.write_pages(device.mapping, 1 << 62, reason="last_close")
                device.open_mutex.release()
                model.remove_block_device(slot.dev_t)
                slot.device = None
                slot.state, slot.until = "absent", t + schedule.uniform(sc.gap_min, sc.gap_max)
        # memcgs dirty metadata on open devices, and throttle now and then
        open_devices = [slot.device for slot in slots if slot.state == "open" and slot.device is not None]
        for i, memcg in enumerate(memcgs):
            while next_op[i] <= t:
                next_op[i] += work_rng.expovariate(sc.ops_rate)
                if open_devices and not (i < sc.idle_cgroups and t >= sc.idle_after):
                    device = open_devices[work_rng.randrange(len(open_devices))]
                    model.dirty_pages(device.mapping, sc.pages_per_op, memcg)
            if next_throttle[i] <= t:
                next_throttle[i] = t + work_rng.expovariate(1.0 / intervals[i])
                wb = wbs[i]
                assert wb is not None
                model.flush_foreign(wb)
        workqueue.step()
    end = clock.now()
    model.shutdown(drain=True)

    delays: list[float] = []
    still_pinned = 0
    pinned_seconds = 0.0
    removed = [d for d in model.all_devices if d.removed]
    for device in removed:
        assert device.removed_at is not None
        if device.released_at is None:
            still_pinned += 1
            pinned_seconds += jiffies_diff(end, device.removed_at) / hz
        else:
            delay = jiffies_diff(device.released_at, device.removed_at) / hz
            delays.append(delay)
            pinned_seconds += delay
    delayed = [d for d in delays if d > 0]
    delays_sorted = sorted(delays)
    p95 = delays_sorted[min(len(delays_sorted) - 1, int(0.95 * len(delays_sorted)))] if delays_sorted else 0.0
    s = model.stats
    dropped = sum(m.foreign_bdev.stats.dropped for m in memcgs if m.foreign_bdev is not None)
    return ChurnResult(
        mechanism=mechanism,
        device_incarnations=incarnations,
        flushes=s.bdev_flushes_run,
        flushes_that_wrote=s.bdev_flushes_wrote,
        pages_flushed=s.bdev_flush_pages,
        stale_flushes=s.bdev_stale_flushes,
        stale_pages=s.bdev_stale_pages,
        skipped_absent=s.bdev_skipped_absent,
        skipped_removed=s.bdev_skipped_removed,
        skipped_closed=s.bdev_skipped_closed,
        skipped_busy=s.bdev_skipped_busy,
        records_dropped=dropped,
        devices_removed=len(removed),
        release_delayed=len(delayed) + still_pinned,
        release_delay_mean_s=sum(delays) / len(delays) if delays else 0.0,
        release_delay_p95_s=p95,
        release_delay_max_s=max(delays) if delays else 0.0,
        still_pinned_at_end=still_pinned,
        pinned_device_seconds=pinned_seconds,
        deferred_puts=s.deferred_device_puts,
    )


def _instant(request: Any) -> int:
    return int(request.write(request.nr_pages)) if request.nr_pages > 0 else 0


def compare_churn(scenario: ChurnScenario | None = None, *, seed: int = 0) -> dict[str, ChurnResult]:
    """Run the churn workload with both designs on the same schedule; keys are the mechanism names."""
    return {mechanism: run_churn(mechanism, scenario, seed=seed) for mechanism in CHURN_MECHANISMS}
