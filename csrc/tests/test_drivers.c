/*
 * test_drivers.c - the native drivers (pyb_stress.c, pyb_workload.c) and their run control
 * (pyb_driver.c) tested on their own, in C, for the sanitizer builds (ASan+UBSan, TSan):
 *   - 17 threads x depth 4096 on one u16 chunk under overflow "wait" (the stress and the fio mix):
 *     completes, every count back to zero, starts == ends;
 *   - a counter held at its maximum by the test: the stress's starts time out (-ETIMEDOUT, the
 *     chunk recorded, waited for room in a counter), the partial starts are undone; the same for
 *     the race stress;
 *   - a start that waits for a mempool page no one frees (every allocation failing): times out
 *     with the page's first chunk recorded as a page wait, its first page undone, having tried the
 *     allocator at mempool's retry cadence (not in a burst); pyb_run_stop ends the same wait;
 *     the race stress's writes the same (the cached device's START through the same bounded start);
 *   - the ring's wakes: a sleeping completer is woken once per band, on the push that crosses
 *     `high`, not on every push after it;
 *   - the submitting thread ending its own writes (inline_ends) with more writes in flight than room
 *     on its counter: times out, where completion threads complete;
 *   - pyb_run_stop during a long run: -EINTR, nothing left counted.
 *
 * Usage: test_drivers [ops_per_thread]
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "../pyb_cachedev.h"
#include "../pyb_driver.h"
#include "../pyb_stress.h"
#include "../pyb_tracker.h"
#include "../pyb_workload.h"
#include "check.h"

#define MiB (1ull << 20)
#define U16_MAX 65535u
#define MS (1000000ull)

static const char *SYNC[] = {"global", "page", "atomic"};

static pyb_tracker *make(uint64_t size, uint64_t chunk, int sync)
{
    pyb_tracker_config cfg = {.device_size = size, .chunk_size = chunk, .counter_bits = 16, .sync = sync,
                              .overflow = PYB_OVERFLOW_WAIT, .alloc_failure = PYB_ALLOC_HIJACK,
                              .lock_mode = PYB_LOCK_PTHREAD};
    pyb_tracker *t = NULL;
    if (pyb_tracker_create(&cfg, &t) != 0) {
        fprintf(stderr, "pyb_tracker_create failed\n");
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

/* Hold `n` starts of chunk `off` (a tracker context of the test's own, never ended until release). */
static void hold(pyb_tracker *t, uint64_t off, uint64_t n)
{
    pyb_ctx ctx = PYB_CTX_INIT;
    uint64_t resume;
    for (uint64_t i = 0; i < n; i++)
        pyb_tracker_start(t, &ctx, off, 1, 0, &resume);
    pyb_tracker_ctx_done(t, &ctx);
}

static void release(pyb_tracker *t, uint64_t off, uint64_t n)
{
    pyb_ctx ctx = PYB_CTX_INIT;
    for (uint64_t i = 0; i < n; i++)
        pyb_tracker_end(t, &ctx, off, 1);
    pyb_tracker_ctx_done(t, &ctx);
}

static void check_balanced(pyb_tracker *t, const char *what, uint64_t held)
{
    pyb_tracker_stats s;
    pyb_tracker_get_stats(t, &s);
    uint64_t left = sum_counts(t);
    CHECK(left == held && s.starts == s.ends + held && s.underflows == 0, "%s: counts %llu (held %llu) starts %llu "
          "ends %llu underflows %llu", what, (unsigned long long)left, (unsigned long long)held,
          (unsigned long long)s.starts, (unsigned long long)s.ends, (unsigned long long)s.underflows);
}

