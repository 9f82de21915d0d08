/* pyb_stress.c - see pyb_stress.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "pyb_stress.h"
#include "pyb_ops_lab.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

/* Iterations between clock reads, stop checks and folds of the statistics (which also unpin). */
#define CLOCK_EVERY 256
/* Ends a completer makes before it frees their slots (so a long drain does not starve its submitter). */
#define POP_BATCH 32

typedef struct stress_state stress_state;

/* One submitting thread and its completion thread. */
typedef struct pair {
    pyb_ring ring;        /* submitter -> completer (unused with inline_ends); see pyb_driver.h */
    stress_state *s;
    uint32_t index;
} pair;

/* The run's private state: read-only during the run except each pair's ring and result slot. */
struct stress_state {
    pyb_tracker *t;          /* the lab's tracker (the devirtualised path), or NULL: use ops (or the
                                do-nothing tracker below) */
    pyb_ops_tracker ops;     /* the tracker in use */
    int null_tracker;        /* opt.null_tracker: the tracker's calls are null_ctr's add and subtract */
    _Atomic int error;       /* another tracker's first failed call: relaxed CAS from 0 / relaxed loads
                                (a stop flag; the per-thread results carry the codes, read after join) */
    pyb_stress_config cfg;
    pyb_stress_options opt;
    pyb_run *run;
    pyb_stress_result *out; /* out[i]: submitter i's fields and its completer's (see the header) */
    pthread_attr_t attr;
    int have_attr;
    uint32_t n_pairs;
    pair *pairs;
    /* The do-nothing tracker's one counter, on a line of its own (no false sharing with the fields
     * above, which every thread reads): relaxed fetch_add/fetch_sub from every thread, as the bounce
     * floor's counter (pyb_floor.c), and a relaxed load for a check. */
    _Alignas(PYB_CACHELINE) _Atomic uint64_t null_ctr;
};

/* A tracker context to unpin when its thread is about to yield or sleep. */
typedef struct ctx_ref {
    pyb_tracker *t;
    pyb_ctx *ctx;
} ctx_ref;

static void unpin(void *arg)
{
    ctx_ref *c = arg;
    if (c->t)
        pyb_tracker_ctx_unpin(c->t, c->ctx);
}

/* The tracker calls: the lab's directly (t != NULL, as before the vtable existed), any other through
 * s->ops; a failure of another tracker is kept in *err (first one) and in s->error. */
static void failed(stress_state *s, int rc, int *err)
{
    int zero = 0;
    if (!*err)
        *err = rc;
    pyb_cas(&s->error, &zero, rc, PYB_RELAXED, PYB_RELAXED);
}

static inline void ctx_fold(stress_state *s, pyb_ctx *ctx)
{
    if (s->t)
        pyb_tracker_ctx_done(s->t, ctx);
    else if (!s->null_tracker)
        s->ops.ops->ctx_done(s->ops.self, ctx);
}

/* The do-nothing tracker's calls, out of line as the tracker's are (the lab's start is a call into
 * pyb_driver_start_bounded, which calls pyb_tracker_start; its end one call into pyb_tracker_end): the
 * driver floor then keeps one call per start and per end, and what is left in tracker_ns is the lab's
 * extra call depth (about one call per start) and its work. */
static __attribute__((noinline)) void null_start(stress_state *s) { pyb_fetch_add(&s->null_ctr, 1, PYB_RELAXED); }
static __attribute__((noinline)) void null_end(stress_state *s) { pyb_fetch_sub(&s->null_ctr, 1, PYB_RELAXED); }

/* Each call tests s->t first, so the lab's path is the same code with or without the null tracker. */
static inline void track_end(stress_state *s, pyb_ctx *ctx, uint64_t off, uint64_t len, int *err)
{
    if (s->t) {
        pyb_tracker_end(s->t, ctx, off, len);
        return;
    }
    if (s->null_tracker) {
        null_end(s);
        return;
    }
    int rc = s->ops.ops->end(s->ops.self, ctx, off, len);
    if (rc < 0)
        failed(s, rc, err);
}

static inline int track_is_active(stress_state *s, pyb_ctx *ctx, uint64_t off, uint64_t len, int *err)
{
    if (s->t)
        return pyb_tracker_is_active(s->t, ctx, off, len);
    if (s->null_tracker)
        return pyb_load(&s->null_ctr, PYB_RELAXED) != 0;
    int rc = s->ops.ops->is_active(s->ops.self, ctx, off, len);
    if (rc < 0) {
        failed(s, rc, err);
        return 0;
    }
    return rc;
}

