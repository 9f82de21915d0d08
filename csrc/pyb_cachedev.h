/*
 * pyb_cachedev.h - a model of the bcache request path, deep enough for the stale-read race between a
 * read cache miss and a bypass write, and for the fix that tracks in-flight bypass writes.
 *
 * The device is cut into blocks of block_size bytes. Per block the model keeps
 *   backing[b]    the version of the data on the backing device (0 = never written);
 *   cache[b]      the cache index entry: empty, a check key (a read miss's placeholder, tagged with
 *                 the owning read's token), or valid data with the version it holds;
 *   completed[b]  the newest version of a write to b that has fully completed (the oracle).
 * The cache index is guarded by one spinlock per region of region_blocks blocks, so readers and
 * writers of different regions run in parallel (the analogue of btree leaf locks).
 *
 * A bypass write is four steps (kernel-semantics B.3/B.4 and the v2 series):
 *   START      take a new version; pyb_tracker_start on the write's byte range (if tracking is on);
 *   INVALIDATE replace every cache entry of the range by "empty" (bch_data_invalidate: drops cached
 *              data and check keys alike); this runs early, before the data reaches the disk;
 *   LAND       the data reaches the backing device (after the configured delay in pyb_cd_write);
 *   END        pyb_tracker_end; the write counts as completed for the oracle.
 * A read is these steps (B.2), in this order with check placement "after":
 *   LOOKUP     snapshot the oracle's floor, look the range up; all valid = hit (done). Otherwise place
 *              this read's check key on every block that is not valid, in the same lock hold (the
 *              kernel validates its leaf-lock upgrade and restarts the lookup if the node changed, so
 *              lookup and check-key insertion are atomic with respect to other btree updates);
 *   CHECK      pyb_tracker_is_active over the missed blocks: an active write makes the read bypass
 *              (tracking only; with placement "before" this step runs first, before LOOKUP, which is
 *              the bug the explorer demonstrates);
 *   BACKING    read the backing versions of the missed blocks (plus the bounce-buffer copy of a miss
 *              that will be inserted, if enabled);
 *   INSERT     replace-insert: each missed block whose entry is still this read's check key becomes
 *              valid with the version read; any other entry is a miss collision (nothing inserted
 *              there). A bypassing read inserts nothing.
 *
 * Oracle. A read that returns, for some block, a version older than completed[b] as it was when the
 * read began is a stale read. At quiescence every valid cache entry must equal the backing version
 * (pyb_cd_stale_cached_blocks).
 *
 * Why the check after the check key cannot miss a write W whose invalidation preceded the read R's
 * check key (the argument the fix rests on; the explorer checks it exhaustively on small bounds):
 *   1. W calls pyb_tracker_start before it invalidates, and INVALIDATE writes cache[b] inside the
 *      region lock L(b). W's counter increment is sequenced before W's unlock of L(b).
 *   2. R's LOOKUP takes L(b) after W released it (that is what "W's invalidation preceded R's check
 *      key" means: the two critical sections are ordered by L(b)), so W's unlock synchronises with
 *      R's lock: W's increment happens-before everything R does afterwards, including CHECK.
 *   3. R's CHECK reads the counter (under the page or global lock, or with an acquire load in the
 *      atomic variant). By write-read coherence a read that happens-after a modification returns
 *      that modification or a later one in the counter's modification order. Every decrement in that
 *      order belongs to a write whose increment precedes it (a start is sequenced before its end and
 *      both modify the same counter, invariant I1 of pyb_tracker.h), so the value R reads is at
 *      least the number of writes started and not ended in that prefix, W included: non-zero unless
 *      W has already ended. Exceptions are exactly the tracker's open questions: an untracked start
 *      whose end steals W's increment, and a wrapped or clamped counter.
 *   4. If W had ended, R must read W's data. W's LAND store is sequenced before pyb_tracker_end,
 *      which releases (pyb_tracker.h, "Ordering for callers": the lock variants' unlock, the atomic
 *      variant's releasing decrement CAS), and R's pyb_tracker_is_active acquires (the lock, or
 *      acquire loads of the counters). R's check read a counter value written by W's decrement or
 *      by a later modification of that counter; every modification is a read-modify-write, so that
 *      value is in the release sequence headed by W's decrement (C11 5.1.2.4), R's check
 *      synchronises with W's end, and W's LAND happens-before R's BACKING load: R reads W's
 *      version or a newer one. No fence is involved, so ThreadSanitizer (which does not model
 *      atomic_thread_fence) checks exactly the ordering the argument uses; on x86 the releasing
 *      CAS and the acquire loads compile to the same instructions as relaxed ones.
 *   The weakest plausible mistake, a start whose increment becomes visible only after the
 *   invalidation (step 1 broken: the tracking call placed after bch_data_invalidate, or an increment
 *   published in a way the invalidation's unlock does not order, such as a deferred per-CPU batch),
 *   is a deliberately broken variant compiled only into csrc/tests/test_cachedev.c
 *   (PYB_CD_TEST_HOOKS): its explorer run must find a stale read, the correct build none.
 *   With the check placed before the check key, step 2 fails: W can start, invalidate and keep
 *   running between R's check and R's check key, and nothing will ever overwrite that check key.
 */
