/* pyb_cachedev.c - see pyb_cachedev.h for the model, the step order and the ordering argument. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "pyb_cachedev.h"
#include "pyb_ops_lab.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct pyb_cachedev {
    /* Immutable after pyb_cd_create. */
    uint64_t device_size, n_blocks, n_regions;
    uint32_t block_size, region_blocks;
    unsigned block_shift, region_shift;
    int check, delay_mode, bounce_copy, no_restart, granularity, split, invalidate;
    uint64_t write_delay_ns, cache_alloc_fail;

    /* Changed only at quiescence (pyb_cd_set_tracker / pyb_cd_set_ops / pyb_cd_set_track), read by
     * every operation. */
    int track;            /* pyb_cd_track: which writes START counts */
    pyb_ops_tracker ops;  /* the tracker in use (ops NULL = none) */
    pyb_tracker *tracker; /* ops.self when ops is the lab's (the devirtualised path), else NULL */

    /* The first negative result of a tracker call: set once by a relaxed CAS from 0, read relaxed
     * (a stop flag only; what the tracker reported is read after the drivers' threads are joined). */
    _Atomic int error;

    /* Tracker geometry in bytes (set with the tracker): a chunk, and a tracking page's span. */
    uint64_t chunk_bytes, page_bytes;

    pyb_spinlock *locks;         /* one per region (node) */
    uint64_t *seq;               /* node sequences; seq[n] is guarded by locks[n], bumped by every
                                    update of the node under its lock */
    uint64_t *cache;             /* cache index entries; cache[b] is guarded by locks[b >> region_shift] */
    uint64_t *newest;            /* newest[n]: the newest version any write's INVALIDATE step (an
                                    invalidation or a writethrough insert) has applied to node n;
                                    guarded by locks[n] (a writethrough insert older than it does not
                                    put its version in the cache: newest wins) */
    uint64_t *wt_newest;         /* wt_newest[n]: the newest version a writethrough insert put in node
                                    n (0 = none), guarded by locks[n] */
    _Atomic uint64_t *backing;   /* landed versions: atomic max (release) on LAND, acquire loads */
    _Atomic uint64_t *completed; /* oracle floor: atomic max (release) after END, acquire loads */
    unsigned char *bounce_src;   /* source of the bounce copy, bounce_size bytes (read-only after create) */
    uint64_t bounce_size;        /* min(64 MiB, device_size) when bounce_copy, else block_size */

    /* Version and token sources: relaxed RMWs (only uniqueness and per-block monotonicity of the
     * versions matter; the data itself is published through backing[]). */
    _Alignas(PYB_CACHELINE) _Atomic uint64_t next_version;
    _Alignas(PYB_CACHELINE) _Atomic uint64_t next_token_base;
    /* Cache allocations drawn by writethrough STARTs (only with cache_alloc_fail): relaxed RMW. */
    _Alignas(PYB_CACHELINE) _Atomic uint64_t alloc_draws;

    /* Folded statistics: relaxed counters, written by pyb_cd_ctx_done. */
    _Alignas(PYB_CACHELINE) _Atomic uint64_t st[sizeof(pyb_cd_stats) / sizeof(uint64_t)];
};

_Static_assert(sizeof(pyb_cd_stats) % sizeof(uint64_t) == 0, "pyb_cd_stats is an array of uint64_t");

static inline pyb_spinlock *lock_of(pyb_cachedev *d, uint64_t b) { return &d->locks[b >> d->region_shift]; }
/* First block after b's region. */
static inline uint64_t region_end(const pyb_cachedev *d, uint64_t b) { return (b | (d->region_blocks - 1)) + 1; }

static inline uint64_t entry_check(uint64_t token) { return (token << 2) | PYB_CD_TAG_CHECK; }
static inline uint64_t entry_valid(uint64_t version) { return (version << 2) | PYB_CD_TAG_VALID; }

/* *p = max(*p, v) with release order on the store that raises it. */
static inline void atomic_max_release(_Atomic uint64_t *p, uint64_t v)
{
    uint64_t cur = pyb_load(p, PYB_RELAXED);
    while (cur < v && !pyb_cas_weak(p, &cur, v, PYB_RELEASE, PYB_RELAXED)) {
    }
}

/* ------------------------------------------------------------------------------------------------ */
/* Creation                                                                                           */

