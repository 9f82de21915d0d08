/*
 * test_tracker.c - the tracker tested on its own, in C: unit checks of the semantics and a
 * multi-threaded stress of every sync variant x allocation-failure policy x overflow policy with the
 * invariants checked at quiescence, run under every lock mode, and the lock modes on their own (mutual
 * exclusion; the queued lock's FIFO order and node registry). Built by `make -C csrc test` and by the
 * sanitizer targets (ASan+UBSan, TSan); exits non-zero on the first failed check.
 *
 * Usage: test_tracker [ops_per_thread] [threads]
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../pyb_driver.h"
#include "../pyb_stress.h"
#include "../pyb_tracker.h"
#include "check.h"

#define MiB (1ull << 20)
#define GiB (1ull << 30)


static const char *SYNC[] = {"global", "page", "atomic"};
static const char *ALLOC[] = {"untracked", "hijack", "pool", "mempool"};
static const char *FREE[] = {"eager", "deferred"};
static const char *OVERFLOW[] = {"wrap", "clamp", "wait"};

/* Lock mode, page lifetime and wait bound of the trackers built by make(): the stress runs once per
 * lock mode and page lifetime. */
static int lock_mode = PYB_LOCK_PTHREAD;
static int free_mode = PYB_FREE_EAGER;
static uint64_t wait_timeout_ns = 0;
static uint64_t counter_max = 0; /* 0 = the width's */
static int unhijack_mode = PYB_UNHIJACK_AT_END;

static pyb_tracker *make(uint64_t size, uint64_t chunk, int bits, int sync, int overflow, int alloc,
                         uint32_t pool, pyb_fault *fault)
{
    pyb_tracker_config cfg = {
        .device_size = size, .chunk_size = chunk, .counter_bits = bits, .sync = sync, .overflow = overflow,
        .alloc_failure = alloc, .pool_pages = pool, .fault = fault,
        .lock_mode = sync == PYB_SYNC_ATOMIC ? PYB_LOCK_PTHREAD : lock_mode, .free_policy = free_mode,
        .wait_timeout_ns = wait_timeout_ns, .counter_max = counter_max, .unhijack = unhijack_mode,
    }; /* designated: a field added to the config defaults to 0, the old behaviour */
    pyb_tracker *t = NULL;
    int rc = pyb_tracker_create(&cfg, &t);
    if (rc != 0) {
        fprintf(stderr, "pyb_tracker_create failed: %d\n", rc);
        exit(2);
    }
    return t;
}

static uint64_t sum_counts(pyb_tracker *t)
{
    uint64_t n = pyb_tracker_n_chunks(t), s = 0;
    uint64_t *c = malloc(n * sizeof(*c));
    pyb_tracker_counts(t, c);
    for (uint64_t i = 0; i < n; i++)
        s += c[i];
    free(c);
    return s;
}

/* ---- unit checks ------------------------------------------------------------------------------ */

static void test_geometry_and_memory(void)
{
    for (int sync = 0; sync < 3; sync++) {
        int bits = sync == PYB_SYNC_ATOMIC ? 64 : 16;
        pyb_tracker *t = make(1ull << 40, 32 * MiB, bits, sync, PYB_OVERFLOW_WAIT, PYB_ALLOC_HIJACK, 0, NULL);
        pyb_tracker_memory m;
        pyb_tracker_get_memory(t, &m);
        CHECK(m.directory_bytes == (sync == PYB_SYNC_ATOMIC ? 1024u : 256u), "%s idle %llu", SYNC[sync],
              (unsigned long long)m.directory_bytes);
        uint64_t span = pyb_tracker_chunks_per_page(t) * 32 * MiB;
        pyb_ctx ctx = PYB_CTX_INIT;
        uint64_t resume;
        for (uint64_t p = 0; p < pyb_tracker_n_slots(t); p++)
            pyb_tracker_start(t, &ctx, p * span, 1, 1, &resume);
        pyb_tracker_get_memory(t, &m);
        CHECK(m.peak_bytes == (sync == PYB_SYNC_ATOMIC ? 263168u : 65792u), "%s peak %llu", SYNC[sync],
              (unsigned long long)m.peak_bytes);
        for (uint64_t p = 0; p < pyb_tracker_n_slots(t); p++)
            pyb_tracker_end(t, &ctx, p * span, 1);
        pyb_tracker_ctx_done(t, &ctx);
        pyb_tracker_reclaim(t);
        pyb_tracker_get_memory(t, &m);
        CHECK(m.pages == 0 && m.page_bytes == 0, "%s pages left %llu", SYNC[sync], (unsigned long long)m.pages);
        pyb_tracker_destroy(t);
    }
}

static void test_stolen_increment_and_hijack(void)
{
    for (int sync = 0; sync < 3; sync++) {
        for (int alloc = 0; alloc < 3; alloc++) {
            pyb_fault f;
            pyb_fault_init(&f, 1.0, 1, 1, 0, 0); /* exactly one failure */
            pyb_tracker *t = make(64 * GiB, 32 * MiB, 16, sync, PYB_OVERFLOW_WAIT, alloc, 1, &f);
            pyb_ctx ctx = PYB_CTX_INIT;
            uint64_t r;
            int a = pyb_tracker_start(t, &ctx, 0, 4096, 1, &r);     /* write A: allocation fails */
            int b = pyb_tracker_start(t, &ctx, 4096, 4096, 1, &r);  /* write B: same chunk */
            pyb_tracker_end(t, &ctx, 0, 4096);                      /* A ends */
            int visible = pyb_tracker_is_active(t, &ctx, 8192, 1);  /* B still in flight */
            pyb_tracker_end(t, &ctx, 4096, 4096);                   /* B ends */
            pyb_tracker_ctx_done(t, &ctx);
            pyb_tracker_stats s;
            pyb_tracker_get_stats(t, &s);
            if (alloc == PYB_ALLOC_UNTRACKED) {
                CHECK(a == PYB_START_UNTRACKED && b == 0, "%s untracked a=%d b=%d", SYNC[sync], a, b);
                CHECK(!visible && s.underflows == 1, "%s: the stolen increment: visible=%d underflows=%llu",
                      SYNC[sync], visible, (unsigned long long)s.underflows);
            } else {
                CHECK(a == 0 && b == 0 && visible && s.underflows == 0, "%s/%s a=%d visible=%d underflows=%llu",
                      SYNC[sync], ALLOC[alloc], a, visible, (unsigned long long)s.underflows);
            }
            CHECK(s.alloc_failures == 1 && pyb_fault_injected(&f) == 1, "%s/%s failures", SYNC[sync], ALLOC[alloc]);
            CHECK(sum_counts(t) == 0, "%s/%s counts left", SYNC[sync], ALLOC[alloc]);
            pyb_tracker_destroy(t);
        }
    }
}

