/*
 * pyb_stress.h - a native multi-threaded driver of the tracker (pthreads started from C).
 *
 * Each submitting thread repeats: start a bypass write at a random offset of its region, check a
 * random range with is_active, and hand the write to its completion thread, which ends the oldest
 * writes so that about `depth` stay in flight (pyb_driver.h: completions never wait on a start, so
 * a start blocked on a full counter cannot hold an end hostage). At the end every completer ends
 * all its writes, so at quiescence every counter must be back to zero. Optionally thread 0 calls
 * reclaim every `reclaim_every` iterations, racing the others.
 *
 * A start that finds a counter at its maximum under overflow "wait" (or, under alloc_failure
 * "mempool", no page) waits on the tracker's wait queue, bounded by the options' wait_timeout_ns
 * (pyb_driver_start_bounded); past it the run stops, rolls back that start, ends every write and
 * reports -ETIMEDOUT with the chunk and what was waited for.
 *
 * pyb_stress_run_ex adds, without changing what an iteration does to the tracker:
 *   - per-iteration latency sampling: one iteration in `sample_every` is timed (the start of a new
 *     write, the check and the hand-over to the completer), so the clock reads do not distort the
 *     others; each thread keeps up to `sample_capacity` samples and, past that, a uniform reservoir;
 *   - skip_checks: iterations without the is_active call (pure start/end pairs, for the same-chunk
 *     contention measurement against the 2-thread cache-line bounce floor);
 *   - inline_ends: the submitting thread ends its own oldest write before starting a new one once
 *     `depth` are in flight, with no completion thread (the driver before completion threads, kept
 *     to measure the tracker's hot path alone and to show the hostage: a start blocked on a full
 *     counter then waits for ends only its own thread could make, and times out);
 *   - cpus: run every thread on the first `cpus` CPUs this process may use (oversubscription runs
 *     such as "8 threads on 2 cores" on any machine); pin_threads: each submitting thread on one of them;
 *   - the scheduler's view of each submitting thread: voluntary and involuntary context switches.
 */
#ifndef PYB_STRESS_H
#define PYB_STRESS_H

#include <stdint.h>

#include "pyb_driver.h"
#include "pyb_ops.h"
#include "pyb_tracker.h"

#define PYB_STRESS_MAX_THREADS 256
#define PYB_STRESS_MAX_DEPTH 4096
#define PYB_STRESS_MAX_SAMPLES (1u << 24) /* per thread */

typedef struct pyb_stress_config {
    uint32_t threads;        /* 1..PYB_STRESS_MAX_THREADS */
    uint64_t ops;            /* writes per thread; 0 = run for `seconds` */
    double seconds;          /* used when ops == 0 */
    uint64_t region_off;     /* writes land in [region_off, region_off + region_len) */
    uint64_t region_len;
    uint64_t write_len;      /* bytes per write, <= region_len (per thread when partitioned) */
    uint32_t depth;          /* writes a thread keeps in flight, 1..PYB_STRESS_MAX_DEPTH: within depth +-
                                pyb_ring_band(depth) with completion threads (pyb_driver.h), the
                                results report the mean seen; exactly depth with inline_ends */
    int partition;           /* 1: thread i uses only the i-th of `threads` equal parts of the region */
    uint64_t reclaim_every;  /* 0 = never; else thread 0 calls reclaim every that many iterations */
    uint64_t seed;
} pyb_stress_config;

/*
 * Options of pyb_stress_run_ex; an all-zero struct (or NULL) is exactly pyb_stress_run. Read-only
 * during the run except for `samples`, whose slices are each written by one thread (below).
 */
typedef struct pyb_stress_options {
    uint32_t sample_every;    /* 0 = no sampling; else time one iteration in sample_every */
    uint32_t sample_capacity; /* samples kept per thread, 1..PYB_STRESS_MAX_SAMPLES when sampling */
    uint64_t *samples;        /* [threads * sample_capacity] ns per timed iteration, thread i writing only
                                 [i * capacity, (i + 1) * capacity) and only before it is joined; the
                                 caller reads it after pyb_stress_run_ex returns (the join orders it) */
    int skip_checks;          /* 1: no is_active call in the iterations (checks stays 0) */
    uint32_t cpus;            /* 0 = no affinity; else the first `cpus` CPUs of the caller's mask */
    int inline_ends;          /* 1: no completion threads, each thread ends its own writes (above) */
    uint64_t wait_timeout_ns; /* bound on a start's wait (full counter, mempool page); 0 = none */
    int null_tracker;         /* 1: the do-nothing tracker: every start is one relaxed fetch_add and every
                                 end one fetch_sub on a single counter shared by all threads (the bounce
                                 floor's pair, pyb_floor.h), a check one load; the tracker passed only
                                 sizes the device (it must be the lab's; no reclaim_every). The same loop
                                 with the tracker's work taken out: a pair's cost splits into the driver's
                                 and the tracker's. */
    int pin_threads;          /* 1 (needs cpus > 0): submitting thread i runs on the (i mod cpus)-th of those
                                 CPUs alone (best effort, as the bounce floor's threads are pinned); its
                                 completion thread stays on all of them */
} pyb_stress_options;

