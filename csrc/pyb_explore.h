/*
 * pyb_explore.h - a deterministic explorer of the read/bypass-write race.
 *
 * A bounded set of operations (`writes` bypass writes of blocks [0, write_blocks), `reads` reads of
 * blocks [0, read_blocks) and `reclaims` daemon calls of pyb_tracker_reclaim) is run on a fresh small
 * device and a fresh tracker under every interleaving of their steps. Each step is one call into the
 * real model (pyb_cd_write_step / pyb_cd_read_step), which calls the real tracker, so what is
 * explored is the code that the stress runs, one step at a time.
 *
 * What it checks, and what it cannot: the protocol under sequential consistency, each step one
 * atomic action. Every step touches shared state inside one lock hold or one atomic operation per
 * block, node or chunk, and the model runs with split_tracker_calls, so a multi-chunk tracker call is
 * as many steps as the variant has lock holds: one per tracking page for the lock variants, one per
 * chunk for atomic (where the variants really differ). Memory-model effects (a weakened acquire,
 * a reordering the hardware allows) are outside it: see pyb_cachedev.h.
 *
 * Bounds. The operations; max_restarts: a read whose check-key step restarts it more often than
 * that is cut there and the schedule counted in restart_capped_schedules, so a bound that cuts
 * nothing is exhaustive. With overflow "wait" a write's START step is not enabled while its next
 * counter is at the maximum (it would block); a schedule in which every unfinished operation is
 * blocked is counted in stuck_schedules. A cut or stuck schedule is still a schedule: the reads that
 * returned in it are judged (a stale one is a violation with a counterexample); only the check at
 * quiescence is skipped, since operations are still in flight. `preload` starts that many other
 * writes to chunk 0 before the operations run, which stay in flight throughout (they never land or
 * end), so that a 16-bit counter's maximum is reached by the explored writes.
 *
 * Enumeration is a stateless depth-first search: each schedule is replayed from the initial state,
 * and at every depth the run records which operations could step; the next schedule changes the
 * deepest choice that still has an untried alternative. The search counts each distinct sequence of
 * choices once. With `reduce`, sleep sets skip orders of independent steps that an explored
 * schedule already covers (pyb_explore.c says which steps are independent and why that keeps the
 * search exhaustive); `schedules` then counts the schedules run.
 *
 * Writes are bypass writes, or writethrough writes (writes_kind): a writethrough write's INVALIDATE
 * step is its cache insert, or, when its cache allocation fails (cache_alloc_fail = K: the K-th drawn
 * in the schedule), the fallback invalidation; `track` says which writes call the tracker
 * (pyb_cachedev.h). `invalidate` after-write makes each bypass write's INVALIDATE step follow its LAND
 * (the v1 approach, pyb_cachedev.h).
 *
 * A schedule violates the oracle if a read returned a block older than a write completed before the
 * read began (stale read), or if at the end of a schedule that ran to completion a valid cache block
 * differs from the backing version (stale cached block). Optionally the fault_at-th page allocation of every schedule fails.
 *
 * The first violating schedule is replayed and returned as step records (what each step did and
 * the values it saw), rendered into text by the Python layer.
 */
#ifndef PYB_EXPLORE_H
#define PYB_EXPLORE_H

#include <stdint.h>

#include "pyb_cachedev.h"
#include "pyb_fault.h"
#include "pyb_kpatch.h"
#include "pyb_tracker.h"

#define PYB_EXPLORE_MAX_OPS 8
#define PYB_EXPLORE_MAX_STEPS 1024
#define PYB_EXPLORE_MAX_RECORDS 256
#define PYB_EXPLORE_REC_BLOCKS 8
#define PYB_EXPLORE_NO_TRACKING (-1)
#define PYB_EXPLORE_MAX_RESTARTS 16
#define PYB_EXPLORE_MAX_RECLAIMS 4

