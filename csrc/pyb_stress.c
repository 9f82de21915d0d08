/* pyb_stress.c - see pyb_stress.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "pyb_stress.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

/* Start gate: workers wait until `go` is 1 (run) or -1 (thread creation failed: leave). */
typedef struct gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int go; /* under mu */
} gate;

typedef struct worker {
    pyb_tracker *t;
    const pyb_stress_config *cfg;
    uint32_t index;
    gate *gate;
    pyb_stress_result *res;
} worker;

static int gate_wait(gate *g)
{
    pthread_mutex_lock(&g->mu);
    while (g->go == 0)
        pthread_cond_wait(&g->cv, &g->mu);
    int go = g->go;
    pthread_mutex_unlock(&g->mu);
    return go;
}

static void gate_open(gate *g, int go)
{
    pthread_mutex_lock(&g->mu);
    g->go = go;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

/* Iterations between clock reads and between folding the statistics (which also unpins). */
#define CLOCK_EVERY 256

static void *worker_main(void *arg)
{
    worker *w = arg;
    const pyb_stress_config *cfg = w->cfg;
    pyb_tracker *t = w->t;
    pyb_stress_result r = {0};
    pyb_ctx ctx = PYB_CTX_INIT;
    pyb_rng rng;
    pyb_rng_seed(&rng, cfg->seed * 1000003u + w->index);

    uint64_t lo = cfg->region_off, span = cfg->region_len;
    if (cfg->partition) {
        span = cfg->region_len / cfg->threads;
        lo += span * w->index;
    }
    uint64_t room = span - cfg->write_len + 1; /* write offsets in [lo, lo + room) */
    uint64_t *ring = malloc(sizeof(uint64_t) * cfg->depth);
    if (!ring)
        return (void *)1;
    uint32_t head = 0, used = 0;

    if (gate_wait(w->gate) < 0) {
        free(ring);
        return NULL;
    }
    uint64_t t0 = pyb_now_ns(), c0 = pyb_thread_cpu_ns();
    uint64_t deadline = cfg->ops ? UINT64_MAX : t0 + (uint64_t)(cfg->seconds * 1e9);

    for (uint64_t i = 0;; i++) {
        if (cfg->ops ? i >= cfg->ops : ((i % CLOCK_EVERY) == 0 && pyb_now_ns() >= deadline))
            break;
        if (used == cfg->depth) {
            pyb_tracker_end(t, &ctx, ring[head], cfg->write_len);
            r.ends++;
            head = (head + 1) % cfg->depth;
            used--;
        }
        uint64_t off = lo + pyb_rng_below(&rng, room);
        uint64_t resume;
        int ret = pyb_tracker_start(t, &ctx, off, cfg->write_len, 1, &resume);
        r.untracked += (ret & PYB_START_UNTRACKED) != 0;
        r.starts++;
        ring[(head + used) % cfg->depth] = off;
        used++;
        uint64_t chk_len = span < 4096 ? span : 4096;
        uint64_t chk = lo + pyb_rng_below(&rng, span - chk_len + 1);
        r.active_hits += pyb_tracker_is_active(t, &ctx, chk, chk_len);
        r.checks++;
        r.ops++;
        if (cfg->reclaim_every && w->index == 0 && (i % cfg->reclaim_every) == cfg->reclaim_every - 1) {
            pyb_tracker_ctx_done(t, &ctx);
            r.reclaimed += pyb_tracker_reclaim(t);
        }
        if ((i % CLOCK_EVERY) == CLOCK_EVERY - 1)
            pyb_tracker_ctx_done(t, &ctx);
    }
    while (used) {
        pyb_tracker_end(t, &ctx, ring[head], cfg->write_len);
        r.ends++;
        head = (head + 1) % cfg->depth;
        used--;
    }
    pyb_tracker_ctx_done(t, &ctx);
    r.elapsed_ns = pyb_now_ns() - t0;
    r.cpu_ns = pyb_thread_cpu_ns() - c0;
    free(ring);
    *w->res = r;
    return NULL;
}

int pyb_stress_run(pyb_tracker *t, const pyb_stress_config *cfg, pyb_stress_result *out)
{
    if (!cfg->threads || cfg->threads > PYB_STRESS_MAX_THREADS || !cfg->depth ||
        cfg->depth > PYB_STRESS_MAX_DEPTH || !cfg->write_len)
        return -EINVAL;
    uint64_t span = cfg->partition ? cfg->region_len / cfg->threads : cfg->region_len;
    if (span < cfg->write_len || cfg->region_off + cfg->region_len > pyb_tracker_device_size(t))
        return -EINVAL;

    pthread_t tids[PYB_STRESS_MAX_THREADS];
    worker ws[PYB_STRESS_MAX_THREADS];
    gate g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
    uint32_t started = 0;
    int rc = 0;
    for (uint32_t i = 0; i < cfg->threads; i++) {
        out[i] = (pyb_stress_result){0};
        ws[i] = (worker){t, cfg, i, &g, &out[i]};
        if (pthread_create(&tids[i], NULL, worker_main, &ws[i]) != 0) {
            rc = -EAGAIN;
            break;
        }
        started++;
    }
    gate_open(&g, rc ? -1 : 1);
    for (uint32_t i = 0; i < started; i++) {
        void *ret;
        pthread_join(tids[i], &ret);
        if (ret && !rc)
            rc = -ENOMEM;
    }
    return rc;
}