static void test_stress_17_threads_depth_4096(uint64_t ops)
{
    for (int sync = 0; sync < 3; sync++) {
        pyb_tracker *t = make(MiB, MiB, sync);
        pyb_stress_config cfg = {17, ops, 0.0, 0, MiB, 4096, 4096, 0, 0, 1};
        pyb_stress_result res[17];
        pyb_stress_options opt = {0};
        opt.wait_timeout_ns = 60000 * MS;
        int rc = pyb_stress_run_ex(t, &cfg, &opt, res);
        CHECK(rc == 0, "stress 17x4096 %s: rc %d", SYNC[sync], rc);
        for (int i = 0; i < 17; i++)
            CHECK(res[i].starts == ops && res[i].ends == ops, "stress 17x4096 %s thread %d: starts %llu ends %llu",
                  SYNC[sync], i, (unsigned long long)res[i].starts, (unsigned long long)res[i].ends);
        check_balanced(t, "stress 17x4096", 0);
        pyb_tracker_destroy(t);
    }
}

static void test_stress_timeout_rolls_back(void)
{
    for (int sync = 0; sync < 3; sync++) {
        /* chunk 1 held at its maximum; each write covers chunks 0 and 1 */
        pyb_tracker *t = make(2 * MiB, MiB, sync);
        hold(t, MiB, U16_MAX);
        pyb_stress_config cfg = {3, 1000, 0.0, 0, 2 * MiB, 2 * MiB, 4, 0, 0, 2};
        pyb_stress_result res[3];
        pyb_stress_options opt = {0};
        opt.wait_timeout_ns = 50 * MS;
        pyb_run *run;
        pyb_run_timeout to = {0, 0, 0, -1};
        int rc = pyb_stress_begin(t, &cfg, &opt, res, &run);
        CHECK(rc == 0, "timeout %s: begin %d", SYNC[sync], rc);
        if (rc == 0)
            rc = pyb_run_finish(run, &to);
        CHECK(rc == -ETIMEDOUT && to.offset == MiB && to.waited_ns >= 50 * MS && to.wait_page == 0,
              "timeout %s: rc %d offset %llu waited %llu wait_page %d", SYNC[sync], rc,
              (unsigned long long)to.offset, (unsigned long long)to.waited_ns, to.wait_page);
        CHECK(pyb_tracker_count(t, 0) == 0, "timeout %s: chunk 0 left at %llu", SYNC[sync],
              (unsigned long long)pyb_tracker_count(t, 0));
        check_balanced(t, "timeout", U16_MAX);
        release(t, MiB, U16_MAX);
        check_balanced(t, "timeout released", 0);
        pyb_tracker_destroy(t);
    }
}

static void test_inline_ends_hold_their_own_ends_hostage(void)
{
    for (int inline_ends = 0; inline_ends <= 1; inline_ends++) {
        pyb_tracker *t = make(MiB, MiB, PYB_SYNC_PAGE);
        hold(t, 0, U16_MAX - 100);
        pyb_stress_config cfg = {1, 3000, 0.0, 0, MiB, 4096, 4096, 0, 0, 3};
        pyb_stress_result res[1];
        pyb_stress_options opt = {0};
        opt.inline_ends = inline_ends;
        opt.wait_timeout_ns = (inline_ends ? 50 : 60000) * MS;
        int rc = pyb_stress_run_ex(t, &cfg, &opt, res);
        if (inline_ends)
            CHECK(rc == -ETIMEDOUT, "inline ends: rc %d, expected the hostage to time out", rc);
        else
            CHECK(rc == 0 && res[0].blocked_starts >= 1 && res[0].ends == 3000,
                  "completion thread: rc %d blocked %llu ends %llu", rc, (unsigned long long)res[0].blocked_starts,
                  (unsigned long long)res[0].ends);
        check_balanced(t, inline_ends ? "hostage inline" : "hostage completer", U16_MAX - 100);
        release(t, 0, U16_MAX - 100);
        pyb_tracker_destroy(t);
    }
}

/* The do-nothing tracker: 4 threads (with and without completion threads) run the loop on one shared
 * counter; the tracker passed only sizes the device and sees no call; a reclaim is refused with it; pinned
 * threads complete, and pinning without a CPU count is refused. */
