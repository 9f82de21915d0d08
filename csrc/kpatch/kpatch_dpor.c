/*
 * kpatch_dpor.c - the patch-level explorer's runtime (issue 26): a controlled scheduler that runs a
 * patch's operations on real threads one scheduling point at a time, a stateless search over their
 * interleavings (exhaustive, sleep sets, or source-DPOR with sleep sets), and a KCSAN-style data-race
 * detector.
 *
 * Build (pybcache/bcache/kpatch/interleave.py): the patch is compiled with -fsanitize=thread, which
 * makes GCC call __tsan_read*, __tsan_write* and __tsan_atomic* before each memory access it instruments,
 * and linked with the shim runtime (kpatch_rt.c, not instrumented) and this file, which defines those
 * hooks itself (no libtsan), as the kernel's KCSAN does. The shim runtime calls pyb_kp_sched_hook at
 * its locks (spinlocks, rwlocks, mutexes), sequence counts, allocations, frees, waits, wakes and RCU calls.
 *
 * Scheduling points. Every hook of a controlled thread is a point: the thread publishes the operation
 * it is about to perform (its "pending" operation: a memory access with address, size and whether it
 * writes and is marked; a lock object; ...) and waits for its turn. Exactly one controlled thread runs
 * at a time; the baton is handed over with one semaphore per thread. A thread's accesses to its own
 * stack (the address range of its stack) and every access of an uncontrolled thread (the caller's
 * thread running the patch's init and exit) are not points. A blocking acquisition is granted only when
 * it can succeed (it is not enabled before): spin_lock and mutex_lock when the lock is free, write_lock
 * when no one holds the rwlock, read_lock when no writer does, read_seqcount_begin when the count is
 * even; so the shim's own spin and sleep loops never run under control (a mutex is never slept on, and
 * its unlock wakes no one). Trylocks and unlocks are always enabled (a trylock's result is the state's).
 *
 * The search (one exploration at a time: pyb_dpor_mu). An execution is a sequence of events, each the
 * pending operation of the thread chosen at that state. Executions are replayed from scratch (a fresh
 * instance of the patch each time) along a stored prefix of choices; the search is a depth-first walk
 * over the nodes of that prefix. Modes: 0 every interleaving (every enabled thread at every node),
 * 1 sleep sets only, 2 source-DPOR (Abdulla, Aronis, Jonsson, Sagonas, POPL 2014, its Algorithm 1) with
 * sleep sets: after each execution every reversible race (two dependent events of different threads
 * not ordered by other events) adds an initial of the reversed order to the backtrack set of the node
 * before the first event. A race of a lock acquisition with the release of the lock's previous holder
 * is reversed at that holder's acquisition (the release cannot move before it); a race of a
 * read_seqcount_begin with a write section's end, at that section's begin (the count is odd between).
 * 3 optimal DPOR (the same paper's Algorithm 2) with sleep sets: each such race of e with e' instead
 * inserts v = (the events after e not happening after it).e' into the wake-up tree of the node before e
 * (wut_race), and backtracking follows a node's leftmost branch before choosing freely (decide), so no
 * execution ends sleep-set blocked. A branch compares events of earlier executions with this one's, so
 * the dependence sees addresses inside blocks allocated during an execution by their allocation's name
 * (struct dop.caddr), not by where malloc put them this time. A branch whose thread is not enabled where
 * it should run (the dependence missed an interaction: kfree_rcu callbacks, which an operation's end
 * runs or not depending on the readers' RCU sections) is dropped and counted (`diverged`); the search
 * then does not claim completeness.
 *
 * Dependence (the same for DPOR, sleep sets and the equivalence-class count): memory footprints that
 * overlap with at least one write (a free writes its whole block; atomics are accesses); operations on
 * one spinlock, one mutex, or one rwlock unless both are on its read side (readers commute); a sequence
 * count's read_seqcount_begin reads the count and each write_seqcount_begin/end writes it (so they are
 * dependent with each other and with the retry's re-read, an atomic access); allocations among
 * themselves when a fault is injected (the k-th fails); RCU read-side boundaries with synchronize_rcu;
 * a writer's marker with a reader's marker of overlapping ranges (the oracle compares only those). Executions are sequentially consistent (assumed: no weak-memory
 * reordering is explored), so a barrier is a scheduling point that commutes with everything.
 *
 * Data races as KCSAN reports them: two accesses to overlapping bytes from different threads, at least
 * one a write, not both marked (READ_ONCE/WRITE_ONCE and every other __atomic builtin reach us as
 * __tsan_atomic*), not ordered by happens-before: vector clocks joined at spinlock and mutex release ->
 * acquire, rwlock write_unlock -> every later acquisition and read_unlock -> a later write_lock only
 * (readers do not order one another), write_seqcount_end -> a read_seqcount_begin or retry that reads the
 * count, atomic release -> acquire on one address (the kernel's fully ordered RMWs are seq_cst here), wake_up ->
 * the woken wait, rcu_read_unlock -> synchronize_rcu, and program order (a write's start and end run on
 * one thread, so its hand-over is program order). Barriers add no edge of their own (KCSAN's default
 * model does not use them either). As KCSAN does for seqlocks, a thread's accesses inside a write section
 * (write_seqcount_begin .. end) and its next accesses after read_seqcount_begin (up to 1,000, or until it
 * re-reads the count: read_seqcount_retry) count as marked: a reader that retries may read torn data.
 *
 * State and its protection: everything below is owned by the single exploration in progress
 * (pyb_dpor_mu held by its caller). Within an execution, X.* is touched only by the thread holding the
 * baton (the semaphores order the hand-overs), and by the caller's thread before the first hand-over
 * and after the last (exec_done).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "pybcache/kpatch.h"
#include "pybcache/kpatch_abi.h"

#include <dlfcn.h>
#include <errno.h>
#include <time.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DP_MAX_THREADS 6
#define DP_MAX_EVENTS 12000         /* events per execution (a longer one is an error: a spinning loop) */
#define DP_MAX_OPS 4                /* operations per thread script */
#define DP_HASH_SLOTS 16384         /* race-detector granules and sync objects per execution */
#define DP_MAX_RECORDS 65536        /* access records per execution */
#define DP_EXEC_BOUND_S 60          /* wall seconds one execution may take (a safety net, see run_execution) */
#define DP_MAX_ALLOCS 4096         /* allocations named per execution (more: named by address) */
#define DP_STREAK 48                /* reads remembered per thread since its last write (spin detection) */

enum { K_MEM = 1, K_LOCK, K_TRYLOCK, K_UNLOCK, K_ALLOC, K_FREE, K_WAIT, K_WAKE, K_RCU_LOCK, K_RCU_UNLOCK,
       K_SYNC_RCU, K_FENCE, K_MARK, K_WAIT_ENTER, K_WAIT_LEAVE,
       /* rwlocks (`write`: the writer's side), sequence counters (addr: the count; `arg` of a write: 1 at
        * its section's begin), mutexes */
       K_RW_LOCK, K_RW_TRYLOCK, K_RW_UNLOCK, K_SEQ_BEGIN, K_SEQ_WRITE, K_MLOCK, K_MTRYLOCK, K_MUNLOCK };
/* markers: roles */
enum { M_S_DONE = 1, M_E_BEGIN, M_R_BEGIN, M_R_END };
/* script operations */
enum { OP_START = 1, OP_END, OP_CHECK };

/* Hook kinds of kpatch_rt.c (kept in step by hand: the enum there is file-local). */
enum { H_LOCK = 1, H_TRYLOCK, H_UNLOCK, H_ALLOC, H_FREE, H_WAIT_ENTER, H_WAIT, H_WAIT_LEAVE, H_WAKE,
       H_RCU_LOCK, H_RCU_UNLOCK, H_SYNC_RCU, H_RW_LOCK, H_RW_TRYLOCK, H_RW_UNLOCK, H_SEQ_BEGIN, H_SEQ_WRITE,
       H_MUTEX_LOCK, H_MUTEX_TRYLOCK, H_MUTEX_UNLOCK, H_ALLOCATED };

struct dop {                    /* one pending operation / event */
    uint8_t kind, write, marked, mo;
    uint8_t tid, op, role, pad;
    uint32_t size;
    uintptr_t addr;             /* memory address, lock/wq object, or a marker's byte offset */
    uintptr_t pc;               /* return address in the patch (memory accesses) */
    const char *file;           /* shim hooks: the patch's call site */
    int line;
    unsigned long arg;          /* wait: the sampled sequence; marker: the reader's result */
    uintptr_t caddr;            /* addr as the dependence sees it: inside a block allocated in this execution,
                                   named by the allocation (thread, ordinal) and the offset, so that events of
                                   different executions compare (malloc's addresses differ between them) */
};

struct dscript { int op; uint64_t off, len; };

