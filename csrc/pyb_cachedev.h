/*
 * pyb_cachedev.h - a model of the bcache request path, deep enough for the stale-read race between a
 * read cache miss and a bypass write, and for the fix that tracks in-flight bypass writes.
 *
 * The device is cut into blocks of block_size bytes. Per block the model keeps
 *   backing[b]    the version of the data on the backing device (0 = never written);
 *   cache[b]      the cache index entry: empty, a check key (a read miss's placeholder, tagged with
 *                 the owning read's token), or valid data with the version it holds;
 *   completed[b]  the newest version of a write to b that has fully completed (the oracle).
 * The cache index is cut into nodes ("regions") of region_blocks blocks, each with a lock and a
 * sequence number (the btree leaf, its lock and b->seq). Every update of a node under its lock
 * moves its sequence: an invalidation, a check-key insertion, a replace-insert (bcache bumps
 * b->seq whenever it takes or drops a node's write lock: drivers/md/bcache/btree.h:248-261 in Linux 6.12).
 *
 * A bypass write is four steps (cached_dev_write, drivers/md/bcache/request.c:1027-1062 in 6.12, and the v2 series):
 *   START      take a new version; pyb_tracker_start on the write's byte range (if tracking is on);
 *   INVALIDATE replace every cache entry of the range by "empty" (bch_data_invalidate: drops cached
 *              data and check keys alike); this runs early, before the data reaches the disk
 *              (unless invalidate is after-write, below);
 *   LAND       the data reaches the backing device (after the configured delay in pyb_cd_write);
 *   END        pyb_tracker_end; the write counts as completed for the oracle.
 * A writethrough write (cached_dev_write in writethrough mode, drivers/md/bcache/request.c in 6.12:
 * the backing bio is submitted at :1057, bch_data_insert runs after it at :1061) is the same four
 * steps, with INVALIDATE replaced by the insert:
 *   START      take a new version and draw the cache allocation of its insert (the K-th draw of the
 *              device fails with cache_alloc_fail = K, or the caller decided it: w->alloc); whether
 *              the tracker counts the write depends on `track` (below) and is decided here, so that a
 *              start for a write whose insert will fall back precedes its invalidation;
 *   INVALIDATE the insert: every block of the range becomes valid with the write's version ("newest
 *              wins": under the node lock, a node whose newest write is newer than this one keeps a
 *              newer valid entry and is otherwise emptied, so two concurrent writes never leave an
 *              older version cached over a newer one), overwriting a read's check key (that read's
 *              replace-insert is then a miss collision), and the node's sequence moves. If the
 *              allocation failed (bch_alloc_sectors, :222, does not wait in writethrough) the insert
 *              falls back to op->bypass = true and invalidates the range instead (:264-272; a failed
 *              cache write strips the keys' pointers the same way, :139-166): the same emptying as a
 *              bypass write's INVALIDATE, while the backing write is still in flight;
 *   LAND, END  as for a bypass write.
 * invalidate says when a bypass write's INVALIDATE runs (pyb_cd_invalidate):
 *   at-submit    right after START, while its backing write is in flight (6.12, and the v2 patch:
 *                cached_dev_write submits the backing bio at request.c:1027 and calls bch_data_insert,
 *                whose op->bypass path is bch_data_invalidate, at :1061 without waiting for it);
 *   after-write  after LAND: START, LAND, INVALIDATE, END (the v1 approach: the insert moves into a
 *                continuation of the closure that runs once the backing bio has completed; the
 *                write completes to its caller, END, after both, as cached_dev_write_complete at
 *                :1062 does). A writethrough write keeps its order either way (its insert, and the
 *                fallback's invalidation, are decided inside bch_data_insert_start, :188-193 and
 *                :264-272, which the bypass-branch deferral does not reach), so its fallback still
 *                invalidates while its backing write is in flight.
 *   With after-write no read can cache or return older data than a completed write (no tracker
 *   needed): a read's check key placed before the write's INVALIDATE is overwritten by it (the
 *   replace-insert collides; an insert that ran before it is emptied by it), and a check key placed
 *   after it precedes the read's BACKING, which then runs after LAND. The option is orthogonal to the
 *   tracker (START and END call it as before).
 * track says which writes call the tracker (an uncounted write calls neither its start nor its end,
 * so it never takes another write's increment, but still counts in `writes`):
 *   bypass         only bypass writes (the v2 patch: bch_bypass_write_start sits in the bypass branch
 *                  of cached_dev_write; a writethrough write, fallback or not, is never counted);
 *   invalidations  every write that invalidates: bypass writes and writethrough writes whose insert
 *                  falls back (start at START, where the fallback is decided, end at END);
 *   all            every write.
 * A read is these steps (B.2):
 *   LOOKUP     snapshot the oracle's floor (first step of the read only), look the range up under
 *              the node locks and record each node's sequence; all valid = hit (done);
 *   CHECK_KEY  bch_btree_insert_check_key: re-take the nodes' locks and compare their sequences
 *              with the ones LOOKUP recorded. Any change (-EINTR) restarts the read at LOOKUP; else
 *              place this read's check key on every missed block. With no_restart the comparison is
 *              skipped and the keys are placed anyway (the bug the restart prevents);
 *   CHECK      pyb_tracker_is_active (tracking only): an active write makes the read bypass (no
 *              check key placed if none is yet, nothing inserted). Where it runs is the placement:
 *                entry  once, before the first LOOKUP, over the read's whole range (a restart does
 *                       not repeat it): unsafe, a write can start and invalidate between the check
 *                       and the lookup, and nothing will ever overwrite the later check key;
 *                miss   after LOOKUP, before CHECK_KEY, over the missed blocks (again after every
 *                       restart): safe only because of the restart (argument below);
 *                after  after CHECK_KEY, over the missed blocks (in the kernel: between
 *                       bch_btree_insert_check_key and the backing read's submission in
 *                       cached_dev_cache_miss, drivers/md/bcache/request.c:917-949 in 6.12);
 *                read-done  after BACKING, before INSERT (cached_dev_read_done, request.c:864-869,
 *                       or read_done_bh in completion context, :875-890): unsafe, a write can start,
 *                       invalidate, land and end between the check key and the check, which then
 *                       finds nothing while the read holds the old data it will insert;
 *   BACKING    read the backing versions of the missed blocks (plus the bounce-buffer copy of a miss
 *              that will be inserted, if enabled);
 *   INSERT     replace-insert: each missed block whose entry is still this read's check key becomes
 *              valid with the version read; any other entry is a miss collision (nothing inserted
 *              there). A bypassing read inserts nothing.
 * The check's granularity is an option: chunk (the counters overlapping the missed range, the
 * design as described) or page (every counter of the tracking pages the range touches: a bypass
 * whenever any write is in flight in the same 64 GiB with the defaults).
 *
 * Oracle. A read that returns, for some block, a version older than completed[b] as it was when the
 * read began is a stale read. At quiescence every valid cache entry must equal the backing version
 * (pyb_cd_stale_cached_blocks).
 *
 * Why placements miss and after cannot miss a write W whose invalidation of block b preceded the
 * read R's check key on b (the argument the fix rests on; the explorer checks the protocol on small
 * bounds under sequential consistency, each step atomic; steps 3-4 are about the memory model):
 *   1. W calls pyb_tracker_start before it invalidates, and INVALIDATE writes cache[b] inside the
 *      node lock L(b) and moves the node's sequence. W's counter increment is sequenced before W's
 *      unlock of L(b).
 *   2. after: R's CHECK_KEY takes L(b) after W released it, so W's unlock synchronises with R's
 *      lock: W's increment happens-before R's CHECK. miss: R's CHECK runs before CHECK_KEY, but R's
 *      CHECK_KEY succeeded, so the node's sequence did not move between R's LOOKUP and CHECK_KEY:
 *      W's INVALIDATE, which preceded R's CHECK_KEY, also preceded R's LOOKUP. So W released L(b) before R's LOOKUP took it, and W's increment
 *      happens-before R's CHECK, which follows the LOOKUP. Without the restart this fails: W can
 *      start and invalidate between R's LOOKUP and CHECK_KEY, after R's check found nothing.
 *   3. R's CHECK reads the counter (under the page or global lock, or with an acquire load in the
 *      atomic variant). By write-read coherence a read that happens-after a modification returns
 *      that modification or a later one in the counter's modification order. Every decrement in that
 *      order belongs to a write whose increment precedes it (a start is sequenced before its end and
 *      both modify the same counter, invariant I1 of pyb_tracker.h), so the value R reads is at
 *      least the number of writes started and not ended in that prefix, W included: non-zero unless
 *      W has already ended. Exceptions are exactly the tracker's open questions: an untracked start
 *      whose end steals W's increment, and a wrapped or clamped counter.
 *   4. If W had ended, R must read W's data. W's LAND store is sequenced before pyb_tracker_end,
 *      which releases (pyb_tracker.h, "Ordering for callers"), and R's pyb_tracker_is_active
 *      acquires. R's check read a counter value in the release sequence headed by W's decrement
 *      (every modification is a read-modify-write, C11 5.1.2.4), so R's check synchronises with W's
 *      end and W's LAND happens-before R's BACKING load: R reads W's version or a newer one.
 *   What guards steps 3-4 is the release/acquire pairing named in the code (pyb_tracker_end,
 *   pyb_tracker_is_active, and the release/acquire of backing[] and completed[]) and review against
 *   this argument; no test on x86 can catch a weakened acquire there. x86 is TSO: a relaxed load
 *   compiles to the same instruction as an acquire load and the hardware does not reorder loads with
 *   loads. ThreadSanitizer does track the orders of atomic operations, but it reports races only on
 *   plain (non-atomic) accesses, and every shared field R reads after its check (backing[],
 *   completed[]) is atomic, so a missing happens-before edge there leaves nothing for it to report.
 *   The explorer runs every step as one atomic, sequentially consistent action. A weakly ordered
 *   machine (arm64, POWER) running the race stress is the only place the pairing is exercised.
 *   The weakest plausible mistake in step 1, a start whose increment becomes visible only after the
 *   invalidation (the tracking call placed after bch_data_invalidate, or an increment published in
 *   a way the invalidation's unlock does not order, such as a deferred per-CPU batch), is a
 *   deliberately broken variant compiled only into csrc/tests/test_cachedev.c (PYB_CD_TEST_HOOKS):
 *   its explorer run must find a stale read, the correct build none.
 */
