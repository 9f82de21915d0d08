/*
 * pyb_tracker.h - in-flight bypass-write tracking per chunk (the bcache v2 design, md-bitmap style).
 *
 * Geometry. The backing device is cut into chunks of chunk_size bytes (a power of two, default 32 MiB);
 * each chunk has one counter of counter_bits bits (16, 32 or 64). Counters live in 4 KiB pages
 * allocated lazily, on the start path only, so a page holds 4096*8/counter_bits counters
 * (2048 u16 counters = 64 GiB of device per page with the defaults). A directory of 16-byte page
 * slots, one per page, is allocated at construction. Memory is therefore exactly
 * 16 * slots idle and 16 * slots + 4096 * allocated pages in use; both are counted from the real
 * allocations (pyb_tracker_get_memory), not derived from this formula.
 *
 * Sync variants.
 *   PYB_SYNC_GLOBAL  one pthread spinlock guards every slot and every counter.
 *   PYB_SYNC_PAGE    each slot's own pthread spinlock guards that slot and its page's counters.
 *   PYB_SYNC_ATOMIC  no lock on any path: counters are C11 atomics, pages are installed by CAS,
 *                    and pages are freed only by pyb_tracker_reclaim (protocol below).
 * The lock variants allocate with the lock dropped and re-check after re-taking it (the loser of a
 * race frees its page), as md-bitmap's checkpage does, and free a page eagerly when its last
 * non-zero counter drops to zero.
 *
 * Slot word. `word` holds 0 (no page), a page pointer (calloc'ed, so bit 0 is clear), or, when the
 * page is hijacked, PYB_HIJACK_TAG (bit 0) with two 31-bit counters: half 0 in bits 1..31 covers the
 * first half of the page's chunks, half 1 in bits 32..62 the second half. A hijacked half saturates at
 * min(2^counter_bits - 1, 2^31 - 1).
 *
 * Invariants.
 *   I1 (symmetry) A page's storage (page or hijacked halves) cannot change while any of its counters
 *      is non-zero: pages are freed only when all counters are zero, and a hijacked slot reverts to
 *      empty only when both halves are zero. So an end whose start was tracked decrements the very
 *      storage its start incremented. (A start that went untracked breaks this: its end can
 *      decrement another write's increment - the "stolen increment" of the v2 cover letter.)
 *   I2 An end never drives a counter below zero: a decrement that finds zero is refused and counted
 *      as an underflow.
 *   I3 is_active and count never allocate and never modify a counter.
 *
 * Atomic-variant reclaim protocol. The slot's `state` word counts "users" (contexts that have
 * entered the slot: a start, end or check in progress, or a batch that pinned it) and has a DEAD
 * bit. Every operation enters a slot with fetch_add(state, 1, acquire); if the returned value has DEAD set, it undoes the add and
 * waits for DEAD to clear, then retries. It leaves with fetch_sub(state, 1, release). Reclaim frees a
 * page only after CAS(state, 0 -> DEAD, acq_rel) succeeds. All of these are read-modify-writes of one
 * atomic object, so they are totally ordered: either a user's fetch_add precedes the reclaimer's CAS
 * (the CAS then sees users != 0 and the slot is skipped) or it follows it (the user sees DEAD and does
 * not touch the page). While DEAD is held no user is inside, and the acquire of the CAS synchronises
 * with every user's releasing fetch_sub, so the reclaimer sees every counter write; it frees the page
 * only if all counters are zero, stores word = 0, then clears DEAD with
 * fetch_and(state, ~DEAD, release) (an RMW: a user that saw DEAD may not have backed out yet). A user
 * that entered after that RMW acquires it and sees word = 0, never the freed pointer. The only wait
 * on the atomic variant's paths is behind a reclaimer holding DEAD over one idle page (a bounded scan
 * and a free), never behind another start, end or check.
 *
 * Ordering for callers (every variant). pyb_tracker_end releases and pyb_tracker_is_active acquires:
 * a check that reads a counter value written by an end's decrement, or by any later modification of
 * that counter, synchronises with the end, so whatever the ending thread did before pyb_tracker_end
 * happens-before whatever the checking thread does after pyb_tracker_is_active. The lock variants get
 * this from the lock (unlock releases, lock acquires); the atomic variant decrements with a releasing
 * CAS (or the slot word's acq_rel CAS when hijacked) and checks with acquire loads. Every counter
 * modification is a read-modify-write, so later ones continue the end's release sequence.
 * pyb_cachedev.h (step 4 of its argument) relies on this.
 *
 * Overflow at a counter's maximum: wrap (modular, the posted u16), clamp (saturate, drop the
 * increment) or wait (block until an end makes room, md-bitmap's overflow_wait; no count is ever
 * lost). Waiters spin briefly then sleep on a futex; an end wakes sleepers only when the counter it
 * decremented was at the maximum and someone is waiting. With 64-bit counters the maximum cannot be
 * reached (each in-flight write is a live object in memory), so the atomic variant increments 64-bit
 * counters with a plain fetch_add under every policy.
 *
 * Allocation failure on the start path: untracked (skip that page's chunks; the start reports
 * "untracked"), hijack (use the slot word as two coarse counters) or pool (take a page reserved at
 * construction; hijack when the pool is empty).
 *
 * Statistics are accumulated in the caller's pyb_ctx and folded into the tracker by
 * pyb_tracker_ctx_done, so the hot path writes no shared cache line for them; gauges (pages,
 * bytes, hijacked pages, pool pages in use) are updated with relaxed atomics on the rare
 * allocation and free paths.
 */
