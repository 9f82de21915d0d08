// SPDX-License-Identifier: GPL-2.0-only
/* Bad on purpose: a double unlock in write_start, a lock released by another thread in write_end. */
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/wait.h>
#include <pybcache/kpatch.h>

static DEFINE_SPINLOCK(lock_a);
static DEFINE_SPINLOCK(lock_b);
static void start(struct cached_dev *dc, struct bio *bio)
{
        bool *long_write = pyb_write_private(bio);
        unsigned long flags;
        (void)dc;
        spin_lock_irqsave(&lock_a, flags);
        spin_unlock_irqrestore(&lock_a, flags);
        spin_unlock_irqrestore(&lock_a, flags);
        *long_write = bio_sectors(bio) > 8;
        if (*long_write)                        /* a long write: hand lock_b to the completion */
                spin_lock_irqsave(&lock_b, flags);
}
static void end(struct cached_dev *dc, struct bio *bio)
{
        unsigned long flags = 1;
        (void)dc;
        if (*(bool *)pyb_write_private(bio))    /* recorded at start: this bio has 0 sectors left */
                spin_unlock_irqrestore(&lock_b, flags);
}

static bool none_read(struct cached_dev *dc, struct bio *bio) { (void)dc; (void)bio; return false; }
static const struct pybcache_patch_ops ops = { .name = "unlock-bugs", .write_start = start, .write_end = end, .read_bypass = none_read,
        .write_private_size = sizeof(bool) };
PYBCACHE_PATCH(ops);
