# Declarations of csrc/pyb_atomic.h (clocks only: the atomics are C-side).
from libc.stdint cimport uint64_t

cdef extern from "pyb_atomic.h" nogil:
    uint64_t pyb_now_ns() noexcept
    uint64_t pyb_thread_cpu_ns() noexcept
