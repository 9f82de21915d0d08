"""Fast unit tests of the writeback experiment side (``experiment.py``, ``simulation.py``, ``churn.py``,
``sensitivity.py``): the scenarios' parameters and their checks, the tables, means, ratios and statistics the
experiments report, and the simulation's bandwidth sharing and workloads, on tiny scenarios (each test well
under half a second) so that mutation testing can run them for every mutant (docs/robustness.md, "The
writeback experiments")."""
from __future__ import annotations

import dataclasses
import random
import re
import time
from types import SimpleNamespace

import pytest

from pybcache.validate import range_text
from pybcache.writeback import churn, experiment, sensitivity, simulation
from pybcache.writeback.churn import ChurnScenario, compare_churn, run_churn
from pybcache.writeback.experiment import (BASELINE, METRICS, PATCHED, POSTED_TABLE, ExperimentResult, RunResult,
                                           Scenario, run_experiment, run_once)
from pybcache.writeback.jiffies import MAX_HZ, SimulatedClock, MonotonicClock, WritebackTunables
from pybcache.writeback.model import GiB, KiB, MiB, PAGE_SIZE, Throttle, WritebackModel, mkdev
from pybcache.writeback.sensitivity import (FOREGROUND_GAIN_PERCENT, HOLDS_PERCENT, QUICK_SENSITIVITY, SENSITIVITY,
                                            VANISHES_PERCENT, Perturbation, SensitivityResult, run_sensitivity,
                                            summary_text, verdict)
from pybcache.writeback.workqueue import IOStream
from pybcache.writeback.simulation import (BufferedOverwriter, CgroupWorkload, DeviceModel, DirectWriter, Simulation,
                                           share_bandwidth)

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


# ---------------------------------------------------------------------------------------------------------------
# experiment.py: the scenario

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


# ---------------------------------------------------------------------------------------------------------------
# experiment.py: one run's figures

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


class _Recorder:
    """An observer keeping the simulation and counting the ticks it saw."""

    def __init__(self) -> None:
        self.sim: Simulation | None = None
        self.calls = 0
        self.first: dict | None = None

    def __call__(self, sim: Simulation) -> None:
        self.sim = sim
        self.calls += 1
        if self.first is None:
            self.first = {"next_op": [w.next_op for w in sim.workloads],
                          "rng": [w.rng.getstate() for w in sim.workloads]}


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


# ---------------------------------------------------------------------------------------------------------------
# experiment.py: the table

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


# ---------------------------------------------------------------------------------------------------------------
# simulation.py: bandwidth sharing and the direct writer

def test_bandwidth_is_shared_by_weight_and_a_satisfied_streams_leftover_goes_to_the_rest():
    assert share_bandwidth(100.0, [3.0, 1.0], [1000.0, 1000.0]) == pytest.approx([75.0, 25.0])
    assert share_bandwidth(100.0, [3.0, 1.0], [10.0, 1000.0]) == pytest.approx([10.0, 90.0])
    # two rounds of leftovers: a takes 10, then b its 30, then c the rest
    assert share_bandwidth(120.0, [1.0, 1.0, 1.0], [10.0, 30.0, 500.0]) == pytest.approx([10.0, 30.0, 80.0])
    # a stream without demand or weight gets nothing, and less demand than capacity leaves capacity over
    assert share_bandwidth(100.0, [0.0, 1.0, 5.0], [50.0, 20.0, 0.0]) == [0.0, 20.0, 0.0]
    assert share_bandwidth(100.0, [], []) == []
    assert share_bandwidth(0.0, [1.0], [5.0]) == [0.0]
    # exactly the demand is satisfied (not offered more)
    assert share_bandwidth(100.0, [1.0, 1.0], [50.0, 50.0]) == [50.0, 50.0]
    assert share_bandwidth(1e-10, [1.0], [5.0]) == [0.0]
    # small figures are bytes like any others: a demand under one byte, a capacity under one byte
    assert share_bandwidth(100.0, [1.0], [0.5]) == [0.5]
    assert share_bandwidth(0.5, [1.0, 1.0], [5.0, 5.0]) == [0.25, 0.25]


def test_a_direct_writer_rounds_up_to_whole_blocks_and_keeps_iodepth_in_flight():
    w = DirectWriter(10 * 4096 + 1, 4096, 4)
    assert w.total_requests == 11 and w.total_bytes == 11 * 4096
    assert (w.block_size, w.iodepth) == (4096, 4)
    assert (w.served, w.completed, w.submitted, w.latency_sum, w.completion_time) == (0.0, 0, 0, 0.0, None)
    assert w.weight() == 0.0 and w.mean_latency == 0.0 and not w.done and w.demand() == 11 * 4096
    w.start(2.0)
    assert w.start_time == 2.0 and w.submitted == 4 and w.weight() == 4 * 4096.0
    small = DirectWriter(2 * 4096, 4096, 8)
    small.start(0.0)
    assert small.submitted == 2
    assert DirectWriter(1, 1, 1 << 20).total_bytes == 1


