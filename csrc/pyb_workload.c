/* pyb_workload.c - see pyb_workload.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "pyb_workload.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Operations between clock reads, stop checks and folds of the statistics (which also unpin the
 * tracker context, so that a reclaim is never held off for long). */
#define CLOCK_EVERY 256
/* Longest single wait of a race completer for a write's delay, between looks at the stop flag. */
#define DELAY_SLICE_NS 1000000ull
/* Ends a fio completer makes before it frees their slots. */
#define POP_BATCH 32

typedef struct wl_state wl_state;

/* One submitting thread and, if it writes, its completion thread and the ring between them. */
typedef struct job {
    pyb_ring ring;
    wl_state *s;
    uint32_t index;
    int writes;     /* has a ring and a completer */
} job;

/* A race writer's ring entry: the write and when its data lands. */
typedef struct race_entry {
    pyb_cd_write w;
    uint64_t due_ns;
} race_entry;

/* The run's private state: read-only during the run except each job's ring and result slot. */
struct wl_state {
    pyb_cachedev *d;
    pyb_race_config race;
    pyb_fio_config fio;
    pyb_run *run;
    pyb_workload_result *out;
    uint32_t n_jobs;
    job *jobs;
};

static inline int time_up(uint64_t i, uint64_t ops, uint64_t deadline, const pyb_run *run)
{
    if (ops && i >= ops)
        return 1;
    if (i % CLOCK_EVERY)
        return 0;
    return pyb_run_stopped(run) || (deadline != UINT64_MAX && pyb_now_ns() >= deadline);
}

/* A tracker call that failed (a patch's: pyb_cd_error) stops every submitter at its next operation;
 * the completers then drain what is in flight. */

/* Add the context's statistics to r->stats and fold them into the device. */
static void fold(pyb_cachedev *d, pyb_cd_ctx *c, pyb_workload_result *r)
{
    uint64_t *dst = (uint64_t *)&r->stats, *src = (uint64_t *)&c->stats;
    for (size_t i = 0; i < sizeof(pyb_cd_stats) / sizeof(uint64_t); i++)
        dst[i] += src[i];
    pyb_cd_ctx_done(d, c);
}

typedef struct ctx_ref {
    pyb_cachedev *d;
    pyb_cd_ctx *ctx;
} ctx_ref;

static void unpin(void *arg)
{
    ctx_ref *c = arg;
    if (pyb_cd_tracker(c->d))
        pyb_tracker_ctx_unpin(pyb_cd_tracker(c->d), &c->ctx->tctx);
}

/* A job's write START: the cached device's START with the tracker start bounded by the driver. */
typedef struct job_start {
    job *j;
    pyb_driver_waits *waits;
} job_start;

static int bounded_start(void *arg, pyb_tracker *t, pyb_ctx *tctx, uint64_t off, uint64_t len)
{
    job_start *js = arg;
    return pyb_driver_start_bounded(t, tctx, js->j->s->run, &js->j->ring, js->j->index, off, len, js->waits);
}

/* START the write; 0, or -1 if it was given up (none of its other steps may then run). */
static int write_start(job *j, pyb_cd_ctx *ctx, pyb_cd_write *w, pyb_driver_waits *waits)
{
    job_start js = {j, waits};
    return pyb_cd_write_start_with(j->s->d, ctx, w, bounded_start, &js) < 0 ? -1 : 0;
}

/* The kind of a thread's n-th write (0-based) and, for a writethrough write, its cache allocation:
 * drawn only for writethrough writes, so that a bypass-only run's random stream is unchanged. */
static void write_kind(pyb_cd_write *w, int kind, double fail_p, uint64_t n, pyb_rng *rng)
{
    if (kind == 3) { /* discards: the bypass branch (pyb_cachedev.h, PYB_WK_DISCARD) */
        w->kind = PYB_WK_DISCARD;
        return;
    }
    if (kind == 0 || (kind == 2 && n % 2 == 0)) /* mixed: writes 1, 3, ... (n = 0, 2, ...) bypass */
        return;
    w->kind = PYB_WK_WRITETHROUGH;
    if (fail_p > 0)
        w->alloc = pyb_rng_below(rng, 1ull << 53) < (uint64_t)(fail_p * (double)(1ull << 53)) ? PYB_CD_ALLOC_FAIL
                                                                                               : PYB_CD_ALLOC_OK;
    else
        w->alloc = PYB_CD_ALLOC_OK;
}

