"""The v6 experiment on simulated time, and the dev_t-reuse churn comparison."""
from __future__ import annotations

import random
import re
import time
from types import SimpleNamespace

import pytest

from helpers.writeback_recorder import _Recorder
from pybcache.writeback import (POSTED_TABLE, ChurnScenario, DeviceModel, DirectWriter, Scenario, WritebackModel,
                                compare_churn, run_churn, run_experiment, run_once, share_bandwidth)
from pybcache.validate import range_text
from pybcache.writeback import experiment
from pybcache.writeback.experiment import BASELINE, METRICS, PATCHED, ExperimentResult, RunResult
from pybcache.writeback.jiffies import MAX_HZ, SimulatedClock
from pybcache.writeback.model import KiB, MiB, PAGE_SIZE, mkdev

GiB = 1 << 30
SMALL = Scenario(foreground_total=2 * GiB, tick_ms=8)


def test_bandwidth_sharing_is_proportional_and_gives_leftovers_to_the_others():
    grants = share_bandwidth(100.0, [3.0, 1.0], [1000.0, 1000.0])
    assert grants == pytest.approx([75.0, 25.0])
    grants = share_bandwidth(100.0, [3.0, 1.0], [10.0, 1000.0])
    assert grants == pytest.approx([10.0, 90.0])
    assert sum(share_bandwidth(100.0, [1.0, 1.0], [20.0, 30.0])) == pytest.approx(50.0)


def test_a_run_is_deterministic_per_seed():
    first = run_once("owner-wb", SMALL, seed=11)
    again = run_once("owner-wb", SMALL, seed=11)
    assert first.metrics() == again.metrics()
    assert first.flushes == again.flushes


def test_workqueue_failure_makes_the_series_behave_exactly_like_the_baseline():
    baseline = run_once("owner-wb", SMALL, seed=3)
    fallback = run_once("bdev-devt", SMALL, seed=3, workqueue_fails=True)
    assert fallback.effective_mechanism == "owner-wb"
    assert fallback.metrics() == baseline.metrics()


def test_baseline_flushes_write_the_background_file_and_patched_flushes_only_the_bdev_mapping():
    baseline = run_once("owner-wb", SMALL, seed=1)
    patched = run_once("bdev-devt", SMALL, seed=1)
    by_target = baseline.flushes["pages_by_target"]
    assert baseline.flushes["owner_wb_flushes"] > 0
    assert by_target["background file"] > by_target["bdev mapping"] > 0
    assert set(patched.flushes["pages_by_target"]) == {"bdev mapping"}
    assert patched.flushes["owner_wb_flushes"] == 0 and patched.flushes["bdev_flushes"] > 0
    assert baseline.flushes["pages_per_flush"] > 3 * patched.flushes["pages_per_flush"]


def test_default_scenario_reproduces_the_posted_direction_with_most_of_its_magnitude():
    result = run_experiment(runs=1, seed=0)
    change = result.change_percent
    for key, posted_change in POSTED_TABLE["change_percent"].items():
        assert change[key] * posted_change > 0, key                      # same direction
        assert abs(change[key]) >= 0.7 * abs(posted_change), (key, change[key])
    assert result.baseline["foreground_bandwidth_mib_s"] < 200
    assert result.patched["foreground_bandwidth_mib_s"] < 200
    doc = result.as_dict()
    assert set(doc["baseline"]) == {"background_write_gib", "foreground_bandwidth_mib_s",
                                    "foreground_completion_s", "foreground_mean_latency_ms"}
    assert doc["flushes"]["baseline"]["mib_per_flush"] > doc["flushes"]["patched"]["mib_per_flush"]


def test_reference_holding_records_perform_like_the_series_in_the_experiment():
    devt = run_once("bdev-devt", SMALL, seed=2)
    ref = run_once("bdev-ref", SMALL, seed=2)
    assert ref.metrics() == pytest.approx(devt.metrics(), rel=0.02)


@pytest.mark.parametrize("kwargs, exc, word", [
    ({"runs": 0}, ValueError, "runs"),
    ({"runs": 1.5}, TypeError, "runs"),
    ({"seed": -1}, ValueError, "seed"),
    ({"baseline": "owner_wb"}, ValueError, "baseline"),
    ({"scenario": {"hz": 100}}, TypeError, "scenario"),
])
def test_bad_experiment_arguments_are_refused(kwargs, exc, word):
    with pytest.raises(exc, match=word):
        run_experiment(**kwargs)


