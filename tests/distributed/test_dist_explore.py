"""The distributed explorer (``pybcache/dist/explore.py``): the split by prefix, the tasks' sums, the merge, with
the C explorer and the Dask client stood in for. No cluster."""
from __future__ import annotations

import pytest

from pybcache.dist import cluster as dask_cluster, explore as distexplore


def _result(schedules, violations, *, finished=True, cx=None):
    return {"schedules": schedules, "violations": violations, "finished": finished, "config": {"c": 1},
            "counterexample": cx, "counterexample_steps": None if cx is None else [f"step of {cx}"],
            "semantics": "s"}


def _clock(monkeypatch, *times):
    ticks = iter(times)
    monkeypatch.setattr(distexplore.time, "perf_counter", lambda: next(ticks))


def test_a_task_sums_its_subtrees_counts_and_keeps_the_first_counterexample_in_prefix_order(monkeypatch):
    results = {(0,): _result(3, 0), (1,): _result(5, 2, cx="A"), (2,): _result(7, 1, finished=False, cx="B")}
    seen = []
    monkeypatch.setattr(distexplore, "explore", lambda *, prefix, **cfg: seen.append((prefix, cfg))
                        or results[tuple(prefix)])
    _clock(monkeypatch, 10.0, 12.5)
    part = distexplore._explore_part({"sync": "page"}, [(0,), (1,), (2,)])
    assert seen == [((0,), {"sync": "page"}), ((1,), {"sync": "page"}), ((2,), {"sync": "page"})]
    assert part == {"schedules": 15, "violations": 3, "finished": False,
                    "first": {"counterexample": "A", "counterexample_steps": ["step of A"]}, "wall_s": 2.5}


def test_a_task_without_a_counterexample_has_none_and_is_finished_when_each_subtree_is(monkeypatch):
    monkeypatch.setattr(distexplore, "explore", lambda *, prefix, **cfg: _result(1, 0))
    _clock(monkeypatch, 0.0, 1.0)
    assert distexplore._explore_part({}, [(0,), (1,)]) == {"schedules": 2, "violations": 0, "finished": True,
                                                            "first": None, "wall_s": 1.0}


def _prefix_tree(monkeypatch, sizes):
    """explore_prefixes' stand-in: ``sizes[d]`` prefixes at depth d (None: more than 65,536)."""
    asked = []

    def explore_prefixes(depth, **cfg):
        asked.append((depth, cfg))
        n = sizes.get(depth, sizes[max(sizes)])
        return None if n is None else [(depth, i) for i in range(n)]

    monkeypatch.setattr(distexplore, "explore_prefixes", explore_prefixes)
    return asked


def test_prefixes_are_cut_at_the_first_depth_with_as_many_as_wanted(monkeypatch):
    asked = _prefix_tree(monkeypatch, {1: 2, 2: 5, 3: 9, 4: 20})
    d, got = distexplore._choose_prefixes({"sync": "none"}, 9, None)
    assert (d, got) == (3, [(3, i) for i in range(9)])
    assert asked == [(1, {"sync": "none"}), (2, {"sync": "none"}), (3, {"sync": "none"})]
    assert distexplore._choose_prefixes({}, 2, None)[0] == 1


def test_prefixes_stop_above_a_depth_with_too_many_or_where_the_tree_ends(monkeypatch):
    _prefix_tree(monkeypatch, {1: 2, 2: 5, 3: None})
    assert distexplore._choose_prefixes({}, 100, None) == (2, [(2, i) for i in range(5)])
    asked = _prefix_tree(monkeypatch, {1: 2, 2: 5, 3: 5})     # the tree ends at depth 2
    assert distexplore._choose_prefixes({}, 100, None)[0] == 2 and [a[0] for a in asked] == [1, 2, 3]
    _prefix_tree(monkeypatch, {1: None})                      # even depth 1 too wide: no prefix at all
    assert distexplore._choose_prefixes({}, 4, None) == (1, [])


def test_prefixes_go_no_deeper_than_64(monkeypatch):
    asked = _prefix_tree(monkeypatch, {d: d for d in range(1, 70)})
    assert distexplore._choose_prefixes({}, 10 ** 6, None)[0] == 64
    assert [a[0] for a in asked] == list(range(1, 65))


