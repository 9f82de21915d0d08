# Declarations of csrc/pyb_cachedev.h.
from libc.stdint cimport uint32_t, uint64_t

from pybcache.bcache.includes.pyb_ops cimport pyb_ops_tracker
from pybcache.bcache.includes.pyb_tracker cimport pyb_ctx, pyb_tracker

cdef extern from "pyb_cachedev.h" nogil:
    enum:
        PYB_CD_MAX_READ_BLOCKS
        PYB_CHECK_AFTER
        PYB_CHECK_ENTRY
        PYB_CHECK_MISS
        PYB_CHECK_READ_DONE
        PYB_CHECK_BEFORE
        PYB_GRAN_CHUNK
        PYB_GRAN_PAGE
        PYB_DELAY_SPIN
        PYB_DELAY_YIELD
        PYB_W_START
        PYB_W_INVALIDATE
        PYB_W_LAND
        PYB_W_END
        PYB_W_DONE
        PYB_W_BLOCKED
        PYB_R_LOOKUP
        PYB_R_CHECK
        PYB_R_CHECK_KEY
        PYB_R_BACKING
        PYB_R_INSERT
        PYB_R_DONE
        PYB_WK_BYPASS
        PYB_WK_WRITETHROUGH
        PYB_WK_DISCARD
        PYB_WK_DETACHED
        PYB_TRACK_BYPASS
        PYB_TRACK_INVALIDATIONS
        PYB_TRACK_ALL
        PYB_INV_AT_SUBMIT
        PYB_INV_AFTER_WRITE
        PYB_CD_ALLOC_DRAW
        PYB_CD_ALLOC_OK
        PYB_CD_ALLOC_FAIL

    uint64_t PYB_CD_EMPTY
    uint64_t PYB_CD_TAG_CHECK
    uint64_t PYB_CD_TAG_VALID

    ctypedef struct pyb_cd_config:
        uint64_t device_size
        uint32_t block_size
        uint32_t region_blocks
        pyb_tracker *tracker
        pyb_ops_tracker ops
        int check
        int delay_mode
        uint64_t write_delay_ns
        int bounce_copy
        int no_restart
        int granularity
        int split_tracker_calls
        int track
        uint64_t cache_alloc_fail
        int invalidate

    ctypedef struct pyb_cd_stats:
        uint64_t reads, read_hits, read_misses, read_bypasses, cache_inserts, blocks_inserted
        uint64_t miss_collisions, stale_reads, writes, untracked_writes, bounce_bytes
        uint64_t tracker_checks, check_key_restarts
        uint64_t writethrough_writes, writethrough_fallbacks

    ctypedef struct pyb_cachedev:
        pass

    ctypedef struct pyb_cd_ctx:
        pyb_ctx tctx
        uint64_t token_base
        uint64_t token_seq
        pyb_cd_stats stats

    ctypedef struct pyb_cd_write:
        uint64_t blk, nblk
        int kind
        int alloc
        int fallback
        int counted
        int late
        uint64_t version
        uint64_t cursor
        int step
        int untracked
        int blocked
        uint64_t resume
        int wait_page
        int timed_out
        int error

    ctypedef struct pyb_cd_read:
        uint64_t blk, nblk
        uint64_t token
        uint64_t miss
        uint64_t cursor
        uint64_t floor[64]
        uint64_t version[64]
        uint64_t seq[64]
        int step, began, looked, checked, active, keyed, restarts, hit, inserted, collided, stale, error

    int pyb_cd_create(const pyb_cd_config *cfg, pyb_cachedev **out) noexcept
    void pyb_cd_destroy(pyb_cachedev *d) noexcept
    uint64_t pyb_cd_n_blocks(const pyb_cachedev *d) noexcept
    uint32_t pyb_cd_block_size(const pyb_cachedev *d) noexcept
    pyb_tracker *pyb_cd_tracker(const pyb_cachedev *d) noexcept
    void pyb_cd_set_tracker(pyb_cachedev *d, pyb_tracker *t) noexcept
    pyb_ops_tracker pyb_cd_ops(const pyb_cachedev *d) noexcept
    int pyb_cd_set_ops(pyb_cachedev *d, pyb_ops_tracker t) noexcept
    int pyb_cd_error(const pyb_cachedev *d) noexcept
    int pyb_cd_set_track(pyb_cachedev *d, int track) noexcept
    void pyb_cd_reset_cache(pyb_cachedev *d) noexcept
    void pyb_cd_reset(pyb_cachedev *d) noexcept
    void pyb_cd_ctx_init(pyb_cachedev *d, pyb_cd_ctx *c) noexcept
    void pyb_cd_ctx_done(pyb_cachedev *d, pyb_cd_ctx *c) noexcept
    void pyb_cd_write_init(pyb_cd_write *w, uint64_t blk, uint64_t nblk) noexcept
    int pyb_cd_write_step(pyb_cachedev *d, pyb_cd_ctx *c, pyb_cd_write *w) noexcept
    void pyb_cd_read_init(pyb_cachedev *d, pyb_cd_ctx *c, pyb_cd_read *r, uint64_t blk, uint64_t nblk) noexcept
    int pyb_cd_read_step(pyb_cachedev *d, pyb_cd_ctx *c, pyb_cd_read *r) noexcept
    int pyb_cd_read_next(const pyb_cachedev *d, const pyb_cd_read *r) noexcept
    uint64_t pyb_cd_write_run(pyb_cachedev *d, pyb_cd_ctx *c, uint64_t blk, uint64_t nblk) noexcept
    int pyb_cd_write_try_start(pyb_cachedev *d, pyb_cd_ctx *c, pyb_cd_write *w) noexcept
    int pyb_cd_write_start_until(pyb_cachedev *d, pyb_cd_ctx *c, pyb_cd_write *w, uint64_t deadline_ns) noexcept
    int pyb_cd_write_abandon(pyb_cachedev *d, pyb_cd_ctx *c, pyb_cd_write *w) noexcept
    uint64_t pyb_cd_write_finish(pyb_cachedev *d, pyb_cd_ctx *c, pyb_cd_write *w) noexcept
    void pyb_cd_write_submit(pyb_cachedev *d, pyb_cd_ctx *c, pyb_cd_write *w) noexcept
    int pyb_cd_write_complete_on_thread(pyb_cachedev *d, pyb_cd_ctx *c, pyb_cd_write *w, int whole) noexcept
    void pyb_cd_read_run(pyb_cachedev *d, pyb_cd_ctx *c, pyb_cd_read *r, uint64_t blk, uint64_t nblk) noexcept
    void pyb_cd_delay(int mode, uint64_t ns) noexcept
    uint64_t pyb_cd_write_delay_ns(const pyb_cachedev *d) noexcept
    int pyb_cd_write_delay_mode(const pyb_cachedev *d) noexcept
    uint64_t pyb_cd_cache_entry(pyb_cachedev *d, uint64_t blk) noexcept
    uint64_t pyb_cd_backing_version(pyb_cachedev *d, uint64_t blk) noexcept
    uint64_t pyb_cd_completed_version(pyb_cachedev *d, uint64_t blk) noexcept
    uint64_t pyb_cd_node_seq(pyb_cachedev *d, uint64_t blk) noexcept
    uint64_t pyb_cd_stale_cached_blocks(pyb_cachedev *d) noexcept
    uint64_t pyb_cd_cached_blocks(pyb_cachedev *d) noexcept
    void pyb_cd_get_stats(pyb_cachedev *d, pyb_cd_stats *out) noexcept
