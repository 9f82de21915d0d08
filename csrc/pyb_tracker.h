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
 * race frees its page), as md-bitmap's checkpage does.
 *
 * Page lifetime (free_policy). PYB_FREE_EAGER: the lock variants free a page when its last non-zero
 * counter drops to zero. PYB_FREE_DEFERRED: they keep it until pyb_tracker_reclaim (md's daemon).
 * The atomic variant frees only in pyb_tracker_reclaim under either setting (freeing under
 * lockless readers needs the reclaim protocol below). Which one the posted patch does is not known.
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
 * Atomic-variant reclaim protocol (RCU-style, epoch based, written here). Readers never write a
 * shared line: is_active and count load the slot word and the counters; start and end add only the
 * read-modify-write of the counter (or of the word, to install or hijack). Pages are freed after
 * grace periods instead of behind a users count.
 *   Read side. Each thread has a reader record (thread-local, on its own cache line, registered once
 *   in a process-wide list): `ctr` = 0 outside a section, else the grace-period number it announced.
 *   A context pins (rcu_read_lock) at its first operation and unpins (rcu_read_unlock) in
 *   pyb_tracker_ctx_unpin/ctx_done; the thread is in a section while any of its contexts is pinned.
 *   To announce number g: store(ctr, g, release) then a seq_cst fence. Every operation begins with
 *   a quiescent check: it holds no page pointer from an earlier operation, so if the global number
 *   moved it announces the new one (two loads when nothing moved). Leaving stores 0 (release).
 *   Grace period: gp = fetch_add(global, 1, acq_rel) + 1, then a seq_cst fence; it has elapsed when
 *   every other thread's ctr is 0 or >= gp (acquire loads). The reclaiming thread skips its own
 *   record: the API is not re-entrant, so it is between operations and holds no page pointer.
 *   Reclaim (serialised by a mutex), per batch of pages:
 *     1. tag: CAS(word, pg -> pg | PYB_RETIRE_TAG) for pages that look all zero;
 *     2. wait for a grace period;
 *     3. unpublish: if the page is all zero, CAS(word, pg | TAG -> 0), else untag;
 *     4. wait for a second grace period, then free the unpublished pages.
 *   A start that finds the tag cancels it, CAS(word, pg | TAG -> pg), before counting; is_active,
 *   count and end use a tagged page as it is. A grace period not over within PYB_GRACE_WAIT_NS (a
 *   thread pinned but not operating, e.g. descheduled) is not waited for: step 3 untags instead, and
 *   pages already unpublished are freed by a later reclaim (or destroy). No path of start, end or
 *   check waits for a reclaim.
 *   Proof sketch. (a) Fence pair: for a reader's announcement (fence X) and a reclaimer's grace
 *   period begun after its CAS (fence Y), either X precedes Y in the seq_cst order, and the
 *   reclaimer's load of ctr sees the announcement or a later value, so it waits for that section; or
 *   Y precedes X, and the reader's following word load sees the CAS or a later value. A reader that
 *   announced >= gp acquired the fetch_add, after which the CAS is visible too. So when a grace period
 *   begun after a CAS has elapsed, every operation that read the word before the CAS has finished,
 *   and its accesses happen-before the reclaimer (release announcement or exit, acquire load).
 *   (b) No lost count: a start increments page pg only after reading pg untagged. If it read before
 *   step 1, step 2 waited for it and step 3 sees its increment (and keeps the page) unless its end
 *   already undid it. If it read pg untagged after step 1, a start cancelled the tag, and step 3's
 *   CAS from pg | TAG fails (only reclaim tags, once per slot per pass, under the mutex: no ABA). So
 *   step 3 unpublishes only a page that holds no count, and I1 holds.
 *   (c) No use after free: after step 3's CAS the word never holds pg again (pg is not freed, so not
 *   reallocated, before step 4); a reader that loaded pg or pg | TAG did so before the CAS, so by (a)
 *   it has finished before step 4 frees pg. A decrement it makes on the all-zero page finds zero and
 *   is refused (I2), so it writes nothing.
 *   Why not liburcu: it is a system library (not a wheel dependency) that a fresh machine's pip
 *   install cannot bring, and its flavours without membarrier need the same per-section fence; the
 *   protocol above is the part we need, about 150 lines, and is checked by the Relacy model in
 *   csrc/relacy/.
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
 * counters with a plain fetch_add under every policy. The maximum is the width's unless
 * cfg->counter_max lowers it (md-bitmap keeps 16383 in 16 bits; the explorer uses 1 or 2 so that
 * overflow is a few steps away instead of 65,535 starts); a lowered 64-bit maximum takes the
 * compare-and-swap path like the narrower widths.
 *
 * Allocation failure on the start path: untracked (skip that page's chunks; the start reports
 * "untracked"), hijack (use the slot word as two coarse counters), pool (take a page reserved at
 * construction; hijack when the pool is empty) or mempool (Linux 6.12 mm/mempool.c:404-470,
 * mempool_alloc). Under mempool with cfg->gfp PYB_GFP_NOIO (a sleeping mask) a start makes the
 * kernel's sequence: the allocator (mempool's first try has no direct reclaim, __GFP_NORETRY), the
 * reserve, the allocator again (with reclaim, still __GFP_NORETRY), the reserve, then rounds: wait
 * until a refill wakes it or the round's length passes (the kernel's io_schedule_timeout(5 * HZ)), then
 * the allocator and the reserve again. It never fails and never hijacks. Under PYB_GFP_NOWAIT (no
 * direct reclaim: mempool_alloc may not sleep) it makes one allocator attempt and takes the reserve,
 * then gets NULL and leaves the page untracked, as the posted patch does with a NULL page. A page
 * freed while the reserve is below pool_pages (min_nr) goes back to it and wakes the waiters; with
 * pool_pages 0 a free never wakes anyone, so every round lasts its whole length.
 *
 * Time in rounds. The real sleep of a round is cfg->mempool_round_ns (0 = PYB_MEMPOOL_RETRY_NS, 1 ms:
 * a scaled clock, so that tests and stresses stay fast); the statistics count the rounds that ran their
 * whole length (mempool_rounds) and those a refill ended (mempool_wakeups), so that a caller converts
 * rounds into the kernel's time (5 s each) as modelled time, independent of the scaled clock.
 *
 * Bounded waits. A start with may_block waits (overflow "wait" at a full counter, or mempool with an
 * empty reserve) at most cfg->wait_timeout_ns (0 = unbounded); pyb_tracker_start_until takes an
 * absolute deadline instead. Past it the start returns PYB_START_TIMED_OUT with *resume as for
 * PYB_START_WOULD_BLOCK: the caller may call again from *resume, or undo the part before *resume
 * with pyb_tracker_undo_start, which is exact (it skips what the start recorded as not counted in
 * its pyb_ctx: untracked pages, clamped and wrapped counters).
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
/* Atomic variant: bit 1 of a page word (pages are 64-byte aligned) marks a page being retired. */
#define PYB_RETIRE_TAG 2ull
/* The longest a reclaim waits for one grace period before it gives the page back (see above). */
#define PYB_GRACE_WAIT_NS 10000000ull

