// SPDX-License-Identifier: GPL-2.0-only
/*
 * mutex_counter.c - the writes started, counted under a mutex, and the writes ended, an atomic count
 * (write_end runs in hard-irq context, where a mutex must not be taken); a range reads active while the
 * two differ, compared under the mutex. Correct; the patch-level explorer's tests use it (and a mutant
 * that counts the start after the unlock) to check that mutex operations are scheduling points.
 */
#include <linux/kernel.h>
#include <linux/slab.h>
#include <linux/mutex.h>
#include <linux/atomic.h>
#include <linux/bio.h>
#include <pybcache/kpatch.h>

struct mxc {
        struct mutex lock;
        unsigned int starts;    /* under lock */
        atomic_t ends;
};

static int mxc_init(struct cached_dev *dc)
{
        struct mxc *t = kzalloc(sizeof(*t), GFP_KERNEL);

        if (!t)
                return -ENOMEM;
        mutex_init(&t->lock);
        atomic_set(&t->ends, 0);
        dc->bypass = t;
        return 0;
}

static void mxc_exit(struct cached_dev *dc)
{
        kfree(dc->bypass);
}

static void mxc_write_start(struct cached_dev *dc, struct bio *bio)
{
        struct mxc *t = dc->bypass;

        mutex_lock(&t->lock);
        t->starts++;
        mutex_unlock(&t->lock);
}

static void mxc_write_end(struct cached_dev *dc, struct bio *bio)
{
        struct mxc *t = dc->bypass;

        atomic_inc(&t->ends);
}

static bool mxc_read_bypass(struct cached_dev *dc, struct bio *bio)
{
        struct mxc *t = dc->bypass;
        bool active;

        mutex_lock(&t->lock);
        active = t->starts != (unsigned int)atomic_read(&t->ends);
        mutex_unlock(&t->lock);
        return active;
}

static const struct pybcache_patch_ops mxc_ops = {
        .name = "mutex-counter",
        .init = mxc_init,
        .exit = mxc_exit,
        .write_start = mxc_write_start,
        .write_end = mxc_write_end,
        .read_bypass = mxc_read_bypass,
};
PYBCACHE_PATCH(mxc_ops);