def test_a_direct_writers_requests_complete_in_order_at_interpolated_times():
    w = DirectWriter(4 * 100, 100, 2)
    w.start(0.0)
    w.deliver(0.0, 0.0, 1.0)
    w.deliver(-5.0, 0.0, 1.0)
    assert w.served == 0.0 and w.completed == 0
    w.deliver(1.0, 0.0, 1.0)
    assert w.served == 1.0
    w.served = 0.0
    w.deliver(150.0, 0.0, 1.0)          # request 1 completes at 100/150 of the tick, request 3 is submitted
    assert w.completed == 1 and w.submitted == 3 and w.served == 150.0
    assert w.latency_sum == pytest.approx(100 / 150)
    assert w.weight() == 200.0 and w.demand() == 250.0
    w.deliver(150.0, 1.0, 2.0)          # 150 -> 300: requests 2 (at 200) and 3 (at 300) complete
    assert w.completed == 3 and w.submitted == 4
    t2, t3 = 1.0 + 2.0 * 50 / 150, 1.0 + 2.0 * 150 / 150
    assert w.latency_sum == pytest.approx(100 / 150 + t2 - 0.0 + t3 - 100 / 150)
    w.deliver(1000.0, 3.0, 1.0)         # capped at the total: the last completes at 100/1000 of the tick
    assert w.done and w.served == 400.0 and w.completion_time == pytest.approx(3.1)
    assert w.demand() == 0.0 and w.mean_latency == pytest.approx(w.latency_sum / 4)
    w.deliver(1000.0, 4.0, 1.0)
    assert w.completed == 4 and w.served == 400.0


def test_a_direct_writer_completes_a_request_a_rounding_error_short_of_its_boundary():
    w = DirectWriter(200, 100, 1)
    w.start(0.0)
    w.deliver(100 - 1e-7, 0.0, 1.0)
    assert w.completed == 1 and w.latency_sum == pytest.approx(1.0)
    w = DirectWriter(200, 100, 1)
    w.start(0.0)
    w.deliver(100 - 1e-3, 0.0, 1.0)
    assert w.completed == 0


@pytest.mark.parametrize("make, exc, message", [
    (lambda: DirectWriter(0, 1, 1), ValueError, _message("total_bytes", 1)),
    (lambda: DirectWriter(1, 0, 1), ValueError, _message("block_size", 1)),
    (lambda: DirectWriter(1, 1, 0), ValueError, _message("iodepth", 1, 1 << 20)),
    (lambda: DirectWriter(1, 1, (1 << 20) + 1), ValueError, _message("iodepth", 1, 1 << 20)),
    (lambda: DeviceModel(0.0, 1, 1, 1), ValueError, _message("bandwidth", 0, open_low=True)),
    (lambda: DeviceModel(1.0, 0, 1, 1), ValueError, _message("writeback_request_bytes", 1)),
    (lambda: DeviceModel(1.0, 1, 0, 1), ValueError, _message("wbt_normal_depth", 1)),
    (lambda: DeviceModel(1.0, 1, 1, 0), ValueError, _message("wbt_background_depth", 1)),
])
def test_simulation_parts_refuse_bad_arguments_by_name(make, exc, message):
    with pytest.raises(exc, match=message):
        make()


def test_a_device_model_takes_its_smallest_values():
    assert DeviceModel(1e-9, 1, 1, 1).bandwidth == 1e-9


# ---------------------------------------------------------------------------------------------------------------
# simulation.py: the dirtying tasks

def test_a_task_stays_paused_until_its_pause_ends_and_records_each_pause():
    model = WritebackModel()
    task = simulation._Task(model)
    assert (task.nr_dirtied, task.paused_until, task.recheck, task.pauses, task.paused_jiffies) == \
        (0, None, False, 0, 0)
    assert task.runnable(100)
    assert task.apply(Throttle(pause=0, recheck=False, throttled=False), 100) is False
    assert task.apply(Throttle(pause=0, recheck=True, throttled=True), 100) is True and task.recheck
    assert task.paused_until is None and task.pauses == 0
    assert task.apply(Throttle(pause=5, recheck=False, throttled=True), 100) is True
    assert task.paused_until == 105 and task.pauses == 1 and task.paused_jiffies == 5 and not task.recheck
    assert not task.runnable(104)
    assert task.paused_until == 105
    assert task.runnable(105) and task.paused_until is None
    assert task.apply(Throttle(pause=1, recheck=False, throttled=True), 105) is True and task.paused_until == 106
    assert task.runnable(106)
    task.apply(Throttle(pause=3, recheck=True, throttled=True), 200)
    assert task.pauses == 3 and task.paused_jiffies == 9 and task.paused_until == 203


def _model_with_file(size: int | None = 100 * PAGE_SIZE):
    model = WritebackModel(mechanism="owner-wb")
    disk = model.add_disk("vda", 100 * MiB)
    inode = model.create_inode(disk, "f", size=size)
    return model, disk, inode


