/* pyb_atomic.c - futex wait/wake, clocks, and the queued lock's slow path and node registry (Linux). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "pyb_atomic.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

void pyb_futex_wait(_Atomic uint32_t *word, uint32_t expected)
{
    /* FUTEX_WAIT re-checks *word == expected atomically in the kernel, so a wake that happened
     * between our caller's check and this call is not lost. */
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

int pyb_futex_wait_ns(_Atomic uint32_t *word, uint32_t expected, uint64_t timeout_ns)
{
    if (!timeout_ns) {
        pyb_futex_wait(word, expected);
        return 0;
    }
    /* FUTEX_WAIT's timeout is relative (CLOCK_MONOTONIC). */
    struct timespec ts = {(time_t)(timeout_ns / 1000000000ull), (long)(timeout_ns % 1000000000ull)};
    if (syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_PRIVATE, expected, &ts, NULL, 0) != 0 &&
        errno == ETIMEDOUT)
        return ETIMEDOUT;
    return 0;
}

void pyb_futex_wake_all(_Atomic uint32_t *word)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

uint64_t pyb_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t pyb_thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ------------------------------------------------------------------------------------------------ */
/* PYB_LOCK_MCS: the queued lock's slow path and its node registry                                    */

/*
 * The protocol (our own code after the design of the kernel's qspinlock and MCS lock; read for behaviour:
 * kernel/locking/qspinlock.c, kernel/locking/mcs_spinlock.h; there is no pending bit here, so the second
 * contender queues at once):
 *   1. Fast path (pyb_lock): if tail == 0, one CAS of `locked` 0 -> 1. Otherwise, or if it fails, queue.
 *   2. Queue: reset the own node (next = NULL, head = 0), exchange the own id into `tail`. The exchange
 *      returns the previous tail; if it named a node, link to it (prev->next = own node) and spin on the
 *      own node's `head` flag until the predecessor sets it. Now this thread is the queue's head.
 *   3. Head: spin on `locked` until it reads 0, then CAS it 0 -> 1; repeat until the CAS succeeds.
 *   4. Leave the queue: CAS `tail` from the own id to 0. If that fails a successor has exchanged itself
 *      in; wait until it has linked (own next != NULL) and set its `head` flag. The own node is free.
 *   Unlock: store `locked` = 0 (release); the queue is not touched.
 * Mutually exclusive: `locked` becomes 1 only by a CAS that read 0 and becomes 0 only by the holder's
 * store, so at most one thread holds it between a successful CAS and the next store of 0.
 * FIFO among queued waiters: each waiter's exchange returns its predecessor and it waits for the flag
 * that only that predecessor sets, after taking the lock; only the head competes for `locked`, so the
 * queue takes the lock in the order of its exchanges. The head's only rivals are threads that read
 * tail == 0 before the queue formed (one CAS each, then they queue: a bounded overtaking) and
 * threads without a node (see pyb_atomic.h), which also wait for tail == 0.
 * Node lifetime: a node is reset before its thread's exchange (release) and linked by a successor only
 * after that successor's exchange read it from `tail` (acquire), so the reset is not lost. A head
 * leaves only once no successor can still write to its node (its CAS to 0 succeeded: any later arrival
 * finds another tail; or it failed and it waited for the link), so a thread may reuse its node at once.
 * The predecessor's store to the own `head` happens after it read the own `next` link (acquire),
 * itself after the own reset (release): the reset cannot overwrite the hand-over.
 * Waits spin PYB_LOCK_SPINS pause iterations, then yield between checks, as the ticket lock does: with
 * more threads than CPUs a queued lock stalls when its next owner is not running (the convoy the
 * benchmarks measure), and yielding gives that thread the CPU.
 * Only the head spins on the lock's line; every other waiter spins on its own node's line.
 */

typedef struct mcs_registry {
    pyb_mcs_node nodes[PYB_MCS_NODES];
    pthread_mutex_t mu;                /* guards the fields below (taken once per thread, at exit too) */
    uint32_t fresh;                    /* under mu: never-used ids handed out so far */
    uint32_t limit;                    /* under mu: cap on the ids in use (tests; 0 = PYB_MCS_NODES) */
    uint32_t n_free;                   /* under mu: ids in free_ids */
    uint32_t free_ids[PYB_MCS_NODES];  /* under mu: ids returned by exited threads */
} mcs_registry;

static mcs_registry own_registry = {.mu = PTHREAD_MUTEX_INITIALIZER};
/* The registry this copy of the C core uses. Written only by pyb_mcs_registry_share at module import,
 * before any thread can run this copy's lock code (the import happens-before those threads start). */
static mcs_registry *registry = &own_registry;

#define MCS_REFUSED UINT32_MAX
static _Thread_local uint32_t my_id;   /* this thread's node id (index + 1), 0 = none yet, MCS_REFUSED */
static _Thread_local int my_queued;    /* 1 while this thread's node is in a queue (re-entry check) */

