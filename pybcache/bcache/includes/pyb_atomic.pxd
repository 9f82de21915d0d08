# Declarations of csrc/pyb_atomic.h (clocks and the queued lock's node registry: the atomics are C-side).
from libc.stdint cimport uint64_t

cdef extern from "pyb_atomic.h" nogil:
    uint64_t pyb_now_ns() noexcept
    uint64_t pyb_thread_cpu_ns() noexcept
    void *pyb_mcs_registry() noexcept
    void pyb_mcs_registry_share(void *registry) noexcept
