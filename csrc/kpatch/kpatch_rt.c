/*
 * kpatch_rt.c - the shim runtime linked into every patch module (see pybcache/kpatch.h for the
 * contract the patch sees and pybcache/kpatch_abi.h for the one the loader sees).
 *
 * It ships inside the package as source because it is compiled on the user's machine together with
 * the user's patch: a patch module is self-contained (no symbol of the Python extension is needed),
 * and the Python side reaches it only through the table pybcache_kpatch_module() returns. It is
 * compiled WITHOUT the shim's include folder on the path (it includes the shim by relative path), so
 * the C library's own <linux/...> includes never meet the shim's forwarding headers.
 *
 * State and its protection.
 *   - Per thread (thread-local, touched only by its thread): the simulated kernel context (hard-irq,
 *     soft-irq, interrupts disabled, spinlocks held, RCU read depth), the instance whose operation is
 *     running, and the escape point of that operation.
 *   - Per instance: `mu` guards the allocation list and byte accounting, the report and log buffers
 *     and the allocation statistics; the operation counters are relaxed atomics; `broken` is an atomic
 *     flag (release when set, acquire when tested).
 *   - Per spinlock: `owner` (relaxed atomic; written only by the thread that holds or releases it);
 *     per lock class: `usage` (atomic fetch_or), `reported` (atomic exchange), first-usage sites
 *     (relaxed atomic stores, written once by the thread that set the usage bit).
 *   - RCU: `rcu_mu` guards the reader registry; a reader's `ctr` is written by its thread (release)
 *     and read by grace-period scans (acquire); the grace-period counter `rcu_gp` is advanced by
 *     seq_cst RMWs. Each instance's `cb_mu` guards its own callback list and in-flight count (the
 *     protocol is stated at the RCU section below).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "pybcache/kpatch.h"      /* found through -iquote: see pybcache/bcache/kpatch/load.py */
#include "pybcache/kpatch_abi.h"

#include <dlfcn.h>
#include <execinfo.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

_Static_assert(PYB_KP_SLEEP_ALLOC_ == PYB_KP_SLEEP_ALLOC, "sleeper codes agree");
_Static_assert(PYB_KP_SLEEP_WAIT_EVENT_ == PYB_KP_SLEEP_WAIT_EVENT, "sleeper codes agree");
_Static_assert(PYB_KP_SLEEP_SYNCHRONIZE_RCU_ == PYB_KP_SLEEP_SYNCHRONIZE_RCU, "sleeper codes agree");
_Static_assert(PYB_KP_SLEEP_MIGHT_SLEEP_ == PYB_KP_SLEEP_MIGHT_SLEEP, "sleeper codes agree");
_Static_assert(PYB_KP_SLEEP_MUTEX_ == PYB_KP_SLEEP_MUTEX, "sleeper codes agree");
_Static_assert(PYB_KP_SLEEP_MEMPOOL_ == PYB_KP_SLEEP_MEMPOOL, "sleeper codes agree");
_Static_assert(PYB_KP_SLEEP_WAIT_TIMEOUT_ == PYB_KP_SLEEP_WAIT_TIMEOUT, "sleeper codes agree");
_Static_assert(PYB_KP_SLEEP_SCHEDULE_ == PYB_KP_SLEEP_SCHEDULE, "sleeper codes agree");

#define KP_MAX_HELD 16          /* held spinlocks remembered per thread (deeper nesting is counted) */
#define KP_MAX_REPORTS 128
#define KP_MAX_LOG 512
#define KP_WAIT_SLICE_NS 50000000ull      /* a sleeping wait re-checks its bound every 50 ms */
#define KP_DEFAULT_HUNG_NS 10000000000ull /* outside any operation (should not happen) */
/* lockdep's usage bits (kernel/locking/lockdep.c, mark_usage): bit 2k is "used in" irq class k, bit 2k+1
 * "taken with it enabled"; k = 0 hard-irq, 1 soft-irq. */
#define KP_USED_IN_HARDIRQ 1u
#define KP_USED_HARDIRQ_ON 2u
#define KP_USED_IN_SOFTIRQ 4u
#define KP_USED_SOFTIRQ_ON 8u
#define KP_MAX_CLASSES 64                 /* lock classes in the lock-order graph (more are not ordered) */
#define KP_COSTLY_BYTES (8u * 4096u)      /* PAGE_ALLOC_COSTLY_ORDER (3) pages: larger can fail when sleeping */
#define KP_MAGIC_LIVE 0x6b70616cu         /* "kpal" */
#define KP_MAGIC_FREED 0x6b706672u        /* "kpfr" */
#define FUTEX_WAIT_PRIVATE_ 128           /* FUTEX_WAIT | FUTEX_PRIVATE_FLAG */
#define FUTEX_WAKE_PRIVATE_ 129           /* FUTEX_WAKE | FUTEX_PRIVATE_FLAG */

/* Defined only by the shim's own test patches (see kpatch.h); hidden and weak, so it resolves to NULL
 * at link time in every other module. */
extern void pyb_kp_test_hook(int point, unsigned long long n) __attribute__((weak, visibility("hidden")));
#define TEST_HOOK(point, n) do { if (pyb_kp_test_hook) pyb_kp_test_hook((point), (n)); } while (0)

/* ---- interleave hooks (issue 26) ---- Defined only by the patch-level explorer's runtime
 * (csrc/kpatch/kpatch_dpor.c, linked into its own build of a patch); hidden and weak, so NULL in every
 * other module. Each call is a scheduling point: it returns when the explorer lets this thread perform
 * the operation that follows. A non-zero return from PYB_KP_HOOK_WAIT means the explorer has handled the
 * sleep (the wake came), so the real futex wait is skipped. */
enum { PYB_KP_HOOK_LOCK = 1, PYB_KP_HOOK_TRYLOCK, PYB_KP_HOOK_UNLOCK, PYB_KP_HOOK_ALLOC, PYB_KP_HOOK_FREE,
       PYB_KP_HOOK_WAIT_ENTER, PYB_KP_HOOK_WAIT, PYB_KP_HOOK_WAIT_LEAVE, PYB_KP_HOOK_WAKE,
       PYB_KP_HOOK_RCU_LOCK, PYB_KP_HOOK_RCU_UNLOCK, PYB_KP_HOOK_SYNC_RCU,
       /* the second API group (kpatch_rt_ext.c): arg = 1 for a writer (rwlocks) or a write section's
        * begin (seqcounts); a non-zero return from PYB_KP_HOOK_MUTEX_UNLOCK means no task can be asleep
        * on the mutex (the explorer grants it only when free), so its wake-up is skipped */
       PYB_KP_HOOK_RW_LOCK, PYB_KP_HOOK_RW_TRYLOCK, PYB_KP_HOOK_RW_UNLOCK, PYB_KP_HOOK_SEQ_BEGIN,
       PYB_KP_HOOK_SEQ_WRITE, PYB_KP_HOOK_MUTEX_LOCK, PYB_KP_HOOK_MUTEX_TRYLOCK, PYB_KP_HOOK_MUTEX_UNLOCK,
       /* not a point: a block (obj, arg bytes) was allocated, so that the explorer can name its addresses
        * by the allocation (which thread, its how-manieth) rather than by where malloc put it this time */
       PYB_KP_HOOK_ALLOCATED };
extern int pyb_kp_sched_hook(int kind, const void *obj, unsigned long arg, const char *file, int line)
    __attribute__((weak, visibility("hidden")));
#define SCHED_HOOK(kind, obj, arg, file, line) \
    (pyb_kp_sched_hook ? pyb_kp_sched_hook((kind), (obj), (unsigned long)(arg), (file), (line)) : 0)
/* ---- end of interleave hooks ---- */

#define LOAD(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)

/* ---- per-thread context ---------------------------------------------------------------------- */

struct kp_held {
    spinlock_t *lock;
    const char *file;
    int line;
};

struct kp_reader;

struct kp_thread {
    int hardirq;                 /* in simulated hard-irq context (write_end in hard-irq) */
    int softirq;                 /* serving a soft-irq (RCU callbacks, write_end in soft-irq) */
    int irqs_off;                /* local interrupts disabled */
    int end_ctx;                 /* write_end's context (enum pyb_kp_end_context), -1 outside write_end */
    int submission;              /* on the block submission path (write_start, read_bypass, an inline end) */
    int in_wait_cond;            /* evaluating a wait_event condition after the first time */
    int noio;                    /* inside memalloc_noio_save: allocations lose __GFP_IO and __GFP_FS */
    int published;               /* this thread's RCU reader record is published (reader_sync) */
    int rcu_depth;               /* rcu_read_lock nesting */
    int nheld;                   /* spinlocks held (the first KP_MAX_HELD are in held[]) */
    struct kp_held held[KP_MAX_HELD];
    pyb_kp_instance *cur;        /* instance whose operation runs on this thread, or NULL */
    int op;                      /* enum pyb_kp_op */
    int no_inject;               /* init/exit: no fault injection */
    uint64_t call_failures;      /* allocations that failed during the current operation */
    uint64_t suppressed;         /* a ratelimit's dropped count, for this thread's next printk */
    jmp_buf *escape;             /* the running operation's escape point, or NULL */
    struct kp_reader *reader;    /* RCU reader record, registered on first use */
    uint64_t wait_gen;           /* the instance's w_end_done when this thread's current wait last
                                  * (re)started evaluating its condition (wait_enter, futex return) */
    uint64_t wait_end0;          /* the instance's w_end_done when the current wait began */
    uint64_t wp_started;         /* write private areas this thread ever started (wp_put), any instance */
    uint64_t id;                 /* this thread's number, unique in the process (0: not drawn yet); a dead
                                  * thread's &T can be a new thread's, its number never is */
};
static uint64_t kp_thread_ids;   /* the last number drawn (relaxed RMW) */

static _Thread_local struct kp_thread T;

/* The second API group's per-thread state (pybcache/kpatch_ext.h; its code is kpatch_rt_ext.c, included at
 * the end of this file). Touched only by its thread. */
#define KP_X_MUTEX 0
#define KP_X_RW_READ 1
#define KP_X_RW_WRITE 2
struct kp_xheld {
    void *lock;                  /* a struct mutex or rwlock_t */
    const char *name;
    const char *file;
    int line;
    int kind;                    /* KP_X_* */
};
struct kp_thread_ext {
    int preempt;                 /* preempt_disable depth */
    int bh;                      /* local_bh_disable depth */
    int nrw;                     /* rwlocks held (atomic context, like spinlocks) */
    int nmutex;                  /* mutexes held */
    int nx;                      /* entries of held[] (the first KP_MAX_HELD are remembered) */
    struct kp_xheld held[KP_MAX_HELD];
    int state;                   /* task state (set_current_state; TASK_RUNNING = 0) */
    struct wait_queue_entry *wait;   /* the entry prepare_to_wait last prepared, or NULL */
    int cpu;                     /* simulated CPU + 1; 0 before the first use */
};
static _Thread_local struct kp_thread_ext TX;
static void ext_escape(void);
static void ext_check_return(void);

/* ---- instances ---------------------------------------------------------------------------------- */

struct kp_alloc {                /* header before every allocation; 48 bytes keeps 16-byte alignment */
    struct kp_alloc *prev, *next;     /* the owner's list of live allocations, under owner->mu */
    pyb_kp_instance *owner;
    size_t size;                      /* bytes the patch asked for */
    uint32_t magic;
    uint32_t in_init;                 /* allocated by init: counted as init_bytes */
    uint64_t pad;
};
_Static_assert(sizeof(struct kp_alloc) % 16 == 0, "allocations stay 16-byte aligned");