static void test_overflow_policies(void)
{
    for (int sync = 0; sync < 3; sync++) {
        for (int ov = 0; ov < 2; ov++) { /* wrap, clamp (wait is exercised by the threaded test) */
            pyb_tracker *t = make(GiB, 32 * MiB, 16, sync, ov, PYB_ALLOC_HIJACK, 0, NULL);
            pyb_ctx ctx = PYB_CTX_INIT;
            uint64_t r;
            for (int i = 0; i < 65535; i++)
                pyb_tracker_start(t, &ctx, 0, 1, 1, &r);
            CHECK(pyb_tracker_count(t, 0) == 65535, "%s/%s", SYNC[sync], OVERFLOW[ov]);
            pyb_tracker_start(t, &ctx, 0, 1, 1, &r);
            uint64_t c = pyb_tracker_count(t, 0);
            CHECK(c == (ov == PYB_OVERFLOW_WRAP ? 0u : 65535u), "%s/%s after overflow: %llu", SYNC[sync],
                  OVERFLOW[ov], (unsigned long long)c);
            for (int i = 0; i < 65536; i++)
                pyb_tracker_end(t, &ctx, 0, 1);
            pyb_tracker_ctx_done(t, &ctx);
            CHECK(pyb_tracker_count(t, 0) == 0, "%s/%s back to zero", SYNC[sync], OVERFLOW[ov]);
            pyb_tracker_destroy(t);
        }
    }
}

/* ---- overflow wait under threads ---------------------------------------------------------------- */

typedef struct waiter_arg {
    pyb_tracker *t;
    int done;
} waiter_arg;

static void *overflow_writer(void *p)
{
    waiter_arg *a = p;
    pyb_ctx ctx = PYB_CTX_INIT;
    uint64_t r;
    pyb_tracker_start(a->t, &ctx, 0, 1, 1, &r); /* blocks until an end makes room */
    __atomic_store_n(&a->done, 1, __ATOMIC_RELEASE);
    pyb_tracker_end(a->t, &ctx, 0, 1);
    pyb_tracker_ctx_done(a->t, &ctx);
    return NULL;
}

static void test_overflow_wait_blocks_until_an_end(void)
{
    for (int sync = 0; sync < 3; sync++) {
        pyb_tracker *t = make(GiB, 32 * MiB, 16, sync, PYB_OVERFLOW_WAIT, PYB_ALLOC_HIJACK, 0, NULL);
        pyb_ctx ctx = PYB_CTX_INIT;
        uint64_t r;
        for (int i = 0; i < 65535; i++)
            pyb_tracker_start(t, &ctx, 0, 1, 1, &r);
        pyb_tracker_ctx_done(t, &ctx);
        waiter_arg a = {t, 0};
        pthread_t th;
        pthread_create(&th, NULL, overflow_writer, &a);
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
        CHECK(!__atomic_load_n(&a.done, __ATOMIC_ACQUIRE), "%s: the writer did not block", SYNC[sync]);
        pyb_tracker_end(t, &ctx, 0, 1);
        pthread_join(th, NULL);
        CHECK(a.done, "%s: the writer did not finish", SYNC[sync]);
        for (int i = 0; i < 65534; i++)
            pyb_tracker_end(t, &ctx, 0, 1);
        pyb_tracker_ctx_done(t, &ctx);
        pyb_tracker_stats s;
        pyb_tracker_get_stats(t, &s);
        CHECK(pyb_tracker_count(t, 0) == 0 && s.underflows == 0 && s.overflow_waits >= 1,
              "%s: count %llu underflows %llu waits %llu", SYNC[sync], (unsigned long long)pyb_tracker_count(t, 0),
              (unsigned long long)s.underflows, (unsigned long long)s.overflow_waits);
        pyb_tracker_destroy(t);
    }
}

/* ---- bounded waits, the mempool and page lifetime ---------------------------------------------- */

static void test_a_wait_past_its_bound_times_out_and_can_be_undone(void)
{
    wait_timeout_ns = 20 * 1000 * 1000;
    for (int sync = 0; sync < 3; sync++) {
        pyb_tracker *t = make(GiB, 32 * MiB, 16, sync, PYB_OVERFLOW_WAIT, PYB_ALLOC_HIJACK, 0, NULL);
        pyb_ctx ctx = PYB_CTX_INIT;
        uint64_t r = 0;
        for (int i = 0; i < 65535; i++)
            pyb_tracker_start(t, &ctx, 32 * MiB, 1, 1, &r); /* chunk 1 full */
        int ret = pyb_tracker_start(t, &ctx, 0, 64 * MiB, 1, &r); /* chunks 0 and 1 */
        CHECK(ret == PYB_START_TIMED_OUT && r == 32 * MiB, "%s: ret %d resume %llu", SYNC[sync], ret,
              (unsigned long long)r);
        CHECK(pyb_tracker_count(t, 0) == 1, "%s: chunk 0 counted before the wait", SYNC[sync]);
        pyb_tracker_undo_start(t, &ctx, 0, r);
        CHECK(pyb_tracker_count(t, 0) == 0 && pyb_tracker_count(t, 32 * MiB) == 65535, "%s: undone", SYNC[sync]);
        /* an absolute deadline already past: no sleep at all */
        ret = pyb_tracker_start_until(t, &ctx, 32 * MiB, 1, pyb_now_ns(), &r);
        CHECK(ret == PYB_START_TIMED_OUT && r == 32 * MiB, "%s: until ret %d", SYNC[sync], ret);
        for (int i = 0; i < 65535; i++)
            pyb_tracker_end(t, &ctx, 32 * MiB, 1);
        pyb_tracker_ctx_done(t, &ctx);
        pyb_tracker_stats s;
        pyb_tracker_get_stats(t, &s);
        CHECK(s.underflows == 0 && s.starts == 65535 && s.ends == 65535 && sum_counts(t) == 0,
              "%s: underflows %llu starts %llu", SYNC[sync], (unsigned long long)s.underflows,
              (unsigned long long)s.starts);
        pyb_tracker_destroy(t);
    }
    wait_timeout_ns = 0;
}

typedef struct mempool_arg {
    pyb_tracker *t;
    int ret, done;
} mempool_arg;

static void *mempool_writer(void *p)
{
    mempool_arg *a = p;
    pyb_ctx ctx = PYB_CTX_INIT;
    uint64_t r;
    a->ret = pyb_tracker_start(a->t, &ctx, 64 * GiB, 4096, 1, &r); /* page 1: waits for a page */
    __atomic_store_n(&a->done, 1, __ATOMIC_RELEASE);
    pyb_tracker_ctx_done(a->t, &ctx);
    return NULL;
}

