// SPDX-License-Identifier: GPL-2.0-only
/*
 * pybcache's v3 bypass-write tracker for bcache, the lab's recommended policy (examples/patches/v3_proposal.c)
 * as a driver file. `pybcache kernel diff v3` shows it added to drivers/md/bcache/ with its hooks.
 *
 * A bypass write is counted on every 32 MiB chunk it touches from the moment bcache has decided to bypass
 * it until its backing write has completed; a read miss on a counted chunk is served from the backing
 * device and not inserted into the cache, so it cannot cache the data the write is replacing.
 *
 * Counters are u16, one 4 KiB page per 2048 chunks (64 GiB), each page allocated on the first write to
 * its chunks (GFP_NOIO, outside the page's lock, installed after a re-check) and freed when its last
 * counter drops to zero. One spinlock per page, taken with interrupts off: the end runs from bio
 * completion.
 *
 * Allocation failure (md-bitmap's hijack): the page's slot itself counts, in two u16 halves of 1024 chunks
 * each, until every count on it has ended; an end always finds the storage its start counted in.
 * Overflow: a start that finds a counter of its range at U16_MAX sleeps until an end lowers it.
 */
#include <linux/bug.h>
#include <linux/minmax.h>
#include <linux/mm.h>
#include <linux/overflow.h>
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/wait.h>

#include "bcache-bypass-tracker.h"

#define BYPASS_CHUNK_SHIFT	16			/* in 512-byte sectors: 32 MiB */
#define BYPASS_PER_PAGE		(PAGE_SIZE / sizeof(u16))
#define BYPASS_PAGE_SHIFT	(PAGE_SHIFT - 1)	/* log2(BYPASS_PER_PAGE) */

struct bypass_page {
	spinlock_t	lock;
	u16		*counters;	/* one per chunk, or NULL */
	bool		hijacked;	/* no page: counting in half[] */
	u16		half[2];
	unsigned int	active;		/* non-zero counters; the storage is kept while > 0 */
};

struct bch_bypass_tracker {
	sector_t		nr_chunks;
	unsigned long		nr_pages;
	wait_queue_head_t	overflow_wait;
	struct bypass_page	pages[];
};

static struct bypass_page *page_of(struct bch_bypass_tracker *t, sector_t chunk)
{
	return &t->pages[chunk >> BYPASS_PAGE_SHIFT];
}

/* The last chunk of [chunk, last] on chunk's page */
static sector_t segment_last(sector_t chunk, sector_t last)
{
	return min_t(sector_t, last, chunk | (BYPASS_PER_PAGE - 1));
}

/* The counter of @chunk, or NULL when its page has no storage. Caller holds pg->lock. */
static u16 *counter_of(struct bypass_page *pg, sector_t chunk)
{
	unsigned int slot = chunk & (BYPASS_PER_PAGE - 1);

	if (pg->hijacked)
		return &pg->half[slot >= BYPASS_PER_PAGE / 2];
	return pg->counters ? &pg->counters[slot] : NULL;
}

/* The chunks of a range, clamped to the device; false for an empty range */
static bool bypass_range(struct bch_bypass_tracker *t, sector_t sector, unsigned int sectors,
			 sector_t *first, sector_t *last)
{
	if (!sectors)
		return false;
	*first = sector >> BYPASS_CHUNK_SHIFT;
	*last = (sector + sectors - 1) >> BYPASS_CHUNK_SHIFT;
	if (WARN_ON_ONCE(*first >= t->nr_chunks))
		return false;
	*last = min_t(sector_t, *last, t->nr_chunks - 1);
	return true;
}

/* Would a count on [first, last] of one page overflow? Caller holds pg->lock. */
static bool segment_full(struct bypass_page *pg, sector_t first, sector_t last)
{
	u16 *ctr, *prev = NULL;
	sector_t c;

	for (c = first; c <= last; c++) {
		ctr = counter_of(pg, c);
		if (!ctr)
			return false;
		if (ctr != prev && *ctr == U16_MAX)
			return true;
		prev = ctr;
	}
	return false;
}

static bool segment_has_room(struct bypass_page *pg, sector_t first, sector_t last)
{
	bool room;

	spin_lock_irq(&pg->lock);
	room = !segment_full(pg, first, last);
	spin_unlock_irq(&pg->lock);
	return room;
}

/* +1 on [first, last] of one page, which has storage and room. Caller holds pg->lock. */
static void segment_inc(struct bypass_page *pg, sector_t first, sector_t last)
{
	u16 *ctr, *prev = NULL;
	sector_t c;

	for (c = first; c <= last; c++) {
		ctr = counter_of(pg, c);
		if (ctr == prev)
			continue;		/* a hijacked half, counted once */
		prev = ctr;
		if ((*ctr)++ == 0)
			pg->active++;
	}
}

