/* pyb_explore.c - see pyb_explore.h. Single-threaded: no field here is shared between threads, except
 * that a patch's END steps run on a helper thread (helper below) while the explorer waits for each. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "pyb_explore.h"
#include "pyb_ops_lab.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

typedef struct op {
    int kind;   /* PYB_X_WRITE, PYB_X_READ or PYB_X_DAEMON */
    int number; /* 1-based, per kind: W1, W2, R1, D1 ... */
    int done;   /* daemon: its reclaim has run */
    pyb_cd_write w;
    pyb_cd_read r;
    pyb_cd_ctx ctx;
} op;

struct pyb_explorer {
    pyb_explore_config cfg;
    pyb_cachedev *dev;
    pyb_tracker *tracker; /* of the schedule being run, or NULL */
    pyb_kpatch_tracker *patch_t; /* cfg.patch: the instance of the schedule being run, or NULL */
    int patch_init_error, patch_error; /* the last instance's init error; the failure that stopped a run */
    int end_thread_error; /* pthread_create's error for a patch's END step's thread (stops the run) */
    /* A patch's END steps run on this helper thread, one at a time: the explorer hands it a step
     * and waits until it is done, so the search stays single-stepped. Started at the first END. */
    struct {
        pthread_t th;
        pthread_mutex_t mu;
        pthread_cond_t cv;
        int started;  /* th runs (explorer thread only) */
        op *job;      /* the step to run, NULL when none (written under mu, release; read acquire) */
        int done;     /* job's step has run (written under mu, release; read acquire) */
        int quit;     /* the helper returns (mu) */
    } helper;
    pyb_fault fault;
    uint64_t counter_max;
    uint32_t n_ops;
    op ops[PYB_EXPLORE_MAX_OPS];

    /* The search: the choices of the last run and which operations could step at each depth. */
    uint8_t choice[PYB_EXPLORE_MAX_STEPS];
    uint32_t enabled[PYB_EXPLORE_MAX_STEPS]; /* the operations explored at each depth */
    uint32_t sleep[PYB_EXPLORE_MAX_STEPS + 1]; /* reduce: operations asleep at each depth */
    uint32_t depth;  /* steps of the last run */
    uint32_t prefix; /* choices to replay in the next run */
    int started;
    uint32_t fixed;  /* pyb_explore_set_prefix: choices at depths < fixed are never changed */
    uint32_t cut;    /* pyb_explore_prefixes: runs stop at this depth (0 = never) */

    /* Per-run observations. */
    int run_untracked, run_underflow, run_restart, run_wrap, run_clamp, run_blocked, run_reclaimed;
    int run_capped, run_stuck, run_pruned;
    pyb_explore_result res;
};