struct pyb_kp_instance {
    struct block_device bdev;
    struct gendisk disk;
    pyb_kp_config cfg;
    pthread_mutex_t mu;               /* guards everything down to `log` */
    struct kp_alloc live;             /* list head of live allocations */
    uint64_t init_bytes, op_bytes, peak_bytes, op_allocs, peak_op_allocs;
    uint64_t allocations, frees, alloc_failures, nofail;
    pyb_kp_report reports[KP_MAX_REPORTS];
    size_t nreports;
    uint64_t reports_dropped;
    pyb_kp_log *log;                  /* KP_MAX_LOG records, allocated with the instance */
    size_t nlog;
    uint64_t log_dropped;
    uint64_t starts, ends, checks, warnings;  /* relaxed atomic counters */
    uint64_t ends_in[PYB_KP_END_CONTEXTS];    /* relaxed atomic counters */
    int claimed;                      /* 1 + the context claim_end_context chose for the next end, or 0 (atomic) */
    int broken;                       /* an operation escaped: release store, acquire load */
    /* RCU callbacks queued by this instance's operations (see the RCU section). */
    pthread_mutex_t cb_mu;            /* guards the four fields below */
    struct rcu_head *cb_head;         /* pending callbacks in queueing order */
    struct rcu_head **cb_tail;        /* &last->next, or &cb_head when empty */
    uint64_t cb_queued;               /* length of the list (written under cb_mu; relaxed loads outside) */
    uint64_t cb_running;              /* taken off the list by a poll and not finished yet */
    /* Writes and waits, for the hosts' completions and the hung reports (all atomics: seq_cst for
     * w_end_done and settled_ends, which order a host's end against a waiter's re-evaluation; relaxed
     * for the others, which are figures). */
    uint64_t w_started;               /* start operations returned */
    uint64_t w_end_begun;             /* end operations begun */
    uint64_t w_end_done;              /* end operations completed (seq_cst) */
    uint64_t ops_running;             /* operations of this instance running now, on any thread */
    uint64_t waits, sleeping;         /* wait_events that slept; threads asleep in a futex now */
    uint64_t reserve_taken;           /* mempool elements handed out from a reserve */
    uint64_t mempool_waits;           /* mempool_alloc calls that slept for an element */
    uint64_t in_wait;                 /* threads inside a wait_event now (enter to leave) */
    uint64_t settled_ends;            /* max wait_gen a sleeper published before sleeping (seq_cst) */
    /* Per-write private areas (ops->write_private_size > 0): `wp_mu` guards the table. */
    pthread_mutex_t wp_mu;
    struct kp_wpbucket *wp_table;     /* KP_WP_BUCKETS chains, oldest first; NULL when not declared */
    /* The patch's struct cached_dev, last: the patch may see it larger (PYBCACHE_CACHED_DEV_FIELDS) and the
     * instance is allocated with room for that (kp_create). Written before init, read-only for the shim. */
    struct cached_dev dc __attribute__((aligned(64)));
};

/* Reports and allocations made outside any operation land here (nothing should). */
static pyb_kp_log orphan_log[1];
static pyb_kp_instance orphan = {
    .mu = PTHREAD_MUTEX_INITIALIZER, .live = {&orphan.live, &orphan.live, NULL, 0, 0, 0, 0},
    .log = orphan_log, .cb_mu = PTHREAD_MUTEX_INITIALIZER, .cb_tail = &orphan.cb_head,
};

static pyb_kp_instance *current(void) { return T.cur ? T.cur : &orphan; }

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

unsigned long pyb_kp_jiffies(void) { return (unsigned long)(now_ns() / 1000000ull); }

static uint64_t hung_ns(void) { return T.cur ? T.cur->cfg.hung_ns : KP_DEFAULT_HUNG_NS; }

/* ---- reports ------------------------------------------------------------------------------------- */

static void report_full(int kind, const char *file, int line, const char *lock, const char *other_file,
                        int other_line, int detail, const char *other_lock, const uint64_t *wake)
{
    pyb_kp_instance *inst = current();
    pthread_mutex_lock(&inst->mu);
    for (size_t i = 0; i < inst->nreports; i++) {
        pyb_kp_report *r = &inst->reports[i];
        if (r->kind == kind && r->file == file && r->line == line && r->lock == lock && r->detail == detail &&
            r->other_lock == other_lock && r->end_context == T.end_ctx) {
            r->count++;
            pthread_mutex_unlock(&inst->mu);
            return;
        }
    }
    if (inst->nreports < KP_MAX_REPORTS) {
        pyb_kp_report *r = &inst->reports[inst->nreports++];
        *r = (pyb_kp_report){kind, T.op, file, line, lock, other_lock, other_file, other_line, detail,
                             T.hardirq, T.irqs_off, T.nheld + TX.nrw + TX.preempt + TX.bh, T.rcu_depth, T.end_ctx,
                             1, 0, 0, 0, 0};
        if (wake) {
            r->inflight = wake[0];
            r->ends_during = wake[1];
            r->others_running = wake[2];
            r->rcu_queued = wake[3];
        }
    } else {
        inst->reports_dropped++;
    }
    pthread_mutex_unlock(&inst->mu);
}

static void report(int kind, const char *file, int line, const char *lock, const char *other_file,
                   int other_line, int detail)
{
    report_full(kind, file, line, lock, other_file, other_line, detail, NULL, NULL);
}

/* A lockdep report that names a second lock (the other end of an order). */
static void report2(int kind, const char *file, int line, const char *lock, const char *other_file,
                    int other_line, int detail, const char *other_lock)
{
    report_full(kind, file, line, lock, other_file, other_line, detail, other_lock, NULL);
}

/* A hung task, with what could still have woken it: the writes in flight (their ends are the usual
 * wakers of a tracker's wait), the ends completed during the wait, the instance's operations running
 * on other threads and its RCU callbacks not yet run. */
static void report_hung(const char *file, int line, int detail)
{
    pyb_kp_instance *inst = current();
    uint64_t started = __atomic_load_n(&inst->w_started, __ATOMIC_RELAXED);
    uint64_t begun = __atomic_load_n(&inst->w_end_begun, __ATOMIC_RELAXED);
    uint64_t done = __atomic_load_n(&inst->w_end_done, __ATOMIC_SEQ_CST);
    uint64_t running = __atomic_load_n(&inst->ops_running, __ATOMIC_RELAXED);
    uint64_t others = running > 0 ? running - 1 : 0;
    uint64_t waiting = __atomic_load_n(&inst->in_wait, __ATOMIC_SEQ_CST);   /* this thread has left its wait */
    uint64_t wake[4] = {started > begun ? started - begun : 0, done - T.wait_end0,
                        others > waiting ? others - waiting : 0, LOAD(&inst->cb_queued) + LOAD(&inst->cb_running)};
    report_full(PYB_KP_HUNG_TASK, file, line, NULL, NULL, 0, detail, NULL, wake);
}

static struct kp_reader *reader(void);
static uint64_t rcu_gp;              /* defined in the RCU section (tentative definition) */

/*
 * Publish or unpublish this thread's RCU reader record so that it is a reader exactly while it is in
 * an rcu_read_lock section or in a region the kernel's RCU treats as one since v5.0 (the flavours
 * consolidated): interrupts disabled, a spinlock or rwlock held or preemption or bottom halves disabled,
 * hard-irq or soft-irq context.
 * Called after every change of those. Publishing stores the grace-period counter and fences, as
 * rcu_read_lock did (see the RCU section).
 */