struct dthr {
    int tid;
    pthread_t th;
    sem_t sem;
    int done;
    int rcu_depth;              /* read-side nesting as the explorer saw it */
    int cur_op;                 /* OP_* running, for reports */
    uintptr_t stack_lo, stack_hi;
    int nops;
    struct dscript ops[DP_MAX_OPS];
    struct dop pending;
    uint32_t kc[DP_MAX_THREADS];     /* KCSAN happens-before clock */
    /* KCSAN's seqlock regions: a write section's accesses, and a reader's next accesses after
     * read_seqcount_begin up to its re-read of the count (read_seqcount_retry), count as marked */
    int seq_write;                   /* write sections open */
    int seq_read_left;               /* accesses still in the read region (KCSAN_SEQLOCK_REGION_MAX) */
    uintptr_t seq_addr;              /* the count the read region ends at */
    /* Spin loops (assumed, as stateless model checkers assume): the reads this thread made since its own
     * last write. A read at a (pc, address) already among them re-reads what the thread read before with
     * nothing of its own written since: a loop iteration that can only repeat itself until another
     * thread writes one of those locations, so the thread is not scheduled until one does (an "await").
     * If nothing else can run, it runs anyway (a livelock then ends at the event bound). */
    int nstreak;
    struct { uintptr_t pc, addr; uint32_t size; } streak[DP_STREAK];
    int result[DP_MAX_OPS];
};

struct dnode {                  /* state k: before event k */
    uint16_t enabled, sleep, backtrack, done;
    int wut;                    /* optimal DPOR: the wake-up tree's branches still to explore here (-1: none) */
    struct dop pend[DP_MAX_THREADS];
};

struct drec {                   /* one recorded access (race detector) */
    uintptr_t addr, pc;
    uint32_t size, epoch;
    uint8_t tid, write, marked, op;
    int next;
    int event;
};

/* Optimal DPOR's wake-up trees: nodes in one bounded pool (DP_WUT_POOL), each an event (the thread and
 * the operation it performs there: what the dependence needs), its first child and its next sibling. */
#define DP_WUT_POOL (1 << 20)
struct wnode {
    uintptr_t addr;
    uint32_t size;
    uint8_t kind, write, role, tid;
    int child, next;
};

struct dslot { uintptr_t key; uint32_t gen; int head; };
struct dsync { uintptr_t key; uint32_t gen; uint32_t vc[DP_MAX_THREADS]; };

struct pyb_dpor_config {
    int mode;                   /* 0 every interleaving, 1 sleep sets, 2 source-DPOR + sleep sets,
                                   3 optimal DPOR (source sets with wake-up trees) + sleep sets */
    int nthreads;
    int fault_at;               /* the k-th allocation of every execution fails (0: none) */
    int stop_on_failure;        /* stop at the first execution with an oracle failure (a race is kept
                                   and the search goes on until an oracle failure or the end) */
    int count_classes;          /* hash every complete execution's trace (Mazurkiewicz class) */
    uint64_t max_executions;    /* 0: no limit */
    uint64_t device_size;
    int nops[DP_MAX_THREADS];
    int op[DP_MAX_THREADS][DP_MAX_OPS];
    uint64_t off[DP_MAX_THREADS][DP_MAX_OPS], len[DP_MAX_THREADS][DP_MAX_OPS];
    int fail_mode;              /* pyb_kp_config.fail_mode: the allocations fault_at counts and fails */
    int end_bio_intact;         /* pyb_kp_config.end_bio_intact: 0 the consumed bio (as bcache), 1 untouched */
};

struct pyb_dpor_result {
    uint64_t executions;        /* complete executions checked */
    uint64_t blocked;           /* executions cut because every enabled thread slept (redundant) */
    uint64_t classes;           /* distinct traces seen (count_classes) */
    uint64_t events;            /* events over all executions */
    uint64_t max_allocations;   /* the most allocations one execution made */
    uint64_t faults_injected;   /* executions in which the fault_at-th allocation happened */
    int complete;               /* the search ended by itself (not by a limit or a failure stop) */
    int error;                  /* 0, or why the search stopped: 1 too long, 2 nondeterministic, 3 create, 4 stuck,
                                   5 the wake-up trees outgrew their pool */
    char *json;                 /* the failure(s) as JSON (malloc'd; pyb_dpor_free), or NULL */
    uint64_t diverged;          /* optimal DPOR: wake-up tree branches that could not be followed (0 expected) */
    uint64_t wut_peak;          /* optimal DPOR: the most wake-up tree nodes held at once */
};

const pyb_kp_module *pybcache_kpatch_module(void);

/* ---- the exploration's state ---------------------------------------------------------------------- */

static pthread_mutex_t pyb_dpor_mu = PTHREAD_MUTEX_INITIALIZER;
static __thread struct dthr *self;

static struct {
    const pyb_kp_module *mod;
    pyb_kp_instance *inst;
    struct pyb_dpor_config cfg;
    int n;
    struct dthr thr[DP_MAX_THREADS];
    sem_t arrive, exec_done;
    int started, aborted, too_long, nondet, stuck;
    /* the current execution */
    struct dop ev[DP_MAX_EVENTS];
    int nev;
    int blocked_at;             /* -1, or the node where every enabled thread slept */
    int deadlock;
    /* the search: nodes[0..depth) persist across executions; `replay` of them are forced */
    struct dnode *nodes;
    int depth;                  /* valid nodes */
    int replay;                 /* nodes whose choice is replayed (the choice is ev-free: nodes[k] chosen) */
    int choice[DP_MAX_EVENTS];  /* thread chosen at node k */
    int last_tid;
    /* allocations */
    uint64_t allocs;
    int fault_hit;
    /* race detector */
    uint32_t gen;
    struct dslot *gran;
    struct dsync *sync;
    struct drec *rec;
    int nrec;
    int have_race;
    struct drec race_a, race_b;
    int race_event;
    /* DPOR clocks of the current execution */
    uint16_t (*hb)[DP_MAX_THREADS];
    int *idx;                   /* 1-based index of event in its thread */
    /* the blocks allocated in this execution (by the caller's thread in create, then by the patch's) */
    struct { uintptr_t base, key; uint32_t size; int live; } al[DP_MAX_ALLOCS];
    int nal;
    uint32_t alc[DP_MAX_THREADS + 1];
    /* optimal DPOR: the wake-up tree pool, and the subtree the next new node (guide_at) starts from */
    struct wnode *wpool;
    int wfree, wused, wpeak, woverflow;
    int guide, guide_at;
    uint64_t diverged;
} X;

static uintptr_t module_base;

/* ---- helpers -------------------------------------------------------------------------------------- */

static int overlap(uintptr_t a, uint32_t as, uintptr_t b, uint32_t bs) { return a < b + bs && b < a + as; }

static int footprint(const struct dop *o)
{
    return o->kind == K_MEM || o->kind == K_FREE || o->kind == K_WAIT || o->kind == K_WAKE ||
           o->kind == K_WAIT_ENTER || o->kind == K_WAIT_LEAVE || o->kind == K_SEQ_BEGIN || o->kind == K_SEQ_WRITE;
}

static int is_rwop(int k) { return k == K_RW_LOCK || k == K_RW_TRYLOCK || k == K_RW_UNLOCK; }
static int is_acquire(int k)
{
    return k == K_LOCK || k == K_TRYLOCK || k == K_RW_LOCK || k == K_RW_TRYLOCK || k == K_MLOCK || k == K_MTRYLOCK;
}
static int is_release(int k) { return k == K_UNLOCK || k == K_RW_UNLOCK || k == K_MUNLOCK; }
static int is_lockop(int k) { return is_acquire(k) || is_release(k); }

#define KCSAN_SEQLOCK_REGION_MAX 1000   /* the kernel's bound on a seqlock read region (kcsan-checks.h) */

/* The name of address a in this execution (struct dop.caddr). */
static uintptr_t canon(uintptr_t a)
{
    int dead = -1;
    for (int i = X.nal - 1; i >= 0; i--)
        if (a >= X.al[i].base && a - X.al[i].base < X.al[i].size) {
            if (X.al[i].live)
                return X.al[i].key + (a - X.al[i].base);
            if (dead < 0)
                dead = i;
        }
    return dead >= 0 ? X.al[dead].key + (a - X.al[dead].base) : a;
}

static void allocated(const void *p, unsigned long size)
{
    if (!X.nodes || X.nal >= DP_MAX_ALLOCS || size > 0xffffffffu)
        return;
    int tag = self ? self->tid : DP_MAX_THREADS;
    uint64_t ord = X.alc[tag]++;
    X.al[X.nal++] = (typeof(X.al[0])){(uintptr_t)p, (1ull << 63) | ((uint64_t)tag << 56) | (ord << 32),
                                      (uint32_t)size, 1};
}

static void freed(uintptr_t p)
{
    for (int i = X.nal - 1; i >= 0; i--)
        if (X.al[i].live && X.al[i].base == p) {
            X.al[i].live = 0;
            return;
        }
}

static int dependent(const struct dop *a, const struct dop *b)
{
    if (a->tid == b->tid)
        return 1;
    if (a->kind == K_MARK || b->kind == K_MARK) {
        if (a->kind != b->kind)
            return 0;
        int ar = a->role >= M_R_BEGIN, br = b->role >= M_R_BEGIN;
        return ar != br && overlap(a->caddr, a->size, b->caddr, b->size);
    }
    if (footprint(a) && footprint(b))
        return overlap(a->caddr, a->size, b->caddr, b->size) && (a->write || b->write);
    if (is_lockop(a->kind) && is_lockop(b->kind)) {
        if (a->caddr != b->caddr)
            return 0;
        /* an rwlock's read side commutes with itself (and neither enables nor disables the other) */
        return !(is_rwop(a->kind) && is_rwop(b->kind)) || a->write || b->write;
    }
    if (a->kind == K_ALLOC && b->kind == K_ALLOC)
        return X.cfg.fault_at > 0;
    if (a->kind == K_SYNC_RCU || b->kind == K_SYNC_RCU) {
        int ka = a->kind, kb = b->kind;
        return (ka == K_SYNC_RCU || ka == K_RCU_LOCK || ka == K_RCU_UNLOCK) &&
               (kb == K_SYNC_RCU || kb == K_RCU_LOCK || kb == K_RCU_UNLOCK);
    }
    return 0;                   /* barriers: under sequential consistency they commute with everything */
}

