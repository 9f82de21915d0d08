"""The explorer split by schedule prefix into Dask tasks, with the single-process explorer's totals.

The search tree of :func:`pybcache.explore` is cut at a depth into subtrees, one per prefix (the
operations chosen first), listed in the order the search visits them
(:func:`pybcache.bcache.cachedev.explore_prefixes`). Contiguous runs of prefixes become tasks; each task
calls the C explorer on its subtrees in the worker process and sends back only counts and, if it
found one, its first counterexample. The state of the search at a depth (candidates and sleep set)
depends only on the choices above it, so the subtrees partition the schedules: the counts add up to
exactly the single-process explorer's, and the first counterexample of the first task in prefix
order that has one is the single-process explorer's first counterexample.
"""
from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

from ..bcache.cachedev import EXPLORER_SEMANTICS, explore, explore_prefixes
from ..validate import check_int

__all__ = ["SCENARIOS", "explore_distributed"]

#: The named scenarios of ``pybcache explore --scenario``: (writes, reads).
SCENARIOS = {"1w1r": (1, 1), "2w1r": (2, 1), "1w2r": (1, 2), "2w2r": (2, 2), "3w1r": (3, 1)}

_NOT_SUMMED = ("finished", "config", "counterexample", "counterexample_steps", "semantics")
_MAX_PREFIX_DEPTH = 64


def _explore_part(config: dict[str, Any], prefixes: Sequence[Sequence[int]]) -> dict[str, Any]:
    """One task: the subtrees below ``prefixes``, in order; counts summed, the first counterexample."""
    t0 = time.perf_counter()
    total: dict[str, Any] = {}
    first = None
    finished = True
    for p in prefixes:
        res = explore(prefix=p, **config)
        for key, value in res.items():
            if key not in _NOT_SUMMED:
                total[key] = total.get(key, 0) + value
        finished = finished and res["finished"]
        if first is None and res["counterexample"]:
            first = {"counterexample": res["counterexample"], "counterexample_steps": res["counterexample_steps"]}
    total["finished"] = finished
    total["first"] = first
    total["wall_s"] = time.perf_counter() - t0
    return total


def _choose_prefixes(config: dict[str, Any], wanted: int, depth: int | None) -> tuple[int, list[tuple[int, ...]]]:
    if depth is not None:
        got = explore_prefixes(depth, **config)
        if got is None:
            raise ValueError(f"depth: more than 65,536 prefixes at depth {depth}; choose a smaller one")
        return depth, got
    best: tuple[int, list[tuple[int, ...]]] = (1, explore_prefixes(1, **config) or [])
    for d in range(2, _MAX_PREFIX_DEPTH + 1):
        if len(best[1]) >= wanted:
            break
        got = explore_prefixes(d, **config)
        if got is None or len(got) == len(best[1]):  # too many, or the tree ends above this depth
            break
        best = (d, got)
    return best


def explore_distributed(*, client: Any = None, scheduler: str | None = None, workers: int | None = None,
                        tasks_per_worker: int = 16, depth: int | None = None, **config: Any) -> dict[str, Any]:
    """:func:`pybcache.explore` with the schedule tree split by prefix into Dask tasks.

    :param client: a ``dask.distributed.Client``; None: one from ``scheduler``/``workers`` (an
        embedded LocalCluster by default, :func:`pybcache.dist.cluster.client_for`), shut down after.
    :param workers: with no client and no scheduler, worker processes of the embedded cluster; ``0``
        runs the same tasks one after another in this process (no Dask).
    :param tasks_per_worker: tasks per worker process, in [1, 1024] (default 16): more tasks balance
        subtrees of unequal size, fewer cost less scheduling.
    :param depth: cut the tree at this depth, in [1, 64]; default the smallest depth with at least
        4 prefixes per task (or the whole tree's leaves).
    :param config: :func:`pybcache.explore`'s arguments, except ``progress``, ``prefix`` and
        ``max_schedules`` (a cap has no single-process meaning once split).
    :returns: :func:`pybcache.explore`'s keys with the same values, plus ``distributed``: ``workers``,
        ``tasks``, ``prefix_depth``, ``prefixes``, ``wall_s`` and ``task_wall_s`` (summed over tasks).
    """
    for key in ("progress", "prefix"):
        if key in config:
            raise TypeError(f"explore_distributed: {key} is not taken")
    if config.pop("max_schedules", 0):
        raise ValueError("max_schedules: not with the distributed explorer (a cap has no meaning once the "
                         "tree is split); give 0")
    tasks_per_worker = check_int(tasks_per_worker, "tasks_per_worker", 1, 1024)
    if depth is not None:
        depth = check_int(depth, "depth", 1, _MAX_PREFIX_DEPTH)
    # Check the configuration here (same errors as explore) before any cluster starts.
    whole = explore(max_schedules=1, **config)
    whole["config"]["max_schedules"] = 0
    if client is None and workers == 0:
        return _run(None, 1, config, tasks_per_worker, depth, whole["config"])
    if client is None:
        from .cluster import client_for
        with client_for(scheduler=scheduler, workers=workers) as c:
            return _run(c, len(c.nthreads()), config, tasks_per_worker, depth, whole["config"])
    return _run(client, len(client.nthreads()), config, tasks_per_worker, depth, whole["config"])


def _run(client: Any, n_workers: int, config: dict[str, Any], tasks_per_worker: int, depth: int | None,
         full_config: dict[str, Any]) -> dict[str, Any]:
    t0 = time.perf_counter()
    n_tasks = max(1, n_workers * tasks_per_worker)
    d, prefixes = _choose_prefixes(config, 4 * n_tasks, depth)
    per = max(1, math.ceil(len(prefixes) / n_tasks))
    groups = [prefixes[i:i + per] for i in range(0, len(prefixes), per)]
    if client is None:
        parts = [_explore_part(config, g) for g in groups]
    else:
        futures = [client.submit(_explore_part, config, g, pure=False) for g in groups]
        parts = client.gather(futures)
    out: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            if key not in ("finished", "first", "wall_s"):
                out[key] = out.get(key, 0) + value
    first = next((p["first"] for p in parts if p["first"]), None)
    out["finished"] = all(p["finished"] for p in parts)
    out["counterexample"] = first["counterexample"] if first else None
    out["counterexample_steps"] = first["counterexample_steps"] if first else None
    out["semantics"] = EXPLORER_SEMANTICS
    out["config"] = full_config
    out["distributed"] = {"workers": n_workers if client is not None else 0, "tasks": len(groups),
                          "prefix_depth": d, "prefixes": len(prefixes),
                          "wall_s": time.perf_counter() - t0,
                          "task_wall_s": sum(p["wall_s"] for p in parts)}
    return out
