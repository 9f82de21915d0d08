/*
 * pybcache/kpatch_ext.h - the shim's second group of kernel APIs (included by pybcache/kpatch.h; never
 * include it alone). Each name keeps its Linux 6.12 semantics; where userspace differs the comment says
 * how, and docs/check-patch.md ("What the shim models") cites the kernel's file:line for each.
 *
 * Time. A sleep with a timeout (wait_event_timeout, schedule_timeout, io_schedule_timeout, the rounds of
 * mempool_alloc) is compressed by the same ratio as the hung-task bound: the kernel's detector fires at
 * 120 s (CONFIG_DEFAULT_HUNG_TASK_TIMEOUT), the tracker's at its hung_timeout (5-10 s), so a timeout of
 * t jiffies sleeps t * hung_timeout / 120 s of real time. A timeout shorter than the kernel's hung bound
 * therefore still ends before the lab's. `jiffies` itself is not compressed (it is real milliseconds):
 * a patch that compares jiffies around such a sleep sees less time pass than it asked for.
 *
 * CPUs. PYB_KP_NR_CPUS simulated CPUs. A thread takes the lowest free CPU number the first time it asks
 * for one (smp_processor_id, get_cpu, this_cpu_*) and gives it back when it exits, so while at most
 * PYB_KP_NR_CPUS threads run patch code each has a CPU of its own and per-CPU data is never shared
 * between two threads (as between two tasks on one CPU). A thread beyond that shares a CPU number with
 * another (counted; the per-CPU data is then not exclusive, an approximation). A simulated interrupt
 * (write_end) runs on its completion thread's CPU, never on a submitter's.
 */
#ifndef PYBCACHE_KPATCH_EXT_H
#define PYBCACHE_KPATCH_EXT_H

/* Report kinds and sleepers of this group (= enum pyb_kp_report_kind / pyb_kp_sleeper in kpatch_abi.h). */
#define PYB_KP_SLEEP_MUTEX_ 4
#define PYB_KP_SLEEP_MEMPOOL_ 5
#define PYB_KP_SLEEP_WAIT_TIMEOUT_ 6
#define PYB_KP_SLEEP_SCHEDULE_ 7

/* ---------------------------------------------------------------------------------------------- */
/* irqflags.h, preempt.h, bottom_half.h, hardirq.h: the simulated context, read and changed          */

void pyb_kp_local_irq(int op, unsigned long *flags, const char *file, int line);
void pyb_kp_preempt(int delta, const char *file, int line);
void pyb_kp_local_bh(int delta, const char *file, int line);
int pyb_kp_context(int what);
#define PYB_KP_CTX_HARDIRQ 0
#define PYB_KP_CTX_SOFTIRQ 1       /* serving a soft-irq, or bottom halves disabled (as in_softirq()) */
#define PYB_KP_CTX_SERVING_SOFTIRQ 2
#define PYB_KP_CTX_IRQS_OFF 3
#define PYB_KP_CTX_ATOMIC 4        /* preempt count non-zero: locks, preempt/bh disabled, irq, RCU reader */
/* local_irq_* and irqs_disabled/in_hardirq/in_irq/in_serving_softirq are kpatch.h's (pyb_kp_irq: lockdep's
 * marks on enabling, the hard-irq rule, RCU readers); the three below count bottom halves disabled as soft-irq
 * context, as the kernel's softirq_count() does. */
#undef in_softirq
#undef in_interrupt
#undef in_task
#define in_softirq() (pyb_kp_context(PYB_KP_CTX_SOFTIRQ) != 0)
#define in_interrupt() (in_hardirq() || in_softirq())
#define in_task() (!in_hardirq() && !in_serving_softirq())
#define in_atomic() (pyb_kp_context(PYB_KP_CTX_ATOMIC) != 0)
#define preemptible() (!in_atomic() && !irqs_disabled())
#define preempt_disable() pyb_kp_preempt(1, __FILE__, __LINE__)
#define preempt_enable() pyb_kp_preempt(-1, __FILE__, __LINE__)
#define preempt_enable_no_resched() preempt_enable()
#define preempt_disable_notrace() preempt_disable()
#define preempt_enable_notrace() preempt_enable()
#define migrate_disable() preempt_disable()   /* approximated: also makes the context atomic */
#define migrate_enable() preempt_enable()
#define local_bh_disable() pyb_kp_local_bh(1, __FILE__, __LINE__)
#define local_bh_enable() pyb_kp_local_bh(-1, __FILE__, __LINE__)