typedef struct pyb_explore_config {
    int sync;               /* pyb_sync, or PYB_EXPLORE_NO_TRACKING (the unpatched kernel) */
    int check;              /* pyb_cd_check_placement */
    int no_restart;         /* the model's no_restart switch */
    int granularity;        /* pyb_cd_check_granularity */
    int alloc_failure;      /* pyb_alloc_failure */
    uint32_t pool_pages;    /* for PYB_ALLOC_POOL and PYB_ALLOC_MEMPOOL (its min_nr) */
    int counter_bits;       /* 16, 32, 64, or 0 = 16 for the lock variants and 64 for atomic */
    int overflow;           /* pyb_overflow */
    uint64_t counter_max;   /* 0 = the width's; else the tracker's lowered maximum (pyb_tracker_config) */
    uint64_t preload;       /* writes to chunk 0 in flight throughout; <= the counter maximum */
    uint64_t fault_at;      /* 0 = no injected failure; K = the K-th page allocation of each schedule's
                               operations fails */
    uint32_t writes, reads; /* operations */
    uint32_t reclaims;      /* daemon reclaim calls, <= PYB_EXPLORE_MAX_RECLAIMS;
                               1 <= writes + reads + reclaims <= PYB_EXPLORE_MAX_OPS */
    uint32_t max_restarts;  /* <= PYB_EXPLORE_MAX_RESTARTS */
    int reduce;             /* 1: partial-order reduction (sleep sets, pyb_explore.c); 0: every
                               interleaving */
    uint32_t write_blocks;  /* each write covers blocks [0, write_blocks) */
    uint32_t read_blocks;   /* each read covers blocks [0, read_blocks) */
    uint32_t n_blocks;      /* device blocks, >= write_blocks and read_blocks */
    uint32_t block_size;    /* power of two >= 512 */
    uint64_t chunk_size;    /* tracker chunk, power of two >= 512 */
    /* A loaded patch (pyb_kpatch_open) instead of the lab's tracker, or NULL. A fresh instance per
     * schedule (its init without fault injection; then fault_at as above through its allocations);
     * sync, alloc_failure, pool_pages, counter_bits, overflow and counter_max are ignored; preload
     * must be 0 and granularity chunk. A patch cannot resume (pyb_ops.h), so its START, END and
     * CHECK are one step each, and a start that would sleep (a counter at the patch's maximum) sleeps
     * inside the step until hung_ns passes: the run then stops with -EIO. The explorer's bounded
     * scenarios (at most 8 writes in flight) are far below any counter maximum a patch plausibly
     * has, so that never happens unless the patch itself hangs. */
    const pyb_kp_module *patch;
    uint64_t hung_ns;       /* the patch's bound on any wait or spinlock acquisition; > 0 with a patch */
    int end_bio_intact;     /* the patch's write_end gets an untouched bio (pyb_kp_config) */
    int patch_fail_mode;    /* the patch's pyb_kp_config.fail_mode: which allocations fault_at counts and fails */
    int writes_kind;        /* pyb_explore_writes_kind: which of the writes are writethrough */
    int track;              /* pyb_cd_track: which writes the tracker counts */
    uint64_t cache_alloc_fail; /* K > 0: the K-th writethrough cache allocation of every schedule
                                  fails (its insert falls back to an invalidation); 0 = never */
    int invalidate;         /* pyb_cd_invalidate: when a bypass write invalidates (0 = at submit) */
    int detached;           /* 1 (needs writes >= 1): W1 was submitted on the detached path
                               (PYB_WK_DETACHED, pyb_cachedev.h) and the device attached right after:
                               W1's START and its (empty) INVALIDATE run before the schedule, while no
                               other operation has begun, and the schedule explores its LAND and END
                               among the others */
    int unhijack;           /* pyb_unhijack of the lab's tracker (with reclaims: md's decay) */
} pyb_explore_config;

/* writes_kind: every write bypass (as before), every write writethrough, or mixed: W1, W3, ... bypass
 * and W2, W4, ... writethrough. */
enum { PYB_XW_BYPASS = 0, PYB_XW_WRITETHROUGH = 1, PYB_XW_MIXED = 2, PYB_XW_DISCARD = 3 /* every write a discard */ };