static void test_mempool_waits_for_a_freed_page_and_never_fails(void)
{
    for (int sync = 0; sync < 3; sync++) {
        pyb_fault f;
        pyb_fault_init(&f, 1.0, 1, -1, 0, 0); /* every allocation fails */
        pyb_tracker *t = make(128 * GiB, 32 * MiB, 16, sync, PYB_OVERFLOW_WAIT, PYB_ALLOC_MEMPOOL, 1, &f);
        pyb_ctx ctx = PYB_CTX_INIT;
        uint64_t r = 0;
        int a = pyb_tracker_start(t, &ctx, 0, 4096, 0, &r); /* page 0: the reserve's one page */
        int b = pyb_tracker_start(t, &ctx, 64 * GiB, 4096, 0, &r);
        CHECK(a == 0 && b == (PYB_START_WOULD_BLOCK | PYB_START_WAIT_PAGE) && r == 64 * GiB,
              "%s: a=%d b=%d", SYNC[sync], a, b);
        pyb_tracker_ctx_done(t, &ctx);
        mempool_arg arg = {t, -1, 0};
        pthread_t th;
        pthread_create(&th, NULL, mempool_writer, &arg);
        struct timespec ts = {0, 30 * 1000 * 1000};
        nanosleep(&ts, NULL);
        CHECK(!__atomic_load_n(&arg.done, __ATOMIC_ACQUIRE), "%s: the writer did not wait", SYNC[sync]);
        pyb_tracker_end(t, &ctx, 0, 4096); /* page 0 empties: freed (eagerly or by reclaim) to the reserve */
        pyb_tracker_ctx_done(t, &ctx);
        pyb_tracker_reclaim(t);
        pthread_join(th, NULL);
        CHECK(arg.ret == 0 && pyb_tracker_count(t, 64 * GiB) == 1, "%s: waiter ret %d", SYNC[sync], arg.ret);
        pyb_tracker_stats s;
        pyb_tracker_get_stats(t, &s);
        CHECK(s.mempool_waits == 1 && s.pool_refills == 1 && s.hijack_events == 0 && s.untracked_writes == 0,
              "%s: waits %llu refills %llu", SYNC[sync], (unsigned long long)s.mempool_waits,
              (unsigned long long)s.pool_refills);
        pyb_tracker_end(t, &ctx, 64 * GiB, 4096);
        pyb_tracker_ctx_done(t, &ctx);
        pyb_tracker_destroy(t);
    }
}

static void test_mempool_wait_past_its_bound_times_out(void)
{
    wait_timeout_ns = 20 * 1000 * 1000;
    for (int sync = 0; sync < 3; sync++) {
        pyb_fault f;
        pyb_fault_init(&f, 1.0, 1, -1, 0, 0);
        pyb_tracker *t = make(GiB, 32 * MiB, 16, sync, PYB_OVERFLOW_WAIT, PYB_ALLOC_MEMPOOL, 0, &f);
        pyb_ctx ctx = PYB_CTX_INIT;
        uint64_t r = 0;
        int ret = pyb_tracker_start(t, &ctx, 4096, 4096, 1, &r);
        CHECK(ret == (PYB_START_TIMED_OUT | PYB_START_WAIT_PAGE) && r == 4096, "%s: ret %d", SYNC[sync], ret);
        pyb_tracker_ctx_done(t, &ctx);
        pyb_tracker_stats s;
        pyb_tracker_get_stats(t, &s);
        /* the allocator was retried while waiting, never hijacked, nothing counted */
        CHECK(s.alloc_failures >= 2 && s.hijack_events == 0 && s.starts == 0 && sum_counts(t) == 0,
              "%s: failures %llu", SYNC[sync], (unsigned long long)s.alloc_failures);
        pyb_tracker_destroy(t);
    }
    wait_timeout_ns = 0;
}

/*
 * The reviewer's reproduction (finding 4): 65,535 writes on chunk 0 of a 512-byte-chunk tracker whose
 * only page comes from a one-page mempool reserve (the allocator always fails); a start of
 * [0, 1 MiB + 512) counts page 0 - clamping or wrapping chunk 0, incrementing chunk 1 - then times out
 * waiting for a page for page 1. The undo must remove exactly its own increments: chunk 0 keeps the
 * other writes' 65,535 (clamp) or stays where the wrap put it (wrap), chunk 1 goes back to 1, and
 * nothing underflows. The driver's undo (pyb_driver_undo_start) is checked the same way.
 */
static void test_undo_skips_the_counters_a_start_clamped_or_wrapped(void)
{
    wait_timeout_ns = 5 * 1000 * 1000;
    for (int use_driver = 0; use_driver < 2; use_driver++)
        for (int ov = PYB_OVERFLOW_WRAP; ov <= PYB_OVERFLOW_CLAMP; ov++)
            for (int sync = 0; sync < 3; sync++) {
                pyb_fault f;
                pyb_fault_init(&f, 1.0, 1, -1, 0, 0);
                pyb_tracker *t = make(2 * MiB, 512, 16, sync, ov, PYB_ALLOC_MEMPOOL, 1, &f);
                pyb_ctx ctx = PYB_CTX_INIT;
                uint64_t r = 0;
                for (int i = 0; i < 65535; i++)
                    pyb_tracker_start(t, &ctx, 0, 512, 1, &r);
                pyb_tracker_start(t, &ctx, 512, 512, 1, &r); /* chunk 1: keeps page 0 when 0 wraps */
                int ret = pyb_tracker_start(t, &ctx, 0, MiB + 512, 1, &r);
                CHECK(ret == (PYB_START_TIMED_OUT | PYB_START_WAIT_PAGE) && r == MiB, "%s %s: ret %d resume %llu",
                      SYNC[sync], OVERFLOW[ov], ret, (unsigned long long)r);
                CHECK(ctx.rec.n == 1 && ctx.rec.skip[0].first == 0 && ctx.rec.skip[0].last == 0 && !ctx.rec.lost,
                      "%s %s: the record holds chunk 0 (n %u)", SYNC[sync], OVERFLOW[ov], ctx.rec.n);
                if (use_driver) {
                    pyb_driver_undo_start(t, &ctx, 0, r);
                } else {
                    CHECK(pyb_tracker_undo_start(t, &ctx, 0, r) == 0, "%s %s: exact", SYNC[sync], OVERFLOW[ov]);
                }
                uint64_t want0 = ov == PYB_OVERFLOW_CLAMP ? 65535 : 0;
                CHECK(pyb_tracker_count(t, 0) == want0 && pyb_tracker_count(t, 512) == 1 &&
                          pyb_tracker_count(t, 1024) == 0 && ctx.carry == 0,
                      "%s %s driver %d: counts %llu %llu %llu after the undo", SYNC[sync], OVERFLOW[ov], use_driver,
                      (unsigned long long)pyb_tracker_count(t, 0), (unsigned long long)pyb_tracker_count(t, 512),
                      (unsigned long long)pyb_tracker_count(t, 1024));
                pyb_tracker_ctx_done(t, &ctx);
                pyb_tracker_stats s;
                pyb_tracker_get_stats(t, &s);
                CHECK(s.underflows == 0, "%s %s: %llu underflows", SYNC[sync], OVERFLOW[ov],
                      (unsigned long long)s.underflows);
                /* the next start on the same ctx begins a new record */
                ret = pyb_tracker_start(t, &ctx, 1024, 512, 1, &r);
                CHECK(ret == 0 && ctx.rec.n == 0, "%s %s: a new record", SYNC[sync], OVERFLOW[ov]);
                pyb_tracker_ctx_done(t, &ctx);
                pyb_tracker_destroy(t);
            }
    wait_timeout_ns = 0;
}

/* A start that leaves more separate ranges uncounted than the record holds: the undo removes its
 * increments before the first range it could not record and leaves the rest counted (too high, never
 * too low), and says so. */