/* spin_lock_bh: bottom halves disabled, then the lock (interrupts stay enabled: a HARDIRQ-ON usage). */
#define spin_lock_bh(l) do { local_bh_disable(); spin_lock(l); } while (0)
#define spin_unlock_bh(l) do { spin_unlock(l); local_bh_enable(); } while (0)
#define spin_trylock_bh(l) ({ local_bh_disable(); int _ok_ = spin_trylock(l); if (!_ok_) local_bh_enable(); _ok_; })
#define spin_trylock_irq(l) ({ local_irq_disable(); int _ok_ = spin_trylock(l); if (!_ok_) local_irq_enable(); _ok_; })

/* ---------------------------------------------------------------------------------------------- */
/* sched.h, wait.h: task states, schedule_timeout, prepare_to_wait, wait_event_timeout              */

#define TASK_RUNNING 0x0000
#define TASK_INTERRUPTIBLE 0x0001
#define TASK_UNINTERRUPTIBLE 0x0002
#define TASK_KILLABLE (TASK_UNINTERRUPTIBLE | 0x0100)
#define TASK_IDLE (TASK_UNINTERRUPTIBLE | 0x0400)
#define MAX_SCHEDULE_TIMEOUT LONG_MAX
/* A wait entry: which queue the task is prepared on and the wake sequence it sampled there. */
struct wait_queue_entry {
    wait_queue_head_t *wq;         /* set by prepare_to_wait, cleared by finish_wait (the waiting thread) */
    unsigned int seq;
};
typedef struct wait_queue_entry wait_queue_entry_t;
#define DEFINE_WAIT(name) struct wait_queue_entry name = { NULL, 0 }
#define init_wait(w) do { (w)->wq = NULL; (w)->seq = 0; } while (0)
void pyb_kp_set_state(int state);
void pyb_kp_prepare_to_wait(wait_queue_head_t *wq, struct wait_queue_entry *w, int state, const char *file, int line);
void pyb_kp_finish_wait(wait_queue_head_t *wq, struct wait_queue_entry *w);
long pyb_kp_schedule_timeout(long timeout, int sleeper, const char *file, int line);
#define set_current_state(s) pyb_kp_set_state(s)
#define __set_current_state(s) pyb_kp_set_state(s)
#define prepare_to_wait(wq, w, s) pyb_kp_prepare_to_wait((wq), (w), (s), __FILE__, __LINE__)
#define prepare_to_wait_exclusive(wq, w, s) prepare_to_wait(wq, w, s)   /* exclusive waits not modelled */
#define finish_wait(wq, w) pyb_kp_finish_wait((wq), (w))
#define schedule_timeout(t) pyb_kp_schedule_timeout((t), PYB_KP_SLEEP_SCHEDULE_, __FILE__, __LINE__)
#define io_schedule_timeout(t) schedule_timeout(t)
#define schedule() ((void)schedule_timeout(MAX_SCHEDULE_TIMEOUT))
#define io_schedule() schedule()
#define schedule_timeout_uninterruptible(t) ({ set_current_state(TASK_UNINTERRUPTIBLE); schedule_timeout(t); })
#define schedule_timeout_interruptible(t) ({ set_current_state(TASK_INTERRUPTIBLE); schedule_timeout(t); })
#define schedule_timeout_idle(t) ({ set_current_state(TASK_IDLE); schedule_timeout(t); })
#define msecs_to_jiffies(ms) ((unsigned long)(ms) * HZ / 1000)
#define jiffies_to_msecs(j) ((unsigned int)((j) * 1000 / HZ))
#define usecs_to_jiffies(us) DIV_ROUND_UP((unsigned long)(us), 1000000 / HZ)
#define time_after(a, b) ((long)((b) - (a)) < 0)
#define time_before(a, b) time_after(b, a)
#define time_after_eq(a, b) ((long)((a) - (b)) >= 0)
#define time_before_eq(a, b) time_after_eq(b, a)

/* wait_event_timeout(wq, cond, timeout): as wait_event, for at most `timeout` jiffies (compressed, see
 * the top). Returns 0 if cond is false when the timeout elapsed, 1 if it is true then, or the jiffies
 * left (at least 1) if it became true before. Bounded by the hung bound too. */
struct pyb_kp_timeout {
    unsigned long long t0, deadline;   /* CLOCK_MONOTONIC ns: start, end of the (compressed) timeout */
    long timeout;                      /* the jiffies asked for */
};
void pyb_kp_timeout_start(struct pyb_kp_timeout *to, long timeout);
long pyb_kp_timeout_left(const struct pyb_kp_timeout *to);
void pyb_kp_wait_sleep_timeout(wait_queue_head_t *wq, unsigned int seq, const struct pyb_kp_timeout *to,
                               int sleeper, const char *file, int line);
