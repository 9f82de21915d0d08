"""A loaded kernel patch runs in every driver that takes a tracker (issue #12): the cached-device model
(CachedDevice(tracker=...) and sync=<patch>), the explorer, the race stress, the fio mix, the stress."""
from __future__ import annotations

import json

import pytest

import pybcache
from pybcache.bcache.cachedev import CachedDevice, explore, fio, race

from helpers.kpatch_util import BAD, EXAMPLES

pytestmark = [pytest.mark.native, pytest.mark.e2e]

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
SAFE = ["v3_proposal", "v3_atomic"]


@pytest.fixture(scope="module")
def patches():
    return {name: pybcache.load_patch(EXAMPLES / f"{name}.c") for name in ("v2_posted", *SAFE)}


def _log_addresses(tracker, kind):
    return {int(r["message"].split()[1]) for r in tracker.kernel_log() if r["message"].startswith(kind + " ")}


# -- the explorer -------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", SAFE)
@pytest.mark.parametrize("writes,reads", [(1, 1), (2, 1), (1, 2)])
def test_the_v3_patches_have_no_violation_under_any_explored_interleaving(patches, name, writes, reads):
    res = explore(sync=patches[name], writes=writes, reads=reads)
    assert res["finished"] and res["schedules"] > 0
    assert res["violations"] == 0 and res["counterexample"] is None
    assert res["config"]["patch"] == f"{patches[name].name} ({patches[name].path})"


def test_v2_with_a_failed_allocation_leaves_a_write_untracked_and_the_explorer_finds_the_stale_read(patches):
    res = explore(sync=EXAMPLES / "v2_posted.c", writes=1, reads=2, fault_at=1)
    assert res["stale_read_schedules"] > 0 and res["untracked_schedules"] > 0
    text = "\n".join(res["counterexample"])
    assert "write_start" in text and "UNTRACKED" in text and "STALE READ" in text
    again = explore(sync=patches["v2_posted"], writes=1, reads=2, fault_at=1)
    assert again["counterexample"] == res["counterexample"]   # deterministic


def test_v2_without_a_failed_allocation_has_no_violation(patches):
    res = explore(sync=patches["v2_posted"], writes=1, reads=2)
    assert res["finished"] and res["violations"] == 0


def test_a_patch_that_hangs_stops_the_explorer_with_a_timeout_naming_the_hung_task():
    with pytest.raises(TimeoutError, match="hung"):
        explore(sync=BAD / "hangs.c", writes=1, reads=1, hung_timeout=0.2)


@pytest.mark.parametrize("option", [dict(counter_bits=32), dict(chunk_size=8192), dict(preload=1),
                                    dict(granularity="page"), dict(alloc_failure="pool")])
def test_lab_only_explorer_options_with_a_patch_are_a_value_error_naming_both(patches, option):
    (name,) = option
    with pytest.raises(ValueError, match=rf"sync=.*{name}"):
        explore(sync=patches["v3_proposal"], **option)


def test_hung_timeout_with_a_lab_tracker_is_a_value_error():
    with pytest.raises(ValueError, match="hung_timeout"):
        explore(sync="page", hung_timeout=1.0)


# -- the race stress ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", SAFE)
def test_the_v3_patches_have_no_stale_read_under_the_race_stress(patches, name):
    res = race(sync=patches[name], seconds=0.2, threads=4)
    assert res["writes"] > 0 and res["reads"] > 0
    assert res["stale_reads"] == 0 and res["stale_cached_blocks"] == 0
    assert res["kernel_reports"] == {}
    assert res["config"]["sync"] == patches[name].path


def test_a_patchs_ends_run_on_threads_other_than_the_submitters():
    t = pybcache.load_patch(BAD / "thread_probe.c").tracker(64 * 4096)
    d = CachedDevice(64 * 4096, tracker=t)
    for _ in range(3):
        d.write(0, 4096)
    w = d.begin_write(4096, 4096)
    w.run()
    starts, ends = _log_addresses(t, "start"), _log_addresses(t, "end")
    assert len(starts) == 1 and ends and not (starts & ends)


def test_a_patch_that_hangs_under_race_surfaces_as_a_timeout_not_a_hang():
    with pytest.raises(TimeoutError, match="hung"):
        race(sync=BAD / "hangs.c", seconds=0.2, hung_timeout=0.3)


def test_race_with_a_patch_and_a_lab_only_option_is_a_value_error(patches):
    with pytest.raises(ValueError, match="alloc_failure"):
        race(sync=patches["v3_proposal"], alloc_failure="pool")


# -- the cached-device model ----------------------------------------------------------------------------

