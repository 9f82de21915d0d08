"""Instructions per same-chunk operation of the native stress loop, per variant and for the do-nothing
tracker, counted by callgrind (issue 15: where a same-chunk pair goes).

``python benchmarks/callgrind_stress.py --callgrind [variant ...] [--ops N]`` runs this script under
valgrind's callgrind once per configuration (default: the do-nothing tracker, then global page atomic),
collecting only inside the stress's submitting thread (``submitter_main`` and what it calls), and prints
the instructions per operation (one end of the thread's previous write and one start of the next: the
same-chunk measurement's pair) split into the driver's loop and the tracker's calls. One thread (callgrind
runs threads one at a time anyway), the same workload as ``run_same_chunk``: 4 KiB writes inside one
32 MiB chunk, one write in flight, no checks, ends inline, a write held on the device's last 4 KiB so the
page stays resident. Instruction counts do not depend on the machine's load; what the cache-line bounce
costs does not show in them (the timed runs of ``run_same_chunk`` measure that).
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from callgrind_pairs import callgrind  # noqa: E402  (the same run and annotate parsing)

GiB = 1 << 30
MiB = 1 << 20
CONFIGS = ("null", "global", "page", "atomic")


def workload(config: str, n: int) -> None:
    """n same-chunk operations of one submitting thread (the measured part: its thread function)."""
    import pybcache
    from pybcache.bcache._tracker import native_stress
    size = 10 * GiB
    t = pybcache.BypassWriteTracker(size, sync="atomic" if config == "null" else config)
    t.start(size - 4096, 4096)
    native_stress(t, threads=1, ops=n, region=(0, 32 * MiB), write_length=4096, depth=1, checks=False,
                  completions="inline", null_tracker=config == "null")
    t.end(size - 4096, 4096)


def count(config: str, n: int) -> dict[str, float]:
    """Instructions per operation: total, and the part in the tracker's files (pyb_tracker.c, the bounded
    start of pyb_driver.c, the pthread spinlock calls); the rest is the driver's loop."""
    fns = callgrind(__file__, ["submitter_main"], [config, str(n)])
    total = sum(fns.values()) / n
    tracker = sum(v for k, v in fns.items()
                  if "pyb_tracker.c" in k or "pyb_driver.c:pyb_driver_start_bounded" in k
                  or "pthread_spin" in k) / n
    return {"total": total, "tracker": tracker, "driver": total - tracker}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--callgrind":
        ap = argparse.ArgumentParser(prog="callgrind_stress.py --callgrind")
        ap.add_argument("configs", nargs="*", help="null, global, page and/or atomic (default: all four)")
        ap.add_argument("--ops", type=int, default=100_000)
        args = ap.parse_args(sys.argv[2:])
        bad = set(args.configs) - set(CONFIGS)
        if bad:
            ap.error(f"configs must be among {', '.join(CONFIGS)}, got {', '.join(sorted(bad))}")
        if args.ops < 1:
            ap.error(f"--ops must be >= 1, got {args.ops}")
        print(f"instructions per same-chunk operation (end + start, {args.ops} ops, callgrind)")
        print(f"{'config':8} {'total':>8} {'tracker':>8} {'driver':>8}")
        for c in args.configs or CONFIGS:
            r = count(c, args.ops)
            print(f"{c:8} {r['total']:8.1f} {r['tracker']:8.1f} {r['driver']:8.1f}")
        print("tracker: pyb_tracker.c, pyb_driver_start_bounded and the pthread spinlock calls; driver: the rest of "
              "the\nsubmitting thread (its loop, random offsets, the queue of writes in flight); null: the do-nothing "
              "tracker,\nwhose two relaxed atomics are one out-of-line call each, counted with the driver.")
        return
    config = sys.argv[1] if len(sys.argv) > 1 else "atomic"
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 100_000
    if config not in CONFIGS:
        raise SystemExit(f"config must be one of {', '.join(CONFIGS)}, got {config!r}")
    workload(config, n)


if __name__ == "__main__":
    main()
