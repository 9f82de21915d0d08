/*
 * test_cachedev.c - the cached-device model tested on its own, in C, for the sanitizer builds of the
 * top-level `make sanitize` (ASan+UBSan, TSan, LeakSanitizer, valgrind). Exits non-zero if any check
 * failed; prints the runtime of each part.
 *
 * Parts:
 *   unit      the request path's steps on one thread: miss, insert, hit, invalidation, bypass; and the
 *             tracker vtable's generic path (pyb_ops.h: a tracker that is not the lab's, here the lab's
 *             own functions behind a copied table, and a table whose calls fail): the race stress
 *             through it (no stale read, invariants at quiescence), failures kept as the device's
 *             error, a failed start running nothing else, granularity page refused;
 *   explore   the explorer for every sync variant x check placement (entry, miss, miss without the
 *             -EINTR restart, after) x allocation-failure policy x injected failure (fault_at 0, 1,
 *             2): no violation where the design says none, a counterexample where it says one
 *             (unpatched, check at entry, miss without the restart, untracked);
 *   ordering  the deliberately broken ordering (PYB_CD_TEST_HOOKS: a write's increment becomes
 *             visible only after its invalidation) must give the explorer a counterexample in every
 *             sync variant, and the same configuration without it none;
 *   race      the native race stress for every sync variant x allocation policy (with injected
 *             allocation failures and a racing reclaim): no stale read, no stale cached block where
 *             the design promises it, and the tracker's invariants at quiescence;
 *   fio       the fio-like mix for every sync variant x allocation policy, same checks;
 *   leak      `rounds` rounds of build / race / fio / explore / reclaim / destroy with pool pages and
 *             injected failures: after each round every page is freed and every pool page returned
 *             (the tracker's own gauges); LeakSanitizer or valgrind checks the heap at exit.
 *
 * Usage: test_cachedev [ops_per_thread] [leak_rounds] [parts]
 *   parts: a comma-separated subset of unit,explore,ordering,race,fio,leak (default all but leak).
 * Built with -DPYB_CD_TEST_FORCE_LATE_INCREMENT the broken ordering is on for every part, and the
 * binary must fail (`make sanitize-ordering`).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../pyb_cachedev.h"
#include "../pyb_explore.h"
#include "../pyb_fault.h"
#include "../pyb_ops_lab.h"
#include "../pyb_tracker.h"
#include "check.h"
#include "../pyb_workload.h"

#ifndef PYB_CD_TEST_HOOKS
#error "test_cachedev.c needs -DPYB_CD_TEST_HOOKS"
#endif

#ifdef PYB_CD_TEST_FORCE_LATE_INCREMENT
#define LATE_DEFAULT 1
#else
#define LATE_DEFAULT 0
#endif

#define KiB (1ull << 10)
#define MiB (1ull << 20)
#define BLOCK 4096u
#define NONE (-1)


static const char *SYNC[] = {"global", "page", "atomic"};
static const char *ALLOC[] = {"untracked", "hijack", "pool", "mempool"};

static const char *sync_name(int sync) { return sync == NONE ? "none" : SYNC[sync]; }

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- building blocks --------------------------------------------------------------------------- */

typedef struct rig {
    pyb_fault fault;
    pyb_tracker *t; /* NULL for sync NONE */
    pyb_cachedev *d;
    uint32_t pool_pages;
} rig;

static void rig_make(rig *r, int sync, int alloc, double fault_probability, uint64_t seed, uint64_t device_size,
                     uint64_t chunk, int check, uint64_t write_delay_ns)
{
    memset(r, 0, sizeof(*r));
    if (sync != NONE) {
        pyb_fault_init(&r->fault, fault_probability, 1, -1, 0, seed);
        r->pool_pages = alloc == PYB_ALLOC_POOL ? 2 : 0;
        pyb_tracker_config tc = {0};
        tc.device_size = device_size;
        tc.chunk_size = chunk;
        tc.counter_bits = sync == PYB_SYNC_ATOMIC ? 64 : 16;
        tc.sync = sync;
        tc.overflow = PYB_OVERFLOW_WAIT;
        tc.alloc_failure = alloc;
        tc.pool_pages = r->pool_pages;
        tc.fault = fault_probability > 0 ? &r->fault : NULL;
        /* The lock variants' lock kinds by seed % 4: the default on even seeds, spin_yield on 1 and the
         * queued lock on 3 (mod 4): the race part runs all three, fio's matrix pthread and mcs (its
         * spin_yield runs are in the leak rounds). */
        static const int lock_of_seed[4] = {PYB_LOCK_PTHREAD, PYB_LOCK_SPIN_YIELD, PYB_LOCK_PTHREAD, PYB_LOCK_MCS};
        tc.lock_mode = sync != PYB_SYNC_ATOMIC ? lock_of_seed[seed % 4] : PYB_LOCK_PTHREAD;
        int rc = pyb_tracker_create(&tc, &r->t);
        if (rc) {
            fprintf(stderr, "pyb_tracker_create: %d\n", rc);
            exit(2);
        }
    }
    pyb_cd_config dc = {.device_size = device_size, .block_size = BLOCK, .region_blocks = 4, .tracker = r->t,
                        .check = check, .delay_mode = PYB_DELAY_YIELD, .write_delay_ns = write_delay_ns,
                        .bounce_copy = 1, .granularity = PYB_GRAN_CHUNK};
    int rc = pyb_cd_create(&dc, &r->d);
    if (rc) {
        fprintf(stderr, "pyb_cd_create: %d\n", rc);
        exit(2);
    }
}

