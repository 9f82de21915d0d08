/* pyb_tracker.c - see pyb_tracker.h for the design, the invariants and the reclaim protocol. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "pyb_tracker.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/*
 * The memory orders of the atomic variant's protocol (pyb_tracker.h), one name per operation. The
 * Relacy model keeps the same table (csrc/relacy/orders.h) and tests/tracker/test_relacy_orders.py checks
 * that the two agree, so the model cannot drift from the code silently. seq_cst where the proof's
 * store->load step needs it (the announcement against the slot-word loads that follow it, and the
 * reclaimer's CAS against its polls of the reader records); ThreadSanitizer does not model fences,
 * so the seq_cst is on the operations themselves (a plain MOV for loads on x86).
 */
#define MO_GP_READ PYB_ACQUIRE         /* reader: load of the grace-period number */
#define MO_ANNOUNCE PYB_SEQ_CST        /* reader: exchange(ctr, g), entering or refreshing a section */
#define MO_LEAVE PYB_RELEASE           /* reader: store(ctr, 0), leaving the section */
#define MO_WORD_LOAD PYB_SEQ_CST       /* reader: slot-word load */
#define MO_WORD_INSTALL PYB_ACQ_REL    /* start: CAS(word, 0 -> page or hijacked halves) */
#define MO_WORD_CANCEL PYB_ACQ_REL     /* start: CAS(word, page|TAG -> page) */
#define MO_CTR_INC PYB_RELAXED         /* start: counter increment (fetch_add or CAS) */
#define MO_CTR_DEC PYB_RELEASE         /* end: counter decrement (CAS) */
#define MO_CTR_CHECK PYB_ACQUIRE       /* is_active: counter load */
#define MO_WORD_TAG PYB_SEQ_CST        /* reclaim step 1: CAS(word, page -> page|TAG) */
#define MO_GP_ADVANCE PYB_SEQ_CST      /* reclaim steps 2, 4: fetch_add(grace-period number, 1) */
#define MO_READER_POLL PYB_SEQ_CST     /* reclaim: load of another thread's ctr */
#define MO_ZERO_SCAN PYB_RELAXED       /* reclaim: counter loads of page_all_zero */
#define MO_WORD_UNPUBLISH PYB_SEQ_CST  /* reclaim step 3: CAS(word, page|TAG -> 0) */
#define MO_WORD_UNTAG PYB_ACQ_REL      /* reclaim step 3: CAS(word, page|TAG -> page) */
#define MO_RECLAIM_LOAD PYB_ACQUIRE    /* reclaim steps 1, 3: slot-word load */

#define HALF_BITS 31u
#define HALF_MASK ((1ull << HALF_BITS) - 1)
/* Spins on the overflow wait sequence before sleeping on the futex. */
#define WAIT_SPINS 200
/* A reclaimer polls a grace period this many times before it starts yielding. */
#define GRACE_SPINS 64
/* Pages a reclaim retires per pair of grace periods (and the most that can wait for one). */
#define RECLAIM_BATCH 64

/* A wait queue (see the waiting protocol): seq is the futex word, bumped (release) by a waker while
 * someone waits; waiters is only touched by acq_rel RMWs. */
typedef struct pyb_waitq {
    _Atomic uint32_t seq;
    _Atomic uint32_t waiters;
} pyb_waitq;

struct pyb_tracker {
    /* Immutable after pyb_tracker_create. */
    uint64_t device_size, chunk_size, n_chunks, n_slots, chunks_per_page, half_chunks;
    uint64_t counter_max, half_max, directory_bytes;
    unsigned chunk_shift, page_shift;
    int counter_bits, sync, overflow, alloc_failure, lock_mode;
    int single_fast;                  /* sync ATOMIC with 64-bit counters: single calls try start_fast/end_fast */
    pyb_fault *fault;
    pyb_slot *slots;
    unsigned char *pool_base;         /* pool_pages contiguous pages, or NULL */
    uint32_t pool_pages, pool_words;
    _Atomic uint64_t *pool_free;      /* bit set = pool page free; fetch_or / CAS, acq_rel */
    int free_policy;                  /* immutable */
    int unhijack;                     /* immutable: pyb_unhijack */
    uint64_t wait_timeout_ns;         /* immutable */
    uint64_t mempool_round_ns;        /* immutable: real length of one mempool wait round */
    int gfp;                          /* immutable: pyb_gfp of the mempool allocation */

    /* The mempool reserve (alloc_failure MEMPOOL): up to pool_pages zeroed pages. */
    pyb_spinlock reserve_lock;        /* pthread spinlock: guards reserve[] and reserve_n */
    void **reserve;                   /* under reserve_lock */
    uint32_t reserve_n;               /* under reserve_lock */

    /* Global variant: guards every slot and counter. */
    pyb_spinlock global_lock;

    /* Atomic-variant reclaim: pages unpublished whose grace period retired_gp had not elapsed when
     * their reclaim returned (freed by a later reclaim, or by destroy). */
    pthread_mutex_t reclaim_mu;       /* serialises reclaims; guards the three fields below */
    uint32_t n_retired;               /* under reclaim_mu */
    uint64_t retired_gp;              /* under reclaim_mu */
    void *retired[RECLAIM_BATCH];     /* under reclaim_mu */

    /* Overflow waiters (woken by an end that made room) and mempool waiters (woken by a refill). */
    _Alignas(PYB_CACHELINE) pyb_waitq overflow_q;
    _Alignas(PYB_CACHELINE) pyb_waitq pool_q;

    /* Gauges and folded statistics: relaxed atomics, written on rare paths and by ctx_done. */
    _Alignas(PYB_CACHELINE) _Atomic uint64_t page_bytes, peak_page_bytes, pages, peak_pages;
    _Atomic uint64_t hijacked_pages, pool_pages_used, pages_allocated, pages_freed;
    _Atomic uint64_t st_starts, st_ends, st_untracked, st_alloc_failures, st_underflows;
    _Atomic uint64_t st_hijack_events, st_waits, st_clamps, st_wraps, st_mempool_waits, pool_refills;
    /* mempool rounds (whole / ended by a wake) and NOWAIT NULLs: relaxed fetch_add by the waiter, on
     * the rare wait path itself (not through pyb_ctx: a round is counted when it ends) */
    _Atomic uint64_t st_mempool_rounds, st_mempool_wakeups, st_mempool_nulls;
};

/* ------------------------------------------------------------------------------------------------ */
/* Geometry helpers                                                                                   */

static inline uint64_t chunk_of(const pyb_tracker *t, uint64_t off) { return off >> t->chunk_shift; }
static inline uint64_t page_of(const pyb_tracker *t, uint64_t chunk) { return chunk >> t->page_shift; }
static inline uint64_t in_page(const pyb_tracker *t, uint64_t chunk) { return chunk & (t->chunks_per_page - 1); }
static inline uint64_t half_of(const pyb_tracker *t, uint64_t c_in_page) { return c_in_page >= t->half_chunks; }

static inline uint64_t half_get(uint64_t w, unsigned h) { return (w >> (1 + h * HALF_BITS)) & HALF_MASK; }
static inline uint64_t half_set(uint64_t w, unsigned h, uint64_t v)
{
    unsigned sh = 1 + h * HALF_BITS;
    return (w & ~(HALF_MASK << sh)) | (v << sh);
}
static inline int is_hijacked(uint64_t w) { return (w & PYB_HIJACK_TAG) != 0; }
/* Atomic variant: a page word a reclaim has tagged for retirement (not hijacked, bit 1 set). */
static inline int is_retiring(uint64_t w) { return (w & (PYB_HIJACK_TAG | PYB_RETIRE_TAG)) == PYB_RETIRE_TAG; }
/* The page of a non-hijacked, non-zero word (retiring or not). */
static inline void *page_ptr(uint64_t w) { return (void *)(uintptr_t)(w & ~PYB_RETIRE_TAG); }
/* After a decrement or a wrap: under PYB_UNHIJACK_AT_END a hijacked word whose halves are both zero
 * reverts to "no page" (0), so the next start retries allocation; under PYB_UNHIJACK_ON_DECAY it stays
 * hijacked until two reclaim passes find it drained (pyb_tracker.h). */
static inline uint64_t normalise_hijack(const pyb_tracker *t, uint64_t w)
{
    return (t->unhijack == PYB_UNHIJACK_ON_DECAY || (w & ~(PYB_HIJACK_TAG | PYB_HIJACK_DECAYED))) ? w : 0;
}

/* ------------------------------------------------------------------------------------------------ */
/* Counter access. Lock variants use plain loads/stores under the lock; the atomic variant uses the
 * _Atomic views with relaxed order: each counter is a single location whose modification order is
 * the truth, and ordering against the page pointer comes from the slot word's acquire/release. */

static inline uint64_t ctr_get(const pyb_tracker *t, void *pg, uint64_t i)
{
    switch (t->counter_bits) {
    case 16: return ((uint16_t *)pg)[i];
    case 32: return ((uint32_t *)pg)[i];
    default: return ((uint64_t *)pg)[i];
    }
}

static inline void ctr_set(const pyb_tracker *t, void *pg, uint64_t i, uint64_t v)
{
    switch (t->counter_bits) {
    case 16: ((uint16_t *)pg)[i] = (uint16_t)v; break;
    case 32: ((uint32_t *)pg)[i] = (uint32_t)v; break;
    default: ((uint64_t *)pg)[i] = v; break;
    }
}

static inline uint64_t actr_load(const pyb_tracker *t, void *pg, uint64_t i, memory_order mo)
{
    switch (t->counter_bits) {
    case 16: return pyb_load(&((_Atomic uint16_t *)pg)[i], mo);
    case 32: return pyb_load(&((_Atomic uint32_t *)pg)[i], mo);
    default: return pyb_load(&((_Atomic uint64_t *)pg)[i], mo);
    }
}

/* CAS counter i from *expected to desired; on failure *expected gets the current value. */
static inline int actr_cas(const pyb_tracker *t, void *pg, uint64_t i, uint64_t *expected, uint64_t desired)
{
    switch (t->counter_bits) {
    case 16: {
        uint16_t e = (uint16_t)*expected;
        int ok = pyb_cas_weak(&((_Atomic uint16_t *)pg)[i], &e, (uint16_t)desired, MO_CTR_INC, PYB_RELAXED);
        *expected = e;
        return ok;
    }
    case 32: {
        uint32_t e = (uint32_t)*expected;
        int ok = pyb_cas_weak(&((_Atomic uint32_t *)pg)[i], &e, (uint32_t)desired, MO_CTR_INC, PYB_RELAXED);
        *expected = e;
        return ok;
    }
    default:
        return pyb_cas_weak(&((_Atomic uint64_t *)pg)[i], expected, desired, MO_CTR_INC, PYB_RELAXED);
    }
}

/*
 * The end's decrement (release) and the read-side check's load (acquire), so that pyb_tracker_end
 * releases and pyb_tracker_is_active acquires in the atomic variant as the lock variants' locks do
 * (pyb_cachedev.h, step 4): a check that reads a value written by an end's decrement, or by any later
 * modification (all are read-modify-writes, which continue the end's release sequence), synchronises
 * with that end. Free on x86 (a locked CMPXCHG and a plain MOV either way).
 */
static inline int actr_cas_release(const pyb_tracker *t, void *pg, uint64_t i, uint64_t *expected, uint64_t desired)
{
    switch (t->counter_bits) {
    case 16: {
        uint16_t e = (uint16_t)*expected;
        int ok = pyb_cas_weak(&((_Atomic uint16_t *)pg)[i], &e, (uint16_t)desired, MO_CTR_DEC, PYB_RELAXED);
        *expected = e;
        return ok;
    }
    case 32: {
        uint32_t e = (uint32_t)*expected;
        int ok = pyb_cas_weak(&((_Atomic uint32_t *)pg)[i], &e, (uint32_t)desired, MO_CTR_DEC, PYB_RELAXED);
        *expected = e;
        return ok;
    }
    default:
        return pyb_cas_weak(&((_Atomic uint64_t *)pg)[i], expected, desired, MO_CTR_DEC, PYB_RELAXED);
    }
}

static inline uint64_t actr_load_acquire(const pyb_tracker *t, void *pg, uint64_t i)
{
    switch (t->counter_bits) {
    case 16: return pyb_load(&((_Atomic uint16_t *)pg)[i], MO_CTR_CHECK);
    case 32: return pyb_load(&((_Atomic uint32_t *)pg)[i], MO_CTR_CHECK);
    default: return pyb_load(&((_Atomic uint64_t *)pg)[i], MO_CTR_CHECK);
    }
}

/* ------------------------------------------------------------------------------------------------ */
/* Locks (lock variants)                                                                              */

static inline pyb_spinlock *lock_of(pyb_tracker *t, uint64_t p)
{
    return t->sync == PYB_SYNC_GLOBAL ? &t->global_lock : &t->slots[p].lock;
}

/* ------------------------------------------------------------------------------------------------ */
/* Page allocation, the pool and the gauges                                                           */

static void gauge_max(_Atomic uint64_t *peak, uint64_t v)
{
    uint64_t cur = pyb_load(peak, PYB_RELAXED);
    while (v > cur && !pyb_cas_weak(peak, &cur, v, PYB_RELAXED, PYB_RELAXED)) {
    }
}

/*
 * Zeroed memory starting on a cache line. The directory and the pages are cache-line aligned so that
 * the slots of pages 4k..4k+3 share one line and nothing else does: with malloc's 16-byte alignment
 * the lines straddled slot groups, and threads working on "distinct" pages falsely shared a line.
 * The size asked for is what memory() counts (no rounding: posix_memalign takes any size).
 */