/* Sample the writes in flight of a job (every CLOCK_EVERY operations). */
static void sample_inflight(job *j, pyb_workload_result *r)
{
    j->ring.head_seen = pyb_load(&j->ring.head, PYB_ACQUIRE);
    r->inflight_sum += j->ring.pushed - j->ring.head_seen;
    r->inflight_samples++;
}

/* The submitter's fields of its result slot (the completer writes completion_cpu_ns). */
static void publish(job *j, const pyb_workload_result *r, const pyb_driver_waits *waits, uint64_t t0, uint64_t c0)
{
    pyb_workload_result *o = &j->s->out[j->index];
    o->ops = r->ops;
    o->reads = r->reads;
    o->writes = r->writes;
    o->reclaimed = r->reclaimed;
    o->blocked_writes = waits->starts;
    o->blocked_ns = waits->ns;
    o->inflight_sum = r->inflight_sum;
    o->inflight_samples = r->inflight_samples;
    o->stats = r->stats;
    o->elapsed_ns = pyb_now_ns() - t0;
    o->cpu_ns = pyb_thread_cpu_ns() - c0;
}

/* ------------------------------------------------------------------------------------------------ */
/* Race stress                                                                                        */

static void *race_main(void *arg)
{
    job *j = arg;
    const pyb_race_config *cfg = &j->s->race;
    pyb_cachedev *d = j->s->d;
    pyb_run *run = j->s->run;
    pyb_workload_result r = {0};
    pyb_driver_waits waits = {0, 0};
    pyb_cd_ctx ctx;
    ctx_ref cref = {d, &ctx};
    pyb_cd_read rd;
    pyb_rng rng;
    pyb_rng_seed(&rng, cfg->seed * 1000003u + j->index);
    pyb_cd_ctx_init(d, &ctx);
    const uint64_t delay = pyb_cd_write_delay_ns(d);

    uint64_t t0 = pyb_now_ns(), c0 = pyb_thread_cpu_ns();
    uint64_t deadline = cfg->seconds > 0 ? t0 + (uint64_t)(cfg->seconds * 1e9) : UINT64_MAX;

    for (uint64_t i = 0; !time_up(i, cfg->ops, deadline, run) && !pyb_cd_error(d); i++) {
        if (j->writes) {
            if (!pyb_ring_has_room(&j->ring) && pyb_ring_wait_room(&j->ring, run, unpin, &cref) < 0)
                break;
            uint64_t n = 1 + pyb_rng_below(&rng, cfg->max_write_blocks);
            uint64_t b = cfg->region_blk + pyb_rng_below(&rng, cfg->region_blocks - n + 1);
            race_entry *e = pyb_ring_next(&j->ring);
            pyb_cd_write_init(&e->w, b, n);
            write_kind(&e->w, cfg->writes_kind, cfg->cache_alloc_fail_p, r.writes, &rng);
            if (write_start(j, &ctx, &e->w, &waits) < 0)
                break;
            pyb_cd_write_submit(d, &ctx, &e->w); /* INVALIDATE (none if the device invalidates after-write) */
            e->due_ns = pyb_now_ns() + delay;
            pyb_ring_push(&j->ring);
            r.writes++;
            if (cfg->reclaim_every && j->index == 0 && r.writes % cfg->reclaim_every == 0 && pyb_cd_tracker(d)) {
                fold(d, &ctx, &r);
                r.reclaimed += pyb_tracker_reclaim(pyb_cd_tracker(d));
            }
        } else {
            uint64_t b = cfg->region_blk + pyb_rng_below(&rng, cfg->region_blocks - cfg->read_blocks + 1);
            pyb_cd_read_run(d, &ctx, &rd, b, cfg->read_blocks);
            r.reads++;
        }
        r.ops++;
        if ((i % CLOCK_EVERY) == CLOCK_EVERY - 1) {
            fold(d, &ctx, &r);
            if (j->writes)
                sample_inflight(j, &r);
        }
    }
    if (j->writes)
        pyb_ring_set_state(&j->ring, PYB_RING_DONE);
    fold(d, &ctx, &r);
    publish(j, &r, &waits, t0, c0);
    return NULL;
}