static void test_null_tracker_leaves_the_tracker_untouched(uint64_t ops)
{
    for (int inline_ends = 0; inline_ends <= 1; inline_ends++) {
        pyb_tracker *t = make(64 * MiB, MiB, PYB_SYNC_PAGE);
        pyb_stress_config cfg = {4, ops, 0.0, 0, 32 * MiB, 4096, 2, 0, 0, 5};
        pyb_stress_result res[4];
        pyb_stress_options opt = {0};
        opt.null_tracker = 1;
        opt.inline_ends = inline_ends;
        int rc = pyb_stress_run_ex(t, &cfg, &opt, res);
        CHECK(rc == 0, "null tracker (inline %d): rc %d", inline_ends, rc);
        for (int i = 0; i < 4; i++)
            CHECK(res[i].starts == ops && res[i].ends == ops && res[i].active_hits == ops,
                  "null tracker (inline %d) thread %d: starts %llu ends %llu hits %llu", inline_ends, i,
                  (unsigned long long)res[i].starts, (unsigned long long)res[i].ends,
                  (unsigned long long)res[i].active_hits);
        pyb_tracker_stats s;
        pyb_tracker_get_stats(t, &s);
        CHECK(s.starts == 0 && s.ends == 0 && s.pages_allocated == 0, "null tracker: the tracker was called "
              "(starts %llu ends %llu pages %llu)", (unsigned long long)s.starts, (unsigned long long)s.ends,
              (unsigned long long)s.pages_allocated);
        cfg.reclaim_every = 8;
        CHECK(pyb_stress_run_ex(t, &cfg, &opt, res) == -EINVAL, "null tracker with reclaim_every accepted");
        /* pinned threads (4 threads on 2 CPUs, two per CPU); pinning needs a CPU count */
        cfg.reclaim_every = 0;
        opt.pin_threads = 1;
        CHECK(pyb_stress_run_ex(t, &cfg, &opt, res) == -EINVAL, "pin_threads without cpus accepted");
        opt.cpus = 2;
        rc = pyb_stress_run_ex(t, &cfg, &opt, res);
        CHECK(rc == 0 && res[3].starts == ops && res[3].ends == ops, "pinned null tracker (inline %d): rc %d",
              inline_ends, rc);
        pyb_tracker_destroy(t);
    }
}

static void test_stop_ends_everything(void)
{
    pyb_tracker *t = make(64 * MiB, 4096, PYB_SYNC_ATOMIC);
    pyb_stress_config cfg = {2, 0, 30.0, 0, 64 * MiB, 8192, 64, 0, 0, 4};
    pyb_stress_result res[2];
    pyb_run *run;
    int rc = pyb_stress_begin(t, &cfg, NULL, res, &run);
    CHECK(rc == 0, "stop: begin %d", rc);
    if (rc == 0) {
        CHECK(pyb_run_wait(run, 50 * MS) == 0, "stop: the 30 s run ended within 50 ms");
        pyb_run_stop(run);
        rc = pyb_run_finish(run, NULL);
        CHECK(rc == -EINTR, "stop: rc %d", rc);
    }
    check_balanced(t, "stop", 0);
    pyb_tracker_destroy(t);
}

/* A mempool tracker of two pages (4 KiB chunks: 8 MiB of device per page) with a one-page reserve and
 * every allocation failing: a write across the page boundary takes the reserve's page for page 0 and
 * then waits for a page for page 1 that nobody frees. */
#define PAGE_BYTES (2048 * 4096ull)
static pyb_tracker *make_mempool(int sync, pyb_fault *f)
{
    pyb_fault_init(f, 1.0, 1, -1, 0, 7);
    pyb_tracker_config cfg = {.device_size = 2 * PAGE_BYTES, .chunk_size = 4096, .counter_bits = 16, .sync = sync,
                              .overflow = PYB_OVERFLOW_WAIT, .alloc_failure = PYB_ALLOC_MEMPOOL, .pool_pages = 1,
                              .fault = f};
    pyb_tracker *t = NULL;
    if (pyb_tracker_create(&cfg, &t) != 0) {
        fprintf(stderr, "pyb_tracker_create failed\n");
        exit(2);
    }
    return t;
}