static void test_an_overflowed_record_undoes_conservatively(void)
{
    wait_timeout_ns = 5 * 1000 * 1000;
    counter_max = 1;
    for (int sync = 0; sync < 3; sync++) {
        pyb_fault f;
        pyb_fault_init(&f, 1.0, 1, -1, 0, 0);
        pyb_tracker *t = make(2 * MiB, 512, 16, sync, PYB_OVERFLOW_CLAMP, PYB_ALLOC_MEMPOOL, 1, &f);
        pyb_ctx ctx = PYB_CTX_INIT;
        uint64_t r = 0;
        const uint64_t full = 2 * (PYB_SKIP_MAX + 2); /* chunks 0, 2, ... below this are at their maximum 1 */
        for (uint64_t c = 0; c < full; c += 2)
            pyb_tracker_start(t, &ctx, c * 512, 512, 1, &r);
        int ret = pyb_tracker_start(t, &ctx, 0, MiB + 512, 1, &r);
        CHECK(ret == (PYB_START_TIMED_OUT | PYB_START_WAIT_PAGE), "%s: ret %d", SYNC[sync], ret);
        const uint64_t lost_from = 2 * PYB_SKIP_MAX;
        CHECK(ctx.rec.n == PYB_SKIP_MAX && ctx.rec.lost && ctx.rec.lost_from == lost_from, "%s: record n %u lost %u",
              SYNC[sync], ctx.rec.n, ctx.rec.lost);
        CHECK(pyb_tracker_undo_start(t, &ctx, 0, r) == 1, "%s: conservative undo reported", SYNC[sync]);
        int ok = 1;
        for (uint64_t c = 0; c < 2048; c++) {
            uint64_t want = (c % 2 == 0 && c < full) ? 1 : c > lost_from ? 1 : 0;
            ok &= pyb_tracker_count(t, c * 512) == want;
        }
        CHECK(ok, "%s: exact before chunk %llu, left counted from it on", SYNC[sync], (unsigned long long)lost_from);
        pyb_tracker_ctx_done(t, &ctx);
        pyb_tracker_stats s;
        pyb_tracker_get_stats(t, &s);
        CHECK(s.underflows == 0, "%s: %llu underflows", SYNC[sync], (unsigned long long)s.underflows);
        pyb_tracker_destroy(t);
    }
    counter_max = 0;
    wait_timeout_ns = 0;
}

/* alloc_failure "untracked" with overflow "wait": a start that left page 0 untracked and then timed
 * out on a full counter of page 1 must not decrement page 0, where another write counted meanwhile. */
static void test_undo_skips_the_pages_a_start_left_untracked(void)
{
    wait_timeout_ns = 5 * 1000 * 1000;
    for (int sync = 0; sync < 3; sync++) {
        pyb_fault f;
        pyb_fault_init(&f, 1.0, 1, 1, 4097, 0); /* the first allocation succeeds, the second fails */
        pyb_tracker *t = make(2 * MiB, 512, 16, sync, PYB_OVERFLOW_WAIT, PYB_ALLOC_UNTRACKED, 0, &f);
        pyb_ctx ctx = PYB_CTX_INIT, other = PYB_CTX_INIT;
        uint64_t r = 0;
        for (int i = 0; i < 65535; i++)
            pyb_tracker_start(t, &ctx, MiB, 512, 1, &r); /* page 1, chunk 2048: full */
        int ret = pyb_tracker_start(t, &ctx, 0, MiB + 512, 1, &r);
        CHECK(ret == (PYB_START_TIMED_OUT | PYB_START_UNTRACKED) && r == MiB, "%s: ret %d resume %llu", SYNC[sync],
              ret, (unsigned long long)r);
        CHECK(ctx.rec.n == 1 && ctx.rec.skip[0].first == 0 && ctx.rec.skip[0].last == 2047,
              "%s: the record holds page 0", SYNC[sync]);
        CHECK(pyb_tracker_start(t, &other, 0, 512, 1, &r) == 0, "%s: the other write is tracked", SYNC[sync]);
        pyb_driver_undo_start(t, &ctx, 0, MiB);
        CHECK(pyb_tracker_count(t, 0) == 1 && pyb_tracker_count(t, MiB) == 65535,
              "%s: the other write's count survives the undo (count %llu)", SYNC[sync],
              (unsigned long long)pyb_tracker_count(t, 0));
        pyb_tracker_ctx_done(t, &ctx);
        pyb_tracker_ctx_done(t, &other);
        pyb_tracker_stats s;
        pyb_tracker_get_stats(t, &s);
        CHECK(s.underflows == 0, "%s: %llu underflows", SYNC[sync], (unsigned long long)s.underflows);
        pyb_tracker_destroy(t);
    }
    wait_timeout_ns = 0;
}

static void test_deferred_free_keeps_an_empty_page_until_reclaim(void)
{
    for (int fm = PYB_FREE_EAGER; fm <= PYB_FREE_DEFERRED; fm++) {
        free_mode = fm;
        for (int sync = 0; sync < 3; sync++) {
            pyb_tracker *t = make(GiB, 32 * MiB, 16, sync, PYB_OVERFLOW_WAIT, PYB_ALLOC_HIJACK, 0, NULL);
            pyb_ctx ctx = PYB_CTX_INIT;
            uint64_t r;
            for (int i = 0; i < 10; i++) {
                pyb_tracker_start(t, &ctx, 0, 4096, 1, &r);
                pyb_tracker_end(t, &ctx, 0, 4096);
            }
            pyb_tracker_ctx_done(t, &ctx);
            pyb_tracker_stats s;
            pyb_tracker_memory m;
            pyb_tracker_get_stats(t, &s);
            pyb_tracker_get_memory(t, &m);
            int eager = fm == PYB_FREE_EAGER && sync != PYB_SYNC_ATOMIC;
            CHECK(s.pages_allocated == (eager ? 10u : 1u) && m.pages == (eager ? 0u : 1u),
                  "%s/%s: allocated %llu pages %llu", SYNC[sync], FREE[fm], (unsigned long long)s.pages_allocated,
                  (unsigned long long)m.pages);
            CHECK(pyb_tracker_reclaim(t) == (eager ? 0u : 1u), "%s/%s: reclaim", SYNC[sync], FREE[fm]);
            pyb_tracker_destroy(t);
        }
    }
    free_mode = PYB_FREE_EAGER;
}

/* A thread whose context stays pinned (inside a read-side section, not operating) until told. */
typedef struct pinned_reader {
    pyb_tracker *t;
    int stage; /* 0 -> 1: pinned (reader sets); 1 -> 2: unpin now (main sets); __atomic acquire/release */
} pinned_reader;

static void *pinned_reader_thread(void *arg)
{
    pinned_reader *a = arg;
    pyb_ctx ctx = PYB_CTX_INIT;
    pyb_tracker_is_active(a->t, &ctx, 0, 4096); /* enters the section; the page is live here */
    __atomic_store_n(&a->stage, 1, __ATOMIC_RELEASE);
    while (__atomic_load_n(&a->stage, __ATOMIC_ACQUIRE) != 2)
        sched_yield();
    pyb_tracker_ctx_done(a->t, &ctx);
    return NULL;
}

/* Atomic variant: a reclaim frees a page only after a grace period, so never while another thread
 * is still inside a section that began before the page was unpublished; it gives up after its
 * bounded wait without freeing, and a later reclaim frees the page once that thread has unpinned. */