#ifndef PYB_CACHEDEV_H
#define PYB_CACHEDEV_H

#include <stdint.h>

#include "pyb_atomic.h"
#include "pyb_ops.h"
#include "pyb_tracker.h"

#define PYB_CD_MAX_READ_BLOCKS 64

/* Cache index entries: the low 2 bits are the tag, the rest the payload. */
#define PYB_CD_EMPTY 0ull
#define PYB_CD_TAG_CHECK 1ull
#define PYB_CD_TAG_VALID 2ull
#define PYB_CD_TAG(e) ((e) & 3ull)
#define PYB_CD_PAYLOAD(e) ((e) >> 2)

/* Where a read consults the tracker (see above). PYB_CHECK_BEFORE is the old name of ENTRY. */
typedef enum pyb_cd_check_placement {
    PYB_CHECK_AFTER = 0,
    PYB_CHECK_ENTRY = 1,
    PYB_CHECK_MISS = 2,
    PYB_CHECK_READ_DONE = 3,
    PYB_CHECK_BEFORE = PYB_CHECK_ENTRY
} pyb_cd_check_placement;
/* What a read's check covers: the chunks of the missed range, or the whole tracking pages. */
typedef enum pyb_cd_check_granularity { PYB_GRAN_CHUNK = 0, PYB_GRAN_PAGE = 1 } pyb_cd_check_granularity;
typedef enum pyb_cd_delay_mode { PYB_DELAY_SPIN = 0, PYB_DELAY_YIELD = 1 } pyb_cd_delay_mode;