int pyb_explore_create(const pyb_explore_config *cfg, pyb_explorer **out)
{
    *out = NULL;
    uint32_t n_ops = cfg->writes + cfg->reads + cfg->reclaims;
    if (!n_ops || n_ops > PYB_EXPLORE_MAX_OPS || cfg->writes > PYB_EXPLORE_MAX_OPS ||
        cfg->reads > PYB_EXPLORE_MAX_OPS || cfg->reclaims > PYB_EXPLORE_MAX_RECLAIMS)
        return -EINVAL;
    if (!cfg->write_blocks || !cfg->read_blocks || cfg->read_blocks > PYB_CD_MAX_READ_BLOCKS ||
        cfg->write_blocks > PYB_CD_MAX_READ_BLOCKS || cfg->write_blocks > cfg->n_blocks ||
        cfg->read_blocks > cfg->n_blocks)
        return -EINVAL;
    if (cfg->sync != PYB_EXPLORE_NO_TRACKING && (cfg->sync < PYB_SYNC_GLOBAL || cfg->sync > PYB_SYNC_ATOMIC))
        return -EINVAL;
    if (cfg->alloc_failure < PYB_ALLOC_UNTRACKED || cfg->alloc_failure > PYB_ALLOC_MEMPOOL)
        return -EINVAL;
    if (cfg->counter_bits && cfg->counter_bits != 16 && cfg->counter_bits != 32 && cfg->counter_bits != 64)
        return -EINVAL;
    if (cfg->overflow < PYB_OVERFLOW_WRAP || cfg->overflow > PYB_OVERFLOW_WAIT)
        return -EINVAL;
    if (cfg->chunk_size < 512 || (cfg->chunk_size & (cfg->chunk_size - 1)))
        return -EINVAL;
    if (cfg->max_restarts > PYB_EXPLORE_MAX_RESTARTS)
        return -EINVAL;
    if (cfg->patch && (cfg->preload || cfg->granularity != PYB_GRAN_CHUNK || !cfg->hung_ns))
        return -EINVAL;
    int bits = cfg->counter_bits ? cfg->counter_bits : (cfg->sync == PYB_SYNC_ATOMIC ? 64 : 16);
    if (bits < 64 && (cfg->preload >> bits || cfg->counter_max >> bits))
        return -EINVAL;
    if (cfg->counter_max && cfg->preload > cfg->counter_max)
        return -EINVAL;
    if (cfg->detached && (cfg->detached != 1 || cfg->writes < 1))
        return -EINVAL;
    if (cfg->unhijack != PYB_UNHIJACK_AT_END && cfg->unhijack != PYB_UNHIJACK_ON_DECAY)
        return -EINVAL;
    if (cfg->writes_kind < PYB_XW_BYPASS || cfg->writes_kind > PYB_XW_DISCARD)
        return -EINVAL;
    if (cfg->track < PYB_TRACK_BYPASS || cfg->track > PYB_TRACK_ALL)
        return -EINVAL;
    if (cfg->invalidate != PYB_INV_AT_SUBMIT && cfg->invalidate != PYB_INV_AFTER_WRITE)
        return -EINVAL;

    pyb_explorer *e = calloc(1, sizeof(*e));
    if (!e)
        return -ENOMEM;
    e->cfg = *cfg;
    pthread_mutex_init(&e->helper.mu, NULL);
    pthread_cond_init(&e->helper.cv, NULL);
    e->cfg.counter_bits = bits;
    e->n_ops = n_ops;
    pyb_cd_config dc = {0};
    dc.device_size = (uint64_t)cfg->n_blocks * cfg->block_size;
    dc.block_size = cfg->block_size;
    dc.region_blocks = 1;
    dc.tracker = NULL;
    dc.check = cfg->check;
    dc.delay_mode = PYB_DELAY_SPIN;
    dc.write_delay_ns = 0;
    dc.bounce_copy = 0;
    dc.no_restart = cfg->no_restart;
    dc.granularity = cfg->granularity;
    dc.track = cfg->track;
    dc.cache_alloc_fail = cfg->cache_alloc_fail; /* counted per schedule: pyb_cd_reset */
    dc.invalidate = cfg->invalidate;
    /* One step per tracker lock hold: a page for the lock variants, a chunk for atomic (a patch: one
     * step per call, whatever this says). */
    dc.split_tracker_calls = cfg->sync == PYB_SYNC_ATOMIC ? 1 : 2;
    int rc = pyb_cd_create(&dc, &e->dev);
    if (rc) {
        free(e);
        return rc;
    }
    for (uint32_t i = 0; i < n_ops; i++) {
        op *o = &e->ops[i];
        if (i < cfg->writes) {
            o->kind = PYB_X_WRITE;
            o->number = (int)i + 1;
        } else if (i < cfg->writes + cfg->reads) {
            o->kind = PYB_X_READ;
            o->number = (int)(i - cfg->writes) + 1;
        } else {
            o->kind = PYB_X_DAEMON;
            o->number = (int)(i - cfg->writes - cfg->reads) + 1;
        }
    }
    *out = e;
    return 0;
}

/* A hand-over spins (yielding) this many times before it sleeps on the condition variable: the
 * explorer's steps between two ENDs are short, and a sleep/wake pair per END costs more than them. */
#define HELPER_SPINS 2000

static void *end_helper_main(void *arg)
{
    pyb_explorer *e = arg;
    for (;;) {
        for (int i = 0; i < HELPER_SPINS && !__atomic_load_n(&e->helper.job, __ATOMIC_ACQUIRE); i++)
            sched_yield();
        pthread_mutex_lock(&e->helper.mu);
        while (!e->helper.job && !e->helper.quit)
            pthread_cond_wait(&e->helper.cv, &e->helper.mu); /* woken by end_on_helper or destroy */
        op *o = e->helper.job;
        int quit = e->helper.quit;
        pthread_mutex_unlock(&e->helper.mu);
        if (quit)
            return NULL;
        pyb_cd_write_step(e->dev, &o->ctx, &o->w); /* END: the patch's own hung bound bounds it */
        pthread_mutex_lock(&e->helper.mu);
        __atomic_store_n(&e->helper.job, NULL, __ATOMIC_RELAXED);
        __atomic_store_n(&e->helper.done, 1, __ATOMIC_RELEASE);
        pthread_cond_broadcast(&e->helper.cv);
        pthread_mutex_unlock(&e->helper.mu);
    }
}

/* Run o's END step on the helper thread and wait for it (release/acquire on job and done, and the
 * mutex, order both ways). Returns 0 or pthread_create's error with nothing run. */