static void reader_sync(void)
{
    int want = T.rcu_depth || T.irqs_off || T.nheld || T.hardirq || T.softirq || TX.preempt || TX.bh || TX.nrw;
    if (want == T.published)
        return;
    struct kp_reader *r = reader();
    if (want) {
        __atomic_store_n((uint64_t *)r, __atomic_load_n(&rcu_gp, __ATOMIC_ACQUIRE), __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
    } else {
        __atomic_store_n((uint64_t *)r, 0, __ATOMIC_RELEASE);   /* first field: ctr */
    }
    T.published = want;
}

/*
 * Release the spinlocks this thread holds and remembers (held[]), innermost first. Only locks whose
 * owner is this thread: one another thread released under us (a reported wrong-owner unlock) and then
 * took is not ours. Locks nested deeper than KP_MAX_HELD are not remembered and stay held.
 */
static void release_held(void)
{
    int n = T.nheld < KP_MAX_HELD ? T.nheld : KP_MAX_HELD;
    for (int i = n - 1; i >= 0; i--) {
        spinlock_t *l = T.held[i].lock;
        if (LOAD(&l->owner) == (void *)&T) {
            STORE(&l->owner, NULL);
            pthread_spin_unlock(&l->raw);
        }
    }
    T.nheld = 0;
    reader_sync();
}

/*
 * Leave the running operation (its instance is then broken), or abort when there is none. The
 * abandoned operation's spinlocks are released and its RCU read-side section ended: its instance is
 * broken anyway, and a lock left held would stall every other thread (other instances of the module
 * share its static locks) until its own hung bound, and make this thread's next acquisition of it
 * look like recursion.
 */
static __attribute__((noreturn)) void escape(int code)
{
    if (T.reader && T.published)
        __atomic_store_n((uint64_t *)T.reader, 0, __ATOMIC_RELEASE);  /* first field: ctr */
    T.published = 0;
    T.rcu_depth = 0;
    T.in_wait_cond = 0;
    release_held();
    ext_escape();
    if (T.escape)
        longjmp(*T.escape, code);
    /* No operation to abandon: the only channel left is the process's fate. */
    fputs("pybcache kpatch: fatal report outside an operation\n", stderr);
    abort();
}

int pyb_kp_warn(const char *file, int line)
{
    __atomic_fetch_add(&current()->warnings, 1, __ATOMIC_RELAXED);
    report(PYB_KP_WARN, file, line, NULL, NULL, 0, 0);
    return 1;
}

void pyb_kp_bug(const char *file, int line)
{
    /* The kernel's own line, then the end of the process: a BUG is an oops, and the lab runs each
     * check in a child process that it watches for this signal. */
    fprintf(stderr, "kernel BUG at %s:%d!\n", file, line);
    fflush(stderr);
    abort();
}

/* ---- crash frames --------------------------------------------------------------------------------- */

/*
 * With PYBCACHE_KPATCH_SYMBOLISE=1 in the environment when the module is loaded (check-patch sets it in its
 * children), a crash (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT: BUG_ON) first writes the program counters of
 * this module's frames to stderr, one `pybcache-kpatch-frame 0xOFFSET` line each (offsets from the module's
 * load base, for addr2line on the module file), then dies of the same signal (the handler is reset to the
 * default on entry and the signal raised again). Only async-signal-safe calls after the set-up, which loads
 * the unwinder by calling backtrace() once.
 */
static uintptr_t kp_self_base;

static void kp_crash_frames(int sig)
{
    void *frames[64];
    int n = backtrace(frames, 64);
    for (int i = 0; i < n; i++) {
        Dl_info di;
        if (!dladdr(frames[i], &di) || (uintptr_t)di.dli_fbase != kp_self_base)
            continue;
        uintptr_t off = (uintptr_t)frames[i] - kp_self_base;
        char line[64] = "pybcache-kpatch-frame 0x";
        char hex[2 * sizeof(uintptr_t)];
        int k = 0;
        do {
            hex[k++] = "0123456789abcdef"[off & 15];
            off >>= 4;
        } while (off);
        size_t len = strlen(line);
        while (k)
            line[len++] = hex[--k];
        line[len++] = '\n';
        if (write(2, line, len) < 0)
            break;
    }
    raise(sig);                       /* the default action now: the same signal ends the process */
}

static void kp_crash_handler(int sig, siginfo_t *si, void *uc)
{
    (void)si;
    (void)uc;
    kp_crash_frames(sig);
}

__attribute__((constructor)) static void kp_crash_init(void)
{
    const char *e = getenv("PYBCACHE_KPATCH_SYMBOLISE");
    Dl_info di;
    if (!e || strcmp(e, "1") != 0 || !dladdr((void *)&kp_crash_init, &di))
        return;
    kp_self_base = (uintptr_t)di.dli_fbase;
    void *prime[1];
    (void)backtrace(prime, 1);        /* loads the unwinder here, not in a signal handler */
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = kp_crash_handler;
    sa.sa_flags = SA_SIGINFO | SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    const int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
        sigaction(sigs[i], &sa, NULL);
}

/* ---- might_sleep ------------------------------------------------------------------------------- */

static int atomic_context(void)
{
    return T.hardirq || T.softirq || T.irqs_off || T.nheld || T.rcu_depth || TX.preempt || TX.bh || TX.nrw;
}

void pyb_kp_might_sleep(int what, const char *file, int line)
{
    /* kernel/sched/core.c, __might_sleep: a blocking call with the task's state already set to sleep
     * (inside a wait_event condition) is warned about whatever the context. */
    if (T.in_wait_cond)
        report(PYB_KP_BLOCK_IN_WAIT_COND, file, line, NULL, NULL, 0, what);
    if (!atomic_context())
        return;
    const struct kp_held *h = (T.nheld > 0 && T.nheld <= KP_MAX_HELD) ? &T.held[T.nheld - 1] : NULL;
    const struct kp_xheld *x = NULL;
    for (int i = (TX.nx < KP_MAX_HELD ? TX.nx : KP_MAX_HELD) - 1; !h && i >= 0 && !x; i--)
        x = TX.held[i].kind != KP_X_MUTEX ? &TX.held[i] : NULL;    /* a mutex held is no atomic context */
    if (x) {
        report(PYB_KP_MIGHT_SLEEP, file, line, x->name, x->file, x->line, what);
        return;
    }
    report(PYB_KP_MIGHT_SLEEP, file, line, h ? h->lock->name : NULL, h ? h->file : NULL, h ? h->line : 0, what);
}

/* ---- allocation ---------------------------------------------------------------------------------- */

/* Can the kernel fail this allocation (outside an OOM victim)? An order-0..3 allocation whose mask may
 * enter direct reclaim is retried by the page allocator until it succeeds (mm/page_alloc.c,
 * __alloc_pages_slowpath, should_reclaim_retry / __alloc_pages_may_oom); failslab skips such masks by
 * default (mm/failslab.c, ignore-gfp-wait). Masks that cannot sleep, __GFP_NORETRY, __GFP_RETRY_MAYFAIL
 * and costly orders can fail. */
static int kernel_can_fail(size_t size, gfp_t gfp)
{
    return !gfpflags_allow_blocking(gfp) || (gfp & (__GFP_NORETRY | __GFP_RETRY_MAYFAIL)) || size > KP_COSTLY_BYTES;
}

void *pyb_kp_alloc(size_t size, gfp_t gfp, int zero, const char *file, int line)
{
    if (T.noio)
        gfp &= ~(__GFP_IO | __GFP_FS);     /* sched/mm.h, current_gfp_context */
    if (gfpflags_allow_blocking(gfp))
        pyb_kp_might_sleep(PYB_KP_SLEEP_ALLOC, file, line);
    /* Reclaim entered from the submission path may write back through this very device and wait on it:
     * md-bitmap allocates its counter pages GFP_NOIO for that reason. */
    if (T.submission && (gfp & (__GFP_IO | __GFP_FS)))
        report(PYB_KP_GFP_IO_SUBMISSION, file, line, NULL, NULL, 0, (int)gfp);
    if (size == 0)
        return ZERO_SIZE_PTR;
    SCHED_HOOK(PYB_KP_HOOK_ALLOC, NULL, size, file, line);     /* interleave point (issue 26) */
    pyb_kp_instance *inst = current();
    if (!(gfp & __GFP_NOFAIL) && !T.no_inject && inst->cfg.should_fail &&
        (inst->cfg.fail_mode == PYB_KP_FAIL_ALL || kernel_can_fail(size, gfp)) &&
        inst->cfg.should_fail(inst->cfg.should_fail_arg, (uint64_t)size)) {
        pthread_mutex_lock(&inst->mu);
        inst->alloc_failures++;
        pthread_mutex_unlock(&inst->mu);
        T.call_failures++;
        return NULL;
    }
    struct kp_alloc *h;
    for (;;) {
        h = malloc(sizeof(*h) + size);
        if (h || !(gfp & __GFP_NOFAIL))
            break;
        sched_yield();                      /* __GFP_NOFAIL: retry for ever, as the allocator does */
    }
    if (!h) {
        pthread_mutex_lock(&inst->mu);
        inst->alloc_failures++;
        pthread_mutex_unlock(&inst->mu);
        T.call_failures++;
        return NULL;
    }
    memset(h + 1, (zero || (gfp & __GFP_ZERO)) ? 0 : 0x5a, size);  /* slab's in-use poison for kmalloc */
    h->owner = inst;
    h->size = size;
    h->magic = KP_MAGIC_LIVE;
    h->in_init = T.op == PYB_KP_OP_INIT;
    h->pad = 0;
    pthread_mutex_lock(&inst->mu);
    h->next = &inst->live;
    h->prev = inst->live.prev;
    inst->live.prev->next = h;
    inst->live.prev = h;
    if (h->in_init) {
        inst->init_bytes += size;
    } else {
        inst->op_bytes += size;
        if (++inst->op_allocs > inst->peak_op_allocs)
            inst->peak_op_allocs = inst->op_allocs;
    }
    if (inst->init_bytes + inst->op_bytes > inst->peak_bytes)
        inst->peak_bytes = inst->init_bytes + inst->op_bytes;
    inst->allocations++;
    if (gfp & __GFP_NOFAIL)
        inst->nofail++;
    pthread_mutex_unlock(&inst->mu);
    SCHED_HOOK(PYB_KP_HOOK_ALLOCATED, h + 1, size, file, line);
    return h + 1;
}

/* Unlink h from its owner's list and accounting; caller holds owner->mu. */
static void unlink_alloc(struct kp_alloc *h)
{
    pyb_kp_instance *inst = h->owner;
    h->prev->next = h->next;
    h->next->prev = h->prev;
    if (h->in_init) {
        inst->init_bytes -= h->size;
    } else {
        inst->op_bytes -= h->size;
        inst->op_allocs--;
    }
    inst->frees++;
}

void pyb_kp_free(const void *p, const char *file, int line)
{
    if (ZERO_OR_NULL_PTR(p))
        return;
    struct kp_alloc *h = (struct kp_alloc *)p - 1;
    /* Best effort: a pointer the shim never returned, or one already freed. (The ASan flavour of a
     * patch module is the authoritative check.) */
    if (h->magic != KP_MAGIC_LIVE) {
        report(PYB_KP_BAD_FREE, file, line, NULL, NULL, 0, h->magic == KP_MAGIC_FREED);
        return;
    }
    SCHED_HOOK(PYB_KP_HOOK_FREE, p, h->size, file, line);      /* interleave point (issue 26) */
    pyb_kp_instance *inst = h->owner;
    pthread_mutex_lock(&inst->mu);
    unlink_alloc(h);
    pthread_mutex_unlock(&inst->mu);
    h->magic = KP_MAGIC_FREED;
    memset(h + 1, 0x6b, h->size);         /* slab's free poison: a use after free reads 0x6b */
    free(h);
}

/* ---- spinlocks and lockdep ----------------------------------------------------------------------- */

void pyb_kp_spin_init(spinlock_t *l, const char *name, struct pyb_kp_lock_class *cls)
{
    pthread_spin_init(&l->raw, PTHREAD_PROCESS_PRIVATE);
    STORE(&l->owner, NULL);
    l->name = name;
    l->cls = cls;
    memset(&l->own, 0, sizeof(l->own));
}

static struct pyb_kp_lock_class *lock_class(spinlock_t *l) { return l->cls ? l->cls : &l->own; }

/*
 * lockdep, as kernel/locking/lockdep.c of Linux 6.12 applies it to spinlocks (no read locks here).
 *
 * Usage (mark_usage): a class taken in hard-irq (soft-irq) context by a non-trylock acquisition is
 * "used in" that irq class; a class taken with interrupts enabled (and soft-irqs enabled) is "taken
 * with it enabled", and so is every held class at the moment interrupts are enabled again
 * (__trace_hardirqs_on_caller, mark_held_locks). Both on one class: "inconsistent {A} -> {B} usage".
 *
 * Order (validate_chain, check_prevs_add): a non-trylock acquisition of class B while holding class A
 * records A -> B. A new A -> B when B already reaches A is a "possible circular locking dependency"; a
 * second lock of a held class is "possible recursive locking". An irq-safe class (used in irq) that
 * reaches an irq-unsafe one (taken with that irq enabled) is "X-safe -> X-unsafe lock order" when the
 * order is added (check_irq_usage) and an "irq lock inversion" when the usage is marked
 * (check_usage_forwards / backwards). A trylock adds no order (it cannot wait) and no "used in" usage.
 *
 * The graph: classes get an index (at most KP_MAX_CLASSES) the first time they are nested; dep_fwd[a]
 * has bit b for a recorded A -> B. Written under dep_mu; the fast path (an order already recorded)
 * reads dep_fwd and class ids with atomic loads and takes no lock.
 */
static pthread_mutex_t dep_mu = PTHREAD_MUTEX_INITIALIZER;
static struct pyb_kp_lock_class *dep_class[KP_MAX_CLASSES];  /* under dep_mu */
static const char *dep_name[KP_MAX_CLASSES];                /* the first lock seen of each class (under dep_mu) */
static int dep_n;                                           /* under dep_mu */
static uint64_t dep_fwd[KP_MAX_CLASSES];                    /* stores under dep_mu (relaxed), relaxed loads */
static struct { const char *file; int line; } dep_site[KP_MAX_CLASSES][KP_MAX_CLASSES];   /* under dep_mu */
/* where each usage bit of a class was first set: written once by the thread that set the bit (relaxed file,
 * release line), read with an acquire load of the line */
static struct { const char *file; int line; } usage_at[KP_MAX_CLASSES][6];   /* 4, 5: rwlock read usages */

/* lockdep's softirqs_enabled: not serving a soft-irq or a hard-irq, bottom halves not disabled (local_bh_disable,
 * spin_lock_bh: a lock taken so is not SOFTIRQ-ON, kernel/locking/lockdep.c mark_usage) */
static int softirqs_enabled(void) { return !T.softirq && !T.hardirq && !TX.bh; }

static int bit_index(unsigned int bit) { return __builtin_ctz(bit); }

/* Index of c in the table, giving it one; -1 when the table is full. Caller holds dep_mu. */
static int class_index_locked(struct pyb_kp_lock_class *c, const char *name)
{
    int id = __atomic_load_n(&c->id, __ATOMIC_ACQUIRE);
    if (id)
        return id - 1;
    if (dep_n >= KP_MAX_CLASSES)
        return -1;
    dep_class[dep_n] = c;
    dep_name[dep_n] = name;
    __atomic_store_n(&c->id, dep_n + 1, __ATOMIC_RELEASE);
    return dep_n++;
}

static int class_index(struct pyb_kp_lock_class *c, const char *name)
{
    int id = __atomic_load_n(&c->id, __ATOMIC_ACQUIRE);
    if (id)
        return id - 1;
    pthread_mutex_lock(&dep_mu);
    int i = class_index_locked(c, name);
    pthread_mutex_unlock(&dep_mu);
    return i;
}

/* Classes reachable from `set` (the set included). Caller holds dep_mu. */
static uint64_t reach_forward(uint64_t set)
{
    uint64_t prev;
    do {
        prev = set;
        for (int i = 0; i < dep_n; i++)
            if (set & (1ull << i))
                set |= LOAD(&dep_fwd[i]);
    } while (set != prev);
    return set;
}

/* Classes that reach `set` (the set included). Caller holds dep_mu. */
static uint64_t reach_backward(uint64_t set)
{
    uint64_t prev;
    do {
        prev = set;
        for (int i = 0; i < dep_n; i++)
            if (LOAD(&dep_fwd[i]) & set)
                set |= 1ull << i;
    } while (set != prev);
    return set;
}

/* The first class of `set` whose usage has `bit`, or -1. Caller holds dep_mu. */
static int first_with(uint64_t set, unsigned int bit)
{
    for (int i = 0; i < dep_n; i++)
        if ((set & (1ull << i)) && (LOAD(&dep_class[i]->usage) & bit))
            return i;
    return -1;
}

static void usage_site(int idx, unsigned int bit, const char **file, int *line)
{
    int k = bit_index(bit);
    *file = NULL;
    *line = 0;
    if (idx < 0)
        return;
    *line = __atomic_load_n(&usage_at[idx][k].line, __ATOMIC_ACQUIRE);
    *file = LOAD(&usage_at[idx][k].file);
}

/* Set usage bits on l's class at file:line; report what lockdep would. */
static void mark_usage(spinlock_t *l, unsigned int bits, const char *file, int line)
{
    struct pyb_kp_lock_class *c = lock_class(l);
    if (!bits || (LOAD(&c->usage) & bits) == bits)
        return;
    int idx = class_index(c, l->name);
    unsigned int old = __atomic_fetch_or(&c->usage, bits, __ATOMIC_ACQ_REL);
    unsigned int added = bits & ~old, now = old | bits;
    for (unsigned int b = 1; b <= KP_USED_SOFTIRQ_ON && idx >= 0; b <<= 1) {
        if (added & b) {
            STORE(&usage_at[idx][bit_index(b)].file, file);
            __atomic_store_n(&usage_at[idx][bit_index(b)].line, line, __ATOMIC_RELEASE);
        }
    }
    for (int k = 0; k < 2; k++) {
        unsigned int in = KP_USED_IN_HARDIRQ << (2 * k), on = KP_USED_HARDIRQ_ON << (2 * k);
        if (!(added & (in | on)))
            continue;
        if ((now & in) && (now & on)) {
            if (!(__atomic_fetch_or(&c->reported, 1u << k, __ATOMIC_ACQ_REL) & (1u << k))) {
                /* detail bit 0: 0 = used in irq first, now enabled ({IN-X-W} -> {X-ON-W}); 1 = the
                 * reverse; bit 1: soft-irq */
                int now_on = (added & on) != 0;
                const char *of;
                int ol;
                usage_site(idx, now_on ? in : on, &of, &ol);
                report(PYB_KP_INCONSISTENT_LOCK, file, line, l->name, of, ol, (now_on ? 0 : 1) | (k << 1));
            }
            continue;
        }
        if (idx < 0 || ((added & in) && !LOAD(&dep_fwd[idx])))
            continue;                 /* newly irq-safe, nothing ordered after it */
        pthread_mutex_lock(&dep_mu);
        int other = (added & in) ? first_with(reach_forward(1ull << idx) & ~(1ull << idx), on)
                                 : first_with(reach_backward(1ull << idx) & ~(1ull << idx), in);
        const char *oname = other >= 0 ? dep_name[other] : NULL;
        pthread_mutex_unlock(&dep_mu);
        if (other >= 0 && !(__atomic_fetch_or(&c->reported, 4u << k, __ATOMIC_ACQ_REL) & (4u << k))) {
            const char *of;
            int ol;
            usage_site(other, (added & in) ? on : in, &of, &ol);
            report2(PYB_KP_IRQ_LOCK_ORDER, file, line, l->name, of, ol, k | 2, oname);
        }
    }
}

/* Record the order held -> l for every held lock (a non-trylock acquisition), and report a cycle, a
 * recursion or an irq-safe -> irq-unsafe order it makes. */
static void lockdep_order(spinlock_t *l, const char *file, int line)
{
    int n = T.nheld < KP_MAX_HELD ? T.nheld : KP_MAX_HELD;
    if (!n)
        return;
    struct pyb_kp_lock_class *c = lock_class(l);
    int idc = __atomic_load_n(&c->id, __ATOMIC_ACQUIRE);
    if (idc) {                        /* fast path: every order already recorded */
        int all = 1;
        for (int i = 0; i < n && all; i++) {
            int idh = __atomic_load_n(&lock_class(T.held[i].lock)->id, __ATOMIC_ACQUIRE);
            all = idh && idh != idc && (LOAD(&dep_fwd[idh - 1]) & (1ull << (idc - 1)));
        }
        if (all)
            return;
    }
    pthread_mutex_lock(&dep_mu);
    int b = class_index_locked(c, l->name);
    for (int i = n - 1; i >= 0; i--) {
        struct kp_held *h = &T.held[i];
        struct pyb_kp_lock_class *hc = lock_class(h->lock);
        if (hc == c) {
            if (!(__atomic_fetch_or(&c->reported, 16u, __ATOMIC_ACQ_REL) & 16u)) {
                pthread_mutex_unlock(&dep_mu);
                report2(PYB_KP_CIRCULAR_LOCKING, file, line, l->name, h->file, h->line, 1, h->lock->name);
                pthread_mutex_lock(&dep_mu);
            }
            continue;
        }
        int a = class_index_locked(hc, h->lock->name);
        if (a < 0 || b < 0 || (LOAD(&dep_fwd[a]) & (1ull << b)))
            continue;
        int kind = 0, detail = 0;
        const char *of = NULL, *ol_name = NULL, *lk = l->name;
        int ol = 0;
        if (reach_forward(1ull << b) & (1ull << a)) {
            /* B already reaches A: where the first step of that path was recorded */
            kind = PYB_KP_CIRCULAR_LOCKING;
            for (int j = 0; j < dep_n; j++) {
                if ((LOAD(&dep_fwd[b]) & (1ull << j)) && (j == a || (reach_forward(1ull << j) & (1ull << a)))) {
                    of = dep_site[b][j].file;
                    ol = dep_site[b][j].line;
                    break;
                }
            }
            ol_name = h->lock->name;
        } else {
            uint64_t back = reach_backward(1ull << a), fwd = reach_forward(1ull << b);
            for (int k = 0; k < 2 && !kind; k++) {
                unsigned int in = KP_USED_IN_HARDIRQ << (2 * k), on = KP_USED_HARDIRQ_ON << (2 * k);
                int safe = first_with(back, in), unsafe = first_with(fwd, on);
                if (safe >= 0 && unsafe >= 0) {
                    kind = PYB_KP_IRQ_LOCK_ORDER;
                    detail = k;
                    usage_site(safe, in, &of, &ol);
                    ol_name = dep_name[safe];
                    lk = dep_name[unsafe];
                }
            }
        }
        STORE(&dep_fwd[a], LOAD(&dep_fwd[a]) | (1ull << b));
        dep_site[a][b].file = file;
        dep_site[a][b].line = line;
        if (kind) {
            pthread_mutex_unlock(&dep_mu);
            report2(kind, file, line, lk, of, ol, detail, ol_name);
            pthread_mutex_lock(&dep_mu);
        }
    }
    pthread_mutex_unlock(&dep_mu);
}

static void lockdep_acquire(spinlock_t *l, int trylock, const char *file, int line)
{
    unsigned int bits = 0;
    if (!trylock) {                   /* mark_usage: a trylock is not a use in irq context */
        if (T.hardirq)
            bits |= KP_USED_IN_HARDIRQ;
        if (T.softirq)
            bits |= KP_USED_IN_SOFTIRQ;
    }
    if (!T.irqs_off) {
        bits |= KP_USED_HARDIRQ_ON;
        if (softirqs_enabled())
            bits |= KP_USED_SOFTIRQ_ON;
    }
    mark_usage(l, bits, file, line);
    if (!trylock)                     /* validate_chain: a trylock adds no dependency */
        lockdep_order(l, file, line);
}

/* Interrupts go from disabled to enabled at file:line (spin_unlock_irq, local_irq_enable, a restore). */
static void irqs_enable(const char *file, int line)
{
    if (!T.irqs_off)
        return;
    if (T.hardirq) {
        /* kernel/irq/handle.c warns "irq N handler ... enabled interrupts"; lockdep refuses too. The lab
         * keeps them disabled, as the irq core does when the handler returns. */
        report(PYB_KP_IRQS_ENABLED_IN_IRQ, file, line, NULL, NULL, 0, 0);
        return;
    }
    T.irqs_off = 0;
    int n = T.nheld < KP_MAX_HELD ? T.nheld : KP_MAX_HELD;
    for (int i = 0; i < n; i++)
        mark_usage(T.held[i].lock, KP_USED_HARDIRQ_ON | (softirqs_enabled() ? KP_USED_SOFTIRQ_ON : 0), file, line);
    reader_sync();
}

void pyb_kp_irq(int op, unsigned long *flags, const char *file, int line)
{
    switch (op) {
    case PYB_KP_IRQ_OP_SAVE:
        *flags = (unsigned long)T.irqs_off;
        /* fall through */
    case PYB_KP_IRQ_OP_DISABLE:
        T.irqs_off = 1;
        reader_sync();
        break;
    case PYB_KP_IRQ_OP_RESTORE:
        if (*flags) {
            T.irqs_off = 1;
            reader_sync();
        } else {
            irqs_enable(file, line);
        }
        break;
    default:
        irqs_enable(file, line);
    }
}

int pyb_kp_in_context(int what) { return what == 0 ? T.irqs_off : what == 1 ? T.hardirq : T.softirq; }

unsigned int pyb_kp_memalloc_noio(int save, unsigned int flags)
{
    unsigned int old = (unsigned int)T.noio;
    T.noio = save ? 1 : (int)flags;
    return old;
}

void pyb_kp_wait_cond(int on) { T.in_wait_cond = on; }

static void push_held(spinlock_t *l, const char *file, int line)
{
    if (T.nheld < KP_MAX_HELD)
        T.held[T.nheld] = (struct kp_held){l, file, line};
    T.nheld++;
    reader_sync();
}

/* Forget l in this thread's held stack (any position: unlock order need not be LIFO). */
static int pop_held(spinlock_t *l)
{
    int n = T.nheld < KP_MAX_HELD ? T.nheld : KP_MAX_HELD;
    for (int i = n - 1; i >= 0; i--) {
        if (T.held[i].lock == l) {
            memmove(&T.held[i], &T.held[i + 1], (size_t)(n - i - 1) * sizeof(T.held[0]));
            T.nheld--;
            reader_sync();
            return 1;
        }
    }
    if (T.nheld > KP_MAX_HELD) {     /* held beyond what we remember */
        T.nheld--;
        return 1;
    }
    return 0;
}

static int irq_enter_lock(int irq_mode, unsigned long *flags)
{
    int saved = T.irqs_off;
    if (irq_mode == PYB_KP_IRQ_SAVE && flags)
        *flags = (unsigned long)saved;
    if (irq_mode != PYB_KP_IRQ_NONE) {
        T.irqs_off = 1;
        reader_sync();
    }
    return saved;
}

void pyb_kp_spin_lock(spinlock_t *l, int irq_mode, unsigned long *flags, const char *file, int line)
{
    if (LOAD(&l->owner) == (void *)&T) {
        report(PYB_KP_SPIN_RECURSION, file, line, l->name, NULL, 0, 0);
        escape(PYB_KP_EFATAL);        /* the kernel would spin here for ever */
    }
    irq_enter_lock(irq_mode, flags);
    lockdep_acquire(l, 0, file, line);
    SCHED_HOOK(PYB_KP_HOOK_LOCK, l, 0, file, line);            /* interleave point (issue 26) */
    if (pthread_spin_trylock(&l->raw) != 0) {
        uint64_t t0 = now_ns();
        for (unsigned i = 1;; i++) {
            if (pthread_spin_trylock(&l->raw) == 0)
                break;
            if (i < 128) {
                cpu_relax();
                continue;
            }
            sched_yield();            /* userspace: the holder may have been preempted */
            if ((i & 63) == 0 && now_ns() - t0 > hung_ns()) {
                report(PYB_KP_LOCKUP, file, line, l->name, NULL, 0, 0);
                escape(PYB_KP_EHUNG);
            }
        }
    }
    STORE(&l->owner, (void *)&T);
    push_held(l, file, line);
}

int pyb_kp_spin_trylock(spinlock_t *l, int irq_mode, unsigned long *flags, const char *file, int line)
{
    SCHED_HOOK(PYB_KP_HOOK_TRYLOCK, l, 0, file, line);         /* interleave point (issue 26) */
    int saved = irq_enter_lock(irq_mode, flags);
    if (pthread_spin_trylock(&l->raw) != 0) {
        if (irq_mode != PYB_KP_IRQ_NONE) {
            T.irqs_off = saved;
            reader_sync();
        }
        return 0;
    }
    lockdep_acquire(l, 1, file, line);   /* a successful trylock: "enabled" usage only, no order */
    STORE(&l->owner, (void *)&T);
    push_held(l, file, line);
    return 1;
}

void pyb_kp_spin_unlock(spinlock_t *l, int irq_mode, unsigned long flags, const char *file, int line)
{
    SCHED_HOOK(PYB_KP_HOOK_UNLOCK, l, 0, file, line);          /* interleave point (issue 26) */
    void *owner = LOAD(&l->owner);
    if (owner != (void *)&T) {
        pop_held(l);                  /* someone else released it under us: forget it */
        if (owner == NULL) {
            report(PYB_KP_DOUBLE_UNLOCK, file, line, l->name, NULL, 0, 0);
            return;                   /* nothing to release */
        }
        report(PYB_KP_UNLOCK_NOT_HELD, file, line, l->name, NULL, 0, 0);
        /* The kernel warns and releases anyway; so does the shim. */
    } else {
        pop_held(l);
    }
    STORE(&l->owner, NULL);
    pthread_spin_unlock(&l->raw);
    if (irq_mode == PYB_KP_IRQ_DISABLE) {
        irqs_enable(file, line);      /* spin_unlock_irq enables interrupts unconditionally */
    } else if (irq_mode == PYB_KP_IRQ_SAVE) {
        if (flags)
            T.irqs_off = 1;
        else
            irqs_enable(file, line);
    }
}

int pyb_kp_spin_is_locked(spinlock_t *l) { return LOAD(&l->owner) != NULL; }

void pyb_kp_assert_held(spinlock_t *l, const char *file, int line)
{
    if (LOAD(&l->owner) != (void *)&T)
        report(PYB_KP_NOT_HELD, file, line, l->name, NULL, 0, 0);
}

/* ---- wait queues ----------------------------------------------------------------------------------- */

static void futex_wait(unsigned int *addr, unsigned int val, uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
    syscall(SYS_futex, addr, FUTEX_WAIT_PRIVATE_, val, &ts, NULL, 0);
}

static void futex_wake_all(unsigned int *addr) { syscall(SYS_futex, addr, FUTEX_WAKE_PRIVATE_, INT_MAX, NULL, NULL, 0); }

/* The host's interrupt hook, called only outside spinlocks (waits are). */
static int interrupted(void)
{
    pyb_kp_instance *inst = T.cur;
    return inst && inst->cfg.interrupted && inst->cfg.interrupted(inst->cfg.interrupted_arg);
}

void pyb_kp_wait_enter(wait_queue_head_t *wq, const char *file, int line)
{
    pyb_kp_might_sleep(PYB_KP_SLEEP_WAIT_EVENT, file, line);
    SCHED_HOOK(PYB_KP_HOOK_WAIT_ENTER, wq, 0, file, line);     /* interleave point (issue 26) */
    T.wait_gen = T.wait_end0 = __atomic_load_n(&current()->w_end_done, __ATOMIC_SEQ_CST);
    __atomic_fetch_add(&current()->in_wait, 1, __ATOMIC_SEQ_CST);
    __atomic_fetch_add(&wq->waiters, 1, __ATOMIC_SEQ_CST);
}

void pyb_kp_wait_leave(wait_queue_head_t *wq)
{
    SCHED_HOOK(PYB_KP_HOOK_WAIT_LEAVE, wq, 0, NULL, 0);        /* interleave point (issue 26) */
    __atomic_fetch_sub(&wq->waiters, 1, __ATOMIC_SEQ_CST);
    __atomic_fetch_sub(&current()->in_wait, 1, __ATOMIC_SEQ_CST);
}

/*
 * Sleep until wq's sequence moves past `seq` (a wake_up since the caller sampled it), 50 ms at most.
 * No lost wakeup: the caller sampled seq (seq_cst) before evaluating its condition; a waker makes the
 * condition true, then advances seq (seq_cst RMW) and, if it sees a waiter (our seq_cst increment of
 * `waiters` precedes the sample), wakes the futex. If our sample saw the advance, the waker's
 * condition write happens-before our evaluation; if it did not, the futex compare fails or the wake
 * finds us asleep.
 */
void pyb_kp_wait_sleep(wait_queue_head_t *wq, unsigned int seq, unsigned long long *t0, const char *file, int line)
{
    pyb_kp_instance *inst = current();
    uint64_t now = now_ns();
    if (*t0 == 0) {
        *t0 = now;
        __atomic_fetch_add(&inst->waits, 1, __ATOMIC_RELAXED);
    }
    if (now - *t0 > hung_ns()) {
        pyb_kp_wait_leave(wq);
        report_hung(file, line, PYB_KP_SLEEP_WAIT_EVENT);
        escape(PYB_KP_EHUNG);
    }
    /* This thread evaluated its condition (false) after every end counted in wait_gen: publish it
     * before the host's hook runs (interrupted() is where a host learns that a patch thread sleeps). */
    uint64_t seen = __atomic_load_n(&inst->settled_ends, __ATOMIC_SEQ_CST);
    while (seen < T.wait_gen &&
           !__atomic_compare_exchange_n(&inst->settled_ends, &seen, T.wait_gen, 0, __ATOMIC_SEQ_CST,
                                        __ATOMIC_SEQ_CST)) {
    }
    __atomic_fetch_add(&inst->sleeping, 1, __ATOMIC_SEQ_CST);
    if (interrupted()) {
        __atomic_fetch_sub(&inst->sleeping, 1, __ATOMIC_SEQ_CST);
        pyb_kp_wait_leave(wq);
        escape(PYB_KP_EINTR);
    }
    /* interleave point: the explorer waits (the wake came), in place of the futex */
    if (!SCHED_HOOK(PYB_KP_HOOK_WAIT, wq, seq, file, line))
        futex_wait(&wq->seq, seq, KP_WAIT_SLICE_NS);
    __atomic_fetch_sub(&inst->sleeping, 1, __ATOMIC_SEQ_CST);
    T.wait_gen = __atomic_load_n(&inst->w_end_done, __ATOMIC_SEQ_CST);   /* the next evaluation sees these */
}

void pyb_kp_wake_up(wait_queue_head_t *wq)
{
    SCHED_HOOK(PYB_KP_HOOK_WAKE, wq, 0, NULL, 0);              /* interleave point (issue 26) */
    __atomic_fetch_add(&wq->seq, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&wq->waiters, __ATOMIC_SEQ_CST))
        futex_wake_all(&wq->seq);
}