static void rig_destroy(rig *r)
{
    pyb_cd_destroy(r->d);
    pyb_tracker_destroy(r->t);
}

/*
 * The tracker's invariants at quiescence: every counter zero, every start ended and no end refused
 * (unless writes went untracked), and after a reclaim no page, no hijacked slot and no pool page in use,
 * every allocated page freed, page bytes back to the reserve pool alone.
 */
static void check_quiescent_tracker(rig *r, const char *what, int untracked_possible)
{
    if (!r->t)
        return;
    pyb_tracker_reclaim(r->t);
    pyb_tracker_stats s;
    pyb_tracker_memory m;
    pyb_tracker_get_stats(r->t, &s);
    pyb_tracker_get_memory(r->t, &m);
    uint64_t n = pyb_tracker_n_chunks(r->t), left = 0;
    uint64_t *c = malloc(n * sizeof(*c));
    pyb_tracker_counts(r->t, c);
    for (uint64_t i = 0; i < n; i++)
        left += c[i];
    free(c);
    CHECK(s.starts == s.ends, "%s: starts %llu ends %llu", what, (unsigned long long)s.starts,
          (unsigned long long)s.ends);
    if (untracked_possible)
        return; /* a stolen increment may leave a counter set or an end refused: nothing more to promise */
    CHECK(left == 0 && s.underflows == 0, "%s: counts left %llu, underflows %llu", what, (unsigned long long)left,
          (unsigned long long)s.underflows);
    CHECK(m.pages == 0 && s.hijacked_pages == 0 && s.pool_pages_used == 0, "%s: pages %llu hijacked %llu pool used %llu",
          what, (unsigned long long)m.pages, (unsigned long long)s.hijacked_pages,
          (unsigned long long)s.pool_pages_used);
    CHECK(s.pages_allocated == s.pages_freed && m.page_bytes == (uint64_t)r->pool_pages * PYB_PAGE_SIZE,
          "%s: allocated %llu freed %llu page bytes %llu", what, (unsigned long long)s.pages_allocated,
          (unsigned long long)s.pages_freed, (unsigned long long)m.page_bytes);
}

/* ---- unit ---------------------------------------------------------------------------------------- */

/* ---- the vtable's generic path -------------------------------------------------------------------- */

static void sum_stats(const pyb_workload_result *res, uint32_t n, pyb_cd_stats *tot, uint64_t *ops);

/* A tracker whose every call fails the way a hung patch's does (start, end or check, chosen by fail). */
static int fail_what; /* 1 start, 2 end, 3 check; single-threaded use only */
static void nop_ctx(void *self, void *ctx) { (void)self, (void)ctx; }
static int fail_start(void *self, void *ctx, uint64_t off, uint64_t len, int may_block, uint64_t *resume)
{
    (void)self, (void)ctx, (void)off, (void)len, (void)may_block, (void)resume;
    return fail_what == 1 ? PYB_OPS_EHUNG : 0;
}
static int fail_end(void *self, void *ctx, uint64_t off, uint64_t len)
{
    (void)self, (void)ctx, (void)off, (void)len;
    return fail_what == 2 ? PYB_OPS_EFATAL : 0;
}
static int fail_check(void *self, void *ctx, uint64_t off, uint64_t len)
{
    (void)self, (void)ctx, (void)off, (void)len;
    return fail_what == 3 ? PYB_OPS_EBROKEN : 0;
}
static const pyb_ops failing_ops = {.name = "failing", .ctx_init = nop_ctx, .ctx_done = nop_ctx,
                                    .start = fail_start, .end = fail_end, .is_active = fail_check};

/* A tracker without PYB_OPS_CAN_RESUME that counts its calls (a patch's shape). */
static int counted_starts, counted_ends;
static int count_start(void *self, void *ctx, uint64_t off, uint64_t len, int may_block, uint64_t *resume)
{
    (void)self, (void)ctx, (void)off, (void)len, (void)may_block, (void)resume;
    counted_starts++;
    return 0;
}
static int count_end(void *self, void *ctx, uint64_t off, uint64_t len)
{
    (void)self, (void)ctx, (void)off, (void)len;
    counted_ends++;
    return 0;
}
static const pyb_ops counting_ops = {.name = "counting", .ctx_init = nop_ctx, .ctx_done = nop_ctx,
                                     .start = count_start, .end = count_end, .is_active = fail_check};

/* The whole-write helpers run END on the caller: they refuse a tracker whose END must run on a
 * completion thread; the completion thread's failure leaves the start counted and breaks the device. */
