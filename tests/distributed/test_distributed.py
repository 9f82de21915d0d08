"""The Dask paths against a real LocalCluster (2 worker processes, one per module): a sweep that
loses a worker mid-run, and the distributed explorer's totals against the in-process explorer's."""
from __future__ import annotations

import os
import signal

import pytest

from pybcache import explore, explore_distributed
from pybcache.dist.cluster import client_for
from pybcache.dist.sweep import parse_grid, sweep

pytestmark = [pytest.mark.native, pytest.mark.e2e]


@pytest.fixture(scope="module")
def client():
    with client_for(workers=2) as c:
        yield c


RACE_GRID = """
[race]
sync = ["none", "page"]
seconds = [0.3]
threads = [2]
"""


def test_a_worker_killed_mid_sweep_loses_and_duplicates_no_row(client, tmp_path):
    points = parse_grid(RACE_GRID)
    killed = []

    def kill_a_busy_worker(row):
        if killed:
            return
        busy = [addr for addr, keys in client.processing().items() if keys]
        if not busy:
            return
        pid = client.run(os.getpid, workers=[busy[0]])[busy[0]]
        os.kill(pid, signal.SIGKILL)
        killed.append(busy[0])

    res = sweep(points, reps=4, out=str(tmp_path), client=client, on_row=kill_a_busy_worker)
    assert killed, "no worker was busy after the first row: the test did not kill anything"
    keys = [(r["params"]["sync"], r["rep"]) for r in res["rows"]]
    assert sorted(keys) == sorted((s, rep) for s in ("none", "page") for rep in range(4))
    assert len(set(keys)) == 8 and res["ran"] == 8
    assert all("stale_reads" in r["figures"] for r in res["rows"])
    assert all(r["worker"].startswith("tcp://") for r in res["rows"])
    # the cache holds every row once: a rerun is free and identical
    again = sweep(points, reps=4, out=str(tmp_path), client=client)
    assert again["ran"] == 0 and again["rows"] == res["rows"]
    # the nanny restarts the killed worker; later tests in this module count on both being back
    client.wait_for_workers(2, timeout=120)


# -- the distributed explorer ------------------------------------------------------------------------

_SUMMED = ("schedules", "violations", "stale_read_schedules", "stale_cache_schedules", "bypass_schedules",
           "collision_schedules", "untracked_schedules", "underflow_schedules", "restart_schedules",
           "restart_capped_schedules", "stuck_schedules", "wrap_schedules", "clamp_schedules",
           "blocked_schedules", "reclaimed_schedules", "pruned_runs", "faults_injected")

CONFIGS = [dict(sync=s) for s in ("none", "page", "atomic")] + [
    dict(sync="page", alloc_failure="untracked", fault_at=k) for k in (1, 2)] + [
    dict(sync="atomic", alloc_failure="untracked", fault_at=1), dict(sync="page", check="entry")]
SCENARIOS = [(1, 1), (2, 1), (1, 2)]


def _same(a, b):
    assert {k: a[k] for k in _SUMMED} == {k: b[k] for k in _SUMMED}
    assert a["finished"] and b["finished"]
    assert a["counterexample"] == b["counterexample"]
    assert a["counterexample_steps"] == b["counterexample_steps"]


@pytest.mark.parametrize("w, r", SCENARIOS, ids=[f"{w}w{r}r" for w, r in SCENARIOS])
@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: "-".join(f"{v}" for v in c.values()))
def test_distributed_explorer_totals_equal_the_in_process_explorer(client, cfg, w, r):
    whole = explore(writes=w, reads=r, **cfg)
    split = explore_distributed(client=client, writes=w, reads=r, tasks_per_worker=4, **cfg)
    _same(whole, split)
    assert split["distributed"]["tasks"] >= 2 and split["distributed"]["workers"] == 2


@pytest.mark.parametrize("sync", ["none", "page"])
def test_distributed_explorer_without_reduction_equals_too(client, sync):
    whole = explore(sync=sync, writes=2, reads=1, reduce=False)
    _same(whole, explore_distributed(client=client, sync=sync, writes=2, reads=1, reduce=False))
    assert whole["schedules"] > explore(sync=sync, writes=2, reads=1)["schedules"]  # the reduction reduces


def test_the_violation_verdicts_come_through_the_split(client):
    unpatched = explore_distributed(client=client, sync="none", writes=1, reads=1)
    fixed = explore_distributed(client=client, sync="page", writes=1, reads=1)
    assert unpatched["violations"] > 0 and unpatched["counterexample"]
    assert fixed["violations"] == 0 and fixed["counterexample"] is None
