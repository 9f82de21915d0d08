/*
 * pyb_fault.h - allocation-failure injection with the kernel's fault-injection attributes.
 *
 * The attributes mean what they mean in the kernel's debugfs fault-injection directories:
 *   space       a budget in bytes: while the remaining budget exceeds a call's size, the call only
 *               consumes the budget and never fails;
 *   interval    only every interval-th eligible call may fail (1 = every call);
 *   probability chance that an eligible call fails, as a fraction in [0, 1] (the kernel uses percent);
 *   times       how many failures may still be injected; -1 = unlimited, 0 = none left.
 * Calls are evaluated in that order, as the kernel does. The random draw of the n-th eligible call is
 * splitmix64(seed + n), so a single-threaded sequence of calls is reproducible from the seed.
 */
#ifndef PYB_FAULT_H
#define PYB_FAULT_H

#include <stdint.h>

#include "pyb_atomic.h"

typedef struct pyb_fault {
    double probability;              /* immutable after init */
    uint64_t interval;               /* immutable after init, >= 1 */
    uint64_t seed;                   /* immutable after init */
    _Atomic int64_t times;           /* remaining failures, -1 unlimited; CAS-decremented */
    _Atomic int64_t space;           /* remaining byte budget; CAS-decremented */
    _Atomic uint64_t calls;          /* calls past the space budget (relaxed counter: the interval clock) */
    _Atomic uint64_t draws;          /* random draws taken (relaxed counter: the stream index) */
    _Atomic uint64_t injected;       /* failures injected so far (relaxed counter) */
} pyb_fault;

/* Initialise; the caller has validated the ranges (probability in [0,1], interval >= 1, times >= -1,
 * space >= 0). */
void pyb_fault_init(pyb_fault *f, double probability, uint64_t interval, int64_t times, int64_t space,
                    uint64_t seed);

/* Should an allocation of `size` bytes fail now? Thread-safe, lock-free. A NULL f never fails. */
int pyb_fault_should_fail(pyb_fault *f, uint64_t size);

/* Failures injected so far. */
uint64_t pyb_fault_injected(const pyb_fault *f);

#endif /* PYB_FAULT_H */