def test_a_device_on_a_callers_patch_tracker_round_trips_a_write_and_a_read(patches):
    t = patches["v3_proposal"].tracker(MiB)
    d = CachedDevice(MiB, tracker=t)
    assert d.sync == "patch" and d.patch is patches["v3_proposal"] and d.tracker is t
    v = d.write(0, 8 * KiB)
    got = d.read(0, 8 * KiB)
    assert got["versions"] == [v, v] and not got["stale"] and got["inserted"] == 2
    assert t.stats()["starts"] == 1 == t.stats()["ends"] and t.stats()["checks"] == 1
    assert d.tracker_stats()["starts"] == 1


def test_sync_takes_a_patch_path_and_builds_its_own_instance():
    d = CachedDevice(MiB, sync=str(EXAMPLES / "v3_atomic.c"))
    assert d.sync == "patch" and d.patch.name == "v3-atomic"
    d.write(0, 4096)
    assert d.read(0, 4096)["versions"] == [1]


def test_the_callers_fault_injection_moves_when_the_model_injects_into_a_patch(patches):
    fault = pybcache.FaultInjection(probability=1.0, times=1)
    t = patches["v2_posted"].tracker(MiB, fault=fault)
    d = CachedDevice(MiB, tracker=t)
    w = d.begin_write(0, 4096)
    w.step()
    assert w.untracked and fault.injected == 1 == d.tracker_stats()["faults_injected"]


def test_the_callers_fault_injection_moves_when_the_model_injects_into_a_lab_tracker():
    fault = pybcache.FaultInjection(probability=1.0, times=1)
    t = pybcache.BypassWriteTracker(MiB, chunk_size=4096, fault=fault, alloc_failure="untracked")
    d = CachedDevice(MiB, tracker=t)
    d.write(0, 4096)
    assert fault.injected == 1 and d.stats()["untracked_writes"] == 1 and t.stats()["starts"] == 1


@pytest.mark.parametrize("option", [dict(sync="atomic"), dict(counter_bits=32), dict(fault=pybcache.FaultInjection()),
                                    dict(wait_timeout=1.0), dict(chunk_size=4096)])
def test_tracker_and_an_option_of_its_own_are_mutually_exclusive(patches, option):
    (name,) = option
    for t in (patches["v3_proposal"].tracker(MiB), pybcache.BypassWriteTracker(MiB)):
        with pytest.raises(ValueError, match=rf"tracker and {name}"):
            CachedDevice(MiB, tracker=t, **option)


def test_a_patch_and_a_lab_only_option_are_mutually_exclusive(patches):
    with pytest.raises(ValueError, match=r"sync='v3-proposal' \(a patch\) and counter_bits"):
        CachedDevice(MiB, sync=patches["v3_proposal"], counter_bits=32)
    with pytest.raises(ValueError, match="granularity"):
        CachedDevice(MiB, sync=patches["v3_proposal"], granularity="page")


def test_a_tracker_smaller_than_the_device_is_a_value_error(patches):
    with pytest.raises(ValueError, match="device_size"):
        CachedDevice(2 * MiB, tracker=patches["v3_proposal"].tracker(MiB))


def test_a_patch_tracker_in_use_by_a_device_cannot_be_closed(patches):
    t = patches["v3_proposal"].tracker(MiB)
    d = CachedDevice(MiB, tracker=t)
    with pytest.raises(RuntimeError, match="in use"):
        t.close()
    del d
    assert t.close()["leaked_bytes"] == 0


def test_a_hung_patch_start_in_the_model_raises_timeout_error_naming_the_report():
    d = CachedDevice(MiB, sync=BAD / "hangs.c", wait_timeout=0.2)
    with pytest.raises(TimeoutError, match="hung"):
        d.write(0, 4096)


# -- the fio mix ------------------------------------------------------------------------------------------

def test_fio_measures_a_patch_as_one_more_variant(patches):
    res = fio(size=16 * MiB, jobs=2, seconds=0.1, variants=["none"], inflight=4, write_size=64 * KiB,
              sync=patches["v3_proposal"])
    rows = {r["variant"]: r for r in res["rows"]}
    assert set(rows) == {"none", "patch"} and rows["patch"]["writes"] > 0 and rows["patch"]["stale_reads"] == 0
    assert rows["patch"]["patch"] == res["config"]["patch"] and res["kernel_reports"] == {}


# -- the native stress --------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", SAFE)
def test_the_stress_drives_a_patch_tracker_and_ends_every_write(patches, name):
    t = patches[name].tracker(GiB)
    res = pybcache.stress(t, threads=2, ops=500)
    assert res["ops"] == 1000 and sum(p["ends"] for p in res["per_thread"]) == 1000
    assert t.stats()["starts"] == 1000 == t.stats()["ends"] and t.kernel_reports() == []
    assert not t.is_active(0, GiB)