static void test_mempool_page_wait_times_out_at_the_page(void)
{
    for (int sync = 0; sync < 3; sync++) {
        pyb_fault f;
        pyb_tracker *t = make_mempool(sync, &f);
        pyb_stress_config cfg = {1, 10, 0.0, PAGE_BYTES - 4096, 8192, 8192, 4, 0, 0, 8};
        pyb_stress_result res[1];
        pyb_stress_options opt = {0};
        opt.wait_timeout_ns = 30 * MS;
        pyb_run *run;
        pyb_run_timeout to = {0, 0, 0, -1};
        int rc = pyb_stress_begin(t, &cfg, &opt, res, &run);
        CHECK(rc == 0, "mempool timeout %s: begin %d", SYNC[sync], rc);
        if (rc == 0)
            rc = pyb_run_finish(run, &to);
        CHECK(rc == -ETIMEDOUT && to.offset == PAGE_BYTES && to.wait_page == 1 && to.waited_ns >= 30 * MS,
              "mempool timeout %s: rc %d offset %llu wait_page %d waited %llu", SYNC[sync], rc,
              (unsigned long long)to.offset, to.wait_page, (unsigned long long)to.waited_ns);
        check_balanced(t, "mempool timeout", 0);
        pyb_tracker_stats s;
        pyb_tracker_get_stats(t, &s);
        CHECK(s.mempool_waits == 1 && s.overflow_waits == 0 && res[0].blocked_starts == 1,
              "mempool timeout %s: mempool_waits %llu overflow_waits %llu blocked %llu", SYNC[sync],
              (unsigned long long)s.mempool_waits, (unsigned long long)s.overflow_waits,
              (unsigned long long)res[0].blocked_starts);
        /* Allocator attempts: two for each page before any wait (mempool_alloc's two tries), then at
         * most one per whole round (PYB_MEMPOOL_RETRY_NS) of waiting; a slice of the driver's wait
         * that ends inside a round adds none (the resume sleeps the rest of that round), and the
         * bound's two per slice are slack. Sleeps only overrun, so this bounds the attempts whatever
         * the machine's load; a driver that polls the allocator (spins, yields, short sleeps) makes
         * far more. */
        uint64_t waited = to.waited_ns, bound = 4 + waited / PYB_MEMPOOL_RETRY_NS +
                                              2 * (waited / PYB_DRIVER_WAIT_SLICE_NS + 1);
        CHECK(pyb_fault_injected(&f) <= bound && s.alloc_failures == pyb_fault_injected(&f),
              "mempool timeout %s: %llu allocator attempts failed in %.1f ms of waiting (at most %llu)",
              SYNC[sync], (unsigned long long)pyb_fault_injected(&f), waited / 1e6, (unsigned long long)bound);
        pyb_tracker_destroy(t);
    }
}

static void test_stop_ends_a_mempool_page_wait(void)
{
    pyb_fault f;
    pyb_tracker *t = make_mempool(PYB_SYNC_PAGE, &f);
    pyb_stress_config cfg = {1, 10, 0.0, PAGE_BYTES - 4096, 8192, 8192, 4, 0, 0, 9};
    pyb_stress_result res[1];
    pyb_run *run;
    int rc = pyb_stress_begin(t, &cfg, NULL, res, &run); /* no wait_timeout: only a stop ends the wait */
    CHECK(rc == 0, "mempool stop: begin %d", rc);
    if (rc == 0) {
        CHECK(pyb_run_wait(run, 30 * MS) == 0, "mempool stop: the unbounded wait ended by itself");
        pyb_run_stop(run);
        rc = pyb_run_finish(run, NULL);
        CHECK(rc == -EINTR && res[0].blocked_starts == 1 && res[0].starts == 0,
              "mempool stop: rc %d blocked %llu starts %llu", rc, (unsigned long long)res[0].blocked_starts,
              (unsigned long long)res[0].starts);
    }
    check_balanced(t, "mempool stop", 0);
    pyb_tracker_destroy(t);
}

/* The submitter's side of a ring driven by hand, its completer "asleep" throughout (every wake a real
 * one would need is then made): a push wakes it exactly when it brings the ring past `high`. */
