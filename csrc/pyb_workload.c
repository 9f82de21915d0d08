/* pyb_workload.c - see pyb_workload.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "pyb_workload.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

/* Operations between clock reads and between folding statistics (which also unpins the tracker
 * context, so that a reclaim is never held off for long). */
#define CLOCK_EVERY 256

typedef struct worker {
    pyb_cachedev *d;
    const void *cfg;
    uint32_t index;
    pyb_gate *gate;
    pyb_workload_result *res;
    pyb_cd_ctx ctx; /* owned by the worker thread */
} worker;

/* Start `n` threads on `fn`, open the gate, join them. Returns 0, -EAGAIN or -ENOMEM (a worker
 * returned non-NULL). */
static int run_threads(pyb_cachedev *d, const void *cfg, uint32_t n, void *(*fn)(void *), pyb_workload_result *out)
{
    pthread_t *tids = malloc(sizeof(*tids) * n);
    worker *ws = malloc(sizeof(*ws) * n);
    if (!tids || !ws) {
        free(tids);
        free(ws);
        return -ENOMEM;
    }
    pyb_gate g = PYB_GATE_INIT;
    uint32_t started = 0;
    int rc = 0;
    for (uint32_t i = 0; i < n; i++) {
        out[i] = (pyb_workload_result){0};
        ws[i].d = d;
        ws[i].cfg = cfg;
        ws[i].index = i;
        ws[i].gate = &g;
        ws[i].res = &out[i];
        if (pthread_create(&tids[i], NULL, fn, &ws[i]) != 0) {
            rc = -EAGAIN;
            break;
        }
        started++;
    }
    pyb_gate_open(&g, rc ? -1 : 1);
    for (uint32_t i = 0; i < started; i++) {
        void *ret;
        pthread_join(tids[i], &ret);
        if (ret && !rc)
            rc = -ENOMEM;
    }
    free(tids);
    free(ws);
    return rc;
}

static inline int time_up(uint64_t i, uint64_t ops, uint64_t deadline)
{
    if (ops && i >= ops)
        return 1;
    return (i % CLOCK_EVERY) == 0 && deadline != UINT64_MAX && pyb_now_ns() >= deadline;
}

/* Add the context's statistics to r->stats and fold them into the device. */
static void fold(worker *w, pyb_workload_result *r)
{
    uint64_t *dst = (uint64_t *)&r->stats, *src = (uint64_t *)&w->ctx.stats;
    for (size_t i = 0; i < sizeof(pyb_cd_stats) / sizeof(uint64_t); i++)
        dst[i] += src[i];
    pyb_cd_ctx_done(w->d, &w->ctx);
}

/* ------------------------------------------------------------------------------------------------ */
/* Race stress                                                                                        */

static void *race_main(void *arg)
{
    worker *w = arg;
    const pyb_race_config *cfg = w->cfg;
    pyb_cachedev *d = w->d;
    pyb_workload_result r = {0};
    pyb_cd_read rd;
    pyb_rng rng;
    pyb_rng_seed(&rng, cfg->seed * 1000003u + w->index);
    pyb_cd_ctx_init(d, &w->ctx);
    int writer = w->index < cfg->writers;

    if (pyb_gate_wait(w->gate) < 0)
        return NULL;
    uint64_t t0 = pyb_now_ns(), c0 = pyb_thread_cpu_ns();
    uint64_t deadline = cfg->seconds > 0 ? t0 + (uint64_t)(cfg->seconds * 1e9) : UINT64_MAX;

    for (uint64_t i = 0; !time_up(i, cfg->ops, deadline); i++) {
        if (writer) {
            uint64_t n = 1 + pyb_rng_below(&rng, cfg->max_write_blocks);
            uint64_t b = cfg->region_blk + pyb_rng_below(&rng, cfg->region_blocks - n + 1);
            pyb_cd_write_run(d, &w->ctx, b, n);
            r.writes++;
            if (cfg->reclaim_every && w->index == 0 && r.writes % cfg->reclaim_every == 0 && pyb_cd_tracker(d)) {
                fold(w, &r);
                r.reclaimed += pyb_tracker_reclaim(pyb_cd_tracker(d));
            }
        } else {
            uint64_t b = cfg->region_blk + pyb_rng_below(&rng, cfg->region_blocks - cfg->read_blocks + 1);
            pyb_cd_read_run(d, &w->ctx, &rd, b, cfg->read_blocks);
            r.reads++;
        }
        r.ops++;
        if ((i % CLOCK_EVERY) == CLOCK_EVERY - 1)
            fold(w, &r);
    }
    fold(w, &r);
    r.elapsed_ns = pyb_now_ns() - t0;
    r.cpu_ns = pyb_thread_cpu_ns() - c0;
    *w->res = r;
    return NULL;
}