static int spinning(const struct dthr *t)
{
    const struct dop *p = &t->pending;
    if (p->kind != K_MEM || p->write)
        return 0;
    for (int i = 0; i < t->nstreak; i++)
        if (t->streak[i].pc == p->pc && t->streak[i].addr == p->addr)
            return 1;
    return 0;
}

/* After event e of thread `by`: its own streak, and the streaks its write ends. */
static void track_spin(int by, const struct dop *e)
{
    struct dthr *t = &X.thr[by];
    if (e->kind == K_SEQ_BEGIN) {
        t->nstreak = 0;                 /* a reader's retry: its new pass can only follow a write (the retry) */
        return;
    }
    if (e->kind == K_MEM && !e->write) {
        if (t->nstreak < DP_STREAK)
            t->streak[t->nstreak++] = (typeof(t->streak[0])){e->pc, e->addr, e->size};
        return;
    }
    int writes = (footprint(e) && e->write) || e->kind == K_ALLOC;
    if (!writes)
        return;                         /* locks, RCU, barriers, markers: part of a loop's iteration */
    t->nstreak = 0;
    for (int i = 0; i < X.n; i++) {
        struct dthr *u = &X.thr[i];
        if (i == by)
            continue;
        for (int j = 0; j < u->nstreak; j++)
            if (overlap(u->streak[j].addr, u->streak[j].size, e->addr, e->size ? e->size : 1)) {
                u->nstreak = 0;
                break;
            }
    }
}

/* Would the rwlock operation o get the lock now? (a writer: no holder; a reader: no writer) */
static int rw_free(const struct dop *o)
{
    int c = __atomic_load_n(&((rwlock_t *)o->addr)->cnt, __ATOMIC_RELAXED);
    return o->write ? c == 0 : c >= 0;
}

/* Is thread t's pending operation enabled now? (`spin`: a spinning thread counts as enabled) */
static int enabled(const struct dthr *t, int spin)
{
    if (t->done)
        return 0;
    const struct dop *p = &t->pending;
    if (!spin && spinning(t))
        return 0;
    switch (p->kind) {
    case K_LOCK:
        return __atomic_load_n(&((spinlock_t *)p->addr)->owner, __ATOMIC_RELAXED) == NULL;
    case K_RW_LOCK:
        return rw_free(p);
    case K_SEQ_BEGIN:
        return !(__atomic_load_n((unsigned int *)p->addr, __ATOMIC_RELAXED) & 1u);
    case K_MLOCK:
        return __atomic_load_n(&((struct mutex *)p->addr)->locked, __ATOMIC_RELAXED) == 0;
    case K_WAIT:
        return __atomic_load_n((unsigned int *)p->addr, __ATOMIC_SEQ_CST) != (unsigned int)p->arg;
    case K_SYNC_RCU:
        for (int i = 0; i < X.n; i++)
            if (i != t->tid && !X.thr[i].done && X.thr[i].rcu_depth > 0)
                return 0;
        return 1;
    default:
        return 1;
    }
}

/* ---- KCSAN clocks --------------------------------------------------------------------------------- */

static struct dsync *sync_obj(uintptr_t key)
{
    uint64_t h = (uint64_t)key * 0x9E3779B97F4A7C15ull;
    for (unsigned i = (unsigned)(h >> 50);; i = (i + 1) & (DP_HASH_SLOTS - 1)) {
        struct dsync *s = &X.sync[i];
        if (s->gen != X.gen) {
            s->gen = X.gen;
            s->key = key;
            memset(s->vc, 0, sizeof(s->vc));
            return s;
        }
        if (s->key == key)
            return s;
    }
}

static void acquire(struct dthr *t, uintptr_t key)
{
    struct dsync *s = sync_obj(key);
    for (int i = 0; i < X.n; i++)
        if (s->vc[i] > t->kc[i])
            t->kc[i] = s->vc[i];
}

static void release(struct dthr *t, uintptr_t key)
{
    struct dsync *s = sync_obj(key);
    for (int i = 0; i < X.n; i++)
        if (t->kc[i] > s->vc[i])
            s->vc[i] = t->kc[i];
    t->kc[t->tid]++;
}

static struct dslot *granule(uintptr_t g)
{
    uint64_t h = (uint64_t)g * 0x9E3779B97F4A7C15ull;
    for (unsigned i = (unsigned)(h >> 50);; i = (i + 1) & (DP_HASH_SLOTS - 1)) {
        struct dslot *s = &X.gran[i];
        if (s->gen != X.gen) {
            s->gen = X.gen;
            s->key = g;
            s->head = -1;
            return s;
        }
        if (s->key == g)
            return s;
    }
}

static void forget_range(uintptr_t a, uint32_t size)
{
    for (uintptr_t g = a >> 3; g <= (a + size - 1) >> 3; g++)
        granule(g)->head = -1;
}

/* Check one access against the recorded ones, then record it. */
static void kcsan_access(struct dthr *t, const struct dop *o)
{
    for (uintptr_t g = o->addr >> 3; g <= (o->addr + o->size - 1) >> 3; g++) {
        struct dslot *s = granule(g);
        if (!X.have_race) {
            for (int r = s->head; r >= 0; r = X.rec[r].next) {
                const struct drec *p = &X.rec[r];
                if (p->tid == t->tid || !overlap(p->addr, p->size, o->addr, o->size))
                    continue;
                if (!(p->write || o->write) || (p->marked && o->marked))
                    continue;
                if (p->epoch <= t->kc[p->tid])
                    continue;               /* ordered */
                X.have_race = 1;
                X.race_a = *p;
                X.race_b = (struct drec){o->addr, o->pc, o->size, t->kc[t->tid], (uint8_t)t->tid, o->write,
                                         o->marked, (uint8_t)t->cur_op, -1, X.nev - 1};
                X.race_event = X.nev - 1;
                break;
            }
        }
        if (X.nrec < DP_MAX_RECORDS) {
            X.rec[X.nrec] = (struct drec){o->addr, o->pc, o->size, t->kc[t->tid], (uint8_t)t->tid, o->write,
                                          o->marked, (uint8_t)t->cur_op, s->head, X.nev - 1};
            s->head = X.nrec++;
        }
    }
}

/* What an event does to the happens-before clocks and the detector, once its thread runs it. */
static void perform(struct dthr *t, const struct dop *o)
{
    int acq = o->mo == __ATOMIC_ACQUIRE || o->mo == __ATOMIC_CONSUME || o->mo == __ATOMIC_ACQ_REL ||
              o->mo == __ATOMIC_SEQ_CST;
    int rel = o->mo == __ATOMIC_RELEASE || o->mo == __ATOMIC_ACQ_REL || o->mo == __ATOMIC_SEQ_CST;
    switch (o->kind) {
    case K_MEM:
        if (o->marked && acq)
            acquire(t, o->addr);
        if (t->seq_write > 0 || t->seq_read_left > 0) {
            struct dop m = *o;                  /* inside a seqlock region: as marked (KCSAN) */
            m.marked = 1;
            kcsan_access(t, &m);
            if (t->seq_read_left > 0)
                t->seq_read_left--;
            if (!o->write && o->marked && o->addr == t->seq_addr)
                t->seq_read_left = 0;           /* read_seqcount_retry's re-read ends the region */
        } else {
            kcsan_access(t, o);
        }
        if (o->marked && rel && o->write)
            release(t, o->addr);
        break;
    case K_RW_TRYLOCK:
        if (!rw_free(o))
            break;
        /* fall through */
    case K_RW_LOCK:
        acquire(t, o->addr);                    /* the last writer's release */
        if (o->write)
            acquire(t, o->addr + 1);            /* and every reader's: readers do not order one another */
        break;
    case K_RW_UNLOCK:
        release(t, o->write ? o->addr : o->addr + 1);
        break;
    case K_SEQ_BEGIN:
        acquire(t, o->addr);                    /* the count it read: the last write section's end */
        t->seq_read_left = KCSAN_SEQLOCK_REGION_MAX;
        t->seq_addr = o->addr;
        break;
    case K_SEQ_WRITE:
        if (o->arg) {
            t->seq_write++;
        } else {
            if (t->seq_write > 0)
                t->seq_write--;
            release(t, o->addr);
        }
        break;
    case K_MTRYLOCK:
        if (__atomic_load_n(&((struct mutex *)o->addr)->locked, __ATOMIC_RELAXED) != 0)
            break;
        /* fall through */
    case K_MLOCK:
        acquire(t, o->addr);
        break;
    case K_MUNLOCK:
        release(t, o->addr);
        break;
    case K_LOCK:
        acquire(t, o->addr);
        break;
    case K_TRYLOCK:
        if (__atomic_load_n(&((spinlock_t *)o->addr)->owner, __ATOMIC_RELAXED) == NULL)
            acquire(t, o->addr);
        break;
    case K_UNLOCK:
        release(t, o->addr);
        break;
    case K_WAKE:
        release(t, o->addr);
        break;
    case K_WAIT:
        acquire(t, o->addr);
        break;
    case K_RCU_LOCK:
        t->rcu_depth++;
        break;
    case K_RCU_UNLOCK:
        if (t->rcu_depth > 0)
            t->rcu_depth--;
        release(t, 1);
        break;
    case K_SYNC_RCU:
        acquire(t, 1);
        break;
    case K_FREE:
        forget_range(o->addr, o->size);
        freed(o->addr);
        break;
    case K_ALLOC:
        X.allocs++;
        break;
    default:
        break;
    }
}

