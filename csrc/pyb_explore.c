/* pyb_explore.c - see pyb_explore.h. Single-threaded: no field here is shared between threads. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "pyb_explore.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct op {
    int is_write;
    int number; /* 1-based, per kind: W1, W2, R1 ... */
    pyb_cd_write w;
    pyb_cd_read r;
    pyb_cd_ctx ctx;
} op;

struct pyb_explorer {
    pyb_explore_config cfg;
    pyb_cachedev *dev;
    pyb_tracker *tracker; /* of the schedule being run, or NULL */
    pyb_fault fault;
    uint32_t n_ops;
    op ops[PYB_EXPLORE_MAX_OPS];

    /* The search: the choices of the last run and which operations could step at each depth. */
    uint8_t choice[PYB_EXPLORE_MAX_STEPS];
    uint32_t enabled[PYB_EXPLORE_MAX_STEPS];
    uint32_t depth;  /* steps of the last run */
    uint32_t prefix; /* choices to replay in the next run */
    int started;

    /* Per-run observations. */
    int run_untracked, run_underflow;
    pyb_explore_result res;
};

int pyb_explore_create(const pyb_explore_config *cfg, pyb_explorer **out)
{
    *out = NULL;
    uint32_t n_ops = cfg->writes + cfg->reads;
    if (!n_ops || n_ops > PYB_EXPLORE_MAX_OPS)
        return -EINVAL;
    if (!cfg->write_blocks || !cfg->read_blocks || cfg->read_blocks > PYB_CD_MAX_READ_BLOCKS ||
        cfg->write_blocks > cfg->n_blocks || cfg->read_blocks > cfg->n_blocks)
        return -EINVAL;
    if (cfg->sync != PYB_EXPLORE_NO_TRACKING && (cfg->sync < PYB_SYNC_GLOBAL || cfg->sync > PYB_SYNC_ATOMIC))
        return -EINVAL;
    if (cfg->check != PYB_CHECK_AFTER && cfg->check != PYB_CHECK_BEFORE)
        return -EINVAL;
    if (cfg->alloc_failure < PYB_ALLOC_UNTRACKED || cfg->alloc_failure > PYB_ALLOC_POOL)
        return -EINVAL;
    if (cfg->counter_bits && cfg->counter_bits != 16 && cfg->counter_bits != 32 && cfg->counter_bits != 64)
        return -EINVAL;
    if (cfg->chunk_size < 512 || (cfg->chunk_size & (cfg->chunk_size - 1)))
        return -EINVAL;

    pyb_explorer *e = calloc(1, sizeof(*e));
    if (!e)
        return -ENOMEM;
    e->cfg = *cfg;
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
    int rc = pyb_cd_create(&dc, &e->dev);
    if (rc) {
        free(e);
        return rc;
    }
    for (uint32_t i = 0; i < n_ops; i++) {
        e->ops[i].is_write = i < cfg->writes;
        e->ops[i].number = (int)(e->ops[i].is_write ? i + 1 : i - cfg->writes + 1);
    }
    *out = e;
    return 0;
}

void pyb_explore_destroy(pyb_explorer *e)
{
    if (!e)
        return;
    pyb_tracker_destroy(e->tracker);
    pyb_cd_destroy(e->dev);
    free(e);
}

const pyb_explore_result *pyb_explore_result_of(const pyb_explorer *e) { return &e->res; }

/* ------------------------------------------------------------------------------------------------ */
/* One schedule                                                                                       */

static int reset(pyb_explorer *e)
{
    pyb_tracker_destroy(e->tracker);
    e->tracker = NULL;
    pyb_cd_set_tracker(e->dev, NULL);
    pyb_cd_reset(e->dev);
    if (e->cfg.sync != PYB_EXPLORE_NO_TRACKING) {
        pyb_tracker_config tc = {0};
        tc.device_size = (uint64_t)e->cfg.n_blocks * e->cfg.block_size;
        tc.chunk_size = e->cfg.chunk_size;
        tc.counter_bits = e->cfg.counter_bits ? e->cfg.counter_bits : (e->cfg.sync == PYB_SYNC_ATOMIC ? 64 : 16);
        tc.sync = e->cfg.sync;
        tc.overflow = PYB_OVERFLOW_WAIT;
        tc.alloc_failure = e->cfg.alloc_failure;
        tc.pool_pages = e->cfg.alloc_failure == PYB_ALLOC_POOL ? e->cfg.pool_pages : 0;
        tc.fault = NULL;
        if (e->cfg.fault_at) {
            /* Exactly the fault_at-th allocation fails: every fault_at-th call may fail, once. */
            pyb_fault_init(&e->fault, 1.0, e->cfg.fault_at, 1, 0, 0);
            tc.fault = &e->fault;
        }
        int rc = pyb_tracker_create(&tc, &e->tracker);
        if (rc)
            return rc;
        pyb_cd_set_tracker(e->dev, e->tracker);
    }
    for (uint32_t i = 0; i < e->n_ops; i++) {
        op *o = &e->ops[i];
        pyb_cd_ctx_init(e->dev, &o->ctx);
        if (o->is_write)
            pyb_cd_write_init(&o->w, 0, e->cfg.write_blocks);
        else
            pyb_cd_read_init(e->dev, &o->ctx, &o->r, 0, e->cfg.read_blocks);
    }
    e->run_untracked = e->run_underflow = 0;
    return 0;
}

