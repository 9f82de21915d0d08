"""The dev_t-reuse churn (``pybcache/writeback/churn.py``): its scenario's fields and checks, the figures a run
reports, the devices' lifecycles and schedules, on short runs (each test well under half a second)."""
from __future__ import annotations

import dataclasses
import random
import re
from types import SimpleNamespace

import pytest

from pybcache.validate import range_text
from pybcache.writeback import churn
from pybcache.writeback.churn import ChurnScenario, compare_churn, run_churn
from pybcache.writeback.experiment import Scenario
from pybcache.writeback.jiffies import MAX_HZ, SimulatedClock
from pybcache.writeback.model import MiB, WritebackModel, mkdev


class _Stop(Exception):
    """Raised by a stand-in to stop a run once what it was handed has been seen."""


def _stop(*args):
    raise _Stop(*args)


def _message(name: str, lo, hi=None, *, open_low: bool = False) -> str:
    return "^" + re.escape(f"{name} must be in {range_text(lo, hi, open_low=open_low)}")


CHURN_INTS = {"devices": (1, 1 << 12), "cgroups": (1, 256), "pages_per_op": (1, 1 << 20), "bdev_slots": (1, 64),
              "hz": (1, MAX_HZ), "tick_ms": (1, 1000)}


CHURN_NUMBERS = {"idle_after": False, "duration": True, "lifetime_min": True, "gap_min": False,
                 "mutex_hold": False, "ops_rate": True, "throttle_interval": True, "idle_throttle_interval": True}


@pytest.mark.parametrize("name", sorted(CHURN_INTS))
def test_churn_int_fields_take_their_whole_range_and_refuse_one_past_it(name):
    lo, hi = CHURN_INTS[name]
    base = ChurnScenario(idle_cgroups=0)
    assert getattr(base.replace(**{name: lo}), name) == lo
    assert getattr(base.replace(**{name: hi}), name) == hi
    for bad in (lo - 1, hi + 1):
        with pytest.raises(ValueError, match=_message(name, lo, hi)):
            base.replace(**{name: bad})


@pytest.mark.parametrize("name", sorted(CHURN_NUMBERS))
def test_churn_number_fields_refuse_below_their_bound(name):
    open_low = CHURN_NUMBERS[name]
    if open_low:
        with pytest.raises(ValueError, match=_message(name, 0, open_low=True)):
            ChurnScenario(**{name: 0.0})
    else:
        assert getattr(ChurnScenario(**{name: 0.0}), name) == 0.0
    with pytest.raises(ValueError, match=_message(name, 0, open_low=open_low)):
        ChurnScenario(**{name: -1.0})


def test_churn_maxima_are_at_least_their_minima_and_idle_memcgs_at_most_all():
    assert ChurnScenario(lifetime_min=3.0, lifetime_max=3.0).lifetime_max == 3.0
    with pytest.raises(ValueError, match=_message("lifetime_max", 3.0)):
        ChurnScenario(lifetime_min=3.0, lifetime_max=2.5)
    assert ChurnScenario(gap_min=0.2, gap_max=0.2).gap_max == 0.2
    with pytest.raises(ValueError, match=_message("gap_max", 0.2)):
        ChurnScenario(gap_min=0.2, gap_max=0.1)
    assert ChurnScenario(cgroups=2, idle_cgroups=2).idle_cgroups == 2
    assert ChurnScenario(idle_cgroups=0).idle_cgroups == 0
    with pytest.raises(ValueError, match=_message("idle_cgroups", 0, 2)):
        ChurnScenario(cgroups=2, idle_cgroups=3)
    with pytest.raises(ValueError, match=_message("idle_cgroups", 0, 4)):
        ChurnScenario(idle_cgroups=-1)


def test_the_default_churn_scenario_is_the_documented_one():
    assert dataclasses.asdict(ChurnScenario()) == {
        "devices": 4, "cgroups": 4, "idle_cgroups": 1, "idle_after": 20.0, "duration": 120.0, "lifetime_min": 2.0,
        "lifetime_max": 8.0, "gap_min": 0.05, "gap_max": 0.5, "mutex_hold": 0.05, "ops_rate": 20.0,
        "pages_per_op": 2, "throttle_interval": 3.0, "idle_throttle_interval": 60.0, "bdev_slots": 4, "hz": 250,
        "tick_ms": 10}
    assert churn.CHURN_MECHANISMS == ("bdev-devt", "bdev-ref")


