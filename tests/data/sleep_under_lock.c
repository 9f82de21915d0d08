// SPDX-License-Identifier: GPL-2.0-only
/* Bad on purpose: a sleeping allocation under a spinlock (might_sleep). */
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/wait.h>
#include <pybcache/kpatch.h>

static DEFINE_SPINLOCK(big_lock);
static void start(struct cached_dev *dc, struct bio *bio)
{
        void *p;
        (void)dc; (void)bio;
        spin_lock_irq(&big_lock);
        p = kzalloc(64, GFP_NOIO);      /* NOIO: only the might-sleep rule is broken */
        spin_unlock_irq(&big_lock);
        kfree(p);
}
static void end(struct cached_dev *dc, struct bio *bio) { (void)dc; (void)bio; }

static bool none_read(struct cached_dev *dc, struct bio *bio) { (void)dc; (void)bio; return false; }
static const struct pybcache_patch_ops ops = { .name = "sleep-under-lock", .write_start = start, .write_end = end, .read_bypass = none_read };
PYBCACHE_PATCH(ops);