def test_an_overwriter_dirties_its_share_of_the_clean_pages_and_carries_fractions():
    model, _disk, inode = _model_with_file()
    over = BufferedOverwriter(model, model.root, inode, 10 * PAGE_SIZE)   # 10 pages/s of a 100-page file
    assert over.rate_pages == 10.0 and over.memcg is model.root and over.inode is inode
    over.tick(1, 0.25)                # 2.5 pages touched, all clean: 2 dirtied, 0.5 carried
    assert inode.dirty == 2 and over._carry == pytest.approx(0.5)
    over.tick(2, 0.25)                # 98 clean x 2.5 / 100 + 0.5 = 2.95
    assert inode.dirty == 4 and over._carry == pytest.approx(0.95)
    assert over.task.nr_dirtied == 4
    over.tick(3, 100.0)               # the whole file touched: every clean page (96) plus the carry
    assert inode.dirty == 100
    zero = BufferedOverwriter(model, model.root, model.create_inode(_disk, "g", size=PAGE_SIZE), 0)
    zero.tick(4, 1.0)
    assert zero.inode.dirty == 0 and zero.task.nr_dirtied == 0


def test_an_overwriter_dirties_a_single_page_when_a_tick_touches_one():
    model, _disk, inode = _model_with_file(128 * PAGE_SIZE)
    over = BufferedOverwriter(model, model.root, inode, 16 * PAGE_SIZE)
    over.tick(1, 0.0625)              # 1 page of 128 touched, all clean
    assert inode.dirty == 1 and over._carry == 0.0


def test_an_overwriter_checks_its_throttling_once_it_reaches_ratelimit_pages(monkeypatch):
    model, _disk, inode = _model_with_file(1024 * PAGE_SIZE)
    calls = []
    monkeypatch.setattr(model, "_balance_dirty_pages",
                        lambda wb, n: calls.append(n) or Throttle(pause=0, recheck=False, throttled=False))
    over = BufferedOverwriter(model, model.root, inode, 32 * PAGE_SIZE)
    over.tick(1, 1.0)                 # exactly 32 pages = ratelimit_pages
    assert inode.dirty == 32 and calls == [32] and over.task.nr_dirtied == 0


def test_an_overwriter_checks_its_throttling_every_ratelimit_pages(monkeypatch):
    model, _disk, inode = _model_with_file(1000 * PAGE_SIZE)
    calls = []
    monkeypatch.setattr(model, "_balance_dirty_pages",
                        lambda wb, n: calls.append((wb, n)) or Throttle(pause=7, recheck=False, throttled=True))
    over = BufferedOverwriter(model, model.root, inode, 31 * PAGE_SIZE)
    over.tick(1, 1.0)
    assert calls == [] and over.task.nr_dirtied == 31
    over.tick(2, 1.0)                 # 31 + 30 >= 32: one check with what was dirtied, which is reset
    assert len(calls) == 1 and calls[0][0] is inode.wb and calls[0][1] >= 32
    assert over.task.nr_dirtied == 0 and over.task.paused_until == 9
    over.tick(5, 1.0)                 # paused: nothing dirtied
    assert len(calls) == 1 and over.task.nr_dirtied == 0
    over.task.paused_until = None
    over.task.recheck = True          # over the limit: it asks again before dirtying, and stops if told to
    dirty = inode.dirty
    over.tick(10, 1.0)
    assert calls[-1] == (inode.wb, 0) and inode.dirty == dirty


def test_an_overwriter_needs_a_fixed_size_file_of_its_model():
    model, _disk, inode = _model_with_file(None)
    with pytest.raises(ValueError, match="^inode must be a fixed-size file"):
        BufferedOverwriter(model, model.root, inode, 1.0)
    model2, _, sized = _model_with_file()
    with pytest.raises(ValueError, match="^rate must be in"):
        BufferedOverwriter(model2, model2.root, sized, -1.0)
    with pytest.raises(TypeError, match="^model must be a WritebackModel"):
        BufferedOverwriter(None, model2.root, sized, 1.0)
    with pytest.raises(TypeError, match="^memcg must be a Memcg"):
        BufferedOverwriter(model2, None, sized, 1.0)
    with pytest.raises(TypeError, match="^inode must be an Inode"):
        BufferedOverwriter(model2, model2.root, None, 1.0)
    with pytest.raises(ValueError, match="^memcg must be a memcg of this model$"):
        BufferedOverwriter(model2, model.root, sized, 1.0)          # another model's memcg
    with pytest.raises(ValueError, match="^inode "):
        BufferedOverwriter(model, model.root, sized, 1.0)           # another model's inode


def _workload(model, disk, **kw):
    memcg = model.create_memcg("cg")
    data = model.create_inode(disk, "d")
    meta = model.create_inode(disk, "m")
    args = dict(ops_rate=10.0, data_pages_per_op=1, metadata_pages_per_op=2, rng=random.Random(3), start=0.5)
    args.update(kw)
    return CgroupWorkload(model, memcg, data, meta, **args)


def test_a_cgroup_workload_runs_its_poisson_operations_from_its_start():
    model, disk, _ = _model_with_file()
    w = _workload(model, disk)
    assert (w.ops_rate, w.data_pages, w.metadata_pages, w.next_op, w.ops) == (10.0, 1, 2, 0.5, 0)
    w.tick(1, 0.0, 0.5)                # the first operation is at 0.5, not before
    assert w.ops == 0
    rng = random.Random(3)
    times = [0.5]
    while times[-1] < 1.5:
        times.append(times[-1] + rng.expovariate(10.0))
    w.tick(2, 0.5, 1.0)
    n = sum(1 for t in times if t < 1.5)
    assert w.ops == n and w.next_op == times[n]
    assert w.data_inode.dirty == n and w.metadata_inode.dirty == 2 * n
    assert w.memcg.nr_dirty == 3 * n


