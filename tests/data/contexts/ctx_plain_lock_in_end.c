/* SPDX-License-Identifier: GPL-2.0-only */
/* Bad on purpose (issue 25, a wrong pass): the count's lock is taken with spin_lock_irqsave in write_start
 * but with a plain spin_lock in write_end. Correct while write_end runs in hard-irq (interrupts already
 * off); when cached_dev_write_complete runs in soft-irq or on a worker, interrupts are on while the lock
 * is held and a bio completion interrupting that CPU deadlocks on it. */
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
        (void)dc; (void)bio;
        spin_lock_irqsave(&count_lock, flags);
        in_flight++;
        spin_unlock_irqrestore(&count_lock, flags);
}
static void end(struct cached_dev *dc, struct bio *bio)
{
        (void)dc; (void)bio;
        spin_lock(&count_lock);
        in_flight--;
        spin_unlock(&count_lock);
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
static const struct pybcache_patch_ops ops = { .name = "ctx-plain-lock-in-end", .write_start = start,
                                               .write_end = end, .read_bypass = read_bypass };
PYBCACHE_PATCH(ops);