int pyb_cd_create(const pyb_cd_config *cfg, pyb_cachedev **out)
{
    *out = NULL;
    if (cfg->block_size < 512 || (cfg->block_size & (cfg->block_size - 1)))
        return -EINVAL;
    if (!cfg->region_blocks || (cfg->region_blocks & (cfg->region_blocks - 1)))
        return -EINVAL;
    if (!cfg->device_size || cfg->device_size % cfg->block_size)
        return -EINVAL;
    if (cfg->check != PYB_CHECK_AFTER && cfg->check != PYB_CHECK_ENTRY && cfg->check != PYB_CHECK_MISS &&
        cfg->check != PYB_CHECK_READ_DONE)
        return -EINVAL;
    if (cfg->granularity != PYB_GRAN_CHUNK && cfg->granularity != PYB_GRAN_PAGE)
        return -EINVAL;
    if (cfg->split_tracker_calls < 0 || cfg->split_tracker_calls > 2)
        return -EINVAL;
    if (cfg->delay_mode != PYB_DELAY_SPIN && cfg->delay_mode != PYB_DELAY_YIELD)
        return -EINVAL;
    if (cfg->track != PYB_TRACK_BYPASS && cfg->track != PYB_TRACK_INVALIDATIONS && cfg->track != PYB_TRACK_ALL)
        return -EINVAL;
    if (cfg->invalidate != PYB_INV_AT_SUBMIT && cfg->invalidate != PYB_INV_AFTER_WRITE)
        return -EINVAL;
    if (cfg->tracker && pyb_tracker_device_size(cfg->tracker) < cfg->device_size)
        return -EINVAL;
    if (!cfg->tracker && cfg->ops.ops &&
        (cfg->granularity != PYB_GRAN_CHUNK || cfg->ops.ops->ctx_size > sizeof(pyb_ctx)))
        return -EINVAL;

    pyb_cachedev *d = aligned_alloc(PYB_CACHELINE, (sizeof(*d) + PYB_CACHELINE - 1) / PYB_CACHELINE * PYB_CACHELINE);
    if (!d)
        return -ENOMEM;
    memset(d, 0, sizeof(*d));
    d->device_size = cfg->device_size;
    d->block_size = cfg->block_size;
    d->block_shift = (unsigned)__builtin_ctz(cfg->block_size);
    d->n_blocks = cfg->device_size >> d->block_shift;
    d->region_blocks = cfg->region_blocks;
    d->region_shift = (unsigned)__builtin_ctz(cfg->region_blocks);
    d->n_regions = (d->n_blocks + cfg->region_blocks - 1) >> d->region_shift;
    d->check = cfg->check;
    d->delay_mode = cfg->delay_mode;
    d->write_delay_ns = cfg->write_delay_ns;
    d->bounce_copy = cfg->bounce_copy != 0;
    d->no_restart = cfg->no_restart != 0;
    d->granularity = cfg->granularity;
    d->split = cfg->split_tracker_calls;
    d->track = cfg->track;
    d->invalidate = cfg->invalidate;
    d->cache_alloc_fail = cfg->cache_alloc_fail;
    pyb_cd_set_ops(d, cfg->tracker ? pyb_ops_lab(cfg->tracker) : cfg->ops);

    /* malloc + memset rather than calloc: touch every page now, so that page faults are paid here
     * and not inside a measured run. */
    d->locks = malloc(d->n_regions * sizeof(*d->locks));
    d->seq = malloc(d->n_regions * sizeof(*d->seq));
    d->newest = malloc(d->n_regions * sizeof(*d->newest));
    d->wt_newest = malloc(d->n_regions * sizeof(*d->wt_newest));
    d->cache = malloc(d->n_blocks * sizeof(*d->cache));
    d->backing = malloc(d->n_blocks * sizeof(*d->backing));
    d->completed = malloc(d->n_blocks * sizeof(*d->completed));
    d->bounce_size = d->bounce_copy ? (d->device_size < (64ull << 20) ? d->device_size : (64ull << 20)) : d->block_size;
    d->bounce_src = malloc(d->bounce_size);
    if (!d->locks || !d->seq || !d->newest || !d->wt_newest || !d->cache || !d->backing || !d->completed || !d->bounce_src) {
        free((void *)d->locks);
        free(d->seq);
        free(d->newest);
    free(d->wt_newest);
        free(d->cache);
        free((void *)d->backing);
        free((void *)d->completed);
        free(d->bounce_src);
        free(d);
        return -ENOMEM;
    }
    for (uint64_t i = 0; i < d->n_regions; i++)
        pyb_spin_init(&d->locks[i]);
    memset(d->bounce_src, 0xA5, d->bounce_size);
    pyb_cd_reset(d);
    *out = d;
    return 0;
}

void pyb_cd_destroy(pyb_cachedev *d)
{
    if (!d)
        return;
    for (uint64_t i = 0; i < d->n_regions; i++)
        pyb_spin_destroy(&d->locks[i]);
    free((void *)d->locks);
    free(d->seq);
    free(d->newest);
    free(d->wt_newest);
    free(d->cache);
    free((void *)d->backing);
    free((void *)d->completed);
    free(d->bounce_src);
    free(d);
}

uint64_t pyb_cd_n_blocks(const pyb_cachedev *d) { return d->n_blocks; }
uint32_t pyb_cd_block_size(const pyb_cachedev *d) { return d->block_size; }
pyb_tracker *pyb_cd_tracker(const pyb_cachedev *d) { return d->tracker; }
pyb_ops_tracker pyb_cd_ops(const pyb_cachedev *d) { return d->ops; }
int pyb_cd_error(const pyb_cachedev *d) { return pyb_load(&((pyb_cachedev *)d)->error, PYB_RELAXED); }

/* A tracker call returned rc < 0: keep the first such result. */
static void set_error(pyb_cachedev *d, int rc)
{
    int zero = 0;
    pyb_cas(&d->error, &zero, rc, PYB_RELAXED, PYB_RELAXED);
}

/* The tracker's chunk size, from its geometry (pyb_tracker.h has no getter for it): the chunk is a
 * power of two >= 512 and n_chunks = ceil(device_size / chunk), which fixes it when n_chunks >= 2;
 * with one chunk any power of two >= device_size covers the same single chunk. */
static uint64_t tracker_chunk_bytes(const pyb_tracker *t)
{
    uint64_t size = pyb_tracker_device_size(t), n = pyb_tracker_n_chunks(t), c = 512;
    while (c < size && (size + c - 1) / c > n)
        c <<= 1;
    if (n == 1)
        while (c < size)
            c <<= 1;
    return c;
}

void pyb_cd_set_tracker(pyb_cachedev *d, pyb_tracker *t) { (void)pyb_cd_set_ops(d, pyb_ops_lab(t)); }

int pyb_cd_set_ops(pyb_cachedev *d, pyb_ops_tracker o)
{
    pyb_tracker *t = pyb_ops_lab_tracker(o);
    if (o.ops && !t && (d->granularity != PYB_GRAN_CHUNK || o.ops->ctx_size > sizeof(pyb_ctx)))
        return -EINVAL;
    d->ops = o.ops ? o : (pyb_ops_tracker){NULL, NULL};
    d->tracker = t;
    d->chunk_bytes = t ? tracker_chunk_bytes(t) : 0;
    d->page_bytes = t ? d->chunk_bytes * pyb_tracker_chunks_per_page(t) : 0;
    atomic_store_explicit(&d->error, 0, memory_order_relaxed);
    return 0;
}

