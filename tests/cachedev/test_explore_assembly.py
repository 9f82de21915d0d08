"""What ``cachedev.explore`` and ``explore_prefixes`` pass to the C explorer and how they assemble its batches.

The C model's entry points (``CachedDevice``, ``_race_slice``, ``_Explorer``, ``_FioBench``, a patch) are
replaced by recorders returning small results of the real shape, so each test checks exactly what is passed on
and the arithmetic of what comes back, with nothing timed and no thread started (the real runs: test_explore.py)."""
from __future__ import annotations

import pytest

from pybcache.bcache import cachedev

from helpers.cachedev_stand_ins import FakePatch, _rec, _with_patch


class FakeExplorer:
    made: list = []
    finish_after = 1
    steps = None

    def __init__(self, *args, **kw):
        self.args, self.kw, self.budgets, self.prefix = args, kw, [], None
        FakeExplorer.made.append(self)

    def set_prefix(self, b):
        self.prefix = b

    def run(self, budget):
        self.budgets.append(budget)
        return len(self.budgets) >= self.finish_after

    def result(self):
        return {"schedules": 5, "violations": 1, "finished": True, "steps": self.steps}

    def prefixes(self, depth, max_count):
        self.prefix_args = (depth, max_count)
        return self.got


@pytest.fixture
def explorer(monkeypatch):
    FakeExplorer.made = []
    monkeypatch.setattr(cachedev, "_Explorer", FakeExplorer)
    monkeypatch.setattr(FakeExplorer, "finish_after", 1)
    monkeypatch.setattr(FakeExplorer, "steps", None)
    return FakeExplorer


def test_explore_runs_batches_until_the_explorer_finishes(explorer):
    explorer.finish_after = 3
    out = cachedev.explore()
    ex = explorer.made[0]
    assert ex.budgets == [20000, 20000, 20000]
    assert out["counterexample"] is None and out["counterexample_steps"] is None
    assert out["schedules"] == 5 and out["semantics"] == cachedev.EXPLORER_SEMANTICS
    assert "steps" not in out and out["config"]["writes"] == 2


def test_explore_stops_at_max_schedules_with_the_last_batch_cut_to_fit(explorer):
    explorer.finish_after = 99
    cachedev.explore(max_schedules=45000)
    assert explorer.made[0].budgets == [20000, 20000, 5000]
    cachedev.explore(max_schedules=40000)
    assert explorer.made[1].budgets == [20000, 20000]
    cachedev.explore(max_schedules=7)
    assert explorer.made[2].budgets == [7]


def test_explore_progress_total_is_the_schedule_bound_in_batches(explorer):
    totals = []

    def bar(items, total):
        totals.append(total)
        return items
    cachedev.explore(writes=2, reads=2, progress=bar)               # 18! / (4!^2 5!^2) = 771,891,120 -> 38595
    cachedev.explore(writes=2, reads=2, sync="none", progress=bar)   # 16! / 4!^4 = 63,063,000 -> 3154
    cachedev.explore(writes=2, reads=2, max_schedules=50000, progress=bar)
    cachedev.explore(writes=1, reads=0, progress=bar)
    assert totals == [38595, 3154, 3, 1]
    explorer.finish_after = 3
    seen = []
    cachedev.explore(progress=lambda items, total: (seen.append(k) or k for k in items))
    assert seen == [0, 1, 2]


def test_explore_passes_the_prefix_as_bytes_checked_against_all_operations(explorer):
    cachedev.explore(writes=1, reads=1, reclaims=1, prefix=[2, 0, 1])
    assert explorer.made[0].prefix == bytes([2, 0, 1])
    with pytest.raises(ValueError, match=r"prefix\[0\]"):
        cachedev.explore(writes=1, reads=1, prefix=[2])
    cachedev.explore()
    assert explorer.made[-1].prefix is None


def test_explore_renders_each_counterexample_step_with_its_settings(explorer):
    explorer.steps = [_rec(op="R1", step="check"), _rec(step="end", lo=0, hi=16384, count=0),
                      _rec(op="R1", step="check_key", flags=["restart", "capped"], count=1, seq_now=2, version=2)]
    out = cachedev.explore(check="miss", granularity="page", chunk_size=8192, max_restarts=2)
    assert out["counterexample"] == [
        "R1 tracker check in the MISS path (before the check key) (whole tracking page): no active write",
        "W1 end: tracker end on chunks [0, 2): counter 0; v1 completed",
        "R1 check key: node sequence moved 1 -> 2 since the lookup: -EINTR, the lookup restarts (restart 2); "
        "restart bound 2 reached, schedule cut"]
    assert out["counterexample_steps"] is explorer.steps


