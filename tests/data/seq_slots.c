// SPDX-License-Identifier: GPL-2.0-only
/*
 * seq_slots.c - the writes in flight as a small table of sector ranges under a seqlock: a write adds its
 * range at the end; its end clears its slot and moves the last slot into the hole. read_bypass scans
 * the table without taking the lock and retries if a writer ran meanwhile (read_seqretry); write_end
 * runs in hard-irq context, so the writers disable interrupts. Correct;
 * a reader that does not retry can see the table half moved and miss a write still in flight (two
 * writers and a reader: the patch-level explorer's tests use that mutant). Slots beyond the table's
 * size are not modelled (a WARN).
 */
#include <linux/kernel.h>
#include <linux/slab.h>
#include <linux/seqlock.h>
#include <linux/bio.h>
#include <pybcache/kpatch.h>

#define SLOTS 4

struct slot {
        sector_t first;
        unsigned int sectors;   /* 0: free */
};

struct seqs_write {
        sector_t first;
        unsigned int sectors;   /* 0: the start recorded nothing */
};

struct seqs {
        seqlock_t lock;
        unsigned int n;         /* slots in use: [0, n) */
        struct slot slot[SLOTS];
};

static int seqs_init(struct cached_dev *dc)
{
        struct seqs *t = kzalloc(sizeof(*t), GFP_KERNEL);

        if (!t)
                return -ENOMEM;
        seqlock_init(&t->lock);
        dc->bypass = t;
        return 0;
}

static void seqs_exit(struct cached_dev *dc)
{
        kfree(dc->bypass);
}

static void seqs_write_start(struct cached_dev *dc, struct bio *bio)
{
        struct seqs *t = dc->bypass;
        struct seqs_write *w = pyb_write_private(bio);

        if (!bio_sectors(bio))
                return;
        write_seqlock_irq(&t->lock);
        if (!WARN_ON(t->n >= SLOTS)) {
                t->slot[t->n].first = bio->bi_iter.bi_sector;
                t->slot[t->n].sectors = bio_sectors(bio);
                t->n++;
                w->first = bio->bi_iter.bi_sector;
                w->sectors = bio_sectors(bio);
        }
        write_sequnlock_irq(&t->lock);
}

static void seqs_write_end(struct cached_dev *dc, struct bio *bio)
{
        struct seqs *t = dc->bypass;
        struct seqs_write *w = pyb_write_private(bio);
        unsigned long flags;
        unsigned int i;

        if (!w->sectors)
                return;         /* the bio has 0 sectors left here: its range is the start's */
        write_seqlock_irqsave(&t->lock, flags);
        for (i = 0; i < t->n; i++) {
                if (t->slot[i].first == w->first && t->slot[i].sectors == w->sectors) {
                        t->slot[i].sectors = 0;
                        t->slot[i] = t->slot[t->n - 1];
                        t->slot[t->n - 1].sectors = 0;
                        t->n--;
                        break;
                }
        }
        write_sequnlock_irqrestore(&t->lock, flags);
}

static bool seqs_read_bypass(struct cached_dev *dc, struct bio *bio)
{
        struct seqs *t = dc->bypass;
        sector_t first = bio->bi_iter.bi_sector, end = first + bio_sectors(bio);
        unsigned int seq, i, n;
        bool active;

        do {
                seq = read_seqbegin(&t->lock);
                active = false;
                n = t->n;
                for (i = 0; i < n && i < SLOTS; i++) {
                        struct slot *s = &t->slot[i];

                        if (s->sectors && s->first < end && first < s->first + s->sectors) {
                                active = true;
                                break;
                        }
                }
        } while (read_seqretry(&t->lock, seq));
        return active;
}

static const struct pybcache_patch_ops seqs_ops = {
        .name = "seq-slots",
        .write_private_size = sizeof(struct seqs_write),
        .init = seqs_init,
        .exit = seqs_exit,
        .write_start = seqs_write_start,
        .write_end = seqs_write_end,
        .read_bypass = seqs_read_bypass,
};
PYBCACHE_PATCH(seqs_ops);