static void *alloc_zeroed(size_t bytes)
{
    void *p = NULL;
    if (posix_memalign(&p, PYB_CACHELINE, bytes ? bytes : 1) != 0)
        return NULL;
    memset(p, 0, bytes);
    return p;
}

/* A page from the allocator, subject to fault injection; NULL on (injected or real) failure. */
static void *page_alloc(pyb_tracker *t, pyb_ctx *ctx)
{
    void *pg = NULL;
    if (!pyb_fault_should_fail(t->fault, PYB_PAGE_SIZE))
        pg = alloc_zeroed(PYB_PAGE_SIZE);
    if (!pg) {
        ctx->stats.alloc_failures++;
        return NULL;
    }
    uint64_t bytes = pyb_fetch_add(&t->page_bytes, PYB_PAGE_SIZE, PYB_RELAXED) + PYB_PAGE_SIZE;
    gauge_max(&t->peak_page_bytes, bytes);
    pyb_fetch_add(&t->pages_allocated, 1, PYB_RELAXED);
    return pg;
}

static int in_pool(const pyb_tracker *t, const void *pg)
{
    const unsigned char *p = pg;
    return t->pool_base && p >= t->pool_base && p < t->pool_base + (size_t)t->pool_pages * PYB_PAGE_SIZE;
}

/* Take a free pool page (all counters zero), or NULL. Lock-free: claim a set bit by CAS. */
static void *pool_take(pyb_tracker *t)
{
    for (uint32_t wi = 0; wi < t->pool_words; wi++) {
        uint64_t w = pyb_load(&t->pool_free[wi], PYB_ACQUIRE);
        while (w) {
            unsigned bit = (unsigned)__builtin_ctzll(w);
            if (pyb_cas_weak(&t->pool_free[wi], &w, w & ~(1ull << bit), PYB_ACQ_REL, PYB_ACQUIRE)) {
                pyb_fetch_add(&t->pool_pages_used, 1, PYB_RELAXED);
                return t->pool_base + ((size_t)wi * 64 + bit) * PYB_PAGE_SIZE;
            }
        }
    }
    return NULL;
}

static void wake_waiters(pyb_waitq *q);

/* Take a page from the mempool reserve, or NULL. */
static void *reserve_take(pyb_tracker *t)
{
    void *pg = NULL;
    pyb_spin_lock(&t->reserve_lock);
    if (t->reserve_n)
        pg = t->reserve[--t->reserve_n];
    pyb_spin_unlock(&t->reserve_lock);
    if (pg)
        pyb_fetch_add(&t->pool_pages_used, 1, PYB_RELAXED);
    return pg;
}

/* mempool_free: put a zeroed page back into the reserve if it is below pool_pages (and wake a waiter);
 * returns 0 if the reserve is full (the caller frees the page). */
static int reserve_refill(pyb_tracker *t, void *pg)
{
    int kept = 0;
    pyb_spin_lock(&t->reserve_lock);
    if (t->reserve_n < t->pool_pages) {
        t->reserve[t->reserve_n++] = pg;
        kept = 1;
    }
    pyb_spin_unlock(&t->reserve_lock);
    if (kept) {
        pyb_fetch_sub(&t->pool_pages_used, 1, PYB_RELAXED);
        pyb_fetch_add(&t->pool_refills, 1, PYB_RELAXED);
        wake_waiters(&t->pool_q);
    }
    return kept;
}

/* Give back a page that holds only zero counters: to the pool or the mempool reserve, or to the
 * allocator. */
static void page_release(pyb_tracker *t, void *pg)
{
    if (t->alloc_failure == PYB_ALLOC_MEMPOOL && reserve_refill(t, pg))
        return;
    if (in_pool(t, pg)) {
        size_t idx = (size_t)((unsigned char *)pg - t->pool_base) / PYB_PAGE_SIZE;
        pyb_fetch_sub(&t->pool_pages_used, 1, PYB_RELAXED);
        /* release: our zero counters are visible to the next taker's acquire */
        pyb_fetch_or(&t->pool_free[idx / 64], 1ull << (idx % 64), PYB_RELEASE);
        return;
    }
    free(pg);
    pyb_fetch_sub(&t->page_bytes, PYB_PAGE_SIZE, PYB_RELAXED);
    pyb_fetch_add(&t->pages_freed, 1, PYB_RELAXED);
}

/* A page was installed in / removed from a slot. */
static void slot_gained_page(pyb_tracker *t)
{
    uint64_t n = pyb_fetch_add(&t->pages, 1, PYB_RELAXED) + 1;
    gauge_max(&t->peak_pages, n);
}
static void slot_lost_page(pyb_tracker *t) { pyb_fetch_sub(&t->pages, 1, PYB_RELAXED); }

/* Allocate for a start whose slot is empty: allocator, then the pool or the mempool reserve if the
 * policy has one. Returns NULL when the policy must now hijack, leave the page untracked, or (mempool)
 * wait. */
static void *page_for_start(pyb_tracker *t, pyb_ctx *ctx)
{
    void *pg = page_alloc(t, ctx);
    if (!pg && t->alloc_failure == PYB_ALLOC_POOL)
        pg = pool_take(t);
    else if (!pg && t->alloc_failure == PYB_ALLOC_MEMPOOL)
        pg = reserve_take(t);
    return pg;
}

/* ------------------------------------------------------------------------------------------------ */
/* Overflow wait                                                                                      */

/*
 * Waiting protocol (no lost wake-up), the same for both queues. A waiter reads q->seq (acquire),
 * registers with fetch_add(q->waiters, 1, acq_rel), then re-checks its condition (its counter under the
 * lock or by an atomic load; the mempool reserve under its lock). A waker that made the condition true
 * (an end that lowered a counter from its maximum; a refill of the reserve) then reads q->waiters with
 * an RMW, fetch_add(waiters, 0, acq_rel). The two RMWs on `waiters` are totally ordered: if the waker's
 * comes later it reads the registration and wakes; if it comes earlier, the waiter's RMW reads from it,
 * so the change (sequenced before the waker's RMW) is visible to the waiter's re-check, which then does
 * not sleep. A wake bumps seq (release) before FUTEX_WAKE, and FUTEX_WAIT sleeps only while seq still
 * holds the value read before registering, so a wake between re-check and sleep is not lost.
 * (RMWs rather than seq_cst fences: ThreadSanitizer does not model fences.)
 */
typedef struct wait_ticket {
    uint32_t seq;
} wait_ticket;

static inline void wait_register(pyb_waitq *q, wait_ticket *tk)
{
    tk->seq = pyb_load(&q->seq, PYB_ACQUIRE);
    pyb_fetch_add(&q->waiters, 1, PYB_ACQ_REL);
}

static inline void wait_cancel(pyb_waitq *q) { pyb_fetch_sub(&q->waiters, 1, PYB_RELAXED); }

/*
 * Sleep until a waker bumps the sequence (spin briefly first) or the absolute deadline passes
 * (0 = none), then deregister. Returns 0 when woken (or spuriously) and ETIMEDOUT at the deadline.
 */
static int wait_sleep(pyb_waitq *q, wait_ticket *tk, uint64_t deadline)
{
    int rc = 0;
    for (int i = 0; i < WAIT_SPINS; i++) {
        if (pyb_load(&q->seq, PYB_ACQUIRE) != tk->seq)
            goto out;
        pyb_cpu_relax();
    }
    while (pyb_load(&q->seq, PYB_ACQUIRE) == tk->seq) {
        if (!deadline) {
            pyb_futex_wait(&q->seq, tk->seq);
            continue;
        }
        uint64_t now = pyb_now_ns();
        if (now >= deadline) {
            rc = ETIMEDOUT;
            break;
        }
        pyb_futex_wait_ns(&q->seq, tk->seq, deadline - now);
    }
out:
    pyb_fetch_sub(&q->waiters, 1, PYB_RELAXED);
    return rc;
}

/* Called by a waker after it made a waiter's condition true. */
static void wake_waiters(pyb_waitq *q)
{
    if (pyb_fetch_add(&q->waiters, 0, PYB_ACQ_REL) != 0) {
        pyb_fetch_add(&q->seq, 1, PYB_RELEASE);
        pyb_futex_wake_all(&q->seq);
    }
}

/*
 * How a start may wait: not at all (may_block 0), until an absolute deadline, or for timeout_ns from
 * the moment its first wait begins (the clock is read only then, never on the common path).
 */
typedef struct wait_ctl {
    int may_block;
    uint64_t deadline; /* absolute pyb_now_ns(); 0 = not yet fixed / none */
    uint64_t timeout;  /* relative bound fixing deadline at the first wait; 0 = none */
    int waited;        /* CARRY_WAITED_* bits: this start's waits already counted in the statistics */
} wait_ctl;

/* Bits of pyb_ctx.carry beside PYB_START_UNTRACKED: a start resumed after WOULD_BLOCK or TIMED_OUT
 * has already counted its overflow / mempool wait, so overflow_waits and mempool_waits count starts
 * that waited, not sleeps. */
#define CARRY_WAITED_OVERFLOW 0x100
#define CARRY_WAITED_PAGE 0x200
/* mempool_alloc tries the allocator twice (without, then with direct reclaim) before it waits: set
 * once the current page's first attempt failed, so a resumed start makes the second, not a third. */
#define CARRY_PAGE_RETRY 0x400
/* The next start on this ctx resumes the last one: keep its record (pyb_start_record). */
#define CARRY_RESUME 0x800

/* The start being made with ctx did not count the absolute chunks [first, last] (see
 * pyb_start_record). Called in ascending chunk order; rare (an allocation failure, a counter at its
 * maximum), so never on the common path. */
static void record_skip(pyb_ctx *ctx, uint64_t first, uint64_t last)
{
    pyb_start_record *r = &ctx->rec;
    if (r->lost)
        return;
    if (r->n && r->skip[r->n - 1].last + 1 >= first) {
        if (last > r->skip[r->n - 1].last)
            r->skip[r->n - 1].last = last;
        return;
    }
    if (r->n == PYB_SKIP_MAX) {
        r->lost = 1;
        r->lost_from = first;
        return;
    }
    r->skip[r->n].first = first;
    r->skip[r->n].last = last;
    r->n++;
}

static inline void count_wait(pyb_ctx *ctx, wait_ctl *w, int kind)
{
    if (w->waited & kind)
        return;
    w->waited |= kind;
    if (kind == CARRY_WAITED_PAGE)
        ctx->stats.mempool_waits++;
    else
        ctx->stats.overflow_waits++;
}

static uint64_t ctl_deadline(wait_ctl *w)
{
    if (!w->deadline && w->timeout)
        w->deadline = pyb_now_ns() + w->timeout;
    return w->deadline;
}

static int ctl_expired(wait_ctl *w)
{
    uint64_t d = ctl_deadline(w);
    return d && pyb_now_ns() >= d;
}

/*
 * mempool_alloc's rounds (Linux 6.12 mm/mempool.c:456-469), entered after the allocator and the
 * reserve both failed twice: register on the pool queue (prepare_to_wait), re-check the reserve (the
 * kernel checks it under pool->lock before it registers: the same order, no lost wake-up), sleep until
 * a refill wakes us or the round's length passes (io_schedule_timeout(5 * HZ)), then try the allocator
 * and the reserve again (goto repeat_alloc) and loop. A round that ran its whole length counts in
 * mempool_rounds, one a refill ended in mempool_wakeups; a round cut short by the caller's deadline in
 * neither. Returns a page, or NULL when the caller's deadline passed first. The caller holds no lock
 * (and, in the atomic variant, no pinned slot).
 */
static void *mempool_wait(pyb_tracker *t, pyb_ctx *ctx, wait_ctl *w)
{
    for (;;) {
        wait_ticket tk;
        wait_register(&t->pool_q, &tk);
        void *pg = reserve_take(t);
        if (pg) {
            wait_cancel(&t->pool_q);
            ctx->round_end = 0;
            return pg;
        }
        uint64_t deadline = ctl_deadline(w), now = pyb_now_ns();
        if (deadline && now >= deadline) {
            wait_cancel(&t->pool_q);
            return NULL; /* a round in progress (round_end) goes on at the resume */
        }
        if (!ctx->round_end)
            ctx->round_end = now + t->mempool_round_ns;
        uint64_t until = ctx->round_end;
        int cut = deadline && deadline < until;
        int rc = wait_sleep(&t->pool_q, &tk, cut ? deadline : until);
        if (rc == 0) {
            pyb_fetch_add(&t->st_mempool_wakeups, 1, PYB_RELAXED);
        } else if (cut && pyb_now_ns() < until) {
            return NULL; /* the caller's slice ended first: the resume sleeps the rest of this round */
        } else {
            pyb_fetch_add(&t->st_mempool_rounds, 1, PYB_RELAXED);
        }
        ctx->round_end = 0;
        pg = page_for_start(t, ctx); /* goto repeat_alloc: the allocator, then the reserve */
        if (pg)
            return pg;
    }
}

/* ------------------------------------------------------------------------------------------------ */
/* Atomic-variant read-side sections and grace periods (the reclaim protocol in pyb_tracker.h)        */

/*
 * One reader record per thread that has used an atomic-variant tracker, in thread-local storage,
 * linked into a process-wide registry (so that a grace period covers every tracker's readers; a
 * reclaim of one tracker may wait for a thread working on another, never for long: see
 * rcu_op_begin's quiescent refresh).
 */