/* ---- printk ------------------------------------------------------------------------------------------ */

void pyb_kp_printk(int level, const char *file, int line, const char *fmt, ...)
{
    if (level < 0) {
        level = 4;                    /* printk without a level: the default message level */
        if (fmt[0] == '\001' && fmt[1] >= '0' && fmt[1] <= '7') {
            level = fmt[1] - '0';
            fmt += 2;
        }
    }
    pyb_kp_instance *inst = current();
    pyb_kp_log rec = {level, file, line, T.suppressed, {0}};
    T.suppressed = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rec.text, sizeof(rec.text), fmt, ap);   /* the patch's own message */
    va_end(ap);
    size_t n = strlen(rec.text);
    if (n && rec.text[n - 1] == '\n')
        rec.text[n - 1] = 0;
    pthread_mutex_lock(&inst->mu);
    if (inst != &orphan && inst->nlog < KP_MAX_LOG)
        inst->log[inst->nlog++] = rec;
    else
        inst->log_dropped++;
    pthread_mutex_unlock(&inst->mu);
}

/* The kernel's ___ratelimit: `burst` messages per `interval` jiffies per state; dropped messages are
 * counted and carried by the next message that passes. */
int pyb_kp_ratelimit(void *state, const char *file, int line)
{
    (void)file;
    (void)line;
    struct ratelimit_state *rs = state;
    unsigned long now = pyb_kp_jiffies();
    int ok;
    pthread_mutex_lock(&rs->lock);
    if (rs->begin == 0)
        rs->begin = now ? now : 1;
    if (now - rs->begin >= (unsigned long)rs->interval) {
        T.suppressed += rs->missed;
        rs->missed = 0;
        rs->printed = 0;
        rs->begin = now;
    }
    ok = rs->printed < rs->burst;
    if (ok)
        rs->printed++;
    else
        rs->missed++;
    pthread_mutex_unlock(&rs->lock);
    return ok;
}

