"""The tracker's commands: output contract, --json keys, and hostile arguments (exit 2, one line)."""
from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

from helpers.clirun import run_pybcache

pytestmark = [pytest.mark.native, pytest.mark.e2e]


def run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return run_pybcache(*args, timeout=timeout)


def test_memory_json_reproduces_the_posted_rows():
    p = run("memory", "--json")
    assert p.returncode == 0, p.stderr
    rows = json.loads(p.stdout)["rows"]
    assert len(rows) == 9
    cell = {(r["size_bytes"] >> 40, r["variant"]): (r["idle_bytes"], r["peak_bytes"]) for r in rows}
    assert cell[(1, "page")] == (256, 65792) and cell[(1, "atomic")] == (1024, 263168)
    assert cell[(100, "global")] == (25600, 6579200)


def test_memory_table_is_readable():
    p = run("memory", "--sizes", "1T")
    assert p.returncode == 0
    assert "Idle memory" in p.stdout and "Peak memory" in p.stdout and "64.25 KiB" in p.stdout


def test_bench_quick_json_has_floors_and_ratios():
    p = run("bench", "--quick", "--json", timeout=300)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert {"atomic_pair_ns", "spinlock_pair_ns", "cython_empty_pair_ns"} <= set(out["floors"])
    assert [r["variant"] for r in out["results"]] == ["global", "page", "atomic"]
    for r in out["results"]:
        # Each ratio is its definition over the same run's own measured fields (how fast is not asserted:
        # timing is for benchmarks/, never a pass/fail test).
        # The batch pair and its floor are timed in interleaved rounds: the ratio is the median of the
        # rounds' ratios, each the round's pair over the same round's floor.
        rounds = r["batch_pair_vs_floor_rounds"]
        assert len(rounds) == out["params"]["batch_rounds"] == 3
        assert rounds == pytest.approx([p / f for p, f in zip(r["batch_pair_round_ns"], r["batch_floor_round_ns"])])
        assert r["batch_pair_vs_floor"] == pytest.approx(float(np.median(rounds)))
        sp = r["batch_pair_vs_floor_spread"]
        assert sp["min"] == min(rounds) and sp["max"] == max(rounds) and sp["runs"] == 3
        assert r["batch_pair_ns"] == pytest.approx(float(np.median(r["batch_pair_round_ns"])))
        assert r["speedup_vs_reference"] == pytest.approx(r["reference_pair_ns"] / r["single_pair_ns"])
        assert r["single_pair_vs_empty_call"] == pytest.approx(
            r["single_pair_ns"] / out["floors"]["cython_empty_pair_ns"])


def test_bench_json_states_each_target_beside_its_ratio_and_the_floor_spread():
    """Issue 15: every verdict is computed from the ratio and the target printed beside it, and the
    2-thread floor comes with its spread and whether its threads were pinned."""
    p = run("bench", "--quick", "--json", timeout=300)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    fl = out["floors"]
    sp = fl["shared_atomic_pair_spread_ns"]
    assert sp["min"] <= sp["median"] <= sp["max"] and sp["min"] == fl["shared_atomic_pair_ns"] and sp["runs"] >= 2
    assert isinstance(fl["shared_pinned"], bool) and fl["cpus"] >= 1
    assert fl["shared_pinned"] == (fl["cpus"] >= 2)
    for r in out["results"]:
        assert r["batch_pair_met"] == (r["batch_pair_vs_floor"] <= r["batch_pair_target"] == 1.5)
        assert r["idle_pair_deferred_met"] == (r["idle_pair_deferred_vs_warm"] <= r["idle_pair_target"] == 1.5)
        assert r["allocations_per_1000_writes_deferred"] <= 1  # the page is kept: one allocation per run
    eager = {r["variant"]: r["allocations_per_1000_writes_eager"] for r in out["results"]}
    assert eager["global"] == eager["page"] == 1000 and eager["atomic"] <= 1  # the atomic frees only in reclaim
    for r in out["same_chunk"]:
        assert r["floor_spread_ns"]["min"] == r["floor_ns"] and isinstance(r["floor_pinned"], bool)
        if r["variant"] != "atomic":  # where the lock variants' pair goes, each ratio from its two figures
            assert r["colocated_vs_separate"] == r["lock_floor_colocated_ns"] / r["lock_floor_ns"]
            assert r["vs_lock_floor"] == r["pair_cpu_ns"] / r["lock_floor_ns"]
    for rows in (out["same_chunk"], out["same_chunk_lock_options"]):
        assert len({r["driver_floor_ns"] for r in rows}) == 1
    assert [r["variant"] for r in out["same_chunk_lock_options"]] == ["global+ticket", "page+ticket",
                                                                       "global+mcs", "page+mcs"]
    for r in out["same_chunk"] + out["same_chunk_lock_options"]:
        # one driver floor (the do-nothing tracker's run) for every row of a run, each split from its figures
        assert r["driver_floor_ns"] > 0
        assert r["vs_driver_floor"] == r["pair_cpu_ns"] / r["driver_floor_ns"]
        assert r["tracker_ns"] == r["pair_cpu_ns"] - r["driver_floor_ns"]
        assert r["driver_floor_vs_floor"] == r["driver_floor_ns"] / r["floor_ns"]
        if r["variant"] != "atomic":  # each row beside the floor of the lock it runs on
            assert r["lock"] == {"": "pthread", "ticket": "ticket", "mcs": "mcs"}[r["variant"].partition("+")[2]]
            assert r["vs_own_lock_floor"] == r["pair_cpu_ns"] / r["own_lock_floor_ns"]
            if r["lock"] == "pthread":
                assert r["own_lock_floor_ns"] == r["lock_floor_ns"]


@pytest.mark.parametrize("args", [
    ["memory", "--sizes", "foo"],
    ["memory", "--sizes", ""],
    ["memory", "--sizes", "0"],
    ["memory", "--sizes", "-1T"],
    ["memory", "--sizes", "1X"],
    ["memory", "--sizes", "2P"],
    ["memory", "--sizes"],
    ["memory", "--bogus"],
    ["bench", "--quick=3"],
    ["nosuchcommand"],
])
def test_hostile_arguments_exit_2_with_one_line(args):
    p = run(*args)
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr
