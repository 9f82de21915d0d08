/* SPDX-License-Identifier: GPL-2.0-only */
/* Bad on purpose: write_start holds the irq-safe count lock (taken with spin_lock_irq) and nests a second
 * lock with spin_lock_irq too: that inner spin_unlock_irq enables interrupts while the count lock is
 * still held, so a completion interrupting there deadlocks on it. */
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/rcupdate.h>
#include <linux/wait.h>
#include <pybcache/kpatch.h>

static DEFINE_SPINLOCK(count_lock);
static unsigned long in_flight;
static DEFINE_SPINLOCK(stats_lock);
static unsigned long started;
static void start(struct cached_dev *dc, struct bio *bio)
{
        (void)dc; (void)bio;
        spin_lock_irq(&count_lock);
        in_flight++;
        spin_lock_irq(&stats_lock);
        started++;
        spin_unlock_irq(&stats_lock);
        spin_unlock_irq(&count_lock);
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
static const struct pybcache_patch_ops ops = { .name = "ctx-irq-enable-with-safe-lock", .write_start = start,
                                               .write_end = end, .read_bypass = read_bypass };
PYBCACHE_PATCH(ops);