static int op_done(const op *o) { return o->is_write ? o->w.step == PYB_W_DONE : o->r.step == PYB_R_DONE; }

/* Append one line to the counterexample. */
static void line(pyb_explorer *e, const char *fmt, ...)
{
    if (e->res.counterexample_lines >= PYB_EXPLORE_MAX_LINES)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->res.counterexample[e->res.counterexample_lines++], PYB_EXPLORE_LINE, fmt, ap);
    va_end(ap);
}

static const char *entry_text(uint64_t entry, char *buf, size_t n)
{
    if (entry == PYB_CD_EMPTY)
        snprintf(buf, n, "empty");
    else if (PYB_CD_TAG(entry) == PYB_CD_TAG_CHECK)
        snprintf(buf, n, "check key #%llu", (unsigned long long)(PYB_CD_PAYLOAD(entry) & 0xFFFFFFFFFull));
    else
        snprintf(buf, n, "valid v%llu", (unsigned long long)PYB_CD_PAYLOAD(entry));
    return buf;
}

/* Blocks [0, n) as text: "block 0" or "blocks [0, 2)". */
static const char *blocks_text(uint64_t n, char *buf, size_t size)
{
    if (n == 1)
        snprintf(buf, size, "block 0");
    else
        snprintf(buf, size, "blocks [0, %llu)", (unsigned long long)n);
    return buf;
}

/* Run one step of operation o; describe it when verbose. */
static void step(pyb_explorer *e, op *o, int verbose)
{
    char bt[48], et[64];
    uint64_t under0 = o->ctx.tctx.stats.underflows;
    if (o->is_write) {
        int s = pyb_cd_write_step(e->dev, &o->ctx, &o->w);
        e->run_untracked |= o->w.untracked;
        int under = o->ctx.tctx.stats.underflows != under0;
        e->run_underflow |= under;
        if (verbose) {
            blocks_text(o->w.nblk, bt, sizeof(bt));
            switch (s) {
            case PYB_W_START:
                line(e, "W%d start: takes version v%llu; %s", o->number, (unsigned long long)o->w.version,
                     !e->tracker ? "no tracking (unpatched)"
                     : o->w.untracked ? "tracker start: page allocation failed, write left UNTRACKED"
                                      : "tracker start: chunk counted");
                break;
            case PYB_W_INVALIDATE:
                line(e, "W%d invalidate: cache %s emptied (check keys included)", o->number, bt);
                break;
            case PYB_W_LAND:
                line(e, "W%d land: v%llu reaches the backing device (%s)", o->number, (unsigned long long)o->w.version, bt);
                break;
            case PYB_W_END:
                line(e, "W%d end: %s; v%llu completed", o->number,
                     !e->tracker ? "no tracking"
                     : under ? "tracker end found a zero counter (UNDERFLOW refused)" : "tracker end",
                     (unsigned long long)o->w.version);
                break;
            default:
                break;
            }
        }
    } else {
        pyb_cd_read *r = &o->r;
        uint64_t before[PYB_CD_MAX_READ_BLOCKS];
        int next = pyb_cd_read_next(e->dev, r);
        if (verbose && next == PYB_R_LOOKUP)
            for (uint64_t i = 0; i < r->nblk; i++)
                before[i] = pyb_cd_cache_entry(e->dev, r->blk + i);
        int s = pyb_cd_read_step(e->dev, &o->ctx, r);
        if (verbose) {
            char buf[PYB_EXPLORE_LINE];
            size_t at = 0;
            buf[0] = 0;
            switch (s) {
            case PYB_R_LOOKUP:
                for (uint64_t i = 0; i < r->nblk && at < sizeof(buf); i++)
                    at += (size_t)snprintf(buf + at, sizeof(buf) - at, "%sblock %llu %s", i ? ", " : "",
                                           (unsigned long long)(r->blk + i), entry_text(before[i], et, sizeof(et)));
                if (r->hit)
                    line(e, "R%d lookup: %s -> hit", o->number, buf);
                else
                    line(e, "R%d lookup: %s -> miss; %s", o->number, buf,
                         r->checked && r->active ? "already bypassing, no check key"
                                                 : "check key placed on the missed blocks");
                break;
            case PYB_R_CHECK:
                line(e, "R%d tracker check (%s the check key): %s", o->number,
                     r->step == PYB_R_LOOKUP ? "BEFORE" : "after",
                     r->active ? "an active write overlaps -> the read bypasses the cache"
                               : "no active write");
                break;
            case PYB_R_BACKING:
                for (uint64_t i = 0; i < r->nblk && at < sizeof(buf); i++)
                    if (r->miss >> i & 1)
                        at += (size_t)snprintf(buf + at, sizeof(buf) - at, "%sblock %llu = v%llu", at ? ", " : "",
                                               (unsigned long long)(r->blk + i), (unsigned long long)r->version[i]);
                line(e, "R%d backing read: %s", o->number, buf);
                break;
            case PYB_R_INSERT:
                if (r->active)
                    line(e, "R%d replace-insert skipped (bypass): nothing cached", o->number);
                else if (r->collided)
                    line(e, "R%d replace-insert: check key gone on %d block(s) -> miss collision; %d block(s) cached",
                         o->number, r->collided, r->inserted);
                else
                    line(e, "R%d replace-insert: check key intact -> %d block(s) cached", o->number, r->inserted);
                break;
            default:
                break;
            }
            if (r->step == PYB_R_DONE) {
                at = 0;
                buf[0] = 0;
                for (uint64_t i = 0; i < r->nblk && at < sizeof(buf); i++)
                    at += (size_t)snprintf(buf + at, sizeof(buf) - at, "%sv%llu%s", i ? ", " : "",
                                           (unsigned long long)r->version[i],
                                           r->version[i] < r->floor[i] ? " (STALE)" : "");
                if (r->stale)
                    line(e, "R%d returns %s: STALE READ, a newer version had completed before R%d began",
                         o->number, buf, o->number);
                else
                    line(e, "R%d returns %s", o->number, buf);
            }
        }
    }
    pyb_cd_ctx_done(e->dev, &o->ctx);
}