/* ---- RCU ----------------------------------------------------------------------------------------------- */

/*
 * Quiescent-state RCU. A reader publishes, on entering its outermost section, the grace-period
 * counter it saw (`ctr`, non-zero) and clears it on leaving. synchronize_rcu advances the counter to
 * g and waits until every reader's ctr is 0 or >= g: a reader with ctr < g entered before the
 * advance and may hold an old pointer; one with ctr >= g loaded the counter after the advance
 * (acquire, pairing with the advance's seq_cst RMW), so it sees everything the updater did before.
 * The seq_cst fence after publishing ctr and the one before the scan order a reader's ctr store
 * against its loads of protected pointers, and the updater's unpublishing against its scan (store ->
 * load both ways, so either the scan sees the reader or the reader sees the update).
 *
 * Callbacks (call_rcu, kfree_rcu). call_rcu issues a seq_cst fence (after the caller's unpublishing),
 * advances the counter to g (the callback's `gp`) and appends the callback to the list of the
 * instance whose operation is running. A poll of an instance:
 *   1. loads the counter (seq_cst) into `snap`, then fences and scans the readers for `oldest`;
 *   2. takes off its list only callbacks with gp <= snap and gp <= oldest, and counts them in
 *      cb_running (under cb_mu);
 *   3. runs them outside every lock, in the instance's soft-irq context, then uncounts them.
 * gp <= snap is what makes the scan valid for a callback: its call_rcu's advance is then ordered
 * before the poll's load (release sequence of seq_cst RMWs), hence its fence before the poll's scan,
 * so a reader the scan missed sees the unpublishing (the store -> load argument above). A callback
 * queued after the snapshot waits for a later poll, however the scan went. gp <= oldest: no reader
 * that the scan saw entered before the callback's period.
 * An instance's callbacks are taken only by polls of that instance (after its operations, in its
 * rcu_barrier and in its destroy), so they run charged to it and are never in another instance's hands
 * when it is destroyed; rcu_barrier waits for cb_running too, so a callback another thread of the same
 * instance is running counts as not run yet.
 */
struct kp_reader {
    uint64_t ctr;                /* must be the first field (escape clears it); release / acquire */
    struct kp_reader *prev, *next;   /* registry, under rcu_mu */
};

static pthread_mutex_t rcu_mu = PTHREAD_MUTEX_INITIALIZER;
static struct kp_reader rcu_readers = {0, &rcu_readers, &rcu_readers};
static uint64_t rcu_gp = 1;          /* grace-period counter: seq_cst RMWs; seq_cst or acquire loads */
static uint64_t cb_pending;          /* callbacks queued and not finished, whole module (relaxed) */
static pthread_key_t rcu_key;
static pthread_once_t rcu_once = PTHREAD_ONCE_INIT;

static void reader_exit(void *p)
{
    struct kp_reader *r = p;
    pthread_mutex_lock(&rcu_mu);
    r->prev->next = r->next;
    r->next->prev = r->prev;
    pthread_mutex_unlock(&rcu_mu);
    free(r);
}

static void rcu_key_init(void) { pthread_key_create(&rcu_key, reader_exit); }

static struct kp_reader *reader(void)
{
    if (T.reader)
        return T.reader;
    pthread_once(&rcu_once, rcu_key_init);
    struct kp_reader *r = calloc(1, sizeof(*r));
    if (!r) {
        fputs("pybcache kpatch: cannot allocate an RCU reader record\n", stderr);
        abort();
    }
    pthread_mutex_lock(&rcu_mu);
    r->next = &rcu_readers;
    r->prev = rcu_readers.prev;
    rcu_readers.prev->next = r;
    rcu_readers.prev = r;
    pthread_mutex_unlock(&rcu_mu);
    pthread_setspecific(rcu_key, r);
    T.reader = r;
    return r;
}