class _Kept:
    """Wraps churn.WritebackModel to keep the model a run built and record, with the simulated time, the
    devices added and removed, the pages dirtied and written and the foreign flushes."""

    def __init__(self, monkeypatch) -> None:
        self.models: list[WritebackModel] = []
        self.events: list[tuple] = []
        real = churn.WritebackModel
        events = self.events

        def make(**kw):
            model = real(**kw)
            self.models.append(model)

            def now() -> float:
                return model.clock.elapsed_seconds

            def wrap(name, record):
                method = getattr(model, name)

                def call(*args, **kwargs):
                    record(*args, **kwargs)
                    return method(*args, **kwargs)
                setattr(model, name, call)
            wrap("add_block_device", lambda dev_t, disk: events.append(("add", now(), dev_t)))
            wrap("remove_block_device",
                 lambda dev_t: events.append(("remove", now(), dev_t, *[d for d in model.all_devices
                                                                         if d.dev_t == dev_t and not d.removed])))
            def device_state(inode):
                return [(d.openers, d.open_mutex.locked()) for d in model.all_devices if d.mapping is inode]
            wrap("dirty_pages", lambda inode, pages, memcg: events.append(
                ("dirty", now(), inode, pages, memcg, device_state(inode))))
            wrap("write_pages", lambda inode, pages, reason="writeback": events.append(
                ("write", now(), inode, pages, reason)))
            wrap("flush_foreign", lambda wb: events.append(("flush", now(), wb.memcg.name)))
            return model
        monkeypatch.setattr(churn, "WritebackModel", make)

    def of(self, kind: str) -> list[tuple]:
        return [e for e in self.events if e[0] == kind]


SHORT_CHURN = ChurnScenario(duration=12.0, devices=2, cgroups=3, idle_cgroups=1, idle_after=2.0, lifetime_min=1.0,
                            lifetime_max=2.0, throttle_interval=0.5, idle_throttle_interval=1e6, bdev_slots=3)


# one slot per memcg for four devices: records are dropped; 40 s: over 20 released devices, so the 95th
# percentile of their delays is not their maximum
CROWDED_CHURN = SHORT_CHURN.replace(duration=40.0, devices=4, bdev_slots=1)


@pytest.mark.parametrize("mechanism, sc", [("bdev-devt", SHORT_CHURN), ("bdev-ref", SHORT_CHURN),
                                           ("bdev-ref", CROWDED_CHURN)], ids=["devt", "ref", "ref-crowded"])
def test_churn_figures_are_the_models_counts_and_the_release_delays(mechanism, sc, monkeypatch):
    kept = _Kept(monkeypatch)
    result = run_churn(mechanism, sc, seed=2 if sc is SHORT_CHURN else 1)
    [model] = kept.models
    assert model.mechanism == mechanism and model.bdev_slots == sc.bdev_slots and model.clock.hz == 250
    assert model.clock.elapsed_seconds == pytest.approx(sc.duration)     # duration / tick, in whole ticks
    hz = 250
    removed = [d for d in model.all_devices if d.removed]
    end = model.clock.now()
    delays = sorted((d.released_at - d.removed_at) / hz for d in removed if d.released_at is not None)
    pinned = [d for d in removed if d.released_at is None]
    s = model.stats
    assert result.mechanism == mechanism
    assert result.device_incarnations == len(model.all_devices) > 2
    assert result.devices_removed == len(removed) > 0
    assert (result.flushes, result.flushes_that_wrote, result.pages_flushed) == \
        (s.bdev_flushes_run, s.bdev_flushes_wrote, s.bdev_flush_pages)
    assert (result.stale_flushes, result.stale_pages) == (s.bdev_stale_flushes, s.bdev_stale_pages)
    assert (result.skipped_absent, result.skipped_removed, result.skipped_closed, result.skipped_busy) == \
        (s.bdev_skipped_absent, s.bdev_skipped_removed, s.bdev_skipped_closed, s.bdev_skipped_busy)
    assert result.deferred_puts == s.deferred_device_puts
    assert result.records_dropped == sum(m.foreign_bdev.stats.dropped for m in model.memcgs.values()
                                         if m.foreign_bdev is not None and m is not model.root)
    assert result.still_pinned_at_end == len(pinned)
    assert result.release_delayed == sum(1 for d in delays if d > 0) + len(pinned)
    assert result.release_delay_mean_s == pytest.approx(sum(delays) / len(delays) if delays else 0.0)
    assert result.release_delay_max_s == (max(delays) if delays else 0.0)
    assert result.release_delay_p95_s == (delays[min(len(delays) - 1, int(0.95 * len(delays)))] if delays else 0.0)
    assert result.pinned_device_seconds == pytest.approx(sum(delays) + sum((end - d.removed_at) / hz for d in pinned))
    assert result.flushes > 0 and result.pages_flushed > 0
    if sc is CROWDED_CHURN:
        assert result.records_dropped > 0 and len(delays) >= 20
        assert result.release_delay_p95_s < result.release_delay_max_s
    elif mechanism == "bdev-devt":
        assert result.release_delayed == 0 and result.pinned_device_seconds == 0.0
    else:
        assert result.stale_flushes == 0 and result.release_delayed > 0 and result.still_pinned_at_end > 0


