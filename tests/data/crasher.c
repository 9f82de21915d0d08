// SPDX-License-Identifier: GPL-2.0-only
/* Crashes on purpose: BUG_ON in write_start for a write at sector 0, a NULL dereference at sector 8. */
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/wait.h>
#include <pybcache/kpatch.h>

static void start(struct cached_dev *dc, struct bio *bio)
{
        (void)dc;
        BUG_ON(bio->bi_iter.bi_sector == 0);
        if (bio->bi_iter.bi_sector == 8)
                *(volatile int *)dc->bypass = 1;
}
static void end(struct cached_dev *dc, struct bio *bio) { (void)dc; (void)bio; }

static bool none_read(struct cached_dev *dc, struct bio *bio) { (void)dc; (void)bio; return false; }
static const struct pybcache_patch_ops ops = { .name = "crasher", .write_start = start, .write_end = end, .read_bypass = none_read };
PYBCACHE_PATCH(ops);
