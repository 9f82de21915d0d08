"""Allocation failure under sustained load (issue 10 §3): what one failed page allocation costs each
``alloc_failure`` policy while writes keep arriving on the page.

One native writer keeps ``depth`` 128 KiB bypass writes in flight on one 64 GiB tracking page (2048 u16
counters) and checks a random 4 KiB read range after every start (:func:`pybcache.stress`). With
``depth=160`` about 7.5 % of the checks find an active chunk; a read that does must bypass the cache.
The same run (same seed) is made without a fault and with ``FaultInjection(probability=1.0,
times=failures)`` (the first ``failures`` page allocations fail), so the ratio of read bypasses is the
price of the failure. A hijacked page serves every start until both of its halves drain, which never
happens while writes keep arriving: every check then hits.

``mempool`` is Linux 6.12's ``mempool_alloc`` (docs/design-answers.md, "mempool as the kernel has it"):
with ``gfp="noio"`` two allocator attempts and the reserve, then rounds of waiting, each ended by a refill
(only while the reserve is below ``min_nr``, the ``pool_pages``) or by the round's timeout, 5 s in the
kernel. Time is counted in rounds: the tracker sleeps a scaled round (1 ms) and the stall is reported as
*modelled* time, ``rounds x round_s`` (default 5.0, the kernel's ``io_schedule_timeout(5 * HZ)``). One
writer with inline completions frees nothing while it waits, so no round here is ended by a wake-up. With
``gfp="nowait"`` mempool makes one attempt, takes the reserve, and otherwise returns NULL: the page is left
untracked.

Run ``python -m pybcache.bcache.experiments.sustained [--json]`` for the table of docs/design-answers.md.
"""
from __future__ import annotations

import argparse
import sys
import json
import logging
from typing import Any

from .._tracker import BypassWriteTracker, FaultInjection
from ..stress import stress
from ...units import GiB, KiB

__all__ = ["sustained_load", "POLICIES", "GFP_POLICIES", "KERNEL_ROUND_S", "NO_CLEAN_BYPASS"]

#: Why ``ratio`` is None: the run without the fault bypassed no read (a short run: few checks, few writes in
#: flight), so there is nothing to divide by; ``extra_bypasses`` still counts what the fault added.
NO_CLEAN_BYPASS = "not measured: 0 bypasses in the run without the fault"

PAGE = 64 * GiB
#: The kernel's mempool round: io_schedule_timeout(5 * HZ) (Linux 6.12 mm/mempool.c:466).
KERNEL_ROUND_S = 5.0
#: (policy, pool_pages) under a sleeping mask: the plain allocator's policies and mempool with min_nr 0, 1, 8.
POLICIES: tuple[tuple[str, int], ...] = (("untracked", 0), ("hijack", 0), ("pool", 1), ("mempool", 0),
                                         ("mempool", 1), ("mempool", 8))
#: mempool under GFP_NOWAIT (no direct reclaim: it returns NULL instead of waiting).
GFP_POLICIES: tuple[tuple[str, int, str], ...] = tuple((p, n, "noio") for p, n in POLICIES) + (
    ("mempool", 0, "nowait"), ("mempool", 1, "nowait"))


