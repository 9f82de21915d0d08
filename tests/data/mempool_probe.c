// SPDX-License-Identifier: GPL-2.0-only
/* The shim's mempool, probed (tests/kpatch/test_kpatch_api.py). A pool of min_nr 1 elements of 64 bytes.
 * The write's offset picks what write_start does (GiB index):
 *   0: mempool_alloc(GFP_NOIO) into slot (sector / 8) % 16; write_end frees that slot's element;
 *   1: mempool_alloc(GFP_NOWAIT), logged as NULL or not, freed at once;
 *   2: mempool_alloc(GFP_NOIO) under a spinlock (a sleeping call in atomic context), freed at once.
 * Each start logs "alloc <slot> <reserve-element?> curr=<curr_nr>"; each end "free <slot> curr=<curr_nr>". */
#include <linux/mempool.h>
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <pybcache/kpatch.h>

static mempool_t *pool;
static void *reserve_element;        /* the element the pool held after init */
static void *slots[16];
static DEFINE_SPINLOCK(probe_lock);

static int probe_init(struct cached_dev *dc)
{
        (void)dc;
        pool = mempool_create_kmalloc_pool(1, 64);
        if (!pool)
                return -ENOMEM;
        reserve_element = pool->elements[0];
        return 0;
}

static void probe_exit(struct cached_dev *dc)
{
        (void)dc;
        mempool_destroy(pool);
}

/* The write's first sector, recorded at start: write_end gets the bio consumed (0 sectors left, bi_sector at
 * its end), as bcache's cached_dev_write_complete sees it. */
struct probe_write {
        sector_t s;
};

static void probe_start(struct cached_dev *dc, struct bio *bio)
{
        sector_t s = bio->bi_iter.bi_sector;
        struct probe_write *w = pyb_write_private(bio);
        unsigned int mode = (unsigned int)(s >> 21), slot = (unsigned int)((s >> 3) % 16);
        void *p;
        (void)dc;
        w->s = s;
        if (mode == 0) {
                p = mempool_alloc(pool, GFP_NOIO);
                WRITE_ONCE(slots[slot], p);
                pr_info("alloc %u %d curr=%d", slot, p == reserve_element, READ_ONCE(pool->curr_nr));
        } else if (mode == 1) {
                p = mempool_alloc(pool, GFP_NOWAIT);
                pr_info("nowait %s curr=%d", p ? "element" : "NULL", READ_ONCE(pool->curr_nr));
                mempool_free(p, pool);
        } else {
                spin_lock(&probe_lock);
                p = mempool_alloc(pool, GFP_NOIO);
                spin_unlock(&probe_lock);
                mempool_free(p, pool);
        }
}

static void probe_end(struct cached_dev *dc, struct bio *bio)
{
        sector_t s = ((struct probe_write *)pyb_write_private(bio))->s;
        unsigned int mode = (unsigned int)(s >> 21), slot = (unsigned int)((s >> 3) % 16);
        (void)dc;
        if (mode != 0)
                return;
        mempool_free(READ_ONCE(slots[slot]), pool);
        WRITE_ONCE(slots[slot], NULL);
        pr_info("free %u curr=%d", slot, READ_ONCE(pool->curr_nr));
}

static bool probe_read(struct cached_dev *dc, struct bio *bio) { (void)dc; (void)bio; return false; }

static const struct pybcache_patch_ops ops = {
        .name = "mempool-probe", .init = probe_init, .exit = probe_exit, .write_start = probe_start,
        .write_end = probe_end, .read_bypass = probe_read, .write_private_size = sizeof(struct probe_write),
};
PYBCACHE_PATCH(ops);