def test_a_cgroup_workload_without_data_or_metadata_pages_dirties_only_the_other():
    model, disk, _ = _model_with_file()
    w = _workload(model, disk, data_pages_per_op=0, metadata_pages_per_op=1, start=0.0)
    w.tick(1, 0.0, 1.0)
    assert w.ops > 0 and w.data_inode.dirty == 0 and w.metadata_inode.dirty == w.ops
    w2 = _workload(model, disk, data_pages_per_op=2, metadata_pages_per_op=0, start=0.0)
    w2.tick(1, 0.0, 1.0)
    assert w2.ops > 0 and w2.data_inode.dirty == 2 * w2.ops and w2.metadata_inode.dirty == 0


def test_a_throttled_cgroup_workload_stops_and_resumes_without_a_burst(monkeypatch):
    model, disk, _ = _model_with_file()
    w = _workload(model, disk, ops_rate=1000.0, data_pages_per_op=8, metadata_pages_per_op=8, start=0.0)
    calls = []
    monkeypatch.setattr(model, "_balance_dirty_pages",
                        lambda wb, n: calls.append(n) or Throttle(pause=10, recheck=False, throttled=True))
    w.tick(1, 0.0, 1.0)
    assert w.ops == 2 and calls == [32] and w.task.nr_dirtied == 0 and w.task.paused_until == 11
    w.tick(5, 0.0, 1.0)                 # paused
    assert w.ops == 2
    w.tick(11, 50.0, 0.0)              # resumed: the next operation is not before now
    assert w.next_op >= 50.0
    calls.clear()
    monkeypatch.setattr(model, "_balance_dirty_pages",
                        lambda wb, n: calls.append(n) or Throttle(pause=0, recheck=True, throttled=True))
    w.task.recheck = True
    ops = w.ops
    w.tick(12, 50.0, 1.0)               # over the limit: asks first (0 pages), and dirties nothing
    assert calls == [0] and w.ops == ops


def test_a_cgroup_workload_checks_its_arguments_by_name():
    model, disk, _ = _model_with_file()
    for kw, message in [({"ops_rate": 0.0}, _message("ops_rate", 0, open_low=True)),
                        ({"data_pages_per_op": -1}, _message("data_pages_per_op", 0)),
                        ({"metadata_pages_per_op": -1}, _message("metadata_pages_per_op", 0)),
                        ({"start": -1.0}, _message("start", 0))]:
        with pytest.raises(ValueError, match=message):
            _workload(model, disk, **kw)
    with pytest.raises(TypeError, match="^rng must be a random.Random"):
        _workload(model, disk, rng=3)
    memcg = model.create_memcg("x")
    inode = model.create_inode(disk, "i")
    for args, message in [((None, memcg, inode, inode), "model must be a WritebackModel"),
                          ((model, None, inode, inode), "memcg must be a Memcg"),
                          ((model, memcg, None, inode), "data_inode must be an Inode"),
                          ((model, memcg, inode, None), "metadata_inode must be an Inode")]:
        with pytest.raises(TypeError, match=f"^{message}, got NoneType$"):
            CgroupWorkload(*args, ops_rate=1.0, data_pages_per_op=1, metadata_pages_per_op=1,
                           rng=random.Random(), start=0.0)
    other, odisk, oinode = _model_with_file()
    for args, message in [((model, other.root, inode, inode), "memcg must be a memcg of this model"),
                          ((model, memcg, oinode, inode), "data_inode must be an inode of this model"),
                          ((model, memcg, inode, oinode), "metadata_inode must be an inode of this model")]:
        with pytest.raises(ValueError, match=f"^{message}$"):
            CgroupWorkload(*args, ops_rate=1.0, data_pages_per_op=1, metadata_pages_per_op=1,
                           rng=random.Random(), start=0.0)


# ---------------------------------------------------------------------------------------------------------------
# simulation.py: the tick loop

def _sim(direct: DirectWriter | None, *, hz: int = 250, tick: int = 1, **kw) -> Simulation:
    model = WritebackModel(mechanism="owner-wb", clock=SimulatedClock(hz), tunables=WritebackTunables(hz=hz))
    device = DeviceModel(100.0 * MiB, 1 * MiB, 8, 4)
    return Simulation(model, device, tick_jiffies=tick, direct=direct, **kw)


def test_a_lone_direct_writer_gets_the_whole_device():
    direct = DirectWriter(10 * MiB, 1 * MiB, 4)
    direct.start(0.0)
    sim = _sim(direct, tick=5)
    assert sim.dt == 5 / 250 and sim.ticks == 0 and sim.device_bytes == 0.0 and sim.writeback_bytes == 0.0
    elapsed = sim.run_until_direct_done(10.0)
    assert direct.completion_time == pytest.approx(0.1)
    assert elapsed == sim.clock.elapsed_seconds == pytest.approx(0.1) and sim.ticks == 5
    assert sim.device_bytes == pytest.approx(10 * MiB) and sim.writeback_bytes == 0.0


