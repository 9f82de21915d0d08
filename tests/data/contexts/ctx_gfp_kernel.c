/* SPDX-License-Identifier: GPL-2.0-only */
/* Bad on purpose: write_start allocates with GFP_KERNEL (outside any lock, so no might-sleep report). On
 * the block submission path reclaim may write back through this device and wait on it; md-bitmap
 * allocates the same kind of page with GFP_NOIO. */
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/rcupdate.h>
#include <linux/wait.h>
#include <pybcache/kpatch.h>

static DEFINE_SPINLOCK(count_lock);
static unsigned long in_flight;
static void start(struct cached_dev *dc, struct bio *bio)
{
        unsigned long flags;
        void *scratch = kmalloc(64, GFP_KERNEL);
        (void)dc; (void)bio;
        kfree(scratch);
        spin_lock_irqsave(&count_lock, flags);
        in_flight++;
        spin_unlock_irqrestore(&count_lock, flags);
}
static void end(struct cached_dev *dc, struct bio *bio)
{
        (void)dc; (void)bio;
        unsigned long flags;
        (void)dc; (void)bio;
        spin_lock_irqsave(&count_lock, flags);
        in_flight--;
        spin_unlock_irqrestore(&count_lock, flags);
}
static bool read_bypass(struct cached_dev *dc, struct bio *bio)
{
        unsigned long flags;
        bool busy;
        (void)dc; (void)bio;
        spin_lock_irqsave(&count_lock, flags);
        busy = in_flight != 0;
        spin_unlock_irqrestore(&count_lock, flags);
        return busy;
}
static const struct pybcache_patch_ops ops = { .name = "ctx-gfp-kernel", .write_start = start,
                                               .write_end = end, .read_bypass = read_bypass };
PYBCACHE_PATCH(ops);
