// SPDX-License-Identifier: GPL-2.0-only
/*
 * reserve_wait.c - a correct tracker that waits when its page reserve is empty (issue 25, part 2).
 *
 * u32 counters per 32 MiB chunk in lazily installed 4 KiB pages (1024 counters, 32 GiB per page), one
 * irq-safe lock. A page comes from the allocator (GFP_NOIO) or, when that fails, from a reserve of two
 * pages allocated at init; when the allocation fails and the reserve is empty, the start sleeps until
 * an end gives a page back (the mempool way). A bio takes every page it needs in one step under the
 * lock (a start never holds a page while it waits), so the writes in flight always hold the pages a
 * waiter needs, and their ends, which happen on their own schedule as bios complete, wake it.
 *
 * check-patch's semantics check drains the reserve on purpose: its sequences keep up to 24 writes in
 * flight over five pages with allocations failing at p = 0.3, so starts find the reserve empty and
 * wait. Before completions were made independent of the submitter, such a wait was reported as a
 * hang ("hung in write_start ... wait_event"); the tracker itself is right.
 *
 * write_end reads its range from the per-write private area: the bio it is handed has 0 sectors left
 * (as bcache's cached_dev_write_complete sees it).
 */
#include <linux/kernel.h>
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/wait.h>
#include <linux/bio.h>
#include <pybcache/kpatch.h>

#define RW_CHUNK_SHIFT 16                               /* sectors: 32 MiB chunks */
#define RW_PER_PAGE (PAGE_SIZE / sizeof(u32))           /* 1024 counters */
#define RW_PAGE_SHIFT 10
#define RW_RESERVE 2

struct rw_write {
        sector_t first, last;   /* chunks the start counted */
        bool counted;
};

struct rw_tracker {
        spinlock_t lock;
        wait_queue_head_t page_back;    /* a page went back to the reserve */
        unsigned long nr_pages;
        void *reserve[RW_RESERVE];      /* under lock */
        unsigned int nr_free;           /* reserve[0..nr_free) hold pages; under lock */
        unsigned long reserve_used;     /* pages taken from the reserve (a figure); under lock */
        u32 **pages;                    /* under lock */
        unsigned int *users;            /* per page: counters > 0; the page goes when 0; under lock */
};

static int rw_init(struct cached_dev *dc)
{
        unsigned long chunks = DIV_ROUND_UP(bdev_nr_sectors(dc->bdev), 1UL << RW_CHUNK_SHIFT);
        struct rw_tracker *t = kzalloc(sizeof(*t), GFP_KERNEL);
        unsigned int i;

        if (!t)
                return -ENOMEM;
        t->nr_pages = DIV_ROUND_UP(chunks, RW_PER_PAGE);
        t->pages = kcalloc(t->nr_pages, sizeof(*t->pages), GFP_KERNEL);
        t->users = kcalloc(t->nr_pages, sizeof(*t->users), GFP_KERNEL);
        for (i = 0; i < RW_RESERVE; i++)
                t->reserve[i] = kzalloc(PAGE_SIZE, GFP_KERNEL);
        if (!t->pages || !t->users || !t->reserve[0] || !t->reserve[1]) {
                for (i = 0; i < RW_RESERVE; i++)
                        kfree(t->reserve[i]);
                kfree(t->pages);
                kfree(t->users);
                kfree(t);
                return -ENOMEM;
        }
        t->nr_free = RW_RESERVE;
        spin_lock_init(&t->lock);
        init_waitqueue_head(&t->page_back);
        dc->bypass = t;
        return 0;
}

static void rw_exit(struct cached_dev *dc)
{
        struct rw_tracker *t = dc->bypass;
        unsigned long i;

        for (i = 0; i < t->nr_pages; i++)
                kfree(t->pages[i]);
        for (i = 0; i < t->nr_free; i++)
                kfree(t->reserve[i]);
        kfree(t->pages);
        kfree(t->users);
        kfree(t);
}

/* Pages of [p0, p1] not installed. Caller holds the lock. */
static unsigned int rw_missing(struct rw_tracker *t, unsigned long p0, unsigned long p1)
{
        unsigned int n = 0;
        unsigned long p;

        for (p = p0; p <= p1; p++)
                n += !t->pages[p];
        return n;
}

static bool rw_can_proceed(struct rw_tracker *t, unsigned long p0, unsigned long p1, unsigned int spare)
{
        unsigned long flags;
        bool ok;

        spin_lock_irqsave(&t->lock, flags);
        ok = rw_missing(t, p0, p1) <= t->nr_free + spare;
        spin_unlock_irqrestore(&t->lock, flags);
        return ok;
}

