"""When a hijacked page goes back to counting per chunk (issue 27 §5): ``unhijack="at-end"`` against md's
``"on-decay"``, measured in the reads that bypass the cache after an allocation failure is over.

The load of :mod:`.sustained` (one native writer keeping ``depth`` 128 KiB bypass writes in flight on one 64 GiB
tracking page and checking a random 4 KiB range after every start) is run in ``bursts``: every write of a burst has
ended when the next begins, and between two bursts the bitmap daemon (``reclaim()``) runs ``passes`` times. The
first page allocation fails, so the first burst runs on a hijacked page under every policy; the question is the
bursts after it, when the allocator works again:

* ``at-end``: the end that drains both halves reverts the page, so the next burst allocates it and counts per chunk;
* ``on-decay`` (md-bitmap, drivers/md/md-bitmap.c in 6.12: ``md_bitmap_checkpage`` :257 never retries the
  allocation on a hijacked page, ``md_bitmap_checkfree`` :311-330 undoes the hijack only when the daemon's decay,
  ``bitmap_daemon_work`` :1581-1588, has taken every counter from 2 to 1 and then to 0): the page stays hijacked
  until two daemon passes have found it drained, so with fewer passes between bursts every read of the next burst
  that lands in a busy half bypasses.

Within a burst the two policies cannot differ (the page's halves never drain while ``depth`` writes are in flight),
which is why the sustained table is the same under both. The same bursts are run without the fault; the ratio of
read bypasses is the price. Deterministic: one writer, inline completions, fixed seeds.

Run ``python -m pybcache.bcache.experiments.unhijack [--json]`` for the table of docs/design-answers.md.
"""
from __future__ import annotations

import argparse
import sys
import json
from typing import Any

from .._tracker import UNHIJACKS, BypassWriteTracker, FaultInjection
from ..stress import stress
from ...units import GiB, KiB
from ...validate import check_choice, check_int

__all__ = ["unhijack_bursts", "NO_CLEAN_BYPASS"]

#: Why a ratio is None: the bursts it covers bypassed no read without the fault (short bursts: few checks, few
#: writes in flight), so there is nothing to divide by; the counts per burst are still given.
NO_CLEAN_BYPASS = "not measured: 0 bypasses in the run without the fault"

PAGE = 64 * GiB


def _bursts(unhijack: str, fault: FaultInjection | None, bursts: int, ops: int, depth: int, passes: int,
            seed: int) -> tuple[list[int], dict[str, Any], list[int]]:
    t = BypassWriteTracker(PAGE, alloc_failure="hijack", fault=fault, unhijack=unhijack)
    hits, hijacked = [], []
    for k in range(bursts):
        r = stress(t, threads=1, ops=ops, depth=depth, region=(0, PAGE), write_length=128 * KiB, seed=seed + k,
                   completions="inline")
        hits.append(r["per_thread"][0]["active_hits"])
        for _ in range(passes):
            t.reclaim()
        hijacked.append(t.stats()["hijacked_pages"])
    return hits, t.stats(), hijacked


def unhijack_bursts(unhijack: str, *, passes: int = 1, bursts: int = 4, ops: int = 50_000, depth: int = 160,
                    seed: int = 3) -> dict[str, Any]:
    """``bursts`` bursts of ``ops`` writes each, with and without one failed page allocation (the first).

    :param unhijack: ``"at-end"`` or ``"on-decay"``.
    :param passes: daemon passes (``reclaim()`` calls) between two bursts, in [0, 16]. Default 1.
    :param bursts: in [2, 64]. Default 4.
    :param ops: writes per burst, in [depth, 10**8]. Default 50,000.
    :param depth: writes in flight, in [1, 4096]. Default 160.
    :param seed: burst k uses seed + k. Default 3.
    :returns: ``{"unhijack", "passes", "bursts", "ops", "bypasses_without_fault", "bypasses_with_fault"`` (one
        count per burst), ``"ratio_during"`` (burst 1), ``"ratio_after"`` (bursts 2.., summed; each None when its
        bursts bypassed no read without the fault, ``"ratio_not_measured"`` then :data:`NO_CLEAN_BYPASS`, else None),
        ``"hijacked_after_burst"`` (the faulted run's hijacked pages after each burst's daemon passes),
        ``"pages_allocated", "hijack_events", "alloc_failures"}`` (the faulted run's).
    """
    uh = check_choice(unhijack, "unhijack", UNHIJACKS)
    p = check_int(passes, "passes", 0, 16)
    b = check_int(bursts, "bursts", 2, 64)
    d = check_int(depth, "depth", 1, 4096)
    n = check_int(ops, "ops", d, 10 ** 8)
    sd = check_int(seed, "seed", 0, (1 << 62))
    clean, _, _ = _bursts(uh, None, b, n, d, p, sd)
    faulted, s, hijacked = _bursts(uh, FaultInjection(probability=1.0, times=1), b, n, d, p, sd)
    return {
        "unhijack": uh, "passes": p, "bursts": b, "ops": n,
        "bypasses_without_fault": clean, "bypasses_with_fault": faulted,
        "ratio_during": faulted[0] / clean[0] if clean[0] else None,
        "ratio_after": sum(faulted[1:]) / sum(clean[1:]) if sum(clean[1:]) else None,
        "ratio_not_measured": None if clean[0] and sum(clean[1:]) else NO_CLEAN_BYPASS,
        "hijacked_after_burst": hijacked,
        **{k: s[k] for k in ("pages_allocated", "hijack_events", "alloc_failures")},
    }


def main(argv: list[str] | None = None) -> int:
    """The command line; a bad value exits 2 with one line naming it (no traceback)."""
    try:
        return _main(argv)
    except (ValueError, TypeError) as exc:
        print(f"python -m pybcache.bcache.experiments.unhijack: error: {exc}", file=sys.stderr)
        return 2


def _main(argv: list[str] | None) -> int:
    summary = " ".join((__doc__ or "").split("\n\n")[0].split())
    ap = argparse.ArgumentParser(prog="python -m pybcache.bcache.experiments.unhijack", description=summary)
    ap.add_argument("--passes", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--bursts", type=int, default=4)
    ap.add_argument("--ops", type=int, default=50_000)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rows = [unhijack_bursts(u, passes=p, bursts=args.bursts, ops=args.ops, seed=args.seed)
            for p in args.passes for u in UNHIJACKS]
    if args.json:
        print(json.dumps({"rows": rows}, indent=1))
        return 0
    cols = ("unhijack", "passes", "bypasses_without_fault", "bypasses_with_fault", "ratio_during", "ratio_after",
            "hijacked_after_burst", "pages_allocated", "hijack_events")
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(("-" if r[c] is None else f"{r[c]:.3f}") if c.startswith("ratio") else
                                ", ".join(map(str, r[c])) if isinstance(r[c], list) else str(r[c]) for c in cols)
              + " |")
    if any(r["ratio_not_measured"] for r in rows):
        print(f"-: {NO_CLEAN_BYPASS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
