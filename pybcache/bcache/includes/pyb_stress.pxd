# Declarations of csrc/pyb_stress.h.
from libc.stdint cimport uint32_t, uint64_t

from pybcache.bcache.includes.pyb_driver cimport pyb_run
from pybcache.bcache.includes.pyb_ops cimport pyb_ops_tracker
from pybcache.bcache.includes.pyb_tracker cimport pyb_tracker

cdef extern from "pyb_stress.h" nogil:
    enum:
        PYB_STRESS_MAX_THREADS
        PYB_STRESS_MAX_DEPTH
        PYB_STRESS_MAX_SAMPLES

    ctypedef struct pyb_stress_config:
        uint32_t threads
        uint64_t ops
        double seconds
        uint64_t region_off
        uint64_t region_len
        uint64_t write_len
        uint32_t depth
        int partition
        uint64_t reclaim_every
        uint64_t seed

    ctypedef struct pyb_stress_options:
        uint32_t sample_every
        uint32_t sample_capacity
        uint64_t *samples
        int skip_checks
        uint32_t cpus
        int inline_ends
        uint64_t wait_timeout_ns
        int null_tracker
        int pin_threads

    ctypedef struct pyb_stress_result:
        uint64_t ops, starts, checks, active_hits, untracked, reclaimed
        uint64_t ends
        uint64_t elapsed_ns, cpu_ns
        uint64_t completion_cpu_ns
        uint64_t blocked_starts, blocked_ns, completer_wakes
        uint64_t inflight_sum, inflight_samples
        uint64_t start_ns
        uint64_t sampled, samples_kept, sample_max_ns
        uint64_t vol_switches, invol_switches
        int start_error, end_error
        int pinned

    int pyb_stress_run(pyb_tracker *t, const pyb_stress_config *cfg, pyb_stress_result *out) noexcept
    int pyb_stress_run_ex(pyb_tracker *t, const pyb_stress_config *cfg, const pyb_stress_options *opt,
                          pyb_stress_result *out) noexcept
    int pyb_stress_begin_ops(pyb_ops_tracker t, uint64_t device_size, const pyb_stress_config *cfg,
                             const pyb_stress_options *opt, pyb_stress_result *out, pyb_run **run) noexcept
    int pyb_stress_begin(pyb_tracker *t, const pyb_stress_config *cfg, const pyb_stress_options *opt,
                         pyb_stress_result *out, pyb_run **run) noexcept