/* PYB_START_* bits, or -1 (stop: given up by the driver's bound, or another tracker failed). */
static inline int track_start(stress_state *s, pyb_ctx *ctx, pyb_ring *ring, uint32_t index, uint64_t off,
                              uint64_t len, pyb_driver_waits *waits, int *err)
{
    if (s->t)
        return pyb_driver_start_bounded(s->t, ctx, s->run, ring, index, off, len, waits);
    if (s->null_tracker) {
        null_start(s);
        return 0;
    }
    uint64_t resume = off;
    int rc = s->ops.ops->start(s->ops.self, ctx, off, len, 1, &resume);
    if (rc < 0) {
        failed(s, rc, err);
        return -1;
    }
    return (rc & PYB_OPS_UNTRACKED) ? PYB_START_UNTRACKED : 0;
}

static inline void ctx_start(stress_state *s, pyb_ctx *ctx)
{
    pyb_ctx init = PYB_CTX_INIT;
    *ctx = init;
    if (!s->t && !s->null_tracker)
        s->ops.ops->ctx_init(s->ops.self, ctx);
}

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

/* The index-th (mod their number) of the CPUs this thread may use: pin the calling thread to it. The
 * thread was created on the run's first `cpus` CPUs, so thread i lands on the (i mod cpus)-th of them. */
static int pin_self(uint32_t index)
{
    cpu_set_t avail, one;
    if (sched_getaffinity(0, sizeof(avail), &avail) != 0)
        return 0;
    int count = CPU_COUNT(&avail);
    if (count <= 0)
        return 0;
    int want = (int)(index % (uint32_t)count), seen = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (CPU_ISSET(cpu, &avail) && seen++ == want) {
            CPU_ZERO(&one);
            CPU_SET(cpu, &one);
            /* best effort, as the floor's: 1 only if the system took it */
            return pthread_setaffinity_np(pthread_self(), sizeof(one), &one) == 0;
        }
    }
    return 0;
}

static void *submitter_main(void *arg)
{
    pair *p = arg;
    stress_state *s = p->s;
    const pyb_stress_config *cfg = &s->cfg;
    const pyb_stress_options *opt = &s->opt;
    pyb_tracker *t = s->t;
    pyb_run *run = s->run;
    pyb_ring *ring = opt->inline_ends ? NULL : &p->ring;
    pyb_stress_result r = {0};
    pyb_driver_waits waits = {0, 0};
    pyb_ctx ctx;
    ctx_start(s, &ctx);
    ctx_ref cref = {t, &ctx};
    int err = 0;
    pyb_rng rng, sample_rng;
    pyb_rng_seed(&rng, cfg->seed * 1000003u + p->index);
    /* A separate stream for the reservoir, so that sampling leaves the workload's offsets unchanged. */
    pyb_rng_seed(&sample_rng, ~(cfg->seed * 1000003u + p->index));

    uint64_t lo = cfg->region_off, span = cfg->region_len;
    if (cfg->partition) {
        span = cfg->region_len / cfg->threads;
        lo += span * p->index;
    }
    uint64_t room = span - cfg->write_len + 1; /* write offsets in [lo, lo + room) */
    /* inline_ends: this thread's own queue of writes in flight */
    uint64_t *own = NULL;
    uint32_t head = 0, used = 0;
    if (!ring) {
        own = malloc(sizeof(uint64_t) * cfg->depth);
        if (!own)
            return (void *)1;
    }
    const int check = !opt->skip_checks;
    const uint64_t cap = opt->sample_capacity;
    uint64_t *samples = opt->sample_every ? opt->samples + (uint64_t)p->index * cap : NULL;
    uint32_t countdown = opt->sample_every; /* the iteration that brings it to 0 is timed */

    int pinned = opt->pin_threads ? pin_self(p->index) : 0;
    uint64_t vcs0 = rusage_switches(0), ics0 = rusage_switches(1);
    uint64_t t0 = pyb_now_ns(), c0 = pyb_thread_cpu_ns();
    uint64_t deadline = cfg->ops ? UINT64_MAX : t0 + (uint64_t)(cfg->seconds * 1e9);

    for (uint64_t i = 0;; i++) {
        if ((i % CLOCK_EVERY) == 0 && (pyb_run_stopped(run) || (!t && pyb_load(&s->error, PYB_RELAXED))))
            break;
        if (cfg->ops ? i >= cfg->ops : ((i % CLOCK_EVERY) == 0 && pyb_now_ns() >= deadline))
            break;
        uint64_t ts = 0;
        if (samples && --countdown == 0) {
            countdown = opt->sample_every;
            ts = pyb_now_ns();
        }
        if (ring) {
            if (!pyb_ring_has_room(ring) && pyb_ring_wait_room(ring, run, unpin, &cref) < 0)
                break;
        } else if (used == cfg->depth) {
            track_end(s, &ctx, own[head], cfg->write_len, &err);
            r.ends++;
            head = (head + 1) % cfg->depth;
            used--;
        }
        uint64_t off = lo + pyb_rng_below(&rng, room);
        int ret = track_start(s, &ctx, ring, p->index, off, cfg->write_len, &waits, &err);
        if (ret < 0)
            break;
        r.untracked += (ret & PYB_START_UNTRACKED) != 0;
        r.starts++;
        if (check) { /* before the hand-over: at least this thread's new write is in flight */
            uint64_t chk_len = span < 4096 ? span : 4096;
            uint64_t chk = lo + pyb_rng_below(&rng, span - chk_len + 1);
            r.active_hits += track_is_active(s, &ctx, chk, chk_len, &err);
            r.checks++;
        }
        if (ring) {
            *(uint64_t *)pyb_ring_next(ring) = off;
            pyb_ring_push(ring);
        } else {
            own[(head + used) % cfg->depth] = off;
            used++;
        }
        if (ts)
            keep_sample(&r, samples, cap, &sample_rng, pyb_now_ns() - ts);
        r.ops++;
        if (t && cfg->reclaim_every && p->index == 0 && (i % cfg->reclaim_every) == cfg->reclaim_every - 1) {
            pyb_tracker_ctx_done(t, &ctx);
            r.reclaimed += pyb_tracker_reclaim(t);
        }
        if ((i % CLOCK_EVERY) == CLOCK_EVERY - 1) {
            ctx_fold(s, &ctx);
            if (ring)
                ring->head_seen = pyb_load(&ring->head, PYB_ACQUIRE);
            r.inflight_sum += ring ? ring->pushed - ring->head_seen : used;
            r.inflight_samples++;
        }
    }
    if (ring) {
        pyb_ring_set_state(ring, PYB_RING_DONE); /* after the last push: the completer ends them all */
    } else {
        while (used) {
            track_end(s, &ctx, own[head], cfg->write_len, &err);
            r.ends++;
            head = (head + 1) % cfg->depth;
            used--;
        }
        free(own);
    }
    ctx_fold(s, &ctx);

    pyb_stress_result *o = &s->out[p->index]; /* this thread's fields only (the completer writes others) */
    o->ops = r.ops;
    o->starts = r.starts;
    o->checks = r.checks;
    o->active_hits = r.active_hits;
    o->untracked = r.untracked;
    o->reclaimed = r.reclaimed;
    if (!ring)
        o->ends = r.ends;
    o->blocked_starts = waits.starts;
    o->blocked_ns = waits.ns;
    o->completer_wakes = ring ? ring->wakes : 0;
    o->inflight_sum = r.inflight_sum;
    o->inflight_samples = r.inflight_samples;
    o->start_ns = t0;
    o->elapsed_ns = pyb_now_ns() - t0;
    o->cpu_ns = pyb_thread_cpu_ns() - c0;
    o->sampled = r.sampled;
    o->samples_kept = r.samples_kept;
    o->sample_max_ns = r.sample_max_ns;
    o->vol_switches = rusage_switches(0) - vcs0;
    o->invol_switches = rusage_switches(1) - ics0;
    o->start_error = err;
    o->pinned = pinned;
    return NULL;
}