def test_the_run_stops_at_its_time_limit_in_whole_ticks():
    direct = DirectWriter(1 << 40, 1 * MiB, 4)
    direct.start(0.0)
    sim = _sim(direct, tick=2)
    assert sim.run_until_direct_done(0.1) == pytest.approx(0.104)      # ceil(0.1 / 0.008) = 13 ticks
    assert sim.ticks == 13 and not direct.done
    with pytest.raises(ValueError, match="^no direct writer to wait for$"):
        _sim(None).run_until_direct_done(1.0)


def test_the_observer_sees_every_tick_after_it_ran():
    seen = []
    sim = _sim(None, observer=lambda s: seen.append((s.ticks, s.clock.now())))
    sim.tick()
    sim.tick()
    assert seen == [(1, sim.model.clock.now() - 1), (2, sim.model.clock.now())]


def test_a_simulation_checks_its_arguments():
    model = WritebackModel(clock=SimulatedClock(250))
    device = DeviceModel(1.0, 1, 1, 1)
    with pytest.raises(TypeError, match="^model must be a WritebackModel"):
        Simulation(None, device, tick_jiffies=1, direct=None)
    with pytest.raises(TypeError, match="^model.clock must be a SimulatedClock$"):
        Simulation(WritebackModel(clock=MonotonicClock(250)), device, tick_jiffies=1, direct=None)
    with pytest.raises(TypeError, match="^device must be a DeviceModel"):
        Simulation(model, None, tick_jiffies=1, direct=None)
    for bad in (0, (1 << 32) + 1):
        with pytest.raises(ValueError, match=_message("tick_jiffies", 1, 1 << 32)):
            Simulation(model, device, tick_jiffies=bad, direct=None)
    assert Simulation(model, device, tick_jiffies=1 << 32, direct=None).tick_jiffies == 1 << 32
    with pytest.raises(TypeError, match="^direct must be a DirectWriter or None"):
        Simulation(model, device, tick_jiffies=1, direct="fio")
    with pytest.raises(TypeError, match="^observer must be"):
        Simulation(model, device, tick_jiffies=1, direct=None, observer=3)


def test_writeback_shares_the_device_by_its_throttling_depth_and_every_byte_is_counted(monkeypatch):
    calls = []
    events: list = []
    real = simulation.share_bandwidth

    def recording(capacity, weights, demands):
        grants = real(capacity, weights, demands)
        calls.append((capacity, list(weights), list(demands), grants))
        events.append(("share", grants))
        return grants
    monkeypatch.setattr(simulation, "share_bandwidth", recording)
    real_run, real_deliver = WritebackModel._writeback_run, IOStream.deliver

    def run(self, wb, pages):
        events.append(("run", wb, pages))
        return real_run(self, wb, pages)

    def deliver(self, pages):
        events.append(("deliver", self, pages))
        return real_deliver(self, pages)
    monkeypatch.setattr(WritebackModel, "_writeback_run", run)
    monkeypatch.setattr(IOStream, "deliver", deliver)
    rec = _Recorder()
    sc = TINY
    run_once("bdev-devt", sc, seed=1, observer=rec)
    sim = rec.sim
    dt = sc.tick_jiffies / sc.hz
    depths = set()
    for capacity, weights, demands, grants in calls:
        assert capacity == pytest.approx(sc.device_bandwidth * dt)
        assert weights[0] <= sc.foreground_iodepth * sc.foreground_block_size      # the direct writer first
        wb = weights[1:]
        n = sum(1 for d in demands[1:] if d > 0)
        if wb:
            assert len(set(wb)) == 1 and n > 0                # split evenly among the writeback streams
            depth = wb[0] * n / sc.writeback_request_bytes
            assert depth in (sc.wbt_normal_depth, sc.wbt_background_depth)
            depths.add(depth)
    assert depths == {sc.wbt_normal_depth, sc.wbt_background_depth}   # both classes were seen
    # the device's bytes are the direct writer's plus writeback's, and writeback's are the pages written
    assert sim.device_bytes == pytest.approx(sim.direct.served + sim.writeback_bytes)
    assert sim.writeback_bytes > 0
    assert sim.device_bytes <= sc.device_bandwidth * sim.clock.elapsed_seconds * (1 + 1e-9)
    written = rec.sim.model.stats.written_by_reason
    assert sim.writeback_bytes == (sum(written.values()) - written["mount"] - written.get("sync", 0)) * PAGE_SIZE
    # after the direct writer (first), each writeback work and then each flush stream gets its own grant, in
    # whole pages with its fraction carried
    assert _check_grants(events, first=1) >= 2


def _check_grants(events: list, first: int = 0) -> int:
    """Check that after each sharing the streams (writeback works, then flush streams) ran in the order of
    the grants from index ``first`` on, each with its grant in whole pages plus the fraction it carried;
    returns the most streams sharing one tick."""
    carry: dict[int, float] = {}
    grants = None
    most = 0
    k = 0
    for event in events:
        if event[0] == "share":
            grants, k = event[1], first
            most = max(most, len(grants) - first)
        elif grants is not None and k < len(grants):
            _, stream, pages = event
            value = grants[k] / PAGE_SIZE + carry.get(id(stream), 0.0)
            assert pages == int(value)
            carry[id(stream)] = value - int(value)
            k += 1
    return most


