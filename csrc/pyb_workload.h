/*
 * pyb_workload.h - native pthread drivers of the cached-device model.
 *
 * Race stress: `writers` threads issue bypass writes (pyb_cd_write_run, with the device's write delay
 * between invalidation and landing) of 1..max_write_blocks blocks and the other threads issue reads
 * of read_blocks blocks, all at random places of a small hot region, so that read misses keep landing
 * inside write windows. Each thread stops after `ops` operations or `seconds`, whichever comes first
 * (0 = no limit of that kind; at least one must be set).
 *
 * fio-like mix (the v2 cover letter's randrw): every job issues random reads of read_blocks blocks
 * (read_percent of its operations) and random bypass writes of write_blocks blocks, aligned to their
 * size, over the whole device (the working set). Each job keeps up to `inflight` writes in flight,
 * like an asynchronous engine with a queue depth: a write is started and invalidated when issued and
 * lands and ends when it is the oldest of a full queue, so the number of in-flight writes, not a
 * timer, sets the window, and every CPU cycle goes to the request path. At the end every job drains
 * its queue, so the device and its tracker are quiescent when the call returns.
 *
 * Both report per-thread operation counts, the model's statistics, wall time and thread CPU time.
 */
#ifndef PYB_WORKLOAD_H
#define PYB_WORKLOAD_H

#include <stdint.h>

#include "pyb_cachedev.h"

#define PYB_WORKLOAD_MAX_THREADS 256
#define PYB_WORKLOAD_MAX_INFLIGHT 4096

typedef struct pyb_race_config {
    uint32_t threads;          /* 2..PYB_WORKLOAD_MAX_THREADS */
    uint32_t writers;          /* 1..threads-1; the others read */
    uint64_t ops;              /* per thread; 0 = no limit */
    double seconds;            /* per thread; 0 = no limit */
    uint64_t region_blk;       /* the hot region: blocks [region_blk, region_blk + region_blocks) */
    uint64_t region_blocks;
    uint32_t max_write_blocks; /* 1..region_blocks */
    uint32_t read_blocks;      /* 1..min(region_blocks, PYB_CD_MAX_READ_BLOCKS) */
    uint64_t reclaim_every;    /* 0 = never; else writer 0 calls pyb_tracker_reclaim every that many writes */
    uint64_t seed;
} pyb_race_config;

typedef struct pyb_fio_config {
    uint32_t jobs;          /* 1..PYB_WORKLOAD_MAX_THREADS */
    uint64_t ops;           /* per job; 0 = no limit */
    double seconds;         /* per job; 0 = no limit */
    uint32_t read_percent;  /* 0..100 */
    uint32_t read_blocks;   /* 1..PYB_CD_MAX_READ_BLOCKS, <= n_blocks */
    uint32_t write_blocks;  /* >= 1, <= n_blocks */
    uint32_t inflight;      /* writes in flight per job, 1..PYB_WORKLOAD_MAX_INFLIGHT */
    uint64_t seed;
} pyb_fio_config;

/* One thread's result. `stats` is the thread's own share of the model's statistics. */
typedef struct pyb_workload_result {
    uint64_t ops, reads, writes, reclaimed;
    uint64_t elapsed_ns, cpu_ns;
    pyb_cd_stats stats;
} pyb_workload_result;

/* Run the race stress; out[threads]. Returns 0, -EINVAL, -ENOMEM or -EAGAIN (thread creation). */
int pyb_race_run(pyb_cachedev *d, const pyb_race_config *cfg, pyb_workload_result *out);
/* Run the fio-like mix; out[jobs]. Returns 0, -EINVAL, -ENOMEM or -EAGAIN. */
int pyb_fio_run(pyb_cachedev *d, const pyb_fio_config *cfg, pyb_workload_result *out);

#endif /* PYB_WORKLOAD_H */