void pyb_kp_rcu_read_lock(void)
{
    SCHED_HOOK(PYB_KP_HOOK_RCU_LOCK, NULL, 0, NULL, 0);        /* interleave point (issue 26) */
    T.rcu_depth++;
    reader_sync();
}

void pyb_kp_rcu_read_unlock(const char *file, int line)
{
    if (T.rcu_depth == 0) {
        pyb_kp_warn(file, line);     /* unbalanced rcu_read_unlock */
        return;
    }
    SCHED_HOOK(PYB_KP_HOOK_RCU_UNLOCK, NULL, 0, file, line);   /* interleave point (issue 26) */
    --T.rcu_depth;
    reader_sync();
}

int pyb_kp_rcu_read_lock_held(void) { return T.rcu_depth > 0; }

/* rcupdate.h: rcu_read_lock_sched_held() is !preemptible(): interrupts disabled, a spinlock held
 * (preemption off), hard-irq or soft-irq context; or rcu_read_lock_sched (an alias here). */
int pyb_kp_rcu_read_lock_sched_held(void)
{
    return T.rcu_depth > 0 || T.irqs_off || T.nheld || T.hardirq || T.softirq;
}

void pyb_kp_rcu_dereference_check(const char *file, int line)
{
    if (T.rcu_depth == 0)
        report(PYB_KP_SUSPICIOUS_RCU, file, line, NULL, NULL, 0, 0);
}

/* The oldest grace period a live reader other than `skip` may still be in (UINT64_MAX: none). Caller
 * holds rcu_mu. */
static uint64_t oldest_reader(const struct kp_reader *skip)
{
    uint64_t oldest = UINT64_MAX;
    for (struct kp_reader *r = rcu_readers.next; r != &rcu_readers; r = r->next) {
        uint64_t c = __atomic_load_n(&r->ctr, __ATOMIC_ACQUIRE);
        if (c && c < oldest && r != skip)
            oldest = c;
    }
    return oldest;
}