/* ---- wake-up trees (optimal DPOR) ------------------------------------------------------------------ */

/* A node from the pool, or -1 once it is exhausted (the search then stops with error 5). */
static int wut_new(const struct dop *e)
{
    int n = X.wfree;
    if (n < 0) {
        X.woverflow = 1;
        return -1;
    }
    struct wnode *w = &X.wpool[n];
    X.wfree = w->next;
    *w = (struct wnode){e->caddr, e->size, e->kind, e->write, e->role, e->tid, -1, -1};
    if (++X.wused > X.wpeak)
        X.wpeak = X.wused;
    return n;
}

static void wut_put(int n)
{
    X.wpool[n].next = X.wfree;
    X.wfree = n;
    X.wused--;
}

/* An empty pool (every node free), no branch to follow. */
static void wut_reset(void)
{
    X.wfree = -1;
    X.wused = X.wpeak = X.woverflow = 0;
    X.guide = X.guide_at = -1;
    X.diverged = 0;
    if (X.wpool) {
        for (int i = 0; i < DP_WUT_POOL; i++)
            X.wpool[i].next = i + 1 < DP_WUT_POOL ? i + 1 : -1;
        X.wfree = 0;
    }
}

/* Give back a whole list of siblings and their subtrees. */
static void wut_free(int n)
{
    while (n >= 0) {
        int next = X.wpool[n].next;
        wut_free(X.wpool[n].child);
        wut_put(n);
        n = next;
    }
}

static struct dop wut_op(int n)
{
    const struct wnode *w = &X.wpool[n];
    struct dop o = {0};
    o.addr = o.caddr = w->addr;
    o.size = w->size;
    o.kind = w->kind;
    o.write = w->write;
    o.role = w->role;
    o.tid = w->tid;
    return o;
}

/* ---- the scheduler -------------------------------------------------------------------------------- */

static void post(struct dthr *t) { sem_post(&t->sem); }

static void wait_turn(struct dthr *t)
{
    while (sem_wait(&t->sem) != 0)
        ;
}

/* Stop controlling this execution: every thread runs out freely (the shim's hung bound ends a blocked
 * one) and the caller's thread is told the execution is over. */
static void abort_exec(struct dthr *me)
{
    X.aborted = 1;
    for (int i = 0; i < X.n; i++)
        if (!X.thr[i].done && &X.thr[i] != me)
            post(&X.thr[i]);
    sem_post(&X.exec_done);
}

/* Pick the thread that runs next and hand it the baton; called by the thread that just parked (me) or
 * finished, or by the caller's thread for the first event (me == NULL). Returns 1 if me itself runs on. */
static int decide(struct dthr *me)
{
    int k = X.nev;
    uint16_t en = 0;
    for (int i = 0; i < X.n; i++)
        if (enabled(&X.thr[i], 0))
            en |= (uint16_t)(1u << i);
    if (!en)
        for (int i = 0; i < X.n; i++)
            if (enabled(&X.thr[i], 1))
                en |= (uint16_t)(1u << i);
    if (!en) {
        int all_done = 1;
        for (int i = 0; i < X.n; i++)
            all_done &= X.thr[i].done;
        if (!all_done) {
            X.deadlock = 1;
            abort_exec(me);
            return me && !me->done;
        }
        sem_post(&X.exec_done);
        return 0;
    }
    if (k >= DP_MAX_EVENTS) {
        X.too_long = 1;
        abort_exec(me);
        return me && !me->done;
    }
    int pick = -1;
    if (X.blocked_at < 0) {
        struct dnode *nd = &X.nodes[k];
        if (k < X.replay) {
            for (int i = 0; i < X.n; i++)
                nd->pend[i] = X.thr[i].pending;     /* this execution's names (wut_race compares them) */
            pick = X.choice[k];
            if (!(en & (1u << pick)) || nd->enabled != en) {
                X.nondet = 1;
                pick = -1;
            }
        }
        if (k >= X.replay || pick < 0) {
            /* a new node */
            nd->enabled = en;
            for (int i = 0; i < X.n; i++)
                nd->pend[i] = X.thr[i].pending;
            if (k == 0)
                nd->sleep = 0;
            /* else: set by the parent when it chose */
            nd->done = 0;
            nd->wut = -1;
            uint16_t avail = en & (uint16_t)~nd->sleep;
            if (X.guide_at == k) {
                /* optimal DPOR: the wake-up subtree this node starts from; its leftmost branch first */
                nd->wut = X.guide;
                X.guide = -1;
                X.guide_at = -1;
                while (nd->wut >= 0) {
                    int c = nd->wut, p = X.wpool[c].tid;
                    nd->wut = X.wpool[c].next;
                    if (avail & (1u << p)) {
                        pick = p;
                        X.guide = X.wpool[c].child;
                        X.guide_at = k + 1;
                        wut_put(c);
                        break;
                    }
                    X.diverged++;           /* not enabled here, or asleep: cannot be followed */
                    wut_free(X.wpool[c].child);
                    wut_put(c);
                }
            }
            if (!avail) {
                X.blocked_at = k;           /* every enabled thread sleeps: redundant from here */
            } else {
                if (pick >= 0)
                    ;                       /* the wake-up tree's */
                else if (X.last_tid >= 0 && (avail & (1u << X.last_tid)))
                    pick = X.last_tid;
                else
                    pick = __builtin_ctz(avail);
                nd->backtrack = X.cfg.mode == 2 ? (uint16_t)(1u << pick) : avail;
                X.choice[k] = pick;
                X.depth = k + 1;
            }
        }
        if (pick >= 0) {
            /* the child's sleep set: what slept here or was explored here, independent of the pick */
            if (k + 1 < DP_MAX_EVENTS && X.cfg.mode >= 1) {
                uint16_t cand = (nd->sleep | nd->done) & (uint16_t)~(1u << pick), s = 0;
                for (int q = 0; q < X.n; q++)
                    if ((cand & (1u << q)) && !dependent(&nd->pend[q], &nd->pend[pick]))
                        s |= (uint16_t)(1u << q);
                X.nodes[k + 1].sleep = s;
            } else if (k + 1 < DP_MAX_EVENTS) {
                X.nodes[k + 1].sleep = 0;
            }
        }
    }
    if (pick < 0)
        pick = __builtin_ctz(en);          /* a redundant execution runs out freely */
    X.ev[k] = X.thr[pick].pending;
    X.ev[k].tid = (uint8_t)pick;
    track_spin(pick, &X.ev[k]);
    X.nev = k + 1;
    X.last_tid = pick;
    if (me == &X.thr[pick])
        return 1;
    post(&X.thr[pick]);
    return 0;
}

/* A scheduling point of the calling thread; returns when it may perform `op`. */
static void point(struct dop *op)
{
    struct dthr *me = self;
    op->tid = (uint8_t)me->tid;
    op->op = (uint8_t)me->cur_op;
    op->caddr = op->kind == K_MARK ? op->addr : canon(op->addr);
    me->pending = *op;
    if (X.aborted)
        return;
    if (!X.started) {
        sem_post(&X.arrive);
        wait_turn(me);
    } else if (!decide(me)) {
        wait_turn(me);
    }
    if (X.aborted)
        return;
    perform(me, &me->pending);
}

static int controlled(void) { return self != NULL && !X.aborted; }

static int on_stack(uintptr_t a) { return a >= self->stack_lo && a < self->stack_hi; }

/* ---- the shim runtime's hook ---------------------------------------------------------------------- */

int pyb_kp_sched_hook(int kind, const void *obj, unsigned long arg, const char *file, int line)
    __attribute__((visibility("hidden")));