static void test_reclaim_waits_for_a_grace_period_and_gives_up_bounded(void)
{
    pyb_tracker *t = make(GiB, 32 * MiB, 64, PYB_SYNC_ATOMIC, PYB_OVERFLOW_WAIT, PYB_ALLOC_HIJACK, 0, NULL);
    pyb_ctx ctx = PYB_CTX_INIT;
    uint64_t r;
    pyb_tracker_start(t, &ctx, 0, 4096, 1, &r);
    pyb_tracker_end(t, &ctx, 0, 4096);
    pyb_tracker_ctx_done(t, &ctx);
    pinned_reader a = {t, 0};
    pthread_t th;
    pthread_create(&th, NULL, pinned_reader_thread, &a);
    while (__atomic_load_n(&a.stage, __ATOMIC_ACQUIRE) != 1)
        sched_yield();
    uint64_t freed_pinned = pyb_tracker_reclaim(t); /* the reader never reaches a quiescent state */
    pyb_tracker_memory m;
    pyb_tracker_get_memory(t, &m);
    uint64_t pages_pinned = m.pages;
    /* The page is still usable: a start counts on it, its end takes it back. */
    pyb_tracker_start(t, &ctx, 0, 4096, 1, &r);
    uint64_t count = pyb_tracker_count(t, 0);
    pyb_tracker_end(t, &ctx, 0, 4096);
    pyb_tracker_ctx_done(t, &ctx);
    __atomic_store_n(&a.stage, 2, __ATOMIC_RELEASE);
    pthread_join(th, NULL);
    uint64_t freed_after = pyb_tracker_reclaim(t);
    pyb_tracker_stats s;
    pyb_tracker_get_stats(t, &s);
    CHECK(freed_pinned == 0 && pages_pinned == 1 && count == 1 && freed_after == 1 && s.pages_freed == 1 &&
              s.underflows == 0,
          "atomic reclaim: freed while pinned %llu pages %llu count %llu freed after %llu underflows %llu",
          (unsigned long long)freed_pinned, (unsigned long long)pages_pinned, (unsigned long long)count,
          (unsigned long long)freed_after, (unsigned long long)s.underflows);
    pyb_tracker_destroy(t);
}

/* The batch calls do exactly what the same single calls do: the same counters and statistics, for
 * every variant and width, on writes that stay on a page, cross pages, hit an empty or hijacked
 * slot (a failed allocation), reach a counter's maximum, and end without a start (underflow). */
static void test_batches_match_single_calls(void)
{
    enum { N = 3000 };
    static uint64_t offs[N], lens[N];
    for (int sync = 0; sync < 3; sync++) {
        for (int bits = 16; bits <= 64; bits *= 2) {
            pyb_tracker *tr[2];
            pyb_fault f[2];
            for (int k = 0; k < 2; k++) {
                pyb_fault_init(&f[k], 0.05, 1, -1, 0, 3);
                counter_max = 5;
                tr[k] = make(64 * MiB, 4096, bits, sync, PYB_OVERFLOW_CLAMP, PYB_ALLOC_HIJACK, 0, &f[k]);
                counter_max = 0;
            }
            pyb_rng rng;
            pyb_rng_seed(&rng, (uint64_t)(sync * 100 + bits));
            for (int i = 0; i < N; i++) {
                lens[i] = 1 + pyb_rng_below(&rng, 3 * 4096);
                offs[i] = pyb_rng_below(&rng, 64 * MiB - 3 * 4096 + 1); /* room for lens[i] and 4096 */
            }
            pyb_ctx c0 = PYB_CTX_INIT, c1 = PYB_CTX_INIT;
            uint64_t r;
            for (int round = 0; round < 3; round++) { /* start all, end the first half, end all */
                for (int i = 0; i < N; i++)
                    pyb_tracker_start(tr[0], &c0, offs[i], lens[i], 0, &r);
                for (size_t i = 0; i < N;) {
                    int ret;
                    i += pyb_tracker_start_many(tr[1], &c1, offs + i, lens + i, 0, N - i, &ret, &r);
                    i += i < N; /* that element was started, not cleanly: carry on after it */
                }
                for (int i = 0; i < N / 2; i++)
                    pyb_tracker_end(tr[0], &c0, offs[i], lens[i]);
                pyb_tracker_end_many(tr[1], &c1, offs, lens, 0, N / 2);
                for (int i = 0; i < N; i++)
                    pyb_tracker_end(tr[0], &c0, offs[i], 4096);
                pyb_tracker_end_many(tr[1], &c1, offs, NULL, 4096, N);
            }
            pyb_tracker_ctx_done(tr[0], &c0);
            pyb_tracker_ctx_done(tr[1], &c1);
            uint64_t n = pyb_tracker_n_chunks(tr[0]), diff = 0;
            uint64_t *a = malloc(n * sizeof(*a)), *b = malloc(n * sizeof(*b));
            pyb_tracker_counts(tr[0], a);
            pyb_tracker_counts(tr[1], b);
            for (uint64_t i = 0; i < n; i++)
                diff += a[i] != b[i];
            pyb_tracker_stats s0, s1;
            pyb_tracker_get_stats(tr[0], &s0);
            pyb_tracker_get_stats(tr[1], &s1);
            CHECK(diff == 0 && s0.starts == s1.starts && s0.ends == s1.ends && s0.underflows == s1.underflows &&
                      s0.overflow_clamps == s1.overflow_clamps && s0.hijack_events == s1.hijack_events &&
                      s0.pages_allocated == s1.pages_allocated && s0.pages_freed == s1.pages_freed &&
                      s0.underflows > 0 && s0.overflow_clamps > 0,
                  "%s/%d lock %d free %d: batch vs single: %llu counters differ, underflows %llu/%llu clamps "
                  "%llu/%llu", SYNC[sync], bits, lock_mode, free_mode, (unsigned long long)diff,
                  (unsigned long long)s0.underflows,
                  (unsigned long long)s1.underflows, (unsigned long long)s0.overflow_clamps,
                  (unsigned long long)s1.overflow_clamps);
            free(a);
            free(b);
            pyb_tracker_destroy(tr[0]);
            pyb_tracker_destroy(tr[1]);
        }
    }
}

/* Chunks of 2^60 bytes: a page spans 2^71 bytes, more than a 64-bit shift can take. The batch loops
 * find every write on page 0, as the single calls do. */
static void test_batches_on_pages_wider_than_a_shift(void)
{
    const uint64_t size = (uint64_t)1 << 62, chunk = (uint64_t)1 << 60;
    const uint64_t offs[4] = {0, chunk - 4096, 3 * chunk + 5, size - 8192};
    for (int sync = 0; sync < 3; sync++) {
        pyb_tracker *t = make(size, chunk, sync == PYB_SYNC_ATOMIC ? 64 : 16, sync, PYB_OVERFLOW_CLAMP,
                              PYB_ALLOC_HIJACK, 0, NULL);
        pyb_ctx ctx = PYB_CTX_INIT;
        uint64_t r, counts[4];
        int ret;
        size_t started = pyb_tracker_start_many(t, &ctx, offs, NULL, 8192, 4, &ret, &r);
        pyb_tracker_counts(t, counts);
        int ok = started == 4 && counts[0] == 2 && counts[1] == 1 && counts[2] == 0 && counts[3] == 2;
        pyb_tracker_end_many(t, &ctx, offs, NULL, 8192, 4);
        pyb_tracker_counts(t, counts);
        pyb_tracker_ctx_done(t, &ctx);
        pyb_tracker_stats s;
        pyb_tracker_get_stats(t, &s);
        CHECK(ok && !counts[0] && !counts[3] && s.underflows == 0 && s.starts == 4 && s.ends == 4,
              "%s: batches with 2^60-byte chunks: started %zu, counts %llu %llu, underflows %llu", SYNC[sync],
              started, (unsigned long long)counts[0], (unsigned long long)counts[3],
              (unsigned long long)s.underflows);
        pyb_tracker_destroy(t);
    }
}

