/* pyb_floor.c - see pyb_floor.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "pyb_floor.h"

#include <pthread.h>
#include <sched.h>
#include <string.h>

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
    int cpu; /* pin the thread running shared_worker to this CPU; -1 = leave it */
    int pinned; /* set by the thread: 1 if its pinning succeeded */
} shared_arg;

static void *shared_worker(void *p)
{
    shared_arg *a = p;
    if (a->cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(a->cpu, &set);
        a->pinned = pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
    }
    for (uint64_t i = 0; i < a->n; i++) {
        pyb_fetch_add(a->ctr, 1, PYB_RELAXED);
        pyb_fetch_sub(a->ctr, 1, PYB_RELAXED);
    }
    return NULL;
}

/* The first two CPUs this process may run on, or -1s when it has fewer than two. */
static int two_cpus(int cpu[2])
{
    cpu_set_t set;
    int n = 0;
    cpu[0] = cpu[1] = -1;
    if (sched_getaffinity(0, sizeof(set), &set) != 0)
        return 0;
    for (int c = 0; c < CPU_SETSIZE && n < 2; c++)
        if (CPU_ISSET(c, &set))
            cpu[n++] = c;
    if (n < 2)
        cpu[0] = cpu[1] = -1;
    return CPU_COUNT(&set);
}

double pyb_floor_shared_atomic_pair_ns(uint64_t n, int *pinned, int *cpus)
{
    _Alignas(64) _Atomic uint64_t ctr = 0;
    int cpu[2];
    int ncpu = two_cpus(cpu);
    shared_arg a = {&ctr, n, cpu[0], 0}, b = {&ctr, n, cpu[1], 0};
    pthread_t th[2];
    /* Both workers are new threads, so the caller's own affinity is left alone. */
    uint64_t t0 = pyb_now_ns();
    if (pthread_create(&th[0], NULL, shared_worker, &a) != 0)
        return -1.0;
    if (pthread_create(&th[1], NULL, shared_worker, &b) != 0) {
        pthread_join(th[0], NULL);
        return -1.0;
    }
    pthread_join(th[0], NULL);
    pthread_join(th[1], NULL);
    double ns = (double)(pyb_now_ns() - t0) / (double)(n ? n : 1);
    if (pinned)
        *pinned = a.pinned && b.pinned;
    if (cpus)
        *cpus = ncpu;
    return ns;
}

/* The lock and the counter of pyb_floor_shared_lock_pair_ns: on one cache line or two. */
typedef struct spin_lines {
    _Alignas(64) pyb_spinlock lock;
    uint64_t ctr_same_line;              /* under lock */
    _Alignas(64) uint64_t ctr_own_line;  /* under lock */
} spin_lines;

typedef struct spin_arg {
    spin_lines *l;
    uint64_t n;
    int mode, colocated, cpu, pinned;
} spin_arg;

static void *spin_worker(void *p)
{
    spin_arg *a = p;
    if (a->cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(a->cpu, &set);
        a->pinned = pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
    }
    volatile uint64_t *ctr = a->colocated ? &a->l->ctr_same_line : &a->l->ctr_own_line;
    const int mode = a->mode;
    for (uint64_t i = 0; i < a->n; i++) {
        pyb_lock(&a->l->lock, mode);
        *ctr = *ctr + 1;
        pyb_unlock(&a->l->lock, mode);
        pyb_lock(&a->l->lock, mode);
        *ctr = *ctr - 1;
        pyb_unlock(&a->l->lock, mode);
    }
    return NULL;
}

double pyb_floor_shared_lock_pair_ns(uint64_t n, int mode, int colocated, int *pinned)
{
    if (mode < PYB_LOCK_PTHREAD || mode > PYB_LOCK_MCS)
        return -1.0;
    spin_lines l;
    memset(&l, 0, sizeof(l));
    if (pyb_lock_init(&l.lock, mode) != 0)
        return -1.0;
    int cpu[2];
    two_cpus(cpu);
    spin_arg a = {&l, n, mode, colocated, cpu[0], 0}, b = {&l, n, mode, colocated, cpu[1], 0};
    pthread_t th[2];
    uint64_t t0 = pyb_now_ns();
    if (pthread_create(&th[0], NULL, spin_worker, &a) != 0) {
        pyb_lock_destroy(&l.lock, mode);
        return -1.0;
    }
    if (pthread_create(&th[1], NULL, spin_worker, &b) != 0) {
        pthread_join(th[0], NULL);
        pyb_lock_destroy(&l.lock, mode);
        return -1.0;
    }
    pthread_join(th[0], NULL);
    pthread_join(th[1], NULL);
    double ns = (double)(pyb_now_ns() - t0) / (double)(n ? n : 1);
    if (pinned)
        *pinned = a.pinned && b.pinned;
    pyb_lock_destroy(&l.lock, mode);
    return ns;
}

double pyb_floor_shared_spin_pair_ns(uint64_t n, int colocated, int *pinned)
{
    return pyb_floor_shared_lock_pair_ns(n, PYB_LOCK_PTHREAD, colocated, pinned);
}