int pyb_race_run(pyb_cachedev *d, const pyb_race_config *cfg, pyb_workload_result *out)
{
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
    return run_threads(d, cfg, cfg->threads, race_main, out);
}

/* ------------------------------------------------------------------------------------------------ */
/* fio-like mix                                                                                       */

static void *fio_main(void *arg)
{
    worker *w = arg;
    const pyb_fio_config *cfg = w->cfg;
    pyb_cachedev *d = w->d;
    pyb_workload_result r = {0};
    pyb_cd_read rd;
    pyb_rng rng;
    pyb_rng_seed(&rng, cfg->seed * 1000003u + w->index);
    pyb_cd_ctx_init(d, &w->ctx);
    pyb_cd_write *q = malloc(sizeof(*q) * cfg->inflight);
    if (!q)
        return (void *)1;
    uint32_t head = 0, used = 0;
    uint64_t n_blocks = pyb_cd_n_blocks(d);
    uint64_t read_slots = n_blocks / cfg->read_blocks, write_slots = n_blocks / cfg->write_blocks;

    if (pyb_gate_wait(w->gate) < 0) {
        free(q);
        return NULL;
    }
    uint64_t t0 = pyb_now_ns(), c0 = pyb_thread_cpu_ns();
    uint64_t deadline = cfg->seconds > 0 ? t0 + (uint64_t)(cfg->seconds * 1e9) : UINT64_MAX;

    for (uint64_t i = 0; !time_up(i, cfg->ops, deadline); i++) {
        if (pyb_rng_below(&rng, 100) < cfg->read_percent) {
            pyb_cd_read_run(d, &w->ctx, &rd, pyb_rng_below(&rng, read_slots) * cfg->read_blocks, cfg->read_blocks);
            r.reads++;
        } else {
            if (used == cfg->inflight) { /* complete the oldest: its data lands, then it ends */
                pyb_cd_write_step(d, &w->ctx, &q[head]);
                pyb_cd_write_step(d, &w->ctx, &q[head]);
                head = (head + 1) % cfg->inflight;
                used--;
            }
            pyb_cd_write *nw = &q[(head + used) % cfg->inflight];
            pyb_cd_write_init(nw, pyb_rng_below(&rng, write_slots) * cfg->write_blocks, cfg->write_blocks);
            pyb_cd_write_step(d, &w->ctx, nw); /* START */
            pyb_cd_write_step(d, &w->ctx, nw); /* INVALIDATE */
            used++;
            r.writes++;
        }
        r.ops++;
        if ((i % CLOCK_EVERY) == CLOCK_EVERY - 1)
            fold(w, &r);
    }
    while (used) {
        pyb_cd_write_step(d, &w->ctx, &q[head]);
        pyb_cd_write_step(d, &w->ctx, &q[head]);
        head = (head + 1) % cfg->inflight;
        used--;
    }
    fold(w, &r);
    r.elapsed_ns = pyb_now_ns() - t0;
    r.cpu_ns = pyb_thread_cpu_ns() - c0;
    free(q);
    *w->res = r;
    return NULL;
}

int pyb_fio_run(pyb_cachedev *d, const pyb_fio_config *cfg, pyb_workload_result *out)
{
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
    return run_threads(d, cfg, cfg->jobs, fio_main, out);
}