static void part_ops_no_resume(void)
{
    rig r;
    rig_make(&r, NONE, PYB_ALLOC_HIJACK, 0.0, 0, 16 * BLOCK, BLOCK, PYB_CHECK_AFTER, 0);
    pyb_ops_tracker counting = {&counting_ops, NULL};
    CHECK(pyb_cd_set_ops(r.d, counting) == 0, "no-resume: set");
    fail_what = 0;
    counted_starts = counted_ends = 0;
    pyb_cd_ctx c;
    pyb_cd_write w;
    pyb_cd_ctx_init(r.d, &c);
    CHECK(pyb_cd_write_run(r.d, &c, 0, 1) == 0 && counted_starts == 0 && counted_ends == 0 &&
              pyb_cd_backing_version(r.d, 0) == 0,
          "no-resume: write_run ran (%d starts, %d ends)", counted_starts, counted_ends);
    pyb_cd_write_init(&w, 0, 1);
    pyb_cd_write_step(r.d, &c, &w); /* START */
    CHECK(pyb_cd_write_finish(r.d, &c, &w) == 0 && w.step == PYB_W_INVALIDATE && counted_ends == 0,
          "no-resume: write_finish ran (step %d, %d ends)", w.step, counted_ends);
    pyb_cd_write_step(r.d, &c, &w); /* INVALIDATE */
    pyb_cd_test_fail_thread_create = EAGAIN;
    int rc = pyb_cd_write_complete_on_thread(r.d, &c, &w, 1);
    pyb_cd_test_fail_thread_create = 0;
    CHECK(rc == EAGAIN && counted_starts == 1 && counted_ends == 0 && w.step == PYB_W_LAND &&
              pyb_cd_error(r.d) == PYB_OPS_EBROKEN,
          "no-resume: a failed completion thread (rc %d, %d ends, step %d, error %d)", rc, counted_ends, w.step,
          pyb_cd_error(r.d));
    CHECK(pyb_cd_write_complete_on_thread(r.d, &c, &w, 1) == 0 && counted_ends == 1 && w.step == PYB_W_DONE,
          "no-resume: the completion (%d ends)", counted_ends);
    pyb_cd_ctx_done(r.d, &c);
    pyb_cd_set_ops(r.d, (pyb_ops_tracker){NULL, NULL});
    rig_destroy(&r);
}

static void part_ops(void)
{
    /* The lab's functions behind another table: the drivers take the generic path (one call per
     * step, a blocking start, no split), which must keep the protocol. */
    for (int sync = PYB_SYNC_GLOBAL; sync <= PYB_SYNC_ATOMIC; sync++) {
        rig r;
        rig_make(&r, sync, PYB_ALLOC_HIJACK, 0.0, 3, 16 * BLOCK, BLOCK, PYB_CHECK_AFTER, 2000);
        pyb_ops copy = pyb_lab_ops;
        pyb_ops_tracker generic = {&copy, r.t};
        CHECK(pyb_cd_set_ops(r.d, generic) == 0 && pyb_cd_tracker(r.d) == NULL, "ops %s: set", SYNC[sync]);
        pyb_race_config cfg = {4, 2, 1000, 0.0, 0, 16, 4, 2, 7, 5, 0, 0.0};
        pyb_workload_result res[4];
        CHECK(pyb_race_run(r.d, &cfg, res) == 0, "ops %s: race", SYNC[sync]);
        pyb_cd_stats tot;
        uint64_t n_ops;
        sum_stats(res, 4, &tot, &n_ops);
        CHECK(tot.writes > 0 && tot.stale_reads == 0 && pyb_cd_stale_cached_blocks(r.d) == 0 && !pyb_cd_error(r.d),
              "ops %s: %llu writes, %llu stale reads", SYNC[sync], (unsigned long long)tot.writes,
              (unsigned long long)tot.stale_reads);
        check_quiescent_tracker(&r, "ops generic path", 0);
        /* granularity page needs the lab's geometry: refused for another tracker */
        pyb_cd_config dc = {.device_size = 16 * BLOCK, .block_size = BLOCK, .region_blocks = 4,
                            .ops = generic, .granularity = PYB_GRAN_PAGE};
        pyb_cachedev *d2 = NULL;
        CHECK(pyb_cd_create(&dc, &d2) == -EINVAL && !d2, "ops %s: granularity page accepted", SYNC[sync]);
        rig_destroy(&r);
    }

    rig r;
    rig_make(&r, NONE, PYB_ALLOC_HIJACK, 0.0, 0, 16 * BLOCK, BLOCK, PYB_CHECK_AFTER, 0);
    pyb_ops_tracker failing = {&failing_ops, NULL};
    pyb_cd_ctx c;
    pyb_cd_write w;
    pyb_cd_read rd;
    for (fail_what = 1; fail_what <= 3; fail_what++) {
        CHECK(pyb_cd_set_ops(r.d, failing) == 0 && !pyb_cd_error(r.d), "ops: set clears the error");
        pyb_cd_ctx_init(r.d, &c);
        pyb_cd_write_init(&w, 0, 1);
        pyb_cd_write_step(r.d, &c, &w); /* START */
        if (fail_what == 1) {
            CHECK(w.step == PYB_W_DONE && w.error == PYB_OPS_EHUNG && pyb_cd_backing_version(r.d, 0) == 0,
                  "ops: a failed start ran more (step %d, error %d)", w.step, w.error);
            CHECK(pyb_cd_write_run(r.d, &c, 0, 1) == 0, "ops: write_run after a failed start");
        } else {
            while (w.step != PYB_W_DONE)
                pyb_cd_write_step(r.d, &c, &w);
            CHECK(w.error == (fail_what == 2 ? PYB_OPS_EFATAL : 0) && pyb_cd_completed_version(r.d, 0) == w.version,
                  "ops: end (error %d)", w.error);
            pyb_cd_read_run(r.d, &c, &rd, 0, 1);
            CHECK(rd.error == (fail_what == 3 ? PYB_OPS_EBROKEN : 0) && (fail_what != 3 || rd.active),
                  "ops: a failed check must bypass (error %d, active %d)", rd.error, rd.active);
        }
        int want = fail_what == 1 ? PYB_OPS_EHUNG : fail_what == 2 ? PYB_OPS_EFATAL : PYB_OPS_EBROKEN;
        CHECK(pyb_cd_error(r.d) == want, "ops: device error %d, want %d", pyb_cd_error(r.d), want);
        pyb_cd_ctx_done(r.d, &c);
    }
    pyb_cd_set_ops(r.d, (pyb_ops_tracker){NULL, NULL});
    rig_destroy(&r);
    part_ops_no_resume();
}