static int end_on_helper(pyb_explorer *e, op *o)
{
    if (!e->helper.started) {
        int rc = pthread_create(&e->helper.th, NULL, end_helper_main, e);
        if (rc)
            return rc;
        e->helper.started = 1;
    }
    pthread_mutex_lock(&e->helper.mu);
    __atomic_store_n(&e->helper.done, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&e->helper.job, o, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&e->helper.cv);
    pthread_mutex_unlock(&e->helper.mu);
    for (int i = 0; i < HELPER_SPINS && !__atomic_load_n(&e->helper.done, __ATOMIC_ACQUIRE); i++)
        sched_yield();
    pthread_mutex_lock(&e->helper.mu);
    while (!e->helper.done) /* as bounded as the step itself (the patch's hung bound) */
        pthread_cond_wait(&e->helper.cv, &e->helper.mu);
    pthread_mutex_unlock(&e->helper.mu);
    return 0;
}

void pyb_explore_destroy(pyb_explorer *e)
{
    if (!e)
        return;
    if (e->helper.started) {
        pthread_mutex_lock(&e->helper.mu);
        e->helper.quit = 1;
        pthread_cond_broadcast(&e->helper.cv);
        pthread_mutex_unlock(&e->helper.mu);
        pthread_join(e->helper.th, NULL);
    }
    pthread_mutex_destroy(&e->helper.mu);
    pthread_cond_destroy(&e->helper.cv);
    pyb_tracker_destroy(e->tracker);
    pyb_kpatch_tracker_destroy(e->patch_t, NULL, NULL);
    pyb_cd_destroy(e->dev);
    free(e);
}

const pyb_explore_result *pyb_explore_result_of(const pyb_explorer *e) { return &e->res; }

pyb_kpatch_tracker *pyb_explore_patch(const pyb_explorer *e, int *err)
{
    if (err)
        *err = e->patch_error;
    return e->patch_t;
}

int pyb_explore_patch_init_error(const pyb_explorer *e) { return e->patch_init_error; }

static int patch_should_fail(void *arg, uint64_t size) { return pyb_fault_should_fail(arg, size); }

/* A fresh patch instance for the schedule; 0 or -ENOMEM / -EIO. */
static int reset_patch(pyb_explorer *e)
{
    pyb_kpatch_tracker_destroy(e->patch_t, NULL, NULL);
    e->patch_t = NULL;
    e->patch_error = 0;
    pyb_kp_config kc = {0};
    kc.device_size = (uint64_t)e->cfg.n_blocks * e->cfg.block_size;
    kc.should_fail = patch_should_fail;
    kc.should_fail_arg = &e->fault;
    kc.hung_ns = e->cfg.hung_ns;
    kc.end_bio_intact = e->cfg.end_bio_intact;
    /* write_end in every context the kernel may run cached_dev_write_complete in, rotating over the
     * END steps (the module counts them across schedules); INLINE ones run on the explorer's own thread */
    kc.end_contexts = PYB_KP_END_ALL;
    kc.fail_mode = e->cfg.patch_fail_mode;
    /* Init runs without fault injection (the shim's rule); then exactly the fault_at-th allocation
     * of the operations fails, as for the lab's tracker. */
    pyb_fault_init(&e->fault, 0.0, 1, 0, 0, 0);
    if (e->cfg.fault_at)
        pyb_fault_init(&e->fault, 1.0, e->cfg.fault_at, 1, 0, 0);
    int err = 0, rc = pyb_kpatch_tracker_create(e->cfg.patch, &kc, &e->patch_t, &err);
    if (rc == PYB_KP_ENOMEM)
        return -ENOMEM;
    if (rc != PYB_KP_OK) {
        e->patch_init_error = rc == PYB_KP_EINIT ? err : 0;
        e->patch_error = rc == PYB_KP_EINIT ? PYB_OPS_EBROKEN : rc;
        return -EIO; /* e->patch_t is kept for its reports */
    }
    pyb_ops_tracker o = {&pyb_kpatch_ops, e->patch_t};
    return pyb_cd_set_ops(e->dev, o) ? -EINVAL : 0;
}

/* ------------------------------------------------------------------------------------------------ */
/* One schedule                                                                                       */

