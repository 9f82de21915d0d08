/* pyb_fault.c - see pyb_fault.h for the attribute semantics. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "pyb_fault.h"

void pyb_fault_init(pyb_fault *f, double probability, uint64_t interval, int64_t times, int64_t space,
                    uint64_t seed)
{
    f->probability = probability;
    f->interval = interval ? interval : 1;
    f->seed = seed;
    atomic_init(&f->times, times);
    atomic_init(&f->space, space);
    atomic_init(&f->calls, 0);
    atomic_init(&f->draws, 0);
    atomic_init(&f->injected, 0);
}

/* Take one failure from the `times` budget; false when none is left. */
static int take_time(pyb_fault *f)
{
    int64_t t = pyb_load(&f->times, PYB_RELAXED);
    for (;;) {
        if (t == -1)
            return 1;
        if (t <= 0)
            return 0;
        if (pyb_cas_weak(&f->times, &t, t - 1, PYB_RELAXED, PYB_RELAXED))
            return 1;
    }
}

int pyb_fault_should_fail(pyb_fault *f, uint64_t size)
{
    if (!f)
        return 0;
    if (pyb_load(&f->times, PYB_RELAXED) == 0)
        return 0;
    /* Budget: while more than `size` bytes remain, consume and succeed. */
    int64_t s = pyb_load(&f->space, PYB_RELAXED);
    while (s > (int64_t)size) {
        if (pyb_cas_weak(&f->space, &s, s - (int64_t)size, PYB_RELAXED, PYB_RELAXED))
            return 0;
    }
    if (f->interval > 1) {
        uint64_t n = pyb_fetch_add(&f->calls, 1, PYB_RELAXED) + 1;
        if (n % f->interval)
            return 0;
    }
    if (f->probability < 1.0) {
        if (f->probability <= 0.0)
            return 0;
        uint64_t k = pyb_fetch_add(&f->draws, 1, PYB_RELAXED);
        double u = (double)(pyb_splitmix64(f->seed + k) >> 11) * 0x1.0p-53; /* uniform in [0, 1) */
        if (u >= f->probability)
            return 0;
    }
    if (!take_time(f))
        return 0;
    pyb_fetch_add(&f->injected, 1, PYB_RELAXED);
    return 1;
}

uint64_t pyb_fault_injected(const pyb_fault *f)
{
    return pyb_load(&((pyb_fault *)f)->injected, PYB_RELAXED);
}
