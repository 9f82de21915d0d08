"""Splitting the explorer's search by prefix (what the distributed explorer builds on), in process:
the subtrees of one depth partition the search, at every depth, with and without reduction."""
from __future__ import annotations

import pytest

from pybcache import explore
from pybcache.bcache.cachedev import explore_prefixes

pytestmark = pytest.mark.native

KEYS = ("schedules", "violations", "stale_read_schedules", "stale_cache_schedules", "pruned_runs",
        "restart_schedules", "untracked_schedules", "faults_injected", "stuck_schedules",
        "restart_capped_schedules")


@pytest.mark.parametrize("reduce", [True, False])
@pytest.mark.parametrize("cfg", [dict(sync="none"), dict(sync="page"),
                                 dict(sync="page", alloc_failure="untracked", fault_at=1),
                                 dict(sync="page", overflow="wait", counter_max=1)])
def test_subtrees_of_every_depth_add_up_to_the_whole_search(cfg, reduce):
    whole = explore(writes=2, reads=1, reduce=reduce, **cfg)
    for depth in (1, 2, 5, 9):
        prefixes = explore_prefixes(depth, writes=2, reads=1, reduce=reduce, **cfg)
        assert all(len(p) <= depth for p in prefixes) and len(set(prefixes)) == len(prefixes)
        parts = [explore(writes=2, reads=1, reduce=reduce, prefix=p, **cfg) for p in prefixes]
        for key in KEYS:
            assert sum(x[key] for x in parts) == whole[key], (key, depth)
        first = next((x["counterexample"] for x in parts if x["counterexample"]), None)
        assert first == whole["counterexample"]


def test_prefixes_deeper_than_the_tree_are_its_leaves():
    whole = explore(sync="none", writes=1, reads=1, reduce=False)
    leaves = explore_prefixes(100, sync="none", writes=1, reads=1, reduce=False)
    assert len(leaves) == whole["schedules"] + whole["pruned_runs"] + whole["stuck_schedules"]


def test_a_prefix_the_search_would_not_take_is_refused():
    with pytest.raises(ValueError, match="prefix"):
        explore(sync="page", writes=1, reads=1, prefix=[0, 0, 0, 0, 0, 0, 0, 0, 0, 0])
    with pytest.raises(ValueError, match=r"prefix\[0\]"):
        explore(sync="page", writes=1, reads=1, prefix=[2])
    with pytest.raises(TypeError, match="prefix"):
        explore(sync="page", writes=1, reads=1, prefix="01")


def test_too_many_prefixes_is_none_not_a_partial_list():
    assert explore_prefixes(40, sync="page", writes=2, reads=1, max_count=10) is None
    with pytest.raises(ValueError, match="depth"):
        explore_prefixes(0, sync="page")
    with pytest.raises(TypeError, match="bogus"):
        explore_prefixes(1, bogus=1)


def test_distributed_api_in_process_equals_the_explorer():
    from pybcache import explore_distributed
    whole = explore(sync="none", writes=2, reads=1)
    split = explore_distributed(workers=0, sync="none", writes=2, reads=1)
    assert split["schedules"] == whole["schedules"] and split["violations"] == whole["violations"]
    assert split["counterexample"] == whole["counterexample"]
    with pytest.raises(ValueError, match="max_schedules"):
        explore_distributed(workers=0, sync="none", max_schedules=5)
