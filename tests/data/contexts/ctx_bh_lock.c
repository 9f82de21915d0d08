/* SPDX-License-Identifier: GPL-2.0-only */
/* Correct: a lock write_end takes in soft-irq context is taken in process context with spin_lock_bh, so it is
 * never held with soft-irqs enabled (lockdep: IN-SOFTIRQ-W and no SOFTIRQ-ON-W). Compiled with
 * -DPLAIN_LOCK_IN_START the start takes it with plain spin_lock: {IN-SOFTIRQ-W} -> {SOFTIRQ-ON-W}. */
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/bottom_half.h>
#include <pybcache/kpatch.h>

struct state {
        spinlock_t lock;
        unsigned long in_flight;
};

static int init(struct cached_dev *dc)
{
        struct state *st = kzalloc(sizeof(*st), GFP_KERNEL);
        if (!st)
                return -ENOMEM;
        spin_lock_init(&st->lock);
        dc->bypass = st;
        return 0;
}
static void fini(struct cached_dev *dc)
{
        kfree(dc->bypass);
}
static void start(struct cached_dev *dc, struct bio *bio)
{
        struct state *st = dc->bypass;
        (void)bio;
#ifdef PLAIN_LOCK_IN_START
        spin_lock(&st->lock);
        st->in_flight++;
        spin_unlock(&st->lock);
#else
        spin_lock_bh(&st->lock);
        st->in_flight++;
        spin_unlock_bh(&st->lock);
#endif
}
static void end(struct cached_dev *dc, struct bio *bio)
{
        struct state *st = dc->bypass;
        (void)bio;
        spin_lock(&st->lock);          /* write_end pinned to soft-irq by the test: soft-irqs are off */
        st->in_flight--;
        spin_unlock(&st->lock);
}
static bool read_bypass(struct cached_dev *dc, struct bio *bio)
{
        struct state *st = dc->bypass;
        bool busy;
        (void)bio;
        spin_lock_bh(&st->lock);
        busy = st->in_flight != 0;
        spin_unlock_bh(&st->lock);
        return busy;
}
static const struct pybcache_patch_ops ops = { .name = "ctx-bh-lock", .init = init, .exit = fini,
                                               .write_start = start, .write_end = end, .read_bypass = read_bypass,
                                               .bypass_granularity = 1ULL << 50 };
PYBCACHE_PATCH(ops);
