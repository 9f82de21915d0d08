/* pyb_stress.c - see pyb_stress.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "pyb_stress.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/resource.h>

/* A thread's arguments: read-only shared configuration plus its own result slot. */
typedef struct worker {
    pyb_tracker *t;
    const pyb_stress_config *cfg;  /* read-only during the run */
    const pyb_stress_options *opt; /* read-only during the run (never NULL) */
    uint32_t index;
    pyb_gate *gate;
    pyb_stress_result *res;        /* written by this thread only, read by the caller after the join */
} worker;

/* Iterations between clock reads and between folding the statistics (which also unpins). */
#define CLOCK_EVERY 256

/* Keep one latency sample: the first `cap` directly, then a uniform reservoir (Algorithm R). */
static inline void keep_sample(pyb_stress_result *r, uint64_t *samples, uint64_t cap, pyb_rng *rng, uint64_t ns)
{
    r->sampled++;
    if (ns > r->sample_max_ns)
        r->sample_max_ns = ns;
    if (r->samples_kept < cap) {
        samples[r->samples_kept++] = ns;
    } else {
        uint64_t j = pyb_rng_below(rng, r->sampled);
        if (j < cap)
            samples[j] = ns;
    }
}

static uint64_t rusage_switches(int involuntary)
{
    struct rusage ru;
    if (getrusage(RUSAGE_THREAD, &ru) != 0)
        return 0;
    return (uint64_t)(involuntary ? ru.ru_nivcsw : ru.ru_nvcsw);
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    const pyb_stress_config *cfg = w->cfg;
    const pyb_stress_options *opt = w->opt;
    pyb_tracker *t = w->t;
    pyb_stress_result r = {0};
    pyb_ctx ctx = PYB_CTX_INIT;
    pyb_rng rng, sample_rng;
    pyb_rng_seed(&rng, cfg->seed * 1000003u + w->index);
    /* A separate stream for the reservoir, so that sampling leaves the workload's offsets unchanged. */
    pyb_rng_seed(&sample_rng, ~(cfg->seed * 1000003u + w->index));

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
    const int check = !opt->skip_checks;
    const uint64_t cap = opt->sample_capacity;
    uint64_t *samples = opt->sample_every ? opt->samples + (uint64_t)w->index * cap : NULL;
    uint32_t countdown = opt->sample_every; /* the iteration that brings it to 0 is timed */

    if (pyb_gate_wait(w->gate) < 0) {
        free(ring);
        return NULL;
    }
    uint64_t vcs0 = rusage_switches(0), ics0 = rusage_switches(1);
    uint64_t t0 = pyb_now_ns(), c0 = pyb_thread_cpu_ns();
    uint64_t deadline = cfg->ops ? UINT64_MAX : t0 + (uint64_t)(cfg->seconds * 1e9);

    for (uint64_t i = 0;; i++) {
        if (cfg->ops ? i >= cfg->ops : ((i % CLOCK_EVERY) == 0 && pyb_now_ns() >= deadline))
            break;
        uint64_t ts = 0;
        if (samples && --countdown == 0) {
            countdown = opt->sample_every;
            ts = pyb_now_ns();
        }
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
        if (check) {
            uint64_t chk_len = span < 4096 ? span : 4096;
            uint64_t chk = lo + pyb_rng_below(&rng, span - chk_len + 1);
            r.active_hits += pyb_tracker_is_active(t, &ctx, chk, chk_len);
            r.checks++;
        }
        if (ts)
            keep_sample(&r, samples, cap, &sample_rng, pyb_now_ns() - ts);
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
    r.start_ns = t0;
    r.elapsed_ns = pyb_now_ns() - t0;
    r.cpu_ns = pyb_thread_cpu_ns() - c0;
    r.vol_switches = rusage_switches(0) - vcs0;
    r.invol_switches = rusage_switches(1) - ics0;
    free(ring);
    *w->res = r;
    return NULL;
}

int pyb_stress_run(pyb_tracker *t, const pyb_stress_config *cfg, pyb_stress_result *out)
{
    return pyb_stress_run_ex(t, cfg, NULL, out);
}

/* The first `n` CPUs of the calling thread's affinity mask (all of them if it has fewer). */
static int first_cpus(uint32_t n, cpu_set_t *set)
{
    cpu_set_t avail;
    if (sched_getaffinity(0, sizeof(avail), &avail) != 0)
        return -1;
    CPU_ZERO(set);
    uint32_t taken = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE && taken < n; cpu++) {
        if (CPU_ISSET(cpu, &avail)) {
            CPU_SET(cpu, set);
            taken++;
        }
    }
    return taken ? 0 : -1;
}

int pyb_stress_run_ex(pyb_tracker *t, const pyb_stress_config *cfg, const pyb_stress_options *opt,
                      pyb_stress_result *out)
{
    static const pyb_stress_options no_options = {0, 0, NULL, 0, 0};
    if (!opt)
        opt = &no_options;
    if (!cfg->threads || cfg->threads > PYB_STRESS_MAX_THREADS || !cfg->depth ||
        cfg->depth > PYB_STRESS_MAX_DEPTH || !cfg->write_len)
        return -EINVAL;
    uint64_t span = cfg->partition ? cfg->region_len / cfg->threads : cfg->region_len;
    if (span < cfg->write_len || cfg->region_off + cfg->region_len > pyb_tracker_device_size(t))
        return -EINVAL;
    if (opt->sample_every &&
        (!opt->samples || !opt->sample_capacity || opt->sample_capacity > PYB_STRESS_MAX_SAMPLES))
        return -EINVAL;

    pthread_attr_t attr;
    pthread_attr_t *attrp = NULL;
    if (opt->cpus) {
        cpu_set_t set;
        if (first_cpus(opt->cpus, &set) != 0 || pthread_attr_init(&attr) != 0)
            return -EINVAL;
        if (pthread_attr_setaffinity_np(&attr, sizeof(set), &set) != 0) {
            pthread_attr_destroy(&attr);
            return -EINVAL;
        }
        attrp = &attr;
    }

    pthread_t tids[PYB_STRESS_MAX_THREADS];
    worker ws[PYB_STRESS_MAX_THREADS];
    pyb_gate g = PYB_GATE_INIT;
    uint32_t started = 0;
    int rc = 0;
    for (uint32_t i = 0; i < cfg->threads; i++) {
        out[i] = (pyb_stress_result){0};
        ws[i] = (worker){t, cfg, opt, i, &g, &out[i]};
        if (pthread_create(&tids[i], attrp, worker_main, &ws[i]) != 0) {
            rc = -EAGAIN;
            break;
        }
        started++;
    }
    if (attrp)
        pthread_attr_destroy(attrp);
    pyb_gate_open(&g, rc ? -1 : 1);
    for (uint32_t i = 0; i < started; i++) {
        void *ret;
        pthread_join(tids[i], &ret);
        if (ret && !rc)
            rc = -ENOMEM;
    }
    return rc;
}
