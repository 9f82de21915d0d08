// SPDX-License-Identifier: GPL-2.0-only
/*
 * v3_atomic.c - a lockless rendering of the bypass-write tracker (our own code, kernel style): no lock
 * on any path; atomic_t counters; pages installed with cmpxchg and freed through RCU.
 *
 * A page holds 1024 atomic_t counters (32 MiB chunks, so 32 GiB per page) and `refs`, the number of
 * writes in flight on it. A start takes a reference with atomic_inc_not_zero inside an RCU read-side
 * section, or installs a new page with refs = 1 by cmpxchg; an end drops its reference, and the end
 * that drops the last one unpublishes the page and frees it with kfree_rcu. A page whose refs reached
 * zero can never be revived (inc_not_zero), so an end always decrements the page its start
 * incremented, and read_bypass, which runs under rcu_read_lock, never touches freed memory.
 *
 * Allocation failure: the page is allocated with __GFP_NOFAIL (the allocator retries rather than
 * fail; one 4 KiB page per 32 GiB, in process context). Overflow: an atomic_t counts to 2^31 - 1,
 * more writes than can be in flight. Ordering: the increments of a start are published by the full
 * barrier after them; an end's decrements are ordered after the write's completion by the one before.
 */
#include <linux/kernel.h>
#include <linux/slab.h>
#include <linux/atomic.h>
#include <linux/rcupdate.h>
#include <linux/bio.h>
#include <pybcache/kpatch.h>

#define BYPASS_CHUNK_SHIFT 16                           /* sectors: 32 MiB chunks */
#define BYPASS_COUNTERS_PER_PAGE 1024U
#define BYPASS_PAGE_SHIFT 10

/* What write_end needs, recorded by write_start in the per-write private area (the fields this patch adds
 * to bcache's struct search): at cached_dev_write_complete, s->orig_bio of a bypass write has been
 * consumed by bch_data_invalidate (0 sectors left), so the end cannot read its range from the bio. */
struct bypass_write {
        sector_t first, last;   /* the chunks the start counted */
        bool counted;           /* the start counted them (a bio of 0 sectors counts nothing) */
};

struct bypass_page {
        atomic_t refs;                  /* writes in flight on this page; 0 = dying, never revived */
        struct rcu_head rcu;
        atomic_t counters[BYPASS_COUNTERS_PER_PAGE];
};

struct bypass_tracker {
        unsigned long nr_pages;
        struct bypass_page __rcu *pages[];
};

static int bypass_init(struct cached_dev *dc)
{
        unsigned long nr_chunks = DIV_ROUND_UP(bdev_nr_sectors(dc->bdev), 1UL << BYPASS_CHUNK_SHIFT);
        unsigned long nr_pages = DIV_ROUND_UP(nr_chunks, BYPASS_COUNTERS_PER_PAGE);
        struct bypass_tracker *t;

        t = kvzalloc(struct_size(t, pages, nr_pages), GFP_KERNEL);
        if (!t)
                return -ENOMEM;
        t->nr_pages = nr_pages;
        dc->bypass = t;
        return 0;
}

static void bypass_exit(struct cached_dev *dc)
{
        struct bypass_tracker *t = dc->bypass;
        unsigned long i;

        for (i = 0; i < t->nr_pages; i++)
                kfree(rcu_dereference_protected(t->pages[i], true));
        kvfree(t);
}

/* A referenced page for slot i: take a reference on the live page, or install a new one. */
static struct bypass_page *page_get(struct bypass_tracker *t, unsigned long i)
{
        struct bypass_page *pg, *new;

        for (;;) {
                rcu_read_lock();
                pg = rcu_dereference(t->pages[i]);
                if (pg && atomic_inc_not_zero(&pg->refs)) {
                        rcu_read_unlock();
                        return pg;
                }
                rcu_read_unlock();
                if (pg) {                       /* dying: its last end is unpublishing it */
                        cpu_relax();
                        continue;
                }
                new = kzalloc(sizeof(*new), GFP_NOIO | __GFP_NOFAIL);
                atomic_set(&new->refs, 1);
                if (cmpxchg(&t->pages[i], NULL, new) == NULL)   /* fully ordered: publishes new */
                        return new;
                kfree(new);
        }
}

