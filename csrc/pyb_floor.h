/*
 * pyb_floor.h - the machine's own floors for the benchmarks: the cost of the bare primitive a
 * tracker variant is built on, measured in the same run as the tracker.
 */
#ifndef PYB_FLOOR_H
#define PYB_FLOOR_H

#include <stdint.h>

/* ns per (fetch_add, fetch_sub) pair on one uncontended atomic counter, over n pairs. */
double pyb_floor_atomic_pair_ns(uint64_t n);
/* ns per (lock, increment, unlock) + (lock, decrement, unlock) pair on one pthread spinlock. */
double pyb_floor_spin_pair_ns(uint64_t n);
/*
 * ns per pair of atomic increments by 2 threads on one shared counter (the cache-line bounce floor),
 * the two threads pinned to two distinct CPUs of the process's affinity mask: *pinned = 1 if both
 * pinnings took, 0 if not (fewer than 2 CPUs allowed: the threads then share whatever they get);
 * *cpus = the CPUs the process may run on. Either pointer may be NULL.
 */
double pyb_floor_shared_atomic_pair_ns(uint64_t n, int *pinned, int *cpus);
/*
 * The lock variants' bounce floor: ns per (lock, increment, unlock) + (lock, decrement, unlock) pair by
 * 2 threads (pinned as above) on one pthread spinlock and one counter, the counter on the lock's cache
 * line (colocated != 0: one line bounces) or on its own line (two lines bounce, as the tracker's slot
 * lock and page counter do).
 */
double pyb_floor_shared_spin_pair_ns(uint64_t n, int colocated, int *pinned);
/*
 * The same floor for any lock mode of pyb_atomic.h (PYB_LOCK_*; -1.0 for another): the 2-thread floor of
 * the lock a same-chunk row runs on (pyb_floor_shared_spin_pair_ns is this with PYB_LOCK_PTHREAD).
 */
double pyb_floor_shared_lock_pair_ns(uint64_t n, int mode, int colocated, int *pinned);

#endif /* PYB_FLOOR_H */
