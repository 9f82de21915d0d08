// SPDX-License-Identifier: GPL-2.0-only
/* Thread probe: every write_start and write_end logs an address that is unique to the calling thread (a
 * thread-local variable's), so a test can tell whether ends ran on the submitter's thread. Tracks nothing
 * (read_bypass always says no). */
#include <linux/printk.h>
#include <pybcache/kpatch.h>

static _Thread_local int here;

static void start(struct cached_dev *dc, struct bio *bio)
{
        (void)dc; (void)bio;
        pr_info("start %lu\n", (unsigned long)&here);
}
static void end(struct cached_dev *dc, struct bio *bio)
{
        (void)dc; (void)bio;
        pr_info("end %lu\n", (unsigned long)&here);
}
static bool read(struct cached_dev *dc, struct bio *bio) { (void)dc; (void)bio; return false; }
static const struct pybcache_patch_ops ops = { .name = "thread-probe", .write_start = start, .write_end = end,
        .read_bypass = read };
PYBCACHE_PATCH(ops);