def test_churn_devices_cycle_through_their_lifecycle_with_the_open_mutex_held_while_changing(monkeypatch):
    kept = _Kept(monkeypatch)
    sc = ChurnScenario(duration=3.0, devices=1, cgroups=1, idle_cgroups=0, lifetime_min=0.5, lifetime_max=0.5,
                       gap_min=0.1, gap_max=0.1, mutex_hold=0.2, tick_ms=10)
    result = run_churn("bdev-devt", sc, seed=0)
    [model] = kept.models
    devices = model.all_devices
    assert [d.dev_t for d in devices] == [mkdev(7, 0)] * len(devices)
    # one cycle: <= 0.1 s absent at first, then opening 0.2, open 0.5, closing 0.2, absent 0.1 (each phase
    # ends at the first tick at or past its end): 1.0-1.04 s per cycle, so 3 incarnations in 3 s
    assert result.device_incarnations == len(devices) == 3
    assert result.devices_removed == 2
    for i, d in enumerate(devices[:2]):
        assert d.removed and not d.open_mutex.locked() and d.openers == 0
        assert 0.9 <= (d.removed_at - model._jiffies_base) / 250 - i * 1.0 <= 1.04 + i * 0.04
    assert not devices[2].removed


def test_churn_phases_end_at_the_first_tick_at_or_past_their_end(monkeypatch):
    kept = _Kept(monkeypatch)
    # quarter-second ticks and phases: every time is exact in binary, so a phase ending on a tick ends there
    sc = ChurnScenario(hz=4, tick_ms=250, duration=2.5, devices=1, cgroups=1, idle_cgroups=0, mutex_hold=0.25,
                       lifetime_min=0.5, lifetime_max=0.5, gap_min=0.0, gap_max=0.0)
    run_churn("bdev-devt", sc)
    # absent until 0 -> added at the first tick (0.25), opening until 0.5, open until 1.0, closing until 1.25;
    # absent until 1.25 -> added at 1.5, ... removed at 2.5
    assert [e[1] for e in kept.of("add")] == [0.25, 1.5]
    assert [e[1] for e in kept.of("remove")] == [1.25, 2.5]