@pytest.mark.parametrize("kwargs, exc, word", [
    ({"device_bandwidth": 0}, ValueError, "device_bandwidth"),
    ({"cgroup_ops_rate": float("nan")}, ValueError, "cgroup_ops_rate"),
    ({"dirtyable_memory": 9 * GiB}, ValueError, "dirtyable_memory"),
    ({"hz": "250"}, TypeError, "hz"),
])
def test_bad_scenario_values_are_refused(kwargs, exc, word):
    with pytest.raises(exc, match=word):
        Scenario(**kwargs)


def test_churn_trades_stale_flushes_for_delayed_device_release():
    results = compare_churn(seed=0)
    devt, ref = results["bdev-devt"], results["bdev-ref"]
    assert devt.device_incarnations == ref.device_incarnations > 10
    assert devt.stale_flushes > 0 and devt.stale_pages > 0
    assert devt.release_delayed == 0 and devt.pinned_device_seconds == 0
    assert ref.stale_flushes == 0 and ref.skipped_removed > 0
    assert ref.release_delayed > 0 and ref.release_delay_max_s > 0
    assert ref.still_pinned_at_end > 0       # the idle memcg never consumes its records


def test_churn_is_deterministic_and_validates_its_arguments():
    small = ChurnScenario(duration=20.0)
    assert run_churn("bdev-devt", small, seed=4) == run_churn("bdev-devt", small, seed=4)
    with pytest.raises(ValueError, match="mechanism"):
        run_churn("owner-wb")
    with pytest.raises(ValueError, match="lifetime_max"):
        ChurnScenario(lifetime_min=5.0, lifetime_max=1.0)
    with pytest.raises(ValueError, match="seed"):
        run_churn("bdev-ref", small, seed=-2)


@pytest.mark.parametrize("make, exc, word", [
    (lambda: DirectWriter(0, 1 << 20, 32), ValueError, "total_bytes"),
    (lambda: DirectWriter(1 << 30, 1 << 20, 0), ValueError, "iodepth"),
    (lambda: DeviceModel(0.0, 1 << 20, 8, 4), ValueError, "bandwidth"),
    (lambda: DeviceModel(1e6, 1 << 20, 8, 0), ValueError, "wbt_background_depth"),
])
def test_bad_simulation_arguments_are_refused(make, exc, word):
    with pytest.raises(exc, match=word):
        make()


def test_a_bad_disk_bandwidth_leaves_the_model_unchanged():
    model = WritebackModel()
    with pytest.raises(ValueError, match="bandwidth"):
        model.add_disk("vda", 0)
    assert model.disks == {}
    assert model.add_disk("vda", 1e6).bdi_id == 1


METRIC_KEYS = [key for key, _ in METRICS]


# A scenario small enough for a run in tens of milliseconds that still throttles its memcgs (a small
# memory.max, a high op rate), so the two mechanisms differ: the baseline's foreign flushes write the
# background file, the series' only the bdev mapping.
TINY = Scenario(foreground_total=256 * MiB, cgroups=2, background_file_size=16 * MiB, dirtyable_memory=64 * MiB,
                memory=1 * GiB, cgroup_memory_max=1 * MiB, cgroup_ops_rate=500.0)


# Smaller still, where nothing throttles (the pair's runs give the same figures).
QUIET = TINY.replace(foreground_total=16 * MiB, cgroup_ops_rate=1.0)


class _Stop(Exception):
    """Raised by a stand-in to stop a run once what it was handed has been seen."""


def _stop(*args):
    raise _Stop(*args)


def _message(name: str, lo, hi=None, *, open_low: bool = False) -> str:
    return "^" + re.escape(f"{name} must be in {range_text(lo, hi, open_low=open_low)}")


# field: (lowest accepted, highest accepted or None, kind), open_low fields' lowest is refused
SCENARIO_INTS = {
    "device_bandwidth": (PAGE_SIZE, None), "memory": (PAGE_SIZE, None), "cpus": (1, 256),
    "background_file_size": (PAGE_SIZE, None), "cgroups": (0, 256), "foreground_total": (PAGE_SIZE, None),
    "foreground_block_size": (512, None), "foreground_iodepth": (1, 4096), "hz": (1, MAX_HZ),
    "tick_ms": (1, 1000), "background_rate": (0, None), "cgroup_memory_max": (PAGE_SIZE, None),
    "cgroup_data_pages_per_op": (0, 1 << 20), "cgroup_metadata_pages_per_op": (0, 1 << 20),
    "writeback_request_bytes": (PAGE_SIZE, None), "wbt_normal_depth": (1, 4096),
    "wbt_background_depth": (1, 4096), "bdev_slots": (1, 64), "dirty_expire_centisecs": (1, 10**9),
}