static int reset(pyb_explorer *e)
{
    pyb_tracker_destroy(e->tracker);
    e->tracker = NULL;
    pyb_cd_set_tracker(e->dev, NULL);
    pyb_cd_reset(e->dev);
    e->end_thread_error = 0;
    if (e->cfg.patch) {
        int rc = reset_patch(e);
        if (rc)
            return rc;
    } else if (e->cfg.sync != PYB_EXPLORE_NO_TRACKING) {
        pyb_tracker_config tc = {0};
        tc.device_size = (uint64_t)e->cfg.n_blocks * e->cfg.block_size;
        tc.chunk_size = e->cfg.chunk_size;
        tc.counter_bits = e->cfg.counter_bits;
        tc.counter_max = e->cfg.counter_max;
        tc.sync = e->cfg.sync;
        tc.overflow = e->cfg.overflow;
        tc.alloc_failure = e->cfg.alloc_failure;
        tc.unhijack = e->cfg.unhijack;
        tc.pool_pages = e->cfg.alloc_failure == PYB_ALLOC_POOL || e->cfg.alloc_failure == PYB_ALLOC_MEMPOOL
                            ? e->cfg.pool_pages : 0;
        /* The preload runs with no failure; then exactly the fault_at-th allocation of the
         * operations fails (every fault_at-th call may fail, once). */
        pyb_fault_init(&e->fault, 0.0, 1, 0, 0, 0);
        tc.fault = &e->fault;
        int rc = pyb_tracker_create(&tc, &e->tracker);
        if (rc)
            return rc;
        e->counter_max = pyb_tracker_counter_max(e->tracker);
        if (e->cfg.preload) {
            pyb_ctx ctx = PYB_CTX_INIT;
            uint64_t resume;
            for (uint64_t i = 0; i < e->cfg.preload; i++)
                pyb_tracker_start(e->tracker, &ctx, 0, e->cfg.block_size, 0, &resume);
            pyb_tracker_ctx_done(e->tracker, &ctx);
        }
        if (e->cfg.fault_at)
            pyb_fault_init(&e->fault, 1.0, e->cfg.fault_at, 1, 0, 0);
        pyb_cd_set_tracker(e->dev, e->tracker);
    }
    for (uint32_t i = 0; i < e->n_ops; i++) {
        op *o = &e->ops[i];
        pyb_cd_ctx_init(e->dev, &o->ctx);
        o->done = 0;
        if (o->kind == PYB_X_WRITE) {
            pyb_cd_write_init(&o->w, 0, e->cfg.write_blocks);
            int wt = e->cfg.writes_kind == PYB_XW_WRITETHROUGH || (e->cfg.writes_kind == PYB_XW_MIXED && o->number % 2 == 0);
            o->w.kind = wt ? PYB_WK_WRITETHROUGH : e->cfg.writes_kind == PYB_XW_DISCARD ? PYB_WK_DISCARD : PYB_WK_BYPASS;
            if (e->cfg.detached && o->number == 1) {
                /* Submitted while detached, before every other operation; the device then attaches. */
                o->w.kind = PYB_WK_DETACHED;
                pyb_cd_write_step(e->dev, &o->ctx, &o->w); /* START: a version; a tracker call only under track all */
                pyb_cd_write_step(e->dev, &o->ctx, &o->w); /* INVALIDATE: nothing on the detached path */
                pyb_cd_ctx_done(e->dev, &o->ctx);
            }
        }
        else if (o->kind == PYB_X_READ)
            pyb_cd_read_init(e->dev, &o->ctx, &o->r, 0, e->cfg.read_blocks);
    }
    e->run_untracked = e->run_underflow = e->run_restart = e->run_wrap = e->run_clamp = 0;
    e->run_blocked = e->run_reclaimed = e->run_capped = e->run_stuck = e->run_pruned = 0;
    return 0;
}

static int op_done(const op *o)
{
    switch (o->kind) {
    case PYB_X_WRITE: return o->w.step == PYB_W_DONE;
    case PYB_X_READ: return o->r.step == PYB_R_DONE;
    default: return o->done;
    }
}

/* Can o step now? Everything unfinished can, except a write whose START would block: under
 * overflow "wait", its next counter is at the maximum. A start that waits for a mempool page can
 * always step: its step is mempool_alloc's next attempt (the second, or the one after a round of
 * waiting, which ends by the round's timeout even when nothing is freed). */
static int op_enabled(const pyb_explorer *e, const op *o)
{
    if (op_done(o))
        return 0;
    if (o->kind == PYB_X_WRITE && o->w.step == PYB_W_START && e->tracker && e->cfg.overflow == PYB_OVERFLOW_WAIT &&
        !(o->w.kind == PYB_WK_WRITETHROUGH && e->cfg.track == PYB_TRACK_BYPASS)) /* never counted: never waits */
        return pyb_tracker_count(e->tracker, o->w.blk * e->cfg.block_size + o->w.cursor) < e->counter_max;
    return 1;
}

static pyb_explore_step *record(pyb_explorer *e, const op *o, int step)
{
    if (e->res.n_steps >= PYB_EXPLORE_MAX_RECORDS)
        return NULL;
    pyb_explore_step *s = &e->res.steps[e->res.n_steps++];
    memset(s, 0, sizeof(*s));
    s->kind = (uint8_t)(o ? o->kind : PYB_X_ORACLE);
    s->number = (uint8_t)(o ? o->number : 0);
    s->step = (uint8_t)step;
    return s;
}

static uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }

