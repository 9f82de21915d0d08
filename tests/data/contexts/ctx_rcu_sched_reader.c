/* SPDX-License-Identifier: GPL-2.0-only */
/* Correct (issue 25, a false failure before): read_bypass reads an RCU-protected object with interrupts
 * disabled and rcu_dereference_sched, no rcu_read_lock. Since v5.0 an interrupts-disabled region is an
 * RCU reader (rcupdate.h: rcu_read_lock_sched_held() is !preemptible()), so kfree_rcu of a replaced
 * object waits for it. The WARN_ON catches a reader that sees a freed object (the shim poisons frees). */
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/rcupdate.h>
#include <pybcache/kpatch.h>

#define CFG_MAGIC 0x5ca1ab1eUL

struct cfg {
        unsigned long magic;
        struct rcu_head rcu;
};

static DEFINE_SPINLOCK(count_lock);
static unsigned long in_flight, starts;
static struct cfg *cur;

static int init(struct cached_dev *dc)
{
        struct cfg *c = kzalloc(sizeof(*c), GFP_KERNEL);
        (void)dc;
        if (!c)
                return -ENOMEM;
        c->magic = CFG_MAGIC;
        rcu_assign_pointer(cur, c);
        return 0;
}
static void fini(struct cached_dev *dc)
{
        (void)dc;
        kfree(rcu_dereference_protected(cur, true));
        RCU_INIT_POINTER(cur, NULL);
}
static void start(struct cached_dev *dc, struct bio *bio)
{
        unsigned long flags, n;
        (void)dc; (void)bio;
        spin_lock_irqsave(&count_lock, flags);
        in_flight++;
        n = ++starts;
        spin_unlock_irqrestore(&count_lock, flags);
        if (n % 8 == 0) {
                struct cfg *c = kmalloc(sizeof(*c), GFP_NOIO), *old;
                if (!c)
                        return;
                c->magic = CFG_MAGIC;
                spin_lock_irqsave(&count_lock, flags);
                old = rcu_dereference_protected(cur, true);
                rcu_assign_pointer(cur, c);
                spin_unlock_irqrestore(&count_lock, flags);
                kfree_rcu(old, rcu);
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
        struct cfg *c;
        bool busy;
        (void)dc; (void)bio;
        local_irq_save(flags);
        c = rcu_dereference_sched(cur);
        WARN_ON(c->magic != CFG_MAGIC);
        local_irq_restore(flags);
        spin_lock_irqsave(&count_lock, flags);
        busy = in_flight != 0;
        spin_unlock_irqrestore(&count_lock, flags);
        return busy;
}
static const struct pybcache_patch_ops ops = { .name = "ctx-rcu-sched-reader", .init = init, .exit = fini,
                                               .write_start = start, .write_end = end,
                                               .read_bypass = read_bypass };
PYBCACHE_PATCH(ops);