static void part_unit(void)
{
    for (int sync = NONE; sync <= PYB_SYNC_ATOMIC; sync++) {
        rig r;
        rig_make(&r, sync, PYB_ALLOC_HIJACK, 0.0, 0, 64 * BLOCK, BLOCK, PYB_CHECK_AFTER, 0);
        pyb_cd_ctx c;
        pyb_cd_read rd;
        pyb_cd_ctx_init(r.d, &c);
        pyb_cd_read_run(r.d, &c, &rd, 0, 2); /* miss, inserts v0 of both blocks */
        CHECK(!rd.hit && rd.inserted == 2 && pyb_cd_cached_blocks(r.d) == 2, "%s: first read", sync_name(sync));
        uint64_t v = pyb_cd_write_run(r.d, &c, 1, 1);
        CHECK(pyb_cd_cache_entry(r.d, 1) == PYB_CD_EMPTY && pyb_cd_backing_version(r.d, 1) == v,
              "%s: the write invalidated and landed", sync_name(sync));
        pyb_cd_read_run(r.d, &c, &rd, 0, 2); /* block 0 hit, block 1 missed: not a hit */
        CHECK(!rd.hit && rd.version[1] == v && !rd.stale, "%s: read after write", sync_name(sync));
        pyb_cd_read_run(r.d, &c, &rd, 0, 2);
        CHECK(rd.hit && rd.version[1] == v, "%s: hit", sync_name(sync));
        if (sync != NONE) {
            /* A read miss that overlaps an active write bypasses the cache: nothing inserted. */
            pyb_cd_write w;
            pyb_cd_write_init(&w, 5, 1);
            pyb_cd_write_step(r.d, &c, &w); /* START */
            pyb_cd_write_step(r.d, &c, &w); /* INVALIDATE */
            pyb_cd_read_run(r.d, &c, &rd, 5, 1);
            CHECK(rd.active && rd.inserted == 0, "%s: bypass during a write", sync_name(sync));
            pyb_cd_write_step(r.d, &c, &w); /* LAND */
            pyb_cd_write_step(r.d, &c, &w); /* END */
            /* pyb_cd_set_track at quiescence: a writethrough write is counted under "all" only, and a
             * value that is not a pyb_cd_track is refused with the track unchanged. */
            for (int track = PYB_TRACK_BYPASS; track <= PYB_TRACK_ALL + 1; track++) {
                int rc = pyb_cd_set_track(r.d, track);
                CHECK(rc == (track <= PYB_TRACK_ALL ? 0 : -EINVAL), "%s: set_track %d returned %d",
                      sync_name(sync), track, rc);
                pyb_cd_write_init(&w, 6, 1);
                w.kind = PYB_WK_WRITETHROUGH;
                w.alloc = PYB_CD_ALLOC_OK;
                pyb_cd_write_step(r.d, &c, &w); /* START */
                int want = track == PYB_TRACK_ALL || track == PYB_TRACK_ALL + 1; /* refused: "all" kept */
                CHECK(w.counted == want, "%s: track %d counted a writethrough write: %d", sync_name(sync), track,
                      w.counted);
                while (w.step != PYB_W_DONE)
                    pyb_cd_write_step(r.d, &c, &w);
            }
            CHECK(pyb_cd_set_track(r.d, PYB_TRACK_BYPASS) == 0, "%s: set_track back", sync_name(sync));
        }
        pyb_cd_ctx_done(r.d, &c);
        CHECK(pyb_cd_stale_cached_blocks(r.d) == 0, "%s: stale cached", sync_name(sync));
        check_quiescent_tracker(&r, sync_name(sync), 0);
        rig_destroy(&r);
    }
    part_ops();
}

/* ---- explorer ------------------------------------------------------------------------------------ */

/* Check placements of the explorer runs, with "miss without the restart" as a fourth. */
#define MISS_NO_RESTART 3
static const char *check_name(int check)
{
    static const char *names[] = {"after", "entry", "miss", "miss-no-restart"};
    return names[check];
}

static pyb_explore_result explore(int sync, int check, int alloc, uint64_t fault_at, uint32_t writes, uint32_t reads)
{
    pyb_explore_config cfg = {0};
    cfg.sync = sync == NONE ? PYB_EXPLORE_NO_TRACKING : sync;
    cfg.check = check == MISS_NO_RESTART ? PYB_CHECK_MISS : check;
    cfg.no_restart = check == MISS_NO_RESTART;
    cfg.overflow = PYB_OVERFLOW_WAIT;
    cfg.max_restarts = 4;
    cfg.reduce = 1;
    cfg.alloc_failure = alloc;
    cfg.pool_pages = 1;
    cfg.counter_bits = 0;
    cfg.fault_at = fault_at;
    cfg.writes = writes;
    cfg.reads = reads;
    cfg.write_blocks = cfg.read_blocks = cfg.n_blocks = 1;
    cfg.block_size = BLOCK;
    cfg.chunk_size = BLOCK;
    pyb_explorer *e;
    int rc = pyb_explore_create(&cfg, &e);
    if (rc) {
        fprintf(stderr, "pyb_explore_create: %d\n", rc);
        exit(2);
    }
    rc = pyb_explore_run(e, 0);
    if (rc != 1) {
        fprintf(stderr, "pyb_explore_run: %d\n", rc);
        exit(2);
    }
    pyb_explore_result res = *pyb_explore_result_of(e);
    pyb_explore_destroy(e);
    return res;
}

