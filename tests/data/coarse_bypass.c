// SPDX-License-Identifier: GPL-2.0-only
/*
 * coarse_bypass.c - a tracker that counts per 64 MiB (two of the reference's 32 MiB chunks) and does not
 * declare it: a write of [0, 32 MiB) makes a read of chunk 1 bypass. check-patch's semantics check must
 * fail it ("coarser bypass"); the same file with `.bypass_granularity = 64 << 20` declared passes.
 */
#include <linux/kernel.h>
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/bio.h>
#include <pybcache/kpatch.h>

#define CB_SHIFT 17                     /* sectors: 64 MiB regions */

struct cb_write { sector_t first, last; bool counted; };
struct cb_tracker { spinlock_t lock; u32 *count; };

static int cb_init(struct cached_dev *dc)
{
        struct cb_tracker *t = kzalloc(sizeof(*t), GFP_KERNEL);

        if (!t)
                return -ENOMEM;
        t->count = kvcalloc(DIV_ROUND_UP(bdev_nr_sectors(dc->bdev), 1UL << CB_SHIFT), sizeof(u32), GFP_KERNEL);
        if (!t->count) {
                kfree(t);
                return -ENOMEM;
        }
        spin_lock_init(&t->lock);
        dc->bypass = t;
        return 0;
}

static void cb_exit(struct cached_dev *dc)
{
        struct cb_tracker *t = dc->bypass;

        kvfree(t->count);
        kfree(t);
}

static void cb_write_start(struct cached_dev *dc, struct bio *bio)
{
        struct cb_write *w = pyb_write_private(bio);
        struct cb_tracker *t = dc->bypass;
        unsigned long flags;
        sector_t r;

        if (!bio_sectors(bio))
                return;
        w->first = bio->bi_iter.bi_sector >> CB_SHIFT;
        w->last = (bio_end_sector(bio) - 1) >> CB_SHIFT;
        w->counted = true;
        spin_lock_irqsave(&t->lock, flags);
        for (r = w->first; r <= w->last; r++)
                t->count[r]++;
        spin_unlock_irqrestore(&t->lock, flags);
}

static void cb_write_end(struct cached_dev *dc, struct bio *bio)
{
        struct cb_write *w = pyb_write_private(bio);
        struct cb_tracker *t = dc->bypass;
        unsigned long flags;
        sector_t r;

        if (!w->counted)
                return;
        spin_lock_irqsave(&t->lock, flags);
        for (r = w->first; r <= w->last; r++)
                t->count[r]--;
        spin_unlock_irqrestore(&t->lock, flags);
}

static bool cb_read_bypass(struct cached_dev *dc, struct bio *bio)
{
        struct cb_tracker *t = dc->bypass;
        unsigned long flags;
        bool active = false;
        sector_t r;

        if (!bio_sectors(bio))
                return false;
        spin_lock_irqsave(&t->lock, flags);
        for (r = bio->bi_iter.bi_sector >> CB_SHIFT; r <= (bio_end_sector(bio) - 1) >> CB_SHIFT; r++)
                active |= t->count[r] != 0;
        spin_unlock_irqrestore(&t->lock, flags);
        return active;
}

static const struct pybcache_patch_ops cb_ops = {
        .name = "coarse-bypass",
        .init = cb_init,
        .exit = cb_exit,
        .write_start = cb_write_start,
        .write_end = cb_write_end,
        .read_bypass = cb_read_bypass,
        .write_private_size = sizeof(struct cb_write),
};
PYBCACHE_PATCH(cb_ops);
