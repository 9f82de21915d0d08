/*
 * pyb_workload.h - native pthread drivers of the cached-device model.
 *
 * Every writing thread hands its writes to a completion thread of its own (pyb_driver.h): the
 * submitter runs START and INVALIDATE, the completer LAND and END (on a device that invalidates
 * after-write, the completer runs LAND, INVALIDATE and END: pyb_cd_write_submit), so a start blocked
 * on a full counter never holds an end back. A start that cannot complete at once waits as
 * pyb_driver_start_bounded does (on the tracker's wait queue, in slices); one that waits past the
 * run's wait_timeout stops the run, which then rolls that start back and ends every write
 * (pyb_run_finish returns -ETIMEDOUT with the chunk and what was waited for).
 *
 * Race stress: `writers` threads issue bypass writes of 1..max_write_blocks blocks and the other
 * threads issue reads of read_blocks blocks, all at random places of a small hot region, so that
 * read misses keep landing inside write windows. A writer has one write in flight: its completer
 * lands and ends it once the device's write delay has passed since its submission (the dm-delay
 * analogue, waited on the completion side), then the writer issues the next. Each thread stops
 * after `ops` operations or `seconds`, whichever comes first (0 = no limit of that kind; at least
 * one must be set).
 *
 * fio-like mix (the v2 cover letter's randrw): every job issues random reads of read_blocks blocks
 * (read_percent of its operations) and random bypass writes of write_blocks blocks, aligned to their
 * size, over the whole device (the working set). Each job keeps `inflight` writes in flight, like an
 * asynchronous engine with a queue depth: a write is started and invalidated when issued, and the
 * job's completer lands and ends the oldest so that `inflight` +- pyb_ring_band(inflight) stay in
 * flight (about `inflight` on average; the results report the mean seen), so the number of in-flight
 * writes, not a timer, sets the window. At the end every completer ends its queue, so the
 * device and its tracker are quiescent when the call returns.
 *
 * Writes are bypass writes, writethrough writes or a mix of both (writes_kind), a writethrough write's
 * cache allocation failing with probability cache_alloc_fail_p (pyb_cachedev.h).
 *
 * Both report per-thread operation counts, the model's statistics, wall time and thread CPU time
 * (the submitter's and, separately, its completer's).
 */
#ifndef PYB_WORKLOAD_H
#define PYB_WORKLOAD_H

#include <stdint.h>

#include "pyb_cachedev.h"
#include "pyb_driver.h"

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
    int writes_kind;           /* PYB_XW_*-like: 0 bypass, 1 writethrough, 2 mixed (each writer's odd-numbered
                                  writes bypass, even-numbered writethrough), 3 discard */
    double cache_alloc_fail_p; /* chance in [0, 1] that a writethrough write's cache allocation fails (its
                                  insert falls back to an invalidation); drawn from the thread's seeded stream */
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
    int writes_kind;           /* as pyb_race_config's (mixed: per job) */
    double cache_alloc_fail_p; /* as pyb_race_config's */
} pyb_fio_config;

/* One submitting thread's result, written by it (completion_cpu_ns by its completer) and read by the
 * caller after pyb_run_finish. `stats` is the thread's own share of the model's statistics. */
typedef struct pyb_workload_result {
    uint64_t ops, reads, writes, reclaimed;
    uint64_t elapsed_ns, cpu_ns;
    uint64_t completion_cpu_ns;              /* its completion thread's CPU time (0 for a reader) */
    uint64_t blocked_writes, blocked_ns;     /* starts that found a counter at its maximum (or no
                                                mempool page) and waited, and how long they waited */
    uint64_t inflight_sum, inflight_samples; /* writes in flight, sampled every 256 operations */
    pyb_cd_stats stats;
} pyb_workload_result;

/* Run the race stress to its end; out[threads]. Returns 0, -EINVAL, -ENOMEM or -EAGAIN (thread
 * creation). */
int pyb_race_run(pyb_cachedev *d, const pyb_race_config *cfg, pyb_workload_result *out);
/* Run the fio-like mix to its end; out[jobs]. Returns 0, -EINVAL, -ENOMEM or -EAGAIN. */
int pyb_fio_run(pyb_cachedev *d, const pyb_fio_config *cfg, pyb_workload_result *out);
/* Start them and return at once (then pyb_run_wait / pyb_run_stop / pyb_run_finish). cfg is copied;
 * out must stay valid until pyb_run_finish. wait_timeout_ns bounds a start's wait (a full counter,
 * a mempool page; 0 = no bound). Returns 0 or the errors above (then *run is NULL). */
int pyb_race_begin(pyb_cachedev *d, const pyb_race_config *cfg, uint64_t wait_timeout_ns,
                   pyb_workload_result *out, pyb_run **run);
int pyb_fio_begin(pyb_cachedev *d, const pyb_fio_config *cfg, uint64_t wait_timeout_ns,
                  pyb_workload_result *out, pyb_run **run);

#endif /* PYB_WORKLOAD_H */
