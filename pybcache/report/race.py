"""The stale-read race and the explorer, per configuration, with the first counterexamples."""
from __future__ import annotations

from typing import Any

from ._common import ReportContext, table
from ._template import render

__all__ = ["race", "RACE_CONFIGS", "EXPLORE_CONFIGS", "EXPLORE_BOUNDS"]

#: Race-stress configurations: (label, keyword arguments of :func:`pybcache.bcache.cachedev.race`).
RACE_CONFIGS: list[tuple[str, dict[str, Any]]] = [
    ("none (unpatched)", {"sync": "none"}),
    ("page, check at request entry", {"sync": "page", "check": "entry"}),
    ("page, check in the miss path", {"sync": "page", "check": "miss"}),
    ("global", {"sync": "global"}),
    ("page (posted)", {"sync": "page"}),
    ("atomic", {"sync": "atomic"}),
    ("page, untracked, 30% alloc faults", {"sync": "page", "alloc_failure": "untracked", "fault_probability": 0.3,
                                          "reclaim_every": 8}),
    ("page, hijack, 30% alloc faults", {"sync": "page", "alloc_failure": "hijack", "fault_probability": 0.3,
                                       "reclaim_every": 8}),
    ("page, pool, 30% alloc faults", {"sync": "page", "alloc_failure": "pool", "fault_probability": 0.3,
                                     "reclaim_every": 8}),
    ("page, mempool, 30% alloc faults", {"sync": "page", "alloc_failure": "mempool", "fault_probability": 0.3,
                                        "reclaim_every": 8}),
]

#: Explorer configurations: (label, keyword arguments of :func:`pybcache.bcache.cachedev.explore`).
EXPLORE_CONFIGS: list[tuple[str, dict[str, Any]]] = [
    ("none (unpatched)", {"sync": "none"}),
    ("page, check at request entry", {"sync": "page", "check": "entry"}),
    ("page, check in the miss path", {"sync": "page", "check": "miss"}),
    ("page, miss path without the -EINTR restart", {"sync": "page", "check": "miss", "restart": False}),
    ("global", {"sync": "global"}),
    ("page (posted)", {"sync": "page"}),
    ("atomic", {"sync": "atomic"}),
    ("page, untracked, 1st alloc fails", {"sync": "page", "alloc_failure": "untracked", "fault_at": 1}),
    ("page, untracked, 2nd alloc fails", {"sync": "page", "alloc_failure": "untracked", "fault_at": 2}),
    ("page, hijack, 1st alloc fails", {"sync": "page", "alloc_failure": "hijack", "fault_at": 1}),
    ("page, pool, 1st alloc fails", {"sync": "page", "alloc_failure": "pool", "fault_at": 1}),
    ("page, mempool, 1st alloc fails", {"sync": "page", "alloc_failure": "mempool", "fault_at": 1}),
    ("page, mempool without a reserve, 1st alloc fails", {"sync": "page", "alloc_failure": "mempool",
                                                          "pool_pages": 0, "fault_at": 1}),
    ("page, discards", {"sync": "page", "write_kind": "discard"}),
    ("page, W1 from the detached path", {"sync": "page", "detached": True}),
    ("page, W1 from the detached path, counted (track all)", {"sync": "page", "detached": True, "track": "all"}),
    # the writethrough fallback: the first writethrough insert's cache allocation fails and it invalidates
    ("page, writethrough fallback, bypass writes counted (v2)",
     {"sync": "page", "write_kind": "writethrough", "cache_alloc_fail": 1, "track": "bypass"}),
    ("page, writethrough fallback, fallbacks counted",
     {"sync": "page", "write_kind": "writethrough", "cache_alloc_fail": 1, "track": "invalidations"}),
    ("page, writethrough fallback, every write counted",
     {"sync": "page", "write_kind": "writethrough", "cache_alloc_fail": 1, "track": "all"}),
]
#: (writes, reads) of each explorer run per configuration.
EXPLORE_BOUNDS = ((1, 1), (2, 1), (1, 2))

_RACE_KEYS = ("stale_reads", "stale_cached_blocks", "reads", "writes", "read_bypasses", "cache_inserts",
              "miss_collisions", "ops_per_s", "stale_reads_per_s", "underflows", "faults_injected",
              "untracked_writes", "seconds", "tracker_checks", "check_key_restarts")