/* A device past 2^63 bytes is refused: an offset of 2^63 or more would index past the slots in the batch
 * loops' one-shift page index (a page span of 2^63 bytes puts offset 2^63 on "page 1" of one slot). */
static void test_a_device_past_two_to_the_63_is_refused(void)
{
    const uint64_t sizes[3] = {(1ull << 63) + 1, (1ull << 63) + (1ull << 62), UINT64_MAX};
    for (int i = 0; i < 3; i++) {
        pyb_tracker_config cfg = {.device_size = sizes[i], .chunk_size = 1ull << 55, .counter_bits = 64,
                                  .sync = PYB_SYNC_PAGE};
        pyb_tracker *t = NULL;
        int r = pyb_tracker_create(&cfg, &t);
        CHECK(r == -EINVAL && t == NULL, "device_size %llu: create returned %d", (unsigned long long)sizes[i], r);
    }
    pyb_tracker_config cfg = {.device_size = 1ull << 63, .chunk_size = 1ull << 55, .counter_bits = 64,
                              .sync = PYB_SYNC_PAGE};
    pyb_tracker *t = NULL;
    CHECK(pyb_tracker_create(&cfg, &t) == 0 && t, "device_size 2^63 is refused");
    if (t)
        pyb_tracker_destroy(t);
}

/* ---- threaded stress of every configuration ------------------------------------------------------ */

static void stress_one(int sync, int alloc, int ov, uint64_t ops, uint32_t threads)
{
    pyb_fault f;
    pyb_fault_init(&f, alloc == PYB_ALLOC_UNTRACKED ? 0.0 : 0.3, 1, -1, 0, 7);
    /* Small chunks on a small device: pages fill, empty, are freed and re-allocated constantly. */
    int reserve = alloc == PYB_ALLOC_POOL || alloc == PYB_ALLOC_MEMPOOL;
    pyb_tracker *t = make(64 * MiB, 4096, 32, sync, ov, alloc, 2, reserve ? &f : NULL);
    if (alloc == PYB_ALLOC_HIJACK) {
        pyb_tracker_destroy(t);
        t = make(64 * MiB, 4096, 32, sync, ov, alloc, 0, &f);
    }
    pyb_stress_config cfg = {threads, ops, 0.0, 0, 64 * MiB, 8192, 3, 0, 11, 5};
    pyb_stress_result res[16];
    int rc = pyb_stress_run(t, &cfg, res);
    CHECK(rc == 0, "stress rc %d", rc);
    pyb_tracker_reclaim(t);
    if (unhijack_mode == PYB_UNHIJACK_ON_DECAY)
        pyb_tracker_reclaim(t); /* md's decay: a drained hijacked page reverts at the second pass */
    pyb_tracker_stats s;
    pyb_tracker_memory m;
    pyb_tracker_get_stats(t, &s);
    pyb_tracker_get_memory(t, &m);
    uint64_t left = sum_counts(t);
    CHECK(left == 0 && s.underflows == 0 && s.starts == s.ends && s.starts == ops * threads,
          "%s/%s/%s/%s: counts left %llu underflows %llu starts %llu ends %llu", SYNC[sync], ALLOC[alloc],
          OVERFLOW[ov], FREE[free_mode],
          (unsigned long long)left, (unsigned long long)s.underflows, (unsigned long long)s.starts,
          (unsigned long long)s.ends);
    CHECK(m.pages == 0 && s.hijacked_pages == 0 && s.pool_pages_used == 0 && s.pages_allocated == s.pages_freed,
          "%s/%s/%s: pages %llu hijacked %llu pool used %llu", SYNC[sync], ALLOC[alloc], OVERFLOW[ov],
          (unsigned long long)m.pages, (unsigned long long)s.hijacked_pages, (unsigned long long)s.pool_pages_used);
    if (alloc != PYB_ALLOC_UNTRACKED)
        CHECK(s.alloc_failures == pyb_fault_injected(&f), "%s/%s: failures %llu injected %llu", SYNC[sync],
              ALLOC[alloc], (unsigned long long)s.alloc_failures, (unsigned long long)pyb_fault_injected(&f));
    pyb_tracker_destroy(t);
}

/* ------------------------------------------------------------------------------------------------ */
/* The lock modes on their own (pyb_atomic.h)                                                         */

typedef struct lock_arg {
    pyb_spinlock *lk;
    int mode;
    uint64_t n;
    uint64_t *ctr;                /* under lk: a plain counter, so a lost update shows (and TSan a race) */
    _Atomic uint32_t *go;         /* start gate: workers spin until it is 1 */
    _Atomic uint32_t *order;      /* FIFO test: the next arrival rank to hand out */
    uint32_t rank;                /* FIFO test: this worker's rank in lock order */
    _Atomic uint32_t id;          /* this worker's node id, published before it locks (0 = refused) */
} lock_arg;

static void *lock_worker(void *p)
{
    lock_arg *a = p;
    while (!pyb_load(a->go, PYB_ACQUIRE))
        sched_yield();
    for (uint64_t i = 0; i < a->n; i++) {
        pyb_lock(a->lk, a->mode);
        *a->ctr = *a->ctr + 1;
        pyb_unlock(a->lk, a->mode);
    }
    return NULL;
}

/* Every mode excludes: N threads x n increments of a plain counter under the lock lose none. */
static void test_every_lock_mode_excludes(uint32_t threads, uint64_t n)
{
    const char *names[] = {"pthread", "spin_yield", "ticket", "mcs"};
    uint32_t nth = threads < 4 ? 4 : threads;
    for (int mode = PYB_LOCK_PTHREAD; mode <= PYB_LOCK_MCS; mode++) {
        _Alignas(64) pyb_spinlock lk;
        uint64_t ctr = 0;
        _Atomic uint32_t go = 0;
        pthread_t th[16];
        lock_arg a[16];
        CHECK(pyb_lock_init(&lk, mode) == 0, "%s: init", names[mode]);
        for (uint32_t i = 0; i < nth; i++) {
            a[i] = (lock_arg){.lk = &lk, .mode = mode, .n = n, .ctr = &ctr, .go = &go};
            pthread_create(&th[i], NULL, lock_worker, &a[i]);
        }
        pyb_store(&go, 1, PYB_RELEASE);
        for (uint32_t i = 0; i < nth; i++)
            pthread_join(th[i], NULL);
        CHECK(ctr == nth * n, "%s: counter %llu, expected %llu", names[mode], (unsigned long long)ctr,
              (unsigned long long)(nth * n));
        pyb_lock_destroy(&lk, mode);
    }
}

static void *fifo_worker(void *p)
{
    lock_arg *a = p;
    pyb_store(&a->id, pyb_mcs_node_id(), PYB_RELEASE);
    while (!pyb_load(a->go, PYB_ACQUIRE))
        sched_yield();
    pyb_lock(a->lk, PYB_LOCK_MCS);
    a->rank = pyb_fetch_add(a->order, 1, PYB_RELAXED);
    pyb_unlock(a->lk, PYB_LOCK_MCS);
    return NULL;
}

