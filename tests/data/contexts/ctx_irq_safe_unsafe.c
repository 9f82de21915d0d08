/* SPDX-License-Identifier: GPL-2.0-only */
/* Bad on purpose: write_start takes the irq-safe count lock (write_end takes it in interrupt context),
 * then, nested, a statistics lock that read_bypass takes with interrupts enabled (irq-unsafe). CPU 0 in
 * read_bypass holds the statistics lock; CPU 1 in write_start holds the count lock and waits for it; an
 * interrupt on CPU 0 completes a write and waits for the count lock: deadlock. */
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/rcupdate.h>
#include <linux/wait.h>
#include <pybcache/kpatch.h>

static DEFINE_SPINLOCK(count_lock);
static unsigned long in_flight;
static DEFINE_SPINLOCK(stats_lock);
static unsigned long started, reads;
static void start(struct cached_dev *dc, struct bio *bio)
{
        unsigned long flags;
        (void)dc; (void)bio;
        spin_lock_irqsave(&count_lock, flags);
        in_flight++;
        spin_lock(&stats_lock);
        started++;
        spin_unlock(&stats_lock);
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
        spin_lock(&stats_lock);
        reads++;
        spin_unlock(&stats_lock);
        return busy;
}
static const struct pybcache_patch_ops ops = { .name = "ctx-irq-safe-unsafe", .write_start = start,
                                               .write_end = end, .read_bypass = read_bypass };
PYBCACHE_PATCH(ops);