/* Run one step of operation o; record it when verbose. */
static void step(pyb_explorer *e, op *o, int verbose)
{
    pyb_tstats t0 = o->ctx.tctx.stats; /* the lab tracker's; a patch's context is empty (all zero) */
    int tracked = e->tracker || e->patch_t;
    uint32_t flags = tracked ? 0 : PYB_XF_NO_TRACKING;
    if (o->kind == PYB_X_DAEMON) {
        uint64_t freed = e->tracker ? pyb_tracker_reclaim(e->tracker) : 0;
        o->done = 1;
        e->run_reclaimed |= freed != 0;
        pyb_explore_step *s = verbose ? record(e, o, PYB_X_RECLAIM) : NULL;
        if (s) {
            s->flags = flags;
            s->version = freed;
        }
        return;
    }
    if (o->kind == PYB_X_WRITE) {
        pyb_cd_write *w = &o->w;
        uint64_t cur0 = w->cursor, base = w->blk * e->cfg.block_size;
        int s_ran;
        if (e->patch_t && w->step == PYB_W_END &&
            e->cfg.patch->claim_end_context(e->patch_t->inst) == PYB_KP_END_INLINE) {
            /* inline on the submitting thread (the closure's last reference dropped there): the
             * explorer's own thread, which ran the write's START */
            s_ran = pyb_cd_write_step(e->dev, &o->ctx, w);
        } else if (e->patch_t && w->step == PYB_W_END) {
            /* A patch's write_end in interrupt or worker context runs on a thread other than the one
             * that ran its write_start (docs/design.md, "check-patch"): the helper thread runs the step,
             * and the explorer waits for it before the next one (so the search stays single-stepped). */
            int rc = end_on_helper(e, o);
            if (rc) {
                e->end_thread_error = rc;
                return;
            }
            s_ran = PYB_W_END;
        } else {
            s_ran = pyb_cd_write_step(e->dev, &o->ctx, w);
        }
        const pyb_tstats *t1 = &o->ctx.tctx.stats;
        int under = t1->underflows != t0.underflows, wrap = t1->overflow_wraps != t0.overflow_wraps;
        int clamp = t1->overflow_clamps != t0.overflow_clamps;
        e->run_untracked |= w->untracked;
        e->run_underflow |= under;
        e->run_wrap |= wrap;
        e->run_clamp |= clamp;
        e->run_blocked |= w->blocked;
        pyb_cd_ctx_done(e->dev, &o->ctx);
        pyb_explore_step *s = verbose ? record(e, o, s_ran) : NULL;
        if (!s)
            return;
        s->version = w->version;
        s->lo = w->blk;
        s->hi = w->blk + w->nblk;
        flags |= w->kind == PYB_WK_WRITETHROUGH ? PYB_XF_WRITETHROUGH : 0;
        flags |= w->kind == PYB_WK_WRITETHROUGH && w->fallback ? PYB_XF_FALLBACK : 0;
        flags |= w->late ? PYB_XF_AFTER_WRITE : 0;
        flags |= w->kind == PYB_WK_DISCARD ? PYB_XF_DISCARD : 0;
        flags |= w->kind == PYB_WK_DETACHED ? PYB_XF_DETACHED : 0;
        if ((s_ran == PYB_W_START || s_ran == PYB_W_END) && tracked && !w->counted)
            flags |= PYB_XF_UNCOUNTED;
        else if ((s_ran == PYB_W_START || s_ran == PYB_W_END) && tracked) {
            uint64_t len = w->nblk * e->cfg.block_size;
            int more = w->step == s_ran;
            s->lo = base + cur0;
            s->hi = more ? base + w->cursor : base + len;
            s->count = e->tracker ? pyb_tracker_count(e->tracker, s->lo) : 0; /* a patch's: unknown */
            flags |= more ? PYB_XF_MORE : 0;
            flags |= w->untracked && s_ran == PYB_W_START && !more ? PYB_XF_UNTRACKED : 0;
            flags |= w->blocked ? PYB_XF_BLOCKED : 0;
            flags |= under ? PYB_XF_UNDERFLOW : 0;
            flags |= wrap ? PYB_XF_WRAPPED : 0;
            flags |= clamp ? PYB_XF_CLAMPED : 0;
        }
        s->flags = flags;
        return;
    }

    pyb_cd_read *r = &o->r;
    uint64_t before[PYB_EXPLORE_REC_BLOCKS] = {0}, seq_before = 0;
    int restarts0 = r->restarts;
    int next = r->step;
    if (verbose && next == PYB_R_LOOKUP)
        for (uint64_t i = 0; i < min_u64(r->nblk, PYB_EXPLORE_REC_BLOCKS); i++)
            before[i] = pyb_cd_cache_entry(e->dev, r->blk + i);
    if (verbose && next == PYB_R_CHECK_KEY)
        seq_before = r->seq[r->miss ? __builtin_ctzll(r->miss) : 0];
    int s_ran = pyb_cd_read_step(e->dev, &o->ctx, r);
    int restarted = r->restarts != restarts0;
    e->run_restart |= restarted;
    if (restarted && (uint32_t)r->restarts > e->cfg.max_restarts)
        e->run_capped = 1;
    pyb_cd_ctx_done(e->dev, &o->ctx);
    if (!verbose)
        return;
    pyb_explore_step *s = record(e, o, s_ran);
    if (!s)
        return;
    uint64_t nrec = min_u64(r->nblk, PYB_EXPLORE_REC_BLOCKS);
    s->lo = r->blk;
    s->hi = r->blk + r->nblk;
    s->nvals = (uint8_t)nrec;
    switch (s_ran) {
    case PYB_R_LOOKUP:
        for (uint64_t i = 0; i < nrec; i++)
            s->a[i] = before[i];
        flags |= r->hit ? PYB_XF_HIT : 0;
        flags |= r->active ? PYB_XF_ACTIVE : 0;
        break;
    case PYB_R_CHECK:
        flags |= r->active ? PYB_XF_ACTIVE : 0;
        flags |= r->step == PYB_R_CHECK ? PYB_XF_MORE : 0;
        break;
    case PYB_R_CHECK_KEY: {
        uint64_t first = r->miss ? (uint64_t)__builtin_ctzll(r->miss) : 0;
        s->count = seq_before;
        if (restarted) {
            s->seq_now = pyb_cd_node_seq(e->dev, r->blk + first);
        } else {
            s->seq_now = pyb_cd_node_seq(e->dev, r->blk + first) - 1; /* before its own insertion */
            flags |= s->seq_now != seq_before ? PYB_XF_FORCED : 0;
        }
        s->version = (uint64_t)r->restarts;
        flags |= restarted ? PYB_XF_RESTART : 0;
        flags |= e->run_capped ? PYB_XF_CAPPED : 0;
        for (uint64_t i = 0; i < nrec; i++)
            s->b[i] = r->miss >> i & 1;
        break;
    }
    case PYB_R_BACKING:
        for (uint64_t i = 0; i < nrec; i++) {
            s->a[i] = r->version[i];
            s->b[i] = r->miss >> i & 1;
        }
        flags |= r->active ? PYB_XF_ACTIVE : 0;
        break;
    case PYB_R_INSERT:
        flags |= r->active ? PYB_XF_ACTIVE : 0;
        s->count = (uint64_t)r->inserted;
        s->version = (uint64_t)r->collided;
        break;
    default:
        break;
    }
    s->flags = flags;
    if (r->step == PYB_R_DONE) {
        pyb_explore_step *ret = record(e, o, PYB_X_RETURN);
        if (ret) {
            ret->lo = r->blk;
            ret->hi = r->blk + r->nblk;
            ret->nvals = (uint8_t)nrec;
            for (uint64_t i = 0; i < nrec; i++) {
                ret->a[i] = r->version[i];
                ret->b[i] = r->floor[i];
            }
            ret->flags = r->stale ? PYB_XF_STALE : 0;
        }
    }
}