/* Wait (bounded: 10 s) until the lock's tail names `id`; 1 if it did. */
static int wait_for_tail(pyb_spinlock *lk, uint32_t id)
{
    for (uint64_t t0 = pyb_now_ns(); pyb_now_ns() - t0 < 10000000000ull;) {
        if (pyb_load(&lk->mcs.tail, PYB_ACQUIRE) == id)
            return 1;
        sched_yield();
    }
    return 0;
}

/*
 * The queued lock serves its queue in arrival order: the main thread holds the lock, lets 4 workers
 * queue one at a time (each is let go only once the previous one is the tail), then unlocks. The order
 * is deterministic: only the queue's head may take the lock, and nobody else is contending.
 */
static void test_mcs_serves_queued_waiters_in_arrival_order(void)
{
    enum { N = 4 };
    _Alignas(64) pyb_spinlock lk;
    _Atomic uint32_t order = 0, go[N];
    pthread_t th[N];
    lock_arg a[N];
    pyb_lock_init(&lk, PYB_LOCK_MCS);
    pyb_lock(&lk, PYB_LOCK_MCS);
    CHECK(pyb_load(&lk.mcs.tail, PYB_RELAXED) == 0, "uncontended: no queue");
    int queued = 1;
    for (int i = 0; i < N; i++) {
        atomic_init(&go[i], 0);
        a[i] = (lock_arg){.lk = &lk, .go = &go[i], .order = &order};
        atomic_init(&a[i].id, 0);
        pthread_create(&th[i], NULL, fifo_worker, &a[i]);
    }
    for (int i = 0; i < N && queued; i++) {
        uint32_t id;
        while (!(id = pyb_load(&a[i].id, PYB_ACQUIRE)))
            sched_yield();
        pyb_store(&go[i], 1, PYB_RELEASE);
        queued = wait_for_tail(&lk, id);
        CHECK(queued, "worker %d never queued (tail %u, its id %u)", i, (unsigned)pyb_load(&lk.mcs.tail,
              PYB_RELAXED), (unsigned)id);
    }
    for (int i = 0; i < N; i++) /* on a failure above, let the rest go too */
        pyb_store(&go[i], 1, PYB_RELEASE);
    pyb_unlock(&lk, PYB_LOCK_MCS);
    for (int i = 0; i < N; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < N && queued; i++)
        CHECK(a[i].rank == (uint32_t)i, "worker %d queued %d-th but took the lock %u-th", i, i, a[i].rank);
    CHECK(pyb_load(&lk.mcs.tail, PYB_RELAXED) == 0 && pyb_load(&lk.mcs.locked, PYB_RELAXED) == 0,
          "quiescent: lock free and no queue");
}

static void *id_worker(void *p)
{
    *(uint32_t *)p = pyb_mcs_node_id();
    return NULL;
}

/*
 * The node registry: an exited thread's id is reused (PYB_MCS_NODES + 8 threads one after another all
 * get one), and with the registry exhausted a thread without a node still takes the lock, exclusively,
 * beside threads that queue (the fallback spins on the word).
 */
static void test_mcs_registry_recycles_and_falls_back_when_exhausted(uint64_t n)
{
    uint32_t held = (pyb_mcs_node_id(), pyb_mcs_nodes_in_use());
    int all = 1;
    for (int i = 0; i < PYB_MCS_NODES + 8 && all; i++) {
        uint32_t id = 0;
        pthread_t th;
        pthread_create(&th, NULL, id_worker, &id);
        pthread_join(th, NULL);
        all = id != 0;
        CHECK(all, "thread %d got no node id (in use %u)", i, pyb_mcs_nodes_in_use());
    }
    CHECK(pyb_mcs_nodes_in_use() == held, "ids in use %u after the threads exited, %u before",
          pyb_mcs_nodes_in_use(), held);

    /* 2 of 4 threads get a node, 2 are refused and spin on the word. */
    pyb_mcs_test_limit(held + 2);
    _Alignas(64) pyb_spinlock lk;
    uint64_t ctr = 0;
    _Atomic uint32_t go = 0;
    pthread_t th[4];
    lock_arg a[4];
    pyb_lock_init(&lk, PYB_LOCK_MCS);
    for (int i = 0; i < 4; i++) {
        a[i] = (lock_arg){.lk = &lk, .mode = PYB_LOCK_MCS, .n = n, .ctr = &ctr, .go = &go};
        pthread_create(&th[i], NULL, lock_worker, &a[i]);
    }
    pyb_store(&go, 1, PYB_RELEASE);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    pyb_mcs_test_limit(0);
    CHECK(ctr == 4 * n, "mixed queued and nodeless: counter %llu, expected %llu", (unsigned long long)ctr,
          (unsigned long long)(4 * n));
    uint32_t refused = 1;
    pyb_mcs_test_limit(pyb_mcs_nodes_in_use());
    pthread_t t1;
    pthread_create(&t1, NULL, id_worker, &refused);
    pthread_join(t1, NULL);
    pyb_mcs_test_limit(0);
    CHECK(refused == 0, "at the limit a new thread is refused a node (got %u)", refused);
}

/*
 * The atomic variant's single-call fast path (64-bit counters) against the general path: the same random
 * single starts, ends, undos, stray ends and reclaims on an atomic and a global tracker with 64-bit counters
 * (which take the general path), under every allocation-failure policy with injected faults, every overflow
 * policy and deferred freeing: every call returns the same, every start leaves the same record and carry,
 * the counters agree every 8 steps and the statistics at the end. (A page reclaim has tagged retiring is
 * never seen by a start on the reclaiming thread, whose reclaim call unpublishes or untags it before it
 * returns: the fast path's fallback on a retiring page is reached only by the threaded stress with
 * reclaim_every.)
 */
static pyb_rng diff_rng;
static uint64_t diff_next(void) { return pyb_rng_next(&diff_rng); }