int pyb_cd_set_track(pyb_cachedev *d, int track)
{
    if (track != PYB_TRACK_BYPASS && track != PYB_TRACK_INVALIDATIONS && track != PYB_TRACK_ALL)
        return -EINVAL;
    d->track = track;
    return 0;
}

void pyb_cd_reset_cache(pyb_cachedev *d)
{
    memset(d->cache, 0, d->n_blocks * sizeof(*d->cache));
    memset(d->seq, 0, d->n_regions * sizeof(*d->seq));
}

void pyb_cd_reset(pyb_cachedev *d)
{
    pyb_cd_reset_cache(d);
    /* All-zero bytes are a valid representation of a zero _Atomic uint64_t on our targets. */
    memset((void *)d->backing, 0, d->n_blocks * sizeof(*d->backing));
    memset((void *)d->completed, 0, d->n_blocks * sizeof(*d->completed));
    memset(d->newest, 0, d->n_regions * sizeof(*d->newest));
    memset(d->wt_newest, 0, d->n_regions * sizeof(*d->wt_newest));
    atomic_init(&d->next_version, 1);
    atomic_init(&d->alloc_draws, 0);
    atomic_init(&d->next_token_base, 1);
    for (size_t i = 0; i < sizeof(d->st) / sizeof(d->st[0]); i++)
        atomic_init(&d->st[i], 0);
}

/* ------------------------------------------------------------------------------------------------ */
/* Contexts                                                                                           */

void pyb_cd_ctx_init(pyb_cachedev *d, pyb_cd_ctx *c)
{
    pyb_ctx init = PYB_CTX_INIT;
    c->tctx = init;
    if (d->ops.ops && !d->tracker)
        d->ops.ops->ctx_init(d->ops.self, &c->tctx);
    c->token_base = pyb_fetch_add(&d->next_token_base, 1, PYB_RELAXED) << 32;
    c->token_seq = 0;
    memset(&c->stats, 0, sizeof(c->stats));
}

void pyb_cd_ctx_done(pyb_cachedev *d, pyb_cd_ctx *c)
{
    if (d->tracker)
        pyb_tracker_ctx_done(d->tracker, &c->tctx);
    else if (d->ops.ops)
        d->ops.ops->ctx_done(d->ops.self, &c->tctx);
    uint64_t *ls = (uint64_t *)&c->stats;
    for (size_t i = 0; i < sizeof(d->st) / sizeof(d->st[0]); i++) {
        if (ls[i]) {
            pyb_fetch_add(&d->st[i], ls[i], PYB_RELAXED);
            ls[i] = 0;
        }
    }
}

/* ------------------------------------------------------------------------------------------------ */
/* Delay                                                                                              */

void pyb_cd_delay(int mode, uint64_t ns)
{
    if (!ns)
        return;
    uint64_t deadline = pyb_now_ns() + ns;
    while (pyb_now_ns() < deadline) {
        if (mode == PYB_DELAY_YIELD)
            sched_yield();
        else
            for (int i = 0; i < 16; i++)
                pyb_cpu_relax();
    }
}

/* ------------------------------------------------------------------------------------------------ */
/* Bypass write                                                                                       */

void pyb_cd_write_init(pyb_cd_write *w, uint64_t blk, uint64_t nblk)
{
    w->blk = blk;
    w->nblk = nblk;
    w->kind = PYB_WK_BYPASS;
    w->alloc = PYB_CD_ALLOC_DRAW;
    w->fallback = 0;
    w->counted = 1;
    w->late = 0;
    w->version = 0;
    w->cursor = 0;
    w->step = PYB_W_START;
    w->untracked = 0;
    w->blocked = 0;
    w->resume = 0; /* set by the first pyb_cd_write_try_start */
    w->wait_page = 0;
    w->timed_out = 0;
    w->error = 0;
}

#ifdef PYB_CD_TEST_HOOKS
int pyb_cd_test_late_increment;
#define LATE_INCREMENT pyb_cd_test_late_increment
#else
#define LATE_INCREMENT 0
#endif

/* split_tracker_calls: the end of the tracker step that begins at byte `at` (one chunk, or the rest
 * of one tracking page), clipped to `end`. */
static uint64_t hold_end(const pyb_cachedev *d, uint64_t at, uint64_t end)
{
    uint64_t span = d->split == 1 ? d->chunk_bytes : d->page_bytes;
    uint64_t stop = (at / span + 1) * span;
    return stop < end ? stop : end;
}

/* The write's tracker start. May block under overflow "wait" (never holding a lock of ours), each
 * wait bounded by the tracker's wait_timeout_ns: past it the start is undone and the write given up
 * (pyb_cd_write_abandon; the caller sees w->timed_out). Returns 0, or -1 if the write was given up. */
static int write_track(pyb_cachedev *d, pyb_cd_ctx *c, pyb_cd_write *w, uint64_t off, uint64_t len)
{
    uint64_t resume;
    int ret = pyb_tracker_start(d->tracker, &c->tctx, off, len, 1, &resume);
    w->untracked |= (ret & PYB_START_UNTRACKED) != 0;
    if (ret & PYB_START_TIMED_OUT) {
        w->resume = resume;
        w->wait_page = (ret & PYB_START_WAIT_PAGE) != 0;
        pyb_cd_write_abandon(d, c, w);
        return -1;
    }
    return 0;
}

/* split_tracker_calls: one tracker step of START. Returns 1 when the whole range is counted. A
 * counter at its maximum under "wait" makes the step stop where the tracker stopped (w->blocked):
 * the explorer does not schedule it again until the counter has room. */