def test_explore_renders_a_patchs_steps_as_the_patchs(monkeypatch, explorer):
    patch = FakePatch()
    _with_patch(monkeypatch, patch)
    explorer.steps = [_rec(step="start", lo=0, hi=4096)]
    out = cachedev.explore(sync="PATCH")
    assert out["counterexample"] == ["W1 start: version v1; patch write_start on bytes [0, 4096): returned"]
    assert explorer.made[0].kw == {"patch": patch._module, "hung_timeout": 10.0, "end_bio_intact": False,
                                     "patch_fail_mode": 1}
    assert explorer.made[0].args[0] == "page"


def test_explore_defaults_are_the_documented_ones_and_each_setting_reaches_the_config(monkeypatch, explorer):
    assert cachedev.explore()["config"] == {
        "sync": "page", "patch": None, "hung_timeout": None, "check": "after", "restart": True,
        "granularity": "chunk", "alloc_failure": "mempool", "fault_at": 0, "writes": 2, "reads": 1, "reclaims": 0,
        "write_blocks": 1, "read_blocks": 1, "chunk_size": 4096, "pool_pages": 1, "counter_bits": 16,
        "counter_max": 65535, "overflow": "wait", "preload": 0, "max_restarts": 3, "reduce": True,
        "max_schedules": 0}
    given = {"sync": "atomic", "check": "miss", "restart": False, "granularity": "page", "alloc_failure": "pool",
             "fault_at": 2, "writes": 1, "reads": 2, "reclaims": 1, "write_blocks": 3, "read_blocks": 2,
             "chunk_size": 8192, "pool_pages": 4, "counter_bits": 32, "counter_max": 9, "overflow": "clamp",
             "preload": 5, "max_restarts": 1, "reduce": False, "max_schedules": 10}
    assert cachedev.explore(**given)["config"] == {**given, "patch": None, "hung_timeout": None}
    _with_patch(monkeypatch, FakePatch())
    out = cachedev.explore(sync="PATCH", hung_timeout=2)
    assert out["config"]["hung_timeout"] == 2.0 and explorer.made[-1].kw["hung_timeout"] == 2.0


def test_explore_prefixes_lists_the_explorers_prefixes_as_tuples(explorer):
    explorer.got = [[0, 1], [1]]
    assert cachedev.explore_prefixes(2, writes=1, reads=1, max_count=9) == [(0, 1), (1,)]
    assert explorer.made[0].prefix_args == (2, 9)
    assert explorer.made[0].args[7:9] == (1, 1)          # writes, reads as given
    assert cachedev.explore_prefixes(3)
    assert explorer.made[1].prefix_args == (3, 1 << 16) and explorer.made[1].args[7:9] == (2, 1)
    explorer.got = None
    assert cachedev.explore_prefixes(1) is None


def test_explore_prefixes_refuses_an_unknown_argument_and_bad_bounds(explorer):
    with pytest.raises(TypeError) as info:
        cachedev.explore_prefixes(1, writes=1, zzz=1, aaa=2)
    assert str(info.value) == "explore_prefixes: unknown argument 'aaa'"
    for kw in ({"prefix": [0]}, {"progress": None}):
        with pytest.raises(TypeError, match="unknown argument"):
            cachedev.explore_prefixes(1, **kw)
    with pytest.raises(ValueError) as info:
        cachedev.explore_prefixes(1025)
    assert str(info.value) == "depth must be in [1, 1024], got 1025"
    with pytest.raises(ValueError) as info:
        cachedev.explore_prefixes(1, max_count=(1 << 24) + 1)
    assert str(info.value) == "max_count must be in [1, 16777216], got 16777217"
    assert explorer.made == []


def test_explore_config_defaults_are_explores_own():
    assert cachedev._EXPLORE_CONFIG["writes"] == 2 and cachedev._EXPLORE_CONFIG["sync"] == "page"
    assert "prefix" not in cachedev._EXPLORE_CONFIG and "progress" not in cachedev._EXPLORE_CONFIG
