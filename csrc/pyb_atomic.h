/*
 * pyb_atomic.h - the one atomics and spinlock layer of pybcache.
 *
 * Everything shared between threads in csrc/ goes through these wrappers, so that every access names
 * its memory order at the call site. Rules used throughout:
 *   - a field protected by a spinlock is accessed with PYB_RELAXED loads/stores while the lock is
 *     held (the lock's acquire/release orders them); it is declared _Atomic only where a lockless
 *     reader exists or where the same storage is shared with the lockless variant;
 *   - lockless publication uses release on the writer and acquire on the reader;
 *   - seq_cst is used only where a store->load ordering (Dekker pattern) is needed, and the comment at
 *     that site says why.
 */
#ifndef PYB_ATOMIC_H
#define PYB_ATOMIC_H

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>

#define PYB_RELAXED memory_order_relaxed
#define PYB_ACQUIRE memory_order_acquire
#define PYB_RELEASE memory_order_release
#define PYB_ACQ_REL memory_order_acq_rel
#define PYB_SEQ_CST memory_order_seq_cst

#define PYB_CACHELINE 64

#define pyb_load(p, mo) atomic_load_explicit((p), (mo))
#define pyb_store(p, v, mo) atomic_store_explicit((p), (v), (mo))
#define pyb_fetch_add(p, v, mo) atomic_fetch_add_explicit((p), (v), (mo))
#define pyb_fetch_sub(p, v, mo) atomic_fetch_sub_explicit((p), (v), (mo))
#define pyb_fetch_or(p, v, mo) atomic_fetch_or_explicit((p), (v), (mo))
#define pyb_fetch_and(p, v, mo) atomic_fetch_and_explicit((p), (v), (mo))
/* Strong CAS; on failure *expected receives the current value (loaded with `fail`). */
#define pyb_cas(p, expected, desired, succ, fail) \
    atomic_compare_exchange_strong_explicit((p), (expected), (desired), (succ), (fail))
#define pyb_cas_weak(p, expected, desired, succ, fail) \
    atomic_compare_exchange_weak_explicit((p), (expected), (desired), (succ), (fail))

/* A pause hint inside spin loops (PAUSE on x86, YIELD on arm64). */
static inline void pyb_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#else
    atomic_signal_fence(memory_order_seq_cst);
#endif
}

/*
 * The spinlock of the lock variants, 4 bytes, in one of four modes chosen per tracker:
 *   PYB_LOCK_PTHREAD     a pthread spinlock (glibc: spins until free). The default, a real primitive.
 *   PYB_LOCK_SPIN_YIELD  test-and-test-and-set that spins PYB_LOCK_SPINS pause iterations, then calls
 *                        sched_yield() between attempts, so a thread oversubscribing the CPUs gives a
 *                        preempted lock holder the CPU instead of burning its time slice. (In the kernel
 *                        a spinlock holder cannot be preempted; this only matters in userspace.)
 *   PYB_LOCK_TICKET      a ticket lock (FIFO, as the kernel's spinlocks were before qspinlock): take a
 *                        ticket with fetch_add(next, 1, relaxed), wait until owner == ticket (acquire),
 *                        unlock by owner + 1 (release); waiters spin on a load, and yield after
 *                        PYB_LOCK_SPINS pauses like spin_yield. Only the holder writes `owner`.
 *   PYB_LOCK_MCS         a queued lock in the spirit of the kernel's qspinlock: a `locked` half-word and
 *                        a `tail` half-word naming the last queued waiter's node (index + 1 into the
 *                        process-wide node registry, 0 = no queue). Waiters spin on their own node's
 *                        cache line, not on the lock's; protocol and proof in pyb_atomic.c.
 * Acquire on lock, release on unlock in every mode. The pyb_spin_* names are the pthread mode.
 */
typedef union pyb_spinlock {
    pthread_spinlock_t pthread; /* PYB_LOCK_PTHREAD */
    _Atomic uint32_t word;      /* PYB_LOCK_SPIN_YIELD: 0 free, 1 held; exchange acquire, store release */
    struct {
        _Atomic uint16_t next;  /* PYB_LOCK_TICKET: the next ticket; fetch_add relaxed */
        _Atomic uint16_t owner; /* PYB_LOCK_TICKET: the ticket served; load acquire, holder stores release */
    } ticket;
    struct {
        _Atomic uint16_t locked; /* PYB_LOCK_MCS: 0 free, 1 held; set only by CAS 0->1 (acquire; loads while
                                  * waiting relaxed), cleared only by the holder's store (release) */
        _Atomic uint16_t tail;   /* PYB_LOCK_MCS: last queued node's index + 1, 0 = none; joined by exchange
                                  * (acq_rel), left by the head's CAS (acq_rel); the fast path's load relaxed */
    } mcs;
} pyb_spinlock;