void pyb_kp_wait_enter_as(wait_queue_head_t *wq, int sleeper, const char *file, int line);
#define wait_event_timeout(wq, cond, timeout) ({                                                        \
    struct pyb_kp_timeout _to_;                                                                         \
    long _ret_;                                                                                         \
    pyb_kp_wait_enter_as(&(wq), PYB_KP_SLEEP_WAIT_TIMEOUT_, __FILE__, __LINE__);                        \
    pyb_kp_timeout_start(&_to_, (long)(timeout));                                                       \
    for (;;) {                                                                                          \
        unsigned int _seq_ = __atomic_load_n(&(wq).seq, __ATOMIC_SEQ_CST);                              \
        bool _c_ = (cond);                                                                              \
        _ret_ = pyb_kp_timeout_left(&_to_);                                                             \
        if (_c_) { if (!_ret_) _ret_ = 1; break; }                                                      \
        if (!_ret_) break;                                                                              \
        pyb_kp_wait_sleep_timeout(&(wq), _seq_, &_to_, PYB_KP_SLEEP_WAIT_TIMEOUT_, __FILE__, __LINE__); \
    }                                                                                                   \
    pyb_kp_wait_leave(&(wq));                                                                           \
    _ret_; })
#define io_wait_event_timeout(wq, cond, timeout) wait_event_timeout(wq, cond, timeout)

/* ---------------------------------------------------------------------------------------------- */
/* mm.h, gfp.h: pages. A struct page is opaque here: it stands for its page's memory (page_address and */
/* virt_to_page convert), allocated through the same fault injection and accounting as kmalloc.      */
/* Not modelled: the page's fields (refcount, private, lru, flags), highmem.                         */

struct page;
#define alloc_pages(gfp, order) ((struct page *)pyb_kp_alloc(PAGE_SIZE << (order), (gfp), 0, __FILE__, __LINE__))
#define alloc_page(gfp) alloc_pages(gfp, 0)
#define __free_pages(page, order) do { (void)(order); pyb_kp_free((const void *)(page), __FILE__, __LINE__); } while (0)
#define __free_page(page) __free_pages(page, 0)
#define __get_free_pages(gfp, order) ((unsigned long)alloc_pages(gfp, order))
#define free_pages(addr, order) __free_pages((struct page *)(addr), order)
static inline void *page_address(const struct page *page) { return (void *)page; }
#define lowmem_page_address(page) page_address(page)
#define virt_to_page(addr) ((struct page *)(addr))
#define kmap_local_page(page) page_address(page)
#define kunmap_local(addr) ((void)(addr))

/* slab.h: kmem caches. Objects are allocated like kmalloc (fault injection, accounting, poison); the   */
/* constructor runs on each object handed out (the kernel runs it when a slab page is filled: the same  */
/* bytes, fewer calls). kmem_cache_destroy with objects live warns as mm/slab_common.c does.            */
typedef unsigned int slab_flags_t;
#define SLAB_HWCACHE_ALIGN ((slab_flags_t)0x00002000u)
#define SLAB_PANIC ((slab_flags_t)0x00040000u)
#define SLAB_RECLAIM_ACCOUNT ((slab_flags_t)0x00020000u)
#define SLAB_ACCOUNT ((slab_flags_t)0x04000000u)
#define SLAB_TYPESAFE_BY_RCU ((slab_flags_t)0x00080000u)   /* accepted; not modelled (freed at once) */
struct kmem_cache {
    const char *name;
    size_t size;                   /* object size as asked */
    slab_flags_t flags;
    void (*ctor)(void *);
    long live;                     /* objects handed out and not freed (relaxed atomic RMWs) */
};
struct kmem_cache *pyb_kp_kmem_cache_create(const char *name, size_t size, size_t align, slab_flags_t flags,
                                            void (*ctor)(void *), const char *file, int line);
void *pyb_kp_kmem_cache_alloc(struct kmem_cache *c, gfp_t gfp, int zero, const char *file, int line);
void pyb_kp_kmem_cache_free(struct kmem_cache *c, void *p, const char *file, int line);
void pyb_kp_kmem_cache_destroy(struct kmem_cache *c, const char *file, int line);
#define kmem_cache_create(name, size, align, flags, ctor) \
    pyb_kp_kmem_cache_create((name), (size), (align), (flags), (ctor), __FILE__, __LINE__)
