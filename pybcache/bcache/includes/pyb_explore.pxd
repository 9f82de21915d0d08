# Declarations of csrc/pyb_explore.h.
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t

from pybcache.bcache.includes.pyb_kpatch cimport pyb_kp_module, pyb_kpatch_tracker

cdef extern from "pyb_explore.h" nogil:
    enum:
        PYB_EXPLORE_MAX_OPS
        PYB_EXPLORE_MAX_STEPS
        PYB_EXPLORE_MAX_RECORDS
        PYB_EXPLORE_REC_BLOCKS
        PYB_EXPLORE_NO_TRACKING
        PYB_EXPLORE_MAX_RESTARTS
        PYB_EXPLORE_MAX_RECLAIMS
        PYB_X_WRITE
        PYB_X_READ
        PYB_X_DAEMON
        PYB_X_ORACLE
        PYB_X_RETURN
        PYB_X_RECLAIM
        PYB_X_STALE_BLOCK
        PYB_X_STUCK
        PYB_XW_BYPASS
        PYB_XW_WRITETHROUGH
        PYB_XW_MIXED
        PYB_XW_DISCARD

    uint32_t PYB_XF_NO_TRACKING
    uint32_t PYB_XF_UNTRACKED
    uint32_t PYB_XF_UNDERFLOW
    uint32_t PYB_XF_WRAPPED
    uint32_t PYB_XF_CLAMPED
    uint32_t PYB_XF_BLOCKED
    uint32_t PYB_XF_MORE
    uint32_t PYB_XF_HIT
    uint32_t PYB_XF_ACTIVE
    uint32_t PYB_XF_RESTART
    uint32_t PYB_XF_STALE
    uint32_t PYB_XF_CAPPED
    uint32_t PYB_XF_FORCED
    uint32_t PYB_XF_WRITETHROUGH
    uint32_t PYB_XF_FALLBACK
    uint32_t PYB_XF_UNCOUNTED
    uint32_t PYB_XF_AFTER_WRITE
    uint32_t PYB_XF_DISCARD
    uint32_t PYB_XF_DETACHED

    ctypedef struct pyb_explore_config:
        int sync
        int check
        int no_restart
        int granularity
        int alloc_failure
        uint32_t pool_pages
        int counter_bits
        int overflow
        uint64_t counter_max
        uint64_t preload
        uint64_t fault_at
        uint32_t writes, reads
        uint32_t reclaims
        uint32_t max_restarts
        int reduce
        uint32_t write_blocks
        uint32_t read_blocks
        uint32_t n_blocks
        uint32_t block_size
        uint64_t chunk_size
        const pyb_kp_module *patch
        uint64_t hung_ns
        int end_bio_intact
        int patch_fail_mode
        int writes_kind
        int track
        uint64_t cache_alloc_fail
        int invalidate
        int detached
        int unhijack

    ctypedef struct pyb_explore_step:
        uint8_t kind, number, step, nvals
        uint32_t flags
        uint64_t lo, hi
        uint64_t version
        uint64_t count
        uint64_t seq_now
        uint64_t a[8]
        uint64_t b[8]

    ctypedef struct pyb_explore_result:
        uint64_t schedules, violations
        uint64_t stale_read_schedules, stale_cache_schedules
        uint64_t bypass_schedules
        uint64_t collision_schedules
        uint64_t untracked_schedules
        uint64_t underflow_schedules
        uint64_t restart_schedules
        uint64_t restart_capped_schedules
        uint64_t stuck_schedules
        uint64_t partial_violation_schedules
        uint64_t wrap_schedules, clamp_schedules, blocked_schedules
        uint64_t reclaimed_schedules
        uint64_t pruned_runs
        uint64_t faults_injected
        uint64_t report_schedules
        int finished
        uint32_t n_steps
        pyb_explore_step steps[256]

    ctypedef struct pyb_explorer:
        pass

    int pyb_explore_create(const pyb_explore_config *cfg, pyb_explorer **out) noexcept
    void pyb_explore_destroy(pyb_explorer *e) noexcept
    int pyb_explore_run(pyb_explorer *e, uint64_t budget) noexcept
    const pyb_explore_result *pyb_explore_result_of(const pyb_explorer *e) noexcept
    pyb_kpatch_tracker *pyb_explore_patch(const pyb_explorer *e, int *err) noexcept
    int pyb_explore_patch_init_error(const pyb_explorer *e) noexcept
    int pyb_explore_set_prefix(pyb_explorer *e, const uint8_t *choices, uint32_t n) noexcept
    int64_t pyb_explore_prefixes(pyb_explorer *e, uint32_t depth, uint8_t *out, uint32_t *lens,
                                 uint32_t max) noexcept