int pyb_kp_sched_hook(int kind, const void *obj, unsigned long arg, const char *file, int line)
{
    if (kind == H_ALLOCATED) {
        /* only under control (one thread at a time, or the caller's before the first hand-over): after an
         * abort every thread runs freely and the table is not theirs to update */
        if (!X.aborted)
            allocated(obj, arg);
        return 0;
    }

    if (!controlled())
        return 0;
    struct dop o = {0};
    o.addr = (uintptr_t)obj;
    o.file = file;
    o.line = line;
    o.arg = arg;
    switch (kind) {
    case H_LOCK: o.kind = K_LOCK; break;
    case H_TRYLOCK: o.kind = K_TRYLOCK; break;
    case H_UNLOCK: o.kind = K_UNLOCK; break;
    case H_ALLOC: o.kind = K_ALLOC; o.size = (uint32_t)arg; o.arg = 0; break;   /* arg: 1 once it failed */
    case H_FREE: o.kind = K_FREE; o.size = arg ? (uint32_t)arg : 1; o.write = 1; break;
    case H_WAIT_ENTER: case H_WAIT_LEAVE:
        o.kind = kind == H_WAIT_ENTER ? K_WAIT_ENTER : K_WAIT_LEAVE;
        o.addr = (uintptr_t)&((wait_queue_head_t *)obj)->waiters;
        o.size = sizeof(unsigned int);
        o.write = 1;
        break;
    case H_WAIT:
        o.kind = K_WAIT;
        o.addr = (uintptr_t)&((wait_queue_head_t *)obj)->seq;
        o.size = sizeof(unsigned int);
        break;
    case H_WAKE:
        o.kind = K_WAKE;
        o.addr = (uintptr_t)&((wait_queue_head_t *)obj)->seq;
        o.size = sizeof(unsigned int);
        o.write = 1;
        break;
    case H_RCU_LOCK: o.kind = K_RCU_LOCK; break;
    case H_RCU_UNLOCK: o.kind = K_RCU_UNLOCK; break;
    case H_SYNC_RCU: o.kind = K_SYNC_RCU; break;
    case H_RW_LOCK: case H_RW_TRYLOCK: case H_RW_UNLOCK:
        o.kind = kind == H_RW_LOCK ? K_RW_LOCK : kind == H_RW_TRYLOCK ? K_RW_TRYLOCK : K_RW_UNLOCK;
        o.write = arg != 0;
        o.arg = 0;
        break;
    case H_SEQ_BEGIN: case H_SEQ_WRITE:
        o.kind = kind == H_SEQ_BEGIN ? K_SEQ_BEGIN : K_SEQ_WRITE;
        o.addr = (uintptr_t)&((seqcount_t *)obj)->sequence;
        o.size = sizeof(unsigned int);
        o.write = kind == H_SEQ_WRITE;
        o.marked = 1;
        o.arg = kind == H_SEQ_WRITE && arg;
        break;
    case H_MUTEX_LOCK: o.kind = K_MLOCK; break;
    case H_MUTEX_TRYLOCK: o.kind = K_MTRYLOCK; break;
    case H_MUTEX_UNLOCK: o.kind = K_MUNLOCK; break;
    default: return 0;
    }
    point(&o);
    /* a wait the explorer has handled; a mutex released while no thread can sleep on it (it is granted
     * only when free), so the unlock's wake-up is not a point of its own */
    return (kind == H_WAIT || kind == H_MUTEX_UNLOCK) && !X.aborted;
}

/* ---- the compiler's hooks (GCC -fsanitize=thread) -------------------------------------------------- */

#define RA() ((uintptr_t)__builtin_return_address(0))

static void access_point(uintptr_t a, uint32_t size, int write, int marked, int mo, uintptr_t pc)
{
    if (!controlled() || on_stack(a))
        return;
    struct dop o = {0};
    o.kind = K_MEM;
    o.addr = a;
    o.size = size;
    o.write = (uint8_t)write;
    o.marked = (uint8_t)marked;
    o.mo = (uint8_t)mo;
    o.pc = pc;
    point(&o);
}

#define PLAIN(n) \
    void __tsan_read##n(void *a); void __tsan_write##n(void *a); \
    void __tsan_unaligned_read##n(void *a); void __tsan_unaligned_write##n(void *a); \
    void __tsan_read##n(void *a) { access_point((uintptr_t)a, n, 0, 0, 0, RA()); } \
    void __tsan_write##n(void *a) { access_point((uintptr_t)a, n, 1, 0, 0, RA()); } \
    void __tsan_unaligned_read##n(void *a) { access_point((uintptr_t)a, n, 0, 0, 0, RA()); } \
    void __tsan_unaligned_write##n(void *a) { access_point((uintptr_t)a, n, 1, 0, 0, RA()); }
PLAIN(1) PLAIN(2) PLAIN(4) PLAIN(8) PLAIN(16)

void __tsan_read_range(void *a, unsigned long n);
void __tsan_write_range(void *a, unsigned long n);
void __tsan_read_range(void *a, unsigned long n) { if (n) access_point((uintptr_t)a, (uint32_t)n, 0, 0, 0, RA()); }
void __tsan_write_range(void *a, unsigned long n) { if (n) access_point((uintptr_t)a, (uint32_t)n, 1, 0, 0, RA()); }
void __tsan_init(void);
void __tsan_init(void) {}
void __tsan_func_entry(void *pc);
void __tsan_func_entry(void *pc) { (void)pc; }
void __tsan_func_exit(void);
void __tsan_func_exit(void) {}
void __tsan_vptr_update(void **p, void *v);
void __tsan_vptr_update(void **p, void *v) { (void)p; (void)v; }
void __tsan_vptr_read(void **p);
void __tsan_vptr_read(void **p) { (void)p; }
void __tsan_atomic_thread_fence(int mo);
void __tsan_atomic_thread_fence(int mo)
{
    if (controlled()) {
        struct dop o = {0};
        o.kind = K_FENCE;
        o.mo = (uint8_t)(mo & 7);
        o.pc = RA();
        point(&o);
    }
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}
void __tsan_atomic_signal_fence(int mo);
void __tsan_atomic_signal_fence(int mo) { (void)mo; }

#define ATOMICS(n, T) \
    T __tsan_atomic##n##_load(const volatile T *a, int mo); \
    T __tsan_atomic##n##_load(const volatile T *a, int mo) \
    { access_point((uintptr_t)a, n / 8, 0, 1, mo & 7, RA()); return __atomic_load_n(a, __ATOMIC_SEQ_CST); } \
    void __tsan_atomic##n##_store(volatile T *a, T v, int mo); \
    void __tsan_atomic##n##_store(volatile T *a, T v, int mo) \
    { access_point((uintptr_t)a, n / 8, 1, 1, mo & 7, RA()); __atomic_store_n(a, v, __ATOMIC_SEQ_CST); } \
    RMW(n, T, exchange, exchange_n) RMW(n, T, fetch_add, fetch_add) RMW(n, T, fetch_sub, fetch_sub) RMW(n, T, fetch_and, fetch_and) \
    RMW(n, T, fetch_or, fetch_or) RMW(n, T, fetch_xor, fetch_xor) RMW(n, T, fetch_nand, fetch_nand) \
    int __tsan_atomic##n##_compare_exchange_strong(volatile T *a, T *c, T v, int mo, int fmo); \
    int __tsan_atomic##n##_compare_exchange_strong(volatile T *a, T *c, T v, int mo, int fmo) \
    { (void)fmo; access_point((uintptr_t)a, n / 8, 1, 1, mo & 7, RA()); \
      return __atomic_compare_exchange_n(a, c, v, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); } \
    int __tsan_atomic##n##_compare_exchange_weak(volatile T *a, T *c, T v, int mo, int fmo); \
    int __tsan_atomic##n##_compare_exchange_weak(volatile T *a, T *c, T v, int mo, int fmo) \
    { (void)fmo; access_point((uintptr_t)a, n / 8, 1, 1, mo & 7, RA()); \
      return __atomic_compare_exchange_n(a, c, v, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); } \
    T __tsan_atomic##n##_compare_exchange_val(volatile T *a, T c, T v, int mo, int fmo); \
    T __tsan_atomic##n##_compare_exchange_val(volatile T *a, T c, T v, int mo, int fmo) \
    { (void)fmo; access_point((uintptr_t)a, n / 8, 1, 1, mo & 7, RA()); \
      __atomic_compare_exchange_n(a, &c, v, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); return c; }
#define RMW(n, T, name, builtin) \
    T __tsan_atomic##n##_##name(volatile T *a, T v, int mo); \
    T __tsan_atomic##n##_##name(volatile T *a, T v, int mo) \
    { access_point((uintptr_t)a, n / 8, 1, 1, mo & 7, RA()); return __atomic_##builtin(a, v, __ATOMIC_SEQ_CST); }
ATOMICS(8, uint8_t) ATOMICS(16, uint16_t) ATOMICS(32, uint32_t) ATOMICS(64, uint64_t)

/* ---- threads and one execution --------------------------------------------------------------------- */

static int should_fail(void *arg, uint64_t size)
{
    (void)arg;
    (void)size;
    if (X.cfg.fault_at > 0 && X.allocs == (uint64_t)X.cfg.fault_at) {
        X.fault_hit = 1;
        if (self && X.nev > 0 && X.ev[X.nev - 1].kind == K_ALLOC)
            X.ev[X.nev - 1].arg = 1;            /* this allocation event failed */
        return 1;
    }
    return 0;
}

static void marker(int role, uint64_t off, uint64_t len, unsigned long arg)
{
    struct dop o = {0};
    o.kind = K_MARK;
    o.role = (uint8_t)role;
    o.addr = (uintptr_t)off;
    o.size = (uint32_t)(len > 0xffffffffu ? 0xffffffffu : len);
    o.arg = arg;
    point(&o);
}

static void *thread_main(void *arg)
{
    struct dthr *t = arg;
    self = t;
    pthread_attr_t at;
    void *lo = NULL;
    size_t sz = 0;
    if (pthread_getattr_np(pthread_self(), &at) == 0) {
        pthread_attr_getstack(&at, &lo, &sz);
        pthread_attr_destroy(&at);
    }
    t->stack_lo = (uintptr_t)lo;
    t->stack_hi = (uintptr_t)lo + sz;
    for (int i = 0; i < t->nops; i++) {
        struct dscript *s = &t->ops[i];
        t->cur_op = s->op;
        if (s->op == OP_START) {
            t->result[i] = X.mod->start(X.inst, s->off, s->len);
            t->cur_op = 0;
            marker(M_S_DONE, s->off, s->len, 0);
        } else if (s->op == OP_END) {
            marker(M_E_BEGIN, s->off, s->len, 0);
            t->cur_op = s->op;
            t->result[i] = X.mod->end(X.inst, s->off, s->len);
        } else {
            marker(M_R_BEGIN, s->off, s->len, 0);
            t->cur_op = s->op;
            t->result[i] = X.mod->is_active(X.inst, s->off, s->len);
            t->cur_op = 0;
            marker(M_R_END, s->off, s->len, (unsigned long)(t->result[i] == 1));
        }
    }
    t->cur_op = 0;
    if (!X.started) {                    /* an empty script: never parked */
        sem_post(&X.arrive);
        wait_turn(t);
    }
    t->done = 1;
    if (!X.aborted)
        decide(t);
    self = NULL;
    return NULL;
}

/* ---- failures as JSON ------------------------------------------------------------------------------ */

struct sbuf { char *p; size_t n, cap; };

static void sb(struct sbuf *b, const char *fmt, ...)
{
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        int w = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (w < 0)
            return;
        if (b->p && b->n + (size_t)w < b->cap) {
            b->n += (size_t)w;
            return;
        }
        size_t cap = (b->cap ? b->cap * 2 : 4096) + (size_t)w;
        char *q = realloc(b->p, cap);
        if (!q)
            return;
        b->p = q;
        b->cap = cap;
    }
}