static int write_track_split(pyb_cachedev *d, pyb_cd_ctx *c, pyb_cd_write *w, uint64_t off, uint64_t len)
{
    uint64_t at = off + w->cursor, stop = hold_end(d, at, off + len), resume = at;
    int ret = pyb_tracker_start(d->tracker, &c->tctx, at, stop - at, 0, &resume);
    w->untracked |= (ret & PYB_START_UNTRACKED) != 0;
    w->blocked = (ret & PYB_START_WOULD_BLOCK) != 0;
    w->cursor = (w->blocked ? resume : stop) - off;
    return w->cursor == len;
}

/* A tracker other than the lab's: the whole start in one call, which may sleep. Returns 0, or -1 if
 * it failed (w->error set, the write finished without running). */
static int write_track_ops(pyb_cachedev *d, pyb_cd_ctx *c, pyb_cd_write *w, uint64_t off, uint64_t len)
{
    uint64_t resume = off;
    int ret = d->ops.ops->start(d->ops.self, &c->tctx, off, len, 1, &resume);
    if (ret < 0) {
        set_error(d, ret);
        w->error = ret;
        w->step = PYB_W_DONE;
        return -1;
    }
    w->untracked |= (ret & PYB_OPS_UNTRACKED) != 0;
    return 0;
}

/* The first thing a START does: take the version and, for a writethrough write, draw its cache
 * allocation; then decide whether the tracker counts the write (the device's track). */
static void write_begin(pyb_cachedev *d, pyb_cd_write *w)
{
    w->version = pyb_fetch_add(&d->next_version, 1, PYB_RELAXED);
    w->fallback = 0;
    if (w->kind == PYB_WK_WRITETHROUGH) {
        if (w->alloc == PYB_CD_ALLOC_FAIL)
            w->fallback = 1;
        else if (w->alloc == PYB_CD_ALLOC_DRAW && d->cache_alloc_fail)
            w->fallback = pyb_fetch_add(&d->alloc_draws, 1, PYB_RELAXED) + 1 == d->cache_alloc_fail;
    }
    w->counted = w->kind == PYB_WK_BYPASS || w->kind == PYB_WK_DISCARD || d->track == PYB_TRACK_ALL ||
                 (d->track == PYB_TRACK_INVALIDATIONS && w->fallback);
    /* The v1 approach defers only the bypass branch's insert (pyb_cachedev.h, invalidate). */
    /* a discard takes the bypass branch too (request.c:1007), so v1 invalidates it after it lands as well */
    w->late = (w->kind == PYB_WK_BYPASS || w->kind == PYB_WK_DISCARD) && d->invalidate == PYB_INV_AFTER_WRITE;
}

/* The step after `step`: the enum's order, or for a late write START, LAND, INVALIDATE, END. */
static int write_next(const pyb_cd_write *w, int step)
{
    if (!w->late)
        return step + 1;
    switch (step) {
    case PYB_W_START: return PYB_W_LAND;
    case PYB_W_LAND: return PYB_W_INVALIDATE;
    case PYB_W_INVALIDATE: return PYB_W_END;
    default: return step + 1;
    }
}

/* The INVALIDATE step: a bypass write's invalidation, or a writethrough write's insert (or its
 * fallback invalidation). Each node of the range under its lock, whose sequence moves. Newest wins,
 * as on the backing device (atomic max): an insert older than the node's newest write leaves a newer
 * valid entry and empties the others, and an invalidation leaves an entry a newer writethrough insert
 * put there, so the order in which two concurrent overlapping writes reach the cache never leaves an
 * older version cached than the one that lands last. With bypass writes only, wt_newest stays 0 and
 * an invalidation empties every entry, as it always did. */
static void write_invalidate(pyb_cachedev *d, pyb_cd_ctx *c, pyb_cd_write *w)
{
    int insert = w->kind == PYB_WK_WRITETHROUGH && !w->fallback;
    c->stats.writethrough_fallbacks += (uint64_t)(w->kind == PYB_WK_WRITETHROUGH && w->fallback);
    uint64_t b = w->blk, end = w->blk + w->nblk, v = w->version;
    while (b < end) {
        uint64_t stop = region_end(d, b) < end ? region_end(d, b) : end, n = b >> d->region_shift;
        pyb_spinlock *lk = lock_of(d, b);
        pyb_spin_lock(lk);
        d->seq[n]++;
        int newest = v >= d->newest[n];
        for (; b < stop; b++) {
            uint64_t e = d->cache[b], p = PYB_CD_PAYLOAD(e);
            int newer = PYB_CD_TAG(e) == PYB_CD_TAG_VALID && p > v;
            if (insert && newest)
                d->cache[b] = entry_valid(v);
            else if (!(newer && (insert || p == d->wt_newest[n])))
                d->cache[b] = PYB_CD_EMPTY;
        }
        if (newest)
            d->newest[n] = v;
        if (insert && newest)
            d->wt_newest[n] = v;
        pyb_spin_unlock(lk);
    }
}