static pthread_key_t exit_key;
static int exit_key_ok;                /* written once under exit_once */
static pthread_once_t exit_once = PTHREAD_ONCE_INIT;

static void mcs_thread_exit(void *value)
{
    uint32_t id = (uint32_t)(uintptr_t)value;
    /* The id is given back: a lock taken later in this thread's exit (another key's destructor) must not
     * queue on the node a new thread may hold by then, so this thread has no node from here on. */
    my_id = MCS_REFUSED;
    pthread_mutex_lock(&registry->mu);
    registry->free_ids[registry->n_free++] = id;
    pthread_mutex_unlock(&registry->mu);
}

static void mcs_key_create(void) { exit_key_ok = pthread_key_create(&exit_key, mcs_thread_exit) == 0; }

uint32_t pyb_mcs_node_id(void)
{
    if (my_id)
        return my_id == MCS_REFUSED ? 0 : my_id;
    pthread_once(&exit_once, mcs_key_create);
    mcs_registry *r = registry;
    uint32_t id = 0;
    pthread_mutex_lock(&r->mu);
    uint32_t cap = r->limit ? r->limit : PYB_MCS_NODES;
    if (r->fresh - r->n_free < cap)
        id = r->n_free ? r->free_ids[--r->n_free] : ++r->fresh;
    pthread_mutex_unlock(&r->mu);
    /* Without the key (pthread_key_create failed) the id is simply never recycled. If the key exists
     * but cannot hold the id, the id would not come back at exit: give it back now and refuse. */
    if (id && exit_key_ok && pthread_setspecific(exit_key, (void *)(uintptr_t)id) != 0) {
        mcs_thread_exit((void *)(uintptr_t)id);
        id = 0;
    }
    my_id = id ? id : MCS_REFUSED;
    return id;
}

void *pyb_mcs_registry(void) { return registry; }

void pyb_mcs_registry_share(void *r)
{
    if (r)
        registry = r;
}

uint32_t pyb_mcs_nodes_in_use(void)
{
    pthread_mutex_lock(&registry->mu);
    uint32_t n = registry->fresh - registry->n_free;
    pthread_mutex_unlock(&registry->mu);
    return n;
}

void pyb_mcs_test_limit(uint32_t limit)
{
    pthread_mutex_lock(&registry->mu);
    registry->limit = limit < PYB_MCS_NODES ? limit : 0;
    pthread_mutex_unlock(&registry->mu);
}

/* One step of a bounded spin: PYB_LOCK_SPINS pauses, then a yield per check. */
static inline void mcs_relax(unsigned *spins)
{
    if (*spins < PYB_LOCK_SPINS) {
        (*spins)++;
        pyb_cpu_relax();
    } else {
        sched_yield();
    }
}

/* Take `locked` by CAS once it reads 0 (the head's step 3, and the nodeless fallback with need_empty). */
static void mcs_take_locked(pyb_spinlock *l, int need_empty)
{
    unsigned spins = 0;
    for (;;) {
        if (!pyb_load(&l->mcs.locked, PYB_RELAXED) && (!need_empty || !pyb_load(&l->mcs.tail, PYB_RELAXED))) {
            uint16_t free_ = 0;
            if (pyb_cas(&l->mcs.locked, &free_, 1, PYB_ACQUIRE, PYB_RELAXED))
                return;
        }
        mcs_relax(&spins);
    }
}

void pyb_mcs_lock_slow(pyb_spinlock *l)
{
    uint32_t id = my_queued ? 0 : pyb_mcs_node_id();
    if (!id) { /* no node (registry exhausted, or re-entered while queued): spin on the word */
        mcs_take_locked(l, 1);
        return;
    }
    pyb_mcs_node *me = &registry->nodes[id - 1];
    my_queued = 1;
    pyb_store(&me->next, NULL, PYB_RELAXED);
    pyb_store(&me->head, 0, PYB_RELAXED);
    uint16_t prev = atomic_exchange_explicit(&l->mcs.tail, (uint16_t)id, PYB_ACQ_REL);
    if (prev) {
        pyb_store(&registry->nodes[prev - 1].next, me, PYB_RELEASE);
        unsigned spins = 0;
        while (!pyb_load(&me->head, PYB_ACQUIRE))
            mcs_relax(&spins);
    }
    mcs_take_locked(l, 0);
    uint16_t mine = (uint16_t)id;
    if (!pyb_cas(&l->mcs.tail, &mine, 0, PYB_ACQ_REL, PYB_RELAXED)) {
        pyb_mcs_node *next;
        unsigned spins = 0;
        while (!(next = pyb_load(&me->next, PYB_ACQUIRE)))
            mcs_relax(&spins);
        pyb_store(&next->head, 1, PYB_RELEASE);
    }
    my_queued = 0;
}