/* Replay the current prefix, then take the lowest enabled operation at every further depth.
 * Returns 0 or a negative errno. */
static int run_one(pyb_explorer *e, int verbose)
{
    int rc = reset(e);
    if (rc)
        return rc;
    uint32_t d = 0;
    for (;; d++) {
        uint32_t en = 0;
        for (uint32_t i = 0; i < e->n_ops; i++)
            if (!op_done(&e->ops[i]))
                en |= 1u << i;
        if (!en)
            break;
        uint32_t c = d < e->prefix ? e->choice[d] : (uint32_t)__builtin_ctz(en);
        e->choice[d] = (uint8_t)c;
        e->enabled[d] = en;
        step(e, &e->ops[c], verbose);
    }
    e->depth = d;
    return 0;
}

/* Judge the run that just finished; returns 1 on a violation. */
static int judge(pyb_explorer *e, int verbose)
{
    int stale_read = 0, collision = 0, bypass = 0;
    for (uint32_t i = 0; i < e->n_ops; i++) {
        const op *o = &e->ops[i];
        if (o->is_write)
            continue;
        stale_read |= o->r.stale != 0;
        collision |= o->r.collided != 0;
        bypass |= o->r.active != 0;
    }
    uint64_t stale_cached = pyb_cd_stale_cached_blocks(e->dev);
    if (verbose) {
        for (uint64_t b = 0; b < pyb_cd_n_blocks(e->dev); b++) {
            uint64_t entry = pyb_cd_cache_entry(e->dev, b), v = pyb_cd_backing_version(e->dev, b);
            if (PYB_CD_TAG(entry) == PYB_CD_TAG_VALID && PYB_CD_PAYLOAD(entry) != v)
                line(e, "at quiescence: block %llu is cached as v%llu but the backing device holds v%llu "
                        "(STALE CACHED BLOCK: later reads hit old data)",
                     (unsigned long long)b, (unsigned long long)PYB_CD_PAYLOAD(entry), (unsigned long long)v);
        }
        return 0;
    }
    e->res.schedules++;
    e->res.stale_read_schedules += (uint64_t)stale_read;
    e->res.stale_cache_schedules += stale_cached != 0;
    e->res.collision_schedules += (uint64_t)collision;
    e->res.bypass_schedules += (uint64_t)bypass;
    e->res.untracked_schedules += (uint64_t)e->run_untracked;
    e->res.underflow_schedules += (uint64_t)e->run_underflow;
    if (e->tracker && e->cfg.fault_at)
        e->res.faults_injected += pyb_fault_injected(&e->fault);
    int violation = stale_read || stale_cached;
    e->res.violations += (uint64_t)violation;
    return violation;
}

/* Advance to the next schedule; returns 0 when the search is complete. */
static int advance(pyb_explorer *e)
{
    for (uint32_t d = e->depth; d-- > 0;) {
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
        if (judge(e, 0) && !e->res.counterexample_lines) {
            /* Replay the same schedule, describing each step. */
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