def test_the_stress_ends_a_patchs_writes_on_completion_threads():
    t = pybcache.load_patch(BAD / "thread_probe.c").tracker(GiB)
    pybcache.stress(t, threads=2, ops=20)
    starts, ends = _log_addresses(t, "start"), _log_addresses(t, "end")
    assert len(starts) == 2 and len(ends) == 2 and not (starts & ends)


def test_a_patch_that_hangs_under_the_stress_surfaces_as_a_timeout():
    t = pybcache.load_patch(BAD / "hangs.c").tracker(GiB, hung_timeout=0.2)
    with pytest.raises(TimeoutError, match="hung"):
        pybcache.stress(t, threads=1, ops=10)


def test_inline_completions_with_a_patch_are_a_value_error(patches):
    with pytest.raises(ValueError, match="completions='inline'"):
        pybcache.stress(patches["v3_proposal"].tracker(GiB), threads=1, ops=1, completions="inline")


# -- the command line -----------------------------------------------------------------------------------------

def _cli(*args):
    from helpers.clirun import run_pybcache
    return run_pybcache(*args, timeout=300)


def test_cli_explore_with_sync_patch_reports_the_patch_and_no_violation():
    proc = _cli("explore", "--sync", str(EXAMPLES / "v3_proposal.c"), "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["sync"] == f"v3-proposal ({EXAMPLES / 'v3_proposal.c'})"
    assert out["violations"] == 0 and out["finished"] and out["kernel_report_schedules"] == 0
    assert [r["bound"] for r in out["runs"]] == ["1w1r", "2w1r", "1w2r"]


def test_cli_explore_finds_v2s_stale_read_with_an_injected_allocation_failure():
    proc = _cli("explore", "--sync", str(EXAMPLES / "v2_posted.c"), "--fault-at", "1", "--scenario", "1w2r")
    assert proc.returncode == 0, proc.stderr
    assert "STALE READ" in proc.stdout and "write_start" in proc.stdout


def test_cli_race_with_sync_patch_prints_its_reports_and_no_stale_data():
    proc = _cli("race", "--sync", str(EXAMPLES / "v3_atomic.c"), "--seconds", "0.2", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["sync"].startswith("v3-atomic (") and out["kernel_reports"] == {}
    assert out["stale_reads"] == 0 and out["stale_cached_blocks"] == 0


@pytest.mark.parametrize("command,option", [
    ("race", ["--alloc-failure", "pool"]), ("race", ["--chunk-size", "8K"]), ("race", ["--granularity", "page"]),
    ("explore", ["--counter-bits", "32"]), ("explore", ["--overflow", "clamp"]), ("explore", ["--counter-max", "2"]),
    ("explore", ["--preload", "1"]), ("explore", ["--alloc-failure", "untracked"]),
    ("fio", ["--granularity", "page"]),
])
def test_cli_lab_only_options_with_a_patch_exit_2_naming_the_option(command, option):
    proc = _cli(command, "--sync", str(EXAMPLES / "v3_proposal.c"), *option)
    assert proc.returncode == 2
    assert option[0] in proc.stderr and "applies to the lab's trackers, not to a patch" in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_cli_a_patch_that_does_not_compile_exits_2_with_the_compilers_error_line():
    proc = _cli("race", "--sync", str(BAD / "syntax_error.c"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    line = proc.stderr.strip()
    assert len(line.splitlines()) == 1 and "syntax_error.c:" in line and "error:" in line


def test_cli_a_sync_that_is_neither_a_variant_nor_a_c_file_exits_2():
    proc = _cli("explore", "--sync", "pages")
    assert proc.returncode == 2 and "invalid choice" in proc.stderr


def test_cli_a_patch_that_hangs_under_race_exits_1_naming_the_hung_task():
    proc = _cli("race", "--sync", str(BAD / "hangs.c"), "--hung-timeout", "0.2", "--seconds", "0.2")
    assert proc.returncode == 1 and "hung" in proc.stderr and "Traceback" not in proc.stderr


def test_cli_fio_measures_a_patch_column():
    proc = _cli("fio", "--size", "16M", "--seconds", "0.1", "--variants", "none", "--jobs", "2", "--inflight", "4",
                "--sync", str(EXAMPLES / "v3_proposal.c"), "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert [r["variant"] for r in out["rows"]] == ["none", "patch"] and out["sync"].startswith("v3-proposal (")


def test_the_explorer_split_by_prefix_gives_a_patchs_whole_search_result(patches):
    from pybcache import explore_distributed
    whole = explore(sync=patches["v2_posted"], writes=1, reads=2, fault_at=1)
    split = explore_distributed(workers=0, sync=str(EXAMPLES / "v2_posted.c"), writes=1, reads=2, fault_at=1)
    assert (split["schedules"], split["violations"]) == (whole["schedules"], whole["violations"])
    assert split["counterexample"] == whole["counterexample"]
