"""The batch pair's ratio to its floor by the old method and by bench's interleaved rounds, side by side.

``python benchmarks/batch_ratio_methods.py [sessions]`` (default 5) runs, per session and variant, both:

* *old* (bench before issue 15's interleaving): the floors' best of 5 (:func:`~pybcache.bcache._tracker.floors`,
  all three floors per call, as ``_best_floor`` ran them), then the batch pair's best of 5, both in wall
  time, and their ratio;
* *new*: :func:`pybcache.bcache.experiments.bench.batch_vs_floor` with bench's full number of rounds (the floor
  then the pair, per round, in thread CPU time; the median ratio).

It prints each session's two ratios and, per variant and method, the spread of the ratio across
sessions (max / min): the smaller it is, the less the verdict depends on when the bench ran. The load
average before and after is printed with it. Timing only; nothing here passes or fails.
"""
from __future__ import annotations

import os
import sys

import numpy as np

from pybcache import BypassWriteTracker
from pybcache.bcache._tracker import floors
from pybcache.bcache.experiments.bench import BATCH_ROUNDS, VARIANTS, WRITE, _batch_pair_ns, batch_vs_floor

GiB = 1 << 30


def old_ratio(t: BypassWriteTracker, offs: np.ndarray, floor_key: str, repeats: int = 5) -> float:
    floor = min(floors(len(offs) * 4)[floor_key] for _ in range(repeats))
    pair = min(_batch_pair_ns(t, offs, WRITE) for _ in range(repeats))
    return pair / floor


def main() -> None:
    sessions = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    size = 10 * GiB
    rng = np.random.default_rng(0)
    offs = (rng.integers(0, (size - WRITE) // 4096, 400_000) * 4096).astype(np.int64)
    load0 = os.getloadavg()
    ratios: dict[tuple[str, str], list[float]] = {}
    for s in range(sessions):
        for sync in VARIANTS:
            t = BypassWriteTracker(size, sync=sync)
            t.start(size - 4096, 4096)  # the page stays resident, as in bench
            old = old_ratio(t, offs, "atomic_pair_ns" if sync == "atomic" else "spinlock_pair_ns")
            new = batch_vs_floor(t, offs, WRITE, "atomic" if sync == "atomic" else "spinlock", BATCH_ROUNDS[0])
            ratios.setdefault((sync, "old"), []).append(old)
            ratios.setdefault((sync, "new"), []).append(new["ratio"])
            sp = new["spread"]
            print(f"session {s + 1} {sync:7} old {old:5.2f}x   new {new['ratio']:5.2f}x "
                  f"(rounds {sp['min']:.2f}-{sp['max']:.2f})", flush=True)
    load1 = os.getloadavg()
    print(f"load average before {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}, "
          f"after {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")
    for sync in VARIANTS:
        for method in ("old", "new"):
            r = ratios[(sync, method)]
            print(f"{sync:7} {method}: ratio across {len(r)} sessions {min(r):.2f}-{max(r):.2f}x "
                  f"(median {float(np.median(r)):.2f}x, max/min {max(r) / min(r):.2f})")


if __name__ == "__main__":
    main()
