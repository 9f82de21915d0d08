/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * pybcache's v3 bypass-write tracker for bcache (csrc/kernel/bcache-bypass-tracker.c): in-flight bypass
 * writes counted per 32 MiB chunk of the backing device, so that a read miss overlapping one is served
 * from the backing device without being inserted into the cache.
 */
#ifndef _BCACHE_BYPASS_TRACKER_H
#define _BCACHE_BYPASS_TRACKER_H

#include <linux/types.h>

struct bch_bypass_tracker;

/* For a backing device of @sectors sectors; NULL without memory. Process context. */
struct bch_bypass_tracker *bch_bypass_tracker_alloc(sector_t sectors);
/* Warns when a write is still counted. NULL is accepted. */
void bch_bypass_tracker_free(struct bch_bypass_tracker *t);

/* Count a bypass write on [sector, sector + sectors). Process context: may sleep. */
void bch_bypass_write_start(struct bch_bypass_tracker *t, sector_t sector, unsigned int sectors);
/* Uncount it, with the range given to bch_bypass_write_start(). Any context. */
void bch_bypass_write_end(struct bch_bypass_tracker *t, sector_t sector, unsigned int sectors);
/* Is a bypass write in flight on a chunk of [sector, sector + sectors)? Any context. */
bool bch_bypass_read_active(struct bch_bypass_tracker *t, sector_t sector, unsigned int sectors);

#endif /* _BCACHE_BYPASS_TRACKER_H */