void pyb_kp_synchronize_rcu(const char *file, int line)
{
    pyb_kp_might_sleep(PYB_KP_SLEEP_SYNCHRONIZE_RCU, file, line);
    SCHED_HOOK(PYB_KP_HOOK_SYNC_RCU, NULL, 0, file, line);     /* interleave point (issue 26) */
    T.wait_end0 = __atomic_load_n(&current()->w_end_done, __ATOMIC_SEQ_CST);
    uint64_t g = __atomic_add_fetch(&rcu_gp, 1, __ATOMIC_SEQ_CST);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    uint64_t t0 = now_ns();
    for (unsigned i = 0;; i++) {
        pthread_mutex_lock(&rcu_mu);
        uint64_t oldest = oldest_reader(T.reader);   /* its own section: reported as might_sleep */
        pthread_mutex_unlock(&rcu_mu);
        if (oldest >= g)
            return;
        if (i < 64) {
            sched_yield();
            continue;
        }
        if (now_ns() - t0 > hung_ns()) {
            report_hung(file, line, PYB_KP_SLEEP_SYNCHRONIZE_RCU);
            escape(PYB_KP_EHUNG);
        }
        if (interrupted())
            escape(PYB_KP_EINTR);
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

void pyb_kp_call_rcu(struct rcu_head *head, void (*func)(struct rcu_head *), void *obj)
{
    pyb_kp_instance *inst = current();
    head->func = func;
    head->obj = obj;
    head->next = NULL;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);   /* the caller's unpublishing before the new period */
    head->gp = __atomic_add_fetch(&rcu_gp, 1, __ATOMIC_SEQ_CST);
    __atomic_fetch_add(&cb_pending, 1, __ATOMIC_RELAXED);
    pthread_mutex_lock(&inst->cb_mu);
    *inst->cb_tail = head;
    inst->cb_tail = &head->next;
    STORE(&inst->cb_queued, inst->cb_queued + 1);
    pthread_mutex_unlock(&inst->cb_mu);
}

/* ---- the adapter: a patch as a tracker ------------------------------------------------------------ */

extern const struct pybcache_patch_ops *const pybcache_patch_ops_ptr;

struct kp_saved {
    pyb_kp_instance *cur;
    int op, hardirq, softirq, irqs_off, no_inject, end_ctx, submission, in_wait_cond, noio;
    uint64_t call_failures;
    jmp_buf *escape;
};

/* ctx: write_end's context (enum pyb_kp_end_context) for PYB_KP_OP_END, else ignored. */
static void enter(pyb_kp_instance *inst, int op, int ctx, struct kp_saved *s, jmp_buf *jb)
{
    *s = (struct kp_saved){T.cur, T.op, T.hardirq, T.softirq, T.irqs_off, T.no_inject, T.end_ctx, T.submission,
                           T.in_wait_cond, T.noio, T.call_failures, T.escape};
    T.cur = inst;
    T.op = op;
    T.end_ctx = op == PYB_KP_OP_END ? ctx : -1;
    /* write_end: a bio completion in hard-irq or soft-irq, a work item (process context, interrupts on),
     * or inline on the submitter (process context, still on the submission path) */
    T.hardirq = op == PYB_KP_OP_END && ctx == PYB_KP_END_HARDIRQ;
    T.softirq = op == PYB_KP_OP_RCU_CALLBACK || (op == PYB_KP_OP_END && ctx == PYB_KP_END_SOFTIRQ);
    T.submission = op == PYB_KP_OP_START || op == PYB_KP_OP_CHECK || (op == PYB_KP_OP_END && ctx == PYB_KP_END_INLINE);
    T.in_wait_cond = 0;
    T.noio = 0;
    T.irqs_off = T.hardirq;
    T.no_inject = op == PYB_KP_OP_INIT || op == PYB_KP_OP_EXIT;
    T.call_failures = 0;
    T.escape = jb;
    reader_sync();
}

/* After an operation returned normally: it must leave no lock held, interrupts as they were and no
 * RCU read-side section open. */
static void check_return(void)
{
    if (T.nheld || T.irqs_off != T.hardirq || T.rcu_depth) {
        const struct kp_held *h = T.nheld ? &T.held[0] : NULL;
        /* detail: 0 a spinlock is held (where it was taken is the report's site), 1 interrupts were
         * left disabled, 2 an RCU read-side section was left open */
        report(PYB_KP_LOCK_HELD_AT_RETURN, h ? h->file : NULL, h ? h->line : 0, h ? h->lock->name : NULL,
               NULL, 0, T.nheld ? 0 : (T.rcu_depth ? 2 : 1));
        T.nheld = 0;
        T.rcu_depth = 0;
        T.irqs_off = T.hardirq;
        reader_sync();
    }
    ext_check_return();
}

static void leave(struct kp_saved *s)
{
    T.cur = s->cur;
    T.op = s->op;
    T.hardirq = s->hardirq;
    T.softirq = s->softirq;
    T.irqs_off = s->irqs_off;
    T.no_inject = s->no_inject;
    T.end_ctx = s->end_ctx;
    T.submission = s->submission;
    T.in_wait_cond = s->in_wait_cond;
    T.noio = s->noio;
    T.call_failures = s->call_failures;
    T.escape = s->escape;
    reader_sync();
}

/* Run the callbacks of `ready` (a list taken off inst's), in order, in inst's soft-irq context. A
 * callback that escapes breaks inst; the others still run (each frees its own object). */
static void run_callbacks(pyb_kp_instance *inst, struct rcu_head *ready)
{
    struct kp_saved saved;
    jmp_buf jb;
    struct rcu_head *volatile next = ready;
    enter(inst, PYB_KP_OP_RCU_CALLBACK, 0, &saved, &jb);
    while (next) {
        struct rcu_head *h = next;
        next = h->next;
        if (setjmp(jb) == 0) {
            if (h->func)
                h->func(h);
            else
                pyb_kp_free(h->obj, __FILE__, __LINE__);
            check_return();
        } else {
            __atomic_store_n(&inst->broken, 1, __ATOMIC_RELEASE);
        }
    }
    leave(&saved);
}

/* Run inst's callbacks whose grace period has ended (the protocol is in the RCU section's comment).
 * With `wait` == 0 this never blocks (a busy reader registry is simply tried later). Returns how many
 * ran. Called with no operation of this thread running (after leave(), or from the barrier). */
static uint64_t rcu_poll(pyb_kp_instance *inst, int wait)
{
    if (!LOAD(&inst->cb_queued))
        return 0;
    uint64_t snap = __atomic_load_n(&rcu_gp, __ATOMIC_SEQ_CST);
    if (wait) {
        pthread_mutex_lock(&rcu_mu);
    } else if (pthread_mutex_trylock(&rcu_mu) != 0) {
        return 0;
    }
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    uint64_t oldest = oldest_reader(NULL);
    pthread_mutex_unlock(&rcu_mu);
    TEST_HOOK(PYB_KP_HOOK_POLL_SCANNED, 0);
    uint64_t limit = snap < oldest ? snap : oldest;
    struct rcu_head *ready = NULL, **ready_tail = &ready;
    uint64_t taken = 0;
    pthread_mutex_lock(&inst->cb_mu);
    for (struct rcu_head **pp = &inst->cb_head; *pp;) {
        struct rcu_head *h = *pp;
        if (h->gp <= limit) {
            *pp = h->next;
            h->next = NULL;
            *ready_tail = h;
            ready_tail = &h->next;
            taken++;
        } else {
            pp = &h->next;
        }
    }
    inst->cb_tail = &inst->cb_head;
    while (*inst->cb_tail)
        inst->cb_tail = &(*inst->cb_tail)->next;
    STORE(&inst->cb_queued, inst->cb_queued - taken);
    inst->cb_running += taken;
    pthread_mutex_unlock(&inst->cb_mu);
    TEST_HOOK(PYB_KP_HOOK_POLL_COLLECTED, taken);
    if (!taken)
        return 0;
    run_callbacks(inst, ready);
    pthread_mutex_lock(&inst->cb_mu);
    inst->cb_running -= taken;
    pthread_mutex_unlock(&inst->cb_mu);
    __atomic_fetch_sub(&cb_pending, taken, __ATOMIC_RELAXED);
    return taken;
}

/* Does inst still have a callback queued at or before grace period `target`, or one being run? */
static int barrier_pending(pyb_kp_instance *inst, uint64_t target)
{
    int pending = 0;
    pthread_mutex_lock(&inst->cb_mu);
    if (inst->cb_running)
        pending = 1;
    for (struct rcu_head *h = inst->cb_head; h && !pending; h = h->next)
        pending = h->gp <= target;
    pthread_mutex_unlock(&inst->cb_mu);
    return pending;
}

static void make_bio(pyb_kp_instance *inst, struct bio *bio, blk_opf_t op, uint64_t sector, uint64_t sectors)
{
    bio->bi_bdev = &inst->bdev;
    bio->bi_opf = op;
    bio->bi_iter.bi_sector = sector;
    bio->bi_iter.bi_size = (unsigned int)(sectors << SECTOR_SHIFT);
    bio->bi_private = NULL;
    bio->pyb_write_private = NULL;
}

/*
 * Per-write private areas (the fields a patch adds to struct search). The hosts name a write by its
 * range only, so a start's areas (one per bio it was cut into) are kept under the range, and the end
 * of a write of that range takes the oldest: writes of one range in flight together are told apart by
 * their order, which is all a host that ends "a write of [off, off+len)" says. An end with no
 * recorded start (a host bug, or a start that escaped) gets zeroed areas.
 */
#define KP_WP_BUCKETS 4096
struct kp_wpriv {
    struct kp_wpriv *next;            /* the bucket's chain, oldest first, under wp_mu */
    uint64_t off, len;
    uint64_t starter;                 /* the thread whose start filled it (T.id): its own end takes it first */
    size_t stride;                    /* bytes per bio's area (the declared size rounded up to 16) */
    unsigned char area[];             /* one area per bio of the write */
};
struct kp_wpbucket {
    struct kp_wpriv *head, **tail;    /* a chain, oldest first; tail == &head when empty (or NULL: unused) */
};

static size_t wp_stride(void)
{
    size_t n = pybcache_patch_ops_ptr->write_private_size;
    return (n + 15) & ~(size_t)15;
}

static struct kp_wpriv *wp_new(uint64_t off, uint64_t len, uint64_t nbios)
{
    size_t stride = wp_stride();
    struct kp_wpriv *w = calloc(1, sizeof(*w) + stride * nbios);
    if (!w) {
        fputs("pybcache kpatch: cannot allocate a write's private area\n", stderr);
        abort();
    }
    w->off = off;
    w->len = len;
    if (!T.id)
        T.id = __atomic_add_fetch(&kp_thread_ids, 1, __ATOMIC_RELAXED);
    w->starter = T.id;
    w->stride = stride;
    return w;
}

/* Caller holds wp_mu. */
static struct kp_wpbucket *wp_bucket(pyb_kp_instance *inst, uint64_t off, uint64_t len)
{
    uint64_t h = (off * 0x9E3779B97F4A7C15ull) ^ (len * 0xC2B2AE3D27D4EB4Full);
    struct kp_wpbucket *b = &inst->wp_table[(h >> 40) % KP_WP_BUCKETS];
    if (!b->tail)
        b->tail = &b->head;
    return b;
}

static void wp_put(pyb_kp_instance *inst, struct kp_wpriv *w)
{
    pthread_mutex_lock(&inst->wp_mu);
    struct kp_wpbucket *b = wp_bucket(inst, w->off, w->len);
    w->next = NULL;
    *b->tail = w;
    b->tail = &w->next;
    pthread_mutex_unlock(&inst->wp_mu);
    T.wp_started++;
}

static struct kp_wpriv *wp_take(pyb_kp_instance *inst, uint64_t off, uint64_t len)
{
    pthread_mutex_lock(&inst->wp_mu);
    struct kp_wpbucket *b = wp_bucket(inst, off, len);
    /* the oldest area of the range its own thread started (a submitter that ends its own writes, as the
     * patch-level explorer's threads do, gets its own areas: program order, as in the kernel where the area
     * belongs to the write); else the oldest of the range (a completion thread ends writes others started).
     * A thread that never started a write has no area of its own: it skips the first scan, which would walk
     * the whole chain (65,535 writes of one range in flight: the overflow check's completion thread). */
    struct kp_wpriv **pp = NULL;
    if (T.wp_started) {
        pp = &b->head;
        while (*pp && ((*pp)->off != off || (*pp)->len != len || (*pp)->starter != T.id))
            pp = &(*pp)->next;
    }
    if (!pp || !*pp) {
        pp = &b->head;
        while (*pp && ((*pp)->off != off || (*pp)->len != len))
            pp = &(*pp)->next;
    }
    struct kp_wpriv *w = *pp;
    if (w) {
        *pp = w->next;
        if (b->tail == &w->next)
            b->tail = pp;
    }
    pthread_mutex_unlock(&inst->wp_mu);
    return w;
}

static uint64_t end_seq;                           /* ends given a context by rotation (relaxed RMW) */
static uint64_t end_counts[PYB_KP_END_CONTEXTS];   /* write_end bios by context, module-wide (relaxed RMW) */

/*
 * A write's hand-over from its submitter to its completion. Assumed (not measured here, and not read from a
 * cited kernel source): in the kernel a bio's completion happens after its submission, the driver's queue
 * ordering the two, and a patch relies on it: a lockless
 * patch's relaxed atomic_inc in write_start is ordered before its write_end's atomic_dec_return, and before
 * a kfree of the page that follows, by nothing but that hand-over. The lab's drivers hand a write over
 * through their own rings, compiled without ThreadSanitizer, so under `check-patch --tsan` the hand-over
 * would be invisible and a correct patch would be reported racing. The runtime makes it visible where
 * the patch runs: a start, once its bios are submitted, does a release RMW on a slot chosen by the write's
 * range; the end of a write of the same range begins with an acquire load of that slot. This adds the
 * edge the kernel has (start -> end of the same write) and, for another write whose range hashes to the
 * same slot, an edge the kernel might not have; the slots are many so that such edges are rare, and no
 * edge is ever added between two starts, so races between submitters stay visible.
 * (Plain builds pay one uncontended RMW per start.)
 */
#define KP_HANDOFF_SLOTS 1024
static unsigned long kp_handoff[KP_HANDOFF_SLOTS]; /* __atomic RMW (release) by starts, loads (acquire) by ends */

static unsigned long *handoff_slot(uint64_t off, uint64_t len)
{
    uint64_t h = (off * 0x9E3779B97F4A7C15ull) ^ (len * 0xC2B2AE3D27D4EB4Full);
    return &kp_handoff[(h >> 32) % KP_HANDOFF_SLOTS];
}

/* Run one operation over [off, off+len), as bios of at most PYB_KP_MAX_BIO_BYTES. */
static int run(pyb_kp_instance *inst, int op, int ctx, uint64_t off, uint64_t len)
{
    if (__atomic_load_n(&inst->broken, __ATOMIC_ACQUIRE))
        return PYB_KP_EBROKEN;
    if (op == PYB_KP_OP_END)
        (void)__atomic_load_n(handoff_slot(off, len), __ATOMIC_ACQUIRE);
    const struct pybcache_patch_ops *ops = pybcache_patch_ops_ptr;
    uint64_t first = off >> SECTOR_SHIFT;
    uint64_t last = (off + len + SECTOR_SIZE - 1) >> SECTOR_SHIFT;   /* exclusive */
    const uint64_t max_sectors = PYB_KP_MAX_BIO_BYTES >> SECTOR_SHIFT;
    /* the write's private areas: new at a start, the oldest of the range's at an end */
    struct kp_wpriv *volatile wp = NULL;
    if (inst->wp_table && op == PYB_KP_OP_START)
        wp = wp_new(off, len, (last - first + max_sectors - 1) / max_sectors);
    else if (inst->wp_table && op == PYB_KP_OP_END && !(wp = wp_take(inst, off, len)))
        wp = wp_new(off, len, (last - first + max_sectors - 1) / max_sectors);
    if (op == PYB_KP_OP_END)
        __atomic_fetch_add(&inst->w_end_begun, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&inst->ops_running, 1, __ATOMIC_RELAXED);
    struct kp_saved saved;
    jmp_buf jb;
    volatile int result = 0;
    enter(inst, op, ctx, &saved, &jb);
    int code = setjmp(jb);
    if (code == 0) {
        uint64_t k = 0;                /* the bio's index in the write */
        for (uint64_t s = first; s < last; k++) {
            uint64_t n = last - s < max_sectors ? last - s : max_sectors;
            struct bio bio;
            if (op == PYB_KP_OP_START) {
                make_bio(inst, &bio, REQ_OP_WRITE, s, n);
                if (wp)
                    bio.pyb_write_private = wp->area + k * wp->stride;
                __atomic_fetch_add(&inst->starts, 1, __ATOMIC_RELAXED);
                ops->write_start(&inst->dc, &bio);
            } else if (op == PYB_KP_OP_END) {
                make_bio(inst, &bio, REQ_OP_WRITE, s, n);
                if (wp)
                    bio.pyb_write_private = wp->area + k * wp->stride;
                if (!inst->cfg.end_bio_intact) {
                    /* as cached_dev_write_complete sees s->orig_bio: bch_data_invalidate advanced it */
                    bio.bi_iter.bi_sector = s + n;
                    bio.bi_iter.bi_size = 0;
                }
                __atomic_fetch_add(&inst->ends, 1, __ATOMIC_RELAXED);
                __atomic_fetch_add(&inst->ends_in[ctx], 1, __ATOMIC_RELAXED);
                __atomic_fetch_add(&end_counts[ctx], 1, __ATOMIC_RELAXED);
                ops->write_end(&inst->dc, &bio);
            } else {
                make_bio(inst, &bio, REQ_OP_READ, s, n);
                __atomic_fetch_add(&inst->checks, 1, __ATOMIC_RELAXED);
                if (ops->read_bypass(&inst->dc, &bio)) {
                    result = 1;
                    s = last;
                    continue;
                }
            }
            s += n;
        }
        check_return();
        if (op == PYB_KP_OP_START && T.call_failures)
            result = PYB_KP_ALLOC_FAILED;
        if (op == PYB_KP_OP_START) {
            if (wp) {
                wp_put(inst, wp);
                wp = NULL;
            }
            __atomic_fetch_add(&inst->w_started, 1, __ATOMIC_RELAXED);
            __atomic_fetch_add(handoff_slot(off, len), 1, __ATOMIC_RELEASE);
        }
        if (op == PYB_KP_OP_END)
            __atomic_fetch_add(&inst->w_end_done, 1, __ATOMIC_SEQ_CST);
    } else {
        __atomic_store_n(&inst->broken, 1, __ATOMIC_RELEASE);
        result = code;
    }
    leave(&saved);
    __atomic_fetch_sub(&inst->ops_running, 1, __ATOMIC_RELAXED);
    free(wp);                         /* an end's areas, or an escaped start's */
    if (code == 0)
        rcu_poll(inst, 0);            /* out of the operation's context: callbacks are soft-irq work */
    return result;
}

/* The next context of the module's rotation over `mask` (see pyb_kp_config.end_contexts). */
static int rotate(unsigned int mask)
{
    mask &= PYB_KP_END_ALL;
    if (!mask)
        return PYB_KP_END_HARDIRQ;
    uint64_t n = __atomic_fetch_add(&end_seq, 1, __ATOMIC_RELAXED) % (uint64_t)__builtin_popcount(mask);
    for (int c = 0; c < PYB_KP_END_CONTEXTS; c++)
        if ((mask & (1u << c)) && n-- == 0)
            return c;
    return PYB_KP_END_HARDIRQ;
}

static int kp_claim_end_context(pyb_kp_instance *inst)
{
    int c = rotate(inst->cfg.end_contexts);
    __atomic_store_n(&inst->claimed, c + 1, __ATOMIC_RELAXED);
    return c;
}

static void kp_end_counts(uint64_t out[PYB_KP_END_CONTEXTS])
{
    for (int c = 0; c < PYB_KP_END_CONTEXTS; c++)
        out[c] = __atomic_load_n(&end_counts[c], __ATOMIC_RELAXED);
}

static int kp_start(pyb_kp_instance *inst, uint64_t off, uint64_t len) { return run(inst, PYB_KP_OP_START, 0, off, len); }
static int kp_end(pyb_kp_instance *inst, uint64_t off, uint64_t len)
{
    int c = __atomic_exchange_n(&inst->claimed, 0, __ATOMIC_RELAXED);
    return run(inst, PYB_KP_OP_END, c ? c - 1 : rotate(inst->cfg.end_contexts & ~(1u << PYB_KP_END_INLINE)), off, len);
}
static int kp_end_in(pyb_kp_instance *inst, uint64_t off, uint64_t len, int ctx)
{
    if (ctx < 0 || ctx >= PYB_KP_END_CONTEXTS)
        ctx = PYB_KP_END_HARDIRQ;
    return run(inst, PYB_KP_OP_END, ctx, off, len);
}
static int kp_is_active(pyb_kp_instance *inst, uint64_t off, uint64_t len) { return run(inst, PYB_KP_OP_CHECK, 0, off, len); }

/* Free every allocation still owned by inst; returns bytes and count through the pointers. */
static void free_all(pyb_kp_instance *inst, uint64_t *bytes, uint64_t *count)
{
    uint64_t b = 0, c = 0;
    pthread_mutex_lock(&inst->mu);
    while (inst->live.next != &inst->live) {
        struct kp_alloc *h = inst->live.next;
        b += h->size;
        c++;
        unlink_alloc(h);
        h->magic = KP_MAGIC_FREED;
        free(h);
    }
    pthread_mutex_unlock(&inst->mu);
    if (bytes)
        *bytes = b;
    if (count)
        *count = c;
}

/*
 * Return once every callback of inst queued at or before grace period `target` (UINT64_MAX: every
 * callback, including those queued by callbacks meanwhile) has run, here or on a concurrent poll of
 * inst (cb_running). Each round waits for a grace period, then runs what is ready; a reader that
 * published an old counter late can hold a callback back for a round. Bounded by the hung bound
 * (reported as a hung task) and interruptible, like synchronize_rcu. Returns how many ran here.
 */
static uint64_t rcu_barrier_until(pyb_kp_instance *inst, uint64_t target)
{
    struct kp_saved saved;
    jmp_buf jb;
    volatile uint64_t n = 0;
    enter(inst, PYB_KP_OP_NONE, 0, &saved, &jb);
    if (setjmp(jb) == 0) {
        uint64_t t0 = now_ns();
        for (;;) {
            pyb_kp_synchronize_rcu(__FILE__, __LINE__);
            n += rcu_poll(inst, 1);
            if (!barrier_pending(inst, target))
                break;
            if (now_ns() - t0 > hung_ns()) {
                report(PYB_KP_HUNG_TASK, __FILE__, __LINE__, NULL, NULL, 0, PYB_KP_SLEEP_SYNCHRONIZE_RCU);
                escape(PYB_KP_EHUNG);
            }
            if (interrupted())
                escape(PYB_KP_EINTR);
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
    }
    leave(&saved);
    return n;
}

/* rcu_barrier: every callback inst had queued when it was called. */
static uint64_t kp_rcu_barrier(pyb_kp_instance *inst)
{
    return rcu_barrier_until(inst, __atomic_load_n(&rcu_gp, __ATOMIC_SEQ_CST));
}

static void kp_destroy(pyb_kp_instance *inst, uint64_t *leaked_bytes, uint64_t *leaked_allocations)
{
    const struct pybcache_patch_ops *ops = pybcache_patch_ops_ptr;
    if (!__atomic_load_n(&inst->broken, __ATOMIC_ACQUIRE) && ops->exit) {
        struct kp_saved saved;
        jmp_buf jb;
        enter(inst, PYB_KP_OP_EXIT, 0, &saved, &jb);
        if (setjmp(jb) == 0) {
            ops->exit(&inst->dc);
            check_return();
        }
        leave(&saved);
    }
    rcu_barrier_until(inst, UINT64_MAX);   /* kfree_rcu from exit (or from a callback) reaches its kfree */
    /* Callbacks still queued (the barrier gave up at the hung bound) die with the instance: their
     * objects are the instance's and are freed, and counted, as leaks below. The caller guarantees
     * that no operation of inst is in flight, so no other thread holds one of its callbacks. */
    __atomic_fetch_sub(&cb_pending, inst->cb_queued, __ATOMIC_RELAXED);
    free_all(inst, leaked_bytes, leaked_allocations);
    if (inst->wp_table) {
        for (size_t i = 0; i < KP_WP_BUCKETS; i++) {
            for (struct kp_wpriv *w = inst->wp_table[i].head, *n; w; w = n) {
                n = w->next;
                free(w);
            }
        }
        free(inst->wp_table);
        pthread_mutex_destroy(&inst->wp_mu);
    }
    pthread_mutex_destroy(&inst->cb_mu);
    pthread_mutex_destroy(&inst->mu);
    free(inst->log);
    free(inst);
}

/* The patch's view of struct cached_dev (its size and alignment; PYBCACHE_PATCH exports them). */
extern const size_t pybcache_patch_dc_size __attribute__((weak));
extern const size_t pybcache_patch_dc_align __attribute__((weak));

/* A zeroed instance whose `dc` has room for the patch's struct cached_dev (aligned to 64, or NULL when the
 * patch's needs more). */
static noinline pyb_kp_instance *alloc_instance(void)
{
    size_t dc = &pybcache_patch_dc_size && pybcache_patch_dc_size > sizeof(struct cached_dev)
                    ? pybcache_patch_dc_size : sizeof(struct cached_dev);
    if (&pybcache_patch_dc_align && pybcache_patch_dc_align > 64)
        return NULL;
    size_t size = offsetof(pyb_kp_instance, dc) + dc;
    size = (size + 63) & ~(size_t)63;
    if (size < sizeof(pyb_kp_instance))
        size = sizeof(pyb_kp_instance);
    void *p = aligned_alloc(64, size);
    if (p) {
        memset(p, 0, size);
        SCHED_HOOK(PYB_KP_HOOK_ALLOCATED, p, size, NULL, 0);
    }
    return p;
}

static int kp_create(const pyb_kp_config *cfg, pyb_kp_instance **out, int *err)
{
    const struct pybcache_patch_ops *ops = pybcache_patch_ops_ptr;
    pyb_kp_instance *inst = alloc_instance();
    pyb_kp_log *log = calloc(KP_MAX_LOG, sizeof(*log));
    if (!inst || !log) {
        free(inst);
        free(log);
        return PYB_KP_ENOMEM;
    }
    inst->cfg = *cfg;
    if (!inst->cfg.hung_ns)
        inst->cfg.hung_ns = KP_DEFAULT_HUNG_NS;
    inst->log = log;
    pthread_mutex_init(&inst->mu, NULL);
    pthread_mutex_init(&inst->cb_mu, NULL);
    inst->cb_tail = &inst->cb_head;
    inst->live.next = inst->live.prev = &inst->live;
    if (ops->write_private_size) {
        inst->wp_table = calloc(KP_WP_BUCKETS, sizeof(*inst->wp_table));
        if (!inst->wp_table) {
            pthread_mutex_destroy(&inst->cb_mu);
            pthread_mutex_destroy(&inst->mu);
            free(inst);
            free(log);
            return PYB_KP_ENOMEM;
        }
        pthread_mutex_init(&inst->wp_mu, NULL);
    }
    inst->bdev.pyb_nr_sectors = (cfg->device_size + SECTOR_SIZE - 1) >> SECTOR_SHIFT;
    inst->dc.bdev = &inst->bdev;
    inst->dc.bypass = NULL;
    inst->dc.patch_private = NULL;
    inst->disk.pyb_capacity = inst->bdev.pyb_nr_sectors - inst->dc.sb.data_offset;   /* data_offset 0 here */
    snprintf(inst->disk.disk_name, sizeof(inst->disk.disk_name), "bcache0");
    inst->dc.disk.disk = &inst->disk;
    snprintf(inst->dc.disk.name, sizeof(inst->dc.disk.name), "bcache0");
    inst->dc.sb.data_offset = 0;
    inst->dc.sb.block_size = 1;
    *err = 0;
    if (ops->init) {
        struct kp_saved saved;
        jmp_buf jb;
        volatile int rc = 0;
        enter(inst, PYB_KP_OP_INIT, 0, &saved, &jb);
        int code = setjmp(jb);
        if (code == 0) {
            *err = ops->init(&inst->dc);
            check_return();
        } else {
            rc = code;
        }
        leave(&saved);
        if (rc || *err) {
            /* keep the reports: the caller reads them before destroying */
            __atomic_store_n(&inst->broken, 1, __ATOMIC_RELEASE);
            *out = inst;
            return rc ? rc : PYB_KP_EINIT;
        }
    }
    *out = inst;
    return PYB_KP_OK;
}

static void kp_stats(pyb_kp_instance *inst, pyb_kp_stats *out)
{
    pthread_mutex_lock(&inst->mu);
    out->allocations = inst->allocations;
    out->frees = inst->frees;
    out->alloc_failures = inst->alloc_failures;
    out->nofail_allocations = inst->nofail;
    out->reports = inst->nreports;
    out->reports_dropped = inst->reports_dropped;
    out->log_records = inst->nlog;
    out->log_dropped = inst->log_dropped;
    pthread_mutex_unlock(&inst->mu);
    out->starts = __atomic_load_n(&inst->starts, __ATOMIC_RELAXED);
    out->ends = __atomic_load_n(&inst->ends, __ATOMIC_RELAXED);
    out->checks = __atomic_load_n(&inst->checks, __ATOMIC_RELAXED);
    out->warnings = __atomic_load_n(&inst->warnings, __ATOMIC_RELAXED);
    out->rcu_pending = __atomic_load_n(&cb_pending, __ATOMIC_RELAXED);
    out->waits = __atomic_load_n(&inst->waits, __ATOMIC_RELAXED);
    out->reserve_taken = __atomic_load_n(&inst->reserve_taken, __ATOMIC_RELAXED);
    out->mempool_waits = __atomic_load_n(&inst->mempool_waits, __ATOMIC_RELAXED);
    out->sleeping = __atomic_load_n(&inst->sleeping, __ATOMIC_SEQ_CST);
    uint64_t started = __atomic_load_n(&inst->w_started, __ATOMIC_RELAXED);
    uint64_t begun = __atomic_load_n(&inst->w_end_begun, __ATOMIC_RELAXED);
    out->writes_in_flight = started > begun ? started - begun : 0;
    out->write_ends = __atomic_load_n(&inst->w_end_done, __ATOMIC_SEQ_CST);
    out->settled_ends = __atomic_load_n(&inst->settled_ends, __ATOMIC_SEQ_CST);
    for (int c = 0; c < PYB_KP_END_CONTEXTS; c++)
        out->ends_in[c] = __atomic_load_n(&inst->ends_in[c], __ATOMIC_RELAXED);
}

static void kp_memory(pyb_kp_instance *inst, pyb_kp_memory *out)
{
    pthread_mutex_lock(&inst->mu);
    out->init_bytes = inst->init_bytes;
    out->op_bytes = inst->op_bytes;
    out->total_bytes = inst->init_bytes + inst->op_bytes;
    out->peak_bytes = inst->peak_bytes;
    out->op_allocations = inst->op_allocs;
    out->peak_op_allocations = inst->peak_op_allocs;
    pthread_mutex_unlock(&inst->mu);
}

static size_t kp_reports(pyb_kp_instance *inst, size_t from, pyb_kp_report *out, size_t n)
{
    pthread_mutex_lock(&inst->mu);
    size_t total = inst->nreports;
    for (size_t i = 0; i < n && from + i < total; i++)
        out[i] = inst->reports[from + i];
    pthread_mutex_unlock(&inst->mu);
    return total;
}

static size_t kp_log(pyb_kp_instance *inst, size_t from, pyb_kp_log *out, size_t n)
{
    pthread_mutex_lock(&inst->mu);
    size_t total = inst->nlog;
    for (size_t i = 0; i < n && from + i < total; i++)
        out[i] = inst->log[from + i];
    pthread_mutex_unlock(&inst->mu);
    return total;
}

static pyb_kp_module module = {
    .abi = PYB_KP_ABI,
    .create = kp_create,
    .destroy = kp_destroy,
    .start = kp_start,
    .end = kp_end,
    .is_active = kp_is_active,
    .stats = kp_stats,
    .memory = kp_memory,
    .reports = kp_reports,
    .log = kp_log,
    .rcu_barrier = kp_rcu_barrier,
    .end_in = kp_end_in,
    .claim_end_context = kp_claim_end_context,
    .end_counts = kp_end_counts,
};

__attribute__((visibility("default"))) const pyb_kp_module *pybcache_kpatch_module(void)
{
    const struct pybcache_patch_ops *ops = pybcache_patch_ops_ptr;
    module.name = ops->name;
    module.bypass_granularity = ops->bypass_granularity;
    if (!ops->name)
        module.missing_op = "name";
    else if (!ops->write_start)
        module.missing_op = "write_start";
    else if (!ops->write_end)
        module.missing_op = "write_end";
    else if (!ops->read_bypass)
        module.missing_op = "read_bypass";
    return &module;
}

/* The second API group (pybcache/kpatch_ext.h): its runtime shares this file's state and helpers. */
#include "kpatch_rt_ext.c"
