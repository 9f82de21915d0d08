// SPDX-License-Identifier: GPL-2.0-only
/*
 * global_hijack.c - the lab's `global` variant with `--alloc-failure hijack` and `--overflow wait` as a
 * patch for the shim. It mirrors csrc/pyb_tracker.c (PYB_SYNC_GLOBAL: start_page_locked, end_page_locked
 * and active_page_locked with lock_of() returning the tracker's one lock; free policy eager, unhijack at
 * the end that drains the page).
 *
 * One irq-safe spinlock for the whole tracker guards every slot and every counter. A slot is empty, holds
 * a lazily allocated 4 KiB page of u16 counters (one per 32 MiB chunk), or is hijacked: two counters in
 * the slot itself, one per half of the page's chunks. A start that finds its slot empty drops the lock,
 * allocates with GFP_NOIO, takes the lock again and looks again (md-bitmap's checkpage): somebody else's
 * page or hijack wins and ours is freed; a failed allocation hijacks the slot. A counter at U16_MAX makes
 * the start wait (outside the lock) until an end lowers it. An end decrements, refusing at zero; the end
 * that brings the slot's last non-zero counter to zero frees the page or un-hijacks the slot.
 */
#include <linux/kernel.h>
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/wait.h>
#include <linux/bio.h>
#include <pybcache/kpatch.h>

#define LAB_CHUNK_SHIFT 16                              /* sectors: 32 MiB chunks */
#define LAB_PER_PAGE (PAGE_SIZE / sizeof(u16))          /* 2048 counters */
#define LAB_PAGE_SHIFT 11
#define LAB_HALF_OF(c) ((unsigned int)(((c) & (LAB_PER_PAGE - 1)) >= LAB_PER_PAGE / 2))

struct lab_write {
        sector_t first, last;   /* the chunks the start counted */
        bool counted;
};

struct lab_slot {
        u16 *page;              /* NULL, or the page's counters */
        bool hijacked;          /* counting in halves[] */
        u16 halves[2];
        unsigned int nonzero;   /* counters (or halves) above zero: the storage is kept while > 0 */
};

struct lab_tracker {
        spinlock_t lock;        /* the one lock: every slot, every counter */
        wait_queue_head_t room; /* starts waiting for a counter below U16_MAX */
        unsigned long nr_slots;
        struct lab_slot slots[];
};

/* The counter of chunk c in slot s (the half counter when hijacked). Caller holds the lock. */
static u16 *lab_counter(struct lab_slot *s, sector_t c)
{
        if (s->hijacked)
                return &s->halves[LAB_HALF_OF(c)];
        return &s->page[c & (LAB_PER_PAGE - 1)];
}

/* Is a counter of chunks [a, b] of slot s at U16_MAX? Caller holds the lock. */
static bool lab_full(struct lab_slot *s, sector_t a, sector_t b)
{
        sector_t c;

        if (!s->page && !s->hijacked)
                return false;
        for (c = a; c <= b; c++)
                if (*lab_counter(s, c) == U16_MAX)
                        return true;
        return false;
}

static bool lab_has_room(struct lab_tracker *t, struct lab_slot *s, sector_t a, sector_t b)
{
        unsigned long flags;
        bool room;

        spin_lock_irqsave(&t->lock, flags);
        room = !lab_full(s, a, b);
        spin_unlock_irqrestore(&t->lock, flags);
        return room;
}

static int lab_init(struct cached_dev *dc)
{
        unsigned long chunks = DIV_ROUND_UP(bdev_nr_sectors(dc->bdev), 1UL << LAB_CHUNK_SHIFT);
        unsigned long nr_slots = DIV_ROUND_UP(chunks, LAB_PER_PAGE);
        struct lab_tracker *t = kvzalloc(struct_size(t, slots, nr_slots), GFP_KERNEL);

        if (!t)
                return -ENOMEM;
        spin_lock_init(&t->lock);
        init_waitqueue_head(&t->room);
        t->nr_slots = nr_slots;
        dc->bypass = t;
        return 0;
}

static void lab_exit(struct cached_dev *dc)
{
        struct lab_tracker *t = dc->bypass;
        unsigned long i;

        for (i = 0; i < t->nr_slots; i++)
                kfree(t->slots[i].page);
        kvfree(t);
}