typedef enum pyb_sync { PYB_SYNC_GLOBAL = 0, PYB_SYNC_PAGE = 1, PYB_SYNC_ATOMIC = 2 } pyb_sync;
typedef enum pyb_overflow { PYB_OVERFLOW_WRAP = 0, PYB_OVERFLOW_CLAMP = 1, PYB_OVERFLOW_WAIT = 2 } pyb_overflow;
typedef enum pyb_alloc_failure {
    PYB_ALLOC_UNTRACKED = 0,
    PYB_ALLOC_HIJACK = 1,
    PYB_ALLOC_POOL = 2,
    PYB_ALLOC_MEMPOOL = 3
} pyb_alloc_failure;
typedef enum pyb_free_policy { PYB_FREE_EAGER = 0, PYB_FREE_DEFERRED = 1 } pyb_free_policy;
/*
 * When a hijacked page goes back to "no page" (so that the next start tries the allocator again).
 * PYB_UNHIJACK_AT_END: the end that drains both halves reverts it (the lab's first policy).
 * PYB_UNHIJACK_ON_DECAY: md-bitmap's way. md frees or un-hijacks a page only when its count of
 * non-zero counters drops to zero (md_bitmap_checkfree, drivers/md/md-bitmap.c:311-330 in 6.12), and
 * that count is decremented only by the bitmap daemon (bitmap_daemon_work, :1581-1584), which
 * lowers a counter with no write in flight from 2 to 1 on one pass and from 1 to 0 on the next
 * (:1581-1588; an end leaves the counter at 2, :1761-1765). A start on a hijacked page never retries
 * the allocation (md_bitmap_checkpage, :257). So here: the drained page stays hijacked, the first
 * pyb_tracker_reclaim that finds both halves zero marks it (bit 63 of the word, PYB_HIJACK_DECAYED),
 * the next one reverts it to empty, and a start counted on the page in between clears the mark
 * (md's start sets the counter back above 2, :1706-1713). md's daemon runs every daemon_sleep,
 * 5 s by default (:780); here it is whoever calls reclaim.
 */