SCENARIO_NUMBERS = {"cgroup_ops_rate": (0, True), "cgroup_start_jitter": (0, False),
                    "max_simulated_seconds": (0, True)}


@pytest.mark.parametrize("name", sorted(SCENARIO_INTS))
def test_scenario_int_fields_take_their_whole_range_and_refuse_one_past_it_by_name(name):
    lo, hi = SCENARIO_INTS[name]
    base = Scenario(dirtyable_memory=PAGE_SIZE) if name == "memory" else Scenario()
    assert getattr(base.replace(**{name: lo}), name) == lo
    with pytest.raises(ValueError, match=_message(name, lo, hi)):
        base.replace(**{name: lo - 1})
    if hi is not None:
        assert getattr(base.replace(**{name: hi}), name) == hi
        with pytest.raises(ValueError, match=_message(name, lo, hi)):
            base.replace(**{name: hi + 1})
    with pytest.raises(TypeError, match=f"^{name} must be an int"):
        base.replace(**{name: float(lo)})


@pytest.mark.parametrize("name", sorted(SCENARIO_NUMBERS))
def test_scenario_number_fields_refuse_below_their_bound_by_name(name):
    lo, open_low = SCENARIO_NUMBERS[name]
    message = _message(name, lo, open_low=open_low)
    if open_low:
        with pytest.raises(ValueError, match=message):
            Scenario(**{name: lo})
        assert getattr(Scenario(**{name: 1e-6}), name) == 1e-6
    else:
        assert getattr(Scenario(**{name: lo}), name) == lo
    with pytest.raises(ValueError, match=message):
        Scenario(**{name: -0.5})
    with pytest.raises(TypeError, match=f"^{name} must be a number"):
        Scenario(**{name: "1"})


def test_dirtyable_memory_may_be_at_most_the_memory():
    assert Scenario(memory=1 * GiB, dirtyable_memory=1 * GiB).dirtyable_memory == 1 * GiB
    with pytest.raises(ValueError, match=_message("dirtyable_memory", PAGE_SIZE, 1 * GiB)):
        Scenario(memory=1 * GiB, dirtyable_memory=1 * GiB + 1)
    with pytest.raises(ValueError, match=_message("dirtyable_memory", PAGE_SIZE, 8 * GiB)):
        Scenario(dirtyable_memory=PAGE_SIZE - 1)
    with pytest.raises(TypeError, match="^background_in_root must be a bool"):
        Scenario(background_in_root=None)


def test_the_default_scenario_is_the_posted_setup_and_the_documented_choices():
    assert Scenario().as_dict() == {
        "device_bandwidth": 200 * MiB, "memory": 8 * GiB, "cpus": 4, "background_file_size": 256 * MiB,
        "cgroups": 4, "foreground_total": 16 * GiB, "foreground_block_size": 1 * MiB, "foreground_iodepth": 32,
        "hz": 250, "tick_ms": 4, "dirtyable_memory": 7 * GiB, "background_rate": 1 * GiB,
        "cgroup_memory_max": 32 * MiB, "cgroup_ops_rate": 64.0, "cgroup_data_pages_per_op": 1,
        "cgroup_metadata_pages_per_op": 4, "cgroup_start_jitter": 1.0, "writeback_request_bytes": 1280 * KiB,
        "wbt_normal_depth": 8, "wbt_background_depth": 4, "bdev_slots": 4, "max_simulated_seconds": 3600.0,
        "dirty_expire_centisecs": 3000, "background_in_root": True}
    assert (BASELINE, PATCHED) == ("owner-wb", "bdev-devt")