/* What a write is (pyb_cd_write.kind), and which writes the tracker counts (pyb_cd_config.track). */
typedef enum pyb_cd_write_kind {
    PYB_WK_BYPASS = 0,
    PYB_WK_WRITETHROUGH = 1,
    /* A discard (REQ_OP_DISCARD): a bypass write in every step. check_should_bypass sends it to the
     * bypass branch (drivers/md/bcache/request.c:371-373 in 6.12) and cached_dev_write forces
     * s->iop.bypass back on for it even after a writeback overlap turned it off (:1007-1008), so it
     * takes the branch where the v2/v3 start sits (:1019-1027), invalidates (bch_data_insert with
     * bypass) and ends in cached_dev_write_complete (:1060-1062). Its LAND is the backing discard (new contents,
     * a new version). A backing device without discard skips the submission (:1021-1023) but still
     * invalidates and completes: the model's LAND then stands for nothing landing later than the
     * invalidation, which is no harder for a read than a landing write. */
    PYB_WK_DISCARD = 2,
    /* A write submitted while the cached device has no cache set: cached_dev_get fails and the bio
     * goes to detached_dev_do_request (request.c:1210, :1231-1234; :1101-1133), straight to the backing device,
     * with no tracker call (the tracker's start and end sit in cached_dev_write and its completion)
     * and no cache step: INVALIDATE does nothing. bch_cached_dev_attach does not wait for such bios
     * (drivers/md/bcache/super.c:1196-1342: it sets dc->count at :1292 and returns), so one can still
     * be in flight once the device caches again. Counted only under track "all" (the fix to ask
     * about: the detached path calling the tracker too). */
    PYB_WK_DETACHED = 3
} pyb_cd_write_kind;
typedef enum pyb_cd_track { PYB_TRACK_BYPASS = 0, PYB_TRACK_INVALIDATIONS = 1, PYB_TRACK_ALL = 2 } pyb_cd_track;
/* When a bypass write invalidates its range (pyb_cd_config.invalidate): at submission (0, the kernel's
 * order) or once its backing write has landed (the v1 approach). */
