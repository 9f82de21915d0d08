# Declarations of csrc/pyb_workload.h.
from libc.stdint cimport uint32_t, uint64_t

from pybcache.bcache.includes.pyb_cachedev cimport pyb_cachedev, pyb_cd_stats
from pybcache.bcache.includes.pyb_driver cimport pyb_run

cdef extern from "pyb_workload.h" nogil:
    enum:
        PYB_WORKLOAD_MAX_THREADS
        PYB_WORKLOAD_MAX_INFLIGHT

    ctypedef struct pyb_race_config:
        uint32_t threads
        uint32_t writers
        uint64_t ops
        double seconds
        uint64_t region_blk
        uint64_t region_blocks
        uint32_t max_write_blocks
        uint32_t read_blocks
        uint64_t reclaim_every
        uint64_t seed
        int writes_kind
        double cache_alloc_fail_p

    ctypedef struct pyb_fio_config:
        uint32_t jobs
        uint64_t ops
        double seconds
        uint32_t read_percent
        uint32_t read_blocks
        uint32_t write_blocks
        uint32_t inflight
        uint64_t seed
        int writes_kind
        double cache_alloc_fail_p

    ctypedef struct pyb_workload_result:
        uint64_t ops, reads, writes, reclaimed
        uint64_t elapsed_ns, cpu_ns
        uint64_t completion_cpu_ns
        uint64_t blocked_writes, blocked_ns
        uint64_t inflight_sum, inflight_samples
        pyb_cd_stats stats

    int pyb_race_run(pyb_cachedev *d, const pyb_race_config *cfg, pyb_workload_result *out) noexcept
    int pyb_fio_run(pyb_cachedev *d, const pyb_fio_config *cfg, pyb_workload_result *out) noexcept
    int pyb_race_begin(pyb_cachedev *d, const pyb_race_config *cfg, uint64_t wait_timeout_ns,
                       pyb_workload_result *out, pyb_run **run) noexcept
    int pyb_fio_begin(pyb_cachedev *d, const pyb_fio_config *cfg, uint64_t wait_timeout_ns,
                      pyb_workload_result *out, pyb_run **run) noexcept