#define KMEM_CACHE(s, flags) kmem_cache_create(#s, sizeof(struct s), __alignof__(struct s), (flags), NULL)
#define kmem_cache_alloc(c, gfp) pyb_kp_kmem_cache_alloc((c), (gfp), 0, __FILE__, __LINE__)
#define kmem_cache_zalloc(c, gfp) pyb_kp_kmem_cache_alloc((c), (gfp), 1, __FILE__, __LINE__)
#define kmem_cache_free(c, p) pyb_kp_kmem_cache_free((c), (p), __FILE__, __LINE__)
#define kmem_cache_destroy(c) pyb_kp_kmem_cache_destroy((c), __FILE__, __LINE__)

/* ---------------------------------------------------------------------------------------------- */
/* mempool.h: mm/mempool.c's algorithm (see pybcache/kpatch_rt_ext.c). The pool's lock is a shim      */
/* spinlock (one lockdep class for every pool, taken with interrupts saved as the kernel does), its   */
/* wait queue the shim's, its elements' allocations the pool's alloc function through the shim.      */

typedef void *(mempool_alloc_t)(gfp_t gfp_mask, void *pool_data);
typedef void (mempool_free_t)(void *element, void *pool_data);
typedef struct mempool_s {
    spinlock_t lock;               /* guards curr_nr (also read unlocked, READ_ONCE) and elements */
    int min_nr;                    /* the reserve's size: written at init */
    int curr_nr;                   /* elements in the reserve now */
    void **elements;
    void *pool_data;
    mempool_alloc_t *alloc;
    mempool_free_t *free;
    wait_queue_head_t wait;        /* allocators waiting for an element */
} mempool_t;
int mempool_init(mempool_t *pool, int min_nr, mempool_alloc_t *alloc_fn, mempool_free_t *free_fn, void *pool_data);
void mempool_exit(mempool_t *pool);
mempool_t *mempool_create(int min_nr, mempool_alloc_t *alloc_fn, mempool_free_t *free_fn, void *pool_data);
void mempool_destroy(mempool_t *pool);
void *pyb_kp_mempool_alloc(mempool_t *pool, gfp_t gfp, const char *file, int line);
void *mempool_alloc_preallocated(mempool_t *pool);
void mempool_free(void *element, mempool_t *pool);
static inline bool mempool_initialized(mempool_t *pool) { return pool->elements != NULL; }
#define mempool_alloc(pool, gfp) pyb_kp_mempool_alloc((pool), (gfp), __FILE__, __LINE__)
void *mempool_kmalloc(gfp_t gfp_mask, void *pool_data);
void mempool_kfree(void *element, void *pool_data);
void *mempool_alloc_slab(gfp_t gfp_mask, void *pool_data);
void mempool_free_slab(void *element, void *pool_data);
void *mempool_alloc_pages(gfp_t gfp_mask, void *pool_data);
void mempool_free_pages(void *element, void *pool_data);
#define mempool_kvmalloc mempool_kmalloc
#define mempool_kvfree mempool_kfree
#define mempool_create_kmalloc_pool(min_nr, size) \
    mempool_create((min_nr), mempool_kmalloc, mempool_kfree, (void *)(size_t)(size))
#define mempool_init_kmalloc_pool(pool, min_nr, size) \
    mempool_init((pool), (min_nr), mempool_kmalloc, mempool_kfree, (void *)(size_t)(size))
#define mempool_create_slab_pool(min_nr, cache) \
    mempool_create((min_nr), mempool_alloc_slab, mempool_free_slab, (void *)(cache))
#define mempool_init_slab_pool(pool, min_nr, cache) \
    mempool_init((pool), (min_nr), mempool_alloc_slab, mempool_free_slab, (void *)(cache))
#define mempool_create_page_pool(min_nr, order) \
    mempool_create((min_nr), mempool_alloc_pages, mempool_free_pages, (void *)(long)(order))
#define mempool_init_page_pool(pool, min_nr, order) \
    mempool_init((pool), (min_nr), mempool_alloc_pages, mempool_free_pages, (void *)(long)(order))

/* ---------------------------------------------------------------------------------------------- */
/* mutex.h: a sleeping lock. mutex_lock might sleep (reported in atomic context), waits through the   */
/* shim's wait queue (bounded by the hung bound, interruptible), and may be released only by its     */
/* owner. Not modelled: optimistic spinning, handoff, mutex_lock_interruptible's signal (it never    */
/* returns -EINTR here), lockdep ordering between mutexes.                                           */

