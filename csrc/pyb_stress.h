/*
 * pyb_stress.h - a native multi-threaded driver of the tracker (pthreads started from C).
 *
 * Each thread repeats: start a bypass write at a random offset of its region, check a random range
 * with is_active, and, once `depth` writes are in flight, end the oldest. At the end every thread ends
 * all its in-flight writes, so at quiescence every counter must be back to zero. Optionally a thread
 * calls reclaim every `reclaim_every` iterations, racing the others.
 */
#ifndef PYB_STRESS_H
#define PYB_STRESS_H

#include <stdint.h>

#include "pyb_tracker.h"

#define PYB_STRESS_MAX_THREADS 256
#define PYB_STRESS_MAX_DEPTH 4096

typedef struct pyb_stress_config {
    uint32_t threads;        /* 1..PYB_STRESS_MAX_THREADS */
    uint64_t ops;            /* writes per thread; 0 = run for `seconds` */
    double seconds;          /* used when ops == 0 */
    uint64_t region_off;     /* writes land in [region_off, region_off + region_len) */
    uint64_t region_len;
    uint64_t write_len;      /* bytes per write, <= region_len (per thread when partitioned) */
    uint32_t depth;          /* writes in flight per thread, 1..PYB_STRESS_MAX_DEPTH */
    int partition;           /* 1: thread i uses only the i-th of `threads` equal parts of the region */
    uint64_t reclaim_every;  /* 0 = never; else thread 0 calls reclaim every that many iterations */
    uint64_t seed;
} pyb_stress_config;

typedef struct pyb_stress_result {
    uint64_t ops, starts, ends, checks, active_hits, untracked, reclaimed;
    uint64_t elapsed_ns, cpu_ns;
} pyb_stress_result;

/* Run the stress; out[threads]. Returns 0, -EINVAL or -EAGAIN (thread creation failed). */
int pyb_stress_run(pyb_tracker *t, const pyb_stress_config *cfg, pyb_stress_result *out);

#endif /* PYB_STRESS_H */