static void *completer_main(void *arg)
{
    pair *p = arg;
    stress_state *s = p->s;
    pyb_tracker *t = s->t;
    pyb_ring *ring = &p->ring;
    const uint64_t len = s->cfg.write_len;
    pyb_ctx ctx;
    ctx_start(s, &ctx);
    ctx_ref cref = {t, &ctx};
    int err = 0;
    uint64_t c0 = pyb_thread_cpu_ns(), ends = 0;
    for (;;) {
        uint64_t n = pyb_ring_await(ring, s->run, unpin, &cref);
        if (!n)
            break;
        while (n) {
            uint64_t k = n < POP_BATCH ? n : POP_BATCH;
            for (uint64_t j = 0; j < k; j++)
                track_end(s, &ctx, *(uint64_t *)pyb_ring_entry(ring, ring->popped + j), len, &err);
            pyb_ring_pop(ring, k);
            n -= k;
            if ((ends + k) / CLOCK_EVERY != ends / CLOCK_EVERY)
                ctx_fold(s, &ctx);
            ends += k;
        }
    }
    ctx_fold(s, &ctx);
    s->out[p->index].end_error = err;
    s->out[p->index].ends = ends;
    s->out[p->index].completion_cpu_ns = pyb_thread_cpu_ns() - c0;
    return NULL;
}

int pyb_stress_run(pyb_tracker *t, const pyb_stress_config *cfg, pyb_stress_result *out)
{
    return pyb_stress_run_ex(t, cfg, NULL, out);
}