int pyb_cd_write_step(pyb_cachedev *d, pyb_cd_ctx *c, pyb_cd_write *w)
{
    int step = w->step, next;
    uint64_t off = w->blk << d->block_shift, len = w->nblk << d->block_shift;
    if (step == PYB_W_START && !w->version)
        write_begin(d, w); /* decides w->late, hence the next step */
    next = write_next(w, step);
    switch (step) {
    case PYB_W_START:
        if (!w->counted) {
            /* not counted (track): no tracker call */
        } else if (d->ops.ops && !d->tracker) {
            if (write_track_ops(d, c, w, off, len) != 0)
                return step; /* failed: w->step is PYB_W_DONE, nothing else runs */
        } else if (d->tracker && !LATE_INCREMENT) {
            if (d->split) {
                if (!write_track_split(d, c, w, off, len))
                    next = step;
                else
                    w->cursor = 0;
            } else if (write_track(d, c, w, off, len) != 0) {
                return step; /* given up: w->step is PYB_W_DONE, nothing else runs */
            }
        }
        if (next != step) { /* counted once its start is complete: a write given up is not a write */
            c->stats.writes++;
            c->stats.untracked_writes += (uint64_t)w->untracked;
            c->stats.writethrough_writes += (uint64_t)(w->kind == PYB_WK_WRITETHROUGH);
        }
        break;
    case PYB_W_INVALIDATE:
        /* bch_data_invalidate: every entry of the range becomes empty, check keys included, and each
         * node's sequence moves (a writethrough write: its insert, or the fallback's invalidation).
         * The tracker increment above is sequenced before each unlock here (argument step 1). A late
         * write runs this after LAND (invalidate after-write). */
        if (w->kind != PYB_WK_DETACHED) /* the detached path never touches the cache */
            write_invalidate(d, c, w);
        break;
    case PYB_W_LAND:
        if (d->tracker && LATE_INCREMENT && w->counted) { /* the deliberately broken test variant: after INVALIDATE */
            (void)write_track(d, c, w, off, len); /* test builds run it without a wait bound */
            c->stats.untracked_writes += (uint64_t)w->untracked;
        }
        for (uint64_t b = w->blk; b < w->blk + w->nblk; b++)
            atomic_max_release(&d->backing[b], w->version);
        break;
    case PYB_W_END:
        if (!w->counted) {
            /* not counted: its start made no increment, its end takes none */
        } else if (d->ops.ops && !d->tracker) {
            int rc = d->ops.ops->end(d->ops.self, &c->tctx, off, len); /* a completion */
            if (rc < 0) {
                set_error(d, rc);
                w->error = rc;
            }
        } else if (d->tracker) {
            /* Argument step 4: pyb_tracker_end releases, so LAND (sequenced before it) is visible
             * to a reader whose check reads the decremented counter or a later value. */
            if (d->split) {
                uint64_t at = off + w->cursor, stop = hold_end(d, at, off + len);
                pyb_tracker_end(d->tracker, &c->tctx, at, stop - at);
                w->cursor = stop - off;
                if (w->cursor != len) {
                    next = step; /* more chunks or pages to end */
                    break;
                }
            } else {
                pyb_tracker_end(d->tracker, &c->tctx, off, len);
            }
        }
        for (uint64_t b = w->blk; b < w->blk + w->nblk; b++)
            atomic_max_release(&d->completed[b], w->version);
        break;
    default:
        return PYB_W_DONE;
    }
    w->step = next;
    return step;
}

/* A non-split START whose tracker start completed with the PYB_START_* bits ret: the write counts. */
static int start_complete(pyb_cd_ctx *c, pyb_cd_write *w, int ret)
{
    w->untracked |= (ret & PYB_START_UNTRACKED) != 0; /* an earlier, blocked attempt may have left some */
    c->stats.untracked_writes += (uint64_t)w->untracked;
    c->stats.writes++;
    c->stats.writethrough_writes += (uint64_t)(w->kind == PYB_WK_WRITETHROUGH);
    w->step = write_next(w, PYB_W_START);
    return PYB_W_START;
}

/* One attempt of a non-split START: may_block 0 (try_start) or until deadline (start_until). */
static int start_attempt(pyb_cachedev *d, pyb_cd_ctx *c, pyb_cd_write *w, int until, uint64_t deadline_ns)
{
    if (!d->tracker || LATE_INCREMENT || w->step != PYB_W_START || d->split)
        return pyb_cd_write_step(d, c, w);
    uint64_t off = w->blk << d->block_shift, end = (w->blk + w->nblk) << d->block_shift;
    if (!w->version) { /* the first attempt: the same order as the START step */
        write_begin(d, w);
        w->resume = off;
    }
    if (!w->counted)
        return start_complete(c, w, 0);
    uint64_t resume;
    int ret = until ? pyb_tracker_start_until(d->tracker, &c->tctx, w->resume, end - w->resume, deadline_ns, &resume)
                    : pyb_tracker_start(d->tracker, &c->tctx, w->resume, end - w->resume, 0, &resume);
    if (ret & (PYB_START_WOULD_BLOCK | PYB_START_TIMED_OUT)) {
        w->resume = resume;
        w->wait_page = (ret & PYB_START_WAIT_PAGE) != 0;
        return PYB_W_BLOCKED;
    }
    return start_complete(c, w, ret);
}

int pyb_cd_write_try_start(pyb_cachedev *d, pyb_cd_ctx *c, pyb_cd_write *w) { return start_attempt(d, c, w, 0, 0); }

int pyb_cd_write_start_until(pyb_cachedev *d, pyb_cd_ctx *c, pyb_cd_write *w, uint64_t deadline_ns)
{
    return start_attempt(d, c, w, 1, deadline_ns);
}

int pyb_cd_write_abandon(pyb_cachedev *d, pyb_cd_ctx *c, pyb_cd_write *w)
{
    uint64_t off = w->blk << d->block_shift;
    int lost = 0;
    if (d->tracker)
        lost = pyb_tracker_undo_start(d->tracker, &c->tctx, off, w->resume > off ? w->resume - off : 0);
    w->timed_out = 1;
    w->step = PYB_W_DONE;
    return lost;
}

/* A tracker without PYB_OPS_CAN_RESUME (a patch): its END must run on a completion thread. */
static int end_needs_thread(const pyb_cachedev *d)
{
    return d->ops.ops && !d->tracker && !(d->ops.ops->flags & PYB_OPS_CAN_RESUME);
}