/* Step records. kind: */
enum { PYB_X_WRITE = 0, PYB_X_READ = 1, PYB_X_DAEMON = 2, PYB_X_ORACLE = 3 };
/* step: PYB_W_* for writes, PYB_R_* for reads, or one of these: */
enum { PYB_X_RETURN = 16, PYB_X_RECLAIM = 17, PYB_X_STALE_BLOCK = 18, PYB_X_STUCK = 19 };
/* flags: */
#define PYB_XF_NO_TRACKING 0x1u /* no tracker (unpatched) */
#define PYB_XF_UNTRACKED 0x2u   /* START: a page allocation failed, chunks left untracked */
#define PYB_XF_UNDERFLOW 0x4u   /* END: a decrement found zero and was refused */
#define PYB_XF_WRAPPED 0x8u     /* START: a counter wrapped around */
#define PYB_XF_CLAMPED 0x10u    /* START: a counter stayed at its maximum (increment dropped) */
#define PYB_XF_BLOCKED 0x20u    /* START: stopped at a full counter under "wait" */
#define PYB_XF_MORE 0x40u       /* START/END/CHECK: more tracker steps of this call follow */
#define PYB_XF_HIT 0x80u        /* LOOKUP: every block valid */
#define PYB_XF_ACTIVE 0x100u    /* CHECK: an active write overlaps -> bypass; LOOKUP/INSERT: bypassing */
#define PYB_XF_RESTART 0x200u   /* CHECK_KEY: node sequence moved -> -EINTR, back to LOOKUP */
#define PYB_XF_STALE 0x400u     /* RETURN: a block older than its floor */
#define PYB_XF_CAPPED 0x800u    /* CHECK_KEY: the restart bound was reached; the schedule is cut */
#define PYB_XF_FORCED 0x1000u   /* CHECK_KEY: the sequence moved but no_restart placed the key */
#define PYB_XF_WRITETHROUGH 0x2000u /* a writethrough write's step (INVALIDATE is then its insert) */
#define PYB_XF_FALLBACK 0x4000u /* START/INVALIDATE: its cache allocation fails -> it invalidates */
#define PYB_XF_UNCOUNTED 0x8000u /* START/END: the write is not counted (track): no tracker call */
#define PYB_XF_AFTER_WRITE 0x10000u /* a step of a write whose INVALIDATE follows its LAND (after-write) */
#define PYB_XF_DISCARD 0x20000u     /* a discard's step (a bypass write in every step) */
#define PYB_XF_DETACHED 0x40000u    /* a step of the write submitted on the detached path (cfg.detached) */

typedef struct pyb_explore_step {
    uint8_t kind, number, step, nvals; /* number: 1-based per kind (W1, R2, D1) */
    uint32_t flags;                    /* PYB_XF_* */
    uint64_t lo, hi;  /* LOOKUP/CHECK_KEY/INVALIDATE/LAND/BACKING/INSERT/RETURN: blocks [lo, hi);
                         START/END/CHECK: tracker bytes [lo, hi) of this step; STALE_BLOCK: block lo */
    uint64_t version; /* START/LAND/END: the write's version; CHECK_KEY: restarts so far;
                         RECLAIM: pages freed; INSERT: blocks collided */
    uint64_t count;   /* START/END: chunk lo's counter after the step; CHECK_KEY: the node
                         sequence LOOKUP saw; INSERT: blocks inserted */
    uint64_t seq_now; /* CHECK_KEY: the node sequence it found */
    uint64_t a[PYB_EXPLORE_REC_BLOCKS]; /* LOOKUP: entries found; BACKING, RETURN: versions;
                                           STALE_BLOCK: a[0] cached version */
    uint64_t b[PYB_EXPLORE_REC_BLOCKS]; /* RETURN: floors; BACKING: 1 if the block missed;
                                           STALE_BLOCK: b[0] backing version */
} pyb_explore_step;

