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

/* Per tracker (dc->bypass): the checks run many trackers of one module, some closed with writes in flight. */
struct state {
        spinlock_t count_lock;
        unsigned long in_flight, starts;
        struct cfg *cur;
};

static int init(struct cached_dev *dc)
{
        struct state *st = kzalloc(sizeof(*st), GFP_KERNEL);
        struct cfg *c = kzalloc(sizeof(*c), GFP_KERNEL);
        if (!st || !c) {
                kfree(st);
                kfree(c);
                return -ENOMEM;
        }
        spin_lock_init(&st->count_lock);
        c->magic = CFG_MAGIC;
        rcu_assign_pointer(st->cur, c);
        dc->bypass = st;
        return 0;
}
static void fini(struct cached_dev *dc)
{
        struct state *st = dc->bypass;
        kfree(rcu_dereference_protected(st->cur, true));
        RCU_INIT_POINTER(st->cur, NULL);
        kfree(st);
}
static void start(struct cached_dev *dc, struct bio *bio)
{
        struct state *st = dc->bypass;
        unsigned long flags, n;
        (void)bio;
        spin_lock_irqsave(&st->count_lock, flags);
        st->in_flight++;
        n = ++st->starts;
        spin_unlock_irqrestore(&st->count_lock, flags);
        if (n % 8 == 0) {
                struct cfg *c = kmalloc(sizeof(*c), GFP_NOIO), *old;
                if (!c)
                        return;
                c->magic = CFG_MAGIC;
                spin_lock_irqsave(&st->count_lock, flags);
                old = rcu_dereference_protected(st->cur, true);
                rcu_assign_pointer(st->cur, c);
                spin_unlock_irqrestore(&st->count_lock, flags);
                kfree_rcu(old, rcu);
        }
}
static void end(struct cached_dev *dc, struct bio *bio)
{
        struct state *st = dc->bypass;
        unsigned long flags;
        (void)bio;
        spin_lock_irqsave(&st->count_lock, flags);
        st->in_flight--;
        spin_unlock_irqrestore(&st->count_lock, flags);
}
static bool read_bypass(struct cached_dev *dc, struct bio *bio)
{
        struct state *st = dc->bypass;
        unsigned long flags;
        struct cfg *c;
        bool busy;
        (void)bio;
        local_irq_save(flags);
        c = rcu_dereference_sched(st->cur);
        WARN_ON(c->magic != CFG_MAGIC);
        local_irq_restore(flags);
        spin_lock_irqsave(&st->count_lock, flags);
        busy = st->in_flight != 0;
        spin_unlock_irqrestore(&st->count_lock, flags);
        return busy;
}
static const struct pybcache_patch_ops ops = { .name = "ctx-rcu-sched-reader", .init = init, .exit = fini,
                                               .write_start = start, .write_end = end,
                                               .read_bypass = read_bypass,
                                               /* one count for the device: any write in flight makes every
                                                * read bypass, declared so (1 PiB covers every device the
                                                * checks use) */
                                               .bypass_granularity = 1ULL << 50 };
PYBCACHE_PATCH(ops);