uint64_t pyb_cd_write_finish(pyb_cachedev *d, pyb_cd_ctx *c, pyb_cd_write *w)
{
    if (end_needs_thread(d))
        return 0;
    pyb_cd_write_submit(d, c, w); /* INVALIDATE, unless late */
    pyb_cd_delay(d->delay_mode, d->write_delay_ns);
    while (w->step != PYB_W_DONE)
        pyb_cd_write_step(d, c, w); /* LAND, END (late: LAND, INVALIDATE, END) */
    return w->version;
}

void pyb_cd_write_submit(pyb_cachedev *d, pyb_cd_ctx *c, pyb_cd_write *w)
{
    while (w->step != PYB_W_START && w->step != PYB_W_LAND && w->step != PYB_W_DONE)
        pyb_cd_write_step(d, c, w);
}

int pyb_cd_write_start_with(pyb_cachedev *d, pyb_cd_ctx *c, pyb_cd_write *w, pyb_cd_start_fn start, void *arg)
{
    if (!d->tracker || LATE_INCREMENT || w->step != PYB_W_START || d->split) {
        int s = pyb_cd_write_step(d, c, w); /* another tracker: its start waits inside the call */
        return s == PYB_W_START && w->step == PYB_W_DONE ? -1 : s;
    }
    uint64_t off = w->blk << d->block_shift, len = w->nblk << d->block_shift;
    write_begin(d, w); /* the START step's order */
    if (!w->counted)
        return start_complete(c, w, 0);
    int ret = start(arg, d->tracker, &c->tctx, off, len);
    if (ret < 0) {
        w->step = PYB_W_DONE;
        return -1;
    }
    return start_complete(c, w, ret);
}

typedef struct completion {
    pyb_cachedev *d;
    pyb_cd_ctx *c;
    pyb_cd_write *w;
    int whole;
} completion;

static void *completion_main(void *arg)
{
    completion *k = arg;
    if (k->whole) {
        pyb_cd_delay(k->d->delay_mode, k->d->write_delay_ns);
        while (k->w->step != PYB_W_DONE)
            pyb_cd_write_step(k->d, k->c, k->w); /* LAND, END (late: LAND, INVALIDATE, END) */
    } else {
        pyb_cd_write_step(k->d, k->c, k->w);
    }
    return NULL;
}

#ifdef PYB_CD_TEST_HOOKS
int pyb_cd_test_fail_thread_create;
#define FAIL_THREAD_CREATE pyb_cd_test_fail_thread_create
#else
#define FAIL_THREAD_CREATE 0
#endif

int pyb_cd_write_complete_on_thread(pyb_cachedev *d, pyb_cd_ctx *c, pyb_cd_write *w, int whole)
{
    completion k = {d, c, w, whole};
    pthread_t th;
    int rc = FAIL_THREAD_CREATE ? FAIL_THREAD_CREATE : pthread_create(&th, NULL, completion_main, &k);
    if (rc) {
        /* The write's start stays counted (reads of its range bypass: never stale) and its END may
         * not run here: the device is broken, every driver stops at its next look. */
        set_error(d, PYB_OPS_EBROKEN);
        return rc;
    }
    pthread_join(th, NULL);
    return 0;
}

uint64_t pyb_cd_write_delay_ns(const pyb_cachedev *d) { return d->write_delay_ns; }
int pyb_cd_write_delay_mode(const pyb_cachedev *d) { return d->delay_mode; }

uint64_t pyb_cd_write_run(pyb_cachedev *d, pyb_cd_ctx *c, uint64_t blk, uint64_t nblk)
{
    if (end_needs_thread(d))
        return 0;
    pyb_cd_write w;
    pyb_cd_write_init(&w, blk, nblk);
    while (w.step == PYB_W_START) /* one step unless split_tracker_calls */
        pyb_cd_write_step(d, c, &w);
    if (w.timed_out || w.step == PYB_W_DONE) /* timed out, or the tracker failed (w.error) */
        return 0;
    return pyb_cd_write_finish(d, c, &w);
}

/* ------------------------------------------------------------------------------------------------ */
/* Read                                                                                               */

void pyb_cd_read_init(pyb_cachedev *d, pyb_cd_ctx *c, pyb_cd_read *r, uint64_t blk, uint64_t nblk)
{
    r->blk = blk;
    r->nblk = nblk;
    r->token = c->token_base | (c->token_seq++ & 0xFFFFFFFFull);
    r->miss = 0;
    r->cursor = 0;
    r->step = d->ops.ops && d->check == PYB_CHECK_ENTRY ? PYB_R_CHECK : PYB_R_LOOKUP;
    r->began = r->looked = r->checked = r->active = r->keyed = r->backed = r->restarts = r->hit = 0;
    r->inserted = r->collided = r->stale = r->error = 0;
}

int pyb_cd_read_next(const pyb_cachedev *d, const pyb_cd_read *r)
{
    (void)d;
    return r->step;
}

/* The byte range spanning the blocks that missed. */
static void miss_span(const pyb_cachedev *d, const pyb_cd_read *r, uint64_t *off, uint64_t *len)
{
    uint64_t first = (uint64_t)__builtin_ctzll(r->miss), last = 63 - (uint64_t)__builtin_clzll(r->miss);
    *off = (r->blk + first) << d->block_shift;
    *len = (last - first + 1) << d->block_shift;
}

/* The range a read's check covers: the missed blocks (or, at entry, the whole read), widened to whole
 * tracking pages with page granularity. */
static void check_span(const pyb_cachedev *d, const pyb_cd_read *r, uint64_t *off, uint64_t *len)
{
    if (!r->looked) {
        *off = r->blk << d->block_shift;
        *len = r->nblk << d->block_shift;
    } else {
        miss_span(d, r, off, len);
    }
    if (d->granularity == PYB_GRAN_PAGE) {
        uint64_t lo = *off / d->page_bytes * d->page_bytes;
        uint64_t hi = (*off + *len + d->page_bytes - 1) / d->page_bytes * d->page_bytes;
        if (hi > pyb_tracker_device_size(d->tracker))
            hi = pyb_tracker_device_size(d->tracker);
        *off = lo;
        *len = hi - lo;
    }
}

