/* SPDX-License-Identifier: GPL-2.0-only */
/* Correct (issue 25, a false failure before): a statistics lock taken with a plain spin_lock in
 * write_start and only with spin_trylock in write_end. lockdep does not count a trylock as a use in
 * interrupt context (kernel/locking/lockdep.c, mark_usage): it cannot spin, so it cannot deadlock. */
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/rcupdate.h>
#include <linux/wait.h>
#include <pybcache/kpatch.h>

static DEFINE_SPINLOCK(count_lock);
static unsigned long in_flight;
static DEFINE_SPINLOCK(stats_lock);
static unsigned long started, ended;
static void start(struct cached_dev *dc, struct bio *bio)
{
        unsigned long flags;
        (void)dc; (void)bio;
        spin_lock_irqsave(&count_lock, flags);
        in_flight++;
        spin_unlock_irqrestore(&count_lock, flags);
        spin_lock(&stats_lock);
        started++;
        spin_unlock(&stats_lock);
}
static void end(struct cached_dev *dc, struct bio *bio)
{
        (void)dc; (void)bio;
        unsigned long flags;
        (void)dc; (void)bio;
        spin_lock_irqsave(&count_lock, flags);
        in_flight--;
        spin_unlock_irqrestore(&count_lock, flags);
        if (spin_trylock(&stats_lock)) {
                ended++;
                spin_unlock(&stats_lock);
        }
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
static const struct pybcache_patch_ops ops = { .name = "ctx-trylock-in-irq", .write_start = start,
                                               .write_end = end, .read_bypass = read_bypass };
PYBCACHE_PATCH(ops);
