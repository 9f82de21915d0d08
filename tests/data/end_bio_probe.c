// SPDX-License-Identifier: GPL-2.0-only
/* Probe of the bio write_end is handed and of the per-write private area: each start numbers its write in
 * the area; each end logs the bio's sector and size and the number its start stored. */
#include <linux/kernel.h>
#include <linux/bio.h>
#include <linux/printk.h>
#include <pybcache/kpatch.h>

struct probe_write { unsigned long long seq, sector; };
static unsigned long long next_seq;

static void start(struct cached_dev *dc, struct bio *bio)
{
        struct probe_write *w = pyb_write_private(bio);

        (void)dc;
        w->seq = __atomic_add_fetch(&next_seq, 1, __ATOMIC_RELAXED);
        w->sector = bio->bi_iter.bi_sector;
}

static void end(struct cached_dev *dc, struct bio *bio)
{
        struct probe_write *w = pyb_write_private(bio);

        (void)dc;
        pr_info("end sector=%llu size=%u seq=%llu start_sector=%llu\n",
                (unsigned long long)bio->bi_iter.bi_sector, bio->bi_iter.bi_size, w->seq, w->sector);
}

static bool rd(struct cached_dev *dc, struct bio *bio)
{
        (void)dc;
        return pyb_write_private(bio) != NULL;          /* reads have no private area */
}

static const struct pybcache_patch_ops ops = { .name = "end-bio-probe", .write_start = start, .write_end = end,
        .read_bypass = rd, .write_private_size = sizeof(struct probe_write) };
PYBCACHE_PATCH(ops);