static void test_ring_wakes_the_completer_once_per_band(void)
{
    const uint64_t d = 32, band = pyb_ring_band(d), rounds = 50;
    pyb_ring r;
    CHECK(pyb_ring_init(&r, sizeof(uint64_t), d - band, d, d + band) == 0, "ring: init");
    pyb_store(&r.sleeping, 1, PYB_RELAXED);
    uint64_t crossings = 0, wrong = 0;
    for (uint64_t round = 0; round < rounds; round++) {
        while (r.pushed - r.popped <= r.high) {
            CHECK(pyb_ring_has_room(&r), "ring: no room at %llu entries", (unsigned long long)(r.pushed - r.popped));
            uint64_t before = r.wakes;
            *(uint64_t *)pyb_ring_next(&r) = r.pushed;
            pyb_ring_push(&r);
            int crossed = r.pushed - r.popped == r.high + 1;
            crossings += crossed;
            wrong += (r.wakes - before) != (uint64_t)crossed;
        }
        pyb_ring_pop(&r, r.pushed - r.popped - r.low); /* the completer ends the oldest down to low */
    }
    CHECK(crossings == rounds && r.wakes == rounds && wrong == 0,
          "ring: %llu wakes for %llu crossings of high (%llu pushes woke wrongly)", (unsigned long long)r.wakes,
          (unsigned long long)crossings, (unsigned long long)wrong);
    pyb_ring_destroy(&r);
}

static pyb_cachedev *device(pyb_tracker *t, uint64_t size, uint32_t block)
{
    pyb_cd_config cfg = {.device_size = size, .block_size = block, .region_blocks = 64, .tracker = t,
                         .check = PYB_CHECK_AFTER, .delay_mode = PYB_DELAY_SPIN, .bounce_copy = 1};
    pyb_cachedev *d = NULL;
    if (pyb_cd_create(&cfg, &d) != 0) {
        fprintf(stderr, "pyb_cd_create failed\n");
        exit(2);
    }
    return d;
}

static void test_fio_17_jobs_inflight_4096(uint64_t ops)
{
    pyb_tracker *t = make(32 * MiB, 32 * MiB, PYB_SYNC_PAGE);
    pyb_cachedev *d = device(t, 32 * MiB, 4096);
    pyb_fio_config cfg = {17, ops, 0.0, 30, 1, 32, 4096, 5, 0, 0.0};
    pyb_workload_result res[17];
    pyb_run *run;
    int rc = pyb_fio_begin(d, &cfg, 60000 * MS, res, &run);
    CHECK(rc == 0, "fio 17x4096: begin %d", rc);
    if (rc == 0)
        rc = pyb_run_finish(run, NULL);
    CHECK(rc == 0, "fio 17x4096: rc %d", rc);
    uint64_t ops_done = 0;
    for (int i = 0; i < 17; i++)
        ops_done += res[i].ops;
    CHECK(ops_done == 17 * ops, "fio 17x4096: ops %llu", (unsigned long long)ops_done);
    check_balanced(t, "fio 17x4096", 0);
    CHECK(pyb_cd_stale_cached_blocks(d) == 0, "fio 17x4096: stale cached blocks");
    pyb_cd_destroy(d);
    pyb_tracker_destroy(t);
}

static void test_race_timeout_rolls_back(void)
{
    pyb_tracker *t = make(4 * 4096, 4096, PYB_SYNC_GLOBAL);
    pyb_cachedev *d = device(t, 4 * 4096, 4096);
    pyb_cd_ctx ctx;
    pyb_cd_ctx_init(d, &ctx);
    pyb_cd_write *held = malloc(sizeof(*held) * U16_MAX);
    for (uint32_t i = 0; i < U16_MAX; i++) {
        pyb_cd_write_init(&held[i], 0, 1);
        pyb_cd_write_step(d, &ctx, &held[i]); /* START: block 0's chunk counted */
    }
    pyb_cd_ctx_done(d, &ctx);
    pyb_race_config cfg = {2, 1, 1000, 0.0, 0, 1, 1, 1, 0, 6, 0, 0.0};
    pyb_workload_result res[2];
    pyb_run *run;
    pyb_run_timeout to = {0, 1, 0, -1};
    int rc = pyb_race_begin(d, &cfg, 50 * MS, res, &run);
    CHECK(rc == 0, "race timeout: begin %d", rc);
    if (rc == 0)
        rc = pyb_run_finish(run, &to);
    CHECK(rc == -ETIMEDOUT && to.offset == 0 && to.wait_page == 0, "race timeout: rc %d offset %llu wait_page %d",
          rc, (unsigned long long)to.offset, to.wait_page);
    check_balanced(t, "race timeout", U16_MAX);
    for (uint32_t i = 0; i < U16_MAX; i++)
        while (held[i].step != PYB_W_DONE)
            pyb_cd_write_step(d, &ctx, &held[i]);
    pyb_cd_ctx_done(d, &ctx);
    free(held);
    check_balanced(t, "race timeout released", 0);
    CHECK(pyb_cd_stale_cached_blocks(d) == 0, "race timeout: stale cached blocks");
    pyb_cd_destroy(d);
    pyb_tracker_destroy(t);
}