_Static_assert(sizeof(pyb_spinlock) == 4, "the lock is 4 bytes of a 16-byte page slot");

enum { PYB_LOCK_PTHREAD = 0, PYB_LOCK_SPIN_YIELD = 1, PYB_LOCK_TICKET = 2, PYB_LOCK_MCS = 3 };
#define PYB_LOCK_SPINS 128

/*
 * PYB_LOCK_MCS's queue nodes. A thread takes one node from a process-wide registry of PYB_MCS_NODES
 * the first time it has to queue (a recycled one if a thread that held one has exited, else the next
 * never-used index from a counter) and keeps it until it exits (a pthread key destructor returns it).
 * A node is in use only while its thread is queued: once the lock is taken the node is free again
 * (the holder needs no node), so holding two locks needs no second node. The tracker never holds two
 * mode locks at once anyway (lock_of() names one lock per call; waits drop it first), and takes none
 * from a signal handler; should a thread re-enter the slow path while its node is queued, or find the
 * registry exhausted (PYB_MCS_NODES threads alive at once), it does not queue: it spins on the lock
 * word (pause, then yield) until both halves are 0 and takes it by CAS - correct, but not FIFO, and
 * it can in principle be overtaken indefinitely under constant contention (a documented limit). A
 * refusal is for the thread's life, and each extension module's copy of the C core keeps its own
 * thread-local id (so a thread using locks through two modules holds two ids of the shared registry).
 * Not fork-safe (unlike the RCU registry, which has an atfork handler): in a child the ids of the
 * parent's other threads are never returned, and a lock with waiters queued at the fork stays taken -
 * as a ticket lock with tickets drawn would; the pthread and spin_yield modes have neither problem.
 */
#define PYB_MCS_NODES 1024
_Static_assert(PYB_MCS_NODES < 65535, "a node index + 1 fits the 16-bit tail");

typedef struct pyb_mcs_node {
    /* The successor's node once it has linked itself: the successor stores (release) after its
     * exchange on the tail; this node's owner loads it (acquire) before handing over. */
    _Alignas(PYB_CACHELINE) _Atomic(struct pyb_mcs_node *) next;
    /* 1 once this node is the queue's head: the predecessor stores 1 (release) when it has taken the
     * lock; the owner spins on it (acquire). Reset to 0 by the owner before it queues. */
    _Atomic uint32_t head;
} pyb_mcs_node;

/* The contended path of pyb_lock in PYB_LOCK_MCS (pyb_atomic.c). */
void pyb_mcs_lock_slow(pyb_spinlock *l);
/* The calling thread's node index + 1, assigning one if it has none; 0 when the registry is exhausted. */
uint32_t pyb_mcs_node_id(void);
/*
 * The registry in use by this copy of the C core, and sharing one: every Python extension module links
 * its own copy of pyb_atomic.c, but a lock's tail must mean the same node in all of them (a device in
 * pybcache.bcache._cachedev runs the tracker the caller built with pybcache.bcache._tracker), so the other modules
 * adopt pybcache.bcache._tracker's registry at import, before any of their code can queue on a lock.
 */
void *pyb_mcs_registry(void);
void pyb_mcs_registry_share(void *registry);
/* Node ids held by live threads (assigned and not yet returned by an exited thread). */
uint32_t pyb_mcs_nodes_in_use(void);
/* Tests: refuse new ids while `limit` are in use (0 = PYB_MCS_NODES, the real limit). */
void pyb_mcs_test_limit(uint32_t limit);

static inline int pyb_spin_init(pyb_spinlock *l) { return pthread_spin_init(&l->pthread, PTHREAD_PROCESS_PRIVATE); }
static inline void pyb_spin_destroy(pyb_spinlock *l) { pthread_spin_destroy(&l->pthread); }
static inline void pyb_spin_lock(pyb_spinlock *l) { pthread_spin_lock(&l->pthread); }
static inline void pyb_spin_unlock(pyb_spinlock *l) { pthread_spin_unlock(&l->pthread); }

static inline int pyb_lock_init(pyb_spinlock *l, int mode)
{
    if (mode == PYB_LOCK_SPIN_YIELD) {
        atomic_init(&l->word, 0);
        return 0;
    }
    if (mode == PYB_LOCK_TICKET) {
        atomic_init(&l->ticket.next, 0);
        atomic_init(&l->ticket.owner, 0);
        return 0;
    }
    if (mode == PYB_LOCK_MCS) {
        atomic_init(&l->mcs.locked, 0);
        atomic_init(&l->mcs.tail, 0);
        return 0;
    }
    return pyb_spin_init(l);
}

static inline void pyb_lock_destroy(pyb_spinlock *l, int mode)
{
    if (mode == PYB_LOCK_PTHREAD)
        pyb_spin_destroy(l);
}