static uint64_t explored;

static void expect(int sync, int check, int alloc, uint64_t fault_at, uint32_t writes, uint32_t reads,
                   int violations_expected)
{
    pyb_explore_result r = explore(sync, check, alloc, fault_at, writes, reads);
    explored += r.schedules;
    const char *ck = check_name(check);
    CHECK(r.restart_capped_schedules == 0 && r.stuck_schedules == 0, "%s/%s %uw%ur: %llu cut, %llu stuck",
          sync_name(sync), ck, writes, reads, (unsigned long long)r.restart_capped_schedules,
          (unsigned long long)r.stuck_schedules);
    if (violations_expected > 0)
        CHECK(r.violations > 0 && r.n_steps > 0, "%s/%s/%s fault_at=%llu %uw%ur: no counterexample",
              sync_name(sync), ck, ALLOC[alloc], (unsigned long long)fault_at, writes, reads);
    else if (violations_expected == 0)
        CHECK(r.violations == 0 && r.bypass_schedules > 0, "%s/%s/%s fault_at=%llu %uw%ur: %llu violations (of %llu)",
              sync_name(sync), ck, ALLOC[alloc], (unsigned long long)fault_at, writes, reads,
              (unsigned long long)r.violations, (unsigned long long)r.schedules);
    if (violations_expected == 0 && r.violations && r.n_steps) {
        /* The records, raw (pybcache renders them into sentences): kind number step flags. */
        for (uint32_t i = 0; i < r.n_steps; i++)
            fprintf(stderr, "    %2u. kind %u #%u step %u flags %#x\n", i + 1, r.steps[i].kind, r.steps[i].number,
                    r.steps[i].step, r.steps[i].flags);
    }
}

static void part_explore_split(void);

/* Writethrough writes (pyb_cachedev.h): a fallback invalidation the v2 patch's placement (track
 * bypass) never counts is the unpatched race again; counting it (invalidations, all) closes it, and
 * with no allocation failure no placement finds anything. Check after. With two writethrough writes
 * the fallback must be the second allocation: the first START draws the first allocation and the
 * older version, and the newer write's insert then outlives the older one's invalidation (newest
 * wins), so K = 1 cannot leave a stale block there. */
static void expect_writethrough(int sync, int kind, uint32_t writes, uint32_t reads, uint64_t k, int track,
                                int violations_expected)
{
    pyb_explore_config cfg = {0};
    cfg.sync = sync;
    cfg.check = PYB_CHECK_AFTER;
    cfg.overflow = PYB_OVERFLOW_WAIT;
    cfg.max_restarts = 4;
    cfg.reduce = 1;
    cfg.alloc_failure = PYB_ALLOC_HIJACK;
    cfg.writes = writes;
    cfg.reads = reads;
    cfg.write_blocks = cfg.read_blocks = cfg.n_blocks = 1;
    cfg.block_size = BLOCK;
    cfg.chunk_size = BLOCK;
    cfg.writes_kind = kind;
    cfg.cache_alloc_fail = k;
    cfg.track = track;
    pyb_explorer *e;
    CHECK(pyb_explore_create(&cfg, &e) == 0, "writethrough: create");
    CHECK(pyb_explore_run(e, 0) == 1, "writethrough: run");
    pyb_explore_result r = *pyb_explore_result_of(e);
    pyb_explore_destroy(e);
    explored += r.schedules;
    CHECK(violations_expected ? r.violations > 0 && r.n_steps > 0 : r.violations == 0,
          "writethrough %s kind %d %uw%ur K=%llu track %d: %llu violations of %llu schedules", sync_name(sync),
          kind, writes, reads, (unsigned long long)k, track, (unsigned long long)r.violations, (unsigned long long)r.schedules);
    if (violations_expected) {
        int fallback = 0, uncounted = 0;
        for (uint32_t i = 0; i < r.n_steps; i++) {
            fallback |= r.steps[i].step == PYB_W_INVALIDATE && (r.steps[i].flags & PYB_XF_FALLBACK);
            uncounted |= r.steps[i].step == PYB_W_START && (r.steps[i].flags & PYB_XF_UNCOUNTED);
        }
        CHECK(fallback && uncounted, "writethrough: the counterexample shows no uncounted fallback");
    }
}

static void part_writethrough(void)
{
    for (int sync = 0; sync < 3; sync++) {
        for (int track = PYB_TRACK_BYPASS; track <= PYB_TRACK_ALL; track++) {
            int v2 = track == PYB_TRACK_BYPASS; /* the v2 patch's placement misses the fallback */
            expect_writethrough(sync, PYB_XW_WRITETHROUGH, 1, 1, 1, track, v2);
            expect_writethrough(sync, PYB_XW_WRITETHROUGH, 1, 2, 1, track, v2);
            expect_writethrough(sync, PYB_XW_WRITETHROUGH, 2, 1, 2, track, v2);
            expect_writethrough(sync, PYB_XW_WRITETHROUGH, 2, 1, 1, track, 0);
            expect_writethrough(sync, PYB_XW_MIXED, 2, 1, 1, track, v2);
            expect_writethrough(sync, PYB_XW_WRITETHROUGH, 1, 2, 0, track, 0);
            expect_writethrough(sync, PYB_XW_WRITETHROUGH, 2, 1, 0, track, 0);
            expect_writethrough(sync, PYB_XW_MIXED, 2, 1, 0, track, 0);
        }
    }
}

