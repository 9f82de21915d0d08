/* SPDX-License-Identifier: GPL-2.0-only */
/* Bad on purpose: init takes the two locks in the order B, A; write_start takes A, then B. Each order
 * alone is fine; both make lockdep's circular dependency (AB-BA) whether or not they ever overlap. */
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/rcupdate.h>
#include <linux/wait.h>
#include <pybcache/kpatch.h>

static DEFINE_SPINLOCK(count_lock);
static unsigned long in_flight;
static DEFINE_SPINLOCK(other_lock);
static unsigned long generation;

static int init(struct cached_dev *dc)
{
        unsigned long flags;
        (void)dc;
        spin_lock_irqsave(&other_lock, flags);
        spin_lock(&count_lock);
        generation = in_flight;
        spin_unlock(&count_lock);
        spin_unlock_irqrestore(&other_lock, flags);
        return 0;
}
static void start(struct cached_dev *dc, struct bio *bio)
{
        unsigned long flags;
        (void)dc; (void)bio;
        spin_lock_irqsave(&count_lock, flags);
        in_flight++;
        spin_lock(&other_lock);
        generation++;
        spin_unlock(&other_lock);
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
static const struct pybcache_patch_ops ops = { .name = "ctx-abba", .init = init, .write_start = start,
                                               .write_end = end, .read_bypass = read_bypass };
PYBCACHE_PATCH(ops);