#ifndef PYB_TRACKER_H
#define PYB_TRACKER_H

#include <stddef.h>
#include <stdint.h>

#include "pyb_atomic.h"
#include "pyb_fault.h"

#define PYB_PAGE_SIZE 4096u
#define PYB_HIJACK_TAG 1ull
#define PYB_SLOT_DEAD 0x80000000u

typedef enum pyb_sync { PYB_SYNC_GLOBAL = 0, PYB_SYNC_PAGE = 1, PYB_SYNC_ATOMIC = 2 } pyb_sync;
typedef enum pyb_overflow { PYB_OVERFLOW_WRAP = 0, PYB_OVERFLOW_CLAMP = 1, PYB_OVERFLOW_WAIT = 2 } pyb_overflow;
typedef enum pyb_alloc_failure {
    PYB_ALLOC_UNTRACKED = 0,
    PYB_ALLOC_HIJACK = 1,
    PYB_ALLOC_POOL = 2
} pyb_alloc_failure;

/* Return bits of pyb_tracker_start. */
#define PYB_START_UNTRACKED 1 /* some chunk of the range was left untracked (allocation failure) */
#define PYB_START_WOULD_BLOCK 2 /* may_block was 0 and a counter is at its maximum under "wait" */

typedef struct pyb_slot {
    _Atomic uint64_t word;  /* lock variants: the lock; atomic: CAS, acquire/release (see above) */
    _Atomic uint32_t state; /* lock variants: non-zero counters on the page, under the lock;
                               atomic: users | PYB_SLOT_DEAD (reclaim protocol) */
    pyb_spinlock lock;      /* page variant only: guards word, state and the page's counters */
} pyb_slot;

_Static_assert(sizeof(pyb_slot) == 16, "a page slot is 16 bytes (the seed's memory table)");

/* Per-caller statistics accumulator (plain fields: owned by one thread). */
typedef struct pyb_tstats {
    uint64_t starts, ends, untracked_writes, alloc_failures, underflows, hijack_events;
    uint64_t overflow_waits, overflow_clamps, overflow_wraps;
} pyb_tstats;

/*
 * A caller's context for a sequence of operations (one Python call, one batch, one stress thread's
 * run): its statistics accumulator and, for the atomic variant, the slot it has "pinned" (entered
 * once and not yet left), so that a batch of operations on one page pays the slot's enter/leave
 * read-modify-writes once rather than per operation. Owned by one thread. Initialise with
 * PYB_CTX_INIT and finish with pyb_tracker_ctx_done, which unpins and folds the statistics in.
 */
typedef struct pyb_ctx {
    pyb_tstats stats;
    int64_t pinned; /* atomic variant: slot index entered by this context, or -1 */
    int carry;      /* PYB_START_UNTRACKED from a start that returned WOULD_BLOCK, for its resume */
} pyb_ctx;

#define PYB_CTX_INIT {{0, 0, 0, 0, 0, 0, 0, 0, 0}, -1, 0}