typedef struct rcu_reader {
    /* 0 outside a read-side section, else the grace-period number the thread last announced.
     * Written by its thread only (release, then a seq_cst fence; 0 by a release store), read by
     * reclaimers with acquire loads. */
    _Alignas(PYB_CACHELINE) _Atomic uint64_t ctr;
    uint32_t nest;           /* owner thread only: pinned contexts of this thread */
    int registered;          /* owner thread only (and the fork child handler) */
    struct rcu_reader *next; /* under rcu_registry_mu */
} rcu_reader;

static pthread_mutex_t rcu_registry_mu = PTHREAD_MUTEX_INITIALIZER;
static rcu_reader *rcu_readers;              /* under rcu_registry_mu */
static pthread_key_t rcu_key;                /* its destructor unregisters an exiting thread */
static pthread_once_t rcu_once = PTHREAD_ONCE_INIT;
/* The grace-period number: starts at 1 (0 means "outside"); advanced by reclaimers with acq_rel
 * fetch_add, read by readers with acquire loads. */
static _Alignas(PYB_CACHELINE) _Atomic uint64_t rcu_gp = 1;
static _Thread_local rcu_reader rcu_self;

static void rcu_unregister(void *arg)
{
    rcu_reader *r = arg;
    pthread_mutex_lock(&rcu_registry_mu);
    for (rcu_reader **pp = &rcu_readers; *pp; pp = &(*pp)->next) {
        if (*pp == r) {
            *pp = r->next;
            break;
        }
    }
    pthread_mutex_unlock(&rcu_registry_mu);
    pyb_store(&r->ctr, 0, PYB_RELAXED);
    r->registered = 0;
}

/* In a child of fork() only the forking thread exists: the registry keeps its record only. */
static void rcu_atfork_child(void)
{
    pthread_mutex_init(&rcu_registry_mu, NULL);
    rcu_readers = rcu_self.registered ? &rcu_self : NULL;
    if (rcu_readers)
        rcu_self.next = NULL;
}

static void rcu_init_once(void)
{
    pthread_key_create(&rcu_key, rcu_unregister);
    pthread_atfork(NULL, NULL, rcu_atfork_child);
}

static __attribute__((noinline)) rcu_reader *rcu_register(void)
{
    rcu_reader *r = &rcu_self;
    pthread_once(&rcu_once, rcu_init_once);
    pthread_mutex_lock(&rcu_registry_mu);
    r->next = rcu_readers;
    rcu_readers = r;
    pthread_mutex_unlock(&rcu_registry_mu);
    pthread_setspecific(rcu_key, r);
    r->registered = 1;
    return r;
}

/*
 * Announce the current grace-period number g with a seq_cst exchange: it releases (everything this
 * thread did in its section so far happens-before a reclaimer that reads the new value) and, with
 * the seq_cst slot-word loads that follow, is the reader's half of the store->load pair (the
 * reclaimer's half: its seq_cst CAS on the word, then seq_cst polls of ctr).
 */
static inline void rcu_announce(rcu_reader *r, uint64_t g)
{
    atomic_exchange_explicit(&r->ctr, g, MO_ANNOUNCE);
}

/*
 * Every atomic-variant operation begins here (rcu_read_lock). An unpinned context enters a section
 * for its thread; a pinned one is between two operations, where it holds no page pointer, so this is
 * also a quiescent state: if a grace period has begun since the thread's announcement, announce the
 * new number. The common path is two loads (the grace-period word, read-mostly and shared clean,
 * and the thread's own record) and no store.
 */
static inline void rcu_op_begin(pyb_ctx *ctx)
{
    rcu_reader *r;
    if (ctx->pinned < 0) {
        r = &rcu_self;
        if (__builtin_expect(!r->registered, 0))
            r = rcu_register();
        r->nest++;
        ctx->pinned = (int64_t)(intptr_t)r;
    } else {
        r = (rcu_reader *)(intptr_t)ctx->pinned;
    }
    uint64_t g = pyb_load(&rcu_gp, MO_GP_READ);
    if (__builtin_expect(pyb_load(&r->ctr, PYB_RELAXED) != g, 0))
        rcu_announce(r, g);
}

/* Leave the section (rcu_read_unlock) when the thread's last pinned context unpins: a release store
 * of 0, so the section's accesses happen-before a reclaimer that reads it. */
static inline void ctx_unpin(pyb_tracker *t, pyb_ctx *ctx)
{
    (void)t;
    if (ctx->pinned >= 0) {
        rcu_reader *r = (rcu_reader *)(intptr_t)ctx->pinned;
        if (--r->nest == 0)
            pyb_store(&r->ctr, 0, MO_LEAVE);
        ctx->pinned = -1;
    }
}

/*
 * Begin a grace period after the caller's tagging or unpublishing CASes: returns its number. The
 * fetch_add releases those CASes to any reader that announces the new number (it acquires it).
 */
static uint64_t rcu_gp_begin(void) { return pyb_fetch_add(&rcu_gp, 1, MO_GP_ADVANCE) + 1; }

/* Has grace period `target` elapsed: is every other thread outside a section or announced at
 * `target` or later? The calling thread is skipped: it is in no operation (the API is not
 * re-entrant), so it holds no page pointer even if one of its contexts is pinned. */
static int rcu_gp_elapsed(uint64_t target)
{
    int done = 1;
    pthread_mutex_lock(&rcu_registry_mu);
    for (rcu_reader *r = rcu_readers; r && done; r = r->next) {
        if (r == &rcu_self)
            continue;
        uint64_t v = pyb_load(&r->ctr, MO_READER_POLL);
        done = v == 0 || v >= target;
    }
    pthread_mutex_unlock(&rcu_registry_mu);
    return done;
}

/* Wait for grace period `target`, at most PYB_GRACE_WAIT_NS (spin, then yield). Returns 1 if it
 * elapsed. Readers reach a quiescent state at their next operation or unpin, so the bound is only
 * reached behind a thread that keeps a context pinned without operating (e.g. descheduled). */
static int rcu_gp_wait(uint64_t target)
{
    uint64_t deadline = 0;
    for (unsigned i = 0;; i++) {
        if (rcu_gp_elapsed(target))
            return 1;
        if (i < GRACE_SPINS) {
            pyb_cpu_relax();
            continue;
        }
        uint64_t now = pyb_now_ns();
        if (!deadline)
            deadline = now + PYB_GRACE_WAIT_NS;
        else if (now >= deadline)
            return 0;
        sched_yield();
    }
}

/* ------------------------------------------------------------------------------------------------ */
/* Creation                                                                                           */

int pyb_tracker_create(const pyb_tracker_config *cfg, pyb_tracker **out)
{
    *out = NULL;
    /* device_size <= 2^63: every offset is then below 2^63, which the batch loops' page index (one shift,
     * clamped to 63 bits: batch_page_bits) and the chunk count's rounding need */
    if (!cfg->device_size || cfg->device_size > (1ull << 63) || cfg->chunk_size < 512 ||
        (cfg->chunk_size & (cfg->chunk_size - 1)))
        return -EINVAL;
    if (cfg->counter_bits != 16 && cfg->counter_bits != 32 && cfg->counter_bits != 64)
        return -EINVAL;
    if (cfg->sync < PYB_SYNC_GLOBAL || cfg->sync > PYB_SYNC_ATOMIC)
        return -EINVAL;
    if (cfg->overflow < PYB_OVERFLOW_WRAP || cfg->overflow > PYB_OVERFLOW_WAIT)
        return -EINVAL;
    if (cfg->alloc_failure < PYB_ALLOC_UNTRACKED || cfg->alloc_failure > PYB_ALLOC_MEMPOOL)
        return -EINVAL;
    if (cfg->gfp != PYB_GFP_NOIO && cfg->gfp != PYB_GFP_NOWAIT)
        return -EINVAL;
    if (cfg->free_policy != PYB_FREE_EAGER && cfg->free_policy != PYB_FREE_DEFERRED)
        return -EINVAL;
    if (cfg->unhijack != PYB_UNHIJACK_AT_END && cfg->unhijack != PYB_UNHIJACK_ON_DECAY)
        return -EINVAL;
    if (cfg->lock_mode < PYB_LOCK_PTHREAD || cfg->lock_mode > PYB_LOCK_MCS)
        return -EINVAL;
    const uint64_t width_max = cfg->counter_bits == 64 ? UINT64_MAX : (1ull << cfg->counter_bits) - 1;
    if (cfg->counter_max > width_max)
        return -EINVAL;

    pyb_tracker *t = aligned_alloc(PYB_CACHELINE, (sizeof(*t) + PYB_CACHELINE - 1) / PYB_CACHELINE * PYB_CACHELINE);
    if (!t)
        return -ENOMEM;
    memset(t, 0, sizeof(*t));
    t->device_size = cfg->device_size;
    t->chunk_size = cfg->chunk_size;
    t->chunk_shift = (unsigned)__builtin_ctzll(cfg->chunk_size);
    t->n_chunks = (cfg->device_size + cfg->chunk_size - 1) >> t->chunk_shift;
    t->counter_bits = cfg->counter_bits;
    t->chunks_per_page = (uint64_t)PYB_PAGE_SIZE * 8 / (uint64_t)cfg->counter_bits;
    t->page_shift = (unsigned)__builtin_ctzll(t->chunks_per_page);
    t->half_chunks = t->chunks_per_page / 2;
    t->n_slots = (t->n_chunks + t->chunks_per_page - 1) >> t->page_shift;
    t->counter_max = cfg->counter_max ? cfg->counter_max : width_max;
    t->half_max = t->counter_max < HALF_MASK ? t->counter_max : HALF_MASK;
    t->sync = cfg->sync;
    t->single_fast = t->sync == PYB_SYNC_ATOMIC && t->counter_max == UINT64_MAX;
    t->overflow = cfg->overflow;
    t->alloc_failure = cfg->alloc_failure;
    t->fault = cfg->fault;
    t->lock_mode = cfg->lock_mode;
    t->free_policy = cfg->free_policy;
    t->unhijack = cfg->unhijack;
    t->wait_timeout_ns = cfg->wait_timeout_ns;
    t->mempool_round_ns = cfg->mempool_round_ns ? cfg->mempool_round_ns : PYB_MEMPOOL_RETRY_NS;
    t->gfp = cfg->gfp;

    t->directory_bytes = t->n_slots * sizeof(pyb_slot);
    t->slots = alloc_zeroed(t->directory_bytes);
    if (!t->slots)
        goto nomem;
    for (uint64_t i = 0; i < t->n_slots; i++) {
        atomic_init(&t->slots[i].word, 0);
        atomic_init(&t->slots[i].state, 0);
        if (t->sync == PYB_SYNC_PAGE && pyb_lock_init(&t->slots[i].lock, t->lock_mode) != 0)
            goto nomem;
    }
    if (pyb_lock_init(&t->global_lock, t->lock_mode) != 0)
        goto nomem;
    pthread_mutex_init(&t->reclaim_mu, NULL);
    if (pyb_spin_init(&t->reserve_lock) != 0)
        goto nomem;

    if (cfg->alloc_failure == PYB_ALLOC_POOL && cfg->pool_pages) {
        t->pool_pages = cfg->pool_pages;
        t->pool_words = (cfg->pool_pages + 63) / 64;
        t->pool_base = aligned_alloc(PYB_PAGE_SIZE, (size_t)cfg->pool_pages * PYB_PAGE_SIZE);
        t->pool_free = calloc(t->pool_words, sizeof(*t->pool_free));
        if (!t->pool_base || !t->pool_free)
            goto nomem;
        memset(t->pool_base, 0, (size_t)cfg->pool_pages * PYB_PAGE_SIZE);
        for (uint32_t i = 0; i < cfg->pool_pages; i++)
            atomic_fetch_or(&t->pool_free[i / 64], 1ull << (i % 64));
        atomic_store(&t->page_bytes, (uint64_t)cfg->pool_pages * PYB_PAGE_SIZE);
        atomic_store(&t->peak_page_bytes, (uint64_t)cfg->pool_pages * PYB_PAGE_SIZE);
    }
    if (cfg->alloc_failure == PYB_ALLOC_MEMPOOL && cfg->pool_pages) {
        /* mempool_create_page_pool: the reserve is filled at construction (no fault injection). */
        t->pool_pages = cfg->pool_pages;
        t->reserve = calloc(cfg->pool_pages, sizeof(*t->reserve));
        if (!t->reserve)
            goto nomem;
        for (uint32_t i = 0; i < cfg->pool_pages; i++) {
            if (!(t->reserve[i] = alloc_zeroed(PYB_PAGE_SIZE)))
                goto nomem;
            t->reserve_n++;
        }
        atomic_store(&t->page_bytes, (uint64_t)cfg->pool_pages * PYB_PAGE_SIZE);
        atomic_store(&t->peak_page_bytes, (uint64_t)cfg->pool_pages * PYB_PAGE_SIZE);
    }
    *out = t;
    return 0;

nomem:
    for (uint32_t i = 0; t->reserve && i < t->reserve_n; i++)
        free(t->reserve[i]);
    free(t->reserve);
    free(t->pool_base);
    free(t->pool_free);
    free(t->slots);
    free(t);
    return -ENOMEM;
}

