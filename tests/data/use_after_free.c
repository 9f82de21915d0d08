// SPDX-License-Identifier: GPL-2.0-only
/* Bad on purpose: write_start reads a buffer after kfree. The plain build reads slab's free poison and goes
 * on (nothing fails); check-patch --asan reports the heap-use-after-free at this file's line. */
#include <linux/kernel.h>
#include <linux/slab.h>
#include <pybcache/kpatch.h>

static int sink;

static void start(struct cached_dev *dc, struct bio *bio)
{
        int *p = kmalloc(sizeof(*p), GFP_NOIO);

        (void)dc; (void)bio;
        if (!p)
                return;
        *p = 1;
        kfree(p);
        WRITE_ONCE(sink, READ_ONCE(*p));        /* use after free */
}
static void end(struct cached_dev *dc, struct bio *bio) { (void)dc; (void)bio; }
static bool rd(struct cached_dev *dc, struct bio *bio) { (void)dc; (void)bio; return false; }
static const struct pybcache_patch_ops ops = { .name = "use-after-free", .write_start = start, .write_end = end,
        .read_bypass = rd };
PYBCACHE_PATCH(ops);