typedef struct pyb_explore_result {
    uint64_t schedules, violations;
    uint64_t stale_read_schedules, stale_cache_schedules; /* schedules with each kind of violation */
    uint64_t bypass_schedules;    /* schedules in which some read bypassed the cache */
    uint64_t collision_schedules; /* schedules with a miss collision */
    uint64_t untracked_schedules; /* schedules in which a write went untracked */
    uint64_t underflow_schedules; /* schedules in which an end found a zero counter */
    uint64_t restart_schedules;   /* schedules in which a read's check key restarted it */
    uint64_t restart_capped_schedules; /* cut at max_restarts (in schedules; reads judged, no
                                          quiescence check) */
    uint64_t stuck_schedules;     /* every unfinished operation blocked, not cut (in schedules; reads
                                     judged, no quiescence check) */
    uint64_t partial_violation_schedules; /* violations among the cut and stuck schedules: a read
                                             returned stale before the cut */
    uint64_t wrap_schedules, clamp_schedules, blocked_schedules; /* overflow events */
    uint64_t reclaimed_schedules; /* schedules in which a reclaim freed a page */
    uint64_t pruned_runs;         /* reduce: runs stopped because every enabled step was asleep */
    uint64_t faults_injected;
    uint64_t report_schedules;    /* a patch: schedules whose instance made a kernel report (WARN_ON,
                                     might_sleep, lockdep, ...) */
    int finished;                 /* every schedule has been explored */
    uint32_t n_steps;             /* counterexample records; 0 = no violation found */
    pyb_explore_step steps[PYB_EXPLORE_MAX_RECORDS];
} pyb_explore_result;

typedef struct pyb_explorer pyb_explorer;

/* Validate cfg and build an explorer. Returns 0, -EINVAL or -ENOMEM. */
int pyb_explore_create(const pyb_explore_config *cfg, pyb_explorer **out);
void pyb_explore_destroy(pyb_explorer *e);
/* Explore up to `budget` more schedules (0 = all). Returns 1 when every schedule has been explored,
 * 0 when more remain, -ENOMEM if a tracker could not be built, -EIO if a patch's operation (or its
 * init) failed: the run stopped at that step, and pyb_explore_patch gives the instance whose reports
 * say why, -EAGAIN if the thread that runs a patch's END step could not be started (the run
 * stopped before that step). Results accumulate in *res (which the
 * explorer owns; see pyb_explore_result_of). */
int pyb_explore_run(pyb_explorer *e, uint64_t budget);
const pyb_explore_result *pyb_explore_result_of(const pyb_explorer *e);
/* The patch instance of the schedule run last (NULL without a patch): its reports after -EIO, and the
 * PYB_OPS_E* code of the failure in *err (0 if init failed: then pyb_explore_patch_init_error). */
pyb_kpatch_tracker *pyb_explore_patch(const pyb_explorer *e, int *err);
/* The init error of the last instance that failed to build (PYB_KP_EINIT's *err), or 0. */
int pyb_explore_patch_init_error(const pyb_explorer *e);

/* Splitting the search (pyb_explore.c says why the parts add up to the whole). A prefix is the
 * sequence of operation indices chosen at depths 0, 1, ...
 *
 * pyb_explore_set_prefix: before the first run, restrict the search to the schedules that begin with
 * choices[0..n): pyb_explore_run then explores exactly that subtree, in the whole search's order.
 * Returns 0 or -EINVAL (already run, n too large, an index past the operations); a prefix that the
 * search would not take makes pyb_explore_run return -EINVAL.
 *
 * pyb_explore_prefixes: the prefixes that cut the search at `depth`, in the search's order, each
 * written as `depth` bytes at out + i * depth with its length in lens[i]; a schedule that ends (or
 * is pruned, cut or stuck) above that depth is a shorter prefix of its own. The subtrees of the
 * returned prefixes partition the search (with the explorer's fixed prefix, if any, as their root).
 * Returns how many (at most max), -ENOSPC if there are more than max, -EINVAL, or -ENOMEM or
 * -E2BIG from a run. The explorer must not have run; it is left as it was. */
int pyb_explore_set_prefix(pyb_explorer *e, const uint8_t *choices, uint32_t n);
int64_t pyb_explore_prefixes(pyb_explorer *e, uint32_t depth, uint8_t *out, uint32_t *lens, uint32_t max);

#endif /* PYB_EXPLORE_H */
