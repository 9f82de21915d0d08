"""Single-point bugs of the kinds a reviewer catches, applied to the lab's v3 proposal
(examples/patches/v3_proposal.c): the test suite's check that each check of ``check-patch`` catches what it
is for, and the lab's side of ``pybcache kernel compare`` (:data:`KERNEL_PAIRS`: the kernel mutants of
:mod:`pybcache.kernel.generate` and the mutant of the proposal that makes the same mistake).

Each mutant is one (search, replace) inside one function of the proposal, generated at test time so
that the mutants follow the proposal as it changes (a search that no longer matches is an error, not a
silently unmutated file). ``caught_by`` is the check that must fail it and ``figure`` the failure's
figure it must fail with (so that a battery broken in another way does not count); ``tsan`` marks a mutant only
``check-patch --tsan`` catches on every run (a data race whose lost update the threads rarely hit).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from ..._csrc import example_patches

__all__ = ["Mutant", "MUTANTS", "KERNEL_PAIRS", "apply", "generate", "mutant", "proposal"]


def proposal() -> Path:
    """The lab's v3 proposal, the source every mutant is applied to."""
    return example_patches()["v3_proposal"]


@dataclasses.dataclass(frozen=True)
class Mutant:
    name: str
    bug: str                 # what a reviewer would write in the review
    function: str            # the function the search is confined to
    search: str
    replace: str
    caught_by: str           # the check that must fail it
    figure: str              # the failure it must produce: the check's figure (a report kind, a lost count)
    count: int = 1           # occurrences of search in the function that are replaced (0: all)
    tsan: bool = False


MUTANTS = (
    Mutant("end-off-by-one", "the range write_start records for write_end (its per-write area) ends one chunk "
           "late when the write ends on a chunk boundary",
           "bypass_write_start", "w->last = last;",
           "w->last = bio_end_sector(bio) >> BYPASS_CHUNK_SHIFT;", "semantics", "missed bypass"),
    Mutant("read-first-chunk-only", "read_bypass checks only the first chunk of a multi-chunk read",
           "bypass_read_bypass", "last = (bio_end_sector(bio) - 1) >> BYPASS_CHUNK_SHIFT;",
           "last = first;", "semantics", "missed bypass"),
    Mutant("clamp-not-wait", "at U16_MAX the start drops its increment instead of waiting for room",
           "bypass_write_start",
           """                if (segment_full(pg, chunk, page_last)) {
                        spin_unlock_irq(&pg->lock);
                        wait_event(t->overflow_wait, segment_has_room(pg, chunk, page_last));
                        continue;                       /* the page may have changed: look again */
                }
                segment_inc(pg, chunk, page_last);""",
           """                if (!segment_full(pg, chunk, page_last))
                        segment_inc(pg, chunk, page_last);     /* clamp at U16_MAX */""", "overflow", "count lost"),
    Mutant("inc-outside-lock", "the counters are incremented after the page lock is dropped",
           "bypass_write_start",
           """                segment_inc(pg, chunk, page_last);
                spin_unlock_irq(&pg->lock);""",
           """                spin_unlock_irq(&pg->lock);
                segment_inc(pg, chunk, page_last);""", "balance", "ThreadSanitizer", tsan=True),
    Mutant("no-recheck-after-alloc", "the page allocated outside the lock is installed without md-bitmap's re-check: "
           "two writers allocate, the second overwrites the first's page and its count",
           "bypass_write_start",
           """                        if (pg->counters || pg->hijacked)
                                kfree(page);            /* somebody beat us to it */
                        else if (page)""",
           """                        if (page)""", "explore", "lost count"),
    Mutant("alloc-under-lock", "the page is allocated with GFP_NOIO while the page lock is held",
           "bypass_write_start",
           """                        spin_unlock_irq(&pg->lock);
                        page = kzalloc(PAGE_SIZE, GFP_NOIO | __GFP_NOWARN);
                        spin_lock_irq(&pg->lock);""",
           """                        page = kzalloc(PAGE_SIZE, GFP_NOIO | __GFP_NOWARN);""", "context", "might_sleep"),
    Mutant("irq-unsafe-submit-lock", "write_start takes the page lock with spin_lock, interrupts enabled",
           "bypass_write_start", "_irq(&pg->lock);", "(&pg->lock);", "context", "inconsistent_lock_state",
           count=0),
    Mutant("untracked-fallback", "a failed page allocation leaves the write untracked (v2's fallback)",
           "bypass_write_start",
           """                        else
                                pg->hijacked = true;    /* md-bitmap: count in the slot itself */""",
           """                        else {
                                spin_unlock_irq(&pg->lock);
                                chunk = page_last + 1;  /* untracked */
                                continue;
                        }""", "semantics", "missed bypass"),
    # the kernel mutants' twins (KERNEL_PAIRS)
    Mutant("gfp-kernel-under-lock", "the page is allocated with GFP_KERNEL while the page lock is held, interrupts off",
           "bypass_write_start",
           """                        spin_unlock_irq(&pg->lock);
                        page = kzalloc(PAGE_SIZE, GFP_NOIO | __GFP_NOWARN);
                        spin_lock_irq(&pg->lock);""",
           """                        page = kzalloc(PAGE_SIZE, GFP_KERNEL);""", "context", "might_sleep"),
    Mutant("end-one-chunk-too-many", "write_end decrements one chunk past the range its start counted",
           "bypass_write_end", "last = w->last;", "last = w->last + 1;", "semantics", "missed bypass"),
    Mutant("end-reads-consumed-bio", "write_end takes its range from the bio it is handed, which bcache's "
           "cached_dev_write_complete hands consumed (0 sectors left)",
           "bypass_write_end",
           """        first = w->first;       /* the bio has 0 sectors left here: its range is the start's */
        last = w->last;""",
           """        if (!bio_sectors(bio))
                return;
        first = bio->bi_iter.bi_sector >> BYPASS_CHUNK_SHIFT;
        last = (bio_end_sector(bio) - 1) >> BYPASS_CHUNK_SHIFT;""", "balance", "end saw 0 sectors"),
    Mutant("page-leak", "the page is never freed when its last counter drops to zero",
           "segment_dec", """                        kfree(pg->counters);
                        pg->counters = NULL;""", """                        pg->counters = NULL;""", "balance",
           "memory not back"),
)