struct mutex {
    unsigned int locked;           /* 0 / 1: CAS acquire to take, release store to give back */
    void *owner;                   /* the holder's shim context (relaxed atomic; written by the holder) */
    const char *name;
    wait_queue_head_t wq;          /* threads waiting for it */
};
#define __MUTEX_INITIALIZER(lockname) { 0, NULL, #lockname, { 0, 0 } }
#define DEFINE_MUTEX(m) struct mutex m = __MUTEX_INITIALIZER(m)
void pyb_kp_mutex_init(struct mutex *m, const char *name);
void pyb_kp_mutex_lock(struct mutex *m, const char *file, int line);
int pyb_kp_mutex_trylock(struct mutex *m, const char *file, int line);
void pyb_kp_mutex_unlock(struct mutex *m, const char *file, int line);
#define mutex_init(m) pyb_kp_mutex_init((m), #m)
#define mutex_destroy(m) ((void)(m))
#define mutex_lock(m) pyb_kp_mutex_lock((m), __FILE__, __LINE__)
#define mutex_lock_io(m) mutex_lock(m)
#define mutex_lock_nested(m, sub) mutex_lock(m)
#define mutex_lock_interruptible(m) ({ mutex_lock(m); 0; })
#define mutex_lock_killable(m) ({ mutex_lock(m); 0; })
#define mutex_trylock(m) pyb_kp_mutex_trylock((m), __FILE__, __LINE__)
#define mutex_unlock(m) pyb_kp_mutex_unlock((m), __FILE__, __LINE__)
#define mutex_is_locked(m) (__atomic_load_n(&(m)->locked, __ATOMIC_RELAXED) != 0)

/* ---------------------------------------------------------------------------------------------- */
/* rwlock.h: a spinning reader-writer lock (readers share, a writer excludes all). Holding it is       */
/* atomic context; the _irq/_irqsave/_bh forms change interrupts / bottom halves as spin_lock's do.     */
/* lockdep's hard-irq rule with read usages: a class read in hard-irq and written with interrupts on,  */
/* or written in hard-irq and read or written with interrupts on, is inconsistent; read in both is     */
/* not (recursive readers). Readers are preferred over a waiting writer (the kernel's queued rwlock   */
/* is fair outside interrupts: an approximation).                                                     */

typedef struct rwlock {
    int cnt;                       /* readers holding it, or -1 for a writer: CAS acquire, RMW release */
    void *owner;                   /* the writer's shim context (relaxed atomic) */
    const char *name;
    struct pyb_kp_lock_class *cls; /* NULL: `own` */
    struct pyb_kp_lock_class own;
} rwlock_t;
#define __RW_LOCK_UNLOCKED(lockname) { 0, NULL, #lockname, NULL, { 0 } }
#define DEFINE_RWLOCK(x) rwlock_t x = __RW_LOCK_UNLOCKED(x)
void pyb_kp_rwlock_init(rwlock_t *l, const char *name, struct pyb_kp_lock_class *cls);
void pyb_kp_rw_lock(rwlock_t *l, int write, int irq_mode, unsigned long *flags, const char *file, int line);
int pyb_kp_rw_trylock(rwlock_t *l, int write, const char *file, int line);
void pyb_kp_rw_unlock(rwlock_t *l, int write, int irq_mode, unsigned long flags, const char *file, int line);
#define rwlock_init(l) do { static struct pyb_kp_lock_class _key_; pyb_kp_rwlock_init((l), #l, &_key_); } while (0)
#define read_lock(l) pyb_kp_rw_lock((l), 0, PYB_KP_IRQ_NONE, NULL, __FILE__, __LINE__)
#define read_unlock(l) pyb_kp_rw_unlock((l), 0, PYB_KP_IRQ_NONE, 0, __FILE__, __LINE__)
#define write_lock(l) pyb_kp_rw_lock((l), 1, PYB_KP_IRQ_NONE, NULL, __FILE__, __LINE__)
#define write_unlock(l) pyb_kp_rw_unlock((l), 1, PYB_KP_IRQ_NONE, 0, __FILE__, __LINE__)
#define read_lock_irq(l) pyb_kp_rw_lock((l), 0, PYB_KP_IRQ_DISABLE, NULL, __FILE__, __LINE__)
#define read_unlock_irq(l) pyb_kp_rw_unlock((l), 0, PYB_KP_IRQ_DISABLE, 0, __FILE__, __LINE__)
#define write_lock_irq(l) pyb_kp_rw_lock((l), 1, PYB_KP_IRQ_DISABLE, NULL, __FILE__, __LINE__)
#define write_unlock_irq(l) pyb_kp_rw_unlock((l), 1, PYB_KP_IRQ_DISABLE, 0, __FILE__, __LINE__)
#define read_lock_irqsave(l, flags) pyb_kp_rw_lock((l), 0, PYB_KP_IRQ_SAVE, &(flags), __FILE__, __LINE__)
#define read_unlock_irqrestore(l, flags) pyb_kp_rw_unlock((l), 0, PYB_KP_IRQ_SAVE, (flags), __FILE__, __LINE__)
#define write_lock_irqsave(l, flags) pyb_kp_rw_lock((l), 1, PYB_KP_IRQ_SAVE, &(flags), __FILE__, __LINE__)
#define write_unlock_irqrestore(l, flags) pyb_kp_rw_unlock((l), 1, PYB_KP_IRQ_SAVE, (flags), __FILE__, __LINE__)
#define read_lock_bh(l) do { local_bh_disable(); read_lock(l); } while (0)
#define read_unlock_bh(l) do { read_unlock(l); local_bh_enable(); } while (0)
#define write_lock_bh(l) do { local_bh_disable(); write_lock(l); } while (0)
#define write_unlock_bh(l) do { write_unlock(l); local_bh_enable(); } while (0)
#define read_trylock(l) pyb_kp_rw_trylock((l), 0, __FILE__, __LINE__)
#define write_trylock(l) pyb_kp_rw_trylock((l), 1, __FILE__, __LINE__)