def _periodic_sim(dirty: list[int], monkeypatch=None, events=None) -> tuple[Simulation, list]:
    """No direct writer; one file per memcg (so one wb each) with ``dirty`` pages, written by periodic
    writeback after 1 s (expiry and flusher period 1 s, ticks of 0.1 s, a 1 MiB/s device)."""
    tunables = WritebackTunables(hz=100, dirty_expire_centisecs=100, dirty_writeback_centisecs=100)
    model = WritebackModel(mechanism="owner-wb", clock=SimulatedClock(100), tunables=tunables)
    disk = model.add_disk("vda", 1 * MiB)
    inodes = []
    for i, n in enumerate(dirty):
        inode = model.create_inode(disk, f"f{i}")
        model.dirty_pages(inode, n, model.create_memcg(f"m{i}"))
        inodes.append(inode)
    if monkeypatch is not None:
        real_share, real_run = simulation.share_bandwidth, model._writeback_run

        def share(capacity, weights, demands):
            grants = real_share(capacity, weights, demands)
            events.append(("share", grants))
            return grants

        def run(wb, pages):
            events.append(("run", wb, pages))
            return real_run(wb, pages)
        monkeypatch.setattr(simulation, "share_bandwidth", share)
        monkeypatch.setattr(model, "_writeback_run", run)
    return Simulation(model, DeviceModel(1.0 * MiB, 64 * KiB, 8, 4), tick_jiffies=10, direct=None), inodes


def test_a_lone_dirty_page_is_written_once_it_expires():
    sim, [inode] = _periodic_sim([1])
    for _ in range(30):
        sim.tick()
    assert inode.dirty == 0 and inode.written == 1
    assert sim.writeback_bytes == sim.device_bytes == PAGE_SIZE


def test_concurrent_writeback_streams_each_write_their_own_grant_in_whole_pages(monkeypatch):
    events: list = []
    # the middle one is done first: from then on the last one's grant differs from it
    sim, inodes = _periodic_sim([450, 30, 700], monkeypatch, events)
    for _ in range(60):
        sim.tick()
    assert [i.dirty for i in inodes] == [0, 0, 0] and [i.written for i in inodes] == [450, 30, 700]
    assert _check_grants(events) == 3
    assert sim.writeback_bytes == sim.device_bytes == (30 + 700 + 450) * PAGE_SIZE


def test_granted_bytes_become_whole_pages_with_the_fraction_carried():
    sim = _sim(None)
    assert sim._pages(1, 1.5 * PAGE_SIZE) == 1
    assert sim._pages(1, 0.75 * PAGE_SIZE) == 1      # 0.5 carried + 0.75
    assert sim._carry[1] == pytest.approx(0.25)
    assert sim._pages(1, 0.75 * PAGE_SIZE) == 1 and sim._carry[1] == pytest.approx(0.0)
    assert sim._pages(2, 0.5 * PAGE_SIZE) == 0


# ---------------------------------------------------------------------------------------------------------------
# churn.py

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


# ---------------------------------------------------------------------------------------------------------------
# sensitivity.py

def test_the_thresholds_are_the_documented_ones():
    assert (HOLDS_PERCENT, VANISHES_PERCENT, FOREGROUND_GAIN_PERCENT) == (50.0, 10.0, 5.0)
    assert verdict({"background_write_gib": -50.0}) == "holds"
    assert verdict({"background_write_gib": -49.9}) == "weakened"
    assert verdict({"background_write_gib": -10.0}) == "weakened"
    assert verdict({"background_write_gib": -9.9}) == "vanishes"


def test_a_perturbation_sorts_its_fields_and_applies_them():
    p = Perturbation.of(7, hz=1000, cpus=2)
    assert p.name == "7" and p.params == (("cpus", 2), ("hz", 1000))
    assert p.apply(Scenario()) == Scenario(cpus=2, hz=1000)
    assert Perturbation("x").params == () and Perturbation("x").apply(TINY) == TINY


def test_each_perturbation_is_named_after_what_it_sets():
    assert [(p.name, dict(p.params)) for p in SENSITIVITY] == [
        ("defaults", {}),
        ("device bandwidth 100 MiB/s", {"device_bandwidth": 100 * MiB}),
        ("device bandwidth 400 MiB/s", {"device_bandwidth": 400 * MiB}),
        ("foreground iodepth 8", {"foreground_iodepth": 8}),
        ("foreground iodepth 128", {"foreground_iodepth": 128}),
        ("wbt depths halved (4 / 2)", {"wbt_normal_depth": 4, "wbt_background_depth": 2}),
        ("wbt depths doubled (16 / 8)", {"wbt_normal_depth": 16, "wbt_background_depth": 8}),
        ("dirty expiry 15 s", {"dirty_expire_centisecs": 1500}),
        ("dirty expiry 60 s", {"dirty_expire_centisecs": 6000}),
        ("memory.max 64 MiB", {"cgroup_memory_max": 64 * MiB}),
        ("op rate 32/s", {"cgroup_ops_rate": 32.0}),
        ("memory.max 64 MiB and op rate 32/s", {"cgroup_memory_max": 64 * MiB, "cgroup_ops_rate": 32.0}),
        ("background job in its own memcg", {"background_in_root": False}),
        ("1 memcg", {"cgroups": 1}),
        ("8 memcgs", {"cgroups": 8})]
    assert [(p.name, dict(p.params)) for p in QUICK_SENSITIVITY] == [
        ("defaults", {}), ("foreground iodepth 128", {"foreground_iodepth": 128}),
        ("background job in its own memcg", {"background_in_root": False})]