/* The step after the tracker check. */
static int after_check(const pyb_cd_read *r)
{
    if (!r->looked)
        return PYB_R_LOOKUP;  /* entry: the lookup follows (a bypassing read still serves hits) */
    if (r->backed)
        return PYB_R_INSERT;  /* read-done: the insert follows (it inserts nothing if active) */
    if (r->active || r->keyed)
        return PYB_R_BACKING; /* miss found a write (no check key), or after */
    return PYB_R_CHECK_KEY;   /* miss found none */
}

static void read_begin(pyb_cachedev *d, pyb_cd_read *r)
{
    if (r->began)
        return;
    r->began = 1;
    for (uint64_t i = 0; i < r->nblk; i++)
        r->floor[i] = pyb_load(&d->completed[r->blk + i], PYB_ACQUIRE);
}

static void read_finish(pyb_cachedev *d, pyb_cd_ctx *c, pyb_cd_read *r)
{
    (void)d;
    for (uint64_t i = 0; i < r->nblk; i++)
        r->stale += r->version[i] < r->floor[i];
    c->stats.reads++;
    c->stats.stale_reads += r->stale != 0;
    if (r->hit) {
        c->stats.read_hits++;
    } else {
        c->stats.read_misses++;
        c->stats.read_bypasses += r->active != 0;
        c->stats.cache_inserts += r->inserted != 0;
        c->stats.blocks_inserted += (uint64_t)r->inserted;
        c->stats.miss_collisions += r->collided != 0;
    }
    r->step = PYB_R_DONE;
}

/* Lock the nodes of the missed blocks in ascending order (no other path holds two node locks). */
static void lock_miss_nodes(pyb_cachedev *d, const pyb_cd_read *r, int unlock)
{
    uint64_t last = UINT64_MAX;
    for (uint64_t i = 0; i < r->nblk; i++) {
        uint64_t n = (r->blk + i) >> d->region_shift;
        if (!(r->miss >> i & 1) || n == last)
            continue;
        last = n;
        if (unlock)
            pyb_spin_unlock(&d->locks[n]);
        else
            pyb_spin_lock(&d->locks[n]);
    }
}

int pyb_cd_read_step(pyb_cachedev *d, pyb_cd_ctx *c, pyb_cd_read *r)
{
    int step = r->step;
    switch (step) {
    case PYB_R_CHECK: {
        read_begin(d, r); /* entry: the read begins with its check */
        uint64_t off, len;
        check_span(d, r, &off, &len);
        if (!d->tracker) {
            /* Another tracker: one call. A failure is treated as active (the read bypasses, which
             * is safe) and stops the drivers through the device's error. */
            int rc = d->ops.ops->is_active(d->ops.self, &c->tctx, off, len);
            if (rc < 0) {
                set_error(d, rc);
                r->error = rc;
            }
            r->active = rc != 0;
        } else if (d->split) {
            /* One tracker lock hold per step; the first active hold decides. */
            uint64_t at = off + r->cursor, stop = hold_end(d, at, off + len);
            r->active = pyb_tracker_is_active(d->tracker, &c->tctx, at, stop - at);
            r->cursor = stop - off;
            if (!r->active && r->cursor != len)
                return step;
        } else {
            /* Argument step 4: pyb_tracker_is_active acquires; it pairs with the release of
             * pyb_tracker_end, so a write whose end this check observed has landed for BACKING. */
            r->active = pyb_tracker_is_active(d->tracker, &c->tctx, off, len);
        }
        r->cursor = 0;
        r->checked = 1;
        c->stats.tracker_checks++;
        r->step = after_check(r);
        break;
    }
    case PYB_R_LOOKUP: {
        read_begin(d, r);
        uint64_t b = r->blk, end = r->blk + r->nblk;
        r->miss = 0;
        while (b < end) {
            uint64_t stop = region_end(d, b) < end ? region_end(d, b) : end;
            pyb_spinlock *lk = lock_of(d, b);
            pyb_spin_lock(lk);
            uint64_t seq = d->seq[b >> d->region_shift];
            for (; b < stop; b++) {
                uint64_t e = d->cache[b], i = b - r->blk;
                r->seq[i] = seq;
                if (PYB_CD_TAG(e) == PYB_CD_TAG_VALID)
                    r->version[i] = PYB_CD_PAYLOAD(e);
                else
                    r->miss |= 1ull << i;
            }
            pyb_spin_unlock(lk);
        }
        r->looked = 1;
        if (!r->miss) {
            r->hit = 1;
            read_finish(d, c, r);
            return step;
        }
        if (r->active) /* entry check found an active write: bypass, no check key */
            r->step = PYB_R_BACKING;
        else if (d->ops.ops && d->check == PYB_CHECK_MISS)
            r->step = PYB_R_CHECK;
        else
            r->step = PYB_R_CHECK_KEY;
        break;
    }
    case PYB_R_CHECK_KEY: {
        /* bch_btree_insert_check_key: upgrade to the write lock, and if the node moved since the
         * lookup, -EINTR: the whole lookup restarts (and with it a "miss" check). */
        int moved = 0;
        lock_miss_nodes(d, r, 0);
        if (!d->no_restart)
            for (uint64_t i = 0; i < r->nblk && !moved; i++)
                moved = (r->miss >> i & 1) && d->seq[(r->blk + i) >> d->region_shift] != r->seq[i];
        if (!moved) {
            uint64_t last = UINT64_MAX, mine = entry_check(r->token);
            for (uint64_t i = 0; i < r->nblk; i++) {
                uint64_t b = r->blk + i;
                if (!(r->miss >> i & 1))
                    continue;
                d->cache[b] = mine;
                if (b >> d->region_shift != last)
                    d->seq[last = b >> d->region_shift]++;
            }
        }
        lock_miss_nodes(d, r, 1);
        if (moved) {
            r->restarts++;
            c->stats.check_key_restarts++;
            if (d->check == PYB_CHECK_MISS)
                r->checked = 0;
            r->step = PYB_R_LOOKUP;
            break;
        }
        r->keyed = 1;
        r->step = d->ops.ops && d->check == PYB_CHECK_AFTER ? PYB_R_CHECK : PYB_R_BACKING;
        break;
    }
    case PYB_R_BACKING:
        for (uint64_t i = 0; i < r->nblk; i++)
            if (r->miss >> i & 1)
                r->version[i] = pyb_load(&d->backing[r->blk + i], PYB_ACQUIRE);
        if (d->bounce_copy && !r->active) {
            /* The miss will be inserted: its data goes through a bounce buffer that is copied
             * into the caller's buffer (a bypassing read skips this). */
            for (uint64_t i = 0; i < r->nblk; i++) {
                if (!(r->miss >> i & 1))
                    continue;
                /* The source is where the device put the block's data: a different place per block
                 * in a buffer of up to 64 MiB, so the copy is not served from L1/L2. */
                uint64_t src = ((r->blk + i) << d->block_shift) % d->bounce_size;
                for (uint64_t done = 0; done < d->block_size; done += sizeof(c->bounce)) {
                    size_t n = d->block_size - done < sizeof(c->bounce) ? d->block_size - done : sizeof(c->bounce);
                    memcpy(c->bounce, d->bounce_src + (src + done) % d->bounce_size, n);
                }
            }
            __asm__ __volatile__("" : : "r"(c->bounce) : "memory");
            c->stats.bounce_bytes += (uint64_t)__builtin_popcountll(r->miss) << d->block_shift;
        }
        r->backed = 1;
        r->step = d->ops.ops && d->check == PYB_CHECK_READ_DONE && !r->active ? PYB_R_CHECK : PYB_R_INSERT;
        break;
    case PYB_R_INSERT:
        if (!r->active) {
            uint64_t b = r->blk, end = r->blk + r->nblk, mine = entry_check(r->token);
            while (b < end) {
                uint64_t stop = region_end(d, b) < end ? region_end(d, b) : end;
                pyb_spinlock *lk = lock_of(d, b);
                int touched = 0;
                pyb_spin_lock(lk);
                for (; b < stop; b++) {
                    uint64_t i = b - r->blk;
                    if (!(r->miss >> i & 1))
                        continue;
                    touched = 1;
                    if (d->cache[b] == mine) {
                        d->cache[b] = entry_valid(r->version[i]);
                        r->inserted++;
                    } else {
                        r->collided++;
                    }
                }
                if (touched) /* the replace-insert write-locked this node */
                    d->seq[(b - 1) >> d->region_shift]++;
                pyb_spin_unlock(lk);
            }
        }
        read_finish(d, c, r);
        break;
    default:
        return PYB_R_DONE;
    }
    return step;
}

