"""The Dask paths against a real LocalCluster (2 worker processes, one per module): a sweep that
loses a worker mid-run, and the distributed explorer's totals against the in-process explorer's."""
from __future__ import annotations

import os
import signal

import pytest

distributed = pytest.importorskip("distributed")

from pybcache.dask_cluster import client_for
from pybcache.sweep import parse_grid, sweep


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