/* Count one start on chunks [a, b] of slot s; returns with the lock dropped. */
static void lab_start_slot(struct lab_tracker *t, struct lab_slot *s, sector_t a, sector_t b)
{
        sector_t c;

        spin_lock_irq(&t->lock);
        for (;;) {
                if (!s->page && !s->hijacked) {
                        u16 *fresh;

                        spin_unlock_irq(&t->lock);
                        fresh = kzalloc(PAGE_SIZE, GFP_NOIO | __GFP_NOWARN);
                        spin_lock_irq(&t->lock);
                        if (s->page || s->hijacked) {
                                spin_unlock_irq(&t->lock);
                                kfree(fresh);           /* lost the race: look again */
                                spin_lock_irq(&t->lock);
                                continue;
                        }
                        if (fresh)
                                s->page = fresh;
                        else
                                s->hijacked = true;     /* no page: count in the slot's halves */
                        s->nonzero = 0;
                }
                if (!lab_full(s, a, b))
                        break;
                spin_unlock_irq(&t->lock);
                wait_event(t->room, lab_has_room(t, s, a, b));
                spin_lock_irq(&t->lock);
        }
        if (s->hijacked) {
                for (c = LAB_HALF_OF(a); c <= LAB_HALF_OF(b); c++)
                        if (s->halves[c]++ == 0)
                                s->nonzero++;
        } else {
                for (c = a; c <= b; c++)
                        if (s->page[c & (LAB_PER_PAGE - 1)]++ == 0)
                                s->nonzero++;
        }
        spin_unlock_irq(&t->lock);
}

static void lab_write_start(struct cached_dev *dc, struct bio *bio)
{
        struct lab_write *w = pyb_write_private(bio);
        struct lab_tracker *t = dc->bypass;
        sector_t chunk, last;

        if (!bio_sectors(bio))
                return;
        w->first = bio->bi_iter.bi_sector >> LAB_CHUNK_SHIFT;
        w->last = (bio_end_sector(bio) - 1) >> LAB_CHUNK_SHIFT;
        w->counted = true;
        for (chunk = w->first; chunk <= w->last; chunk = last + 1) {
                last = min_t(sector_t, w->last, chunk | (LAB_PER_PAGE - 1));
                lab_start_slot(t, &t->slots[chunk >> LAB_PAGE_SHIFT], chunk, last);
        }
}

static void lab_write_end(struct cached_dev *dc, struct bio *bio)
{
        struct lab_write *w = pyb_write_private(bio);
        struct lab_tracker *t = dc->bypass;
        sector_t chunk, last, c;
        unsigned long flags;
        bool wake = false;

        if (!w->counted)
                return;
        for (chunk = w->first; chunk <= w->last; chunk = last + 1) {
                struct lab_slot *s = &t->slots[chunk >> LAB_PAGE_SHIFT];
                u16 *gone = NULL;

                last = min_t(sector_t, w->last, chunk | (LAB_PER_PAGE - 1));
                spin_lock_irqsave(&t->lock, flags);
                if (!WARN_ON_ONCE(!s->page && !s->hijacked)) {
                        for (c = chunk; c <= last; c++) {
                                u16 *ctr = lab_counter(s, c);

                                if (s->hijacked && c != chunk && LAB_HALF_OF(c) == LAB_HALF_OF(c - 1))
                                        continue;       /* one decrement per half */
                                if (WARN_ON_ONCE(*ctr == 0))
                                        continue;       /* refused below zero */
                                wake |= *ctr == U16_MAX;
                                if (--(*ctr) == 0)
                                        s->nonzero--;
                        }
                        if (!s->nonzero) {
                                gone = s->page;
                                s->page = NULL;
                                s->hijacked = false;
                        }
                }
                spin_unlock_irqrestore(&t->lock, flags);
                kfree(gone);
        }
        if (wake)
                wake_up(&t->room);
}

static bool lab_read_bypass(struct cached_dev *dc, struct bio *bio)
{
        struct lab_tracker *t = dc->bypass;
        sector_t first, last, c;
        unsigned long flags;
        bool active = false;

        if (!bio_sectors(bio))
                return false;
        first = bio->bi_iter.bi_sector >> LAB_CHUNK_SHIFT;
        last = (bio_end_sector(bio) - 1) >> LAB_CHUNK_SHIFT;
        spin_lock_irqsave(&t->lock, flags);
        for (c = first; c <= last && !active; c++) {
                struct lab_slot *s = &t->slots[c >> LAB_PAGE_SHIFT];

                if (s->page || s->hijacked)
                        active = *lab_counter(s, c) > 0;
        }
        spin_unlock_irqrestore(&t->lock, flags);
        return active;
}

static const struct pybcache_patch_ops lab_ops = {
        .name = "lab-global-hijack",
        .init = lab_init,
        .exit = lab_exit,
        .write_start = lab_write_start,
        .write_end = lab_write_end,
        .write_private_size = sizeof(struct lab_write),
        /* a hijacked slot counts per half page: 1024 chunks, 32 GiB */
        .bypass_granularity = 32ULL << 30,
        .read_bypass = lab_read_bypass,
};
PYBCACHE_PATCH(lab_ops);