/* ---------------------------------------------------------------------------------------------- */
/* seqlock.h: sequence counters. A reader spins while the count is odd (bounded by the hung bound,     */
/* reported as a lockup), then reads; read_seqretry says whether a writer ran meanwhile. The orderings */
/* are the kernel's: smp_rmb after read_seqcount_begin and before the retry's re-read, smp_wmb after  */
/* the writer's first increment and before its second. A seqcount_t writer must have preemption      */
/* disabled (lockdep_assert_preemption_disabled: a WARNING here otherwise); seqlock_t's writer takes  */
/* its spinlock, which disables it.                                                                    */

typedef struct seqcount { unsigned int sequence; } seqcount_t;   /* atomic loads and stores */
typedef struct {
    seqcount_t seqcount;
    spinlock_t lock;
} seqlock_t;
#define SEQCNT_ZERO(name) { 0 }
#define seqcount_init(s) do { (s)->sequence = 0; } while (0)
unsigned int pyb_kp_read_seqcount_begin(const seqcount_t *s, const char *name, const char *file, int line);
void pyb_kp_write_seqcount(seqcount_t *s, int begin, int check, const char *file, int line);
static inline int read_seqcount_retry(const seqcount_t *s, unsigned int start)
{
#ifdef __SANITIZE_THREAD__
    /* ThreadSanitizer ignores fences (and gcc warns of them): a seq_cst load, as close as it models */
    return __atomic_load_n(&s->sequence, __ATOMIC_SEQ_CST) != start;
#else
    __atomic_thread_fence(__ATOMIC_ACQUIRE);   /* smp_rmb: the reads before it, then the count */
    return __atomic_load_n(&s->sequence, __ATOMIC_RELAXED) != start;
#endif
}
#define read_seqcount_begin(s) pyb_kp_read_seqcount_begin((s), #s, __FILE__, __LINE__)
#define raw_read_seqcount_begin(s) read_seqcount_begin(s)
#define write_seqcount_begin(s) pyb_kp_write_seqcount((s), 1, 1, __FILE__, __LINE__)
#define write_seqcount_end(s) pyb_kp_write_seqcount((s), 0, 0, __FILE__, __LINE__)
#define raw_write_seqcount_begin(s) pyb_kp_write_seqcount((s), 1, 0, __FILE__, __LINE__)
#define raw_write_seqcount_end(s) pyb_kp_write_seqcount((s), 0, 0, __FILE__, __LINE__)
#define __SEQLOCK_UNLOCKED(lockname) { SEQCNT_ZERO(lockname), __SPIN_LOCK_UNLOCKED(lockname) }
#define DEFINE_SEQLOCK(x) seqlock_t x = __SEQLOCK_UNLOCKED(x); \
    __attribute__((constructor)) static void pyb_kp_init_##x(void) { pyb_kp_spin_init(&x.lock, #x, NULL); }
