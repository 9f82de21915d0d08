/* pyb_floor.c - see pyb_floor.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "pyb_floor.h"

#include <pthread.h>

#include "pyb_atomic.h"

double pyb_floor_atomic_pair_ns(uint64_t n)
{
    _Atomic uint64_t ctr = 0;
    uint64_t t0 = pyb_now_ns();
    for (uint64_t i = 0; i < n; i++) {
        pyb_fetch_add(&ctr, 1, PYB_RELAXED);
        pyb_fetch_sub(&ctr, 1, PYB_RELAXED);
    }
    return (double)(pyb_now_ns() - t0) / (double)(n ? n : 1);
}

double pyb_floor_spin_pair_ns(uint64_t n)
{
    pyb_spinlock lk;
    volatile uint64_t ctr = 0;
    pyb_spin_init(&lk);
    uint64_t t0 = pyb_now_ns();
    for (uint64_t i = 0; i < n; i++) {
        pyb_spin_lock(&lk);
        ctr = ctr + 1;
        pyb_spin_unlock(&lk);
        pyb_spin_lock(&lk);
        ctr = ctr - 1;
        pyb_spin_unlock(&lk);
    }
    double ns = (double)(pyb_now_ns() - t0) / (double)(n ? n : 1);
    pyb_spin_destroy(&lk);
    return ns;
}

typedef struct shared_arg {
    _Atomic uint64_t *ctr;
    uint64_t n;
} shared_arg;

static void *shared_worker(void *p)
{
    shared_arg *a = p;
    for (uint64_t i = 0; i < a->n; i++) {
        pyb_fetch_add(a->ctr, 1, PYB_RELAXED);
        pyb_fetch_sub(a->ctr, 1, PYB_RELAXED);
    }
    return NULL;
}

double pyb_floor_shared_atomic_pair_ns(uint64_t n)
{
    _Alignas(64) _Atomic uint64_t ctr = 0;
    shared_arg a = {&ctr, n};
    pthread_t th;
    uint64_t t0 = pyb_now_ns();
    if (pthread_create(&th, NULL, shared_worker, &a) != 0)
        return -1.0;
    shared_worker(&a);
    pthread_join(th, NULL);
    return (double)(pyb_now_ns() - t0) / (double)(n ? n : 1);
}