/* -1 on [first, last] of one page; true when a counter left U16_MAX. Caller holds pg->lock. */
static bool segment_dec(struct bypass_page *pg, sector_t first, sector_t last)
{
	u16 *ctr, *prev = NULL;
	bool was_full = false;
	sector_t c;

	for (c = first; c <= last; c++) {
		ctr = counter_of(pg, c);
		if (WARN_ON_ONCE(!ctr))		/* an end without its start */
			break;
		if (ctr == prev)
			continue;
		prev = ctr;
		if (WARN_ON_ONCE(*ctr == 0))	/* an end without its start */
			continue;
		was_full |= *ctr == U16_MAX;
		if (--(*ctr) == 0)
			pg->active--;
	}
	if (!pg->active) {
		kfree(pg->counters);		/* the next start allocates again */
		pg->counters = NULL;
		pg->hijacked = false;
	}
	return was_full;
}

/*
 * Not inlined, and without arguments so that no specialised copy replaces it: failslab's stack filter can aim
 * at it (pybcache kernel race --fail-alloc bch_bypass_page_alloc). Process context, no lock held.
 */
static noinline u16 *bch_bypass_page_alloc(void)
{
	return kzalloc(PAGE_SIZE, GFP_NOIO | __GFP_NOWARN);
}

struct bch_bypass_tracker *bch_bypass_tracker_alloc(sector_t sectors)
{
	sector_t nr_chunks = max_t(sector_t, 1, (sectors + (1 << BYPASS_CHUNK_SHIFT) - 1) >> BYPASS_CHUNK_SHIFT);
	unsigned long nr_pages = DIV_ROUND_UP(nr_chunks, BYPASS_PER_PAGE);
	struct bch_bypass_tracker *t;
	unsigned long i;

	t = kvzalloc(struct_size(t, pages, nr_pages), GFP_KERNEL);
	if (!t)
		return NULL;
	t->nr_chunks = nr_chunks;
	t->nr_pages = nr_pages;
	init_waitqueue_head(&t->overflow_wait);
	for (i = 0; i < nr_pages; i++)
		spin_lock_init(&t->pages[i].lock);
	return t;
}

void bch_bypass_tracker_free(struct bch_bypass_tracker *t)
{
	unsigned long i;

	if (!t)
		return;
	for (i = 0; i < t->nr_pages; i++) {
		WARN_ONCE(t->pages[i].active, "bcache: bypass tracker freed with %u counters still held\n",
			  t->pages[i].active);
		kfree(t->pages[i].counters);
	}
	kvfree(t);
}

void bch_bypass_write_start(struct bch_bypass_tracker *t, sector_t sector, unsigned int sectors)
{
	sector_t first, last, chunk, seg;

	might_sleep();
	if (!bypass_range(t, sector, sectors, &first, &last))
		return;
	for (chunk = first; chunk <= last;) {
		struct bypass_page *pg = page_of(t, chunk);

		seg = segment_last(chunk, last);
		spin_lock_irq(&pg->lock);
		if (!pg->counters && !pg->hijacked) {
			u16 *page;

			spin_unlock_irq(&pg->lock);
			page = bch_bypass_page_alloc();
			spin_lock_irq(&pg->lock);
			if (pg->counters || pg->hijacked)
				kfree(page);		/* another start installed storage first */
			else if (page)
				pg->counters = page;
			else
				pg->hijacked = true;	/* no memory: count in the slot itself */
		}
		if (segment_full(pg, chunk, seg)) {
			spin_unlock_irq(&pg->lock);
			wait_event(t->overflow_wait, segment_has_room(pg, chunk, seg));
			continue;			/* the page may have changed: look again */
		}
		segment_inc(pg, chunk, seg);
		spin_unlock_irq(&pg->lock);
		chunk = seg + 1;
	}
}

static void count_down(struct bch_bypass_tracker *t, sector_t first, sector_t last)
{
	sector_t chunk, seg;
	bool wake = false;

	for (chunk = first; chunk <= last; chunk = seg + 1) {
		struct bypass_page *pg = page_of(t, chunk);
		unsigned long flags;

		seg = segment_last(chunk, last);
		spin_lock_irqsave(&pg->lock, flags);
		wake |= segment_dec(pg, chunk, seg);
		spin_unlock_irqrestore(&pg->lock, flags);
	}
	if (wake)
		wake_up(&t->overflow_wait);
}

void bch_bypass_write_end(struct bch_bypass_tracker *t, sector_t sector, unsigned int sectors)
{
	sector_t first, last;

	if (bypass_range(t, sector, sectors, &first, &last))
		count_down(t, first, last);
}

bool bch_bypass_read_active(struct bch_bypass_tracker *t, sector_t sector, unsigned int sectors)
{
	sector_t first, last, chunk, seg, c;
	bool active = false;

	if (!bypass_range(t, sector, sectors, &first, &last))
		return false;
	for (chunk = first; chunk <= last && !active; chunk = seg + 1) {
		struct bypass_page *pg = page_of(t, chunk);
		unsigned long flags;
		u16 *ctr;

		seg = segment_last(chunk, last);
		spin_lock_irqsave(&pg->lock, flags);
		for (c = chunk; c <= seg && !active; c++) {
			ctr = counter_of(pg, c);
			active = ctr && *ctr;
		}
		spin_unlock_irqrestore(&pg->lock, flags);
	}
	return active;
}
