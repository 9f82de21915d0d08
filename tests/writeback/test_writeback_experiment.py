"""The v6 experiment on simulated time, and the dev_t-reuse churn comparison."""
from __future__ import annotations

import pytest

from pybcache.writeback import (POSTED_TABLE, ChurnScenario, DeviceModel, DirectWriter, Scenario, WritebackModel,
                                compare_churn, run_churn, run_experiment, run_once, share_bandwidth)

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