def test_the_posted_table_is_the_cover_letters_and_its_changes_follow_from_its_columns():
    assert POSTED_TABLE["baseline"] == {"background_write_gib": 6.154, "foreground_bandwidth_mib_s": 150.29,
                                      "foreground_completion_s": 109.203, "foreground_mean_latency_ms": 212.84}
    assert POSTED_TABLE["patched"] == {"background_write_gib": 1.680, "foreground_bandwidth_mib_s": 184.81,
                                     "foreground_completion_s": 88.652, "foreground_mean_latency_ms": 172.74}
    for key in METRIC_KEYS:
        base, pat = POSTED_TABLE["baseline"][key], POSTED_TABLE["patched"][key]
        assert POSTED_TABLE["change_percent"][key] == pytest.approx((pat - base) / base * 100, abs=0.06)
    assert METRICS == (("background_write_gib", "Background file write I/O (GiB)"),
                       ("foreground_bandwidth_mib_s", "Foreground bandwidth (MiB/s)"),
                       ("foreground_completion_s", "Foreground completion time (s)"),
                       ("foreground_mean_latency_ms", "Foreground mean latency (ms)"))


@pytest.mark.parametrize("hz, tick_ms, jiffies", [(250, 4, 1), (1000, 10, 10), (100, 1, 1), (250, 1, 1),
                                                  (250, 8, 2), (250, 12, 3), (300, 10, 3)])
def test_a_tick_is_tick_ms_in_whole_jiffies_and_never_none(hz, tick_ms, jiffies):
    assert Scenario(hz=hz, tick_ms=tick_ms).tick_jiffies == jiffies


def test_replace_changes_only_the_named_fields_and_checks_them():
    changed = Scenario().replace(cpus=2, hz=1000)
    assert changed.cpus == 2 and changed.hz == 1000
    assert {k: v for k, v in changed.as_dict().items() if k not in ("cpus", "hz")} == \
        {k: v for k, v in Scenario().as_dict().items() if k not in ("cpus", "hz")}
    with pytest.raises(ValueError, match="^cpus"):
        Scenario().replace(cpus=0)


def _run(mechanism: str = "owner-wb", *, background: int = 0, foreground: int = 100 * MiB, completion: float = 1.0,
         latency: float = 10.0, flushes: int = 0, pages: int = 0, by_target=None, skipped_busy: int = 0,
         throttled: int = 0, sync: int = 0, by_writer=None) -> RunResult:
    return RunResult(mechanism=mechanism, effective_mechanism=mechanism, seed=0, background_write_bytes=background,
                     background_sync_bytes=sync, foreground_bytes=foreground, foreground_completion_s=completion,
                     foreground_mean_latency_ms=latency, simulated_seconds=completion, ticks=1, wall_seconds=0.0,
                     flushes={"mechanism": mechanism, "foreign_flushes": flushes, "pages_written": pages,
                              "pages_by_target": dict(by_target or {}), "bdev_skipped_busy": skipped_busy},
                     written_by_reason={}, throttled=throttled, foreign_flush_calls=0,
                     background_written_by_reason=dict(by_writer or {}))


