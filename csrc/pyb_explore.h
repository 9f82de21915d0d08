/*
 * pyb_explore.h - a deterministic explorer of the read/bypass-write race.
 *
 * A bounded set of operations (`writes` bypass writes of blocks [0, write_blocks) and `reads` reads of
 * blocks [0, read_blocks)) is run on a fresh small device and a fresh tracker under every interleaving
 * of their steps. Each step is one call into the real model (pyb_cd_write_step / pyb_cd_read_step),
 * which calls the real tracker, so what is explored is the code that the stress runs, one step at a
 * time. A step is atomic with respect to the others, which is exact for the model: every step
 * touches shared state inside one lock hold or one atomic operation per block or chunk.
 *
 * Enumeration is a stateless depth-first search: each schedule is replayed from the initial state,
 * and at every depth the run records which operations could step; the next schedule changes the
 * deepest choice that still has an untried alternative. A read that hits finishes after its lookup,
 * so the steps of an operation are not fixed in advance; the search counts each distinct sequence of
 * choices once.
 *
 * A schedule violates the oracle if a read returned a block older than a write completed before the
 * read began (stale read), or if at the end a valid cache block differs from the backing version
 * (stale cached block). Optionally the fault_at-th page allocation of every schedule fails.
 */
#ifndef PYB_EXPLORE_H
#define PYB_EXPLORE_H

#include <stdint.h>

#include "pyb_cachedev.h"
#include "pyb_fault.h"
#include "pyb_tracker.h"

#define PYB_EXPLORE_MAX_OPS 8
#define PYB_EXPLORE_MAX_STEPS (PYB_EXPLORE_MAX_OPS * 4)
#define PYB_EXPLORE_MAX_LINES (PYB_EXPLORE_MAX_STEPS + 4)
#define PYB_EXPLORE_LINE 192
#define PYB_EXPLORE_NO_TRACKING (-1)

typedef struct pyb_explore_config {
    int sync;               /* pyb_sync, or PYB_EXPLORE_NO_TRACKING (the unpatched kernel) */
    int check;              /* pyb_cd_check_placement */
    int alloc_failure;      /* pyb_alloc_failure */
    uint32_t pool_pages;    /* for PYB_ALLOC_POOL */
    int counter_bits;       /* 16, 32, 64, or 0 = 16 for the lock variants and 64 for atomic */
    uint64_t fault_at;      /* 0 = no injected failure; K = the K-th page allocation of each schedule fails */
    uint32_t writes, reads; /* operations; 1 <= writes + reads <= PYB_EXPLORE_MAX_OPS */
    uint32_t write_blocks;  /* each write covers blocks [0, write_blocks) */
    uint32_t read_blocks;   /* each read covers blocks [0, read_blocks) */
    uint32_t n_blocks;      /* device blocks, >= write_blocks and read_blocks */
    uint32_t block_size;    /* power of two >= 512 */
    uint64_t chunk_size;    /* tracker chunk, power of two >= 512 */
} pyb_explore_config;

typedef struct pyb_explore_result {
    uint64_t schedules, violations;
    uint64_t stale_read_schedules, stale_cache_schedules; /* schedules with each kind of violation */
    uint64_t bypass_schedules;    /* schedules in which some read bypassed the cache */
    uint64_t collision_schedules; /* schedules with a miss collision */
    uint64_t untracked_schedules; /* schedules in which a write went untracked */
    uint64_t underflow_schedules; /* schedules in which an end found a zero counter */
    uint64_t faults_injected;
    int finished;                 /* every schedule has been explored */
    uint32_t counterexample_lines; /* 0 = no violation found */
    char counterexample[PYB_EXPLORE_MAX_LINES][PYB_EXPLORE_LINE];
} pyb_explore_result;

typedef struct pyb_explorer pyb_explorer;

/* Validate cfg and build an explorer. Returns 0, -EINVAL or -ENOMEM. */
int pyb_explore_create(const pyb_explore_config *cfg, pyb_explorer **out);
void pyb_explore_destroy(pyb_explorer *e);
/* Explore up to `budget` more schedules (0 = all). Returns 1 when every schedule has been explored,
 * 0 when more remain, -ENOMEM if a tracker could not be built. Results accumulate in *res (which the
 * explorer owns; see pyb_explore_result_of). */
int pyb_explore_run(pyb_explorer *e, uint64_t budget);
const pyb_explore_result *pyb_explore_result_of(const pyb_explorer *e);

#endif /* PYB_EXPLORE_H */