static void test_single_fast_path_matches_the_general_path(uint64_t steps)
{
    const uint64_t dev = 1ull << 40, cs = 1ull << 28; /* 4,096 chunks, 512 per 64-bit page: 8 pages */
    const uint64_t per_page = PYB_PAGE_SIZE * 8 / 64;
    uint64_t *ca = malloc(8 * 4096), *cb = malloc(8 * 4096);
    pyb_rng_seed(&diff_rng, 7);
    for (int alloc = 0; alloc < 4; alloc++)
        for (int ov = 0; ov < 3; ov++) {
            pyb_fault fa, fb;
            pyb_fault_init(&fa, 0.3, 1, -1, 0, 7);
            pyb_fault_init(&fb, 0.3, 1, -1, 0, 7);
            free_mode = PYB_FREE_DEFERRED;
            pyb_tracker *a = make(dev, cs, 64, PYB_SYNC_ATOMIC, ov, alloc, 2, &fa);
            pyb_tracker *b = make(dev, cs, 64, PYB_SYNC_GLOBAL, ov, alloc, 2, &fb);
            free_mode = PYB_FREE_EAGER;
            pyb_ctx xa = PYB_CTX_INIT, xb = PYB_CTX_INIT;
            uint64_t offs[64], lens[64];
            int n = 0, bad = 0;
            for (uint64_t i = 0; i < steps && !bad; i++) {
                uint64_t op = diff_next() % 10;
                if (op < 5 && n < 64) {
                    uint64_t off = (diff_next() % 3) * per_page * cs + diff_next() % (600 * cs);
                    uint64_t len = 1 + diff_next() % (diff_next() % 4 == 0 ? 20 * cs : 2 * cs);
                    uint64_t ra = 0, rb = 0;
                    int x = pyb_tracker_start(a, &xa, off, len, 0, &ra);
                    int y = pyb_tracker_start(b, &xb, off, len, 0, &rb);
                    if (x != y || xa.rec.n != xb.rec.n || xa.rec.lost != xb.rec.lost || xa.carry != xb.carry) {
                        CHECK(0, "fast path %s/%s step %llu: start returned %d vs %d", ALLOC[alloc], OVERFLOW[ov],
                              (unsigned long long)i, x, y);
                        bad = 1;
                    }
                    if (x & PYB_START_WOULD_BLOCK) {
                        pyb_tracker_undo_start(a, &xa, off, ra - off);
                        pyb_tracker_undo_start(b, &xb, off, rb - off);
                    } else if (diff_next() % 8 == 0) {
                        pyb_tracker_undo_start(a, &xa, off, len);
                        pyb_tracker_undo_start(b, &xb, off, len);
                    } else {
                        offs[n] = off;
                        lens[n++] = len;
                    }
                } else if (op < 9 && n) {
                    int k = (int)(diff_next() % (uint64_t)n);
                    pyb_tracker_end(a, &xa, offs[k], lens[k]);
                    pyb_tracker_end(b, &xb, offs[k], lens[k]);
                    offs[k] = offs[n - 1];
                    lens[k] = lens[--n];
                } else if (diff_next() % 50 == 0) { /* a stray end: underflows */
                    uint64_t off = diff_next() % (dev - cs);
                    pyb_tracker_end(a, &xa, off, cs);
                    pyb_tracker_end(b, &xb, off, cs);
                } else {
                    pyb_tracker_ctx_done(a, &xa);
                    pyb_tracker_ctx_done(b, &xb);
                    pyb_tracker_reclaim(a);
                    pyb_tracker_reclaim(b);
                }
                if (i % 8 != 7 && i + 1 < steps)
                    continue; /* the counters every 8 steps and at the end (32 KiB each) */
                pyb_tracker_counts(a, ca);
                pyb_tracker_counts(b, cb);
                if (memcmp(ca, cb, 8 * 4096) != 0) {
                    CHECK(0, "fast path %s/%s step %llu: the counters differ", ALLOC[alloc], OVERFLOW[ov],
                          (unsigned long long)i);
                    bad = 1;
                }
            }
            pyb_tracker_ctx_done(a, &xa);
            pyb_tracker_ctx_done(b, &xb);
            pyb_tracker_stats sa, sb;
            pyb_tracker_get_stats(a, &sa);
            pyb_tracker_get_stats(b, &sb);
            CHECK(sa.starts == sb.starts && sa.ends == sb.ends && sa.untracked_writes == sb.untracked_writes &&
                  sa.alloc_failures == sb.alloc_failures && sa.underflows == sb.underflows &&
                  sa.hijack_events == sb.hijack_events && sa.pages_allocated == sb.pages_allocated && sa.starts > 0,
                  "fast path %s/%s: statistics differ (starts %llu/%llu ends %llu/%llu underflows %llu/%llu)",
                  ALLOC[alloc], OVERFLOW[ov], (unsigned long long)sa.starts, (unsigned long long)sb.starts,
                  (unsigned long long)sa.ends, (unsigned long long)sb.ends, (unsigned long long)sa.underflows,
                  (unsigned long long)sb.underflows);
            pyb_tracker_destroy(a);
            pyb_tracker_destroy(b);
        }
    free(ca);
    free(cb);
}

int main(int argc, char **argv)
{
    uint64_t ops = argc > 1 ? strtoull(argv[1], NULL, 10) : 20000;
    uint32_t threads = argc > 2 ? (uint32_t)strtoul(argv[2], NULL, 10) : 3;
    if (threads < 1 || threads > 16) {
        fprintf(stderr, "threads must be in [1, 16]\n");
        return 2;
    }
    test_every_lock_mode_excludes(threads, ops);
    test_mcs_serves_queued_waiters_in_arrival_order();
    test_mcs_registry_recycles_and_falls_back_when_exhausted(ops);
    test_geometry_and_memory();
    test_stolen_increment_and_hijack();
    test_overflow_policies();
    test_overflow_wait_blocks_until_an_end();
    test_a_wait_past_its_bound_times_out_and_can_be_undone();
    test_mempool_waits_for_a_freed_page_and_never_fails();
    test_mempool_wait_past_its_bound_times_out();
    test_deferred_free_keeps_an_empty_page_until_reclaim();
    test_reclaim_waits_for_a_grace_period_and_gives_up_bounded();
    /* the batch loops have an instance per lock mode (the default) or read it (the others) */
    for (lock_mode = PYB_LOCK_PTHREAD; lock_mode <= PYB_LOCK_TICKET; lock_mode++)
        for (free_mode = PYB_FREE_EAGER; free_mode <= PYB_FREE_DEFERRED; free_mode++)
            test_batches_match_single_calls();
    lock_mode = PYB_LOCK_PTHREAD;
    free_mode = PYB_FREE_EAGER;
    test_batches_on_pages_wider_than_a_shift();
    test_a_device_past_two_to_the_63_is_refused();
    test_undo_skips_the_counters_a_start_clamped_or_wrapped();
    test_an_overflowed_record_undoes_conservatively();
    test_undo_skips_the_pages_a_start_left_untracked();
    test_single_fast_path_matches_the_general_path(ops);
    for (lock_mode = PYB_LOCK_PTHREAD; lock_mode <= PYB_LOCK_MCS; lock_mode++)
        for (int sync = 0; sync < 3; sync++)
            for (int alloc = 0; alloc < 4; alloc++)
                for (int ov = 0; ov < 3; ov++)
                    if (lock_mode == PYB_LOCK_PTHREAD || sync != PYB_SYNC_ATOMIC)
                        stress_one(sync, alloc, ov, ops, threads);
    /* deferred page lifetime: pages freed only by thread 0's reclaim */
    lock_mode = PYB_LOCK_PTHREAD;
    free_mode = PYB_FREE_DEFERRED;
    for (int sync = 0; sync < 2; sync++)
        for (int alloc = 0; alloc < 4; alloc++)
            stress_one(sync, alloc, PYB_OVERFLOW_WAIT, ops, threads);
    free_mode = PYB_FREE_EAGER;
    /* md's un-hijack on the daemon's decay: thread 0's reclaim marks and reverts drained hijacked pages while
     * the others count on them */
    unhijack_mode = PYB_UNHIJACK_ON_DECAY;
    for (int sync = 0; sync < 3; sync++)
        for (int alloc = PYB_ALLOC_HIJACK; alloc <= PYB_ALLOC_POOL; alloc++)
            for (int ov = 0; ov < 3; ov++)
                stress_one(sync, alloc, ov, ops, threads);
    unhijack_mode = PYB_UNHIJACK_AT_END;
    if (failures) {
        fprintf(stderr, "test_tracker: %d check(s) failed\n", failures);
        return 1;
    }
    printf("test_tracker: all checks passed (%llu ops x %u threads per configuration)\n",
           (unsigned long long)ops, threads);
    return 0;
}