typedef enum pyb_unhijack { PYB_UNHIJACK_AT_END = 0, PYB_UNHIJACK_ON_DECAY = 1 } pyb_unhijack;
/* A hijacked word's decay mark (PYB_UNHIJACK_ON_DECAY): one reclaim pass found both halves zero. */
#define PYB_HIJACK_DECAYED (1ull << 63)

/* The default real length of one mempool round (cfg->mempool_round_ns 0): the kernel's round is
 * io_schedule_timeout(5 * HZ), 5 s (mm/mempool.c:466); the lab's clock is scaled 5000:1 by default. */
#define PYB_MEMPOOL_RETRY_NS 1000000ull
/* The kernel's round, for converting counted rounds into modelled time. */
#define PYB_MEMPOOL_KERNEL_ROUND_NS 5000000000ull

/* The allocation mask of the start path's page allocation, as far as mempool_alloc is concerned. */
typedef enum pyb_gfp { PYB_GFP_NOIO = 0, PYB_GFP_NOWAIT = 1 } pyb_gfp;

/* Return bits of pyb_tracker_start. */
#define PYB_START_UNTRACKED 1 /* some chunk of the range was left untracked (allocation failure) */
#define PYB_START_WOULD_BLOCK 2 /* may_block was 0 and the start must wait (see PYB_START_WAIT_PAGE) */
#define PYB_START_TIMED_OUT 4   /* the wait's deadline passed; *resume as for WOULD_BLOCK */
#define PYB_START_WAIT_PAGE 8   /* with WOULD_BLOCK or TIMED_OUT: the wait is for a mempool page, not
                                   for room in a counter at its maximum */

typedef struct pyb_slot {
    _Atomic uint64_t word;  /* lock variants: the lock; atomic: loads acquire, CAS acq_rel (see above) */
    _Atomic uint32_t state; /* lock variants: non-zero counters on the page, under the lock;
                               atomic: unused (0) */
    pyb_spinlock lock;      /* page variant only: guards word, state and the page's counters */
} pyb_slot;

_Static_assert(sizeof(pyb_slot) == 16, "a page slot is 16 bytes (the v2 cover letter's memory table)");

/* Per-caller statistics accumulator (plain fields: owned by one thread). */
typedef struct pyb_tstats {
    uint64_t starts, ends, untracked_writes, alloc_failures, underflows, hijack_events;
    uint64_t overflow_waits, overflow_clamps, overflow_wraps, mempool_waits, mempool_nulls;
} pyb_tstats;

/*
 * What one start left uncounted, so that undoing it is exact (pyb_tracker_undo_start): ranges of
 * chunks the start did not increment - the chunks of a page it left untracked (alloc_failure
 * "untracked"), a counter it clamped, or one it wrapped to zero (a hijacked half: the half's chunks in
 * the range). An undo decrements every chunk of the range except these, so it removes exactly the
 * increments the start made: a clamped counter keeps the other writes' counts, and a wrapped one is
 * left where the wrap put it (the wrap already lost the count of every write on it, by policy; the
 * undo neither restores it nor drives it below zero). Ranges are recorded in ascending order (a start
 * walks its range upwards) and coalesced; a start that needs more than PYB_SKIP_MAX ranges sets
 * `lost` with `lost_from` the first chunk it could not record, and the undo then leaves every chunk
 * from there on counted - too high, never too low: a read bypasses the cache (a false bypass), it
 * never reads stale data. Owned by the ctx's thread; reset by each start that is not a resume.
 */
#define PYB_SKIP_MAX 8
typedef struct pyb_skip {
    uint64_t first, last; /* absolute chunk indices, inclusive */
} pyb_skip;
typedef struct pyb_start_record {
    uint32_t n;         /* ranges in skip[] */
    uint32_t lost;      /* a range did not fit: the undo leaves chunks >= lost_from as they are */
    uint64_t lost_from;
    pyb_skip skip[PYB_SKIP_MAX];
} pyb_start_record;

