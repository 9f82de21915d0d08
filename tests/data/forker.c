// SPDX-License-Identifier: GPL-2.0-only
/* Not kernel behaviour, a test of the battery's process handling: init forks a process that outlives
 * the check's child (it sleeps a minute, holding whatever the child had open). */
#include <unistd.h>
#include <linux/slab.h>
#include <pybcache/kpatch.h>

static int forker_init(struct cached_dev *dc)
{
        static int forked;

        (void)dc;
        if (!forked++ && fork() == 0) {
                sleep(60);
                _exit(0);
        }
        return 0;
}
static void start(struct cached_dev *dc, struct bio *bio) { (void)dc; (void)bio; }
static void end(struct cached_dev *dc, struct bio *bio) { (void)dc; (void)bio; }
static bool none_read(struct cached_dev *dc, struct bio *bio) { (void)dc; (void)bio; return false; }
static const struct pybcache_patch_ops ops = { .name = "forker", .init = forker_init, .write_start = start,
        .write_end = end, .read_bypass = none_read };
PYBCACHE_PATCH(ops);