/* A race writer's completion thread: each write lands and ends once its delay has passed (at once
 * when the run is stopping: the order of LAND and END is what matters, not the window). */
static void *race_completer(void *arg)
{
    job *j = arg;
    pyb_cachedev *d = j->s->d;
    pyb_run *run = j->s->run;
    pyb_cd_ctx ctx;
    ctx_ref cref = {d, &ctx};
    pyb_cd_ctx_init(d, &ctx);
    const int mode = pyb_cd_write_delay_mode(d);
    uint64_t c0 = pyb_thread_cpu_ns(), ends = 0;
    while (pyb_ring_await(&j->ring, run, unpin, &cref)) {
        race_entry *e = pyb_ring_oldest(&j->ring);
        uint64_t now;
        while ((now = pyb_now_ns()) < e->due_ns && !pyb_run_stopped(run)) {
            uint64_t left = e->due_ns - now;
            pyb_cd_delay(mode, left < DELAY_SLICE_NS ? left : DELAY_SLICE_NS);
        }
        while (e->w.step != PYB_W_DONE)
            pyb_cd_write_step(d, &ctx, &e->w); /* LAND, END (after-write: LAND, INVALIDATE, END) */
        pyb_ring_pop(&j->ring, 1);
        if (++ends % CLOCK_EVERY == 0)
            pyb_cd_ctx_done(d, &ctx);
    }
    pyb_cd_ctx_done(d, &ctx);
    j->s->out[j->index].completion_cpu_ns = pyb_thread_cpu_ns() - c0;
    return NULL;
}

/* ------------------------------------------------------------------------------------------------ */
/* fio-like mix                                                                                       */

static void *fio_main(void *arg)
{
    job *j = arg;
    const pyb_fio_config *cfg = &j->s->fio;
    pyb_cachedev *d = j->s->d;
    pyb_run *run = j->s->run;
    pyb_workload_result r = {0};
    pyb_driver_waits waits = {0, 0};
    pyb_cd_ctx ctx;
    ctx_ref cref = {d, &ctx};
    pyb_cd_read rd;
    pyb_rng rng;
    pyb_rng_seed(&rng, cfg->seed * 1000003u + j->index);
    pyb_cd_ctx_init(d, &ctx);
    uint64_t n_blocks = pyb_cd_n_blocks(d);
    uint64_t read_slots = n_blocks / cfg->read_blocks, write_slots = n_blocks / cfg->write_blocks;

    uint64_t t0 = pyb_now_ns(), c0 = pyb_thread_cpu_ns();
    uint64_t deadline = cfg->seconds > 0 ? t0 + (uint64_t)(cfg->seconds * 1e9) : UINT64_MAX;

    for (uint64_t i = 0; !time_up(i, cfg->ops, deadline, run) && !pyb_cd_error(d); i++) {
        if (pyb_rng_below(&rng, 100) < cfg->read_percent) {
            pyb_cd_read_run(d, &ctx, &rd, pyb_rng_below(&rng, read_slots) * cfg->read_blocks, cfg->read_blocks);
            r.reads++;
        } else {
            if (!pyb_ring_has_room(&j->ring) && pyb_ring_wait_room(&j->ring, run, unpin, &cref) < 0)
                break;
            pyb_cd_write *nw = pyb_ring_next(&j->ring);
            pyb_cd_write_init(nw, pyb_rng_below(&rng, write_slots) * cfg->write_blocks, cfg->write_blocks);
            write_kind(nw, cfg->writes_kind, cfg->cache_alloc_fail_p, r.writes, &rng);
            if (write_start(j, &ctx, nw, &waits) < 0)
                break;
            pyb_cd_write_submit(d, &ctx, nw); /* INVALIDATE (none if the device invalidates after-write) */
            pyb_ring_push(&j->ring);
            r.writes++;
        }
        r.ops++;
        if ((i % CLOCK_EVERY) == CLOCK_EVERY - 1) {
            fold(d, &ctx, &r);
            sample_inflight(j, &r);
        }
    }
    pyb_ring_set_state(&j->ring, PYB_RING_DONE);
    fold(d, &ctx, &r);
    publish(j, &r, &waits, t0, c0);
    return NULL;
}

