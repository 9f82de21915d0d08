# Declarations of csrc/pyb_driver.h (the caller's side of a native run).
from libc.stdint cimport uint32_t, uint64_t

cdef extern from "pyb_driver.h" nogil:
    ctypedef struct pyb_run:
        pass

    ctypedef struct pyb_run_timeout:
        uint32_t thread
        uint64_t offset
        uint64_t waited_ns
        int wait_page

    int pyb_run_wait(pyb_run *r, uint64_t ns) noexcept
    void pyb_run_stop(pyb_run *r) noexcept
    int pyb_run_finish(pyb_run *r, pyb_run_timeout *to) noexcept
