# Declarations of csrc/pyb_explore.h.
from libc.stdint cimport uint32_t, uint64_t

cdef extern from "pyb_explore.h" nogil:
    enum:
        PYB_EXPLORE_MAX_OPS
        PYB_EXPLORE_MAX_LINES
        PYB_EXPLORE_LINE
        PYB_EXPLORE_NO_TRACKING

    ctypedef struct pyb_explore_config:
        int sync
        int check
        int alloc_failure
        uint32_t pool_pages
        int counter_bits
        uint64_t fault_at
        uint32_t writes, reads
        uint32_t write_blocks
        uint32_t read_blocks
        uint32_t n_blocks
        uint32_t block_size
        uint64_t chunk_size

    ctypedef struct pyb_explore_result:
        uint64_t schedules, violations
        uint64_t stale_read_schedules, stale_cache_schedules
        uint64_t bypass_schedules
        uint64_t collision_schedules
        uint64_t untracked_schedules
        uint64_t underflow_schedules
        uint64_t faults_injected
        int finished
        uint32_t counterexample_lines
        char counterexample[36][192]

    ctypedef struct pyb_explorer:
        pass

    int pyb_explore_create(const pyb_explore_config *cfg, pyb_explorer **out) noexcept
    void pyb_explore_destroy(pyb_explorer *e) noexcept
    int pyb_explore_run(pyb_explorer *e, uint64_t budget) noexcept
    const pyb_explore_result *pyb_explore_result_of(const pyb_explorer *e) noexcept
