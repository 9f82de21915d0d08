// SPDX-License-Identifier: GPL-2.0-only
/* Hangs on purpose: write_start waits for a wake_up that never comes. */
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/wait.h>
#include <pybcache/kpatch.h>

static DECLARE_WAIT_QUEUE_HEAD(never);
static int never_true;
static void start(struct cached_dev *dc, struct bio *bio)
{
        (void)dc; (void)bio;
        wait_event(never, READ_ONCE(never_true));
}
static void end(struct cached_dev *dc, struct bio *bio) { (void)dc; (void)bio; }

static bool none_read(struct cached_dev *dc, struct bio *bio) { (void)dc; (void)bio; return false; }
static const struct pybcache_patch_ops ops = { .name = "hangs", .write_start = start, .write_end = end, .read_bypass = none_read };
PYBCACHE_PATCH(ops);