static void page_put(struct bypass_tracker *t, unsigned long i, struct bypass_page *pg)
{
        if (atomic_dec_and_test(&pg->refs)) {
                WARN_ON(cmpxchg(&t->pages[i], pg, NULL) != pg);
                kfree_rcu(pg, rcu);
        }
}

static void bypass_write_start(struct cached_dev *dc, struct bio *bio)
{
        struct bypass_write *w = pyb_write_private(bio);
        struct bypass_tracker *t = dc->bypass;
        sector_t first, last, chunk, c;

        if (!bio_sectors(bio))
                return;
        first = bio->bi_iter.bi_sector >> BYPASS_CHUNK_SHIFT;
        last = (bio_end_sector(bio) - 1) >> BYPASS_CHUNK_SHIFT;
        w->first = first;
        w->last = last;
        w->counted = true;
        for (chunk = first; chunk <= last;) {
                sector_t page_last = min_t(sector_t, last, chunk | (BYPASS_COUNTERS_PER_PAGE - 1));
                struct bypass_page *pg = page_get(t, chunk >> BYPASS_PAGE_SHIFT);

                for (c = chunk; c <= page_last; c++)
                        atomic_inc(&pg->counters[c & (BYPASS_COUNTERS_PER_PAGE - 1)]);
                chunk = page_last + 1;
        }
        smp_mb__after_atomic();                 /* counted before the invalidation that follows */
}

static void bypass_write_end(struct cached_dev *dc, struct bio *bio)
{
        struct bypass_write *w = pyb_write_private(bio);
        struct bypass_tracker *t = dc->bypass;
        sector_t first, last, chunk, c;

        if (!w->counted)
                return;
        first = w->first;       /* the bio has 0 sectors left here: its range is the start's */
        last = w->last;
        smp_mb__before_atomic();                /* the write completed before we uncount it */
        for (chunk = first; chunk <= last;) {
                sector_t page_last = min_t(sector_t, last, chunk | (BYPASS_COUNTERS_PER_PAGE - 1));
                unsigned long i = chunk >> BYPASS_PAGE_SHIFT;
                struct bypass_page *pg;

                rcu_read_lock();                /* we hold a reference: the page cannot go away */
                pg = rcu_dereference(t->pages[i]);
                rcu_read_unlock();
                if (!WARN_ON_ONCE(!pg)) {
                        for (c = chunk; c <= page_last; c++)
                                WARN_ON_ONCE(atomic_dec_return(&pg->counters[c & (BYPASS_COUNTERS_PER_PAGE - 1)]) < 0);
                        page_put(t, i, pg);
                }
                chunk = page_last + 1;
        }
}

static bool bypass_read_bypass(struct cached_dev *dc, struct bio *bio)
{
        struct bypass_tracker *t = dc->bypass;
        sector_t first, last, chunk, c;
        bool active = false;

        if (!bio_sectors(bio))
                return false;
        first = bio->bi_iter.bi_sector >> BYPASS_CHUNK_SHIFT;
        last = (bio_end_sector(bio) - 1) >> BYPASS_CHUNK_SHIFT;
        rcu_read_lock();
        for (chunk = first; chunk <= last && !active;) {
                sector_t page_last = min_t(sector_t, last, chunk | (BYPASS_COUNTERS_PER_PAGE - 1));
                struct bypass_page *pg = rcu_dereference(t->pages[chunk >> BYPASS_PAGE_SHIFT]);

                if (pg)
                        for (c = chunk; c <= page_last && !active; c++)
                                active = atomic_read(&pg->counters[c & (BYPASS_COUNTERS_PER_PAGE - 1)]) > 0;
                chunk = page_last + 1;
        }
        rcu_read_unlock();
        return active;
}

static const struct pybcache_patch_ops bypass_ops = {
        .name = "v3-atomic",
        .init = bypass_init,
        .exit = bypass_exit,
        .write_start = bypass_write_start,
        .write_end = bypass_write_end,
        .write_private_size = sizeof(struct bypass_write),
        .read_bypass = bypass_read_bypass,
};
PYBCACHE_PATCH(bypass_ops);