static void rw_write_start(struct cached_dev *dc, struct bio *bio)
{
        struct rw_write *w = pyb_write_private(bio);
        struct rw_tracker *t = dc->bypass;
        void *fresh[2] = { NULL, NULL };
        unsigned long p0, p1, p;
        sector_t c;
        unsigned int i, have;

        if (!bio_sectors(bio))
                return;
        w->first = bio->bi_iter.bi_sector >> RW_CHUNK_SHIFT;
        w->last = (bio_end_sector(bio) - 1) >> RW_CHUNK_SHIFT;
        p0 = w->first >> RW_PAGE_SHIFT;
        p1 = w->last >> RW_PAGE_SHIFT;          /* a bio of at most 2 GiB: p1 <= p0 + 1 */

        /* pages from the allocator first, outside the lock; what it cannot give comes from the reserve */
        for (have = 0; have <= p1 - p0; have++) {
                fresh[have] = kzalloc(PAGE_SIZE, GFP_NOIO | __GFP_NOWARN);
                if (!fresh[have])
                        break;
        }
        for (;;) {
                unsigned long flags;

                spin_lock_irqsave(&t->lock, flags);
                if (rw_missing(t, p0, p1) <= have + t->nr_free) {
                        for (p = p0; p <= p1; p++) {
                                if (t->pages[p])
                                        continue;
                                if (have) {
                                        t->pages[p] = fresh[--have];
                                        fresh[have] = NULL;
                                } else {
                                        t->pages[p] = t->reserve[--t->nr_free];
                                        t->reserve[t->nr_free] = NULL;
                                        t->reserve_used++;
                                }
                        }
                        for (c = w->first; c <= w->last; c++) {
                                p = c >> RW_PAGE_SHIFT;
                                if (t->pages[p][c & (RW_PER_PAGE - 1)]++ == 0)
                                        t->users[p]++;
                        }
                        w->counted = true;
                        spin_unlock_irqrestore(&t->lock, flags);
                        break;
                }
                spin_unlock_irqrestore(&t->lock, flags);
                /* the reserve is empty: wait for an end to give a page back */
                wait_event(t->page_back, rw_can_proceed(t, p0, p1, have));
        }
        for (i = 0; i < 2; i++)
                kfree(fresh[i]);                /* pages another start installed first */
}

static void rw_write_end(struct cached_dev *dc, struct bio *bio)
{
        struct rw_write *w = pyb_write_private(bio);
        struct rw_tracker *t = dc->bypass;
        void *drop[2] = { NULL, NULL };
        unsigned int ndrop = 0, i;
        unsigned long flags, p;
        bool back = false;
        sector_t c;

        if (!w->counted)
                return;
        spin_lock_irqsave(&t->lock, flags);
        for (c = w->first; c <= w->last; c++) {
                p = c >> RW_PAGE_SHIFT;
                if (WARN_ON_ONCE(!t->pages[p] || !t->pages[p][c & (RW_PER_PAGE - 1)]))
                        continue;
                if (--t->pages[p][c & (RW_PER_PAGE - 1)] == 0 && --t->users[p] == 0) {
                        if (t->nr_free < RW_RESERVE) {  /* refill the reserve first */
                                memset(t->pages[p], 0, PAGE_SIZE);
                                t->reserve[t->nr_free++] = t->pages[p];
                                back = true;
                        } else {
                                drop[ndrop++] = t->pages[p];
                        }
                        t->pages[p] = NULL;
                }
        }
        spin_unlock_irqrestore(&t->lock, flags);
        for (i = 0; i < ndrop; i++)
                kfree(drop[i]);
        if (back)
                wake_up(&t->page_back);
}

static bool rw_read_bypass(struct cached_dev *dc, struct bio *bio)
{
        struct rw_tracker *t = dc->bypass;
        unsigned long flags;
        sector_t first, last, c;
        bool active = false;

        if (!bio_sectors(bio))
                return false;
        first = bio->bi_iter.bi_sector >> RW_CHUNK_SHIFT;
        last = (bio_end_sector(bio) - 1) >> RW_CHUNK_SHIFT;
        spin_lock_irqsave(&t->lock, flags);
        for (c = first; c <= last && !active; c++) {
                u32 *pg = t->pages[c >> RW_PAGE_SHIFT];

                active = pg && pg[c & (RW_PER_PAGE - 1)];
        }
        spin_unlock_irqrestore(&t->lock, flags);
        return active;
}

static const struct pybcache_patch_ops rw_ops = {
        .name = "reserve-wait",
        .init = rw_init,
        .exit = rw_exit,
        .write_start = rw_write_start,
        .write_end = rw_write_end,
        .read_bypass = rw_read_bypass,
        .write_private_size = sizeof(struct rw_write),
};
PYBCACHE_PATCH(rw_ops);