static inline void pyb_lock(pyb_spinlock *l, int mode)
{
    if (mode == PYB_LOCK_PTHREAD) {
        pthread_spin_lock(&l->pthread);
        return;
    }
    if (mode == PYB_LOCK_TICKET) {
        uint16_t me = pyb_fetch_add(&l->ticket.next, 1, PYB_RELAXED);
        for (unsigned i = 0; pyb_load(&l->ticket.owner, PYB_ACQUIRE) != me; i++) {
            if (i < PYB_LOCK_SPINS)
                pyb_cpu_relax();
            else
                sched_yield();
        }
        return;
    }
    if (mode == PYB_LOCK_MCS) {
        /* Fast path: no queue and free. A thread that read tail == 0 gets this one attempt before
         * queueing, which bounds how far it can overtake a queue formed meanwhile. */
        uint16_t free_ = 0;
        if (!pyb_load(&l->mcs.tail, PYB_RELAXED) &&
            pyb_cas(&l->mcs.locked, &free_, 1, PYB_ACQUIRE, PYB_RELAXED))
            return;
        pyb_mcs_lock_slow(l);
        return;
    }
    for (;;) {
        if (!pyb_load(&l->word, PYB_RELAXED) &&
            !atomic_exchange_explicit(&l->word, 1, memory_order_acquire))
            return;
        for (unsigned i = 0; pyb_load(&l->word, PYB_RELAXED); i++) {
            if (i < PYB_LOCK_SPINS)
                pyb_cpu_relax();
            else
                sched_yield();
        }
    }
}

static inline void pyb_unlock(pyb_spinlock *l, int mode)
{
    if (mode == PYB_LOCK_PTHREAD)
        pthread_spin_unlock(&l->pthread);
    else if (mode == PYB_LOCK_TICKET)
        pyb_store(&l->ticket.owner, (uint16_t)(pyb_load(&l->ticket.owner, PYB_RELAXED) + 1), PYB_RELEASE);
    else if (mode == PYB_LOCK_MCS)
        pyb_store(&l->mcs.locked, 0, PYB_RELEASE); /* the queue is not touched: its head takes over */
    else
        pyb_store(&l->word, 0, PYB_RELEASE);
}

/*
 * Futex-backed wait on a 32-bit word: sleep while *word == expected. Spurious wake-ups are allowed;
 * callers re-check their condition in a loop.
 */
void pyb_futex_wait(_Atomic uint32_t *word, uint32_t expected);
/*
 * pyb_futex_wait with a bound: sleep at most timeout_ns (0 = no bound). Returns 0 when woken (or
 * *word != expected, or a spurious wake-up) and ETIMEDOUT when the time ran out.
 */
int pyb_futex_wait_ns(_Atomic uint32_t *word, uint32_t expected, uint64_t timeout_ns);
/* Wake every thread sleeping in pyb_futex_wait on word. */
void pyb_futex_wake_all(_Atomic uint32_t *word);

/*
 * A start gate for worker threads: they wait in pyb_gate_wait until pyb_gate_open sets `go` to 1 (run:
 * all start together) or -1 (thread creation failed: leave without running). `go` is under `mu`.
 */
typedef struct pyb_gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int go;
} pyb_gate;

#define PYB_GATE_INIT {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0}

static inline int pyb_gate_wait(pyb_gate *g)
{
    pthread_mutex_lock(&g->mu);
    while (g->go == 0)
        pthread_cond_wait(&g->cv, &g->mu);
    int go = g->go;
    pthread_mutex_unlock(&g->mu);
    return go;
}

static inline void pyb_gate_open(pyb_gate *g, int go)
{
    pthread_mutex_lock(&g->mu);
    g->go = go;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

/* Monotonic clock in nanoseconds. */
uint64_t pyb_now_ns(void);
/* CPU time of the calling thread in nanoseconds. */
uint64_t pyb_thread_cpu_ns(void);

/* splitmix64: a counter-based generator, so a stream is reproducible from (seed, index). */
static inline uint64_t pyb_splitmix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* xorshift-style per-thread generator for workloads (not shared between threads). */
typedef struct pyb_rng {
    uint64_t state;
} pyb_rng;

static inline void pyb_rng_seed(pyb_rng *r, uint64_t seed) { r->state = pyb_splitmix64(seed) | 1u; }

static inline uint64_t pyb_rng_next(pyb_rng *r)
{
    r->state = pyb_splitmix64(r->state);
    return r->state;
}

/* Uniform integer in [0, n) (n > 0); Lemire's multiply-shift, bias below 2^-32 for our n. */
static inline uint64_t pyb_rng_below(pyb_rng *r, uint64_t n)
{
    return (uint64_t)(((unsigned __int128)pyb_rng_next(r) * n) >> 64);
}

#endif /* PYB_ATOMIC_H */
