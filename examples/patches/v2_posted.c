// SPDX-License-Identifier: GPL-2.0-only
/*
 * v2_posted.c - the bypass-write tracker as the v2 cover letter describes it, in kernel style.
 *
 * Our own rendering from the cover letter's prose (the patch body was not available): 32 MiB chunks,
 * one u16 counter per chunk in lazily allocated 4 KiB pages (2048 counters, 64 GiB per page), one
 * spinlock per page. The page is allocated with GFP_NOIO outside the lock and installed after an
 * md-bitmap style re-check; when the allocation fails the write is left untracked on that page with
 * a rate-limited warning. write_end decrements blindly, refusing below zero (the "> 0 check"); a
 * counter wraps at 65,536 as a u16 does.
 *
 * Assumed (not stated in the cover letter): a page is freed by the end that drops its last non-zero
 * counter; write_end runs in interrupt context, so the page lock is taken irq-safe everywhere.
 *
 * The two open questions of the cover letter are visible here: an untracked start's end can
 * decrement another write's increment (stolen increment), and 65,536 writes in flight on one chunk
 * read as none (u16 wrap).
 */
#include <linux/kernel.h>
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/printk.h>
#include <linux/bio.h>
#include <pybcache/kpatch.h>

#define BYPASS_CHUNK_SHIFT 16                                   /* sectors: 32 MiB chunks */
#define BYPASS_COUNTERS_PER_PAGE (PAGE_SIZE / sizeof(u16))      /* 2048 */
#define BYPASS_PAGE_SHIFT 11                                    /* chunks per page, as a shift */

/* What write_end needs, recorded by write_start in the per-write private area (the fields this patch adds
 * to bcache's struct search): at cached_dev_write_complete, s->orig_bio of a bypass write has been
 * consumed by bch_data_invalidate (0 sectors left), so the end cannot read its range from the bio. */
struct bypass_write {
        sector_t first, last;   /* the chunks the start counted */
        bool counted;           /* the start counted them (a bio of 0 sectors counts nothing) */
};

struct bypass_page {
        spinlock_t lock;
        u16 *counters;          /* NULL until the first write on the page; under lock */
        unsigned int active;    /* non-zero counters on the page; under lock */
};

struct bypass_tracker {
        unsigned long nr_chunks;
        unsigned long nr_pages;
        struct bypass_page pages[];
};

static int bypass_init(struct cached_dev *dc)
{
        unsigned long nr_chunks = DIV_ROUND_UP(bdev_nr_sectors(dc->bdev), 1UL << BYPASS_CHUNK_SHIFT);
        unsigned long nr_pages = DIV_ROUND_UP(nr_chunks, BYPASS_COUNTERS_PER_PAGE);
        struct bypass_tracker *t;
        unsigned long i;

        t = kvzalloc(struct_size(t, pages, nr_pages), GFP_KERNEL);
        if (!t)
                return -ENOMEM;
        t->nr_chunks = nr_chunks;
        t->nr_pages = nr_pages;
        for (i = 0; i < nr_pages; i++)
                spin_lock_init(&t->pages[i].lock);
        dc->bypass = t;
        return 0;
}

static void bypass_exit(struct cached_dev *dc)
{
        struct bypass_tracker *t = dc->bypass;
        unsigned long i;

        for (i = 0; i < t->nr_pages; i++)
                kfree(t->pages[i].counters);
        kvfree(t);
}

