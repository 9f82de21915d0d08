// SPDX-License-Identifier: GPL-2.0-only
/* Allocation probe: one plain and one __GFP_NOFAIL allocation per start, freed by its end; WARN_ON in read_bypass. */
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/wait.h>
#include <pybcache/kpatch.h>

struct probe { spinlock_t lock; void *plain[64]; void *nofail[64]; int n; };
static int init(struct cached_dev *dc)
{
        struct probe *p = kzalloc(sizeof(*p), GFP_KERNEL);
        if (!p)
                return -ENOMEM;
        spin_lock_init(&p->lock);
        dc->bypass = p;
        return 0;
}
static void fini(struct cached_dev *dc) { kfree(dc->bypass); }
static void start(struct cached_dev *dc, struct bio *bio)
{
        struct probe *p = dc->bypass;
        void *a = kmalloc(100, GFP_NOIO);
        void *b = kzalloc(200, GFP_NOIO | __GFP_NOFAIL);
        unsigned long flags;
        (void)bio;
        spin_lock_irqsave(&p->lock, flags);
        BUG_ON(p->n >= 64);
        p->plain[p->n] = a;
        p->nofail[p->n] = b;
        p->n++;
        spin_unlock_irqrestore(&p->lock, flags);
}
static void end(struct cached_dev *dc, struct bio *bio)
{
        struct probe *p = dc->bypass;
        unsigned long flags;
        void *a, *b;
        (void)bio;
        spin_lock_irqsave(&p->lock, flags);
        p->n--;
        a = p->plain[p->n];
        b = p->nofail[p->n];
        spin_unlock_irqrestore(&p->lock, flags);
        kfree(a);
        kfree(b);
}
static bool read(struct cached_dev *dc, struct bio *bio)
{
        (void)dc;
        return WARN_ON(bio_sectors(bio) > 8);
}
static const struct pybcache_patch_ops ops = { .name = "alloc-probe", .init = init, .exit = fini,
        .write_start = start, .write_end = end, .read_bypass = read };
PYBCACHE_PATCH(ops);