typedef enum pyb_cd_invalidate { PYB_INV_AT_SUBMIT = 0, PYB_INV_AFTER_WRITE = 1 } pyb_cd_invalidate;
/* A writethrough write's cache allocation (pyb_cd_write.alloc): drawn from the device at START, or
 * decided by the caller before START. */
enum { PYB_CD_ALLOC_DRAW = 0, PYB_CD_ALLOC_OK = 1, PYB_CD_ALLOC_FAIL = 2 };

/* Write steps (the value of pyb_cd_write.step is the next step to run). They run in this order, except
 * for a write with late set (invalidate after-write): START, LAND, INVALIDATE, END. */
enum { PYB_W_START = 0, PYB_W_INVALIDATE, PYB_W_LAND, PYB_W_END, PYB_W_DONE };
/* pyb_cd_write_try_start's return when a tracker counter is at its maximum under overflow "wait". */
#define PYB_W_BLOCKED (-1)
/* Read steps. */
enum { PYB_R_LOOKUP = 0, PYB_R_CHECK, PYB_R_CHECK_KEY, PYB_R_BACKING, PYB_R_INSERT, PYB_R_DONE };

typedef struct pyb_cd_config {
    uint64_t device_size;    /* bytes, a positive multiple of block_size */
    uint32_t block_size;     /* a power of two >= 512 */
    uint32_t region_blocks;  /* blocks per cache-index node (lock and sequence), a power of two >= 1 */
    pyb_tracker *tracker;    /* the lab's tracker, or NULL; not owned; its device size must be >=
                                device_size */
    pyb_ops_tracker ops;     /* used when tracker is NULL: any tracker through its vtable (a loaded
                                patch, csrc/pyb_kpatch.h); not owned. ops.ops NULL and tracker NULL =
                                no tracking (the unpatched kernel). A tracker without
                                PYB_OPS_CAN_RESUME: START, END and CHECK are one call each (split
                                ignored), START may sleep inside the call (never call a step holding
                                the GIL), granularity must be chunk, ctx_size <= sizeof(pyb_ctx) */
    int check;               /* pyb_cd_check_placement: where a read consults the tracker */
    int delay_mode;          /* pyb_cd_delay_mode: how pyb_cd_write waits before LAND */
    uint64_t write_delay_ns; /* the dm-delay analogue: time a bypass write's data takes to land */
    int bounce_copy;         /* 1: a read miss that will insert copies its data once (bcache copies the
                                bounce buffer into the caller's bio); a bypassing read does not */
    int no_restart;          /* 1: CHECK_KEY ignores a moved node sequence (no -EINTR restart); 0 =
                                the kernel's behaviour */
    int granularity;         /* pyb_cd_check_granularity */
    int split_tracker_calls; /* 1: START, END and CHECK run one tracker lock hold per step (one page
                                for the lock variants, one chunk for atomic) and START never blocks
                                (the explorer); 0: one tracker call per step */
    int track;               /* pyb_cd_track: which writes call the tracker (0 = bypass, the v2 patch) */
    uint64_t cache_alloc_fail; /* K > 0: the K-th cache allocation drawn by a writethrough write's START
                                  (counted per device from 1, reset by pyb_cd_reset) fails; 0 = never */
    int invalidate;          /* pyb_cd_invalidate: when a bypass write's INVALIDATE runs (0 = at submit) */
} pyb_cd_config;

