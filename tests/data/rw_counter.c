// SPDX-License-Identifier: GPL-2.0-only
/*
 * rw_counter.c - one in-flight counter for the whole device under a reader-writer lock: the writes take
 * it for writing to move the count, read_bypass takes it for reading (interrupts disabled on every side:
 * write_end takes it in hard-irq context). Correct; the patch-level
 * explorer's tests use it (and a mutant that moves the count under the read side) to check that rwlock
 * operations are scheduling points.
 */
#include <linux/kernel.h>
#include <linux/slab.h>
#include <linux/rwlock.h>
#include <linux/bio.h>
#include <pybcache/kpatch.h>

struct rwc {
        rwlock_t lock;
        unsigned int writes;    /* in flight; written under the write side, read under either */
};

static int rwc_init(struct cached_dev *dc)
{
        struct rwc *t = kzalloc(sizeof(*t), GFP_KERNEL);

        if (!t)
                return -ENOMEM;
        rwlock_init(&t->lock);
        dc->bypass = t;
        return 0;
}

static void rwc_exit(struct cached_dev *dc)
{
        kfree(dc->bypass);
}

static void rwc_write_start(struct cached_dev *dc, struct bio *bio)
{
        struct rwc *t = dc->bypass;

        write_lock_irq(&t->lock);
        t->writes++;
        write_unlock_irq(&t->lock);
}

static void rwc_write_end(struct cached_dev *dc, struct bio *bio)
{
        struct rwc *t = dc->bypass;
        unsigned long flags;

        write_lock_irqsave(&t->lock, flags);
        t->writes--;
        write_unlock_irqrestore(&t->lock, flags);
}

static bool rwc_read_bypass(struct cached_dev *dc, struct bio *bio)
{
        struct rwc *t = dc->bypass;
        unsigned long flags;
        bool active;

        read_lock_irqsave(&t->lock, flags);
        active = t->writes > 0;
        read_unlock_irqrestore(&t->lock, flags);
        return active;
}

static const struct pybcache_patch_ops rwc_ops = {
        .name = "rw-counter",
        .init = rwc_init,
        .exit = rwc_exit,
        .write_start = rwc_write_start,
        .write_end = rwc_write_end,
        .read_bypass = rwc_read_bypass,
};
PYBCACHE_PATCH(rwc_ops);