/*
 * Partial-order reduction (cfg.reduce): sleep sets (Godefroid). Two steps are independent when
 * neither writes shared state the other reads or writes; then both orders reach the same state and
 * every read sees the same values, so the oracle's verdict is the same and only one order needs
 * running. The state is abstracted into five objects, and a step's footprint is what its code
 * touches (every explored operation covers block 0, so blocks are not told apart):
 *   TRACKER (counters, pages, the allocation-fault count), VERSION (the write version source),
 *   CACHE (cache entries, node sequences and newest versions), BACKING, COMPLETED (the oracle's
 *   floors), ALLOC (the count of writethrough cache allocations drawn).
 * Every interleaving is equivalent to an explored one (each Mazurkiewicz trace is explored at least
 * once); "schedules" then counts the explored ones.
 */
enum { OBJ_TRACKER = 1, OBJ_VERSION = 2, OBJ_CACHE = 4, OBJ_BACKING = 8, OBJ_COMPLETED = 16, OBJ_ALLOC = 32 };

typedef struct footprint {
    unsigned reads, writes;
} footprint;

static footprint footprint_of(const op *o)
{
    footprint f = {0, 0};
    if (o->kind == PYB_X_DAEMON) {
        f.writes = OBJ_TRACKER;
    } else if (o->kind == PYB_X_WRITE) {
        switch (o->w.step) {
        /* ALLOC: a writethrough START draws from the device's cache-allocation count, which decides
         * which write's insert falls back (VERSION already orders every START with every other). */
        case PYB_W_START:
            f.writes = OBJ_TRACKER | OBJ_VERSION | (o->w.kind == PYB_WK_WRITETHROUGH ? OBJ_ALLOC : 0);
            break;
        case PYB_W_INVALIDATE: f.writes = OBJ_CACHE; break;
        case PYB_W_LAND: f.writes = OBJ_BACKING | OBJ_TRACKER; break; /* TRACKER: the test hook */
        default: f.writes = OBJ_TRACKER | OBJ_COMPLETED; break;
        }
    } else {
        switch (o->r.step) {
        case PYB_R_LOOKUP: f.reads = OBJ_CACHE | OBJ_COMPLETED; break;
        case PYB_R_CHECK: f.reads = OBJ_TRACKER | OBJ_COMPLETED; break;
        case PYB_R_CHECK_KEY: f.writes = OBJ_CACHE; break;
        case PYB_R_BACKING: f.reads = OBJ_BACKING; break;
        default: f.writes = OBJ_CACHE; break;
        }
    }
    return f;
}