/* Statistics of one context (plain fields: owned by one thread) and of the device (folded). */
typedef struct pyb_cd_stats {
    uint64_t reads, read_hits, read_misses, read_bypasses, cache_inserts, blocks_inserted;
    uint64_t miss_collisions, stale_reads, writes, untracked_writes, bounce_bytes;
    uint64_t tracker_checks;     /* CHECK steps run (entry: one per read; miss: one per missing LOOKUP) */
    uint64_t check_key_restarts; /* CHECK_KEY found a moved node sequence (-EINTR) */
    uint64_t writethrough_writes;    /* writes (counted in `writes`) that were writethrough */
    uint64_t writethrough_fallbacks; /* writethrough inserts that failed allocation and invalidated */
} pyb_cd_stats;

typedef struct pyb_cachedev pyb_cachedev;

/* A thread's context: its tracker context, its check-key tokens and its statistics. */
typedef struct pyb_cd_ctx {
    pyb_ctx tctx;        /* the tracker's per-caller context (a pyb_ctx for the lab's; for another
                            tracker its ctx_size bytes at the start of this field) */
    uint64_t token_base; /* this context's token range: [token_base, token_base + 2^32) */
    uint64_t token_seq;
    pyb_cd_stats stats;
    unsigned char bounce[4096]; /* destination of the bounce copy */
} pyb_cd_ctx;