typedef struct pyb_tracker_stats {
    uint64_t starts, ends, untracked_writes, alloc_failures, underflows, hijack_events;
    uint64_t overflow_waits, overflow_clamps, overflow_wraps;
    uint64_t hijacked_pages, pool_pages_used, pages_allocated, pages_freed;
} pyb_tracker_stats;

typedef struct pyb_tracker_memory {
    uint64_t directory_bytes, page_bytes, total_bytes, peak_bytes, pages, peak_pages;
} pyb_tracker_memory;

typedef struct pyb_tracker_config {
    uint64_t device_size;  /* bytes, > 0 */
    uint64_t chunk_size;   /* power of two >= 512 */
    int counter_bits;      /* 16, 32 or 64 */
    int sync;              /* pyb_sync */
    int overflow;          /* pyb_overflow */
    int alloc_failure;     /* pyb_alloc_failure */
    uint32_t pool_pages;   /* pages reserved at construction (alloc_failure == PYB_ALLOC_POOL) */
    pyb_fault *fault;      /* applied to start-path page allocations; may be NULL; not owned, must
                              outlive the tracker */
    int lock_mode;         /* lock variants: PYB_LOCK_PTHREAD (default, 0) or PYB_LOCK_SPIN_YIELD */
} pyb_tracker_config;

typedef struct pyb_tracker pyb_tracker;

/* Validate cfg and build a tracker. Returns 0, -EINVAL (bad config) or -ENOMEM. */
int pyb_tracker_create(const pyb_tracker_config *cfg, pyb_tracker **out);
void pyb_tracker_destroy(pyb_tracker *t);

/* Geometry. */
uint64_t pyb_tracker_n_chunks(const pyb_tracker *t);
uint64_t pyb_tracker_n_slots(const pyb_tracker *t);
uint64_t pyb_tracker_chunks_per_page(const pyb_tracker *t);
uint64_t pyb_tracker_device_size(const pyb_tracker *t);
uint64_t pyb_tracker_counter_max(const pyb_tracker *t);

/*
 * The operations take byte ranges the caller has validated: len > 0 and off + len <= device_size.
 *
 * pyb_tracker_start: a bypass write of [off, off+len) begins; increments every chunk it overlaps,
 * page by page in ascending order. Returns 0 if every chunk was tracked, or PYB_START_* bits. With
 * may_block == 0 and a counter at its maximum under "wait", it stops before that counter and returns
 * PYB_START_WOULD_BLOCK with *resume set to the byte offset from which to call again (every chunk
 * before it has been counted); with may_block != 0 it waits (the caller must not hold the GIL).
 */
int pyb_tracker_start(pyb_tracker *t, pyb_ctx *ctx, uint64_t off, uint64_t len, int may_block,
                      uint64_t *resume);
/* The write of [off, off+len) completed: decrement every chunk it overlaps (refusing at zero). */
void pyb_tracker_end(pyb_tracker *t, pyb_ctx *ctx, uint64_t off, uint64_t len);
/* Is any chunk overlapping [off, off+len) counted? */
int pyb_tracker_is_active(pyb_tracker *t, pyb_ctx *ctx, uint64_t off, uint64_t len);
/* Unpin (atomic variant) and fold ctx's statistics into the tracker; ctx is reusable afterwards. */
void pyb_tracker_ctx_done(pyb_tracker *t, pyb_ctx *ctx);
/* Unpin only, leaving the statistics in ctx for a caller that keeps its own (the Python layer's
 * single calls fold them into counters guarded by the GIL instead of the tracker's atomics). */
void pyb_tracker_ctx_unpin(pyb_tracker *t, pyb_ctx *ctx);

/* The counter covering byte off (the coarse half counter if its page is hijacked). */
uint64_t pyb_tracker_count(pyb_tracker *t, uint64_t off);
/* Copy every chunk's counter into out[n_chunks] (a hijacked page reports its half counters). */
void pyb_tracker_counts(pyb_tracker *t, uint64_t *out);
/* Free pages whose counters are all zero; returns the number freed. */
uint64_t pyb_tracker_reclaim(pyb_tracker *t);

void pyb_tracker_get_stats(pyb_tracker *t, pyb_tracker_stats *out);
void pyb_tracker_get_memory(pyb_tracker *t, pyb_tracker_memory *out);

#endif /* PYB_TRACKER_H */