def test_a_depth_given_is_used_as_it_is_or_refused_naming_it_when_too_wide(monkeypatch):
    asked = _prefix_tree(monkeypatch, {1: 2, 5: 3, 6: None})
    assert distexplore._choose_prefixes({"x": 1}, 1000, 5) == (5, [(5, 0), (5, 1), (5, 2)])
    assert asked == [(5, {"x": 1})]
    with pytest.raises(ValueError, match=r"^depth: more than 65,536 prefixes at depth 6; choose a smaller one$"):
        distexplore._choose_prefixes({}, 1, 6)


class _Client:
    def __init__(self, workers):
        self.workers, self.submitted = workers, []

    def nthreads(self):
        return {f"w{i}": 1 for i in range(self.workers)}

    def submit(self, fn, *args, **kw):
        self.submitted.append((fn, args, kw))
        return len(self.submitted) - 1

    def gather(self, futures):
        return [fn(*args) for fn, args, _ in (self.submitted[f] for f in futures)]


def _stand_in_explorer(monkeypatch, prefixes=10, cx_at=(), finished=True):
    """An explorer whose subtree below prefix (d, i) has i + 1 schedules and, for i in ``cx_at``, one violation
    with counterexample i."""
    whole = []

    def explore(*, prefix=None, max_schedules=0, **cfg):
        if prefix is None:
            whole.append((max_schedules, cfg))
            return {"config": {**cfg, "max_schedules": max_schedules}}
        i = prefix[1]
        return _result(i + 1, int(i in cx_at), finished=finished, cx=i if i in cx_at else None)

    monkeypatch.setattr(distexplore, "explore", explore)
    # depth 3 would be chosen by default: a test giving depth 2 sees it used
    _prefix_tree(monkeypatch, {1: 2, 2: prefixes, 3: 100})
    ticks = iter(range(100, 1000))
    monkeypatch.setattr(distexplore.time, "perf_counter", lambda: float(next(ticks)))
    return whole


def test_the_split_runs_contiguous_runs_of_prefixes_as_tasks_and_adds_their_counts(monkeypatch):
    _stand_in_explorer(monkeypatch, prefixes=10, cx_at=(6, 8))
    client = _Client(workers=2)
    got = distexplore.explore_distributed(client=client, tasks_per_worker=2, depth=2, sync="page")
    # 2 workers x 2 tasks: 10 prefixes in runs of ceil(10 / 4) = 3
    assert [args[1] for _, args, _ in client.submitted] == [[(2, 0), (2, 1), (2, 2)], [(2, 3), (2, 4), (2, 5)],
                                                            [(2, 6), (2, 7), (2, 8)], [(2, 9)]]
    assert all(fn is distexplore._explore_part and args[0] == {"sync": "page"} and kw == {"pure": False}
               for fn, args, kw in client.submitted)
    assert got["schedules"] == sum(range(1, 11)) and got["violations"] == 2 and got["finished"] is True
    assert (got["counterexample"], got["counterexample_steps"]) == (6, ["step of 6"])
    assert got["semantics"] == distexplore.EXPLORER_SEMANTICS
    assert got["config"] == {"sync": "page", "max_schedules": 0}
    d = got["distributed"]
    assert {k: d[k] for k in ("workers", "tasks", "prefix_depth", "prefixes")} == {
        "workers": 2, "tasks": 4, "prefix_depth": 2, "prefixes": 10}
    # each task's clock read twice (1 s apart here), the whole split's around them
    assert d["task_wall_s"] == 4.0 and d["wall_s"] == 9.0
    # the explorer's keys with the counts summed, then the merged ones: nothing of the tasks' own
    assert list(got) == ["schedules", "violations", "finished", "counterexample", "counterexample_steps",
                         "semantics", "config", "distributed"]


def test_the_split_is_unfinished_if_any_task_is_and_has_no_counterexample_if_none_found_one(monkeypatch):
    _stand_in_explorer(monkeypatch, prefixes=3, finished=False)
    got = distexplore.explore_distributed(client=_Client(workers=1), tasks_per_worker=16, depth=2)
    assert got["finished"] is False and got["counterexample"] is None and got["counterexample_steps"] is None
    assert got["distributed"]["tasks"] == 3     # fewer prefixes than tasks: one each