/* A write in progress (bypass or writethrough: set kind and alloc after pyb_cd_write_init). */
typedef struct pyb_cd_write {
    uint64_t blk, nblk; /* blocks [blk, blk + nblk) */
    int kind;           /* pyb_cd_write_kind (init: bypass) */
    int alloc;          /* writethrough: PYB_CD_ALLOC_* (init: draw from the device's cache_alloc_fail) */
    int fallback;       /* set by START: the writethrough insert's allocation fails -> it invalidates */
    int counted;        /* set by START: the tracker counts this write (track); else neither the
                           tracker's start nor its end is called */
    int late;           /* set by START: INVALIDATE runs after LAND (a bypass write under invalidate
                           after-write); the step order is then START, LAND, INVALIDATE, END */
    uint64_t version;   /* set by START */
    uint64_t cursor;    /* split_tracker_calls: byte offset of the next tracker call of START/END */
    int step;           /* next step: PYB_W_* */
    int untracked;      /* START left part of the range untracked (allocation failure) */
    int blocked;        /* split_tracker_calls: the last START step found its counter full under
                           overflow "wait" and did nothing (the step is not enabled until an end) */
    uint64_t resume;    /* after PYB_W_BLOCKED: the byte offset the tracker start resumes from (the
                           chunks before it are counted) */
    int wait_page;      /* after PYB_W_BLOCKED: the wait is for a mempool page, not counter room */
    int timed_out;      /* START's wait passed its bound: the start was undone, step is PYB_W_DONE and
                           no other step ran (pyb_cd_write_abandon) */
    int error;          /* a PYB_OPS_E* result of one of its tracker calls (0 = none). At START: step
                           is PYB_W_DONE and no other step ran; at END: the write still completed */
} pyb_cd_write;

/* A read in progress. */
typedef struct pyb_cd_read {
    uint64_t blk, nblk; /* blocks [blk, blk + nblk), nblk <= PYB_CD_MAX_READ_BLOCKS */
    uint64_t token;     /* this read's check-key token */
    uint64_t miss;      /* bit i: block blk + i missed at LOOKUP */
    uint64_t cursor;    /* split_tracker_calls: byte offset of the next tracker call of CHECK */
    uint64_t floor[PYB_CD_MAX_READ_BLOCKS];   /* completed[b] when the read began */
    uint64_t version[PYB_CD_MAX_READ_BLOCKS]; /* the version returned for each block */
    uint64_t seq[PYB_CD_MAX_READ_BLOCKS];     /* the sequence of block blk + i's node at LOOKUP */
    int step;      /* next step: PYB_R_* */
    int began;     /* the read's first step has run (the oracle's floor is taken) */
    int looked;    /* LOOKUP has run at least once */
    int checked;   /* the tracker check has run (since the last restart, for "miss") */
    int active;    /* the tracker check found an active write: bypass */
    int keyed;     /* CHECK_KEY placed the check keys */
    int backed;    /* BACKING has read the missed blocks (read-done checks after it) */
    int restarts;  /* CHECK_KEY found a moved sequence and sent the read back to LOOKUP */
    int hit;       /* every block was valid at LOOKUP */
    int inserted;  /* blocks inserted by INSERT */
    int collided;  /* blocks whose check key was gone at INSERT */
    int stale;     /* blocks returned older than their floor */
    int error;     /* a PYB_OPS_E* result of its tracker check (0 = none); the read then bypassed */
} pyb_cd_read;

/* Validate cfg and build a device. Returns 0, -EINVAL or -ENOMEM. */
int pyb_cd_create(const pyb_cd_config *cfg, pyb_cachedev **out);
void pyb_cd_destroy(pyb_cachedev *d);

uint64_t pyb_cd_n_blocks(const pyb_cachedev *d);
uint32_t pyb_cd_block_size(const pyb_cachedev *d);
/* The lab tracker in use, or NULL (none, or another tracker: see pyb_cd_ops). */
pyb_tracker *pyb_cd_tracker(const pyb_cachedev *d);
/* The tracker in use as a vtable (ops NULL = none); the lab's appears as pyb_lab_ops. */
pyb_ops_tracker pyb_cd_ops(const pyb_cachedev *d);

/* Replace the tracker (NULL = none). Only at quiescence: no operation in flight. */
void pyb_cd_set_tracker(pyb_cachedev *d, pyb_tracker *t);
/* The same for any tracker (t.ops NULL = none; pyb_lab_ops selects the lab path). Returns 0, or
 * -EINVAL (the device's granularity is page and t is not the lab's, or its ctx_size is too large)
 * with nothing changed. Also clears the device's error. */
