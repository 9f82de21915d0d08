"""Shared helpers of the kernel-patch tests: where the example and purpose-built patches are, and the
single-point mutants of the proposal (pybcache/bcache/kpatch/mutants.py)."""
from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
ROOT = TESTS.parent
EXAMPLES = ROOT / "examples" / "patches"
BAD = TESTS / "data"


def mutant_table():
    """The single-point mutants of the proposal (shipped: pybcache kernel compare uses their twins)."""
    from pybcache.bcache.kpatch import mutants
    return mutants


def write_mutant(name: str, directory: Path) -> Path:
    """The mutant ``name`` of the proposal, generated now and written as ``<directory>/<name>.c``."""
    mutants = mutant_table()
    path = Path(directory) / f"{name.replace('-', '_')}.c"
    path.write_text(mutants.apply(mutants.mutant(name), mutants.proposal().read_text()))
    return path


# == variants of the proposal built for one test (test data, not shipped mutants) ======================

#: examples/patches/v3_proposal.c with its counter pages taken from a mempool (issue 25's "page reserve, and a wait
#: when the reserve is empty"): a reserve of two pages, mempool_alloc(GFP_NOIO) in write_start (never NULL: it waits
#: for a page an end gives back), mempool_free when a page's last counter drops. The hijack path stays but is never
#: taken, so the variant declares no coarser bypass granularity (it is held to the 32 MiB chunks). Each edit is
#: (region, search, replace): region names a function, a top-level definition by its opening line, or "#include"
#: (the block of includes), and the search must occur in that region.
V3_MEMPOOL_EDITS = (
    ("#include", "#include <linux/slab.h>\n", "#include <linux/mempool.h>\n#include <linux/slab.h>\n"),
    ("struct bypass_tracker {", "        wait_queue_head_t overflow_wait;\n",
     "        wait_queue_head_t overflow_wait;\n"
     "        mempool_t *page_pool;   /* counter pages: a reserve of two, mempool_alloc waits when it is empty */\n"),
    ("segment_dec", "sector_t last)\n", "sector_t last, mempool_t *pool)\n"),
    ("segment_dec", "kfree(pg->counters);", "mempool_free(pg->counters, pool);"),
    ("bypass_init", "        t->nr_pages = nr_pages;\n",
     "        t->page_pool = mempool_create_kmalloc_pool(2, PAGE_SIZE);\n"
     "        if (!t->page_pool) {\n"
     "                kvfree(t);\n"
     "                return -ENOMEM;\n"
     "        }\n"
     "        t->nr_pages = nr_pages;\n"),
    ("bypass_exit", "kfree(t->pages[i].counters);\n",
     "mempool_free(t->pages[i].counters, t->page_pool);\n        mempool_destroy(t->page_pool);\n"),
    ("bypass_write_start", "page = kzalloc(PAGE_SIZE, GFP_NOIO | __GFP_NOWARN);\n",
     "page = mempool_alloc(t->page_pool, GFP_NOIO);   /* never NULL: may wait */\n"
     "                        memset(page, 0, PAGE_SIZE);\n"),
    ("bypass_write_end", "segment_dec(pg, chunk, page_last)", "segment_dec(pg, chunk, page_last, t->page_pool)"),
    ("static const struct pybcache_patch_ops", '.name = "v3-proposal",', '.name = "v3-mempool",'),
    ("static const struct pybcache_patch_ops",
     "        /* a hijacked page counts per half page (1024 chunks): a read then bypasses for any write in flight\n"
     "         * in its 32 GiB half, coarser than the 32 MiB chunks; declared, so check-patch holds it to that */\n"
     "        .bypass_granularity = 32ULL << 30,\n", ""),
)


def _region(source: str, region: str) -> tuple[int, int]:
    """Start and end offsets of ``region`` in ``source`` (see :data:`V3_MEMPOOL_EDITS`); ValueError if absent."""
    lines = source.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    if region == "#include":
        rows = [i for i, line in enumerate(lines) if line.startswith("#include")]
        if not rows:
            raise ValueError("the proposal has no #include lines any more")
        return offsets[rows[0]], offsets[rows[-1] + 1]
    opening = region if " " in region else f" {region}("
    for i, line in enumerate(lines):
        if opening in line and not line.startswith((" ", "\t", "/*")):
            for j in range(i + 1, len(lines)):
                if lines[j].startswith("}"):
                    return offsets[i], offsets[j + 1]
    raise ValueError(f"{region!r} is not defined in the proposal any more")


def edit_proposal(edits, source: str | None = None) -> str:
    """The proposal (or ``source``) with each (region, search, replace) of ``edits`` applied once; ValueError
    naming the edit if its search is not in its region, so that a variant cannot silently stop differing."""
    if source is None:
        source = mutant_table().proposal().read_text()
    for region, search, replace in edits:
        a, b = _region(source, region)
        body = source[a:b]
        if search not in body:
            raise ValueError(f"edit in {region!r}: {search!r} is not in it in the proposal any more")
        source = source[:a] + body.replace(search, replace, 1) + source[b:]
    return source


def write_v3_mempool(directory: Path) -> Path:
    """The proposal with its counter pages from a mempool (:data:`V3_MEMPOOL_EDITS`), as
    ``<directory>/v3_mempool.c``."""
    path = Path(directory) / "v3_mempool.c"
    path.write_text(edit_proposal(V3_MEMPOOL_EDITS))
    return path