/* The race stress's writes (1 or 2 blocks at the end of page 0) on the mempool tracker above: a
 * 2-block write takes the reserve's page for page 0 and waits for one for page 1 that nobody frees
 * (its writer has no other write in flight): the run times out at page 1 as a page wait, the write's
 * page-0 increment undone. */
static void test_race_mempool_page_wait_times_out(void)
{
    pyb_fault f;
    pyb_tracker *t = make_mempool(PYB_SYNC_PAGE, &f);
    pyb_cachedev *d = device(t, 2 * PAGE_BYTES, 4096);
    pyb_race_config cfg = {2, 1, 1000, 0.0, PAGE_BYTES / 4096 - 1, 2, 2, 1, 0, 10, 0, 0.0};
    pyb_workload_result res[2];
    pyb_run *run;
    pyb_run_timeout to = {0, 0, 0, -1};
    int rc = pyb_race_begin(d, &cfg, 30 * MS, res, &run);
    CHECK(rc == 0, "race mempool: begin %d", rc);
    if (rc == 0)
        rc = pyb_run_finish(run, &to);
    CHECK(rc == -ETIMEDOUT && to.offset == PAGE_BYTES && to.wait_page == 1 && res[0].blocked_writes >= 1,
          "race mempool: rc %d offset %llu wait_page %d blocked %llu", rc, (unsigned long long)to.offset, to.wait_page,
          (unsigned long long)res[0].blocked_writes);
    check_balanced(t, "race mempool", 0);
    pyb_tracker_stats s;
    pyb_tracker_get_stats(t, &s);
    CHECK(s.overflow_waits == 0 && s.mempool_waits == res[0].blocked_writes,
          "race mempool: overflow_waits %llu mempool_waits %llu blocked %llu", (unsigned long long)s.overflow_waits,
          (unsigned long long)s.mempool_waits, (unsigned long long)res[0].blocked_writes);
    CHECK(pyb_cd_stale_cached_blocks(d) == 0, "race mempool: stale cached blocks");
    pyb_cd_destroy(d);
    pyb_tracker_destroy(t);
}

int main(int argc, char **argv)
{
    uint64_t ops = argc > 1 ? strtoull(argv[1], NULL, 10) : 4000;
    if (!ops) {
        fprintf(stderr, "ops must be > 0\n");
        return 2;
    }
    test_stress_17_threads_depth_4096(ops);
    test_stress_timeout_rolls_back();
    test_inline_ends_hold_their_own_ends_hostage();
    test_null_tracker_leaves_the_tracker_untouched(ops);
    test_stop_ends_everything();
    test_mempool_page_wait_times_out_at_the_page();
    test_stop_ends_a_mempool_page_wait();
    test_ring_wakes_the_completer_once_per_band();
    test_fio_17_jobs_inflight_4096(ops);
    test_race_timeout_rolls_back();
    test_race_mempool_page_wait_times_out();
    if (failures) {
        fprintf(stderr, "test_drivers: %d check(s) failed\n", failures);
        return 1;
    }
    printf("test_drivers: all checks passed (%llu ops per thread)\n", (unsigned long long)ops);
    return 0;
}