int pyb_stress_run_ex(pyb_tracker *t, const pyb_stress_config *cfg, const pyb_stress_options *opt,
                      pyb_stress_result *out)
{
    pyb_run *run;
    int rc = pyb_stress_begin(t, cfg, opt, out, &run);
    return rc ? rc : pyb_run_finish(run, NULL);
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

static void stress_free(void *arg)
{
    stress_state *s = arg;
    if (s->pairs)
        for (uint32_t i = 0; i < s->n_pairs; i++)
            pyb_ring_destroy(&s->pairs[i].ring);
    free(s->pairs);
    if (s->have_attr)
        pthread_attr_destroy(&s->attr);
    free(s);
}

int pyb_stress_begin(pyb_tracker *t, const pyb_stress_config *cfg, const pyb_stress_options *opt,
                     pyb_stress_result *out, pyb_run **run)
{
    return pyb_stress_begin_ops(pyb_ops_lab(t), pyb_tracker_device_size(t), cfg, opt, out, run);
}

int pyb_stress_begin_ops(pyb_ops_tracker t, uint64_t device_size, const pyb_stress_config *cfg,
                         const pyb_stress_options *opt, pyb_stress_result *out, pyb_run **run)
{
    static const pyb_stress_options no_options = {0};
    *run = NULL;
    if (!opt)
        opt = &no_options;
    if (!t.ops || t.ops->ctx_size > sizeof(pyb_ctx) || (opt->inline_ends && !pyb_ops_lab_tracker(t)))
        return -EINVAL;
    if (!cfg->threads || cfg->threads > PYB_STRESS_MAX_THREADS || !cfg->depth ||
        cfg->depth > PYB_STRESS_MAX_DEPTH || !cfg->write_len)
        return -EINVAL;
    uint64_t span = cfg->partition ? cfg->region_len / cfg->threads : cfg->region_len;
    if (span < cfg->write_len || cfg->region_off + cfg->region_len > device_size)
        return -EINVAL;
    if (opt->sample_every &&
        (!opt->samples || !opt->sample_capacity || opt->sample_capacity > PYB_STRESS_MAX_SAMPLES))
        return -EINVAL;

    if ((opt->null_tracker && (!pyb_ops_lab_tracker(t) || cfg->reclaim_every)) || (opt->pin_threads && !opt->cpus))
        return -EINVAL;
    stress_state *s = aligned_alloc(PYB_CACHELINE, (sizeof(*s) + PYB_CACHELINE - 1) / PYB_CACHELINE * PYB_CACHELINE);
    if (!s)
        return -ENOMEM;
    memset(s, 0, sizeof(*s));
    s->null_tracker = opt->null_tracker != 0;
    s->t = s->null_tracker ? NULL : pyb_ops_lab_tracker(t);
    s->ops = t;
    s->cfg = *cfg;
    s->opt = *opt;
    s->out = out;
    if (opt->cpus) {
        cpu_set_t set;
        if (first_cpus(opt->cpus, &set) != 0 || pthread_attr_init(&s->attr) != 0) {
            free(s);
            return -EINVAL;
        }
        s->have_attr = 1;
        if (pthread_attr_setaffinity_np(&s->attr, sizeof(set), &set) != 0) {
            stress_free(s);
            return -EINVAL;
        }
    }
    s->n_pairs = cfg->threads;
    size_t bytes = sizeof(pair) * cfg->threads;
    s->pairs = aligned_alloc(PYB_CACHELINE, (bytes + PYB_CACHELINE - 1) / PYB_CACHELINE * PYB_CACHELINE);
    if (!s->pairs) {
        stress_free(s);
        return -ENOMEM;
    }
    memset(s->pairs, 0, bytes);
    uint64_t band = pyb_ring_band(cfg->depth);
    for (uint32_t i = 0; i < cfg->threads; i++) {
        s->pairs[i].s = s;
        s->pairs[i].index = i;
        if (!opt->inline_ends && pyb_ring_init(&s->pairs[i].ring, sizeof(uint64_t), cfg->depth - band,
                                                   cfg->depth, cfg->depth + band)) {
            stress_free(s);
            return -ENOMEM;
        }
        out[i] = (pyb_stress_result){0};
    }
    pyb_run *r;
    if (pyb_run_create(cfg->threads * (opt->inline_ends ? 1u : 2u), opt->wait_timeout_ns, &r) != 0) {
        stress_free(s);
        return -ENOMEM;
    }
    s->run = r;
    r->priv = s;
    r->free_priv = stress_free;
    r->attr = s->have_attr ? &s->attr : NULL;
    uint32_t k = 0;
    for (uint32_t i = 0; i < cfg->threads; i++) {
        if (pyb_run_launch(r, k++, submitter_main, &s->pairs[i]) != 0)
            break;
        if (!opt->inline_ends && pyb_run_launch(r, k++, completer_main, &s->pairs[i]) != 0)
            break;
    }
    pyb_run_go(r);
    if (r->launch_failed)
        return pyb_run_finish(r, NULL);
    *run = r;
    return 0;
}