/* A fio job's completion thread: the oldest writes land and end so that about `inflight` stay in
 * flight (all of them when the job is blocked, done or stopped). */
static void *fio_completer(void *arg)
{
    job *j = arg;
    pyb_cachedev *d = j->s->d;
    pyb_cd_ctx ctx;
    ctx_ref cref = {d, &ctx};
    pyb_cd_ctx_init(d, &ctx);
    uint64_t c0 = pyb_thread_cpu_ns(), ends = 0, n;
    while ((n = pyb_ring_await(&j->ring, j->s->run, unpin, &cref)) != 0) {
        while (n) {
            uint64_t k = n < POP_BATCH ? n : POP_BATCH;
            for (uint64_t i = 0; i < k; i++) {
                pyb_cd_write *w = pyb_ring_entry(&j->ring, j->ring.popped + i);
                while (w->step != PYB_W_DONE)
                    pyb_cd_write_step(d, &ctx, w); /* LAND, END (after-write: LAND, INVALIDATE, END) */
            }
            pyb_ring_pop(&j->ring, k);
            n -= k;
            if ((ends + k) / CLOCK_EVERY != ends / CLOCK_EVERY)
                pyb_cd_ctx_done(d, &ctx);
            ends += k;
        }
    }
    pyb_cd_ctx_done(d, &ctx);
    j->s->out[j->index].completion_cpu_ns = pyb_thread_cpu_ns() - c0;
    return NULL;
}

/* ------------------------------------------------------------------------------------------------ */
/* Runs                                                                                               */

static void wl_free(void *arg)
{
    wl_state *s = arg;
    if (s->jobs)
        for (uint32_t i = 0; i < s->n_jobs; i++)
            pyb_ring_destroy(&s->jobs[i].ring);
    free(s->jobs);
    free(s);
}

/* Start n_jobs submitters, the first n_writers of them with a ring (elem bytes, low, high, limit) and
 * a completer. */
static int begin(wl_state *s, uint32_t n_jobs, uint32_t n_writers, void *(*submit)(void *), void *(*complete)(void *),
                 size_t elem, uint64_t low, uint64_t high, uint64_t limit, uint64_t wait_timeout_ns,
                 pyb_run **out_run)
{
    *out_run = NULL;
    s->n_jobs = n_jobs;
    size_t bytes = sizeof(job) * n_jobs;
    s->jobs = aligned_alloc(PYB_CACHELINE, (bytes + PYB_CACHELINE - 1) / PYB_CACHELINE * PYB_CACHELINE);
    if (!s->jobs) {
        wl_free(s);
        return -ENOMEM;
    }
    memset(s->jobs, 0, bytes);
    for (uint32_t i = 0; i < n_jobs; i++) {
        s->jobs[i].s = s;
        s->jobs[i].index = i;
        s->jobs[i].writes = i < n_writers;
        if (i < n_writers && pyb_ring_init(&s->jobs[i].ring, elem, low, high, limit) != 0) {
            wl_free(s);
            return -ENOMEM;
        }
        s->out[i] = (pyb_workload_result){0};
    }
    pyb_run *r;
    if (pyb_run_create(n_jobs + n_writers, wait_timeout_ns, &r) != 0) {
        wl_free(s);
        return -ENOMEM;
    }
    s->run = r;
    r->priv = s;
    r->free_priv = wl_free;
    uint32_t k = 0;
    for (uint32_t i = 0; i < n_jobs; i++) {
        if (pyb_run_launch(r, k++, submit, &s->jobs[i]) != 0)
            break;
        if (i < n_writers && pyb_run_launch(r, k++, complete, &s->jobs[i]) != 0)
            break;
    }
    pyb_run_go(r);
    if (r->launch_failed)
        return pyb_run_finish(r, NULL);
    *out_run = r;
    return 0;
}

