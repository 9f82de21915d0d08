/* SPDX-License-Identifier: GPL-2.0-only */
/* Bad on purpose: the first write_start waits with wait_event on a condition that allocates (GFP_NOIO:
 * it may sleep). The condition runs after the task's state was set to sleep: "do not call blocking ops
 * when !TASK_RUNNING". */
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/rcupdate.h>
#include <linux/wait.h>
#include <pybcache/kpatch.h>

static DEFINE_SPINLOCK(count_lock);
static unsigned long in_flight;
static DECLARE_WAIT_QUEUE_HEAD(first_wq);
static int first_done;

static bool probe_allocates(int *tries)
{
        void *p = kmalloc(32, GFP_NOIO);
        kfree(p);
        return ++*tries > 1;
}
static void start(struct cached_dev *dc, struct bio *bio)
{
        unsigned long flags;
        (void)dc; (void)bio;
        spin_lock_irqsave(&count_lock, flags);
        in_flight++;
        spin_unlock_irqrestore(&count_lock, flags);
        if (!__atomic_exchange_n(&first_done, 1, __ATOMIC_RELAXED)) {
                int tries = 0;
                wait_event(first_wq, probe_allocates(&tries));   /* the shim re-checks every 50 ms */
        }
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
static const struct pybcache_patch_ops ops = { .name = "ctx-sleep-in-wait-cond", .write_start = start,
                                               .write_end = end, .read_bypass = read_bypass };
PYBCACHE_PATCH(ops);