#: kernel mutant (pybcache.kernel.generate.V3_MUTANTS) -> the mutant of the proposal that makes the same mistake
KERNEL_PAIRS: dict[str, str] = {
    "v3-gfp-kernel-under-lock": "gfp-kernel-under-lock",
    "v3-untracked-fallback": "untracked-fallback",
    "v3-end-one-chunk-too-many": "end-one-chunk-too-many",
    "v3-orig-bio-end": "end-reads-consumed-bio",
}


def mutant(name: str) -> Mutant:
    """The mutant called ``name``; ValueError naming the known ones."""
    for m in MUTANTS:
        if m.name == name:
            return m
    raise ValueError(f"no mutant {name!r} (known: {', '.join(m.name for m in MUTANTS)})")


def _function_span(source: str, function: str) -> tuple[int, int]:
    """Start and end offsets of ``function``'s definition (its signature to its closing brace)."""
    start = source.index(f" {function}(")
    start = source.rindex("\n", 0, start) + 1
    end = source.index("\n}\n", start) + 3
    return start, end


def apply(m: Mutant, source: str) -> str:
    """The proposal's source with the mutant's one bug in it."""
    a, b = _function_span(source, m.function)
    body = source[a:b]
    found = body.count(m.search)
    if found == 0 or (m.count and found < m.count):
        raise ValueError(f"mutant {m.name}: {m.search!r} is not in {m.function}() of the proposal any more")
    mutated = body.replace(m.search, m.replace, -1 if m.count == 0 else m.count)
    return source[:a] + mutated + source[b:]


def generate(directory: Path) -> dict[str, Path]:
    """Write every mutant as ``<name>.c`` into ``directory``; returns name -> path."""
    source = proposal().read_text()
    out = {}
    for m in MUTANTS:
        path = Path(directory) / f"{m.name.replace('-', '_')}.c"
        path.write_text(apply(m, source))
        out[m.name] = path
    return out