def test_the_default_depth_gives_each_task_four_prefixes(monkeypatch):
    _stand_in_explorer(monkeypatch)
    asked = _prefix_tree(monkeypatch, {1: 2, 2: 7, 3: 24, 4: 50})
    got = distexplore.explore_distributed(client=_Client(workers=3), tasks_per_worker=2)
    assert [a[0] for a in asked] == [1, 2, 3]
    assert got["distributed"]["prefix_depth"] == 3 and got["distributed"]["tasks"] == 6


def test_no_workers_runs_the_same_tasks_in_this_process_without_dask(monkeypatch):
    _stand_in_explorer(monkeypatch, prefixes=5, cx_at=(4,))
    got = distexplore.explore_distributed(workers=0, tasks_per_worker=2, depth=2)
    # one "worker": 2 tasks of ceil(5 / 2) = 3 prefixes; reported as 0 workers (no Dask)
    assert got["distributed"]["workers"] == 0 and got["distributed"]["tasks"] == 2
    assert got["schedules"] == 15 and got["counterexample"] == 4
    assert got["distributed"]["prefix_depth"] == 2 and got["config"] == {"max_schedules": 0}


def test_without_a_client_the_split_runs_on_the_cluster_client_for_gives_and_closes_it(monkeypatch):
    _stand_in_explorer(monkeypatch, prefixes=4)
    events = []

    class Cm:
        def __enter__(self):
            events.append("open")
            return _Client(workers=4)

        def __exit__(self, *exc):
            events.append("closed")

    def client_for(**kw):
        events.append(kw)
        return Cm()

    monkeypatch.setattr(dask_cluster, "client_for", client_for)
    got = distexplore.explore_distributed(scheduler="tcp://h:1", depth=2, tasks_per_worker=1)
    assert events == [{"scheduler": "tcp://h:1", "workers": None}, "open", "closed"]
    assert got["distributed"]["prefix_depth"] == 2 and got["config"] == {"max_schedules": 0}
    assert got["distributed"]["workers"] == 4 and got["distributed"]["tasks"] == 4
    distexplore.explore_distributed(workers=3, depth=2)
    assert events[3] == {"scheduler": None, "workers": 3}


def test_each_worker_gets_16_tasks_by_default(monkeypatch):
    _stand_in_explorer(monkeypatch, prefixes=34)
    # one worker, 16 tasks: 34 prefixes in runs of ceil(34 / 16) = 3, so 12 tasks (17 would make runs of 2)
    assert distexplore.explore_distributed(workers=0, depth=2)["distributed"]["tasks"] == 12


def test_the_configuration_is_checked_by_one_capped_explore_before_any_split(monkeypatch):
    whole = _stand_in_explorer(monkeypatch)
    distexplore.explore_distributed(workers=0, depth=2, sync="atomic", max_schedules=0)
    assert whole == [(1, {"sync": "atomic"})]


@pytest.mark.parametrize("kw, exc, message", [
    ({"progress": print}, TypeError, r"^explore_distributed: progress is not taken$"),
    ({"prefix": (0,)}, TypeError, r"^explore_distributed: prefix is not taken$"),
    ({"max_schedules": 5}, ValueError, r"^max_schedules: not with the distributed explorer \(a cap has no meaning "
                                       r"once the tree is split\); give 0$"),
    ({"tasks_per_worker": 0}, ValueError, r"^tasks_per_worker must be"),
    ({"tasks_per_worker": 1025}, ValueError, r"^tasks_per_worker must be"),
    ({"depth": 0}, ValueError, r"^depth must be"),
    ({"depth": 65}, ValueError, r"^depth must be"),
])
def test_the_distributed_explorer_refuses_bad_arguments_before_exploring(monkeypatch, kw, exc, message):
    whole = _stand_in_explorer(monkeypatch)
    with pytest.raises(exc, match=message):
        distexplore.explore_distributed(workers=0, **kw)
    assert whole == []


def test_the_distributed_explorer_takes_the_ends_of_its_ranges(monkeypatch):
    _stand_in_explorer(monkeypatch)
    _prefix_tree(monkeypatch, {1: 2, 64: 3})
    got = distexplore.explore_distributed(workers=0, tasks_per_worker=1024, depth=64)
    assert got["distributed"]["prefix_depth"] == 64
    assert distexplore.explore_distributed(workers=0, tasks_per_worker=1, depth=1)["distributed"]["tasks"] == 1