/* One submitting thread's counts, written only by that thread (and the fields marked "completer" by
 * its completion thread) and read by the caller after the join. */
typedef struct pyb_stress_result {
    uint64_t ops, starts, checks, active_hits, untracked, reclaimed;
    uint64_t ends;              /* completer (the thread itself with inline_ends) */
    uint64_t elapsed_ns, cpu_ns;
    uint64_t completion_cpu_ns; /* completer: its CPU time (0 with inline_ends) */
    uint64_t blocked_starts;    /* starts that found a counter at its maximum (or no mempool page) and
                                   waited (pyb_driver_start_bounded) */
    uint64_t blocked_ns;        /* time those starts waited */
    uint64_t completer_wakes;   /* pushes that woke the sleeping completer (0 with inline_ends) */
    uint64_t inflight_sum, inflight_samples; /* writes in flight, sampled every 256 iterations */
    uint64_t start_ns;       /* monotonic clock when this thread began its iterations (with elapsed_ns:
                                how the threads' run intervals overlapped) */
    /* latency sampling of pyb_stress_run_ex (zero without it) */
    uint64_t sampled;        /* iterations timed */
    uint64_t samples_kept;   /* entries written to this thread's slice: min(sampled, capacity) */
    uint64_t sample_max_ns;  /* the longest timed iteration */
    /* the scheduler's view over the run (getrusage RUSAGE_THREAD), every run */
    uint64_t vol_switches;   /* context switches because the thread blocked (futex, sleep) */
    uint64_t invol_switches; /* ... the thread was preempted (time slice over, a waker preferred) */
    /* pyb_stress_begin_ops with a tracker that is not the lab's: the first PYB_OPS_E* result of a
     * start or check of this thread (start_error) and of an end of its completer (end_error), 0 = none.
     * Any of them stops every submitter at its next look (the completers still end what is in flight). */
    int start_error, end_error;
    int pinned;              /* pin_threads: 1 if this thread's pinning to its one CPU took effect */
} pyb_stress_result;

/* Run the stress to its end; out[threads]. Returns 0, -EINVAL, -ENOMEM, -EAGAIN (thread creation
 * failed) or -ETIMEDOUT. */
int pyb_stress_run(pyb_tracker *t, const pyb_stress_config *cfg, pyb_stress_result *out);
/* The same with options (see above; opt may be NULL). -EINVAL also for bad options or an affinity
 * the system refuses. */
int pyb_stress_run_ex(pyb_tracker *t, const pyb_stress_config *cfg, const pyb_stress_options *opt,
                      pyb_stress_result *out);
/* Start the stress and return at once: wait, stop and finish it with pyb_run_* (pyb_driver.h).
 * cfg and opt are copied; out[threads] (and opt->samples) must stay valid until pyb_run_finish.
 * Returns 0 or the errors of pyb_stress_run_ex (then *run is NULL). */
int pyb_stress_begin(pyb_tracker *t, const pyb_stress_config *cfg, const pyb_stress_options *opt,
                     pyb_stress_result *out, pyb_run **run);
/* The same for any tracker through its vtable (device_size: its size in bytes). The lab's
 * (pyb_lab_ops) runs exactly as pyb_stress_begin, calling pyb_tracker_* directly (the devirtualised
 * path); another tracker's start is one call that may sleep inside (no bounded wait of the driver's:
 * its own bound, e.g. a patch's hung bound, applies), and inline_ends is -EINVAL for it (its ends must
 * run on completion threads). ctx_size must be <= sizeof(pyb_ctx). */
int pyb_stress_begin_ops(pyb_ops_tracker t, uint64_t device_size, const pyb_stress_config *cfg,
                         const pyb_stress_options *opt, pyb_stress_result *out, pyb_run **run);

#endif /* PYB_STRESS_H */
