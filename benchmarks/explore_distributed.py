"""The distributed explorer on this machine: 1 worker process against 2, reduction on or off, in one
run (two embedded LocalClusters alive side by side, the configurations alternating between them).

    python benchmarks/explore_distributed.py --scenario 2w2r [--no-reduce] [--workers 1,2]

Prints one row per configuration (none; page; page, posted patch's untracked policy, with the K-th
page allocation failing for each K that some schedule reaches) with the explored and pruned counts,
violations, and the wall times per cluster size (the order of sizes alternating between repetitions);
the speed-up is a ratio within the same run.
Wall times exclude the clusters' start (about a second each)."""
from __future__ import annotations

import argparse
import json
import time

from pybcache import explore_distributed
from pybcache.dist.cluster import client_for
from pybcache.dist.explore import SCENARIOS


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scenario", choices=SCENARIOS, default="2w2r")
    ap.add_argument("--no-reduce", action="store_true")
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--max-k", type=int, default=8)
    ap.add_argument("--syncs", default="none,page,faults")
    ap.add_argument("--reps", type=int, default=1,
                    help="runs per cluster size, the order of sizes reversed on every other one (default 1)")
    args = ap.parse_args()
    w, r = SCENARIOS[args.scenario]
    sizes = [int(x) for x in args.workers.split(",")]
    from contextlib import ExitStack
    with ExitStack() as stack:
        clients = {n: stack.enter_context(client_for(workers=n)) for n in sizes}
        configs = []
        if "none" in args.syncs:
            configs.append(dict(sync="none"))
        if "page" in args.syncs:
            configs.append(dict(sync="page"))
        rows = []

        def run(cfg):
            row = {"scenario": args.scenario, "config": cfg, "reduce": not args.no_reduce,
                   "wall_s": {n: [] for n in sizes}}
            for rep in range(args.reps):
                for n in (sizes if rep % 2 == 0 else sizes[::-1]):
                    t0 = time.perf_counter()
                    res = explore_distributed(client=clients[n], writes=w, reads=r, reduce=not args.no_reduce,
                                              **cfg)
                    row["wall_s"][n].append(time.perf_counter() - t0)
                row.update(schedules=res["schedules"], pruned_runs=res["pruned_runs"],
                           violations=res["violations"], faults_injected=res["faults_injected"],
                           tasks=res["distributed"]["tasks"], prefixes=res["distributed"]["prefixes"])
            rows.append(row)
            print(json.dumps(row), flush=True)
            return row

        for cfg in configs:
            run(cfg)
        if "faults" in args.syncs:
            for k in range(1, args.max_k + 1):
                row = run(dict(sync="page", alloc_failure="untracked", fault_at=k))
                if row["faults_injected"] == 0:  # no schedule reaches a K-th allocation: the last K
                    break


if __name__ == "__main__":
    main()