static int dependent(footprint a, footprint b)
{
    return (a.writes & (b.reads | b.writes)) || (b.writes & a.reads);
}

/* Replay the current prefix, then take the lowest candidate operation at every further depth.
 * Returns 0 or a negative errno. */
static int run_one(pyb_explorer *e, int verbose)
{
    int rc = reset(e);
    if (rc)
        return rc;
    uint32_t d = 0;
    e->sleep[0] = 0;
    for (; d < PYB_EXPLORE_MAX_STEPS && !e->run_capped && (!e->cut || d < e->cut); d++) {
        uint32_t en = 0, unfinished = 0;
        for (uint32_t i = 0; i < e->n_ops; i++) {
            unfinished |= (uint32_t)!op_done(&e->ops[i]) << i;
            en |= (uint32_t)op_enabled(e, &e->ops[i]) << i;
        }
        e->run_blocked |= unfinished != en; /* a write's start held back by a full counter */
        if (!en) {
            e->run_stuck = unfinished != 0;
            if (e->run_stuck && verbose)
                record(e, NULL, PYB_X_STUCK);
            break;
        }
        uint32_t cand = en & ~e->sleep[d];
        if (!cand) { /* every enabled operation is asleep: an equivalent order was explored */
            e->run_pruned = 1;
            break;
        }
        uint32_t c = d < e->prefix ? e->choice[d] : (uint32_t)__builtin_ctz(cand);
        if (!(cand >> c & 1)) /* a given prefix that the search would not take here */
            return -EINVAL;
        e->choice[d] = (uint8_t)c;
        e->enabled[d] = cand;
        if (e->cfg.reduce) {
            /* The child's sleep set: asleep or already-explored siblings independent of c. */
            uint32_t keep = 0, s = (e->sleep[d] | (cand & ((1u << c) - 1))) & en;
            footprint fc = footprint_of(&e->ops[c]);
            for (uint32_t i = 0; i < e->n_ops; i++)
                if (s >> i & 1 && !dependent(footprint_of(&e->ops[i]), fc))
                    keep |= 1u << i;
            e->sleep[d + 1] = keep;
        } else {
            e->sleep[d + 1] = 0;
        }
        step(e, &e->ops[c], verbose);
        if (e->end_thread_error) { /* nothing of the step ran */
            e->depth = d + 1;
            return -EAGAIN;
        }
        if (pyb_cd_error(e->dev)) { /* a patch's operation failed: stop here, keep its instance */
            e->patch_error = pyb_cd_error(e->dev);
            e->depth = d + 1;
            return -EIO;
        }
    }
    if (d == PYB_EXPLORE_MAX_STEPS)
        return -E2BIG;
    e->depth = d;
    return 0;
}

/* Judge the run that just finished; returns 1 on a violation. Every run that was not pruned is a
 * schedule. A run that ended stuck or cut at max_restarts is a prefix of real executions: the reads
 * that returned in it are judged like any other (a stale one is a violation), and only the
 * quiescence check (stale cached blocks) is skipped, since operations are still in flight there. */
