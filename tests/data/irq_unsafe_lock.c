// SPDX-License-Identifier: GPL-2.0-only
/* Bad on purpose: a lock taken in write_end (hard-irq) and in write_start with interrupts on. */
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/wait.h>
#include <pybcache/kpatch.h>

static DEFINE_SPINLOCK(count_lock);
static unsigned long in_flight;
static void start(struct cached_dev *dc, struct bio *bio)
{
        (void)dc; (void)bio;
        spin_lock(&count_lock);
        in_flight++;
        spin_unlock(&count_lock);
}
static void end(struct cached_dev *dc, struct bio *bio)
{
        (void)dc; (void)bio;
        spin_lock(&count_lock);
        in_flight--;
        spin_unlock(&count_lock);
}

static bool none_read(struct cached_dev *dc, struct bio *bio) { (void)dc; (void)bio; return false; }
static const struct pybcache_patch_ops ops = { .name = "irq-unsafe", .write_start = start, .write_end = end, .read_bypass = none_read };
PYBCACHE_PATCH(ops);