#define seqlock_init(sl) do { seqcount_init(&(sl)->seqcount); spin_lock_init(&(sl)->lock); } while (0)
#define read_seqbegin(sl) pyb_kp_read_seqcount_begin(&(sl)->seqcount, (sl)->lock.name, __FILE__, __LINE__)
#define read_seqretry(sl, start) read_seqcount_retry(&(sl)->seqcount, (start))
#define write_seqlock(sl) do { spin_lock(&(sl)->lock); pyb_kp_write_seqcount(&(sl)->seqcount, 1, 0, __FILE__, __LINE__); } while (0)
#define write_sequnlock(sl) do { pyb_kp_write_seqcount(&(sl)->seqcount, 0, 0, __FILE__, __LINE__); spin_unlock(&(sl)->lock); } while (0)
#define write_seqlock_irq(sl) do { spin_lock_irq(&(sl)->lock); pyb_kp_write_seqcount(&(sl)->seqcount, 1, 0, __FILE__, __LINE__); } while (0)
#define write_sequnlock_irq(sl) do { pyb_kp_write_seqcount(&(sl)->seqcount, 0, 0, __FILE__, __LINE__); spin_unlock_irq(&(sl)->lock); } while (0)
#define write_seqlock_irqsave(sl, flags) do { spin_lock_irqsave(&(sl)->lock, flags); \
    pyb_kp_write_seqcount(&(sl)->seqcount, 1, 0, __FILE__, __LINE__); } while (0)
#define write_sequnlock_irqrestore(sl, flags) do { pyb_kp_write_seqcount(&(sl)->seqcount, 0, 0, __FILE__, __LINE__); \
    spin_unlock_irqrestore(&(sl)->lock, flags); } while (0)
#define write_seqlock_bh(sl) do { spin_lock_bh(&(sl)->lock); pyb_kp_write_seqcount(&(sl)->seqcount, 1, 0, __FILE__, __LINE__); } while (0)
#define write_sequnlock_bh(sl) do { pyb_kp_write_seqcount(&(sl)->seqcount, 0, 0, __FILE__, __LINE__); spin_unlock_bh(&(sl)->lock); } while (0)

/* ---------------------------------------------------------------------------------------------- */
/* percpu.h, smp.h: per-CPU data over PYB_KP_NR_CPUS simulated CPUs (see the top). DEFINE_PER_CPU puts  */
/* the variable in a template section, copied once per CPU when first used (as the kernel's             */
/* .data..percpu); alloc_percpu allocates one copy per CPU through the shim. smp_processor_id,         */
/* this_cpu_ptr and the __this_cpu_* operations in preemptible context are reported as               */
/* CONFIG_DEBUG_PREEMPT does; this_cpu_* operations are safe anywhere (relaxed atomics here).           */

#define PYB_KP_NR_CPUS 8
#define NR_CPUS PYB_KP_NR_CPUS
#define nr_cpu_ids ((unsigned int)PYB_KP_NR_CPUS)
#define num_possible_cpus() ((unsigned int)PYB_KP_NR_CPUS)
#define num_online_cpus() ((unsigned int)PYB_KP_NR_CPUS)
#define for_each_possible_cpu(cpu) for ((cpu) = 0; (cpu) < PYB_KP_NR_CPUS; (cpu)++)
#define for_each_online_cpu(cpu) for_each_possible_cpu(cpu)
#define for_each_present_cpu(cpu) for_each_possible_cpu(cpu)
#define PYB_KP_PERCPU_SECTION "pyb_kp_percpu"
#define DEFINE_PER_CPU(type, name) \
    __attribute__((section(PYB_KP_PERCPU_SECTION), aligned(64), used)) __typeof__(type) name