static void sb_str(struct sbuf *b, const char *s)
{
    if (!s) {
        sb(b, "null");
        return;
    }
    sb(b, "\"");
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            sb(b, "\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            sb(b, "\\u%04x", *s);
        else
            sb(b, "%c", *s);
    }
    sb(b, "\"");
}

static uintptr_t rel_pc(uintptr_t pc) { return pc && pc >= module_base ? pc - module_base : 0; }

static void json_events(struct sbuf *b)
{
    sb(b, "[");
    for (int i = 0; i < X.nev; i++) {
        const struct dop *e = &X.ev[i];
        sb(b, "%s[%d,%d,%d,%d,%d,%lu,", i ? "," : "", e->tid, e->kind, e->op, e->write | (e->marked << 1),
           e->role, (unsigned long)rel_pc(e->pc));
        sb_str(b, e->file);
        sb(b, ",%d,%lu]", e->line, (e->kind == K_MARK || e->kind == K_ALLOC || e->kind == K_SEQ_WRITE) ? e->arg : 0ul);
    }
    sb(b, "]");
}

static void json_rec(struct sbuf *b, const struct drec *r)
{
    sb(b, "{\"thread\":%d,\"op\":%d,\"pc\":%lu,\"write\":%d,\"marked\":%d,\"size\":%u,\"event\":%d}", r->tid, r->op,
       (unsigned long)rel_pc(r->pc), r->write, r->marked, r->size, r->event);
}

/* ---- the search ------------------------------------------------------------------------------------- */

static uint64_t *class_set;
static size_t class_cap, class_n;

static void class_add(uint64_t h)
{
    if (!h)
        h = 1;
    if (class_n * 2 >= class_cap) {
        size_t cap = class_cap ? class_cap * 2 : 1024;
        uint64_t *s = calloc(cap, sizeof(*s));
        if (!s)
            return;
        for (size_t i = 0; i < class_cap; i++)
            if (class_set[i])
                for (size_t j = class_set[i] & (cap - 1);; j = (j + 1) & (cap - 1))
                    if (!s[j]) {
                        s[j] = class_set[i];
                        break;
                    }
        free(class_set);
        class_set = s;
        class_cap = cap;
    }
    for (size_t j = h & (class_cap - 1);; j = (j + 1) & (class_cap - 1)) {
        if (class_set[j] == h)
            return;
        if (!class_set[j]) {
            class_set[j] = h;
            class_n++;
            return;
        }
    }
}

/* The happens-before clocks of the events [0, n) under the dependence relation. */
static void compute_hb(int n)
{
    int cnt[DP_MAX_THREADS] = {0};
    int lastev[DP_MAX_THREADS];
    for (int i = 0; i < X.n; i++)
        lastev[i] = -1;
    for (int j = 0; j < n; j++) {
        int t = X.ev[j].tid;
        uint16_t *c = X.hb[j];
        if (lastev[t] >= 0)
            memcpy(c, X.hb[lastev[t]], sizeof(X.hb[0]));
        else
            memset(c, 0, sizeof(X.hb[0]));
        for (int i = 0; i < j; i++) {
            int u = X.ev[i].tid;
            if (u == t || c[u] >= X.idx[i] || !dependent(&X.ev[i], &X.ev[j]))
                continue;
            for (int q = 0; q < X.n; q++)
                if (X.hb[i][q] > c[q])
                    c[q] = X.hb[i][q];
        }
        X.idx[j] = ++cnt[t];
        c[t] = (uint16_t)X.idx[j];
        lastev[t] = j;
    }
}

static int hb_before(int i, int j) { return X.hb[j][X.ev[i].tid] >= X.idx[i]; }   /* i -> j (or i == j) */

static uint64_t canonical_hash(int n)
{
    int emitted[DP_MAX_THREADS] = {0};
    int pos[DP_MAX_THREADS];
    /* per thread, its events in order */
    static int list[DP_MAX_THREADS][DP_MAX_EVENTS];
    int len[DP_MAX_THREADS] = {0};
    for (int j = 0; j < n; j++)
        list[X.ev[j].tid][len[X.ev[j].tid]++] = j;
    memset(pos, 0, sizeof(pos));
    uint64_t h = 1469598103934665603ull;
    for (int k = 0; k < n; k++) {
        int t;
        for (t = 0; t < X.n; t++) {
            if (pos[t] >= len[t])
                continue;
            int e = list[t][pos[t]];
            int ready = 1;
            for (int q = 0; q < X.n && ready; q++)
                if (q != t && X.hb[e][q] > emitted[q])
                    ready = 0;
            if (ready)
                break;
        }
        if (t == X.n)
            return 0;                        /* cannot happen: hb is acyclic */
        pos[t]++;
        emitted[t]++;
        h = (h ^ (uint64_t)(t + 1)) * 1099511628211ull;
    }
    return h;
}

/* Optimal DPOR (Abdulla et al., Algorithm 2): the race of event `at` with event j of the execution
[0, n). v = notdep(at).j: the events after `at` that do not happen after it, in their order, then j. Unless
a thread of the node's sleep set (those asleep there or explored there) is a weak initial of v, v goes
into the node's wake-up tree, below the longest branch it extends (nothing if a leaf or the whole of v is
matched on the way down). The happens-before among v's events is the execution's (a chain between two of
them runs only through events after `at` that do not follow it, so it stays in v); j's own is recomputed
within v, since j may follow `at` through an event left out (a release after an acquisition at `at`). */
static void wut_race(int at, int j)
{
    static int v[DP_MAX_EVENTS], pos[DP_MAX_THREADS][DP_MAX_EVENTS];
    static uint8_t gone[DP_MAX_EVENTS];
    int nv = 0, cnt[DP_MAX_THREADS] = {0}, first[DP_MAX_THREADS] = {0};
    int t = X.ev[j].tid;
    uint16_t cj[DP_MAX_THREADS] = {0};
    for (int e = at + 1; e < j; e++)
        if (!hb_before(at, e))
            v[nv++] = e;
        else if (X.ev[e].tid == t)
            return;                         /* j follows `at` in program order: not reversible here */
    for (int x = 0; x < nv; x++) {
        int e = v[x];
        if (X.ev[e].tid == t || dependent(&X.ev[e], &X.ev[j]))
            for (int q = 0; q < X.n; q++)
                if (X.hb[e][q] > cj[q])
                    cj[q] = X.hb[e][q];
    }
    v[nv++] = j;
    cj[t] = (uint16_t)X.idx[j];
    for (int x = 0; x < nv; x++) {
        int u = X.ev[v[x]].tid;
        pos[u][cnt[u]++] = x;
        gone[x] = 0;
    }
    int left = nv;
#define CLOCK(x) (v[x] == j ? cj : X.hb[v[x]])
    /* is thread u's first remaining event an initial of what remains? */
#define INITIAL(u, ok) do { \
        int x_ = pos[u][first[u]]; \
        const uint16_t *c_ = CLOCK(x_); \
        ok = 1; \
        for (int q_ = 0; q_ < X.n && ok; q_++) \
            if (q_ != (u) && first[q_] < cnt[q_] && c_[q_] >= X.idx[v[pos[q_][first[q_]]]]) \
                ok = 0; \
    } while (0)
    /* is the operation o (of a thread with no event left in v) independent of every remaining event? */