def _row(name: str, background: float, foreground: float) -> dict:
    change = {"background_write_gib": background, "foreground_bandwidth_mib_s": foreground,
              "foreground_completion_s": 0.0, "foreground_mean_latency_ms": 0.0}
    return {"name": name, "params": {}, "change_percent": change, "verdict": verdict(change)}


def test_rows_are_grouped_by_verdict_in_run_order_and_small_gains_found():
    rows = [_row("a", -80.0, 20.0), _row("b", -30.0, 5.0), _row("c", 1.5, 4.9), _row("d", -90.0, -1.0),
            _row("e", -20.0, 6.0)]
    result = SensitivityResult(1, 0, Scenario(), rows)
    groups = result.by_verdict()
    assert {k: [r["name"] for r in v] for k, v in groups.items()} == \
        {"holds": ["a", "d"], "weakened": ["b", "e"], "vanishes": ["c"]}
    assert [r["name"] for r in result.small_foreground_gain()] == ["c", "d"]
    assert SensitivityResult(1, 0, Scenario(), []).by_verdict() == {"holds": [], "weakened": [], "vanishes": []}


def test_the_sensitivity_json_names_its_thresholds_and_base_scenario():
    result = SensitivityResult(2, 9, TINY, [_row("a", -80.0, 20.0)], wall_seconds=3.5)
    assert result.as_dict() == {"rows": result.rows, "runs": 2, "seed": 9,
                                "thresholds": {"holds_background_reduction_percent": 50.0,
                                               "vanishes_background_reduction_percent": 10.0,
                                               "small_foreground_gain_percent": 5.0},
                                "base_scenario": TINY.as_dict(), "wall_seconds": 3.5}
    assert SensitivityResult(2, 9, TINY, []).wall_seconds == 0.0


def test_the_summary_states_the_counts_ranges_and_rows_of_each_verdict():
    result = SensitivityResult(1, 0, Scenario(), [_row("a", -80.0, 20.0), _row("b", -30.0, 2.0),
                                                  _row("c", 1.5, 0.0), _row("d", -60.25, 30.0)])
    assert summary_text(result) == (
        "The patched kernel cuts the background file's write I/O by at least 50 % in 2 of 4 rows (changes from "
        "-60.2 % to -80.0 %). It is weakened (10-50 %) in: b (-30.0 %). It vanishes (under 10 %) in: c (+1.5 %). "
        "The foreground bandwidth gain is under 5 % in: b (+2.0 %); c (+0.0 %).")
    one = SensitivityResult(1, 0, Scenario(), [_row("only", -70.0, 10.0)])
    assert summary_text(one) == (
        "The patched kernel cuts the background file's write I/O by at least 50 % in 1 of 1 rows (only, -70.0 %). "
        "It is weakened (10-50 %) in: none. It vanishes (under 10 %) in: none. The foreground bandwidth gain is "
        "under 5 % in: none.")
    assert "in 0 of 1 rows (no row)" in summary_text(SensitivityResult(1, 0, Scenario(), [_row("x", 0.0, 0.0)]))


def test_a_sensitivity_run_has_one_row_per_perturbation_from_the_experiment_on_it(monkeypatch):
    calls = []
    real = sensitivity.run_experiment

    def recording(runs, seed, scenario):
        calls.append((runs, seed, scenario))
        return real(runs, seed, scenario)
    monkeypatch.setattr(sensitivity, "run_experiment", recording)
    pair = (Perturbation.of("defaults"), Perturbation.of("deeper", foreground_iodepth=64))
    handed = []
    t0 = time.perf_counter()
    result = run_sensitivity(2, 4, QUIET, perturbations=pair, wrap=lambda pairs: handed.append(pairs) or pairs)
    assert 0 < result.wall_seconds <= time.perf_counter() - t0
    assert calls == [(2, 4, QUIET), (2, 4, QUIET.replace(foreground_iodepth=64))]
    assert handed == [list(zip(pair, [QUIET, QUIET.replace(foreground_iodepth=64)]))]
    assert (result.runs, result.seed, result.base_scenario) == (2, 4, QUIET) and result.wall_seconds > 0
    experiment_result = real(2, 4, QUIET.replace(foreground_iodepth=64))
    row = result.rows[1]
    assert row == {"name": "deeper", "params": {"foreground_iodepth": 64},
                   "change_percent": experiment_result.change_percent, "baseline": experiment_result.baseline,
                   "patched": experiment_result.patched, "verdict": verdict(experiment_result.change_percent)}
    assert [r["name"] for r in result.rows] == ["defaults", "deeper"]