def test_churn_devices_keep_their_own_schedules_within_the_scenarios_ranges(monkeypatch):
    kept = _Kept(monkeypatch)
    sc = ChurnScenario(duration=20.0, devices=3, cgroups=1, idle_cgroups=0, mutex_hold=0.05, lifetime_min=0.3,
                       lifetime_max=1.5, gap_min=0.1, gap_max=0.6, tick_ms=4)
    run_churn("bdev-devt", sc, seed=5)
    dt = 1 / 250
    for i in range(3):
        times = [(e[0], e[1]) for e in kept.events if e[0] in ("add", "remove") and e[2] == mkdev(7, i)]
        assert [k for k, _ in times] == ["add", "remove"] * (len(times) // 2) + ["add"] * (len(times) % 2)
        assert len(times) > 10
        assert times[0][1] <= sc.gap_max + dt
        for (k0, t0), (_k1, t1) in zip(times, times[1:]):
            if k0 == "add":      # opening, open, closing: each ends within a tick of its end
                assert 2 * sc.mutex_hold + sc.lifetime_min - 1e-9 <= t1 - t0 <= \
                    2 * sc.mutex_hold + sc.lifetime_max + 3 * dt + 1e-9
            else:                # absent between removal and re-creation
                assert sc.gap_min - 1e-9 <= t1 - t0 <= sc.gap_max + dt + 1e-9


def test_churn_mounts_dirty_and_write_a_root_page_and_memcgs_dirty_only_open_devices(monkeypatch):
    kept = _Kept(monkeypatch)
    result = run_churn("bdev-ref", SHORT_CHURN, seed=1)
    [model] = kept.models
    [disk] = model.disks.values()
    assert disk.name == "loop" and disk.bandwidth == 200 * MiB and model.workqueue.max_active == 4
    mapped = {}
    for e in kept.events:
        if e[0] == "dirty" and e[2].kind == "bdev" and e[2] not in mapped:
            mapped[e[2]] = e
    assert len(mapped) == result.device_incarnations
    assert all(e[3] == 1 and e[4] is model.root for e in mapped.values())   # the superblock, from root
    written = model.stats.written_by_reason
    assert written["mount"] == result.device_incarnations and written["last_close"] > 0
    for _kind, _t, _dev_t, device in kept.of("remove"):
        assert device.mapping.dirty == 0                  # the last close wrote everything
    memcg_dirty = [e for e in kept.of("dirty") if e[4] is not model.root]
    assert memcg_dirty and all(e[3] == SHORT_CHURN.pages_per_op for e in memcg_dirty)
    assert all(e[5] == [(1, False)] for e in memcg_dirty)     # open, and not opening or closing


def test_churn_throttling_follows_each_memcgs_interval_from_the_work_streams_draws(monkeypatch):
    kept = _Kept(monkeypatch)
    sc = ChurnScenario(duration=3.0, devices=1, cgroups=3, idle_cgroups=1, throttle_interval=0.5,
                       idle_throttle_interval=2.0, tick_ms=4)
    run_churn("bdev-devt", sc, seed=3)
    # the schedule draws from Random(seed), the dirtying and throttling from Random(seed ^ 0x5DEECE66D): first
    # each memcg's first throttling time (idle memcgs first), then each one's first operation
    work = random.Random(3 ^ 0x5DEECE66D)
    first = [work.expovariate(1.0 / iv) for iv in (2.0, 0.5, 0.5)]
    assert all(t < sc.duration - 0.004 for t in first)         # (each throttles within the run)
    flushes = kept.of("flush")
    for i, t in enumerate(first):
        mine = [e[1] for e in flushes if e[2] == f"churn{i}"]
        assert t <= mine[0] <= t + 0.004 + 1e-9, (i, t, mine[:1])     # at the first tick at or past it


def test_an_idle_memcg_stops_dirtying_after_idle_after(monkeypatch):
    kept = _Kept(monkeypatch)
    sc = ChurnScenario(duration=4.0, devices=1, cgroups=2, idle_cgroups=1, idle_after=1.0, lifetime_min=10.0,
                       lifetime_max=10.0, gap_min=0.0, gap_max=0.0, mutex_hold=0.0, throttle_interval=1e6,
                       idle_throttle_interval=1e6, ops_rate=50.0, pages_per_op=1)
    run_churn("bdev-ref", sc, seed=1)
    [model] = kept.models
    idle, busy = [m for m in model.memcgs.values() if m.name.startswith("churn")]
    assert idle.name == "churn0" and busy.name == "churn1"
    [device] = model.all_devices
    # the device opens at once and stays open; the idle memcg dirtied about 1 s of operations, the busy one 4 s
    assert 0 < idle.nr_dirty < busy.nr_dirty / 2
    assert idle.nr_dirty == pytest.approx(50, rel=0.5) and busy.nr_dirty == pytest.approx(200, rel=0.3)


def test_churn_runs_are_deterministic_per_seed_and_compare_runs_both_designs():
    small = SHORT_CHURN.replace(duration=4.0)
    both = compare_churn(small, seed=3)
    assert list(both) == ["bdev-devt", "bdev-ref"]
    assert both["bdev-devt"] == run_churn("bdev-devt", small, seed=3)
    assert both["bdev-ref"] == run_churn("bdev-ref", small, seed=3)
    assert run_churn("bdev-devt", small, seed=4) != both["bdev-devt"]
    assert both["bdev-devt"].as_dict()["mechanism"] == "bdev-devt"
    assert both["bdev-devt"].as_dict() == dataclasses.asdict(both["bdev-devt"])


@pytest.mark.parametrize("hz, tick_ms, jiffies", [(250, 10, 2), (250, 6, 2), (250, 4, 1), (100, 1, 1), (1000, 3, 3)])
def test_churn_advances_its_clock_by_tick_ms_in_whole_jiffies_for_its_duration(hz, tick_ms, jiffies, monkeypatch):
    steps = []

    class Clock(SimulatedClock):
        def advance(self, n):
            steps.append(n)
            return super().advance(n)
    monkeypatch.setattr(churn, "SimulatedClock", Clock)
    run_churn("bdev-devt", SHORT_CHURN.replace(hz=hz, tick_ms=tick_ms, duration=0.2))
    assert set(steps) == {jiffies} and len(steps) == round(0.2 / (jiffies / hz))


def test_a_churn_without_a_removed_device_reports_no_delay():
    result = run_churn("bdev-ref", SHORT_CHURN.replace(duration=1.0, lifetime_min=10.0, lifetime_max=10.0))
    assert result.devices_removed == 0 and result.device_incarnations == 2
    assert (result.release_delay_mean_s, result.release_delay_p95_s, result.release_delay_max_s,
            result.pinned_device_seconds, result.release_delayed) == (0.0, 0.0, 0.0, 0.0, 0)


def test_memcgs_throttle_at_their_mean_intervals(monkeypatch):
    kept = _Kept(monkeypatch)
    run_churn("bdev-devt", SHORT_CHURN.replace(duration=20.0, idle_throttle_interval=2.0), seed=6)
    counts = [sum(1 for e in kept.of("flush") if e[2] == f"churn{i}") for i in range(3)]
    # Poisson: about 20 / 2 = 10 for the idle memcg and 20 / 0.5 = 40 for the busy ones (this seed's counts)
    assert 4 <= counts[0] <= 18
    assert all(25 <= c <= 55 for c in counts[1:]), counts


def test_an_idle_memcg_dirties_nothing_from_the_tick_at_idle_after(monkeypatch):
    kept = _Kept(monkeypatch)
    sc = ChurnScenario(hz=4, tick_ms=250, duration=2.0, devices=1, cgroups=2, idle_cgroups=1, idle_after=1.0,
                       mutex_hold=0.0, lifetime_min=10.0, lifetime_max=10.0, gap_min=0.0, gap_max=0.0,
                       ops_rate=100.0)
    run_churn("bdev-devt", sc)
    [idle, busy] = [[e[1] for e in kept.of("dirty") if e[4].name == name] for name in ("churn0", "churn1")]
    assert max(idle) == 0.75 and max(busy) == 2.0


def test_churn_and_its_comparison_default_to_seed_zero():
    small = SHORT_CHURN.replace(duration=3.0)
    assert run_churn("bdev-ref", small) == run_churn("bdev-ref", small, seed=0)
    assert run_churn("bdev-ref", small) != run_churn("bdev-ref", small, seed=1)
    assert compare_churn(small) == compare_churn(small, seed=0)


def test_churn_takes_the_largest_seed_and_refuses_bad_arguments_by_name(monkeypatch):
    kept = _Kept(monkeypatch)
    assert run_churn("bdev-ref", SHORT_CHURN.replace(duration=0.1), seed=(1 << 63) - 1).mechanism == "bdev-ref"
    with pytest.raises(ValueError, match="^mechanism must be one of"):
        run_churn("owner-wb")
    with pytest.raises(TypeError, match="^scenario must be a ChurnScenario"):
        run_churn("bdev-ref", Scenario())
    for seed in (-1, 1 << 63):
        with pytest.raises(ValueError, match=_message("seed", 0, (1 << 63) - 1)):
            run_churn("bdev-ref", SHORT_CHURN, seed=seed)
    assert len(kept.models) == 1


def test_churn_defaults_to_the_default_scenario(monkeypatch):
    kept = _Kept(monkeypatch)
    monkeypatch.setattr(churn, "SimulatedClock", lambda hz: _stop(hz))
    with pytest.raises(_Stop) as stopped:
        run_churn("bdev-ref")
    assert stopped.value.args == (250,)             # the default scenario's HZ
    assert kept.models == []


def test_instant_io_writes_a_requests_pages_at_once():
    written = []
    request = SimpleNamespace(nr_pages=3, write=lambda n: written.append(n) or n)
    assert churn._instant(request) == 3 and written == [3]
    assert churn._instant(SimpleNamespace(nr_pages=1, write=lambda n: n)) == 1
    assert churn._instant(SimpleNamespace(nr_pages=0, write=lambda n: pytest.fail("wrote"))) == 0