#ifndef PYB_CACHEDEV_H
#define PYB_CACHEDEV_H

#include <stdint.h>

#include "pyb_atomic.h"
#include "pyb_tracker.h"

#define PYB_CD_MAX_READ_BLOCKS 64

/* Cache index entries: the low 2 bits are the tag, the rest the payload. */
#define PYB_CD_EMPTY 0ull
#define PYB_CD_TAG_CHECK 1ull
#define PYB_CD_TAG_VALID 2ull
#define PYB_CD_TAG(e) ((e) & 3ull)
#define PYB_CD_PAYLOAD(e) ((e) >> 2)

typedef enum pyb_cd_check_placement { PYB_CHECK_AFTER = 0, PYB_CHECK_BEFORE = 1 } pyb_cd_check_placement;
typedef enum pyb_cd_delay_mode { PYB_DELAY_SPIN = 0, PYB_DELAY_YIELD = 1 } pyb_cd_delay_mode;

/* Write steps (the value of pyb_cd_write.step is the next step to run). */
enum { PYB_W_START = 0, PYB_W_INVALIDATE, PYB_W_LAND, PYB_W_END, PYB_W_DONE };
/* pyb_cd_write_try_start's return when a tracker counter is at its maximum under overflow "wait". */
#define PYB_W_BLOCKED (-1)
/* Read steps. */
enum { PYB_R_LOOKUP = 0, PYB_R_CHECK, PYB_R_BACKING, PYB_R_INSERT, PYB_R_DONE };

typedef struct pyb_cd_config {
    uint64_t device_size;    /* bytes, a positive multiple of block_size */
    uint32_t block_size;     /* a power of two >= 512 */
    uint32_t region_blocks;  /* blocks per cache-index lock, a power of two >= 1 */
    pyb_tracker *tracker;    /* NULL = no tracking (the unpatched kernel); not owned; its device size
                                must be >= device_size */
    int check;               /* pyb_cd_check_placement: read-side tracker check after or before the check key */
    int delay_mode;          /* pyb_cd_delay_mode: how pyb_cd_write waits between INVALIDATE and LAND */
    uint64_t write_delay_ns; /* the dm-delay analogue: time a bypass write's data takes to land */
    int bounce_copy;         /* 1: a read miss that will insert copies its data once (bcache copies the
                                bounce buffer into the caller's bio); a bypassing read does not */
} pyb_cd_config;

/* Statistics of one context (plain fields: owned by one thread) and of the device (folded). */
typedef struct pyb_cd_stats {
    uint64_t reads, read_hits, read_misses, read_bypasses, cache_inserts, blocks_inserted;
    uint64_t miss_collisions, stale_reads, writes, untracked_writes, bounce_bytes;
} pyb_cd_stats;

typedef struct pyb_cachedev pyb_cachedev;

/* A thread's context: its tracker context, its check-key tokens and its statistics. */
typedef struct pyb_cd_ctx {
    pyb_ctx tctx;
    uint64_t token_base; /* this context's token range: [token_base, token_base + 2^32) */
    uint64_t token_seq;
    pyb_cd_stats stats;
    unsigned char bounce[4096]; /* destination of the bounce copy */
} pyb_cd_ctx;

/* A bypass write in progress. */
typedef struct pyb_cd_write {
    uint64_t blk, nblk; /* blocks [blk, blk + nblk) */
    uint64_t version;   /* set by START */
    int step;           /* next step: PYB_W_* */
    int untracked;      /* START left part of the range untracked (allocation failure) */
    uint64_t resume;    /* after PYB_W_BLOCKED: the byte offset the tracker start resumes from (the
                           chunks before it are counted) */
} pyb_cd_write;

/* A read in progress. */
typedef struct pyb_cd_read {
    uint64_t blk, nblk; /* blocks [blk, blk + nblk), nblk <= PYB_CD_MAX_READ_BLOCKS */
    uint64_t token;     /* this read's check-key token */
    uint64_t miss;      /* bit i: block blk + i missed at LOOKUP */
    uint64_t floor[PYB_CD_MAX_READ_BLOCKS];   /* completed[b] when the read began */
    uint64_t version[PYB_CD_MAX_READ_BLOCKS]; /* the version returned for each block */
    int step;      /* next step: PYB_R_* */
    int checked;   /* the tracker check has run */
    int active;    /* the tracker check found an active write: bypass */
    int hit;       /* every block was valid at LOOKUP */
    int inserted;  /* blocks inserted by INSERT */
    int collided;  /* blocks whose check key was gone at INSERT */
    int stale;     /* blocks returned older than their floor */
} pyb_cd_read;