static void part_explore(void)
{
    part_writethrough();
    expect(NONE, PYB_CHECK_AFTER, PYB_ALLOC_HIJACK, 0, 1, 1, 1); /* the unpatched race */
    for (int sync = 0; sync < 3; sync++) {
        expect(sync, PYB_CHECK_ENTRY, PYB_ALLOC_HIJACK, 0, 1, 1, 1); /* the check at request entry */
        expect(sync, MISS_NO_RESTART, PYB_ALLOC_HIJACK, 0, 1, 1, 1); /* the restart is what makes miss safe */
        expect(sync, PYB_CHECK_MISS, PYB_ALLOC_HIJACK, 0, 2, 1, 0);
        expect(sync, PYB_CHECK_MISS, PYB_ALLOC_HIJACK, 0, 1, 2, 0);
        for (int alloc = 0; alloc <= PYB_ALLOC_MEMPOOL; alloc++) { /* mempool with its one-page reserve */
            for (uint64_t fault_at = 0; fault_at <= 2; fault_at++) {
                /* untracked with an injected failure: the race reopens with a stolen increment (2w1r,
                 * first allocation fails); other bounds are not promised either way (-1). */
                int untracked_fault = alloc == PYB_ALLOC_UNTRACKED && fault_at;
                expect(sync, PYB_CHECK_AFTER, alloc, fault_at, 2, 1, untracked_fault ? (fault_at == 1 ? 1 : -1) : 0);
                expect(sync, PYB_CHECK_AFTER, alloc, fault_at, 1, 2, untracked_fault ? -1 : 0);
            }
        }
    }
    part_explore_split();
}

/* The subtrees below the prefixes of one depth partition the search: their counts add up to the
 * whole, and the first counterexample in prefix order is the whole search's (pyb_explore_prefixes). */
static void check_split(int sync, int alloc, uint64_t fault_at, uint32_t writes, uint32_t reads, uint32_t depth)
{
    pyb_explore_config cfg = {0};
    cfg.sync = sync == NONE ? PYB_EXPLORE_NO_TRACKING : sync;
    cfg.check = PYB_CHECK_AFTER;
    cfg.overflow = PYB_OVERFLOW_WAIT;
    cfg.max_restarts = 4;
    cfg.reduce = 1;
    cfg.alloc_failure = alloc;
    cfg.pool_pages = 1;
    cfg.fault_at = fault_at;
    cfg.writes = writes;
    cfg.reads = reads;
    cfg.write_blocks = cfg.read_blocks = cfg.n_blocks = 1;
    cfg.block_size = BLOCK;
    cfg.chunk_size = BLOCK;
    enum { MAXP = 4096 };
    static uint8_t prefixes[MAXP * 16];
    static uint32_t lens[MAXP];
    pyb_explorer *e;
    CHECK(depth <= 16 && pyb_explore_create(&cfg, &e) == 0, "split: create");
    int64_t n = pyb_explore_prefixes(e, depth, prefixes, lens, MAXP);
    CHECK(n > 1, "split: %lld prefixes at depth %u", (long long)n, depth);
    CHECK(pyb_explore_run(e, 0) == 1, "split: the explorer did not run after listing prefixes");
    pyb_explore_result whole = *pyb_explore_result_of(e);
    pyb_explore_destroy(e);
    uint64_t schedules = 0, violations = 0, pruned = 0;
    int64_t first = -1;
    for (int64_t i = 0; i < n; i++) {
        CHECK(pyb_explore_create(&cfg, &e) == 0, "split: create");
        CHECK(pyb_explore_set_prefix(e, prefixes + i * depth, lens[i]) == 0, "split: set_prefix");
        CHECK(pyb_explore_run(e, 0) == 1, "split: run below prefix %lld", (long long)i);
        const pyb_explore_result *r = pyb_explore_result_of(e);
        schedules += r->schedules;
        violations += r->violations;
        pruned += r->pruned_runs;
        if (first < 0 && r->n_steps) {
            first = i;
            CHECK(r->n_steps == whole.n_steps && !memcmp(r->steps, whole.steps, r->n_steps * sizeof(r->steps[0])),
                  "split: the first counterexample differs from the whole search's");
        }
        pyb_explore_destroy(e);
    }
    CHECK(schedules == whole.schedules && violations == whole.violations && pruned == whole.pruned_runs,
          "split %s %uw%ur depth %u: %llu/%llu/%llu schedules/violations/pruned, whole %llu/%llu/%llu",
          sync_name(sync), writes, reads, depth, (unsigned long long)schedules, (unsigned long long)violations,
          (unsigned long long)pruned, (unsigned long long)whole.schedules, (unsigned long long)whole.violations,
          (unsigned long long)whole.pruned_runs);
    CHECK((first >= 0) == (whole.n_steps > 0), "split: counterexample found %lld, whole %u", (long long)first,
          whole.n_steps);
    explored += schedules;
}