#define DECLARE_PER_CPU(type, name) extern __typeof__(type) name
#define DEFINE_PER_CPU_ALIGNED(type, name) DEFINE_PER_CPU(type, name)
#define DEFINE_PER_CPU_SHARED_ALIGNED(type, name) DEFINE_PER_CPU(type, name)
void *pyb_kp_per_cpu_ptr(const void *ptr, int cpu, const char *file, int line);
int pyb_kp_cpu(int check, const char *what, const char *file, int line);
void *pyb_kp_alloc_percpu(size_t size, size_t align, gfp_t gfp, const char *file, int line);
void pyb_kp_free_percpu(void *ptr, const char *file, int line);
#define per_cpu_ptr(ptr, cpu) ((__typeof__(ptr))pyb_kp_per_cpu_ptr((ptr), (cpu), __FILE__, __LINE__))
#define per_cpu(var, cpu) (*per_cpu_ptr(&(var), (cpu)))
#define smp_processor_id() pyb_kp_cpu(1, "smp_processor_id", __FILE__, __LINE__)
#define raw_smp_processor_id() pyb_kp_cpu(0, NULL, __FILE__, __LINE__)
#define get_cpu() ({ preempt_disable(); smp_processor_id(); })
#define put_cpu() preempt_enable()
#define this_cpu_ptr(ptr) per_cpu_ptr((ptr), pyb_kp_cpu(1, "smp_processor_id", __FILE__, __LINE__))
#define raw_cpu_ptr(ptr) per_cpu_ptr((ptr), raw_smp_processor_id())
#define pyb_kp_this_cpu(pcp) (per_cpu_ptr(&(pcp), raw_smp_processor_id()))
#define pyb_kp_this_cpu_checked(pcp, op) (per_cpu_ptr(&(pcp), pyb_kp_cpu(2, op, __FILE__, __LINE__)))
#define this_cpu_read(pcp) __atomic_load_n(pyb_kp_this_cpu(pcp), __ATOMIC_RELAXED)
#define this_cpu_write(pcp, v) __atomic_store_n(pyb_kp_this_cpu(pcp), (v), __ATOMIC_RELAXED)
#define this_cpu_add(pcp, v) ((void)__atomic_fetch_add(pyb_kp_this_cpu(pcp), (v), __ATOMIC_RELAXED))
#define this_cpu_sub(pcp, v) ((void)__atomic_fetch_sub(pyb_kp_this_cpu(pcp), (v), __ATOMIC_RELAXED))
#define this_cpu_inc(pcp) this_cpu_add(pcp, 1)
#define this_cpu_dec(pcp) this_cpu_sub(pcp, 1)
#define this_cpu_add_return(pcp, v) __atomic_add_fetch(pyb_kp_this_cpu(pcp), (v), __ATOMIC_RELAXED)
#define this_cpu_inc_return(pcp) this_cpu_add_return(pcp, 1)
#define this_cpu_dec_return(pcp) this_cpu_add_return(pcp, -1)
#define this_cpu_xchg(pcp, v) __atomic_exchange_n(pyb_kp_this_cpu(pcp), (v), __ATOMIC_RELAXED)
#define __this_cpu_read(pcp) __atomic_load_n(pyb_kp_this_cpu_checked(pcp, "read"), __ATOMIC_RELAXED)
#define __this_cpu_write(pcp, v) __atomic_store_n(pyb_kp_this_cpu_checked(pcp, "write"), (v), __ATOMIC_RELAXED)
#define __this_cpu_add(pcp, v) ((void)__atomic_fetch_add(pyb_kp_this_cpu_checked(pcp, "add"), (v), __ATOMIC_RELAXED))
#define __this_cpu_sub(pcp, v) ((void)__atomic_fetch_sub(pyb_kp_this_cpu_checked(pcp, "sub"), (v), __ATOMIC_RELAXED))
#define __this_cpu_inc(pcp) __this_cpu_add(pcp, 1)
#define __this_cpu_dec(pcp) __this_cpu_sub(pcp, 1)
#define raw_cpu_read(pcp) __atomic_load_n(pyb_kp_this_cpu(pcp), __ATOMIC_RELAXED)
#define raw_cpu_write(pcp, v) __atomic_store_n(pyb_kp_this_cpu(pcp), (v), __ATOMIC_RELAXED)
#define raw_cpu_add(pcp, v) ((void)__atomic_fetch_add(pyb_kp_this_cpu(pcp), (v), __ATOMIC_RELAXED))
#define raw_cpu_inc(pcp) raw_cpu_add(pcp, 1)
#define alloc_percpu(type) ((__typeof__(type) *)pyb_kp_alloc_percpu(sizeof(type), __alignof__(type), GFP_KERNEL, __FILE__, __LINE__))
#define alloc_percpu_gfp(type, gfp) ((__typeof__(type) *)pyb_kp_alloc_percpu(sizeof(type), __alignof__(type), (gfp), __FILE__, __LINE__))
#define __alloc_percpu(size, align) pyb_kp_alloc_percpu((size), (align), GFP_KERNEL, __FILE__, __LINE__)
#define free_percpu(ptr) pyb_kp_free_percpu((ptr), __FILE__, __LINE__)

#endif /* PYBCACHE_KPATCH_EXT_H */