/* Validate cfg and build a device. Returns 0, -EINVAL or -ENOMEM. */
int pyb_cd_create(const pyb_cd_config *cfg, pyb_cachedev **out);
void pyb_cd_destroy(pyb_cachedev *d);

uint64_t pyb_cd_n_blocks(const pyb_cachedev *d);
uint32_t pyb_cd_block_size(const pyb_cachedev *d);
pyb_tracker *pyb_cd_tracker(const pyb_cachedev *d);

/* Replace the tracker (NULL = none). Only at quiescence: no operation in flight. */
void pyb_cd_set_tracker(pyb_cachedev *d, pyb_tracker *t);
/* Empty the whole cache index. Only at quiescence. */
void pyb_cd_reset_cache(pyb_cachedev *d);
/* Reset the whole device: cache, backing and completed versions, the version counter, statistics.
 * Only at quiescence. */
void pyb_cd_reset(pyb_cachedev *d);

/* Contexts: initialise before use, call pyb_cd_ctx_done periodically and at the end (it folds the
 * statistics into the device and the tracker and unpins the tracker context). */
void pyb_cd_ctx_init(pyb_cachedev *d, pyb_cd_ctx *c);
void pyb_cd_ctx_done(pyb_cachedev *d, pyb_cd_ctx *c);

/* Step API (the explorer and the pending operations of the Python API drive these one call per
 * step). Ranges are validated by the caller: nblk >= 1, blk + nblk <= n_blocks, and for reads
 * nblk <= PYB_CD_MAX_READ_BLOCKS. Each *_step runs the next step and returns the step it ran
 * (PYB_W_* / PYB_R_*); the operation is finished when ->step == *_DONE. */
void pyb_cd_write_init(pyb_cd_write *w, uint64_t blk, uint64_t nblk);
int pyb_cd_write_step(pyb_cachedev *d, pyb_cd_ctx *c, pyb_cd_write *w);
void pyb_cd_read_init(pyb_cachedev *d, pyb_cd_ctx *c, pyb_cd_read *r, uint64_t blk, uint64_t nblk);
int pyb_cd_read_step(pyb_cachedev *d, pyb_cd_ctx *c, pyb_cd_read *r);
/* The step a read will run next (PYB_R_*), given the device's check placement. */
int pyb_cd_read_next(const pyb_cachedev *d, const pyb_cd_read *r);

/* START without waiting, for the native drivers, which own their waits (pyb_driver.h): as
 * pyb_cd_write_step at PYB_W_START, except that a tracker counter at its maximum under overflow
 * "wait" makes it return PYB_W_BLOCKED with the step still PYB_W_START and w->resume set; call it
 * again to go on, or give the write up by ending [first byte, w->resume) on the tracker (and never
 * running its other steps). Returns PYB_W_START once the start is complete. */
int pyb_cd_write_try_start(pyb_cachedev *d, pyb_cd_ctx *c, pyb_cd_write *w);
/* The configured wait between INVALIDATE and LAND (pyb_cd_write_run's; the drivers wait it on their
 * completion threads). */
uint64_t pyb_cd_write_delay_ns(const pyb_cachedev *d);
int pyb_cd_write_delay_mode(const pyb_cachedev *d);

/* Whole operations: a bypass write with the configured delay between INVALIDATE and LAND (returns
 * its version), and a read. */
uint64_t pyb_cd_write_run(pyb_cachedev *d, pyb_cd_ctx *c, uint64_t blk, uint64_t nblk);
void pyb_cd_read_run(pyb_cachedev *d, pyb_cd_ctx *c, pyb_cd_read *r, uint64_t blk, uint64_t nblk);

#ifdef PYB_CD_TEST_HOOKS
/* Test builds only (csrc/tests/test_cachedev.c): when non-zero, a write's tracker start runs at the
 * beginning of its LAND step instead of in START, i.e. its increment becomes visible only after its
 * invalidation - the deliberately broken ordering the test must catch. Set only at quiescence. */
extern int pyb_cd_test_late_increment;
#endif

/* Wait ns nanoseconds by spinning or yielding. */
void pyb_cd_delay(int mode, uint64_t ns);

/* Inspection (take the region lock; safe at any time). */
uint64_t pyb_cd_cache_entry(pyb_cachedev *d, uint64_t blk);
uint64_t pyb_cd_backing_version(pyb_cachedev *d, uint64_t blk);
uint64_t pyb_cd_completed_version(pyb_cachedev *d, uint64_t blk);
/* Valid cache entries whose version differs from the backing version. Meaningful at quiescence. */
uint64_t pyb_cd_stale_cached_blocks(pyb_cachedev *d);
/* Valid cache entries. */
uint64_t pyb_cd_cached_blocks(pyb_cachedev *d);
void pyb_cd_get_stats(pyb_cachedev *d, pyb_cd_stats *out);

#endif /* PYB_CACHEDEV_H */