def test_a_sensitivity_run_defaults_to_one_run_of_seed_zero_on_the_full_set(monkeypatch):
    handed = []
    result = run_sensitivity(wrap=lambda pairs: handed.append(list(pairs)) or [])
    assert [p for p, _ in handed[0]] == list(SENSITIVITY) and handed[0][0][1] == Scenario()
    assert (result.runs, result.seed, result.rows) == (1, 0, [])
    result = run_sensitivity(1000, (1 << 48) - 1, wrap=lambda pairs: [])
    assert (result.runs, result.seed) == (1000, (1 << 48) - 1)


@pytest.mark.parametrize("kwargs, exc, message", [
    ({"runs": 0}, ValueError, _message("runs", 1, 1000)),
    ({"runs": 1001}, ValueError, _message("runs", 1, 1000)),
    ({"seed": -1}, ValueError, _message("seed", 0, (1 << 48) - 1)),
    ({"seed": 1 << 48}, ValueError, _message("seed", 0, (1 << 48) - 1)),
    ({"scenario": "default"}, TypeError, "^scenario must be a Scenario"),
    ({"perturbations": ()}, ValueError, "^perturbations must hold at least one Perturbation$"),
    ({"perturbations": ("defaults",)}, TypeError, "^perturbations must be a sequence of Perturbation"),
    ({"perturbations": (Perturbation.of("ok"), Perturbation.of("bad", cgroups=-1))}, ValueError, "^cgroups"),
    ({"wrap": 3}, TypeError, "^wrap must be"),
])
def test_a_sensitivity_run_refuses_bad_arguments_before_anything_runs(kwargs, exc, message, monkeypatch):
    monkeypatch.setattr(sensitivity, "run_experiment", lambda *a, **k: pytest.fail("ran"))
    with pytest.raises(exc, match=message):
        run_sensitivity(**kwargs)


class _Stream:
    """A flush stream stand-in: its demand in pages, its I/O class, what it was delivered."""

    def __init__(self, pages: int, io_class: str):
        self.pages, self.io_class, self.got, self.done = pages, io_class, [], False

    def demand_pages(self) -> int:
        return self.pages

    def deliver(self, pages: int) -> int:
        self.got.append(pages)
        written = min(pages, self.pages)
        self.pages -= written
        self.done = self.pages == 0
        return written


@pytest.mark.parametrize("one_page_stream", [True, False])
def test_a_tick_grants_every_wanting_wb_and_stream_its_own_share_of_the_device(monkeypatch, one_page_stream):
    # One tick with a direct writer, three flushers (idle, with a spent work, with a live background work) and
    # flush streams (a normal one wanting nothing, optionally a normal one wanting one page, a background one
    # whose demand fits in its share, so it finishes this tick): each wb and stream that wants pages gets the
    # grant the device's split gives it at the depth of the I/O classes that want pages, in whole pages; the
    # spent work is finished with 0 pages; the finished stream's carried fraction is dropped.
    model = WritebackModel(mechanism="bdev-devt", clock=SimulatedClock(250), tunables=WritebackTunables(hz=250))
    device = DeviceModel(100.0 * MiB, 1 * MiB, 8, 4)
    direct = DirectWriter(10 * MiB, 1 * MiB, 4)
    direct.start(0.0)
    sim = Simulation(model, device, tick_jiffies=1, direct=direct)
    idle, spent, live = (SimpleNamespace(active=a) for a in (None, SimpleNamespace(io_class="normal"),
                                                             SimpleNamespace(io_class="background")))
    wb_pages = {id(spent): 0, id(live): 200}
    runs: list = []
    monkeypatch.setattr(model, "_flushers_to_scan", lambda: [idle, spent, live])
    monkeypatch.setattr(model, "_flusher_next_work", lambda wb: None)
    monkeypatch.setattr(model, "_writeback_demand", lambda wb: wb_pages[id(wb)])
    monkeypatch.setattr(model, "_writeback_run", lambda wb, pages: runs.append((wb, pages)) or pages)
    streams = [_Stream(0, "normal")] + ([_Stream(1, "normal")] if one_page_stream else []) + [_Stream(20, "background")]
    monkeypatch.setattr(model.workqueue, "streams", lambda: list(streams))
    monkeypatch.setattr(model.workqueue, "step", lambda: None)
    monkeypatch.setattr(model.workqueue, "reap", lambda: None)
    weight_direct, demand_direct = direct.weight(), direct.demand()
    sim.tick()

    wanting = 1 + (2 if one_page_stream else 1)       # the live wb and the streams that want pages
    depth = device.wbt_normal_depth if one_page_stream else device.wbt_background_depth
    share = depth * device.writeback_request_bytes / wanting
    demands = [demand_direct, 200 * PAGE_SIZE] + [s_pages * PAGE_SIZE for s_pages in
                                                   ([0, 1, 20] if one_page_stream else [0, 20])]
    grants = simulation.share_bandwidth(device.bandwidth * sim.dt, [weight_direct] + [share] * (len(demands) - 1),
                                        demands)
    pages = [int(g / PAGE_SIZE) for g in grants]
    assert runs == [(spent, 0), (live, pages[1])] and pages[1] > 0
    assert [s.got for s in streams] == [[p] for p in pages[2:]]
    assert streams[-1].done and id(streams[-1]) not in sim._carry and id(live) in sim._carry
