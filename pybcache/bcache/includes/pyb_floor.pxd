# Declarations of csrc/pyb_floor.h.
from libc.stdint cimport uint64_t

cdef extern from "pyb_floor.h" nogil:
    double pyb_floor_atomic_pair_ns(uint64_t n) noexcept
    double pyb_floor_spin_pair_ns(uint64_t n) noexcept
    double pyb_floor_shared_atomic_pair_ns(uint64_t n, int *pinned, int *cpus) noexcept
    double pyb_floor_shared_spin_pair_ns(uint64_t n, int colocated, int *pinned) noexcept
    double pyb_floor_shared_lock_pair_ns(uint64_t n, int mode, int colocated, int *pinned) noexcept