static int judge(pyb_explorer *e, int verbose)
{
    if (e->run_pruned) {
        if (!verbose)
            e->res.pruned_runs++;
        return 0;
    }
    int partial = e->run_capped || e->run_stuck;
    int stale_read = 0, collision = 0, bypass = 0;
    for (uint32_t i = 0; i < e->n_ops; i++) {
        const op *o = &e->ops[i];
        if (o->kind != PYB_X_READ)
            continue;
        stale_read |= o->r.stale != 0; /* set only when the read returns (pyb_cd_read_step) */
        collision |= o->r.collided != 0;
        bypass |= o->r.active != 0;
    }
    uint64_t stale_cached = partial ? 0 : pyb_cd_stale_cached_blocks(e->dev);
    if (verbose) {
        for (uint64_t b = 0; !partial && b < pyb_cd_n_blocks(e->dev); b++) {
            uint64_t entry = pyb_cd_cache_entry(e->dev, b), v = pyb_cd_backing_version(e->dev, b);
            if (PYB_CD_TAG(entry) == PYB_CD_TAG_VALID && PYB_CD_PAYLOAD(entry) != v) {
                pyb_explore_step *s = record(e, NULL, PYB_X_STALE_BLOCK);
                if (s) {
                    s->lo = b;
                    s->hi = b + 1;
                    s->nvals = 1;
                    s->a[0] = PYB_CD_PAYLOAD(entry);
                    s->b[0] = v;
                }
            }
        }
        return 0;
    }
    e->res.schedules++;
    e->res.restart_capped_schedules += (uint64_t)e->run_capped;
    e->res.stuck_schedules += (uint64_t)(e->run_stuck && !e->run_capped);
    e->res.stale_read_schedules += (uint64_t)stale_read;
    e->res.stale_cache_schedules += stale_cached != 0;
    e->res.collision_schedules += (uint64_t)collision;
    e->res.bypass_schedules += (uint64_t)bypass;
    e->res.untracked_schedules += (uint64_t)e->run_untracked;
    e->res.underflow_schedules += (uint64_t)e->run_underflow;
    e->res.restart_schedules += (uint64_t)e->run_restart;
    e->res.wrap_schedules += (uint64_t)e->run_wrap;
    e->res.clamp_schedules += (uint64_t)e->run_clamp;
    e->res.blocked_schedules += (uint64_t)e->run_blocked;
    e->res.reclaimed_schedules += (uint64_t)e->run_reclaimed;
    if (e->patch_t) {
        pyb_kp_stats ks;
        e->cfg.patch->stats(e->patch_t->inst, &ks);
        e->res.report_schedules += ks.reports != 0;
    }
    if ((e->tracker || e->patch_t) && e->cfg.fault_at)
        e->res.faults_injected += pyb_fault_injected(&e->fault);
    int violation = stale_read || stale_cached;
    e->res.violations += (uint64_t)violation;
    e->res.partial_violation_schedules += (uint64_t)(violation && partial);
    return violation;
}

/* Advance to the next schedule; returns 0 when the search is complete. */
static int advance(pyb_explorer *e)
{
    for (uint32_t d = e->depth; d-- > e->fixed;) {
        uint32_t later = e->enabled[d] & ~((2u << e->choice[d]) - 1);
        if (later) {
            e->choice[d] = (uint8_t)__builtin_ctz(later);
            e->prefix = d + 1;
            return 1;
        }
    }
    return 0;
}

int pyb_explore_run(pyb_explorer *e, uint64_t budget)
{
    if (e->res.finished)
        return 1;
    for (uint64_t n = 0; !budget || n < budget; n++) {
        if (e->started && !advance(e)) {
            e->res.finished = 1;
            return 1;
        }
        e->started = 1;
        int rc = run_one(e, 0);
        if (rc)
            return rc;
        if (judge(e, 0) && !e->res.n_steps) {
            /* Replay the same schedule, recording each step. */
            uint32_t depth = e->depth;
            uint32_t prefix = e->prefix;
            e->prefix = depth;
            rc = run_one(e, 1);
            if (rc)
                return rc;
            judge(e, 1);
            e->prefix = prefix;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------------ */
/* Splitting the search by prefix                                                                     */
/*
 * The search is a depth-first walk whose state at a depth (the candidates, and with reduce the
 * sleep set) is a function of the choices above it alone: siblings explored earlier are exactly the
 * lower-numbered candidates. So the subtrees below the prefixes of one depth partition the
 * schedules, each subtree can be searched on its own with the same counts, and the prefixes' order
 * is the search's order (which makes "the first counterexample" the same whoever runs what).
 */

int pyb_explore_set_prefix(pyb_explorer *e, const uint8_t *choices, uint32_t n)
{
    if (e->started || n > PYB_EXPLORE_MAX_STEPS)
        return -EINVAL;
    for (uint32_t d = 0; d < n; d++) {
        if (choices[d] >= e->n_ops)
            return -EINVAL;
        e->choice[d] = choices[d];
    }
    e->fixed = e->prefix = n;
    return 0;
}

int64_t pyb_explore_prefixes(pyb_explorer *e, uint32_t depth, uint8_t *out, uint32_t *lens, uint32_t max)
{
    if (e->started || !depth || depth > PYB_EXPLORE_MAX_STEPS)
        return -EINVAL;
    int64_t n = 0;
    int rc = 0;
    e->cut = depth;
    e->prefix = e->fixed;
    for (int first = 1; first || advance(e); first = 0) {
        rc = run_one(e, 0);
        if (rc)
            break;
        if ((uint64_t)n == max) {
            rc = -ENOSPC;
            break;
        }
        memcpy(out + (uint64_t)n * depth, e->choice, e->depth);
        lens[n++] = e->depth;
    }
    /* Leave the explorer as created (with its fixed prefix, if any). */
    e->cut = 0;
    e->prefix = e->fixed;
    e->depth = 0;
    return rc ? rc : n;
}