void pyb_tracker_destroy(pyb_tracker *t)
{
    if (!t)
        return;
    for (uint64_t i = 0; i < t->n_slots; i++) {
        uint64_t w = pyb_load(&t->slots[i].word, PYB_RELAXED);
        if (w && !is_hijacked(w) && !in_pool(t, page_ptr(w)))
            free(page_ptr(w));
        if (t->sync == PYB_SYNC_PAGE)
            pyb_lock_destroy(&t->slots[i].lock, t->lock_mode);
    }
    for (uint32_t i = 0; i < t->n_retired; i++) /* no reader is left: the grace period is over */
        page_release(t, t->retired[i]);
    pthread_mutex_destroy(&t->reclaim_mu);
    pyb_lock_destroy(&t->global_lock, t->lock_mode);
    pyb_spin_destroy(&t->reserve_lock);
    for (uint32_t i = 0; i < t->reserve_n; i++)
        free(t->reserve[i]);
    free(t->reserve);
    free(t->pool_base);
    free(t->pool_free);
    free(t->slots);
    free(t);
}

uint64_t pyb_tracker_n_chunks(const pyb_tracker *t) { return t->n_chunks; }
uint64_t pyb_tracker_n_slots(const pyb_tracker *t) { return t->n_slots; }
uint64_t pyb_tracker_chunks_per_page(const pyb_tracker *t) { return t->chunks_per_page; }
uint64_t pyb_tracker_device_size(const pyb_tracker *t) { return t->device_size; }
uint64_t pyb_tracker_counter_max(const pyb_tracker *t) { return t->counter_max; }

/* ------------------------------------------------------------------------------------------------ */
/* Lock variants                                                                                      */

/* record_skip for page p's page-relative chunk c, and for hijacked half h within the range's
 * page-relative chunks [a, b]. */
static void record_chunk(const pyb_tracker *t, pyb_ctx *ctx, uint64_t p, uint64_t c)
{
    uint64_t abs = (p << t->page_shift) + c;
    record_skip(ctx, abs, abs);
}

static void record_half(const pyb_tracker *t, pyb_ctx *ctx, uint64_t p, uint64_t a, uint64_t b, unsigned h)
{
    uint64_t lo = (uint64_t)h * t->half_chunks, hi = lo + t->half_chunks - 1;
    record_skip(ctx, (p << t->page_shift) + (lo > a ? lo : a), (p << t->page_shift) + (hi < b ? hi : b));
}

/*
 * Count one start on page p for the page-relative chunks [a, b], resuming at chunk *c. Returns 0,
 * PYB_START_UNTRACKED, or PYB_START_WOULD_BLOCK / PYB_START_TIMED_OUT (with PYB_START_WAIT_PAGE for a
 * mempool wait; *c = the chunk to resume at).
 */
static int start_page_locked(pyb_tracker *t, pyb_ctx *ctx, uint64_t p, uint64_t a, uint64_t b, uint64_t *c,
                             wait_ctl *wc)
{
    pyb_slot *s = &t->slots[p];
    pyb_spinlock *lk = lock_of(t, p);
    void *to_free = NULL;
    wait_ticket tk;

    pyb_lock(lk, t->lock_mode);
retry:
    {
        uint64_t w = pyb_load(&s->word, PYB_RELAXED);
        if (w == 0) {
            /* md-bitmap's checkpage: allocate with the lock dropped, then re-check. */
            pyb_unlock(lk, t->lock_mode);
            void *pg;
            if (t->alloc_failure == PYB_ALLOC_MEMPOOL && ctx->round_end && wc->may_block) {
                /* resumed in the middle of a mempool round: sleep its rest first */
                if (!(pg = mempool_wait(t, ctx, wc)))
                    return PYB_START_TIMED_OUT | PYB_START_WAIT_PAGE;
            } else {
                pg = page_for_start(t, ctx);
            }
            pyb_lock(lk, t->lock_mode);
        recheck:
            w = pyb_load(&s->word, PYB_RELAXED);
            if (w != 0) {
                if (pg) { /* somebody beat us: give ours back after unlocking */
                    pyb_unlock(lk, t->lock_mode);
                    page_release(t, pg);
                    pyb_lock(lk, t->lock_mode);
                }
                goto retry;
            }
            if (pg) {
                pyb_store(&s->word, (uint64_t)(uintptr_t)pg, PYB_RELAXED);
                pyb_store(&s->state, 0, PYB_RELAXED);
                slot_gained_page(t);
                wc->waited &= ~CARRY_PAGE_RETRY; /* the next page is a new mempool_alloc call */
                goto retry;
            }
            if (t->alloc_failure == PYB_ALLOC_MEMPOOL && t->gfp == PYB_GFP_NOWAIT) {
                /* no __GFP_DIRECT_RECLAIM: mempool_alloc returns NULL after one attempt and the
                 * reserve (mm/mempool.c:444-454); the page stays untracked, as in the posted patch */
                ctx->stats.mempool_nulls++;
                pyb_unlock(lk, t->lock_mode);
                return PYB_START_UNTRACKED;
            }
            if (t->alloc_failure == PYB_ALLOC_UNTRACKED) {
                pyb_unlock(lk, t->lock_mode);
                return PYB_START_UNTRACKED;
            }
            if (t->alloc_failure == PYB_ALLOC_MEMPOOL) {
                pyb_unlock(lk, t->lock_mode);
                if (!(wc->waited & CARRY_PAGE_RETRY)) { /* the second attempt, at once or on resume */
                    wc->waited |= CARRY_PAGE_RETRY;
                    if (!wc->may_block)
                        return PYB_START_WOULD_BLOCK | PYB_START_WAIT_PAGE;
                    pyb_lock(lk, t->lock_mode);
                    goto retry;
                }
                if (!wc->may_block)
                    return PYB_START_WOULD_BLOCK | PYB_START_WAIT_PAGE;
                count_wait(ctx, wc, CARRY_WAITED_PAGE);
                if (!(pg = mempool_wait(t, ctx, wc)))
                    return PYB_START_TIMED_OUT | PYB_START_WAIT_PAGE;
                pyb_lock(lk, t->lock_mode);
                goto recheck;
            }
            pyb_store(&s->word, PYB_HIJACK_TAG, PYB_RELAXED);
            pyb_fetch_add(&t->hijacked_pages, 1, PYB_RELAXED);
            ctx->stats.hijack_events++;
            w = PYB_HIJACK_TAG;
        }

        if (is_hijacked(w)) {
            unsigned h1 = (unsigned)half_of(t, b);
            for (unsigned h = (unsigned)half_of(t, *c); h <= h1; h++) {
                uint64_t v = half_get(w, h);
                if (v == t->half_max) {
                    if (t->overflow == PYB_OVERFLOW_WRAP) {
                        ctx->stats.overflow_wraps++;
                        record_half(t, ctx, p, a, b, h);
                        v = 0;
                    } else if (t->overflow == PYB_OVERFLOW_CLAMP) {
                        ctx->stats.overflow_clamps++;
                        record_half(t, ctx, p, a, b, h);
                        *c = (h + 1) * t->half_chunks;
                        continue;
                    } else {
                        uint64_t hs = (uint64_t)h * t->half_chunks;
                        *c = hs > a ? hs : a;
                        pyb_store(&s->word, w, PYB_RELAXED);
                        goto wait;
                    }
                } else {
                    v++;
                }
                w = half_set(w, h, v);
                *c = (h + 1) * t->half_chunks;
            }
            w = normalise_hijack(t, w & ~PYB_HIJACK_DECAYED); /* a start restarts md's decay */
            if (!w)
                pyb_fetch_sub(&t->hijacked_pages, 1, PYB_RELAXED);
            pyb_store(&s->word, w, PYB_RELAXED);
            pyb_unlock(lk, t->lock_mode);
            return 0;
        }

        void *pg = (void *)(uintptr_t)w;
        uint32_t nz = pyb_load(&s->state, PYB_RELAXED);
        for (; *c <= b; (*c)++) {
            uint64_t v = ctr_get(t, pg, *c);
            if (v == t->counter_max) {
                if (t->overflow == PYB_OVERFLOW_WRAP) {
                    ctx->stats.overflow_wraps++;
                    ctr_set(t, pg, *c, 0);
                    nz--;
                } else if (t->overflow == PYB_OVERFLOW_CLAMP) {
                    ctx->stats.overflow_clamps++;
                } else {
                    pyb_store(&s->state, nz, PYB_RELAXED);
                    goto wait;
                }
                record_chunk(t, ctx, p, *c); /* clamped or wrapped: not this start's count */
                continue;
            }
            ctr_set(t, pg, *c, v + 1);
            nz += (v == 0);
        }
        pyb_store(&s->state, nz, PYB_RELAXED);
        if (nz == 0 && t->free_policy == PYB_FREE_EAGER) { /* every counter wrapped to zero */
            pyb_store(&s->word, 0, PYB_RELAXED);
            slot_lost_page(t);
            to_free = pg;
        }
        pyb_unlock(lk, t->lock_mode);
        if (to_free)
            page_release(t, to_free);
        return 0;
    }

wait:
    /* Counter at its maximum under "wait": *c is the chunk to resume at. */
    if (!wc->may_block) {
        pyb_unlock(lk, t->lock_mode);
        return PYB_START_WOULD_BLOCK;
    }
    if (ctl_expired(wc)) {
        pyb_unlock(lk, t->lock_mode);
        return PYB_START_TIMED_OUT;
    }
    count_wait(ctx, wc, CARRY_WAITED_OVERFLOW);
    wait_register(&t->overflow_q, &tk);
    /* The re-check is the next pass over the same counter under the lock: if an end lowered it
     * before we registered, retrying sees that; otherwise that end (or a later one) sees waiters. */
    pyb_unlock(lk, t->lock_mode);
    wait_sleep(&t->overflow_q, &tk, ctl_deadline(wc));
    pyb_lock(lk, t->lock_mode);
    goto retry;
}

/* Decrement one end on page p for the page-relative chunks [a, b]. */
static void end_page_locked(pyb_tracker *t, pyb_ctx *ctx, uint64_t p, uint64_t a, uint64_t b)
{
    pyb_slot *s = &t->slots[p];
    pyb_spinlock *lk = lock_of(t, p);
    void *to_free = NULL;
    int wake = 0;

    pyb_lock(lk, t->lock_mode);
    uint64_t w = pyb_load(&s->word, PYB_RELAXED);
    if (w == 0) {
        ctx->stats.underflows += b - a + 1;
    } else if (is_hijacked(w)) {
        /* All the halves this range overlaps are decremented in this one lock hold, so an end that
         * empties the page still hits exactly the halves its start incremented (I1). */
        for (unsigned h = (unsigned)half_of(t, a); h <= (unsigned)half_of(t, b); h++) {
            uint64_t v = half_get(w, h);
            if (v == 0) {
                ctx->stats.underflows++;
                continue;
            }
            wake |= (v == t->half_max);
            w = half_set(w, h, v - 1);
        }
        w = normalise_hijack(t, w);
        if (!w)
            pyb_fetch_sub(&t->hijacked_pages, 1, PYB_RELAXED);
        pyb_store(&s->word, w, PYB_RELAXED);
    } else {
        void *pg = (void *)(uintptr_t)w;
        uint32_t nz = pyb_load(&s->state, PYB_RELAXED);
        for (uint64_t c = a; c <= b; c++) {
            uint64_t v = ctr_get(t, pg, c);
            if (v == 0) {
                ctx->stats.underflows++;
                continue;
            }
            wake |= (v == t->counter_max);
            ctr_set(t, pg, c, v - 1);
            nz -= (v == 1);
        }
        pyb_store(&s->state, nz, PYB_RELAXED);
        if (nz == 0 && t->free_policy == PYB_FREE_EAGER) {
            pyb_store(&s->word, 0, PYB_RELAXED);
            slot_lost_page(t);
            to_free = pg;
        }
    }
    pyb_unlock(lk, t->lock_mode);
    if (to_free)
        page_release(t, to_free);
    if (wake && t->overflow == PYB_OVERFLOW_WAIT) {
        wake_waiters(&t->overflow_q);
    }
}

static int active_page_locked(pyb_tracker *t, uint64_t p, uint64_t a, uint64_t b)
{
    pyb_slot *s = &t->slots[p];
    pyb_spinlock *lk = lock_of(t, p);
    int active = 0;
    pyb_lock(lk, t->lock_mode);
    uint64_t w = pyb_load(&s->word, PYB_RELAXED);
    if (w && is_hijacked(w)) {
        for (unsigned h = (unsigned)half_of(t, a); h <= (unsigned)half_of(t, b) && !active; h++)
            active = half_get(w, h) != 0;
    } else if (w) {
        void *pg = (void *)(uintptr_t)w;
        for (uint64_t c = a; c <= b && !active; c++)
            active = ctr_get(t, pg, c) != 0;
    }
    pyb_unlock(lk, t->lock_mode);
    return active;
}

/* ------------------------------------------------------------------------------------------------ */
/* Atomic variant (the caller has pinned slot p)                                                      */

/* 64-bit counters (counter_max UINT64_MAX: never at their maximum) of chunks [a, b] of a page: a start's
 * relaxed increments, and an end's decrements, each a release CAS that refuses to go below zero (an
 * underflow, counted). Shared by the page walk and the single-call fast paths. */
static inline void ctr64_inc(_Atomic uint64_t *ctr, uint64_t a, uint64_t b)
{
    for (uint64_t c = a; c <= b; c++)
        pyb_fetch_add(&ctr[c], 1, MO_CTR_INC);
}

static inline void ctr64_dec(pyb_ctx *ctx, _Atomic uint64_t *ctr, uint64_t a, uint64_t b)
{
    for (uint64_t c = a; c <= b; c++) {
        uint64_t v = pyb_load(&ctr[c], PYB_RELAXED);
        while (v && !pyb_cas_weak(&ctr[c], &v, v - 1, MO_CTR_DEC, PYB_RELAXED)) {
        }
        ctx->stats.underflows += v == 0;
    }
}

