# Declarations of csrc/pyb_tracker.h.
from libc.stdint cimport int64_t, uint32_t, uint64_t

from pybcache.bcache.includes.pyb_fault cimport pyb_fault

cdef extern from "pyb_tracker.h" nogil:
    enum:
        PYB_PAGE_SIZE
        PYB_SYNC_GLOBAL
        PYB_SYNC_PAGE
        PYB_SYNC_ATOMIC
        PYB_OVERFLOW_WRAP
        PYB_OVERFLOW_CLAMP
        PYB_OVERFLOW_WAIT
        PYB_ALLOC_UNTRACKED
        PYB_ALLOC_HIJACK
        PYB_ALLOC_POOL
        PYB_ALLOC_MEMPOOL
        PYB_ALLOC_MEMPOOL
        PYB_FREE_EAGER
        PYB_FREE_DEFERRED
        PYB_UNHIJACK_AT_END
        PYB_UNHIJACK_ON_DECAY
        PYB_START_UNTRACKED
        PYB_START_WOULD_BLOCK
        PYB_START_TIMED_OUT
        PYB_START_WAIT_PAGE
        PYB_LOCK_PTHREAD
        PYB_LOCK_SPIN_YIELD
        PYB_LOCK_TICKET
        PYB_LOCK_MCS
        PYB_SKIP_MAX
        PYB_MEMPOOL_RETRY_NS
        PYB_GFP_NOIO
        PYB_GFP_NOWAIT

    ctypedef struct pyb_tstats:
        uint64_t starts, ends, untracked_writes, alloc_failures, underflows, hijack_events
        uint64_t overflow_waits, overflow_clamps, overflow_wraps, mempool_waits, mempool_nulls

    ctypedef struct pyb_skip:
        uint64_t first, last

    ctypedef struct pyb_start_record:
        uint32_t n
        uint32_t lost
        uint64_t lost_from
        pyb_skip skip[PYB_SKIP_MAX]

    ctypedef struct pyb_ctx:
        pyb_tstats stats
        int64_t pinned
        int carry
        pyb_start_record rec

    ctypedef struct pyb_tracker_stats:
        uint64_t starts, ends, untracked_writes, alloc_failures, underflows, hijack_events
        uint64_t overflow_waits, overflow_clamps, overflow_wraps
        uint64_t hijacked_pages, pool_pages_used, pages_allocated, pages_freed
        uint64_t mempool_waits, pool_refills
        uint64_t mempool_rounds, mempool_wakeups, mempool_nulls

    ctypedef struct pyb_tracker_memory:
        uint64_t directory_bytes, page_bytes, total_bytes, peak_bytes, pages, peak_pages

    ctypedef struct pyb_tracker_config:
        uint64_t device_size
        uint64_t chunk_size
        int counter_bits
        int sync
        int overflow
        int alloc_failure
        uint32_t pool_pages
        pyb_fault *fault
        int lock_mode
        int free_policy
        uint64_t wait_timeout_ns
        uint64_t counter_max
        uint64_t mempool_round_ns
        int gfp
        int unhijack

    ctypedef struct pyb_tracker:
        pass

    int pyb_tracker_create(const pyb_tracker_config *cfg, pyb_tracker **out) noexcept
    void pyb_tracker_destroy(pyb_tracker *t) noexcept
    uint64_t pyb_tracker_n_chunks(const pyb_tracker *t) noexcept
    uint64_t pyb_tracker_n_slots(const pyb_tracker *t) noexcept
    uint64_t pyb_tracker_chunks_per_page(const pyb_tracker *t) noexcept
    uint64_t pyb_tracker_device_size(const pyb_tracker *t) noexcept
    uint64_t pyb_tracker_counter_max(const pyb_tracker *t) noexcept
    int pyb_tracker_start(pyb_tracker *t, pyb_ctx *ctx, uint64_t off, uint64_t len, int may_block,
                          uint64_t *resume) noexcept
    int pyb_tracker_start_until(pyb_tracker *t, pyb_ctx *ctx, uint64_t off, uint64_t len, uint64_t deadline_ns,
                                uint64_t *resume) noexcept
    int pyb_tracker_undo_start(pyb_tracker *t, pyb_ctx *ctx, uint64_t off, uint64_t len) noexcept
    int pyb_tracker_undo_recorded(pyb_tracker *t, pyb_ctx *ctx, uint64_t off, uint64_t len,
                                  const pyb_start_record *rec) noexcept
    void pyb_tracker_end(pyb_tracker *t, pyb_ctx *ctx, uint64_t off, uint64_t len) noexcept
    size_t pyb_tracker_start_many(pyb_tracker *t, pyb_ctx *ctx, const uint64_t *offs, const uint64_t *lens,
                                  uint64_t len, size_t n, int *ret, uint64_t *resume) noexcept
    void pyb_tracker_end_many(pyb_tracker *t, pyb_ctx *ctx, const uint64_t *offs, const uint64_t *lens,
                              uint64_t len, size_t n) noexcept
    int pyb_tracker_is_active(pyb_tracker *t, pyb_ctx *ctx, uint64_t off, uint64_t len) noexcept
    void pyb_tracker_ctx_done(pyb_tracker *t, pyb_ctx *ctx) noexcept
    void pyb_tracker_ctx_unpin(pyb_tracker *t, pyb_ctx *ctx) noexcept
    uint64_t pyb_tracker_count(pyb_tracker *t, uint64_t off) noexcept
    void pyb_tracker_counts(pyb_tracker *t, uint64_t *out) noexcept
    uint64_t pyb_tracker_reclaim(pyb_tracker *t) noexcept
    void pyb_tracker_get_stats(pyb_tracker *t, pyb_tracker_stats *out) noexcept
    void pyb_tracker_get_memory(pyb_tracker *t, pyb_tracker_memory *out) noexcept
