/* SPDX-License-Identifier: GPL-2.0-only */
/* Bad on purpose: an RCU callback (soft-irq context) takes a lock that write_start takes with a plain
 * spin_lock, soft-irqs enabled: a callback run on that CPU while write_start holds it deadlocks. lockdep's
 * "inconsistent {SOFTIRQ-ON-W} -> {IN-SOFTIRQ-W} usage" (spin_lock_bh in write_start is the fix). No
 * hard-irq rule is broken: the lock is never taken in hard-irq context. */
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/rcupdate.h>
#include <pybcache/kpatch.h>

struct token {
        struct rcu_head rcu;
};

static DEFINE_SPINLOCK(count_lock);
static unsigned long in_flight;
static DEFINE_SPINLOCK(token_lock);
static long tokens;

static void token_free(struct rcu_head *head)
{
        spin_lock(&token_lock);
        tokens--;
        spin_unlock(&token_lock);
        kfree(container_of(head, struct token, rcu));
}

static void start(struct cached_dev *dc, struct bio *bio)
{
        unsigned long flags;
        struct token *t = kmalloc(sizeof(*t), GFP_NOIO);
        (void)dc; (void)bio;
        spin_lock_irqsave(&count_lock, flags);
        in_flight++;
        spin_unlock_irqrestore(&count_lock, flags);
        if (t) {
                spin_lock(&token_lock);
                tokens++;
                spin_unlock(&token_lock);
                call_rcu(&t->rcu, token_free);
        }
}
static void end(struct cached_dev *dc, struct bio *bio)
{
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
static const struct pybcache_patch_ops ops = { .name = "ctx-softirq-usage", .write_start = start,
                                               .write_end = end, .read_bypass = read_bypass };
PYBCACHE_PATCH(ops);
