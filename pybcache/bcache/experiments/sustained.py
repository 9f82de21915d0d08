"""Allocation failure under sustained load (issue 10 §3): what one failed page allocation costs each
``alloc_failure`` policy while writes keep arriving on the page.

One native writer keeps ``depth`` 128 KiB bypass writes in flight on one 64 GiB tracking page (2048 u16
counters) and checks a random 4 KiB read range after every start (:func:`pybcache.stress`). With
``depth=160`` about 7.5 % of the checks find an active chunk; a read that does must bypass the cache.
The same run (same seed) is made without a fault and with ``FaultInjection(probability=1.0,
times=failures)`` (the first ``failures`` page allocations fail), so the ratio of read bypasses is the
price of the failure. A hijacked page serves every start until both of its halves drain, which never
happens while writes keep arriving: every check then hits.

Run ``python -m pybcache.bcache.experiments.sustained [--json]`` for the table of docs/design-answers.md.
"""
from __future__ import annotations

import argparse
import json
import logging
from typing import Any

from .._tracker import BypassWriteTracker, FaultInjection
from ..stress import stress
from ...units import GiB, KiB

__all__ = ["sustained_load", "POLICIES"]

PAGE = 64 * GiB
POLICIES: tuple[tuple[str, int], ...] = (("untracked", 0), ("hijack", 0), ("pool", 1), ("mempool", 0),
                                         ("mempool", 1))


def sustained_load(alloc_failure: str, *, pool_pages: int = 0, failures: int = 1, ops: int = 200_000,
                   depth: int = 160, seed: int = 3, free: str = "eager") -> dict[str, Any]:
    """One policy with and without ``failures`` injected page-allocation failures.

    :param alloc_failure: the policy under test.
    :param pool_pages: its reserve (``"pool"``, ``"mempool"``). Default 0.
    :param failures: page allocations that fail, from the first on; >= 1. Default 1.
    :param ops: writes started by the one writer. Default 200,000.
    :param depth: writes in flight. Default 160 (20 MiB of 128 KiB writes).
    :param seed: seed of the writer's offsets and checks. Default 3.
    :param free: the page lifetime. Default ``"eager"``.
    :returns: ``{"policy", "pool_pages", "failures", "checks", "bypasses_without_fault",
        "bypasses_with_fault", "ratio", "alloc_failures", "pages_allocated", "hijack_events",
        "untracked_writes", "underflows", "mempool_waits", "pool_refills"}``; the counts after
        ``bypasses_with_fault`` are the faulted run's ``stats()``.
    """
    if failures < 1:
        raise ValueError(f"failures must be >= 1, got {failures!r}")
    runs = []
    for fault in (None, FaultInjection(probability=1.0, times=failures)):
        t = BypassWriteTracker(PAGE, alloc_failure=alloc_failure, pool_pages=pool_pages, fault=fault, free=free)
        # inline completions: each write ends exactly when the writer issues its depth-th successor, so the
        # writes in flight at every check, and every count below, depend on the seed alone (no counter
        # comes near its maximum here, so nothing can hold an end hostage)
        r = stress(t, threads=1, ops=ops, depth=depth, region=(0, PAGE), write_length=128 * KiB, seed=seed,
                   completions="inline")
        runs.append((r["per_thread"][0], t.stats()))
    (clean, _), (faulted, s) = runs
    return {
        "policy": alloc_failure, "pool_pages": pool_pages, "failures": failures, "checks": faulted["checks"],
        "bypasses_without_fault": clean["active_hits"], "bypasses_with_fault": faulted["active_hits"],
        "ratio": faulted["active_hits"] / clean["active_hits"],
        **{k: s[k] for k in ("alloc_failures", "pages_allocated", "hijack_events", "untracked_writes",
                             "underflows", "mempool_waits", "pool_refills")},
    }


def main(argv: list[str] | None = None) -> int:
    summary = " ".join((__doc__ or "").split("\n\n")[0].split())  # the docstring's first paragraph (none under -OO)
    ap = argparse.ArgumentParser(prog="python -m pybcache.bcache.experiments.sustained", description=summary)
    ap.add_argument("--failures", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--ops", type=int, default=200_000)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    logging.getLogger("pybcache").setLevel(logging.ERROR)  # untracked writes warn; the table counts them
    rows = [sustained_load(p, pool_pages=n, failures=f, ops=args.ops, seed=args.seed)
            for f in args.failures for p, n in POLICIES]
    if args.json:
        print(json.dumps({"rows": rows}, indent=1))
        return 0
    cols = ("policy", "pool_pages", "failures", "bypasses_without_fault", "bypasses_with_fault", "ratio",
            "alloc_failures", "pages_allocated", "hijack_events", "untracked_writes", "underflows",
            "mempool_waits", "pool_refills")
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(f"{r[c]:.3f}" if c == "ratio" else str(r[c]) for c in cols) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