static void bypass_write_start(struct cached_dev *dc, struct bio *bio)
{
        struct bypass_write *w = pyb_write_private(bio);
        struct bypass_tracker *t = dc->bypass;
        sector_t first, last, chunk;

        if (!bio_sectors(bio))
                return;
        first = bio->bi_iter.bi_sector >> BYPASS_CHUNK_SHIFT;
        last = (bio_end_sector(bio) - 1) >> BYPASS_CHUNK_SHIFT;
        w->first = first;
        w->last = last;
        w->counted = true;

        for (chunk = first; chunk <= last;) {
                struct bypass_page *pg = &t->pages[chunk >> BYPASS_PAGE_SHIFT];
                sector_t page_last = min_t(sector_t, last, chunk | (BYPASS_COUNTERS_PER_PAGE - 1));
                sector_t c;

                spin_lock_irq(&pg->lock);
                if (!pg->counters) {
                        u16 *page;

                        spin_unlock_irq(&pg->lock);
                        page = kzalloc(PAGE_SIZE, GFP_NOIO);
                        spin_lock_irq(&pg->lock);
                        if (pg->counters) {
                                kfree(page);            /* somebody beat us to it */
                        } else if (page) {
                                pg->counters = page;
                        } else {
                                spin_unlock_irq(&pg->lock);
                                pr_warn_ratelimited("bcache: bypass tracking page allocation failed, write left untracked\n");
                                chunk = page_last + 1;
                                continue;
                        }
                }
                for (c = chunk; c <= page_last; c++) {
                        u16 *ctr = &pg->counters[c & (BYPASS_COUNTERS_PER_PAGE - 1)];

                        if ((*ctr)++ == 0)              /* wraps at 65,536 as a u16 does */
                                pg->active++;
                }
                spin_unlock_irq(&pg->lock);
                chunk = page_last + 1;
        }
}

static void bypass_write_end(struct cached_dev *dc, struct bio *bio)
{
        struct bypass_write *w = pyb_write_private(bio);
        struct bypass_tracker *t = dc->bypass;
        sector_t first, last, chunk;

        if (!w->counted)
                return;
        first = w->first;       /* the bio has 0 sectors left here: its range is the start's */
        last = w->last;

        for (chunk = first; chunk <= last;) {
                struct bypass_page *pg = &t->pages[chunk >> BYPASS_PAGE_SHIFT];
                sector_t page_last = min_t(sector_t, last, chunk | (BYPASS_COUNTERS_PER_PAGE - 1));
                unsigned long flags;
                sector_t c;

                spin_lock_irqsave(&pg->lock, flags);
                if (pg->counters) {
                        for (c = chunk; c <= page_last; c++) {
                                u16 *ctr = &pg->counters[c & (BYPASS_COUNTERS_PER_PAGE - 1)];

                                if (*ctr > 0 && --(*ctr) == 0)  /* blind, refused below zero */
                                        pg->active--;
                        }
                        if (!pg->active) {                      /* assumed: freed when idle */
                                kfree(pg->counters);
                                pg->counters = NULL;
                        }
                }
                spin_unlock_irqrestore(&pg->lock, flags);
                chunk = page_last + 1;
        }
}

static bool bypass_read_bypass(struct cached_dev *dc, struct bio *bio)
{
        struct bypass_tracker *t = dc->bypass;
        sector_t first, last, chunk;
        bool active = false;

        if (!bio_sectors(bio))
                return false;
        first = bio->bi_iter.bi_sector >> BYPASS_CHUNK_SHIFT;
        last = (bio_end_sector(bio) - 1) >> BYPASS_CHUNK_SHIFT;

        for (chunk = first; chunk <= last && !active;) {
                struct bypass_page *pg = &t->pages[chunk >> BYPASS_PAGE_SHIFT];
                sector_t page_last = min_t(sector_t, last, chunk | (BYPASS_COUNTERS_PER_PAGE - 1));
                unsigned long flags;
                sector_t c;

                spin_lock_irqsave(&pg->lock, flags);
                if (pg->counters)
                        for (c = chunk; c <= page_last && !active; c++)
                                active = pg->counters[c & (BYPASS_COUNTERS_PER_PAGE - 1)] > 0;
                spin_unlock_irqrestore(&pg->lock, flags);
                chunk = page_last + 1;
        }
        return active;
}

static const struct pybcache_patch_ops bypass_ops = {
        .name = "v2-posted",
        .init = bypass_init,
        .exit = bypass_exit,
        .write_start = bypass_write_start,
        .write_end = bypass_write_end,
        .write_private_size = sizeof(struct bypass_write),
        .read_bypass = bypass_read_bypass,
};
PYBCACHE_PATCH(bypass_ops);