int pyb_race_begin(pyb_cachedev *d, const pyb_race_config *cfg, uint64_t wait_timeout_ns,
                   pyb_workload_result *out, pyb_run **run)
{
    *run = NULL;
    if (cfg->threads < 2 || cfg->threads > PYB_WORKLOAD_MAX_THREADS || !cfg->writers ||
        cfg->writers >= cfg->threads)
        return -EINVAL;
    if (!cfg->ops && !(cfg->seconds > 0))
        return -EINVAL;
    if (!cfg->region_blocks || cfg->region_blk + cfg->region_blocks > pyb_cd_n_blocks(d) ||
        cfg->region_blk + cfg->region_blocks < cfg->region_blk)
        return -EINVAL;
    if (!cfg->max_write_blocks || cfg->max_write_blocks > cfg->region_blocks)
        return -EINVAL;
    if (!cfg->read_blocks || cfg->read_blocks > cfg->region_blocks || cfg->read_blocks > PYB_CD_MAX_READ_BLOCKS)
        return -EINVAL;
    if (cfg->writes_kind < 0 || cfg->writes_kind > 3 || !(cfg->cache_alloc_fail_p >= 0 && cfg->cache_alloc_fail_p <= 1))
        return -EINVAL;
    wl_state *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->d = d;
    s->race = *cfg;
    s->out = out;
    /* One write in flight per writer: it lands and ends when due, whatever the count. */
    return begin(s, cfg->threads, cfg->writers, race_main, race_completer, sizeof(race_entry), 0, 0, 1,
                 wait_timeout_ns, run);
}

int pyb_fio_begin(pyb_cachedev *d, const pyb_fio_config *cfg, uint64_t wait_timeout_ns,
                  pyb_workload_result *out, pyb_run **run)
{
    *run = NULL;
    uint64_t n = pyb_cd_n_blocks(d);
    if (!cfg->jobs || cfg->jobs > PYB_WORKLOAD_MAX_THREADS || cfg->read_percent > 100)
        return -EINVAL;
    if (!cfg->ops && !(cfg->seconds > 0))
        return -EINVAL;
    if (!cfg->read_blocks || cfg->read_blocks > PYB_CD_MAX_READ_BLOCKS || cfg->read_blocks > n)
        return -EINVAL;
    if (!cfg->write_blocks || cfg->write_blocks > n)
        return -EINVAL;
    if (!cfg->inflight || cfg->inflight > PYB_WORKLOAD_MAX_INFLIGHT)
        return -EINVAL;
    if (cfg->writes_kind < 0 || cfg->writes_kind > 3 || !(cfg->cache_alloc_fail_p >= 0 && cfg->cache_alloc_fail_p <= 1))
        return -EINVAL;
    wl_state *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->d = d;
    s->fio = *cfg;
    s->out = out;
    uint64_t band = pyb_ring_band(cfg->inflight);
    return begin(s, cfg->jobs, cfg->jobs, fio_main, fio_completer, sizeof(pyb_cd_write), cfg->inflight - band,
                 cfg->inflight, cfg->inflight + band, wait_timeout_ns, run);
}

int pyb_race_run(pyb_cachedev *d, const pyb_race_config *cfg, pyb_workload_result *out)
{
    pyb_run *run;
    int rc = pyb_race_begin(d, cfg, 0, out, &run);
    return rc ? rc : pyb_run_finish(run, NULL);
}

int pyb_fio_run(pyb_cachedev *d, const pyb_fio_config *cfg, pyb_workload_result *out)
{
    pyb_run *run;
    int rc = pyb_fio_begin(d, cfg, 0, out, &run);
    return rc ? rc : pyb_run_finish(run, NULL);
}