def test_a_runs_metrics_are_its_bytes_in_gib_and_its_bandwidth_in_mib_per_second():
    run = _run(background=3 * GiB // 2, foreground=300 * MiB, completion=2.0, latency=12.5)
    assert run.background_write_gib == 1.5
    assert run.foreground_bandwidth_mib_s == 150.0
    assert run.metrics() == {"background_write_gib": 1.5, "foreground_bandwidth_mib_s": 150.0,
                             "foreground_completion_s": 2.0, "foreground_mean_latency_ms": 12.5}
    doc = run.as_dict()
    assert doc["foreground_bandwidth_mib_s"] == 150.0 and doc["background_write_bytes"] == 3 * GiB // 2
    assert doc["mechanism"] == "owner-wb" and doc["background_written_by_reason"] == {}


def test_flush_summary_adds_the_bdev_pages_to_the_bdev_mapping_target():
    stats = SimpleNamespace(owner_wb_flush_pages=30, bdev_flush_pages=10, owner_wb_flushes=3,
                            bdev_flushes_queued=2, owner_wb_flush_pages_by_label={"bdev mapping": 5, "file": 25},
                            bdev_flushes_wrote=1, bdev_skipped_busy=4, bdev_skipped_closed=5,
                            bdev_skipped_absent=6)
    summary = experiment._flush_summary(SimpleNamespace(stats=stats, mechanism="bdev-ref"))
    assert summary == {"mechanism": "bdev-ref", "foreign_flushes": 5, "pages_written": 40, "pages_per_flush": 8.0,
                       "pages_by_target": {"bdev mapping": 15, "file": 25}, "owner_wb_flushes": 3,
                       "owner_wb_flush_pages": 30, "bdev_flushes": 2, "bdev_flushes_that_wrote": 1,
                       "bdev_flush_pages": 10, "bdev_skipped_busy": 4, "bdev_skipped_closed": 5,
                       "bdev_skipped_absent": 6}
    assert stats.owner_wb_flush_pages_by_label == {"bdev mapping": 5, "file": 25}   # the stats are not changed
    idle = SimpleNamespace(owner_wb_flush_pages=0, bdev_flush_pages=0, owner_wb_flushes=0, bdev_flushes_queued=0,
                           owner_wb_flush_pages_by_label={}, bdev_flushes_wrote=0, bdev_skipped_busy=0,
                           bdev_skipped_closed=0, bdev_skipped_absent=0)
    summary = experiment._flush_summary(SimpleNamespace(stats=idle, mechanism="owner-wb"))
    assert summary["pages_per_flush"] == 0.0 and summary["pages_by_target"] == {}
    idle.bdev_flush_pages, idle.bdev_flushes_queued = 7, 1
    assert experiment._flush_summary(SimpleNamespace(stats=idle, mechanism="x"))["pages_by_target"] == \
        {"bdev mapping": 7}


def test_derived_seeds_are_stable_and_keep_48_bits_of_the_seed():
    rng_seed = experiment._rng_seed
    assert rng_seed(5) == 5
    assert rng_seed((1 << 48) + 5) == 5
    assert rng_seed(0, 0) == 1
    assert rng_seed(0, 7919, 0) == 7920 * 1_000_003 + 1
    assert rng_seed(3, 1) == 3 * 1_000_003 + 2
    assert rng_seed((1 << 48) - 1, 1 << 62, 1 << 62) < 1 << 63
    assert rng_seed((1 << 48) - 1, 1 << 62) == (((1 << 48) - 1) * 1_000_003 + (1 << 62) + 1) & ((1 << 63) - 1)


def test_a_run_builds_the_scenarios_machine_and_reports_what_it_measured():
    sc = TINY.replace(cpus=3, bdev_slots=2, hz=1000, tick_ms=2, dirty_expire_centisecs=1500, cgroups=3,
                      cgroup_data_pages_per_op=2, cgroup_metadata_pages_per_op=3, foreground_iodepth=7,
                      foreground_block_size=512 * KiB, foreground_total=64 * MiB + 1, wbt_normal_depth=6,
                      wbt_background_depth=3, writeback_request_bytes=256 * KiB, background_rate=64 * MiB,
                      cgroup_start_jitter=1000.0)
    rec = _Recorder()
    result = run_once("bdev-devt", sc, seed=9, observer=rec)
    sim = rec.sim
    model = sim.model
    assert isinstance(sim.clock, SimulatedClock) and model.clock.hz == 1000
    assert model.tunables.hz == 1000 and model.tunables.dirty_expire_centisecs == 1500
    assert model._dirtyable_pages == sc.dirtyable_memory // PAGE_SIZE and model.bdev_slots == 2
    assert model.mechanism == "bdev-devt" and model.workqueue.max_active == 3
    assert sim.tick_jiffies == 2 and sim.device == DeviceModel(float(sc.device_bandwidth), 256 * KiB, 6, 3)
    [disk] = model.disks.values()
    assert disk.name == "vda" and disk.bandwidth == sc.device_bandwidth
    device = model.devices.get_no_open(mkdev(253, 0))
    assert device.openers == 1 and device.disk is disk
    assert sim.direct.block_size == 512 * KiB and sim.direct.iodepth == 7
    assert sim.direct.total_bytes == 64 * MiB + 512 * KiB and result.foreground_bytes == 64 * MiB + 512 * KiB
    [over] = sim.overwriters
    assert over.memcg is model.root and over.rate_pages == 64 * MiB / PAGE_SIZE
    assert over.inode.size_pages == sc.background_file_size // PAGE_SIZE and over.inode.label == "background file"
    assert [w.memcg.name for w in sim.workloads] == ["cg0", "cg1", "cg2"]
    for i, w in enumerate(sim.workloads):
        assert w.memcg.memory_max == sc.cgroup_memory_max and w.ops_rate == sc.cgroup_ops_rate
        assert (w.data_pages, w.metadata_pages) == (2, 3)
        assert w.metadata_inode is device.mapping and w.data_inode.label == "cgroup files"
        assert w.data_inode.name == f"cg{i}/files"
        rng = random.Random(experiment._rng_seed(9, i))
        assert rec.first["next_op"][i] == rng.uniform(0.0, 1000.0)      # starts within the jitter...
        assert rec.first["rng"][i] == rng.getstate()                  # ...drawn from the workload's own stream
    # what it measured is what the simulation and the model counted
    assert result.mechanism == result.effective_mechanism == "bdev-devt" and result.seed == 9
    assert rec.calls == result.ticks == sim.ticks > 0
    assert result.simulated_seconds == model.clock.elapsed_seconds == sim.ticks * 2 / 1000
    assert result.foreground_completion_s == sim.direct.completion_time
    assert result.foreground_mean_latency_ms == sim.direct.mean_latency * 1000.0
    assert result.flushes == experiment._flush_summary(model)
    assert result.written_by_reason == dict(model.stats.written_by_reason) and result.written_by_reason["mount"] == 1
    assert result.throttled == model.stats.throttled and result.foreign_flush_calls == model.stats.foreign_flush_calls
    by_writer = result.background_written_by_reason
    assert result.background_write_bytes == sum(by_writer.values()) * PAGE_SIZE == over.inode.written * PAGE_SIZE
    assert result.background_sync_bytes == by_writer["sync"] * PAGE_SIZE > 0
    assert result.wall_seconds > 0 and model.nr_dirty == 0


def test_a_run_mounts_the_device_with_one_clean_root_page_and_defaults_to_seed_zero():
    rec = _Recorder()
    t0 = time.perf_counter()
    result = run_once("owner-wb", QUIET.replace(cgroups=0, background_rate=0), observer=rec)
    assert 0 < result.wall_seconds <= time.perf_counter() - t0
    assert result.seed == 0 and result.written_by_reason["mount"] == 1
    device = rec.sim.model.devices.get_no_open(mkdev(253, 0))
    assert device.mapping.dirty == 0 and device.mapping.written == 1
    assert rec.sim.overwriters[0].inode.name == "background/file"


def test_a_run_in_the_throttling_scenario_separates_the_mechanisms():
    base = run_once("owner-wb", TINY, seed=1)
    patched = run_once("bdev-devt", TINY, seed=1)
    assert base.throttled > 0 and base.foreign_flush_calls > 0
    assert base.flushes["pages_by_target"]["background file"] > 0
    assert set(patched.flushes["pages_by_target"]) == {"bdev mapping"}
    assert patched.background_write_bytes < base.background_write_bytes
    assert base.foreground_completion_s > patched.foreground_completion_s


def test_the_background_job_in_its_own_memcg_gets_a_memcg_named_background():
    rec = _Recorder()
    run_once("owner-wb", QUIET.replace(background_in_root=False), observer=rec)
    [over] = rec.sim.overwriters
    assert over.memcg is not rec.sim.model.root and over.memcg.name == "background"
    assert over.memcg.memory_max is None


def test_a_failing_workqueue_falls_back_to_the_baseline_and_a_working_one_does_not():
    rec = _Recorder()
    result = run_once("bdev-devt", QUIET, workqueue_fails=True, observer=rec)
    assert result.effective_mechanism == "owner-wb" and result.mechanism == "bdev-devt"
    assert rec.sim.model.workqueue is None
    assert run_once("bdev-devt", QUIET, workqueue_fails=False).effective_mechanism == "bdev-devt"


def test_a_foreground_writer_that_cannot_finish_in_time_is_an_error_naming_the_limit():
    with pytest.raises(RuntimeError, match=r"^the foreground writer did not finish within 0\.05 simulated seconds$"):
        run_once("owner-wb", QUIET.replace(max_simulated_seconds=0.05))


@pytest.mark.parametrize("kwargs, exc, message", [
    ({"mechanism": "owner_wb"}, ValueError, "^mechanism must be one of"),
    ({"scenario": {"hz": 100}}, TypeError, "^scenario must be a Scenario"),
    ({"seed": -1}, ValueError, _message("seed", 0, (1 << 63) - 1)),
    ({"seed": 1 << 63}, ValueError, _message("seed", 0, (1 << 63) - 1)),
    ({"workqueue_fails": 1}, TypeError, "^workqueue_fails must be a bool"),
])
def test_run_once_refuses_bad_arguments_by_name(kwargs, exc, message):
    args = {"mechanism": "owner-wb", "scenario": QUIET} | kwargs
    with pytest.raises(exc, match=message):
        run_once(args.pop("mechanism"), **args)


def test_run_once_takes_the_largest_seed_and_the_default_scenario_when_given_none(monkeypatch):
    assert run_once("owner-wb", QUIET, seed=(1 << 63) - 1).seed == (1 << 63) - 1
    seen = []
    monkeypatch.setattr(experiment, "Simulation", lambda *a, **k: seen.append(a[0]) or _stop())
    with pytest.raises(_Stop):
        run_once("owner-wb")
    assert seen[0]._dirtyable_pages == 7 * GiB // PAGE_SIZE and len(seen[0].memcgs) == 1 + 4


def _result(baseline, patched) -> ExperimentResult:
    return ExperimentResult(len(baseline), 0, Scenario(), list(baseline), list(patched))


def test_the_table_is_the_mean_per_kernel_and_the_change_in_percent():
    result = _result([_run(background=1 * GiB, completion=2.0, latency=10.0),
                      _run(background=3 * GiB, completion=4.0, latency=20.0)],
                     [_run(background=1 * GiB, completion=1.0, latency=5.0),
                      _run(background=0, completion=3.0, latency=10.0)])
    assert result.baseline == {"background_write_gib": 2.0, "foreground_bandwidth_mib_s": (50.0 + 25.0) / 2,
                               "foreground_completion_s": 3.0, "foreground_mean_latency_ms": 15.0}
    assert result.patched == {"background_write_gib": 0.5, "foreground_bandwidth_mib_s": (100.0 + 100 / 3) / 2,
                              "foreground_completion_s": 2.0, "foreground_mean_latency_ms": 7.5}
    change = result.change_percent
    assert change["background_write_gib"] == -75.0
    assert change["foreground_completion_s"] == pytest.approx(-100 / 3)
    assert change["foreground_mean_latency_ms"] == -50.0
    assert change["foreground_bandwidth_mib_s"] == pytest.approx(((100 + 100 / 3) / 2 - 37.5) / 37.5 * 100)


def test_the_flush_table_is_per_run_and_per_flush():
    runs = [_run("owner-wb", flushes=4, pages=1024, by_target={"file": 1000, "bdev mapping": 24}, skipped_busy=2,
                 throttled=3, sync=1 * GiB, by_writer={"sync": 1024, "foreign_flush": 256}),
            _run("owner-wb", flushes=0, pages=0, by_target={"other": 10, "file": 6}, skipped_busy=1, throttled=2,
                 sync=2 * GiB, by_writer={"sync": 2048, "background": 512})]
    flushes = ExperimentResult._flushes(runs)
    assert flushes == {
        "mechanism": "owner-wb", "foreign_flushes_per_run": 2.0, "pages_written_per_run": 512.0,
        "pages_per_flush": 256.0, "mib_per_flush": 1.0,
        "pages_by_target_per_run": {"bdev mapping": 12.0, "file": 503.0, "other": 5.0},
        "bdev_skipped_busy_per_run": 1.5, "throttle_events_per_run": 2.5, "background_sync_gib_per_run": 1.5,
        "background_file_gib_by_writer_per_run": {"background": 512 * PAGE_SIZE / GiB / 2,
                                                  "foreign_flush": 256 * PAGE_SIZE / GiB / 2,
                                                  "sync": 3072 * PAGE_SIZE / GiB / 2}}
    assert list(flushes["pages_by_target_per_run"]) == ["bdev mapping", "file", "other"]
    assert list(flushes["background_file_gib_by_writer_per_run"]) == ["background", "foreign_flush", "sync"]
    none = ExperimentResult._flushes([_run(flushes=0, pages=0)])
    assert none["pages_per_flush"] == 0.0 and none["mib_per_flush"] == 0.0


def test_the_json_document_holds_the_table_the_flushes_the_posted_table_and_every_run():
    base = [_run("owner-wb", background=2 * GiB, flushes=1, pages=10)]
    pat = [_run("bdev-ref", background=1 * GiB, flushes=2, pages=4)]
    result = ExperimentResult(1, 7, TINY, base, pat, wall_seconds=1.25, baseline_mechanism="owner-wb",
                              patched_mechanism="bdev-ref")
    doc = result.as_dict()
    assert doc == {"runs": 1, "seed": 7, "baseline": result.baseline, "patched": result.patched,
                   "change_percent": result.change_percent,
                   "flushes": {"baseline": ExperimentResult._flushes(base), "patched": ExperimentResult._flushes(pat)},
                   "posted_table": POSTED_TABLE, "mechanisms": {"baseline": "owner-wb", "patched": "bdev-ref"},
                   "per_run": {"baseline": [base[0].as_dict()], "patched": [pat[0].as_dict()]},
                   "scenario": TINY.as_dict(), "wall_seconds": 1.25}
    assert doc["flushes"]["patched"]["mechanism"] == "bdev-ref"
    assert ExperimentResult(1, 0, TINY, base, pat).baseline_mechanism == BASELINE
    assert ExperimentResult(1, 0, TINY, base, pat).patched_mechanism == PATCHED
    assert ExperimentResult(1, 0, TINY, base, pat).wall_seconds == 0.0


def test_an_observer_is_bound_to_its_mechanism_and_run_index():
    assert experiment._bind(None, "owner-wb", 0) is None
    seen = []
    bound = experiment._bind(lambda *args: seen.append(args), "bdev-ref", 3)
    bound("sim")
    assert seen == [("bdev-ref", 3, "sim")]


def test_an_experiment_runs_each_pair_on_one_derived_seed_and_observes_every_tick():
    seen: dict[tuple[str, int], int] = {}

    def observer(mechanism, index, sim):
        assert sim.direct.total_bytes == QUIET.foreground_total      # every run on the scenario given
        seen[mechanism, index] = seen.get((mechanism, index), 0) + 1
    t0 = time.perf_counter()
    result = run_experiment(2, 5, QUIET, baseline="bdev-devt", patched="bdev-ref", observer=observer)
    wall = time.perf_counter() - t0
    seeds = [experiment._rng_seed(5, 7919, i) for i in range(2)]
    assert [r.seed for r in result.baseline_runs] == [r.seed for r in result.patched_runs] == seeds
    assert [r.mechanism for r in result.baseline_runs] == ["bdev-devt"] * 2
    assert [r.mechanism for r in result.patched_runs] == ["bdev-ref"] * 2
    assert (result.runs, result.seed, result.scenario) == (2, 5, QUIET)
    assert (result.baseline_mechanism, result.patched_mechanism) == ("bdev-devt", "bdev-ref")
    assert result.baseline_runs[1].metrics() == run_once("bdev-devt", QUIET, seed=seeds[1]).metrics()
    assert result.patched_runs[1].metrics() == run_once("bdev-ref", QUIET, seed=seeds[1]).metrics()
    assert seen == {(m, i): r.ticks for m, runs in (("bdev-devt", result.baseline_runs),
                                                    ("bdev-ref", result.patched_runs))
                    for i, r in enumerate(runs)}
    assert 0 < result.wall_seconds <= wall


def test_an_experiment_runs_the_indices_its_wrapper_hands_back():
    handed = []

    def wrap(indices):
        handed.append(list(indices))
        return [1]
    result = run_experiment(3, 0, QUIET, wrap=wrap)
    assert handed == [[0, 1, 2]]
    assert [r.seed for r in result.baseline_runs] == [experiment._rng_seed(0, 7919, 1)]
    assert result.baseline_runs[0].mechanism == BASELINE and result.patched_runs[0].mechanism == PATCHED


def test_an_experiment_defaults_to_three_runs_of_seed_zero_on_the_default_scenario():
    handed = []
    result = run_experiment(wrap=lambda indices: handed.append(list(indices)) or [])
    assert handed == [[0, 1, 2]] and (result.runs, result.seed) == (3, 0) and result.scenario == Scenario()
    result = run_experiment(1000, (1 << 48) - 1, wrap=lambda indices: [])
    assert (result.runs, result.seed) == (1000, (1 << 48) - 1)


@pytest.mark.parametrize("kwargs, exc, message", [
    ({"runs": 0}, ValueError, _message("runs", 1, 1000)),
    ({"runs": 1001}, ValueError, _message("runs", 1, 1000)),
    ({"seed": -1}, ValueError, _message("seed", 0, (1 << 48) - 1)),
    ({"seed": 1 << 48}, ValueError, _message("seed", 0, (1 << 48) - 1)),
    ({"baseline": "owner_wb"}, ValueError, "^baseline must be one of"),
    ({"patched": "bdev"}, ValueError, "^patched must be one of"),
    ({"scenario": "default"}, TypeError, "^scenario must be a Scenario"),
    ({"observer": 3}, TypeError, "^observer must be"),
    ({"wrap": 3}, TypeError, "^wrap must be"),
])
def test_an_experiment_refuses_bad_arguments_by_name_before_running(kwargs, exc, message, monkeypatch):
    monkeypatch.setattr(experiment, "run_once", lambda *a, **k: pytest.fail("ran"))
    with pytest.raises(exc, match=message):
        run_experiment(**kwargs)
