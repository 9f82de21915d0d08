// SPDX-License-Identifier: GPL-2.0-only
/*
 * tiny_counter.c - the smallest correct tracker: one counter for the whole device under one spinlock.
 * Small enough (a dozen scheduling points per write) that every interleaving of 1w1r can be run
 * without reduction: the patch-level explorer's tests count its equivalence classes by brute force.
 */
#include <linux/kernel.h>
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/bio.h>
#include <pybcache/kpatch.h>

struct tiny {
        spinlock_t lock;
        unsigned int writes;    /* in flight; under lock */
};

static int tiny_init(struct cached_dev *dc)
{
        struct tiny *t = kzalloc(sizeof(*t), GFP_KERNEL);

        if (!t)
                return -ENOMEM;
        spin_lock_init(&t->lock);
        dc->bypass = t;
        return 0;
}

static void tiny_exit(struct cached_dev *dc)
{
        kfree(dc->bypass);
}

static void tiny_write_start(struct cached_dev *dc, struct bio *bio)
{
        struct tiny *t = dc->bypass;

        spin_lock_irq(&t->lock);
        t->writes++;
        spin_unlock_irq(&t->lock);
}

static void tiny_write_end(struct cached_dev *dc, struct bio *bio)
{
        struct tiny *t = dc->bypass;
        unsigned long flags;

        spin_lock_irqsave(&t->lock, flags);
        t->writes--;
        spin_unlock_irqrestore(&t->lock, flags);
}

static bool tiny_read_bypass(struct cached_dev *dc, struct bio *bio)
{
        struct tiny *t = dc->bypass;
        unsigned long flags;
        bool active;

        spin_lock_irqsave(&t->lock, flags);
        active = t->writes > 0;
        spin_unlock_irqrestore(&t->lock, flags);
        return active;
}

static const struct pybcache_patch_ops tiny_ops = {
        .name = "tiny-counter",
        .init = tiny_init,
        .exit = tiny_exit,
        .write_start = tiny_write_start,
        .write_end = tiny_write_end,
        .read_bypass = tiny_read_bypass,
};
PYBCACHE_PATCH(tiny_ops);