/*
 * A caller's context for a sequence of operations (one Python call, one batch, one stress thread's
 * run): its statistics accumulator and, for the atomic variant, whether it is pinned (its thread is
 * in a read-side section for it, entered at its first operation and left at unpin), so that a
 * batch pays the section's entry fence once rather than per operation. Owned by one thread, which
 * must also be the one that unpins it. Initialise with PYB_CTX_INIT and finish with
 * pyb_tracker_ctx_done, which unpins and folds the statistics in.
 */
typedef struct pyb_ctx {
    pyb_tstats stats;
    int64_t pinned; /* atomic variant: address of its thread's reader record while pinned, or -1 */
    int carry;      /* from a start that returned WOULD_BLOCK or TIMED_OUT, for its resume: its
                       PYB_START_UNTRACKED bit, that it is a resume, and whether its waits were
                       already counted */
    pyb_start_record rec; /* the chunks the last start (with its resumes) did not count */
    uint64_t round_end;   /* a start whose mempool wait timed out mid-round: the round's end
                             (pyb_now_ns), so that its resume sleeps the rest of the same round with
                             no allocator attempt first; 0 = none. Owned by the ctx's thread. */
} pyb_ctx;

/* Zero-initialised apart from `pinned`: an empty record needs only n = lost = 0. */
#define PYB_CTX_INIT {{0}, -1, 0, {0, 0, 0, {{0, 0}}}, 0}

typedef struct pyb_tracker_stats {
    uint64_t starts, ends, untracked_writes, alloc_failures, underflows, hijack_events;
    uint64_t overflow_waits, overflow_clamps, overflow_wraps;
    uint64_t hijacked_pages, pool_pages_used, pages_allocated, pages_freed;
    uint64_t mempool_waits; /* starts that waited for a mempool page */
    uint64_t pool_refills;  /* freed pages that went back to the mempool reserve */
    uint64_t mempool_rounds;  /* mempool wait rounds that ran their whole length (no wake) */
    uint64_t mempool_wakeups; /* mempool wait rounds ended early by a refill's wake */
    uint64_t mempool_nulls;   /* PYB_GFP_NOWAIT mempool allocations that returned NULL */
} pyb_tracker_stats;

typedef struct pyb_tracker_memory {
    uint64_t directory_bytes, page_bytes, total_bytes, peak_bytes, pages, peak_pages;
} pyb_tracker_memory;

typedef struct pyb_tracker_config {
    uint64_t device_size;  /* bytes, in [1, 2^63] (-EINVAL otherwise) */
    uint64_t chunk_size;   /* power of two >= 512 */
    int counter_bits;      /* 16, 32 or 64 */
    int sync;              /* pyb_sync */
    int overflow;          /* pyb_overflow */
    int alloc_failure;     /* pyb_alloc_failure */
    uint32_t pool_pages;   /* pages reserved at construction (alloc_failure POOL or MEMPOOL) */
    pyb_fault *fault;      /* applied to start-path page allocations; may be NULL; not owned, must
                              outlive the tracker */
    int lock_mode;         /* lock variants: PYB_LOCK_PTHREAD (default, 0), PYB_LOCK_SPIN_YIELD, PYB_LOCK_TICKET
                              or PYB_LOCK_MCS */
    int free_policy;       /* pyb_free_policy; 0 = eager (the old behaviour) */
    uint64_t wait_timeout_ns; /* bound on each wait of a may_block start; 0 = unbounded */
    uint64_t counter_max;  /* 0 = 2^counter_bits - 1; else the counters' maximum, in [1, 2^counter_bits - 1] */
    uint64_t mempool_round_ns; /* real length of one mempool wait round; 0 = PYB_MEMPOOL_RETRY_NS */
    int gfp;               /* pyb_gfp, for alloc_failure MEMPOOL; 0 = PYB_GFP_NOIO */
    int unhijack;          /* pyb_unhijack; 0 = at the end that drains the page (the old behaviour) */
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
 * before it has been counted); with may_block != 0 it waits (the caller must not hold the GIL), each
 * wait bounded by cfg->wait_timeout_ns (PYB_START_TIMED_OUT, *resume as above). The same holds for a
 * mempool start that finds no page (PYB_START_WAIT_PAGE is then set too).
 */
int pyb_tracker_start(pyb_tracker *t, pyb_ctx *ctx, uint64_t off, uint64_t len, int may_block,
                      uint64_t *resume);