static int start_page_atomic(pyb_tracker *t, pyb_ctx *ctx, uint64_t p, uint64_t a, uint64_t b, uint64_t *c,
                             wait_ctl *wc)
{
    pyb_slot *s = &t->slots[p];
    wait_ticket tk;

    for (;;) {
        uint64_t w = pyb_load(&s->word, MO_WORD_LOAD);
        if (w == 0) {
            void *pg;
            if (t->alloc_failure == PYB_ALLOC_MEMPOOL && ctx->round_end && wc->may_block) {
                /* resumed in the middle of a mempool round: sleep its rest first (unpinned) */
                ctx_unpin(t, ctx);
                pg = mempool_wait(t, ctx, wc);
                rcu_op_begin(ctx);
                if (!pg)
                    return PYB_START_TIMED_OUT | PYB_START_WAIT_PAGE;
            } else {
                pg = page_for_start(t, ctx);
            }
            if (!pg && t->alloc_failure == PYB_ALLOC_MEMPOOL && t->gfp == PYB_GFP_NOWAIT) {
                ctx->stats.mempool_nulls++; /* mempool_alloc without direct reclaim: NULL, untracked */
                return PYB_START_UNTRACKED;
            }
            if (!pg && t->alloc_failure == PYB_ALLOC_MEMPOOL) {
                if (!(wc->waited & CARRY_PAGE_RETRY)) { /* the second attempt, at once or on resume */
                    wc->waited |= CARRY_PAGE_RETRY;
                    if (!wc->may_block)
                        return PYB_START_WOULD_BLOCK | PYB_START_WAIT_PAGE;
                    continue;
                }
                if (!wc->may_block)
                    return PYB_START_WOULD_BLOCK | PYB_START_WAIT_PAGE;
                count_wait(ctx, wc, CARRY_WAITED_PAGE);
                /* Sleep unpinned, so that a reclaim can free a page into the reserve meanwhile. */
                ctx_unpin(t, ctx);
                pg = mempool_wait(t, ctx, wc);
                rcu_op_begin(ctx);
                if (!pg)
                    return PYB_START_TIMED_OUT | PYB_START_WAIT_PAGE;
            }
            if (pg) {
                uint64_t expected = 0;
                /* release: the zeroed page is visible to whoever acquires the pointer */
                if (pyb_cas(&s->word, &expected, (uint64_t)(uintptr_t)pg, MO_WORD_INSTALL, PYB_ACQUIRE))
                    slot_gained_page(t);
                else
                    page_release(t, pg); /* somebody beat us */
                wc->waited &= ~CARRY_PAGE_RETRY; /* the next page is a new mempool_alloc call */
                continue;
            }
            if (t->alloc_failure == PYB_ALLOC_UNTRACKED)
                return PYB_START_UNTRACKED;
            /* Hijack, counting this write's halves in the same CAS that installs the tag. */
            uint64_t nw = PYB_HIJACK_TAG;
            for (unsigned h = (unsigned)half_of(t, *c); h <= (unsigned)half_of(t, b); h++)
                nw = half_set(nw, h, 1);
            uint64_t expected = 0;
            if (pyb_cas(&s->word, &expected, nw, PYB_ACQ_REL, PYB_ACQUIRE)) {
                pyb_fetch_add(&t->hijacked_pages, 1, PYB_RELAXED);
                ctx->stats.hijack_events++;
                return 0;
            }
            continue;
        }

        if (is_hijacked(w)) {
            unsigned h1 = (unsigned)half_of(t, b);
            unsigned h = (unsigned)half_of(t, *c);
            while (h <= h1) {
                uint64_t v = half_get(w, h), nw;
                if (v == t->half_max) {
                    if (t->overflow == PYB_OVERFLOW_CLAMP) {
                        ctx->stats.overflow_clamps++;
                        record_half(t, ctx, p, a, b, h);
                        *c = (uint64_t)(++h) * t->half_chunks;
                        continue;
                    }
                    if (t->overflow == PYB_OVERFLOW_WAIT) {
                        uint64_t hs = (uint64_t)h * t->half_chunks;
                        *c = hs > a ? hs : a;
                        goto wait;
                    }
                    nw = normalise_hijack(t, half_set(w, h, 0) & ~PYB_HIJACK_DECAYED);
                } else {
                    nw = half_set(w, h, v + 1) & ~PYB_HIJACK_DECAYED; /* a start restarts md's decay */
                }
                if (pyb_cas_weak(&s->word, &w, nw, PYB_ACQ_REL, PYB_ACQUIRE)) {
                    if (v == t->half_max) {
                        ctx->stats.overflow_wraps++;
                        record_half(t, ctx, p, a, b, h);
                        if (!nw)
                            pyb_fetch_sub(&t->hijacked_pages, 1, PYB_RELAXED);
                    }
                    w = nw;
                    *c = (uint64_t)(++h) * t->half_chunks;
                    if (!w && h <= h1)
                        break; /* wrapped to empty: re-evaluate the slot for the rest */
                    continue;
                }
                if (!is_hijacked(w))
                    break; /* un-hijacked under us (only possible before our first half) */
            }
            if (h > h1)
                return 0;
            continue;
        }

        if (is_retiring(w)) {
            /* A reclaim tagged this page: cancel that (the reclaim's unpublishing CAS then fails and
             * the page stays) before counting on it. */
            if (!pyb_cas(&s->word, &w, w & ~PYB_RETIRE_TAG, MO_WORD_CANCEL, PYB_ACQUIRE))
                continue;
            w &= ~PYB_RETIRE_TAG;
        }
        void *pg = (void *)(uintptr_t)w;
        if (t->counter_max == UINT64_MAX) {
            /* The maximum cannot be reached (see header): a plain fetch_add under every policy. */
            ctr64_inc((_Atomic uint64_t *)pg, *c, b);
            *c = b + 1;
            return 0;
        }
        for (; *c <= b; (*c)++) {
            uint64_t v = actr_load(t, pg, *c, PYB_RELAXED);
            for (;;) {
                uint64_t nv;
                if (v == t->counter_max) {
                    if (t->overflow == PYB_OVERFLOW_CLAMP) {
                        ctx->stats.overflow_clamps++;
                        record_chunk(t, ctx, p, *c);
                        break;
                    }
                    if (t->overflow == PYB_OVERFLOW_WAIT)
                        goto wait;
                    nv = 0;
                } else {
                    nv = v + 1;
                }
                if (actr_cas(t, pg, *c, &v, nv)) {
                    if (nv == 0) {
                        ctx->stats.overflow_wraps++;
                        record_chunk(t, ctx, p, *c);
                    }
                    break;
                }
            }
        }
        return 0;

    wait:
        if (!wc->may_block)
            return PYB_START_WOULD_BLOCK;
        if (ctl_expired(wc))
            return PYB_START_TIMED_OUT;
        count_wait(ctx, wc, CARRY_WAITED_OVERFLOW);
        wait_register(&t->overflow_q, &tk);
        {
            /* Re-check after registering (see the waiting protocol). The page cannot be freed: we
             * hold the slot pinned. */
            uint64_t w2 = pyb_load(&s->word, MO_WORD_LOAD);
            int still_full;
            if (w2 == 0)
                still_full = 0;
            else if (is_hijacked(w2))
                still_full = half_get(w2, (unsigned)half_of(t, *c)) == t->half_max;
            else
                still_full = actr_load(t, page_ptr(w2), *c, PYB_RELAXED) == t->counter_max;
            if (!still_full) {
                wait_cancel(&t->overflow_q);
                continue;
            }
        }
        /* Sleep unpinned, so that a reclaim is not held off by a blocked writer. */
        ctx_unpin(t, ctx);
        wait_sleep(&t->overflow_q, &tk, ctl_deadline(wc));
        rcu_op_begin(ctx);
    }
}

static void end_page_atomic(pyb_tracker *t, pyb_ctx *ctx, uint64_t p, uint64_t a, uint64_t b)
{
    pyb_slot *s = &t->slots[p];
    int wake = 0;
    uint64_t w = pyb_load(&s->word, MO_WORD_LOAD);
    if (w == 0) {
        ctx->stats.underflows += b - a + 1;
        return;
    }
    if (is_hijacked(w)) {
        /* One CAS decrements every half this range overlaps (I1), and un-hijacks if both reach 0. */
        unsigned h0 = (unsigned)half_of(t, a), h1 = (unsigned)half_of(t, b);
        for (;;) {
            uint64_t nw = w, under = 0;
            int wk = 0;
            if (!is_hijacked(w)) { /* emptied by a concurrent end: our decrements find zero */
                ctx->stats.underflows += w == 0 ? h1 - h0 + 1 : 0;
                if (w != 0) { /* a page was installed meanwhile: end on it like a page */
                    goto page;
                }
                return;
            }
            for (unsigned h = h0; h <= h1; h++) {
                uint64_t v = half_get(nw, h);
                if (v == 0) {
                    under++;
                    continue;
                }
                wk |= (v == t->half_max);
                nw = half_set(nw, h, v - 1);
            }
            nw = normalise_hijack(t, nw);
            if (pyb_cas_weak(&s->word, &w, nw, PYB_ACQ_REL, PYB_ACQUIRE)) {
                ctx->stats.underflows += under;
                if (!nw)
                    pyb_fetch_sub(&t->hijacked_pages, 1, PYB_RELAXED);
                wake = wk;
                break;
            }
        }
        goto done;
    }
page:
    if (t->counter_max == UINT64_MAX) {
        /* The common atomic configuration, without the width switch; a 64-bit counter is never at its
         * maximum, so there is nobody to wake. Release as in actr_cas_release. */
        ctr64_dec(ctx, page_ptr(w), a, b);
        return;
    }
    {
        void *pg = page_ptr(w);
        for (uint64_t c = a; c <= b; c++) {
            uint64_t v = actr_load(t, pg, c, PYB_RELAXED);
            for (;;) {
                if (v == 0) {
                    ctx->stats.underflows++;
                    break;
                }
                if (actr_cas_release(t, pg, c, &v, v - 1)) {
                    wake |= (v == t->counter_max);
                    break;
                }
            }
        }
    }
done:
    if (wake && t->overflow == PYB_OVERFLOW_WAIT) {
        wake_waiters(&t->overflow_q);
    }
}

static int active_page_atomic(pyb_tracker *t, uint64_t p, uint64_t a, uint64_t b)
{
    uint64_t w = pyb_load(&t->slots[p].word, MO_WORD_LOAD);
    if (w == 0)
        return 0;
    if (is_hijacked(w)) {
        for (unsigned h = (unsigned)half_of(t, a); h <= (unsigned)half_of(t, b); h++)
            if (half_get(w, h))
                return 1;
        return 0;
    }
    void *pg = page_ptr(w);
    for (uint64_t c = a; c <= b; c++)
        if (actr_load_acquire(t, pg, c))
            return 1;
    return 0;
}

/* ------------------------------------------------------------------------------------------------ */
/* Range operations                                                                                   */

/*
 * The chunks of [off, off+len) page by page. Geometry is copied into locals once: the stores the
 * operations make through ctx and through counter pointers could alias the tracker's fields as far as
 * the compiler knows, and re-reading them on every step was a measurable part of a batch's cost.
 */
typedef struct range_walk {
    uint64_t c0, c1, p0, p1, mask;
    unsigned chunk_shift, page_shift;
} range_walk;

static inline range_walk walk_of(const pyb_tracker *t, uint64_t off, uint64_t len)
{
    range_walk r;
    r.chunk_shift = t->chunk_shift;
    r.page_shift = t->page_shift;
    r.mask = t->chunks_per_page - 1;
    r.c0 = off >> r.chunk_shift;
    r.c1 = (off + len - 1) >> r.chunk_shift;
    r.p0 = r.c0 >> r.page_shift;
    r.p1 = r.c1 >> r.page_shift;
    return r;
}

/* First and last page-relative chunk of the range on page p. */
static inline uint64_t walk_first(const range_walk *r, uint64_t p) { return p == r->p0 ? r->c0 & r->mask : 0; }
static inline uint64_t walk_last(const range_walk *r, uint64_t p) { return p == r->p1 ? r->c1 & r->mask : r->mask; }

static int start_range(pyb_tracker *t, pyb_ctx *ctx, uint64_t off, uint64_t len, wait_ctl *wc,
                       uint64_t *resume)
{
    const range_walk w = walk_of(t, off, len);
    const int atomic = t->sync == PYB_SYNC_ATOMIC;
    int ret = ctx->carry & PYB_START_UNTRACKED; /* untracked pages of the part before a WOULD_BLOCK return */
    wc->waited = ctx->carry & (CARRY_WAITED_OVERFLOW | CARRY_WAITED_PAGE | CARRY_PAGE_RETRY);
    if (!(ctx->carry & CARRY_RESUME)) { /* a new start: a new record, no mempool round under way */
        ctx->rec.n = 0;
        ctx->rec.lost = 0;
        ctx->round_end = 0;
    }
    ctx->carry = 0;
    if (atomic)
        rcu_op_begin(ctx);
    for (uint64_t p = w.p0; p <= w.p1; p++) {
        uint64_t a = walk_first(&w, p), b = walk_last(&w, p), c = a;
        int r;
        if (p != w.p0)
            wc->waited &= ~CARRY_PAGE_RETRY; /* a new page: its own two attempts */
        if (atomic) {
            r = start_page_atomic(t, ctx, p, a, b, &c, wc);
        } else {
            r = start_page_locked(t, ctx, p, a, b, &c, wc);
        }
        if (r & PYB_START_UNTRACKED) /* nothing counted on page p from chunk c on */
            record_skip(ctx, (p << w.page_shift) + c, (p << w.page_shift) + b);
        if (r & (PYB_START_WOULD_BLOCK | PYB_START_TIMED_OUT)) {
            uint64_t at = ((p << w.page_shift) + c) << w.chunk_shift;
            *resume = at > off ? at : off;
            ctx->carry = (ret & PYB_START_UNTRACKED) | wc->waited | CARRY_RESUME;
            return ret | r;
        }
        ret |= r;
    }
    ctx->stats.starts++;
    ctx->stats.untracked_writes += (ret & PYB_START_UNTRACKED) != 0;
    return ret;
}

