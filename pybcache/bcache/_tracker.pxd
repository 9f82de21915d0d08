# Exported C-level view of pybcache.bcache._tracker (issue #11): other modules cimport these classes and
# use their C pointers (the tracker and the fault injector the caller built) instead of copies.
cimport cython
from libc.stdint cimport uint32_t, uint64_t

from pybcache.bcache.includes.pyb_fault cimport pyb_fault
from pybcache.bcache.includes.pyb_tracker cimport pyb_ctx, pyb_tracker, pyb_tstats


cdef class FaultInjection:
    cdef pyb_fault *_f                  # owned; shared (by pointer) with every tracker given this object
    cdef readonly double probability
    cdef readonly long long interval
    cdef readonly long long times
    cdef readonly long long space
    cdef readonly long long seed


@cython.final
cdef class BypassWriteTracker:
    cdef pyb_tracker *_t                # owned
    cdef readonly uint64_t device_size
    cdef readonly uint64_t chunk_size
    cdef readonly str sync
    cdef readonly int counter_bits
    cdef readonly str overflow
    cdef readonly str alloc_failure
    cdef readonly uint32_t pool_pages
    cdef readonly object fault
    cdef readonly str lock
    cdef readonly str free
    cdef readonly str unhijack
    cdef readonly object wait_timeout
    cdef readonly str gfp
    cdef readonly double mempool_round
    cdef readonly uint64_t n_chunks
    cdef pyb_tstats _gil_stats   # single-call statistics; only touched with the GIL held
    cdef uint64_t _wait_timeout_ns
    cdef bint _keeps             # a start can both leave chunks uncounted and wait: a batch keeps
                                 # its elements' start records for an exact undo

    cdef int _check_range(self, object offset, object length, uint64_t *off, uint64_t *ln) except -1
    cdef void _fold(self, pyb_ctx *ctx) noexcept
    cdef int _wait(self, pyb_ctx *ctx, uint64_t off, uint64_t ln, uint64_t *resume, object element) except -1
    cdef str _undone(self, uint64_t left_from)
    cdef tuple _check_batch(self, object offsets, object lengths)
    # the common batch's check in two passes (a copy and its maximum), or None for the general one
    cdef object _check_batch_fast(self, object offsets, object lengths)


# The queued lock's node registry of this module's copy of the C core: pybcache.bcache._cachedev and
# pybcache.bcache.kpatch._kpatch adopt it at import (csrc/pyb_atomic.h, pyb_mcs_registry_share).
cdef void *_mcs_registry() noexcept nogil