def _explore_row(label: str, kw: dict[str, Any]) -> dict[str, Any]:
    from ..bcache.cachedev import explore
    runs = []
    for w, rd in EXPLORE_BOUNDS:
        x = explore(writes=w, reads=rd, **kw)
        x["bound"] = f"{w}w{rd}r"
        runs.append(x)
    first = next((x for x in runs if x["counterexample"]), None)
    return {
        "label": label, "config": kw,
        "schedules": sum(x["schedules"] for x in runs), "violations": sum(x["violations"] for x in runs),
        "underflow_schedules": sum(x["underflow_schedules"] for x in runs),
        "restart_schedules": sum(x["restart_schedules"] for x in runs),
        "restart_capped_schedules": sum(x["restart_capped_schedules"] for x in runs),
        "finished": all(x["finished"] for x in runs),
        "per_bound": {x["bound"]: {"schedules": x["schedules"], "violations": x["violations"],
                                   "counterexample": x["counterexample"]} for x in runs},
        "counterexample_bound": first["bound"] if first else None,
        "counterexample": first["counterexample"] if first else None}


def race(ctx: ReportContext) -> str:
    from ..bcache.cachedev import EXPLORER_SEMANTICS, race as run_race
    seconds = 0.4 if ctx.quick else 1.0
    race_rows = []
    for label, kw in RACE_CONFIGS:
        ctx.note(f"race: {label}")
        r = run_race(seconds=seconds, seed=ctx.seed, **kw)
        race_rows.append({"label": label, **{k: r[k] for k in _RACE_KEYS}, "config": r["config"]})
    explore_rows = []
    for label, kw in EXPLORE_CONFIGS:
        ctx.note(f"explore: {label}")
        explore_rows.append(_explore_row(label, kw))
    ctx.results["race"] = race_rows
    ctx.results["explore"] = explore_rows
    lines = [render(
        "race.main", seconds=seconds, seed=ctx.seed, semantics=EXPLORER_SEMANTICS,
        race_table=table(["configuration", "stale reads", "per second", "stale cached at end", "reads", "writes",
                          "read bypasses", "underflows", "faults injected"],
                         [[r["label"], f"{r['stale_reads']:,}", f"{r['stale_reads_per_s']:,.0f}",
                           r["stale_cached_blocks"], f"{r['reads']:,}", f"{r['writes']:,}",
                           f"{r['read_bypasses']:,}", f"{r['underflows']:,}", f"{r['faults_injected']:,}"]
                          for r in race_rows]),
        explore_table=table(["configuration", "schedules", "violations", "with an underflow", "with a restart",
                             "cut at the restart bound", "complete", "first counterexample"],
                            [[r["label"], f"{r['schedules']:,}", f"{r['violations']:,}",
                              f"{r['underflow_schedules']:,}", f"{r['restart_schedules']:,}",
                              f"{r['restart_capped_schedules']:,}", "yes" if r["finished"] else "no",
                              f"{r['counterexample_bound']}, {len(r['counterexample'])} steps"
                              if r["counterexample"] else "—"] for r in explore_rows])), ""]
    stolen = next((r for r in explore_rows if r["config"].get("alloc_failure") == "untracked"
                   and r["per_bound"].get("2w1r", {}).get("counterexample")), None)
    shown = [(r["label"], r["counterexample_bound"], r["counterexample"]) for r in explore_rows
             if r["counterexample"] and (r["config"].get("sync") == "none" or "check" in r["config"]
                                         or r["config"].get("detached"))]
    if stolen:
        shown.append((render("race.stolen_label", label=stolen["label"]), "2w1r",
                      stolen["per_bound"]["2w1r"]["counterexample"]))
    for label, bound, steps in shown:
        lines += [render("race.counterexample", label=label, bound=bound,
                         steps="\n".join(f"{i:2d}. {s}" for i, s in enumerate(steps, 1))), ""]
    from .plots import plot_stale_reads
    plot_stale_reads(race_rows, explore_rows, ctx.plot("stale_reads.png", "stale reads per configuration"))
    lines += [render("race.plot"), ""]
    return "\n".join(lines) + "\n"