void pyb_cd_read_run(pyb_cachedev *d, pyb_cd_ctx *c, pyb_cd_read *r, uint64_t blk, uint64_t nblk)
{
    pyb_cd_read_init(d, c, r, blk, nblk);
    while (r->step != PYB_R_DONE)
        pyb_cd_read_step(d, c, r);
}

/* ------------------------------------------------------------------------------------------------ */
/* Inspection                                                                                         */

uint64_t pyb_cd_cache_entry(pyb_cachedev *d, uint64_t blk)
{
    pyb_spin_lock(lock_of(d, blk));
    uint64_t e = d->cache[blk];
    pyb_spin_unlock(lock_of(d, blk));
    return e;
}

uint64_t pyb_cd_backing_version(pyb_cachedev *d, uint64_t blk) { return pyb_load(&d->backing[blk], PYB_ACQUIRE); }
uint64_t pyb_cd_completed_version(pyb_cachedev *d, uint64_t blk) { return pyb_load(&d->completed[blk], PYB_ACQUIRE); }

uint64_t pyb_cd_node_seq(pyb_cachedev *d, uint64_t blk)
{
    pyb_spin_lock(lock_of(d, blk));
    uint64_t s = d->seq[blk >> d->region_shift];
    pyb_spin_unlock(lock_of(d, blk));
    return s;
}

static uint64_t scan(pyb_cachedev *d, int stale_only)
{
    uint64_t n = 0;
    for (uint64_t b = 0; b < d->n_blocks;) {
        uint64_t stop = region_end(d, b) < d->n_blocks ? region_end(d, b) : d->n_blocks;
        pyb_spinlock *lk = lock_of(d, b);
        pyb_spin_lock(lk);
        for (; b < stop; b++) {
            uint64_t e = d->cache[b];
            if (PYB_CD_TAG(e) != PYB_CD_TAG_VALID)
                continue;
            n += !stale_only || PYB_CD_PAYLOAD(e) != pyb_load(&d->backing[b], PYB_ACQUIRE);
        }
        pyb_spin_unlock(lk);
    }
    return n;
}

uint64_t pyb_cd_stale_cached_blocks(pyb_cachedev *d) { return scan(d, 1); }
uint64_t pyb_cd_cached_blocks(pyb_cachedev *d) { return scan(d, 0); }

void pyb_cd_get_stats(pyb_cachedev *d, pyb_cd_stats *out)
{
    uint64_t *o = (uint64_t *)out;
    for (size_t i = 0; i < sizeof(d->st) / sizeof(d->st[0]); i++)
        o[i] = pyb_load(&d->st[i], PYB_RELAXED);
}