static void part_explore_split(void)
{
    check_split(NONE, PYB_ALLOC_HIJACK, 0, 2, 1, 4);
    check_split(PYB_SYNC_PAGE, PYB_ALLOC_HIJACK, 0, 2, 1, 6);
    check_split(PYB_SYNC_PAGE, PYB_ALLOC_UNTRACKED, 1, 2, 1, 5);
    check_split(PYB_SYNC_ATOMIC, PYB_ALLOC_HIJACK, 0, 1, 2, 3);
}

/* ---- the deliberately broken ordering ------------------------------------------------------------ */

static void part_ordering(void)
{
    for (int sync = 0; sync < 3; sync++) {
        pyb_cd_test_late_increment = 1;
        pyb_explore_result broken = explore(sync, PYB_CHECK_AFTER, PYB_ALLOC_HIJACK, 0, 1, 1);
        pyb_cd_test_late_increment = 0;
        pyb_explore_result fixed = explore(sync, PYB_CHECK_AFTER, PYB_ALLOC_HIJACK, 0, 1, 1);
        pyb_cd_test_late_increment = LATE_DEFAULT;
        explored += broken.schedules + fixed.schedules;
        CHECK(broken.violations > 0, "%s: the late increment was not caught (%llu schedules)", SYNC[sync],
              (unsigned long long)broken.schedules);
        CHECK(fixed.violations == 0, "%s: %llu violations without the late increment", SYNC[sync],
              (unsigned long long)fixed.violations);
        printf("  ordering %-6s late increment: %llu/%llu schedules violate; correct order: %llu/%llu\n", SYNC[sync],
               (unsigned long long)broken.violations, (unsigned long long)broken.schedules,
               (unsigned long long)fixed.violations, (unsigned long long)fixed.schedules);
    }
}

/* ---- native workloads ---------------------------------------------------------------------------- */

static void sum_stats(const pyb_workload_result *res, uint32_t n, pyb_cd_stats *tot, uint64_t *ops)
{
    memset(tot, 0, sizeof(*tot));
    *ops = 0;
    for (uint32_t i = 0; i < n; i++) {
        const uint64_t *s = (const uint64_t *)&res[i].stats;
        uint64_t *d = (uint64_t *)tot;
        for (size_t k = 0; k < sizeof(*tot) / sizeof(uint64_t); k++)
            d[k] += s[k];
        *ops += res[i].ops;
    }
}

/* One race-stress run; returns stale reads + stale cached blocks. */
static uint64_t race_one(int sync, int alloc, double fault_probability, int check, uint64_t ops, uint64_t seed,
                         int assert_clean)
{
    rig r;
    char what[96];
    snprintf(what, sizeof(what), "race %s/%s/%s p=%.2f", sync_name(sync), ALLOC[alloc], check_name(check),
             fault_probability);
    rig_make(&r, sync, alloc, fault_probability, seed, 16 * BLOCK, BLOCK, check, 2000);
    pyb_race_config cfg = {4, 2, ops, 0.0, 0, 16, 4, 2, 7, seed, 0, 0.0};
    pyb_workload_result res[4];
    int rc = pyb_race_run(r.d, &cfg, res);
    CHECK(rc == 0, "%s: rc %d", what, rc);
    pyb_cd_stats tot;
    uint64_t n_ops;
    sum_stats(res, 4, &tot, &n_ops);
    uint64_t stale_cached = pyb_cd_stale_cached_blocks(r.d);
    CHECK(n_ops == 4 * ops && tot.reads + tot.writes == n_ops, "%s: ops %llu", what, (unsigned long long)n_ops);
    if (assert_clean)
        CHECK(tot.stale_reads == 0 && stale_cached == 0, "%s: %llu stale reads, %llu stale cached blocks", what,
              (unsigned long long)tot.stale_reads, (unsigned long long)stale_cached);
    check_quiescent_tracker(&r, what, alloc == PYB_ALLOC_UNTRACKED && fault_probability > 0);
    rig_destroy(&r);
    return tot.stale_reads + stale_cached;
}

static void part_race(uint64_t ops)
{
    uint64_t unpatched = 0;
    for (int k = 0; k < 2; k++)
        unpatched += race_one(NONE, PYB_ALLOC_HIJACK, 0.0, PYB_CHECK_AFTER, ops, 1 + (uint64_t)k, 0);
    printf("  race none: %llu stale reads + stale cached blocks (not asserted: timing)\n",
           (unsigned long long)unpatched);
    for (int sync = 0; sync < 3; sync++) {
        for (int alloc = 0; alloc < 3; alloc++) {
            /* Untracked + failures reopens the race by design: run it (sanitizers), promise nothing. */
            race_one(sync, alloc, 0.0, PYB_CHECK_AFTER, ops, 11, 1);
            race_one(sync, alloc, 0.3, PYB_CHECK_AFTER, ops, 12, alloc != PYB_ALLOC_UNTRACKED);
        }
        race_one(sync, PYB_ALLOC_HIJACK, 0.0, PYB_CHECK_ENTRY, ops, 13, 0);
        race_one(sync, PYB_ALLOC_HIJACK, 0.0, PYB_CHECK_MISS, ops, 14, 1);
    }
}

