# Declarations of csrc/pyb_ops.h and csrc/pyb_ops_lab.h (the tracker vtable the drivers hold).
from libc.stdint cimport uint64_t

from pybcache.bcache.includes.pyb_tracker cimport pyb_tracker

cdef extern from "pyb_ops.h" nogil:
    enum:
        PYB_OPS_UNTRACKED
        PYB_OPS_WOULD_BLOCK
        PYB_OPS_EHUNG
        PYB_OPS_EINTR
        PYB_OPS_EFATAL
        PYB_OPS_EBROKEN
        PYB_OPS_CAN_RESUME
        PYB_OPS_RELEASE_ACQUIRE

    ctypedef struct pyb_ops_stats:
        uint64_t starts, ends, checks, alloc_failures, untracked_writes, underflows

    ctypedef struct pyb_ops_memory:
        uint64_t idle_bytes, op_bytes, total_bytes, peak_bytes, op_allocations, peak_op_allocations

    ctypedef struct pyb_ops:
        const char *name
        unsigned flags
        size_t ctx_size
        void (*stats)(void *self, pyb_ops_stats *out) noexcept nogil
        void (*memory)(void *self, pyb_ops_memory *out) noexcept nogil

    ctypedef struct pyb_ops_tracker:
        const pyb_ops *ops
        void *self

cdef extern from "pyb_ops_lab.h" nogil:
    const pyb_ops pyb_lab_ops
    pyb_ops_tracker pyb_ops_lab(pyb_tracker *t) noexcept
    pyb_tracker *pyb_ops_lab_tracker(pyb_ops_tracker t) noexcept

cdef extern from "pyb_kpatch.h" nogil:
    const pyb_ops pyb_kpatch_ops