/*
 * The common single call of the atomic variant with 64-bit counters, which never reach their maximum
 * (t->single_fast): a new start (no resume state) or an end within one page whose slot holds a plain
 * page. Each does exactly what start_range / end_range do on that path - a new record and the count for
 * a start, the reader section, ctr64_inc or ctr64_dec - without the page walk and the wait set-up.
 * 1 = done; 0 = not that case, nothing changed but the context pinned (the general path's rcu_op_begin
 * finds it pinned and only repeats the quiescent-state check; the slot word the fast path loaded is
 * dropped before anything is dereferenced), so the caller takes the general path.
 */
static inline int start_fast(pyb_tracker *t, pyb_ctx *ctx, uint64_t off, uint64_t len)
{
    if (ctx->carry)
        return 0;
    const range_walk r = walk_of(t, off, len);
    if (r.p0 != r.p1)
        return 0;
    rcu_op_begin(ctx);
    uint64_t w = pyb_load(&t->slots[r.p0].word, MO_WORD_LOAD);
    if (!w || (w & (PYB_HIJACK_TAG | PYB_RETIRE_TAG))) /* no page yet, hijacked, or retiring */
        return 0;
    ctr64_inc((_Atomic uint64_t *)(uintptr_t)w, r.c0 & r.mask, r.c1 & r.mask);
    ctx->rec.n = 0; /* a new start: a new (empty) record, as start_range keeps */
    ctx->rec.lost = 0;
    ctx->stats.starts++;
    return 1;
}

static inline int end_fast(pyb_tracker *t, pyb_ctx *ctx, uint64_t off, uint64_t len)
{
    const range_walk r = walk_of(t, off, len);
    if (r.p0 != r.p1)
        return 0;
    rcu_op_begin(ctx);
    uint64_t w = pyb_load(&t->slots[r.p0].word, MO_WORD_LOAD);
    if (!w || is_hijacked(w)) /* (a retiring page is still a page: end_page_atomic ends on it too) */
        return 0;
    ctr64_dec(ctx, page_ptr(w), r.c0 & r.mask, r.c1 & r.mask);
    ctx->stats.ends++;
    return 1;
}

/* The general paths out of line, so that the fast paths' callers save no registers for them. */
static __attribute__((noinline)) int start_slow(pyb_tracker *t, pyb_ctx *ctx, uint64_t off, uint64_t len,
                                                int may_block, uint64_t *resume)
{
    wait_ctl wc = {may_block, 0, t->wait_timeout_ns, 0};
    return start_range(t, ctx, off, len, &wc, resume);
}

/* The atomic variant's single start: the fast path, else the general one (a tail call). Apart from the
 * dispatch below, so that the lock variants' calls save no registers for the fast path either. */
static __attribute__((noinline)) int start_single_fast(pyb_tracker *t, pyb_ctx *ctx, uint64_t off, uint64_t len,
                                                       int may_block, uint64_t *resume)
{
    if (start_fast(t, ctx, off, len))
        return 0;
    return start_slow(t, ctx, off, len, may_block, resume);
}

int pyb_tracker_start(pyb_tracker *t, pyb_ctx *ctx, uint64_t off, uint64_t len, int may_block,
                      uint64_t *resume)
{
    if (t->single_fast)
        return start_single_fast(t, ctx, off, len, may_block, resume);
    return start_slow(t, ctx, off, len, may_block, resume);
}

int pyb_tracker_start_until(pyb_tracker *t, pyb_ctx *ctx, uint64_t off, uint64_t len, uint64_t deadline_ns,
                            uint64_t *resume)
{
    wait_ctl wc = {1, deadline_ns, 0, 0};
    return start_range(t, ctx, off, len, &wc, resume);
}

static inline __attribute__((always_inline)) void end_range(pyb_tracker *t, pyb_ctx *ctx, uint64_t off, uint64_t len)
{
    const range_walk w = walk_of(t, off, len);
    const int atomic = t->sync == PYB_SYNC_ATOMIC;
    if (atomic)
        rcu_op_begin(ctx);
    for (uint64_t p = w.p0; p <= w.p1; p++) {
        if (atomic) {
            end_page_atomic(t, ctx, p, walk_first(&w, p), walk_last(&w, p));
        } else {
            end_page_locked(t, ctx, p, walk_first(&w, p), walk_last(&w, p));
        }
    }
}

static __attribute__((noinline)) void end_slow(pyb_tracker *t, pyb_ctx *ctx, uint64_t off, uint64_t len)
{
    end_range(t, ctx, off, len);
    ctx->stats.ends++;
}

static __attribute__((noinline)) void end_single_fast(pyb_tracker *t, pyb_ctx *ctx, uint64_t off, uint64_t len)
{
    if (!end_fast(t, ctx, off, len))
        end_slow(t, ctx, off, len);
}

void pyb_tracker_end(pyb_tracker *t, pyb_ctx *ctx, uint64_t off, uint64_t len)
{
    if (t->single_fast)
        end_single_fast(t, ctx, off, len);
    else
        end_slow(t, ctx, off, len);
}

/* Decrement (as an end does) the absolute chunks [x, y], page by page. */
static void end_chunks(pyb_tracker *t, pyb_ctx *ctx, uint64_t x, uint64_t y)
{
    const uint64_t mask = t->chunks_per_page - 1;
    const uint64_t p0 = x >> t->page_shift, p1 = y >> t->page_shift;
    if (t->sync == PYB_SYNC_ATOMIC)
        rcu_op_begin(ctx);
    for (uint64_t p = p0; p <= p1; p++) {
        uint64_t a = p == p0 ? x & mask : 0, b = p == p1 ? y & mask : mask;
        if (t->sync == PYB_SYNC_ATOMIC) {
            end_page_atomic(t, ctx, p, a, b);
        } else {
            end_page_locked(t, ctx, p, a, b);
        }
    }
}

/*
 * Decrement every chunk of [off, off+len) outside rec's ranges (and before rec->lost_from when lost).
 * A hijacked page is decremented once per half by each end_chunks call, so two calls must never reach
 * the same half: they cannot, because a skip on a hijacked page covers the whole half within the
 * range (record_half), and a page that was a plain page when the start counted on it stays one while
 * those counts are there (I1) - if the start counted nothing on it, no call reaches it.
 */
static int undo_range(pyb_tracker *t, pyb_ctx *ctx, uint64_t off, uint64_t len, const pyb_start_record *rec)
{
    if (!len)
        return 0;
    uint64_t x = off >> t->chunk_shift, y = (off + len - 1) >> t->chunk_shift;
    int lost = 0;
    if (rec && rec->lost && rec->lost_from <= y) {
        lost = 1;
        if (rec->lost_from <= x)
            return 1;
        y = rec->lost_from - 1;
    }
    for (uint32_t i = 0; rec && i < rec->n && x <= y; i++) {
        const pyb_skip *k = &rec->skip[i];
        if (k->last < x)
            continue;
        if (k->first > y)
            break;
        if (k->first > x)
            end_chunks(t, ctx, x, k->first - 1);
        x = k->last + 1;
        if (x == 0) /* k->last was the largest chunk index */
            return lost;
    }
    if (x <= y)
        end_chunks(t, ctx, x, y);
    return lost;
}

int pyb_tracker_undo_start(pyb_tracker *t, pyb_ctx *ctx, uint64_t off, uint64_t len)
{
    int lost = undo_range(t, ctx, off, len, &ctx->rec);
    ctx->carry = 0;
    ctx->rec.n = 0; /* keep lost/lost_from for the caller's message; the next start resets them */
    return lost;
}

int pyb_tracker_undo_recorded(pyb_tracker *t, pyb_ctx *ctx, uint64_t off, uint64_t len,
                              const pyb_start_record *rec)
{
    return undo_range(t, ctx, off, len, rec);
}