int pyb_cd_set_ops(pyb_cachedev *d, pyb_ops_tracker t);
/* The first PYB_OPS_E* result any tracker call of the device returned (0 = none). Operations go on
 * (the tracker refuses them: PYB_OPS_EBROKEN), and every driver stops at its next look. */
int pyb_cd_error(const pyb_cachedev *d);
/* Change which writes the tracker counts (pyb_cd_track; the config's `track`). Only at quiescence:
 * no write in flight, so that every counted START meets its END under the same rule. Returns 0, or
 * -EINVAL (not a pyb_cd_track) with nothing changed. */
int pyb_cd_set_track(pyb_cachedev *d, int track);
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
/* The step a read will run next (PYB_R_*). */
int pyb_cd_read_next(const pyb_cachedev *d, const pyb_cd_read *r);

/* START without waiting (the Python layer's first try, before it waits in slices): as
 * pyb_cd_write_step at PYB_W_START, except that a tracker counter at its maximum under overflow
 * "wait" makes it return PYB_W_BLOCKED with the step still PYB_W_START and w->resume set; call it
 * again to go on, or give the write up by ending [first byte, w->resume) on the tracker (and never
 * running its other steps). Returns PYB_W_START once the start is complete. */
int pyb_cd_write_try_start(pyb_cachedev *d, pyb_cd_ctx *c, pyb_cd_write *w);
/* The same, waiting in the tracker (pyb_tracker_start_until) until the absolute pyb_now_ns()
 * deadline_ns (0 = none): PYB_W_BLOCKED when it passed first, w->resume and w->wait_page set. For
 * callers that wait in slices and check for signals between them (the Python layer). */
int pyb_cd_write_start_until(pyb_cachedev *d, pyb_cd_ctx *c, pyb_cd_write *w, uint64_t deadline_ns);
/* Give up a write whose START did not complete (after PYB_W_BLOCKED): undo exactly the increments its
 * start made, [first byte, w->resume) minus what it left uncounted (pyb_tracker_undo_start with the
 * start's record in c), set w->timed_out and w->step = PYB_W_DONE; none of its other steps runs and
 * it is not counted as a write. Returns pyb_tracker_undo_start's result (1: the start's record had
 * overflowed and chunks from c->tctx.rec.lost_from on were left counted). */
int pyb_cd_write_abandon(pyb_cachedev *d, pyb_cd_ctx *c, pyb_cd_write *w);
/* The steps after START of a whole write, as pyb_cd_write_run runs them: pyb_cd_write_submit's, the
 * configured delay, then the rest (INVALIDATE, delay, LAND, END; after-write: delay, LAND, INVALIDATE,
 * END). Returns the version; 0 with nothing run for a tracker without PYB_OPS_CAN_RESUME (a patch:
 * its END never runs on the submitting thread; use pyb_cd_write_complete_on_thread). */
uint64_t pyb_cd_write_finish(pyb_cachedev *d, pyb_cd_ctx *c, pyb_cd_write *w);
/* After a complete START: the steps the submitting thread runs before the backing write lands
 * (INVALIDATE, or none for a late write). The completion then waits the delay and runs the steps
 * left (LAND, END; late: LAND, INVALIDATE, END) until w->step is PYB_W_DONE. Every driver that splits
 * a write between a submitter and a completion uses this, so the order follows the device's
 * invalidate. */
void pyb_cd_write_submit(pyb_cachedev *d, pyb_cd_ctx *c, pyb_cd_write *w);
/* A write's tracker start done by its driver: count [off, off + len) on t through ctx, waiting as
 * the driver sees fit, and return the PYB_START_* bits of the complete start (0 or
 * PYB_START_UNTRACKED), or -1 if it gave the write up with nothing of it left counted. */