def sustained_load(alloc_failure: str, *, pool_pages: int = 0, failures: int = 1, ops: int = 200_000,
                   depth: int = 160, seed: int = 3, free: str = "eager", gfp: str = "noio",
                   round_s: float = KERNEL_ROUND_S) -> dict[str, Any]:
    """One policy with and without ``failures`` injected page-allocation failures.

    :param alloc_failure: the policy under test.
    :param pool_pages: its reserve (``"pool"``, ``"mempool"``'s min_nr). Default 0.
    :param gfp: mempool's mask, ``"noio"`` (default) or ``"nowait"``; only ``"noio"`` for the others.
    :param round_s: the modelled length of one mempool round, > 0. Default 5.0 (the kernel's).
    :param failures: page allocations that fail, from the first on; >= 1. Default 1.
    :param ops: writes started by the one writer. Default 200,000.
    :param depth: writes in flight. Default 160 (20 MiB of 128 KiB writes).
    :param seed: seed of the writer's offsets and checks. Default 3.
    :param free: the page lifetime. Default ``"eager"``.
    :returns: ``{"policy", "pool_pages", "gfp", "failures", "checks", "bypasses_without_fault",
        "bypasses_with_fault", "ratio", "ratio_not_measured", "extra_bypasses", "writes_lost", "stall_rounds",
        "stall_s", "alloc_failures", "pages_allocated", "hijack_events", "untracked_writes", "underflows",
        "mempool_waits", "pool_refills", "mempool_rounds", "mempool_wakeups", "mempool_nulls"}``: the
        counts after ``ratio`` are the faulted run's; ``extra_bypasses`` the reads it bypassed beyond
        the clean run's (``ratio`` is None and ``ratio_not_measured`` :data:`NO_CLEAN_BYPASS` when the clean run
        bypassed none; else None), ``writes_lost`` its writes the tracker never counted (``untracked_writes``),
        ``stall_rounds`` the mempool rounds that ran their whole length and ``stall_s`` those in
        modelled time (``stall_rounds * round_s``; a round a refill ended is counted in
        ``mempool_wakeups`` and not in the stall).
    """
    if failures < 1:
        raise ValueError(f"failures must be >= 1, got {failures!r}")
    if not round_s > 0:
        raise ValueError(f"round_s must be > 0 seconds, got {round_s!r}")
    extra: dict[str, Any] = {} if gfp == "noio" else {"gfp": gfp}
    runs = []
    for fault in (None, FaultInjection(probability=1.0, times=failures)):
        t = BypassWriteTracker(PAGE, alloc_failure=alloc_failure, pool_pages=pool_pages, fault=fault, free=free,
                               **extra)
        # inline completions: each write ends exactly when the writer issues its depth-th successor, so the
        # writes in flight at every check, and every count below, depend on the seed alone (no counter
        # comes near its maximum here, so nothing can hold an end hostage)
        r = stress(t, threads=1, ops=ops, depth=depth, region=(0, PAGE), write_length=128 * KiB, seed=seed,
                   completions="inline")
        runs.append((r["per_thread"][0], t.stats()))
    (clean, _), (faulted, s) = runs
    return {
        "policy": alloc_failure, "pool_pages": pool_pages, "gfp": gfp, "failures": failures,
        "checks": faulted["checks"],
        "bypasses_without_fault": clean["active_hits"], "bypasses_with_fault": faulted["active_hits"],
        "ratio": faulted["active_hits"] / clean["active_hits"] if clean["active_hits"] else None,
        "ratio_not_measured": None if clean["active_hits"] else NO_CLEAN_BYPASS,
        "extra_bypasses": faulted["active_hits"] - clean["active_hits"],
        "writes_lost": s["untracked_writes"], "stall_rounds": s["mempool_rounds"],
        "stall_s": s["mempool_rounds"] * round_s,
        **{k: s[k] for k in ("alloc_failures", "pages_allocated", "hijack_events", "untracked_writes",
                             "underflows", "mempool_waits", "pool_refills", "mempool_rounds", "mempool_wakeups",
                             "mempool_nulls")},
    }


def sustained_table(*, failures: tuple[int, ...] = (1, 2, 3), ops: int = 200_000, seed: int = 3,
                    round_s: float = KERNEL_ROUND_S) -> list[dict[str, Any]]:
    """Every policy of :data:`GFP_POLICIES` for each failure count, in that order: the rows of one run,
    which the report's answer to the v2 cover letter's first question cites."""
    return [sustained_load(p, pool_pages=n, gfp=g, failures=f, ops=ops, seed=seed, round_s=round_s)
            for f in failures for p, n, g in GFP_POLICIES]


def main(argv: list[str] | None = None) -> int:
    """The command line; a bad value exits 2 with one line naming it (no traceback)."""
    try:
        return _main(argv)
    except (ValueError, TypeError) as exc:
        print(f"python -m pybcache.bcache.experiments.sustained: error: {exc}", file=sys.stderr)
        return 2


def _main(argv: list[str] | None) -> int:
    summary = " ".join((__doc__ or "").split("\n\n")[0].split())  # the docstring's first paragraph (none under -OO)
    ap = argparse.ArgumentParser(prog="python -m pybcache.bcache.experiments.sustained", description=summary)
    ap.add_argument("--failures", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--ops", type=int, default=200_000)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--round", type=float, default=KERNEL_ROUND_S, dest="round_s", metavar="SECONDS",
                    help="modelled length of one mempool round (default 5.0, the kernel's)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    logging.getLogger("pybcache").setLevel(logging.ERROR)  # untracked writes warn; the table counts them
    rows = [sustained_load(p, pool_pages=n, gfp=g, failures=f, ops=args.ops, seed=args.seed, round_s=args.round_s)
            for f in args.failures for p, n, g in GFP_POLICIES]
    if args.json:
        print(json.dumps({"rows": rows}, indent=1))
        return 0
    cols = ("policy", "pool_pages", "gfp", "failures", "bypasses_without_fault", "bypasses_with_fault", "ratio",
            "writes_lost", "stall_rounds", "stall_s", "alloc_failures", "pages_allocated", "hijack_events",
            "underflows", "mempool_waits", "pool_refills", "mempool_nulls")
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join((r["ratio_not_measured"] or f"{r[c]:.3f}") if c == "ratio" else
                                f"{r[c]:g}" if c == "stall_s" else str(r[c]) for c in cols) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