#define INDEP(o, ok) do { \
        ok = 1; \
        for (int x_ = 0; x_ < nv && ok; x_++) \
            if (!gone[x_] && dependent((o), &X.ev[v[x_]])) \
                ok = 0; \
    } while (0)
    struct dnode *node = &X.nodes[at];
    uint16_t sl = (node->sleep | node->done) & (uint16_t)~(1u << X.ev[at].tid);
    for (int q = 0; q < X.n; q++) {
        if (!(sl & (1u << q)))
            continue;
        int ok;
        if (cnt[q]) {
            INITIAL(q, ok);
        } else {
            INDEP(&node->pend[q], ok);
        }
        if (ok)
            return;                         /* a weak initial asleep: explored from here already */
    }
    int *head = &node->wut;
    for (;;) {
        int c, matched = 0;
        for (c = *head; c >= 0; c = X.wpool[c].next) {
            int p = X.wpool[c].tid, ok;
            if (first[p] < cnt[p]) {
                INITIAL(p, ok);
                if (ok) {
                    gone[pos[p][first[p]]] = 1;
                    first[p]++;
                    left--;
                    matched = 1;
                    break;
                }
            } else {
                struct dop o = wut_op(c);
                INDEP(&o, ok);
                if (ok) {
                    matched = 1;
                    break;
                }
            }
        }
        if (!matched)
            break;
        if (X.wpool[c].child < 0 || left == 0)
            return;                         /* v extends a leaf, or is a prefix of a branch */
        head = &X.wpool[c].child;
    }
    /* a new branch, the last below *head: v's remaining events in their order */
    while (*head >= 0)
        head = &X.wpool[*head].next;
    for (int x = 0; x < nv; x++) {
        if (gone[x])
            continue;
        int w = wut_new(&X.ev[v[x]]);
        if (w < 0)
            return;
        *head = w;
        head = &X.wpool[w].child;
    }
#undef CLOCK
#undef INITIAL
#undef INDEP
}

/* Source-DPOR: add backtrack points for the races of events [0, n) (optimal DPOR: wake-up tree branches). */
static void add_races(int n)
{
    static int dset[DP_MAX_EVENTS];
    for (int j = 0; j < n; j++) {
        int t = X.ev[j].tid, nd = 0;
        int pred = -1;
        for (int i = j - 1; i >= 0; i--)
            if (X.ev[i].tid == t) {
                pred = i;
                break;
            }
        for (int i = 0; i < j; i++)
            if (X.ev[i].tid != t && dependent(&X.ev[i], &X.ev[j]))
                dset[nd++] = i;
        for (int a = 0; a < nd; a++) {
            int i = dset[a], immediate = 1;
            if (pred >= 0 && hb_before(i, pred))
                immediate = 0;
            for (int b = 0; b < nd && immediate; b++)
                if (b != a && dset[b] > i && hb_before(i, dset[b]))
                    immediate = 0;
            if (!immediate)
                continue;
            int at = i;
            if (is_release(X.ev[i].kind) && !is_release(X.ev[j].kind)) {
                /* reverse at the holder's acquisition */
                for (int q = i - 1; q >= 0; q--)
                    if (X.ev[q].tid == X.ev[i].tid && is_acquire(X.ev[q].kind) && X.ev[q].addr == X.ev[i].addr) {
                        at = q;
                        break;
                    }
            } else if (X.ev[i].kind == K_SEQ_WRITE && !X.ev[i].arg && X.ev[j].kind == K_SEQ_BEGIN) {
                /* a reader's begin cannot move into the write section: reverse at the section's begin */
                for (int q = i - 1; q >= 0; q--)
                    if (X.ev[q].tid == X.ev[i].tid && X.ev[q].kind == K_SEQ_WRITE && X.ev[q].arg &&
                        X.ev[q].addr == X.ev[i].addr) {
                        at = q;
                        break;
                    }
            }
            if (at >= X.depth)
                continue;
            if (X.cfg.mode == 3) {
                wut_race(at, j);
                continue;
            }
            /* v = the events after `at` not after it in happens-before, then e_j; its initials */
            uint16_t init = 0, seen = 0;
            static int v[DP_MAX_EVENTS];
            int nv = 0;
            for (int e = at + 1; e < j; e++)
                if (!hb_before(at, e))
                    v[nv++] = e;
            v[nv++] = j;
            for (int x = 0; x < nv; x++) {
                int e = v[x], u = X.ev[e].tid;
                if (seen & (1u << u))
                    continue;
                seen |= (uint16_t)(1u << u);
                int first = 1;
                for (int y = 0; y < x && first; y++)
                    if (hb_before(v[y], e))
                        first = 0;
                if (first)
                    init |= (uint16_t)(1u << u);
            }
            struct dnode *node = &X.nodes[at];
            if (init & node->backtrack)
                continue;
            int q = (init & (1u << t)) ? t : __builtin_ctz(init);
            if (node->enabled & (1u << q))
                node->backtrack |= (uint16_t)(1u << q);
            else
                node->backtrack |= node->enabled;
        }
    }
}

/* One execution along X.choice[0..X.replay); returns 0, or -1 if it could not run. */
static int run_execution(void)
{
    pyb_kp_config cfg = {0};
    cfg.device_size = X.cfg.device_size;
    cfg.should_fail = should_fail;
    cfg.fail_mode = X.cfg.fail_mode;
    cfg.end_bio_intact = X.cfg.end_bio_intact;
    cfg.hung_ns = 200000000ull;      /* only a deadlocked execution's released threads ever wait */
    int err = 0;
    X.inst = NULL;
    X.nal = 0;
    memset(X.alc, 0, sizeof(X.alc));
    if (X.mod->create(&cfg, &X.inst, &err) != PYB_KP_OK)
        return -1;
    X.started = 0;
    X.aborted = 0;
    X.nev = 0;
    X.blocked_at = -1;
    X.deadlock = 0;
    X.too_long = 0;
    X.stuck = 0;
    X.last_tid = -1;
    X.allocs = 0;
    X.fault_hit = 0;
    X.gen++;
    X.nrec = 0;
    X.have_race = 0;
    for (int i = 0; i < X.n; i++) {
        struct dthr *t = &X.thr[i];
        t->tid = i;
        t->done = 0;
        t->rcu_depth = 0;
        t->cur_op = 0;
        t->nstreak = 0;
        t->seq_write = 0;
        t->seq_read_left = 0;
        t->seq_addr = 0;
        memset(t->kc, 0, sizeof(t->kc));
        t->kc[i] = 1;
        t->nops = X.cfg.nops[i];
        for (int k = 0; k < t->nops; k++) {
            t->ops[k] = (struct dscript){X.cfg.op[i][k], X.cfg.off[i][k], X.cfg.len[i][k]};
            t->result[k] = 0;
        }
        sem_init(&t->sem, 0, 0);
        pthread_create(&t->th, NULL, thread_main, t);
        while (sem_wait(&X.arrive) != 0)
            ;
    }
    X.started = 1;
    decide(NULL);
    /* Bounded: an execution that does not end within DP_EXEC_BOUND_S (a patch blocked outside every
     * point the explorer knows) is abandoned: every thread is released to run out under the shim's own
     * hung bound, and the search stops with an error. */
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += DP_EXEC_BOUND_S;
    while (sem_timedwait(&X.exec_done, &dl) != 0) {
        if (errno == ETIMEDOUT) {
            X.stuck = 1;
            X.aborted = 1;
            for (int i = 0; i < X.n; i++)
                post(&X.thr[i]);
            break;
        }
    }
    for (int i = 0; i < X.n; i++) {
        pthread_join(X.thr[i].th, NULL);
        sem_destroy(&X.thr[i].sem);
    }
    return 0;
}

/* The oracle on the finished execution: appends failures to b; returns how many. */
static int oracle(struct sbuf *b, int *first)
{
    int fails = 0;
    /* missed bypass: a read returned 0 while an overlapping write was in flight across it */
    for (int r = 0; r < X.nev; r++) {
        if (X.ev[r].kind != K_MARK || X.ev[r].role != M_R_END || X.ev[r].arg)
            continue;
        int rt = X.ev[r].tid, rb = -1;
        for (int q = r - 1; q >= 0; q--)
            if (X.ev[q].tid == rt && X.ev[q].kind == K_MARK && X.ev[q].role == M_R_BEGIN) {
                rb = q;
                break;
            }
        for (int s = 0; s < rb; s++) {
            if (X.ev[s].kind != K_MARK || X.ev[s].role != M_S_DONE ||
                !overlap(X.ev[s].addr, X.ev[s].size, X.ev[r].addr, X.ev[r].size))
                continue;
            int e_begin = -1;
            for (int q = s + 1; q < X.nev; q++)
                if (X.ev[q].tid == X.ev[s].tid && X.ev[q].kind == K_MARK && X.ev[q].role == M_E_BEGIN &&
                    X.ev[q].addr == X.ev[s].addr) {
                    e_begin = q;
                    break;
                }
            if (e_begin >= 0 && e_begin < r)
                continue;
            sb(b, "%s{\"kind\":\"missed bypass\",\"reader\":%d,\"writer\":%d,\"read_begin\":%d,\"read_end\":%d,"
               "\"start_done\":%d}", *first ? "" : ",", rt, X.ev[s].tid, rb, r, s);
            *first = 0;
            fails++;
            break;
        }
    }
    return fails;
}