typedef int (*pyb_cd_start_fn)(void *arg, pyb_tracker *t, pyb_ctx *ctx, uint64_t off, uint64_t len);
/* START for the native drivers, which own their waits (pyb_driver_start_bounded): as
 * pyb_cd_write_step at PYB_W_START, except that the tracker start is start(arg, ...). Returns
 * PYB_W_START once the start is complete, or -1 if start gave the write up: the write is then
 * finished (step PYB_W_DONE) and none of its other steps may run. */
int pyb_cd_write_start_with(pyb_cachedev *d, pyb_cd_ctx *c, pyb_cd_write *w, pyb_cd_start_fn start, void *arg);
/* A completion on a thread of its own: a new thread runs, with whole = 1, the configured delay and
 * every step left (what pyb_cd_write_finish runs after pyb_cd_write_submit: LAND and END, or for a
 * late write LAND, INVALIDATE and END), with whole = 0 the write's next step only;
 * the caller waits for it (c is that thread's for the duration; the join orders both ways). For the
 * Python API with a tracker that is not the lab's: a patch's write_end must never run on the thread
 * that submitted (it runs in simulated hard-irq context, as an interrupt would). Returns 0, or the
 * pthread_create error with nothing run: the write's start then stays counted and the device is
 * broken (pyb_cd_error is PYB_OPS_EBROKEN). */
int pyb_cd_write_complete_on_thread(pyb_cachedev *d, pyb_cd_ctx *c, pyb_cd_write *w, int whole);
/* The configured wait before LAND: the time the backing write is in flight (pyb_cd_write_run's; the
 * drivers wait it on their completion threads). */
uint64_t pyb_cd_write_delay_ns(const pyb_cachedev *d);
int pyb_cd_write_delay_mode(const pyb_cachedev *d);

/* Whole operations: a bypass write with the configured delay before LAND (returns
 * its version, or 0 if its START waited past the tracker's wait_timeout_ns: then the start was
 * undone and nothing else ran, as pyb_cd_write_abandon; 0 with nothing run for a tracker without
 * PYB_OPS_CAN_RESUME, as pyb_cd_write_finish), and a read. */
uint64_t pyb_cd_write_run(pyb_cachedev *d, pyb_cd_ctx *c, uint64_t blk, uint64_t nblk);
void pyb_cd_read_run(pyb_cachedev *d, pyb_cd_ctx *c, pyb_cd_read *r, uint64_t blk, uint64_t nblk);

#ifdef PYB_CD_TEST_HOOKS
/* Test builds only (csrc/tests/test_cachedev.c): when non-zero, a write's tracker start runs at the
 * beginning of its LAND step instead of in START, i.e. its increment becomes visible only after its
 * invalidation - the deliberately broken ordering the test must catch. Set only at quiescence. */
extern int pyb_cd_test_late_increment;
/* When non-zero, pyb_cd_write_complete_on_thread fails as if pthread_create returned this error. */
extern int pyb_cd_test_fail_thread_create;
#endif

/* Wait ns nanoseconds by spinning or yielding. */
void pyb_cd_delay(int mode, uint64_t ns);

/* Inspection (take the region lock; safe at any time). */
uint64_t pyb_cd_cache_entry(pyb_cachedev *d, uint64_t blk);
uint64_t pyb_cd_backing_version(pyb_cachedev *d, uint64_t blk);
uint64_t pyb_cd_completed_version(pyb_cachedev *d, uint64_t blk);
/* The sequence of the node holding block blk. */
uint64_t pyb_cd_node_seq(pyb_cachedev *d, uint64_t blk);
/* Valid cache entries whose version differs from the backing version. Meaningful at quiescence. */
uint64_t pyb_cd_stale_cached_blocks(pyb_cachedev *d);
/* Valid cache entries. */
uint64_t pyb_cd_cached_blocks(pyb_cachedev *d);
void pyb_cd_get_stats(pyb_cachedev *d, pyb_cd_stats *out);

#endif /* PYB_CACHEDEV_H */
