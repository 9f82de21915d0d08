"""The two explorers agree on the lab's own trackers (issue 26): each lab configuration of the call-level
explorer (``pybcache explore --sync VARIANT``, one step per lock hold of csrc/pyb_tracker.c) is paired with a
kernel-C rendering of the same design, which the patch-level explorer (``--patch-level``, source-DPOR over
the patch's own steps) explores over the same bounds and the same allocation fault. For every bound both
must say the same thing: a violation found (a stale read; a missed bypass or another oracle failure of the
patch) or none. The renderings are the shipped examples, the mutants of the proposal and, where neither is
the lab's design, tests/data/lab_variants/. docs/check-patch.md ("The two explorers on the lab's trackers")
has the measured table and what differs between the pairs."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from helpers.kpatch_util import EXAMPLES, TESTS, mutant_table, write_v3_mempool

from pybcache import explore
from pybcache.bcache.kpatch.interleave import explore_patch

pytestmark = [pytest.mark.native, pytest.mark.xdist_group("native-threads")]

LAB = TESTS / "data" / "lab_variants"
BOUNDS = ((1, 1), (2, 1), (1, 2))


@dataclasses.dataclass(frozen=True)
class Pair:
    name: str                   # the lab configuration
    lab: dict[str, Any]         # explore()'s keywords for it
    patch: str                  # a path, or "mutant:NAME" / "max1:" / "max1:NAME" / "mempool:" (from the proposal)
    faults: tuple[int, ...]     # fault_at values explored
    nofail: bool = False        # the patch allocates with __GFP_NOFAIL: a fault_at injects nothing into it


PAIRS = (
    Pair("none", dict(sync="none"), str(LAB / "none.c"), (0,)),
    Pair("page, untracked, wrap", dict(sync="page", alloc_failure="untracked", overflow="wrap"),
         str(EXAMPLES / "v2_posted.c"), (0, 1, 2)),
    Pair("page, untracked, wait", dict(sync="page", alloc_failure="untracked"), "mutant:untracked-fallback", (0, 1)),
    Pair("page, hijack, wait", dict(sync="page", alloc_failure="hijack"), str(EXAMPLES / "v3_proposal.c"), (0, 1, 2)),
    Pair("page, mempool of 2, wait", dict(sync="page", alloc_failure="mempool", pool_pages=2),
         "mempool:", (0, 1, 2)),
    Pair("global, hijack, wait", dict(sync="global", alloc_failure="hijack"), str(LAB / "global_hijack.c"),
         (0, 1, 2)),
    Pair("atomic (defaults)", dict(sync="atomic"), str(LAB / "atomic_mempool.c"), (0, 1)),
    Pair("atomic (defaults)", dict(sync="atomic"), str(EXAMPLES / "v3_atomic.c"), (0, 1), nofail=True),
    Pair("page, hijack, wait, counter max 1", dict(sync="page", alloc_failure="hijack", counter_max=1), "max1:",
         (0,)),
    Pair("page, hijack, clamp, counter max 1",
         dict(sync="page", alloc_failure="hijack", overflow="clamp", counter_max=1), "max1:clamp-not-wait", (0,)),
)


def pair_id(pair: Pair) -> str:
    lab = "-".join(pair.name.replace(",", "").replace("(", "").replace(")", "").split())
    return f"{lab}~{Path(pair.patch).stem if '/' in pair.patch else pair.patch.rstrip(':')}"


def lowered_max(source: str) -> str:
    """The proposal (or a mutant of it) with its counters' maximum lowered from U16_MAX to 1, as the lab's
    ``counter_max=1`` lowers it (for the page's counters and a hijacked page's halves alike), so that two
    writes reach it."""
    code = [line for line in source.splitlines() if "U16_MAX" in line and not line.lstrip().startswith("*")]
    assert len(code) >= 3, "the proposal's segment_full and segment_dec no longer compare with U16_MAX"
    return source.replace("U16_MAX", "1")


@pytest.fixture(scope="module")
def patch_path(tmp_path_factory):
    mutants = mutant_table()
    folder = tmp_path_factory.mktemp("lab-renderings")

    def path(spec: str) -> Path:
        kind, _, name = spec.partition(":")
        if kind == "mempool":
            return write_v3_mempool(folder)
        if kind not in ("mutant", "max1"):
            return Path(spec)
        source = mutants.proposal().read_text()
        if name:
            source = mutants.apply(mutants.mutant(name), source)
        if kind == "max1":
            source = lowered_max(source)
        out = folder / f"{kind}_{(name or 'proposal').replace('-', '_')}.c"
        out.write_text(source)
        return out
    return path


def both(pair: Pair, fault: int, path: Path) -> list[dict[str, Any]]:
    """Each bound's two runs: the call-level result and the patch-level one (every execution, not stopping
    at the first failure, so that each bound has its own verdict)."""
    out = []
    for w, r in BOUNDS:
        lab = explore(**pair.lab, fault_at=fault, writes=w, reads=r)
        pl = explore_patch(path, f"{w}w{r}r", fault_at=fault, stop_on_failure=False)
        out.append({"bound": f"{w}w{r}r", "lab": lab, "patch": pl})
    return out


def patch_violation(res: dict[str, Any]) -> bool:
    return any(f["kind"] != "data race" for f in res["failures"])


@pytest.mark.parametrize("pair, fault", [(p, f) for p in PAIRS for f in p.faults],
                         ids=lambda x: f"fault{x}" if isinstance(x, int) else pair_id(x))
def test_both_explorers_give_the_same_verdict_on_every_bound(pair, fault, patch_path):
    runs = both(pair, fault, patch_path(pair.patch))
    for run in runs:
        lab, pl = run["lab"], run["patch"]
        assert lab["finished"], run["bound"]
        assert pl["complete"] and pl["error"] is None, (run["bound"], pl["error"])    # not cut by a budget
        assert not [f for f in pl["failures"] if f["kind"] == "data race"], run["bound"]
        verdict = (lab["violations"] > 0, patch_violation(pl))
        assert verdict[0] == verdict[1], (run["bound"], lab["counterexample"], [f["message"] for f in pl["failures"]])
        if verdict[1]:      # the patch's failures include the stale read's own kind, not only a WARN_ON
            assert any("missed bypass" in f.get("kinds", ()) for f in pl["failures"]), run["bound"]
    if fault:               # the fault was reached by both, or (a __GFP_NOFAIL patch) by the lab only
        assert sum(x["lab"]["faults_injected"] for x in runs) > 0
        assert (sum(x["patch"]["faults_injected"] for x in runs) > 0) != pair.nofail


def test_the_rows_cover_both_verdicts_and_the_allocation_failure_flips_the_untracked_ones(patch_path):
    """Not a table of verdicts: the flip is measured. v2 (and the lab's untracked policy) is safe with no fault
    and unsafe when the first allocation fails; the hijack is safe either way."""
    v2, v3 = PAIRS[1], PAIRS[3]
    assert not any(x["lab"]["violations"] or patch_violation(x["patch"]) for x in both(v2, 0, patch_path(v2.patch)))
    assert all(x["lab"]["violations"] and patch_violation(x["patch"]) for x in both(v2, 1, patch_path(v2.patch)))
    assert not any(x["lab"]["violations"] or patch_violation(x["patch"]) for x in both(v3, 1, patch_path(v3.patch)))


def test_only_the_patch_level_explorer_contends_the_atomic_variants_first_allocation():
    """The call-level explorer steps the atomic variant once per chunk, so a start's allocation and its
    install are one step and two starts never both find the slot empty: the second allocation of a 2w1r
    schedule never happens and fault_at=2 injects nothing. The patch-level explorer steps between the
    allocation and the cmpxchg, and the loser's page (from the allocator or the reserve) goes back."""
    lab = explore(sync="atomic", fault_at=2, writes=2, reads=1)
    pl = explore_patch(LAB / "atomic_mempool.c", "2w1r", fault_at=2, stop_on_failure=False)
    assert lab["finished"] and lab["faults_injected"] == 0 and lab["violations"] == 0
    assert pl["complete"] and pl["faults_injected"] > 0 and pl["failures"] == []
    page = explore(sync="page", alloc_failure="hijack", fault_at=2, writes=2, reads=1)
    assert page["faults_injected"] > 0        # the lock variants drop the lock to allocate: two steps