/* A blocking start whose waits end at the absolute pyb_now_ns() deadline deadline_ns (0 = none):
 * PYB_START_TIMED_OUT with *resume past it. For callers that wait in slices (the Python layer). */
int pyb_tracker_start_until(pyb_tracker *t, pyb_ctx *ctx, uint64_t off, uint64_t len, uint64_t deadline_ns,
                            uint64_t *resume);
/* Undo the increments of the last start made with ctx, of [off, off+len): the part before a
 * WOULD_BLOCK/TIMED_OUT *resume, or a whole start. Decrements as an end does, without counting an
 * end, every chunk of the range except those ctx->rec says the start did not count (see
 * pyb_start_record), so exactly the start's own increments are removed; resets ctx's carry and
 * record. len may be 0 (nothing to undo; the reset still happens). Returns 0, or 1 if the record
 * had overflowed and chunks from rec.lost_from on were left counted (read ctx->rec.lost_from before
 * the next start). */
int pyb_tracker_undo_start(pyb_tracker *t, pyb_ctx *ctx, uint64_t off, uint64_t len);
/* The same for a start whose record the caller kept (a batch undoing earlier elements): rec is
 * that start's copy of ctx->rec when it completed (NULL = it counted every chunk). ctx only
 * accumulates statistics and pins. Returns as pyb_tracker_undo_start. */
int pyb_tracker_undo_recorded(pyb_tracker *t, pyb_ctx *ctx, uint64_t off, uint64_t len,
                              const pyb_start_record *rec);
/* The write of [off, off+len) completed: decrement every chunk it overlaps (refusing at zero). */
void pyb_tracker_end(pyb_tracker *t, pyb_ctx *ctx, uint64_t off, uint64_t len);
/* Is any chunk overlapping [off, off+len) counted? */
int pyb_tracker_is_active(pyb_tracker *t, pyb_ctx *ctx, uint64_t off, uint64_t len);
/*
 * Batches: the operation for each element i in [0, n) of offs, with length lens[i], or len for every
 * element when lens is NULL, in order; exactly as n single calls with ctx would do (the same counters,
 * statistics and ordering), but faster (a fast loop per counter width for the common element).
 * pyb_tracker_start_many starts like pyb_tracker_start with may_block 0 and stops after the first
 * element that was not clean (its start returned non-zero or left a record in ctx->rec): it returns
 * that element's index, with *ret its return value and *resume as pyb_tracker_start sets it
 * (PYB_START_WOULD_BLOCK: resume it as a single start), or n with *ret = 0 when every start was clean.
 */
size_t pyb_tracker_start_many(pyb_tracker *t, pyb_ctx *ctx, const uint64_t *offs, const uint64_t *lens,
                              uint64_t len, size_t n, int *ret, uint64_t *resume);
void pyb_tracker_end_many(pyb_tracker *t, pyb_ctx *ctx, const uint64_t *offs, const uint64_t *lens, uint64_t len,
                          size_t n);
/* Unpin (atomic variant) and fold ctx's statistics into the tracker; ctx is reusable afterwards. */
void pyb_tracker_ctx_done(pyb_tracker *t, pyb_ctx *ctx);
/* Unpin only, leaving the statistics in ctx for a caller that keeps its own (the Python layer's
 * single calls fold them into counters guarded by the GIL instead of the tracker's atomics). */
void pyb_tracker_ctx_unpin(pyb_tracker *t, pyb_ctx *ctx);

/* The counter covering byte off (the coarse half counter if its page is hijacked). */
uint64_t pyb_tracker_count(pyb_tracker *t, uint64_t off);
/* Copy every chunk's counter into out[n_chunks] (a hijacked page reports its half counters). */
void pyb_tracker_counts(pyb_tracker *t, uint64_t *out);
/* Free pages whose counters are all zero (back to the mempool reserve first when it is below
 * pool_pages); returns the number freed. Under PYB_UNHIJACK_ON_DECAY it is also md's daemon pass
 * for hijacked pages: a drained one is marked, a marked one still drained reverts to empty (not
 * counted in the return value; hijacked_pages in the stats drops). */
uint64_t pyb_tracker_reclaim(pyb_tracker *t);

void pyb_tracker_get_stats(pyb_tracker *t, pyb_tracker_stats *out);
void pyb_tracker_get_memory(pyb_tracker *t, pyb_tracker_memory *out);

#endif /* PYB_TRACKER_H */
