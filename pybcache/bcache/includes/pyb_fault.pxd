# Declarations of csrc/pyb_fault.h.
from libc.stdint cimport int64_t, uint64_t

cdef extern from "pyb_fault.h" nogil:
    ctypedef struct pyb_fault:
        pass
    void pyb_fault_init(pyb_fault *f, double probability, uint64_t interval, int64_t times, int64_t space,
                        uint64_t seed) noexcept
    int pyb_fault_should_fail(pyb_fault *f, uint64_t size) noexcept
    uint64_t pyb_fault_injected(const pyb_fault *f) noexcept