int pyb_tracker_is_active(pyb_tracker *t, pyb_ctx *ctx, uint64_t off, uint64_t len)
{
    const range_walk w = walk_of(t, off, len);
    const int atomic = t->sync == PYB_SYNC_ATOMIC;
    if (atomic)
        rcu_op_begin(ctx);
    for (uint64_t p = w.p0; p <= w.p1; p++) {
        int active;
        if (atomic) {
            active = active_page_atomic(t, p, walk_first(&w, p), walk_last(&w, p));
        } else {
            active = active_page_locked(t, p, walk_first(&w, p), walk_last(&w, p));
        }
        if (active)
            return 1;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------------ */
/* Batch operations                                                                                   */

/*
 * The batch loops handle the common element on their own - a write whose chunks lie on one page that
 * holds a plain page (not empty, hijacked or being retired), and for a start no counter at its
 * maximum - and hand every other element to the single-element path, which is the definition. The
 * chunk range is computed once per element from geometry kept in locals, there is one loop instance
 * per counter width, length shape (one scalar length or an array), and for the lock variants per
 * sync and default lock mode (each a constant in its instance), statistics stay in locals until the
 * batch publishes them to ctx. An end that leaves its one counter non-zero does not touch the slot's
 * count of non-zero counters. No software prefetch: prefetching the next element's slot cost 8-10
 * instructions per element and measured no faster on a 64 TiB device with every page resident, and
 * slower on the one-page workload (docs/benchmarks.md).
 */
#define BATCH_QUIESCE_EVERY 256 /* elements between two quiescent checks of a long atomic batch */

static inline __attribute__((always_inline)) uint64_t w_get(void *pg, uint64_t i, const int bits)
{
    return bits == 16 ? ((uint16_t *)pg)[i] : bits == 32 ? ((uint32_t *)pg)[i] : ((uint64_t *)pg)[i];
}

static inline __attribute__((always_inline)) void w_set(void *pg, uint64_t i, uint64_t v, const int bits)
{
    if (bits == 16)
        ((uint16_t *)pg)[i] = (uint16_t)v;
    else if (bits == 32)
        ((uint32_t *)pg)[i] = (uint32_t)v;
    else
        ((uint64_t *)pg)[i] = v;
}

/* Reset ctx's record for a batch that is not resuming a blocked start (as start_range does). */
static inline int batch_fresh(pyb_ctx *ctx)
{
    if (ctx->carry)
        return 0;
    ctx->rec.n = 0;
    ctx->rec.lost = 0;
    return 1;
}

/* The single-element start of element i; returns 1 if it was not clean (the batch stops there). */
static inline int start_one(pyb_tracker *t, pyb_ctx *ctx, uint64_t off, uint64_t len, int *ret, uint64_t *resume)
{
    int r = pyb_tracker_start(t, ctx, off, len, 0, resume);
    if (r || ctx->rec.n || ctx->rec.lost) {
        *ret = r;
        return 1;
    }
    return 0;
}

/*
 * A page's span in offset bits, for the batch loops' one-shift page index. With chunk_size >= 2^53 it
 * would reach 64 or more, where a shift is undefined: every offset (< 2^63, as pyb_tracker_create's bound
 * on device_size makes sure) is then on page 0, which a shift by 63 gives too, and every write lies on one
 * page.
 */
static inline unsigned batch_page_bits(const pyb_tracker *t)
{
    const unsigned b = t->chunk_shift + t->page_shift;
    return b < 64 ? b : 63;
}

static inline uint64_t batch_page_span(const pyb_tracker *t)
{
    const unsigned b = t->chunk_shift + t->page_shift;
    return b < 64 ? (uint64_t)1 << b : UINT64_MAX;
}

/* Element i's length: a constant in the instances for one scalar length (has_lens 0). */
#define ELEMENT_LEN(i) (has_lens ? lens[i] : len)

/*
 * The lock variants' loops. Every parameter after `resume` is a constant in each instance: the
 * counter width, whether lengths come as an array, global (one lock) or page (the slot's lock), and
 * the lock mode - pyb_lock/pyb_unlock then reduce to the mode's own primitive. The dispatcher gives the
 * default mode (pthread) its own instances; any other mode runs the instance whose `mode` is read from
 * the tracker (START_LOCKED_MODES, END_LOCKED_MODES).
 */
static inline __attribute__((always_inline)) size_t start_many_locked(pyb_tracker *t, pyb_ctx *ctx,
                                                                      const uint64_t *offs, const uint64_t *lens,
                                                                      uint64_t len, size_t n, int *ret, uint64_t *resume,
                                                                      const int bits, const int has_lens,
                                                                      const int global, const int mode)
{
    const unsigned cs = t->chunk_shift, pgb = batch_page_bits(t);
    const uint64_t mask = t->chunks_per_page - 1, max = t->counter_max;
    const uint64_t chunk_span = (uint64_t)1 << cs, page_span = batch_page_span(t);
    pyb_slot *const slots = t->slots;
    uint64_t starts = 0;
    size_t i = 0;
    if (n && !batch_fresh(ctx)) { /* resuming a blocked start: the single path */
        if (start_one(t, ctx, offs[0], ELEMENT_LEN(0), ret, resume))
            return 0;
        i = 1;
    }
    for (; i < n; i++) {
        const uint64_t off = offs[i], last = off + ELEMENT_LEN(i) - 1;
        if ((off ^ last) < page_span) { /* one page: off and last agree above the page's bits */
            pyb_slot *s = &slots[off >> pgb];
            pyb_spinlock *lk = global ? &t->global_lock : &s->lock;
            const uint64_t a = (off >> cs) & mask;
            pyb_lock(lk, mode);
            uint64_t w = pyb_load(&s->word, PYB_RELAXED);
            if (w && !is_hijacked(w)) {
                void *pg = (void *)(uintptr_t)w;
                const uint64_t b = (last >> cs) & mask;
                if ((off ^ last) < chunk_span) { /* one chunk, the common write */
                    const uint64_t v = w_get(pg, a, bits);
                    if (v != max) {
                        w_set(pg, a, v + 1, bits);
                        if (v == 0)
                            pyb_store(&s->state, pyb_load(&s->state, PYB_RELAXED) + 1, PYB_RELAXED);
                        pyb_unlock(lk, mode);
                        starts++;
                        continue;
                    }
                }
                uint64_t c = a;
                while (c <= b && w_get(pg, c, bits) != max)
                    c++;
                if (a != b && c > b) { /* no counter at its maximum: count them all */
                    uint32_t nz = pyb_load(&s->state, PYB_RELAXED);
                    c = a;
                    do {
                        uint64_t v = w_get(pg, c, bits);
                        w_set(pg, c, v + 1, bits);
                        nz += v == 0;
                    } while (++c <= b);
                    pyb_store(&s->state, nz, PYB_RELAXED);
                    pyb_unlock(lk, mode);
                    starts++;
                    continue;
                }
            }
            pyb_unlock(lk, mode);
        }
        ctx->stats.starts += starts;
        starts = 0;
        if (start_one(t, ctx, off, last - off + 1, ret, resume))
            return i;
    }
    ctx->stats.starts += starts;
    return n;
}

static inline __attribute__((always_inline)) size_t start_many_atomic64(pyb_tracker *t, pyb_ctx *ctx,
                                                                        const uint64_t *offs, const uint64_t *lens,
                                                                        uint64_t len, size_t n, int *ret,
                                                                        uint64_t *resume, const int has_lens)
{
    const unsigned cs = t->chunk_shift, pgb = batch_page_bits(t);
    const uint64_t mask = t->chunks_per_page - 1;
    const uint64_t chunk_span = (uint64_t)1 << cs, page_span = batch_page_span(t);
    pyb_slot *const slots = t->slots;
    uint64_t starts = 0;
    size_t i = 0;
    if (n && !batch_fresh(ctx)) {
        if (start_one(t, ctx, offs[0], ELEMENT_LEN(0), ret, resume))
            return 0;
        i = 1;
    }
    while (i < n) {
        const size_t stop = n - i > BATCH_QUIESCE_EVERY ? i + BATCH_QUIESCE_EVERY : n;
        rcu_op_begin(ctx); /* and a quiescent check every BATCH_QUIESCE_EVERY elements */
        for (; i < stop; i++) {
            const uint64_t off = offs[i], last = off + ELEMENT_LEN(i) - 1;
            const uint64_t w = pyb_load(&slots[off >> pgb].word, MO_WORD_LOAD);
            if ((off ^ last) < page_span && w && !(w & (PYB_HIJACK_TAG | PYB_RETIRE_TAG))) {
                _Atomic uint64_t *ctr = (_Atomic uint64_t *)(uintptr_t)w;
                uint64_t c = (off >> cs) & mask;
                if ((off ^ last) < chunk_span) { /* one chunk, the common write */
                    pyb_fetch_add(&ctr[c], 1, MO_CTR_INC);
                } else {
                    const uint64_t b = (last >> cs) & mask;
                    do
                        pyb_fetch_add(&ctr[c], 1, MO_CTR_INC);
                    while (++c <= b);
                }
                starts++;
                continue;
            }
            ctx->stats.starts += starts;
            starts = 0;
            if (start_one(t, ctx, off, last - off + 1, ret, resume))
                return i;
        }
    }
    ctx->stats.starts += starts;
    return n;
}

/* The lock variants' start loop for one counter width and length shape, per sync and lock mode. */
#define START_LOCKED_MODES(bits, has_lens)                                                            \
    do {                                                                                              \
        const int global = t->sync == PYB_SYNC_GLOBAL;                                                \
        switch (t->lock_mode) {                                                                       \
        case PYB_LOCK_PTHREAD:                                                                        \
            return global ? start_many_locked(t, ctx, offs, lens, len, n, ret, resume, bits, has_lens, 1, \
                                              PYB_LOCK_PTHREAD)                                       \
                          : start_many_locked(t, ctx, offs, lens, len, n, ret, resume, bits, has_lens, 0, \
                                              PYB_LOCK_PTHREAD);                                      \
        default: /* a mode without instances of its own: pyb_lock dispatches on it per element */    \
            return global ? start_many_locked(t, ctx, offs, lens, len, n, ret, resume, bits, has_lens, 1, \
                                              t->lock_mode)                                           \
                          : start_many_locked(t, ctx, offs, lens, len, n, ret, resume, bits, has_lens, 0, \
                                              t->lock_mode);                                          \
        }                                                                                             \
    } while (0)

static size_t start_many_locked16(pyb_tracker *t, pyb_ctx *ctx, const uint64_t *offs, const uint64_t *lens,
                                  uint64_t len, size_t n, int *ret, uint64_t *resume)
{
    if (lens)
        START_LOCKED_MODES(16, 1);
    START_LOCKED_MODES(16, 0);
}

static size_t start_many_locked32(pyb_tracker *t, pyb_ctx *ctx, const uint64_t *offs, const uint64_t *lens,
                                  uint64_t len, size_t n, int *ret, uint64_t *resume)
{
    if (lens)
        START_LOCKED_MODES(32, 1);
    START_LOCKED_MODES(32, 0);
}

static size_t start_many_locked64(pyb_tracker *t, pyb_ctx *ctx, const uint64_t *offs, const uint64_t *lens,
                                  uint64_t len, size_t n, int *ret, uint64_t *resume)
{
    if (lens)
        START_LOCKED_MODES(64, 1);
    START_LOCKED_MODES(64, 0);
}

size_t pyb_tracker_start_many(pyb_tracker *t, pyb_ctx *ctx, const uint64_t *offs, const uint64_t *lens,
                              uint64_t len, size_t n, int *ret, uint64_t *resume)
{
    *ret = 0;
    if (t->sync == PYB_SYNC_ATOMIC) {
        if (t->counter_max == UINT64_MAX)
            return lens ? start_many_atomic64(t, ctx, offs, lens, len, n, ret, resume, 1)
                        : start_many_atomic64(t, ctx, offs, lens, len, n, ret, resume, 0);
        for (size_t i = 0; i < n; i++) /* narrower atomic counters: the CAS path of each start */
            if (start_one(t, ctx, offs[i], lens ? lens[i] : len, ret, resume))
                return i;
        return n;
    }
    switch (t->counter_bits) {
    case 16: return start_many_locked16(t, ctx, offs, lens, len, n, ret, resume);
    case 32: return start_many_locked32(t, ctx, offs, lens, len, n, ret, resume);
    default: return start_many_locked64(t, ctx, offs, lens, len, n, ret, resume);
    }
}

static inline __attribute__((always_inline)) void end_many_locked(pyb_tracker *t, pyb_ctx *ctx, const uint64_t *offs,
                                                                  const uint64_t *lens, uint64_t len, size_t n,
                                                                  const int bits, const int has_lens,
                                                                  const int global, const int mode)
{
    const unsigned cs = t->chunk_shift, pgb = batch_page_bits(t);
    const int eager = t->free_policy == PYB_FREE_EAGER;
    const uint64_t mask = t->chunks_per_page - 1, max = t->counter_max;
    const uint64_t chunk_span = (uint64_t)1 << cs, page_span = batch_page_span(t);
    pyb_slot *const slots = t->slots;
    uint64_t under = 0;
    int wake = 0;
    for (size_t i = 0; i < n; i++) {
        const uint64_t off = offs[i], last = off + ELEMENT_LEN(i) - 1;
        if ((off ^ last) < page_span) {
            pyb_slot *s = &slots[off >> pgb];
            pyb_spinlock *lk = global ? &t->global_lock : &s->lock;
            uint64_t c = (off >> cs) & mask;
            pyb_lock(lk, mode);
            uint64_t w = pyb_load(&s->word, PYB_RELAXED);
            if (w && !is_hijacked(w)) {
                void *pg = (void *)(uintptr_t)w, *to_free = NULL;
                if ((off ^ last) < chunk_span) { /* one chunk, the common write */
                    const uint64_t v = w_get(pg, c, bits);
                    if (v > 1) { /* stays non-zero: the page's count of non-zero counters is unchanged */
                        w_set(pg, c, v - 1, bits);
                        if (v == max)
                            wake = 1;
                        pyb_unlock(lk, mode);
                        continue;
                    }
                }
                const uint64_t b = (last >> cs) & mask;
                uint32_t nz = pyb_load(&s->state, PYB_RELAXED);
                do {
                    uint64_t v = w_get(pg, c, bits);
                    if (v == 0) {
                        under++;
                        continue;
                    }
                    wake |= v == max;
                    w_set(pg, c, v - 1, bits);
                    nz -= v == 1;
                } while (++c <= b);
                pyb_store(&s->state, nz, PYB_RELAXED);
                if (nz == 0 && eager) { /* as end_page_locked */
                    pyb_store(&s->word, 0, PYB_RELAXED);
                    slot_lost_page(t);
                    to_free = pg;
                }
                pyb_unlock(lk, mode);
                if (to_free)
                    page_release(t, to_free);
                continue;
            }
            pyb_unlock(lk, mode);
        }
        end_range(t, ctx, off, last - off + 1);
    }
    ctx->stats.underflows += under;
    ctx->stats.ends += n;
    if (wake && t->overflow == PYB_OVERFLOW_WAIT)
        wake_waiters(&t->overflow_q);
}

static inline __attribute__((always_inline)) void end_many_atomic64(pyb_tracker *t, pyb_ctx *ctx,
                                                                    const uint64_t *offs, const uint64_t *lens,
                                                                    uint64_t len, size_t n, const int has_lens)
{
    const unsigned cs = t->chunk_shift, pgb = batch_page_bits(t);
    const uint64_t mask = t->chunks_per_page - 1;
    const uint64_t chunk_span = (uint64_t)1 << cs, page_span = batch_page_span(t);
    pyb_slot *const slots = t->slots;
    uint64_t under = 0;
    size_t i = 0;
    while (i < n) {
        const size_t stop = n - i > BATCH_QUIESCE_EVERY ? i + BATCH_QUIESCE_EVERY : n;
        rcu_op_begin(ctx);
        for (; i < stop; i++) {
            const uint64_t off = offs[i], last = off + ELEMENT_LEN(i) - 1;
            const uint64_t w = pyb_load(&slots[off >> pgb].word, MO_WORD_LOAD);
            if ((off ^ last) < page_span && w && !is_hijacked(w)) { /* a retiring page is ended as it is */
                _Atomic uint64_t *ctr = page_ptr(w);
                uint64_t c = (off >> cs) & mask;
                if ((off ^ last) < chunk_span) { /* one chunk, the common write */
                    uint64_t v = pyb_load(&ctr[c], PYB_RELAXED);
                    while (v && !pyb_cas_weak(&ctr[c], &v, v - 1, MO_CTR_DEC, PYB_RELAXED)) {
                    }
                    under += v == 0;
                    continue;
                }
                const uint64_t b = (last >> cs) & mask;
                do {
                    uint64_t v = pyb_load(&ctr[c], PYB_RELAXED);
                    while (v && !pyb_cas_weak(&ctr[c], &v, v - 1, MO_CTR_DEC, PYB_RELAXED)) {
                    }
                    under += v == 0;
                } while (++c <= b);
                continue;
            }
            end_range(t, ctx, off, last - off + 1);
        }
    }
    ctx->stats.underflows += under;
    ctx->stats.ends += n;
}

/* The lock variants' end loop for one counter width and length shape, per sync and lock mode. */
#define END_LOCKED_MODES(bits, has_lens)                                                              \
    do {                                                                                              \
        const int global = t->sync == PYB_SYNC_GLOBAL;                                                \
        switch (t->lock_mode) {                                                                       \
        case PYB_LOCK_PTHREAD:                                                                        \
            if (global)                                                                               \
                end_many_locked(t, ctx, offs, lens, len, n, bits, has_lens, 1, PYB_LOCK_PTHREAD);     \
            else                                                                                      \
                end_many_locked(t, ctx, offs, lens, len, n, bits, has_lens, 0, PYB_LOCK_PTHREAD);     \
            return;                                                                                   \
        default: /* a mode without instances of its own: pyb_lock dispatches on it per element */    \
            if (global)                                                                               \
                end_many_locked(t, ctx, offs, lens, len, n, bits, has_lens, 1, t->lock_mode);         \
            else                                                                                      \
                end_many_locked(t, ctx, offs, lens, len, n, bits, has_lens, 0, t->lock_mode);         \
            return;                                                                                   \
        }                                                                                             \
    } while (0)

static void end_many_locked16(pyb_tracker *t, pyb_ctx *ctx, const uint64_t *offs, const uint64_t *lens,
                              uint64_t len, size_t n)
{
    if (lens)
        END_LOCKED_MODES(16, 1);
    END_LOCKED_MODES(16, 0);
}

static void end_many_locked32(pyb_tracker *t, pyb_ctx *ctx, const uint64_t *offs, const uint64_t *lens,
                              uint64_t len, size_t n)
{
    if (lens)
        END_LOCKED_MODES(32, 1);
    END_LOCKED_MODES(32, 0);
}

static void end_many_locked64(pyb_tracker *t, pyb_ctx *ctx, const uint64_t *offs, const uint64_t *lens,
                              uint64_t len, size_t n)
{
    if (lens)
        END_LOCKED_MODES(64, 1);
    END_LOCKED_MODES(64, 0);
}

void pyb_tracker_end_many(pyb_tracker *t, pyb_ctx *ctx, const uint64_t *offs, const uint64_t *lens, uint64_t len,
                          size_t n)
{
    if (t->sync == PYB_SYNC_ATOMIC) {
        if (t->counter_max == UINT64_MAX) {
            if (lens)
                end_many_atomic64(t, ctx, offs, lens, len, n, 1);
            else
                end_many_atomic64(t, ctx, offs, lens, len, n, 0);
        } else {
            for (size_t i = 0; i < n; i++)
                end_range(t, ctx, offs[i], lens ? lens[i] : len);
            ctx->stats.ends += n;
        }
        return;
    }
    switch (t->counter_bits) {
    case 16: end_many_locked16(t, ctx, offs, lens, len, n); break;
    case 32: end_many_locked32(t, ctx, offs, lens, len, n); break;
    default: end_many_locked64(t, ctx, offs, lens, len, n); break;
    }
}

void pyb_tracker_ctx_unpin(pyb_tracker *t, pyb_ctx *ctx) { ctx_unpin(t, ctx); }

void pyb_tracker_ctx_done(pyb_tracker *t, pyb_ctx *ctx)
{
    ctx_unpin(t, ctx);
    pyb_tstats *ls = &ctx->stats;
#define FOLD(field, dst) \
    if (ls->field) { pyb_fetch_add(&t->dst, ls->field, PYB_RELAXED); ls->field = 0; }
    FOLD(starts, st_starts)
    FOLD(ends, st_ends)
    FOLD(untracked_writes, st_untracked)
    FOLD(alloc_failures, st_alloc_failures)
    FOLD(underflows, st_underflows)
    FOLD(hijack_events, st_hijack_events)
    FOLD(overflow_waits, st_waits)
    FOLD(overflow_clamps, st_clamps)
    FOLD(overflow_wraps, st_wraps)
    FOLD(mempool_waits, st_mempool_waits)
    FOLD(mempool_nulls, st_mempool_nulls)
#undef FOLD
}

/* Read the counter of page-relative chunk c on slot p (caller holds the lock or has pinned p). */
static uint64_t read_counter(pyb_tracker *t, uint64_t p, uint64_t c)
{
    int atomic = t->sync == PYB_SYNC_ATOMIC;
    uint64_t w = pyb_load(&t->slots[p].word, atomic ? MO_WORD_LOAD : PYB_RELAXED);
    if (w == 0)
        return 0;
    if (is_hijacked(w))
        return half_get(w, (unsigned)half_of(t, c));
    return atomic ? actr_load(t, page_ptr(w), c, PYB_RELAXED) : ctr_get(t, page_ptr(w), c);
}

uint64_t pyb_tracker_count(pyb_tracker *t, uint64_t off)
{
    uint64_t chunk = chunk_of(t, off), p = page_of(t, chunk), v;
    if (t->sync == PYB_SYNC_ATOMIC) {
        pyb_ctx ctx = PYB_CTX_INIT;
        rcu_op_begin(&ctx);
        v = read_counter(t, p, in_page(t, chunk));
        ctx_unpin(t, &ctx);
    } else {
        pyb_lock(lock_of(t, p), t->lock_mode);
        v = read_counter(t, p, in_page(t, chunk));
        pyb_unlock(lock_of(t, p), t->lock_mode);
    }
    return v;
}

void pyb_tracker_counts(pyb_tracker *t, uint64_t *out)
{
    pyb_ctx ctx = PYB_CTX_INIT;
    for (uint64_t p = 0; p < t->n_slots; p++) {
        uint64_t base = p << t->page_shift;
        uint64_t n = t->n_chunks - base < t->chunks_per_page ? t->n_chunks - base : t->chunks_per_page;
        if (t->sync == PYB_SYNC_ATOMIC)
            rcu_op_begin(&ctx);
        else
            pyb_lock(lock_of(t, p), t->lock_mode);
        for (uint64_t c = 0; c < n; c++)
            out[base + c] = read_counter(t, p, c);
        if (t->sync != PYB_SYNC_ATOMIC)
            pyb_unlock(lock_of(t, p), t->lock_mode);
    }
    ctx_unpin(t, &ctx);
}

static int page_all_zero(pyb_tracker *t, void *pg)
{
    for (uint64_t c = 0; c < t->chunks_per_page; c++)
        if ((t->sync == PYB_SYNC_ATOMIC ? actr_load(t, pg, c, MO_ZERO_SCAN) : ctr_get(t, pg, c)) != 0)
            return 0;
    return 1;
}

/* Free the pages unpublished by earlier reclaims once their grace period has elapsed (waiting for it
 * at most PYB_GRACE_WAIT_NS when `wait`). Caller holds reclaim_mu. Returns the number freed. */
static uint64_t release_retired(pyb_tracker *t, int wait)
{
    uint32_t n = t->n_retired;
    if (!n || !(wait ? rcu_gp_wait(t->retired_gp) : rcu_gp_elapsed(t->retired_gp)))
        return 0;
    for (uint32_t i = 0; i < n; i++)
        page_release(t, t->retired[i]);
    t->n_retired = 0;
    return n;
}

/* Atomic variant: the two-grace-period retirement of the protocol in pyb_tracker.h, RECLAIM_BATCH
 * pages at a time. */
static uint64_t reclaim_atomic(pyb_tracker *t)
{
    uint64_t freed = 0;
    uint64_t cand[RECLAIM_BATCH];
    pthread_mutex_lock(&t->reclaim_mu);
    freed += release_retired(t, 1);
    for (uint64_t p = 0; p < t->n_slots && !t->n_retired;) {
        /* Step 1: tag idle-looking pages (a filter: the decision is step 3's). */
        uint32_t n = 0;
        for (; p < t->n_slots && n < RECLAIM_BATCH; p++) {
            uint64_t w = pyb_load(&t->slots[p].word, MO_RECLAIM_LOAD);
            if (!w || is_hijacked(w) || is_retiring(w) || !page_all_zero(t, page_ptr(w)))
                continue;
            if (pyb_cas(&t->slots[p].word, &w, w | PYB_RETIRE_TAG, MO_WORD_TAG, PYB_RELAXED))
                cand[n++] = p;
        }
        if (!n)
            continue;
        /* Step 2: every start that found the page untagged has finished with it. */
        int elapsed = rcu_gp_wait(rcu_gp_begin());
        /* Step 3: unpublish the pages still tagged and all zero; untag the rest (the CAS fails if a
         * start cancelled the tag, which leaves the page as the start left it). */
        for (uint32_t i = 0; i < n; i++) {
            pyb_slot *s = &t->slots[cand[i]];
            uint64_t w = pyb_load(&s->word, MO_RECLAIM_LOAD);
            if (!is_retiring(w))
                continue;
            if (elapsed && page_all_zero(t, page_ptr(w)) &&
                pyb_cas(&s->word, &w, 0, MO_WORD_UNPUBLISH, PYB_RELAXED)) {
                t->retired[t->n_retired++] = page_ptr(w);
                slot_lost_page(t);
            } else {
                pyb_cas(&s->word, &w, w & ~PYB_RETIRE_TAG, MO_WORD_UNTAG, PYB_RELAXED);
            }
        }
        if (t->n_retired) {
            /* Step 4: every reader that may still hold a retired page has left it. */
            t->retired_gp = rcu_gp_begin();
            freed += release_retired(t, 1);
        }
        if (!elapsed)
            break; /* a reader is holding grace periods off: try again at the next reclaim */
    }
    pthread_mutex_unlock(&t->reclaim_mu);
    return freed;
}

/* The daemon's pass over hijacked pages under PYB_UNHIJACK_ON_DECAY (pyb_tracker.h): the next value of a
 * drained hijacked word - marked if it was not, empty if it was - or w itself when it is not a drained
 * hijacked word. */
static inline uint64_t decay_step(uint64_t w)
{
    if (!is_hijacked(w) || (w & ~(PYB_HIJACK_TAG | PYB_HIJACK_DECAYED)))
        return w;
    return (w & PYB_HIJACK_DECAYED) ? 0 : w | PYB_HIJACK_DECAYED;
}

/* One decay pass over every slot. A start or end changes the word it counts on, so a CAS from the value
 * read fails if any count arrived meanwhile (atomic variant; the lock variants hold the slot's lock).
 * The word holds no page, so nothing waits for readers. */
static void decay_hijacked(pyb_tracker *t)
{
    for (uint64_t p = 0; p < t->n_slots; p++) {
        pyb_slot *s = &t->slots[p];
        if (t->sync == PYB_SYNC_ATOMIC) {
            uint64_t w = pyb_load(&s->word, MO_RECLAIM_LOAD), nw = decay_step(w);
            if (nw != w && pyb_cas(&s->word, &w, nw, PYB_ACQ_REL, PYB_RELAXED) && !nw)
                pyb_fetch_sub(&t->hijacked_pages, 1, PYB_RELAXED);
            continue;
        }
        pyb_spinlock *lk = lock_of(t, p);
        pyb_lock(lk, t->lock_mode);
        uint64_t w = pyb_load(&s->word, PYB_RELAXED), nw = decay_step(w);
        if (nw != w) {
            pyb_store(&s->word, nw, PYB_RELAXED);
            if (!nw)
                pyb_fetch_sub(&t->hijacked_pages, 1, PYB_RELAXED);
        }
        pyb_unlock(lk, t->lock_mode);
    }
}

uint64_t pyb_tracker_reclaim(pyb_tracker *t)
{
    if (t->unhijack == PYB_UNHIJACK_ON_DECAY)
        decay_hijacked(t);
    if (t->sync == PYB_SYNC_ATOMIC)
        return reclaim_atomic(t);
    uint64_t freed = 0;
    for (uint64_t p = 0; p < t->n_slots; p++) {
        pyb_slot *s = &t->slots[p];
        void *to_free = NULL;
        pyb_spinlock *lk = lock_of(t, p);
        pyb_lock(lk, t->lock_mode);
        uint64_t w = pyb_load(&s->word, PYB_RELAXED);
        if (w && !is_hijacked(w) && pyb_load(&s->state, PYB_RELAXED) == 0) {
            pyb_store(&s->word, 0, PYB_RELAXED);
            to_free = (void *)(uintptr_t)w;
        }
        pyb_unlock(lk, t->lock_mode);
        if (to_free) {
            slot_lost_page(t);
            page_release(t, to_free);
            freed++;
        }
    }
    return freed;
}

void pyb_tracker_get_stats(pyb_tracker *t, pyb_tracker_stats *o)
{
    o->starts = pyb_load(&t->st_starts, PYB_RELAXED);
    o->ends = pyb_load(&t->st_ends, PYB_RELAXED);
    o->untracked_writes = pyb_load(&t->st_untracked, PYB_RELAXED);
    o->alloc_failures = pyb_load(&t->st_alloc_failures, PYB_RELAXED);
    o->underflows = pyb_load(&t->st_underflows, PYB_RELAXED);
    o->hijack_events = pyb_load(&t->st_hijack_events, PYB_RELAXED);
    o->overflow_waits = pyb_load(&t->st_waits, PYB_RELAXED);
    o->overflow_clamps = pyb_load(&t->st_clamps, PYB_RELAXED);
    o->overflow_wraps = pyb_load(&t->st_wraps, PYB_RELAXED);
    o->hijacked_pages = pyb_load(&t->hijacked_pages, PYB_RELAXED);
    o->pool_pages_used = pyb_load(&t->pool_pages_used, PYB_RELAXED);
    o->pages_allocated = pyb_load(&t->pages_allocated, PYB_RELAXED);
    o->pages_freed = pyb_load(&t->pages_freed, PYB_RELAXED);
    o->mempool_waits = pyb_load(&t->st_mempool_waits, PYB_RELAXED);
    o->pool_refills = pyb_load(&t->pool_refills, PYB_RELAXED);
    o->mempool_rounds = pyb_load(&t->st_mempool_rounds, PYB_RELAXED);
    o->mempool_wakeups = pyb_load(&t->st_mempool_wakeups, PYB_RELAXED);
    o->mempool_nulls = pyb_load(&t->st_mempool_nulls, PYB_RELAXED);
}

void pyb_tracker_get_memory(pyb_tracker *t, pyb_tracker_memory *o)
{
    o->directory_bytes = t->directory_bytes;
    o->page_bytes = pyb_load(&t->page_bytes, PYB_RELAXED);
    o->total_bytes = o->directory_bytes + o->page_bytes;
    o->peak_bytes = o->directory_bytes + pyb_load(&t->peak_page_bytes, PYB_RELAXED);
    o->pages = pyb_load(&t->pages, PYB_RELAXED);
    o->peak_pages = pyb_load(&t->peak_pages, PYB_RELAXED);
}