int pyb_dpor_explore(const struct pyb_dpor_config *cfg, struct pyb_dpor_result *res);
int pyb_dpor_explore(const struct pyb_dpor_config *cfg, struct pyb_dpor_result *res)
{
    memset(res, 0, sizeof(*res));
    if (cfg->nthreads < 1 || cfg->nthreads > DP_MAX_THREADS)
        return -1;
    pthread_mutex_lock(&pyb_dpor_mu);
    Dl_info di;
    if (dladdr((void *)pyb_dpor_explore, &di) && di.dli_fbase)
        module_base = (uintptr_t)di.dli_fbase;
    /* One CPU for the whole exploration: exactly one of its threads runs at a time, and a hand-over to a
     * thread parked on the same CPU is a plain context switch, not a wake-up of another (idle) CPU. The
     * threads of each execution inherit the calling thread's mask; the caller's mask is restored at the end. */
    cpu_set_t saved_cpus, one_cpu;
    const char *pin = getenv("PYBCACHE_EXPLORE_PIN");         /* "0": leave the threads where they are */
    int pinned = 0, cpu = pin && !strcmp(pin, "0") ? -1 : sched_getcpu();
    if (cpu >= 0 && pthread_getaffinity_np(pthread_self(), sizeof(saved_cpus), &saved_cpus) == 0) {
        CPU_ZERO(&one_cpu);
        CPU_SET(cpu, &one_cpu);
        pinned = pthread_setaffinity_np(pthread_self(), sizeof(one_cpu), &one_cpu) == 0;
    }
    X.mod = pybcache_kpatch_module();
    X.cfg = *cfg;
    X.n = cfg->nthreads;
    X.nodes = calloc(DP_MAX_EVENTS + 1, sizeof(*X.nodes));
    X.gran = calloc(DP_HASH_SLOTS, sizeof(*X.gran));
    X.sync = calloc(DP_HASH_SLOTS, sizeof(*X.sync));
    X.rec = calloc(DP_MAX_RECORDS, sizeof(*X.rec));
    X.hb = calloc(DP_MAX_EVENTS, sizeof(*X.hb));
    X.idx = calloc(DP_MAX_EVENTS, sizeof(*X.idx));
    X.wpool = cfg->mode == 3 ? calloc(DP_WUT_POOL, sizeof(*X.wpool)) : NULL;
    wut_reset();
    free(class_set);
    class_set = NULL;
    class_cap = class_n = 0;
    sem_init(&X.arrive, 0, 0);
    sem_init(&X.exec_done, 0, 0);
    X.depth = 0;
    X.replay = 0;
    X.gen = 1;
    struct sbuf b = {0};
    int first = 1, stop = 0, have_race = 0;
    sb(&b, "{\"failures\":[");
    if (!X.nodes || !X.gran || !X.sync || !X.rec || !X.hb || !X.idx || (cfg->mode == 3 && !X.wpool)) {
        res->error = 3;
        goto out;
    }
    for (;;) {
        if (run_execution() != 0) {
            res->error = 3;
            break;
        }
        if (X.nondet) {
            res->error = 2;
            break;
        }
        if (X.too_long) {
            res->error = 1;
            break;
        }
        if (X.stuck) {
            res->error = 4;
            break;
        }
        res->events += (uint64_t)X.nev;
        if (X.allocs > res->max_allocations)
            res->max_allocations = X.allocs;
        int valid = X.blocked_at >= 0 ? X.blocked_at : X.nev;
        if (X.blocked_at >= 0) {
            res->blocked++;
            X.depth = X.blocked_at;
        } else {
            res->executions++;
            res->faults_injected += (uint64_t)X.fault_hit;
        }
        compute_hb(valid);
        if (X.blocked_at < 0) {
            if (cfg->count_classes)
                class_add(canonical_hash(X.nev));
            /* failures of a complete execution */
            struct sbuf f = {0};
            int ffirst = 1, nf = 0;
            nf += oracle(&f, &ffirst);
            pyb_kp_report reps[8];
            size_t nrep = X.mod->reports(X.inst, 0, reps, 8);
            for (size_t i = 0; i < nrep && i < 8; i++) {
                sb(&f, "%s{\"kind\":\"report\",\"report\":%d,\"op\":%d,\"file\":", ffirst ? "" : ",", reps[i].kind,
                   reps[i].op);
                sb_str(&f, reps[i].file);
                sb(&f, ",\"line\":%d,\"lock\":", reps[i].line);
                sb_str(&f, reps[i].lock);
                sb(&f, ",\"detail\":%d}", reps[i].detail);
                ffirst = 0;
                nf++;
            }
            if (X.deadlock) {
                sb(&f, "%s{\"kind\":\"deadlock\"}", ffirst ? "" : ",");
                ffirst = 0;
                nf++;
            }
            /* quiesced: every write has ended, so no range may read active any more */
            int active = 0;
            for (int t = 0; t < X.n && !X.deadlock; t++)
                for (int k = 0; k < X.cfg.nops[t]; k++)
                    if (X.cfg.op[t][k] == OP_START &&
                        X.mod->is_active(X.inst, X.cfg.off[t][k], X.cfg.len[t][k]) == 1)
                        active = 1;
            if (active) {
                sb(&f, "%s{\"kind\":\"count leaked\"}", ffirst ? "" : ",");
                ffirst = 0;
                nf++;
            }
            uint64_t leaked = 0, nleaked = 0;
            X.mod->destroy(X.inst, &leaked, &nleaked);
            X.inst = NULL;
            if (leaked) {
                sb(&f, "%s{\"kind\":\"memory not back\",\"bytes\":%lu,\"allocations\":%lu}", ffirst ? "" : ",",
                   (unsigned long)leaked, (unsigned long)nleaked);
                ffirst = 0;
                nf++;
            }
            if (X.have_race && !have_race) {
                have_race = 1;
                sb(&b, "%s{\"kind\":\"data race\",\"execution\":%lu,\"a\":", first ? "" : ",",
                   (unsigned long)res->executions);
                json_rec(&b, &X.race_a);
                sb(&b, ",\"b\":");
                json_rec(&b, &X.race_b);
                sb(&b, ",\"events\":");
                json_events(&b);
                sb(&b, "}");
                first = 0;
            }
            if (nf) {
                sb(&b, "%s{\"kind\":\"oracle\",\"execution\":%lu,\"failures\":[%s],\"events\":", first ? "" : ",",
                   (unsigned long)res->executions, f.p ? f.p : "");
                json_events(&b);
                sb(&b, "}");
                first = 0;
                if (cfg->stop_on_failure)
                    stop = 1;
            }
            free(f.p);
        }
        if (X.inst) {
            X.mod->destroy(X.inst, NULL, NULL);
            X.inst = NULL;
        }
        if (X.guide >= 0) {
            X.diverged++;                   /* the execution ended before its wake-up branch did */
            wut_free(X.guide);
        }
        X.guide = -1;
        X.guide_at = -1;
        if (cfg->mode >= 2 && valid > 0)
            add_races(valid);
        if (X.woverflow) {
            res->error = 5;
            break;
        }
        if (stop || (cfg->max_executions && res->executions + res->blocked >= cfg->max_executions))
            break;
        /* backtrack: the deepest node with an unexplored, awake choice */
        int k;
        for (k = X.depth - 1; k >= 0; k--) {
            struct dnode *nd = &X.nodes[k];
            nd->done |= (uint16_t)(1u << X.choice[k]);
            if (cfg->mode == 3) {
                /* optimal DPOR: the leftmost branch of the node's wake-up tree, if any */
                int pick = -1;
                while (nd->wut >= 0 && pick < 0) {
                    int c = nd->wut, p = X.wpool[c].tid;
                    nd->wut = X.wpool[c].next;
                    if ((nd->enabled & (uint16_t)~(nd->done | nd->sleep)) & (1u << p)) {
                        pick = p;
                        X.guide = X.wpool[c].child;
                        X.guide_at = k + 1;
                    } else {
                        X.diverged++;
                        wut_free(X.wpool[c].child);
                    }
                    wut_put(c);
                }
                if (pick >= 0) {
                    X.choice[k] = pick;
                    break;
                }
                continue;
            }
            uint16_t todo = nd->backtrack & (uint16_t)~(nd->done | nd->sleep) & nd->enabled;
            if (cfg->mode == 0)
                todo = nd->enabled & (uint16_t)~nd->done;
            if (todo) {
                X.choice[k] = __builtin_ctz(todo);
                break;
            }
        }
        if (k < 0) {
            /* optimal DPOR: a branch not followed may hide classes (the dependence missed an interaction) */
            res->complete = X.diverged == 0;
            break;
        }
        X.depth = k + 1;
        X.replay = k + 1;
        /* the chosen child's sleep set is recomputed by decide() at node k (replayed with a new choice) */
    }
out:
    if (pinned && pthread_setaffinity_np(pthread_self(), sizeof(saved_cpus), &saved_cpus) != 0) {
        /* the saved mask no longer fits (a cpuset changed meanwhile): every CPU, which the kernel clips to the
         * cpuset, rather than staying on one */
        cpu_set_t all;
        CPU_ZERO(&all);
        for (int c = 0; c < CPU_SETSIZE; c++)
            CPU_SET(c, &all);
        pthread_setaffinity_np(pthread_self(), sizeof(all), &all);
    }
    sb(&b, "]}");
    res->json = b.p;
    res->classes = class_n;
    res->diverged = X.diverged;
    res->wut_peak = (uint64_t)X.wpeak;
    X.nondet = 0;
    free(X.wpool);
    X.wpool = NULL;
    free(X.nodes);
    free(X.gran);
    free(X.sync);
    free(X.rec);
    free(X.hb);
    free(X.idx);
    X.nodes = NULL;
    sem_destroy(&X.arrive);
    sem_destroy(&X.exec_done);
    pthread_mutex_unlock(&pyb_dpor_mu);
    return 0;
}

void pyb_dpor_free(char *p);
void pyb_dpor_free(char *p) { free(p); }
