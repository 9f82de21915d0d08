// SPDX-License-Identifier: GPL-2.0-only
/* A write_start that makes twenty short-lived allocations before it counts the write, and leaves the
 * write uncounted when one of the last four fails: only a fault at the 17th..20th allocation finds it. */
#include <linux/slab.h>
#include <linux/atomic.h>
#include <pybcache/kpatch.h>

static atomic_t writes_in_flight = ATOMIC_INIT(0);

static int deep_init(struct cached_dev *dc) { (void)dc; atomic_set(&writes_in_flight, 0); return 0; }

static void deep_start(struct cached_dev *dc, struct bio *bio)
{
        void *scratch;
        int n;

        (void)dc; (void)bio;
        for (n = 0; n < 20; n++) {
                scratch = kmalloc(32, GFP_NOIO);
                if (!scratch && n >= 16)
                        return;                         /* the bug: the write is not counted */
                kfree(scratch);
        }
        atomic_inc(&writes_in_flight);
}

static void deep_end(struct cached_dev *dc, struct bio *bio)
{
        (void)dc; (void)bio;
        atomic_add_unless(&writes_in_flight, -1, 0);
}

static bool deep_read(struct cached_dev *dc, struct bio *bio)
{
        (void)dc; (void)bio;
        return atomic_read(&writes_in_flight) > 0;
}

static const struct pybcache_patch_ops ops = { .name = "deep-alloc", .init = deep_init,
        .write_start = deep_start, .write_end = deep_end, .read_bypass = deep_read };
PYBCACHE_PATCH(ops);