static void fio_one(int sync, int alloc, double fault_probability, uint64_t ops, uint64_t seed)
{
    rig r;
    char what[96];
    snprintf(what, sizeof(what), "fio %s/%s p=%.2f", sync_name(sync), ALLOC[alloc], fault_probability);
    /* 32 MiB working set in 64 KiB chunks: reads land both inside and outside write windows. */
    rig_make(&r, sync, alloc, fault_probability, seed, 32 * MiB, 64 * KiB, PYB_CHECK_AFTER, 0);
    pyb_fio_config cfg = {2, ops, 0.0, 70, 1, 32, 8, seed, 0, 0.0};
    pyb_workload_result res[2];
    int rc = pyb_fio_run(r.d, &cfg, res);
    CHECK(rc == 0, "%s: rc %d", what, rc);
    pyb_cd_stats tot;
    uint64_t n_ops;
    sum_stats(res, 2, &tot, &n_ops);
    uint64_t stale_cached = pyb_cd_stale_cached_blocks(r.d);
    CHECK(n_ops == 2 * ops, "%s: ops %llu", what, (unsigned long long)n_ops);
    int promise = sync != NONE && !(alloc == PYB_ALLOC_UNTRACKED && fault_probability > 0);
    if (promise)
        CHECK(tot.stale_reads == 0 && stale_cached == 0, "%s: %llu stale reads, %llu stale cached blocks", what,
              (unsigned long long)tot.stale_reads, (unsigned long long)stale_cached);
    if (sync != NONE)
        CHECK(tot.read_bypasses > 0, "%s: no read bypassed", what);
    check_quiescent_tracker(&r, what, alloc == PYB_ALLOC_UNTRACKED && fault_probability > 0);
    rig_destroy(&r);
}

static void part_fio(uint64_t ops)
{
    fio_one(NONE, PYB_ALLOC_HIJACK, 0.0, ops, 21);
    for (int sync = 0; sync < 3; sync++)
        for (int alloc = 0; alloc < 3; alloc++) {
            fio_one(sync, alloc, 0.0, ops, 22);
            fio_one(sync, alloc, 0.25, ops, 23);
        }
}

/* ---- leak ---------------------------------------------------------------------------------------- */

static void part_leak(uint64_t ops, uint64_t rounds)
{
    for (uint64_t k = 0; k < rounds; k++) {
        int sync = (int)(k % 3), alloc = (int)((k / 3) % 2) + PYB_ALLOC_HIJACK; /* hijack, pool */
        race_one(sync, alloc, 0.3, PYB_CHECK_AFTER, ops, 100 + k, 1);
        fio_one(sync, alloc, 0.3, ops, 200 + k);
        /* A long-lived tracker shared by several devices in turn (the fio bench's pattern), with
         * pages allocated, hijacked, taken from the pool and returned over and over. */
        rig r;
        rig_make(&r, sync, alloc, 0.3, 300 + k, 8 * MiB, 4 * KiB, PYB_CHECK_AFTER, 0);
        for (int i = 0; i < 4; i++) {
            pyb_fio_config cfg = {2, ops / 4 + 1, 0.0, 50, 1, 8, 16, 400 + k * 4 + (uint64_t)i, 0, 0.0};
            pyb_workload_result res[2];
            pyb_cd_reset_cache(r.d);
            CHECK(pyb_fio_run(r.d, &cfg, res) == 0, "leak fio");
            check_quiescent_tracker(&r, "leak long-lived tracker", 0);
        }
        rig_destroy(&r);
        explored += explore(sync, PYB_CHECK_AFTER, alloc, 1 + k % 2, 1, 2).schedules;
    }
}

/* ------------------------------------------------------------------------------------------------ */

static int wanted(const char *parts, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = parts; (p = strstr(p, name)) != NULL; p += n)
        if ((p == parts || p[-1] == ',') && (p[n] == ',' || p[n] == 0))
            return 1;
    return 0;
}

int main(int argc, char **argv)
{
    uint64_t ops = argc > 1 ? strtoull(argv[1], NULL, 10) : 2000;
    uint64_t rounds = argc > 2 ? strtoull(argv[2], NULL, 10) : 6;
    const char *parts = argc > 3 ? argv[3] : "unit,explore,ordering,race,fio";
    if (!ops) {
        fprintf(stderr, "ops must be > 0\n");
        return 2;
    }
    pyb_cd_test_late_increment = LATE_DEFAULT;
    struct {
        const char *name;
        int kind;
    } order[] = {{"unit", 0}, {"explore", 1}, {"ordering", 2}, {"race", 3}, {"fio", 4}, {"leak", 5}};
    for (size_t i = 0; i < sizeof(order) / sizeof(order[0]); i++) {
        if (!wanted(parts, order[i].name))
            continue;
        int before = failures;
        double t0 = now_s();
        switch (order[i].kind) {
        case 0: part_unit(); break;
        case 1: part_explore(); break;
        case 2: part_ordering(); break;
        case 3: part_race(ops); break;
        case 4: part_fio(ops); break;
        default: part_leak(ops, rounds); break;
        }
        printf("test_cachedev: %-8s %s in %.2f s\n", order[i].name, failures == before ? "ok" : "FAILED",
               now_s() - t0);
        fflush(stdout);
    }
    printf("test_cachedev: %llu schedules explored\n", (unsigned long long)explored);
    if (failures) {
        fprintf(stderr, "test_cachedev: %d check(s) failed\n", failures);
        return 1;
    }
    printf("test_cachedev: all checks passed (%llu ops per thread, parts %s)\n", (unsigned long long)ops, parts);
    return 0;
}
