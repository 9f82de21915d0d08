"""The patch-level half of check-patch's ``explore`` (issue 26): the standard scenarios explored at the
patch's own scheduling points (:func:`pybcache.bcache.kpatch.interleave.explore_patch`, source-DPOR),
with the k-th allocation failing for every k that injects, each exploration complete.

The parent compiles the explorer's module of the patch (it knows the ``-I`` folders) and hands its path
to the ``explore`` child in :data:`LIBRARY_ENV`."""
from __future__ import annotations

import os
from typing import Any

from .context import _Stop

#: The environment variable that carries the explorer module's path to the check's child.
LIBRARY_ENV = "PYBCACHE_KPATCH_INTERLEAVE"
#: Scenarios explored at the patch's own steps, in order.
PATCH_SCENARIOS = ("1w1r", "2w1r", "1w2r", "2w1r-page")
#: Executions one exploration may take before the check fails as incomplete (a count: the same verdict on
#: every machine). The shipped patches need at most 8,382 (v3_atomic.c, 2w1r).
PATCH_MAX_EXECUTIONS = 200_000
#: The largest fault_at tried (a patch that still allocates past it fails as incomplete).
PATCH_MAX_FAULT_AT = 32


def _figure(failures: list[dict]) -> str:
    from ..interleave import lost_count_failure
    if any(f["kind"] == "data race" for f in failures):
        return "data race"
    if lost_count_failure(failures):
        return "lost count"
    return failures[0]["kind"]


def check_patch_level(path: str, library: str | None = None, fail_alloc: str = "all",
                      end_bio: str = "consumed") -> tuple[str, str, dict[str, Any]]:
    """Run the exploration; returns (figure, detail, extra) or raises the check's stop with the
    counterexample at the patch's own steps. ``fail_alloc``: the allocations fault_at counts and fails
    (check-patch passes its own mode). ``end_bio``: the bio ``write_end`` gets (check-patch's ``--end-bio``)."""
    from ..interleave import explore_patch
    library = library or os.environ.get(LIBRARY_ENV) or None
    rows = []
    total = 0
    for sc in PATCH_SCENARIOS:
        k = 0
        while True:
            res = explore_patch(path, sc, fault_at=k, max_executions=PATCH_MAX_EXECUTIONS, library=library,
                                fail_alloc=fail_alloc, end_bio=end_bio)
            total += res["executions"]
            where = f"{sc} with fault_at={k}" if k else f"{sc} (no fault)"
            if res["error"]:
                raise _Stop(f"patch-level exploration of {where}: {res['error']}", None, "incomplete")
            if res["failures"]:
                fs = res["failures"]
                lines: list[str] = []
                for f in fs:
                    lines.append(f["message"])
                    lines.extend(f"  {s}" for s in f["steps"])
                detail = (f"patch-level exploration of {where}, {res['executions']:,} executions: "
                          + " / ".join(f["message"] for f in fs))
                raise _Stop(detail, lines, _figure(fs))
            if not res["complete"]:
                raise _Stop(f"patch-level exploration of {where} was not complete within "
                            f"{PATCH_MAX_EXECUTIONS:,} executions", None, "incomplete")
            rows.append({"scenario": sc, "fault_at": k, "executions": res["executions"],
                         "blocked": res["blocked"], "events": res["events"]})
            if k > 0 and not res["faults_injected"]:
                break
            k += 1
            if k > PATCH_MAX_FAULT_AT:
                raise _Stop(f"patch-level exploration of {sc}: allocations still fail at fault_at="
                            f"{PATCH_MAX_FAULT_AT}", None, "incomplete")
    per = ", ".join(f"{sc} {sum(r['executions'] for r in rows if r['scenario'] == sc):,}" for sc in PATCH_SCENARIOS)
    return (f"{total:,} patch-level executions",
            f"patch-level (source-DPOR at every lock, atomic, allocation and shared access of the patch, "
            f"{len(rows)} complete explorations, no data race, no missed bypass, no lost count): {per}",
            {"patch_level": rows})
