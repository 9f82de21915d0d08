// SPDX-License-Identifier: GPL-2.0-only
/*
 * kpatch_rt_ext.c - the runtime of the shim's second API group (pybcache/kpatch_ext.h): the simulated
 * context's preempt and bottom-half counts, task states and timed sleeps, pages and kmem caches,
 * mempools, mutexes, rwlocks, sequence counters and per-CPU data.
 *
 * Not a translation unit of its own: kpatch_rt.c includes it at its end, so that it shares the runtime's
 * per-thread context (T, and TX for this group), its reports, its escape and its wait primitives. The
 * algorithms follow Linux 6.12's (cited in docs/check-patch.md); the code is written for the shim.
 *
 * State and its protection.
 *   - TX (thread-local, see kpatch_rt.c): this thread's preempt and bottom-half depths, task state, the
 *     rwlocks and mutexes it holds, its simulated CPU.
 *   - mutex: `locked` CAS/release, `owner` relaxed (written by the holder), `wq` as any wait queue.
 *   - rwlock: `cnt` CAS acquire / RMW release, `owner` relaxed (written by the writer); lock class usage
 *     as the spinlocks' (atomic fetch_or, reported once by exchange).
 *   - mempool: `lock` (a shim spinlock, interrupts saved) guards curr_nr and elements; curr_nr is also
 *     read unlocked (relaxed atomic), as mempool_free does.
 *   - per-CPU: `cpu_mu` guards the CPU slots; the static per-CPU areas are built once (pthread_once).
 *   - kmem_cache: `live` relaxed atomic RMWs.
 */

/* ---- the context: preempt, bottom halves, interrupts ------------------------------------------------- */

#define KP_HUNG_KERNEL_NS 120000000000ull   /* CONFIG_DEFAULT_HUNG_TASK_TIMEOUT: the ratio of compressed time */

static void push_xheld(void *lock, const char *name, int kind, const char *file, int line)
{
    if (TX.nx < KP_MAX_HELD)
        TX.held[TX.nx] = (struct kp_xheld){lock, name, file, line, kind};
    TX.nx++;
    if (kind == KP_X_MUTEX)
        TX.nmutex++;
    else
        TX.nrw++;
    reader_sync();                     /* an rwlock held is an RCU reader (preemption off) */
}

static int pop_xheld(void *lock, int kind)
{
    int n = TX.nx < KP_MAX_HELD ? TX.nx : KP_MAX_HELD;
    for (int i = n - 1; i >= 0; i--) {
        if (TX.held[i].lock == lock && TX.held[i].kind == kind) {
            memmove(&TX.held[i], &TX.held[i + 1], (size_t)(n - i - 1) * sizeof(TX.held[0]));
            TX.nx--;
            if (kind == KP_X_MUTEX)
                TX.nmutex--;
            else
                TX.nrw--;
            reader_sync();
            return 1;
        }
    }
    return 0;
}

int pyb_kp_context(int what)
{
    switch (what) {
    case PYB_KP_CTX_HARDIRQ: return T.hardirq;
    case PYB_KP_CTX_SOFTIRQ: return T.softirq || TX.bh;
    case PYB_KP_CTX_SERVING_SOFTIRQ: return T.softirq;
    case PYB_KP_CTX_IRQS_OFF: return T.irqs_off;
    default: return T.hardirq || T.softirq || TX.bh || TX.preempt || T.nheld || TX.nrw || T.rcu_depth;
    }
}

/* The second group's name for kpatch.h's pyb_kp_irq (kept for modules' direct calls). */
void pyb_kp_local_irq(int op, unsigned long *flags, const char *file, int line)
{
    pyb_kp_irq(op, flags, file, line);
}

void pyb_kp_preempt(int delta, const char *file, int line)
{
    if (delta > 0) {
        TX.preempt++;
    } else if (TX.preempt == 0) {
        pyb_kp_warn(file, line);       /* preempt count underflow (CONFIG_DEBUG_PREEMPT) */
    } else {
        TX.preempt--;
    }
    reader_sync();                     /* a preempt-disabled region is an RCU reader */
}

void pyb_kp_local_bh(int delta, const char *file, int line)
{
    if (delta > 0) {
        TX.bh++;
        reader_sync();                 /* a bh-disabled region is an RCU reader */
        return;
    }
    /* kernel/softirq.c __local_bh_enable_ip: a warning in hard-irq context or with interrupts disabled */
    if (T.hardirq || T.irqs_off || TX.bh == 0)
        pyb_kp_warn(file, line);
    if (TX.bh > 0)
        TX.bh--;
    /* lockdep_softirqs_on: the locks still held are now taken with soft-irqs enabled (SOFTIRQ-ON) */
    if (TX.bh == 0 && !T.irqs_off && softirqs_enabled()) {
        int n = T.nheld < KP_MAX_HELD ? T.nheld : KP_MAX_HELD;
        for (int i = 0; i < n; i++)
            mark_usage(T.held[i].lock, KP_USED_SOFTIRQ_ON, file, line);
    }
    reader_sync();
}

/* ---- the operation's end and escape (called from kpatch_rt.c) ------------------------------------- */

static void ext_release(void)
{
    int n = TX.nx < KP_MAX_HELD ? TX.nx : KP_MAX_HELD;
    for (int i = n - 1; i >= 0; i--) {
        struct kp_xheld *h = &TX.held[i];
        if (h->kind == KP_X_MUTEX) {
            struct mutex *m = h->lock;
            if (LOAD(&m->owner) == (void *)&T) {
                STORE(&m->owner, NULL);
                __atomic_store_n(&m->locked, 0, __ATOMIC_RELEASE);
                pyb_kp_wake_up(&m->wq);
            }
        } else if (h->kind == KP_X_RW_WRITE) {
            rwlock_t *l = h->lock;
            if (LOAD(&l->owner) == (void *)&T) {
                STORE(&l->owner, NULL);
                __atomic_store_n(&l->cnt, 0, __ATOMIC_RELEASE);
            }
        } else {
            rwlock_t *l = h->lock;
            if (__atomic_load_n(&l->cnt, __ATOMIC_RELAXED) > 0)
                __atomic_fetch_sub(&l->cnt, 1, __ATOMIC_RELEASE);
        }
    }
    memset(&TX.held, 0, sizeof(TX.held));
    TX.nx = TX.nrw = TX.nmutex = 0;
    reader_sync();
}

/* An operation escapes: what it held of this group is released (as its spinlocks are). */
static void ext_escape(void)
{
    ext_release();
    TX.preempt = TX.bh = 0;
    TX.state = TASK_RUNNING;
    TX.wait = NULL;
    reader_sync();
}

/* An operation returned: it must hold no rwlock or mutex and leave preemption and bottom halves enabled.
 * What it left is reported and forgotten (not released), as with spinlocks. */
static void ext_check_return(void)
{
    if (TX.nx || TX.preempt || TX.bh) {
        const struct kp_xheld *h = TX.nx ? &TX.held[0] : NULL;
        /* detail 3 a mutex held, 4 preemption disabled, 5 bottom halves disabled, 6 an rwlock held */
        int detail = h ? (h->kind == KP_X_MUTEX ? 3 : 6) : (TX.preempt ? 4 : 5);
        report(PYB_KP_LOCK_HELD_AT_RETURN, h ? h->file : NULL, h ? h->line : 0, h ? h->name : NULL, NULL, 0,
               detail);
    }
    memset(&TX.held, 0, sizeof(TX.held));
    TX.nx = TX.nrw = TX.nmutex = 0;
    TX.preempt = TX.bh = 0;
    TX.state = TASK_RUNNING;
    TX.wait = NULL;
    reader_sync();
}

/* ---- timed sleeps ----------------------------------------------------------------------------------- */

/* Real nanoseconds a sleep of `j` jiffies takes here (compressed by hung bound / the kernel's 120 s). */
static uint64_t jiffies_to_wait_ns(long j)
{
    if (j <= 0)
        return 0;
    if ((unsigned long)j >= (unsigned long)LONG_MAX / 2)
        return UINT64_MAX;
    long double ns = (long double)j * (1000000000.0L / HZ) * (long double)hung_ns() / (long double)KP_HUNG_KERNEL_NS;
    return ns >= 1.8e19L ? UINT64_MAX : (uint64_t)ns;
}

static long wait_ns_to_jiffies(uint64_t ns)
{
    long double j = (long double)ns * (long double)KP_HUNG_KERNEL_NS / (long double)hung_ns() / (1000000000.0L / HZ);
    long r = (long)j;
    return r < (long)j + 1 && (long double)r < j ? r + 1 : r;   /* rounded up */
}

void pyb_kp_timeout_start(struct pyb_kp_timeout *to, long timeout)
{
    uint64_t now = now_ns(), d = jiffies_to_wait_ns(timeout);
    to->t0 = now;
    to->timeout = timeout;
    to->deadline = d == UINT64_MAX ? UINT64_MAX : now + d;
}

long pyb_kp_timeout_left(const struct pyb_kp_timeout *to)
{
    if (to->deadline == UINT64_MAX)
        return to->timeout;
    uint64_t now = now_ns();
    if (now >= to->deadline)
        return 0;
    long left = wait_ns_to_jiffies(to->deadline - now);
    return left > to->timeout ? to->timeout : (left < 1 ? 1 : left);
}

/*
 * Sleep on wq until its sequence moves past `seq` or the deadline passes, 50 ms at most; the whole wait
 * (since t0) is bounded by the hung bound (reported, and the operation abandoned) and interruptible.
 * `registered`: the caller counted itself in wq->waiters (it is uncounted on escape).
 */
static void ext_sleep(wait_queue_head_t *wq, unsigned int seq, uint64_t t0, uint64_t deadline, int registered,
                      int sleeper, const char *file, int line)
{
    uint64_t now = now_ns();
    if (now - t0 > hung_ns()) {
        if (wq && registered)
            pyb_kp_wait_leave(wq);
        report(PYB_KP_HUNG_TASK, file, line, NULL, NULL, 0, sleeper);
        escape(PYB_KP_EHUNG);
    }
    if (interrupted()) {
        if (wq && registered)
            pyb_kp_wait_leave(wq);
        escape(PYB_KP_EINTR);
    }
    if (now >= deadline)
        return;
    uint64_t ns = deadline - now < KP_WAIT_SLICE_NS ? deadline - now : KP_WAIT_SLICE_NS;
    if (wq) {
        futex_wait(&wq->seq, seq, ns);
    } else {
        struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
        nanosleep(&ts, NULL);
    }
}

void pyb_kp_wait_enter_as(wait_queue_head_t *wq, int sleeper, const char *file, int line)
{
    pyb_kp_might_sleep(sleeper, file, line);
    __atomic_fetch_add(&wq->waiters, 1, __ATOMIC_SEQ_CST);
}

void pyb_kp_wait_sleep_timeout(wait_queue_head_t *wq, unsigned int seq, const struct pyb_kp_timeout *to,
                               int sleeper, const char *file, int line)
{
    ext_sleep(wq, seq, to->t0, to->deadline, 1, sleeper, file, line);
}

void pyb_kp_set_state(int state) { TX.state = state; }

void pyb_kp_prepare_to_wait(wait_queue_head_t *wq, struct wait_queue_entry *w, int state, const char *file, int line)
{
    (void)file;
    (void)line;
    if (w->wq != wq) {
        if (w->wq)
            pyb_kp_wait_leave(w->wq);
        __atomic_fetch_add(&wq->waiters, 1, __ATOMIC_SEQ_CST);
        w->wq = wq;
    }
    w->seq = __atomic_load_n(&wq->seq, __ATOMIC_SEQ_CST);   /* after counting in: see pyb_kp_wait_sleep */
    TX.wait = w;
    TX.state = state;
}

void pyb_kp_finish_wait(wait_queue_head_t *wq, struct wait_queue_entry *w)
{
    (void)wq;
    TX.state = TASK_RUNNING;
    if (w->wq) {
        pyb_kp_wait_leave(w->wq);
        w->wq = NULL;
    }
    if (TX.wait == w)
        TX.wait = NULL;
}

/* The sleep of schedule_timeout: until the wait entry's queue is woken (if the task is prepared on one) or
 * the (compressed) timeout passes. Returns the jiffies left (0: timed out). The task is running after. */
static long ext_schedule(long timeout, int sleeper, const char *file, int line)
{
    if (TX.state == TASK_RUNNING) {       /* kernel/time/timer.c: a running task does not sleep at all */
        sched_yield();
        return timeout;
    }
    struct pyb_kp_timeout to;
    pyb_kp_timeout_start(&to, timeout);
    struct wait_queue_entry *w = TX.wait;
    for (;;) {
        if (w && w->wq && __atomic_load_n(&w->wq->seq, __ATOMIC_SEQ_CST) != w->seq)
            break;                         /* woken */
        if (now_ns() >= to.deadline)
            break;
        ext_sleep(w ? w->wq : NULL, w ? w->seq : 0, to.t0, to.deadline, w && w->wq, sleeper, file, line);
    }
    TX.state = TASK_RUNNING;
    return pyb_kp_timeout_left(&to);
}

long pyb_kp_schedule_timeout(long timeout, int sleeper, const char *file, int line)
{
    pyb_kp_might_sleep(sleeper, file, line);   /* "scheduling while atomic" in the kernel's words */
    if (timeout < 0) {
        pyb_kp_warn(file, line);               /* kernel/time/timer.c: a negative timeout is a caller bug */
        TX.state = TASK_RUNNING;
        return 0;
    }
    return ext_schedule(timeout, sleeper, file, line);
}

/* ---- kmem caches --------------------------------------------------------------------------------------- */

struct kmem_cache *pyb_kp_kmem_cache_create(const char *name, size_t size, size_t align, slab_flags_t flags,
                                            void (*ctor)(void *), const char *file, int line)
{
    (void)align;
    struct kmem_cache *c = pyb_kp_alloc(sizeof(*c), GFP_KERNEL, 1, file, line);
    if (!c)
        return NULL;
    c->name = name;
    c->size = size;
    c->flags = flags;
    c->ctor = ctor;
    return c;
}

void *pyb_kp_kmem_cache_alloc(struct kmem_cache *c, gfp_t gfp, int zero, const char *file, int line)
{
    void *p = pyb_kp_alloc(c->size, gfp, zero, file, line);
    if (p) {
        if (c->ctor && !zero)
            c->ctor(p);
        __atomic_fetch_add(&c->live, 1, __ATOMIC_RELAXED);
    }
    return p;
}

void pyb_kp_kmem_cache_free(struct kmem_cache *c, void *p, const char *file, int line)
{
    if (!p)
        return;
    __atomic_fetch_sub(&c->live, 1, __ATOMIC_RELAXED);
    pyb_kp_free(p, file, line);
}

void pyb_kp_kmem_cache_destroy(struct kmem_cache *c, const char *file, int line)
{
    if (!c)
        return;
    long live = __atomic_load_n(&c->live, __ATOMIC_RELAXED);
    if (live) {    /* mm/slab_common.c kmem_cache_destroy: a warning; the objects stay allocated (leaked) */
        pyb_kp_printk(4, file, line, "kmem_cache_destroy %s: %ld objects still allocated", c->name, live);
        pyb_kp_warn(file, line);
    }
    pyb_kp_free(c, file, line);
}

/* ---- mempool ------------------------------------------------------------------------------------------- */

static _Thread_local const char *mempool_file;   /* the patch's mempool_alloc call site, for the pool's */
static _Thread_local int mempool_line;           /* own allocations (their reports name the patch) */

#define MP_FILE (mempool_file ? mempool_file : __FILE__)
#define MP_LINE (mempool_file ? mempool_line : __LINE__)

void *mempool_kmalloc(gfp_t gfp_mask, void *pool_data) { return pyb_kp_alloc((size_t)pool_data, gfp_mask, 0, MP_FILE, MP_LINE); }
void mempool_kfree(void *element, void *pool_data) { (void)pool_data; pyb_kp_free(element, MP_FILE, MP_LINE); }
void *mempool_alloc_slab(gfp_t gfp_mask, void *pool_data)
{
    return pyb_kp_kmem_cache_alloc(pool_data, gfp_mask, 0, MP_FILE, MP_LINE);
}
void mempool_free_slab(void *element, void *pool_data) { pyb_kp_kmem_cache_free(pool_data, element, MP_FILE, MP_LINE); }
void *mempool_alloc_pages(gfp_t gfp_mask, void *pool_data)
{
    return pyb_kp_alloc(PAGE_SIZE << (long)pool_data, gfp_mask, 0, MP_FILE, MP_LINE);
}
void mempool_free_pages(void *element, void *pool_data) { (void)pool_data; pyb_kp_free(element, MP_FILE, MP_LINE); }

static void add_element(mempool_t *pool, void *element)
{
    pool->elements[pool->curr_nr] = element;
    __atomic_store_n(&pool->curr_nr, pool->curr_nr + 1, __ATOMIC_RELAXED);
}

static void *remove_element(mempool_t *pool)
{
    int n = pool->curr_nr - 1;
    __atomic_store_n(&pool->curr_nr, n, __ATOMIC_RELAXED);
    return pool->elements[n];
}

/* A figure for check-patch ("reserve elements used"): an element an operation took from a reserve. */
static void count_reserve_taken(void)
{
    if (T.cur)
        __atomic_fetch_add(&T.cur->reserve_taken, 1, __ATOMIC_RELAXED);
}

void mempool_exit(mempool_t *pool)
{
    while (pool->curr_nr)
        pool->free(remove_element(pool), pool->pool_data);
    kfree(pool->elements);
    pool->elements = NULL;
}

int mempool_init(mempool_t *pool, int min_nr, mempool_alloc_t *alloc_fn, mempool_free_t *free_fn, void *pool_data)
{
    memset(pool, 0, sizeof(*pool));
    spin_lock_init(&pool->lock);       /* one lockdep class for every pool, as the kernel's */
    pool->lock.name = "pool->lock";
    pool->min_nr = min_nr;
    pool->pool_data = pool_data;
    pool->alloc = alloc_fn;
    pool->free = free_fn;
    init_waitqueue_head(&pool->wait);
    pool->elements = kmalloc_array(min_nr, sizeof(void *), GFP_KERNEL);
    if (!pool->elements)
        return -ENOMEM;
    while (pool->curr_nr < pool->min_nr) {
        void *element = pool->alloc(GFP_KERNEL, pool->pool_data);
        if (!element) {
            mempool_exit(pool);
            return -ENOMEM;
        }
        add_element(pool, element);
    }
    return 0;
}

mempool_t *mempool_create(int min_nr, mempool_alloc_t *alloc_fn, mempool_free_t *free_fn, void *pool_data)
{
    mempool_t *pool = kzalloc(sizeof(*pool), GFP_KERNEL);
    if (!pool)
        return NULL;
    if (mempool_init(pool, min_nr, alloc_fn, free_fn, pool_data)) {
        kfree(pool);
        return NULL;
    }
    return pool;
}

void mempool_destroy(mempool_t *pool)
{
    if (!pool)
        return;
    mempool_exit(pool);
    kfree(pool);
}

/*
 * mm/mempool.c mempool_alloc: first the pool's allocator without direct reclaim or IO (and never retrying,
 * never warning), then the reserve, then (once) the allocator with the caller's whole mask, then, for a
 * caller that may sleep, a wait on the pool's queue for a free or 5 s (compressed), and round again. A
 * caller that may not sleep gets NULL once the reserve is empty. The kernel would loop for ever; the
 * shim bounds the whole call by the hung bound (a hung_task report naming mempool_alloc).
 */
void *pyb_kp_mempool_alloc(mempool_t *pool, gfp_t gfp_mask, const char *file, int line)
{
    void *element;
    unsigned long flags;
    uint64_t t0 = 0;
    int slept = 0;
    if (gfp_mask & __GFP_ZERO)
        pyb_kp_warn(file, line);                /* VM_WARN_ON_ONCE: a mempool does not zero its reserve */
    if (gfpflags_allow_blocking(gfp_mask))
        pyb_kp_might_sleep(PYB_KP_SLEEP_MEMPOOL, file, line);
    gfp_mask |= __GFP_NOMEMALLOC | __GFP_NORETRY | __GFP_NOWARN;
    gfp_t gfp_temp = gfp_mask & ~(__GFP_DIRECT_RECLAIM | __GFP_IO);
    for (;;) {
        mempool_file = file;
        mempool_line = line;
        element = pool->alloc(gfp_temp, pool->pool_data);
        mempool_file = NULL;
        if (element)
            return element;
        pyb_kp_spin_lock(&pool->lock, PYB_KP_IRQ_SAVE, &flags, file, line);
        if (pool->curr_nr) {
            element = remove_element(pool);
            count_reserve_taken();
            pyb_kp_spin_unlock(&pool->lock, PYB_KP_IRQ_SAVE, flags, file, line);
            smp_wmb();                          /* pairs with mempool_free's smp_rmb */
            return element;
        }
        if (gfp_temp != gfp_mask) {             /* retry at once with the caller's whole mask */
            pyb_kp_spin_unlock(&pool->lock, PYB_KP_IRQ_SAVE, flags, file, line);
            gfp_temp = gfp_mask;
            continue;
        }
        if (!(gfp_mask & __GFP_DIRECT_RECLAIM)) {
            pyb_kp_spin_unlock(&pool->lock, PYB_KP_IRQ_SAVE, flags, file, line);
            return NULL;
        }
        /* wait for an element to come back, or 5 * HZ, then go round again */
        struct wait_queue_entry wait = {NULL, 0};
        pyb_kp_prepare_to_wait(&pool->wait, &wait, TASK_UNINTERRUPTIBLE, file, line);
        pyb_kp_spin_unlock(&pool->lock, PYB_KP_IRQ_SAVE, flags, file, line);
        if (!t0)
            t0 = now_ns();
        struct pyb_kp_timeout to;
        pyb_kp_timeout_start(&to, 5 * HZ);
        to.t0 = t0;                             /* the hung bound counts from the first wait */
        while (__atomic_load_n(&pool->wait.seq, __ATOMIC_SEQ_CST) == wait.seq && now_ns() < to.deadline) {
            if (!slept && T.cur)                /* a figure: the calls that really slept */
                __atomic_fetch_add(&T.cur->mempool_waits, 1, __ATOMIC_RELAXED);
            slept = 1;
            ext_sleep(&pool->wait, wait.seq, to.t0, to.deadline, 1, PYB_KP_SLEEP_MEMPOOL, file, line);
        }
        if (now_ns() - t0 > hung_ns()) {        /* rounds that keep failing: bounded as one wait */
            pyb_kp_finish_wait(&pool->wait, &wait);
            report(PYB_KP_HUNG_TASK, file, line, NULL, NULL, 0, PYB_KP_SLEEP_MEMPOOL);
            escape(PYB_KP_EHUNG);
        }
        pyb_kp_finish_wait(&pool->wait, &wait);
    }
}

void *mempool_alloc_preallocated(mempool_t *pool)
{
    void *element = NULL;
    unsigned long flags;
    pyb_kp_spin_lock(&pool->lock, PYB_KP_IRQ_SAVE, &flags, __FILE__, __LINE__);
    if (pool->curr_nr) {
        element = remove_element(pool);
        count_reserve_taken();
    }
    pyb_kp_spin_unlock(&pool->lock, PYB_KP_IRQ_SAVE, flags, __FILE__, __LINE__);
    if (element)
        smp_wmb();
    return element;
}

/* mm/mempool.c mempool_free: back to the reserve only while it is below min_nr (then waiters are woken),
 * else to the pool's free function. */
void mempool_free(void *element, mempool_t *pool)
{
    unsigned long flags;
    if (!element)
        return;
    smp_rmb();
    if (__atomic_load_n(&pool->curr_nr, __ATOMIC_RELAXED) < pool->min_nr) {
        pyb_kp_spin_lock(&pool->lock, PYB_KP_IRQ_SAVE, &flags, __FILE__, __LINE__);
        if (pool->curr_nr < pool->min_nr) {
            add_element(pool, element);
            pyb_kp_spin_unlock(&pool->lock, PYB_KP_IRQ_SAVE, flags, __FILE__, __LINE__);
            pyb_kp_wake_up(&pool->wait);
            return;
        }
        pyb_kp_spin_unlock(&pool->lock, PYB_KP_IRQ_SAVE, flags, __FILE__, __LINE__);
    }
    pool->free(element, pool->pool_data);
}

/* ---- mutexes ------------------------------------------------------------------------------------------- */

void pyb_kp_mutex_init(struct mutex *m, const char *name)
{
    m->locked = 0;
    STORE(&m->owner, NULL);
    m->name = name;
    init_waitqueue_head(&m->wq);
}

static int mutex_try(struct mutex *m)
{
    unsigned int z = 0;
    return __atomic_compare_exchange_n(&m->locked, &z, 1, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED);
}

void pyb_kp_mutex_lock(struct mutex *m, const char *file, int line)
{
    pyb_kp_might_sleep(PYB_KP_SLEEP_MUTEX, file, line);   /* kernel/locking/mutex.c mutex_lock */
    if (LOAD(&m->owner) == (void *)&T) {
        report(PYB_KP_RECURSIVE_LOCKING, file, line, m->name, NULL, 0, 0);
        escape(PYB_KP_EFATAL);                             /* it would wait for itself for ever */
    }
    SCHED_HOOK(PYB_KP_HOOK_MUTEX_LOCK, m, 0, file, line);   /* interleave point: granted once free */
    if (!mutex_try(m)) {
        uint64_t t0 = now_ns();
        __atomic_fetch_add(&m->wq.waiters, 1, __ATOMIC_SEQ_CST);
        for (;;) {
            unsigned int seq = __atomic_load_n(&m->wq.seq, __ATOMIC_SEQ_CST);
            if (mutex_try(m))
                break;
            ext_sleep(&m->wq, seq, t0, UINT64_MAX, 1, PYB_KP_SLEEP_MUTEX, file, line);
        }
        pyb_kp_wait_leave(&m->wq);
    }
    STORE(&m->owner, (void *)&T);
    push_xheld(m, m->name, KP_X_MUTEX, file, line);
}

int pyb_kp_mutex_trylock(struct mutex *m, const char *file, int line)
{
    SCHED_HOOK(PYB_KP_HOOK_MUTEX_TRYLOCK, m, 0, file, line);   /* interleave point (issue 26) */
    if (!mutex_try(m))
        return 0;
    STORE(&m->owner, (void *)&T);
    push_xheld(m, m->name, KP_X_MUTEX, file, line);
    return 1;
}

void pyb_kp_mutex_unlock(struct mutex *m, const char *file, int line)
{
    int no_sleeper = SCHED_HOOK(PYB_KP_HOOK_MUTEX_UNLOCK, m, 0, file, line);   /* interleave point */
    void *owner = LOAD(&m->owner);
    if (owner != (void *)&T) {
        if (!__atomic_load_n(&m->locked, __ATOMIC_RELAXED)) {
            report(PYB_KP_BAD_UNLOCK_BALANCE, file, line, m->name, NULL, 0, 0);
            return;
        }
        report(PYB_KP_MUTEX_WRONG_OWNER, file, line, m->name, NULL, 0, 0);   /* released anyway */
    } else {
        pop_xheld(m, KP_X_MUTEX);
    }
    STORE(&m->owner, NULL);
    __atomic_store_n(&m->locked, 0, __ATOMIC_RELEASE);
    if (!no_sleeper)
        pyb_kp_wake_up(&m->wq);
}

/* ---- rwlocks ------------------------------------------------------------------------------------------- */

#define KP_USED_IN_HARDIRQ_R 16u      /* after kpatch_rt.c's four (hard/soft-irq, W) */
#define KP_USED_HARDIRQ_ON_R 32u
#define KP_RW_REPORTED 64u             /* the rwlock rule's bit in a class's `reported` */

void pyb_kp_rwlock_init(rwlock_t *l, const char *name, struct pyb_kp_lock_class *cls)
{
    l->cnt = 0;
    STORE(&l->owner, NULL);
    l->name = name;
    l->cls = cls;
    memset(&l->own, 0, sizeof(l->own));
}

/* lockdep's hard-irq rule with read usages (see kpatch_ext.h). detail (numbered after kpatch_rt.c's 0-3 of
 * spinlocks): 0 {IN-HARDIRQ-W} -> {HARDIRQ-ON-W}, 1 the reverse, 4 {IN-HARDIRQ-R} -> {HARDIRQ-ON-W}, 5 the
 * reverse, 6 {IN-HARDIRQ-W} -> {HARDIRQ-ON-R}, 7 the reverse (first usage -> this one). Usage bits and their
 * first sites live in the runtime's class table (class_index, usage_at), as the spinlocks' do. */
static void rw_lockdep(rwlock_t *l, int write, const char *file, int line)
{
    unsigned int bit = T.hardirq ? (write ? KP_USED_IN_HARDIRQ : KP_USED_IN_HARDIRQ_R)
                                 : (!T.irqs_off ? (write ? KP_USED_HARDIRQ_ON : KP_USED_HARDIRQ_ON_R) : 0);
    if (!bit)
        return;
    struct pyb_kp_lock_class *c = l->cls ? l->cls : &l->own;
    if (LOAD(&c->usage) & bit)
        return;
    int idx = class_index(c, l->name);
    unsigned int old = __atomic_fetch_or(&c->usage, bit, __ATOMIC_ACQ_REL);
    if (old & bit)
        return;
    if (idx >= 0) {
        STORE(&usage_at[idx][bit_index(bit)].file, file);
        __atomic_store_n(&usage_at[idx][bit_index(bit)].line, line, __ATOMIC_RELEASE);
    }
    int detail = -1;
    unsigned int other = 0;
    if (bit == KP_USED_HARDIRQ_ON && (old & KP_USED_IN_HARDIRQ)) detail = 0, other = KP_USED_IN_HARDIRQ;
    else if (bit == KP_USED_IN_HARDIRQ && (old & KP_USED_HARDIRQ_ON)) detail = 1, other = KP_USED_HARDIRQ_ON;
    else if (bit == KP_USED_HARDIRQ_ON && (old & KP_USED_IN_HARDIRQ_R)) detail = 4, other = KP_USED_IN_HARDIRQ_R;
    else if (bit == KP_USED_IN_HARDIRQ_R && (old & KP_USED_HARDIRQ_ON)) detail = 5, other = KP_USED_HARDIRQ_ON;
    else if (bit == KP_USED_HARDIRQ_ON_R && (old & KP_USED_IN_HARDIRQ)) detail = 6, other = KP_USED_IN_HARDIRQ;
    else if (bit == KP_USED_IN_HARDIRQ && (old & KP_USED_HARDIRQ_ON_R)) detail = 7, other = KP_USED_HARDIRQ_ON_R;
    if (detail < 0 || (__atomic_fetch_or(&c->reported, KP_RW_REPORTED, __ATOMIC_ACQ_REL) & KP_RW_REPORTED))
        return;
    const char *of = NULL;
    int ol = 0;
    if (idx >= 0) {
        ol = __atomic_load_n(&usage_at[idx][bit_index(other)].line, __ATOMIC_ACQUIRE);
        of = LOAD(&usage_at[idx][bit_index(other)].file);
    }
    report(PYB_KP_INCONSISTENT_LOCK, file, line, l->name, of, ol, detail);
}

static int rw_try(rwlock_t *l, int write)
{
    int c = __atomic_load_n(&l->cnt, __ATOMIC_RELAXED);
    if (write) {
        c = 0;
        return __atomic_compare_exchange_n(&l->cnt, &c, -1, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED);
    }
    while (c >= 0) {
        if (__atomic_compare_exchange_n(&l->cnt, &c, c + 1, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
            return 1;
    }
    return 0;
}

void pyb_kp_rw_lock(rwlock_t *l, int write, int irq_mode, unsigned long *flags, const char *file, int line)
{
    if (LOAD(&l->owner) == (void *)&T) {      /* this thread writes it: either acquisition deadlocks */
        report(PYB_KP_RECURSIVE_LOCKING, file, line, l->name, NULL, 0, 1);
        escape(PYB_KP_EFATAL);
    }
    irq_enter_lock(irq_mode, flags);
    rw_lockdep(l, write, file, line);
    SCHED_HOOK(PYB_KP_HOOK_RW_LOCK, l, write, file, line);     /* interleave point: granted once free */
    if (!rw_try(l, write)) {
        uint64_t t0 = now_ns();
        for (unsigned i = 1;; i++) {
            if (rw_try(l, write))
                break;
            if (i < 128) {
                cpu_relax();
                continue;
            }
            sched_yield();
            if ((i & 63) == 0 && now_ns() - t0 > hung_ns()) {
                report(PYB_KP_LOCKUP, file, line, l->name, NULL, 0, 1);
                escape(PYB_KP_EHUNG);
            }
        }
    }
    if (write)
        STORE(&l->owner, (void *)&T);
    push_xheld(l, l->name, write ? KP_X_RW_WRITE : KP_X_RW_READ, file, line);
}

int pyb_kp_rw_trylock(rwlock_t *l, int write, const char *file, int line)
{
    SCHED_HOOK(PYB_KP_HOOK_RW_TRYLOCK, l, write, file, line);  /* interleave point (issue 26) */
    if (!rw_try(l, write))
        return 0;
    rw_lockdep(l, write, file, line);
    if (write)
        STORE(&l->owner, (void *)&T);
    push_xheld(l, l->name, write ? KP_X_RW_WRITE : KP_X_RW_READ, file, line);
    return 1;
}

void pyb_kp_rw_unlock(rwlock_t *l, int write, int irq_mode, unsigned long flags, const char *file, int line)
{
    SCHED_HOOK(PYB_KP_HOOK_RW_UNLOCK, l, write, file, line);   /* interleave point (issue 26) */
    if (write) {
        void *owner = LOAD(&l->owner);
        if (owner != (void *)&T) {
            pop_xheld(l, KP_X_RW_WRITE);
            if (owner == NULL) {
                report(PYB_KP_DOUBLE_UNLOCK, file, line, l->name, NULL, 0, 1);
                return;
            }
            report(PYB_KP_UNLOCK_NOT_HELD, file, line, l->name, NULL, 0, 1);   /* released anyway */
        } else {
            pop_xheld(l, KP_X_RW_WRITE);
        }
        STORE(&l->owner, NULL);
        __atomic_store_n(&l->cnt, 0, __ATOMIC_RELEASE);
    } else {
        pop_xheld(l, KP_X_RW_READ);
        int c = __atomic_load_n(&l->cnt, __ATOMIC_RELAXED);
        for (;;) {
            if (c <= 0) {
                report(PYB_KP_DOUBLE_UNLOCK, file, line, l->name, NULL, 0, 1);
                return;
            }
            if (__atomic_compare_exchange_n(&l->cnt, &c, c - 1, false, __ATOMIC_RELEASE, __ATOMIC_RELAXED))
                break;
        }
    }
    if (irq_mode == PYB_KP_IRQ_DISABLE)
        T.irqs_off = T.hardirq;
    else if (irq_mode == PYB_KP_IRQ_SAVE)
        T.irqs_off = (int)flags;
}

/* ---- sequence counters ------------------------------------------------------------------------------ */

unsigned int pyb_kp_read_seqcount_begin(const seqcount_t *s, const char *name, const char *file, int line)
{
    uint64_t t0 = 0;
    SCHED_HOOK(PYB_KP_HOOK_SEQ_BEGIN, s, 0, file, line);      /* interleave point: granted once even */
    for (unsigned i = 1;; i++) {
        unsigned int v = __atomic_load_n(&s->sequence, __ATOMIC_RELAXED);
        if (!(v & 1)) {
            __atomic_thread_fence(__ATOMIC_ACQUIRE);   /* smp_rmb: the count, then the reads */
            return v;
        }
        if (i < 128) {
            cpu_relax();
            continue;
        }
        if (!t0)
            t0 = now_ns();
        sched_yield();
        if ((i & 63) == 0 && now_ns() - t0 > hung_ns()) {
            report(PYB_KP_LOCKUP, file, line, name, NULL, 0, 2);
            escape(PYB_KP_EHUNG);
        }
    }
}

void pyb_kp_write_seqcount(seqcount_t *s, int begin, int check, const char *file, int line)
{
    if (check && !pyb_kp_context(PYB_KP_CTX_ATOMIC) && !T.irqs_off)
        pyb_kp_warn(file, line);           /* lockdep_assert_preemption_disabled (seqlock.h) */
    SCHED_HOOK(PYB_KP_HOOK_SEQ_WRITE, s, begin, file, line);  /* interleave point (issue 26) */
    if (begin) {
        __atomic_fetch_add(&s->sequence, 1, __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_RELEASE);      /* smp_wmb: odd count, then the data */
    } else {
        __atomic_thread_fence(__ATOMIC_RELEASE);      /* smp_wmb: the data, then the even count */
        __atomic_fetch_add(&s->sequence, 1, __ATOMIC_RELAXED);
    }
}

/* ---- per-CPU data ------------------------------------------------------------------------------------ */

/* The static template: every DEFINE_PER_CPU variable of the module (the linker's bounds of the section;
 * weak, for a patch that defines none). */
extern char __start_pyb_kp_percpu[] __attribute__((weak, visibility("hidden")));
extern char __stop_pyb_kp_percpu[] __attribute__((weak, visibility("hidden")));
static char *pcpu_static;                /* PYB_KP_NR_CPUS copies of the template, built once */
static size_t pcpu_static_size;
static pthread_once_t pcpu_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t cpu_mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned int cpu_used;            /* bit c: CPU c belongs to a live thread (under cpu_mu) */
static unsigned int cpu_shared_next;     /* round robin for threads beyond the CPU count (under cpu_mu) */
static pthread_key_t cpu_key;
#define KP_PCPU_MAGIC 0x70637075u        /* "pcpu": the header of an alloc_percpu block */
#define KP_PCPU_HEADER 64

static void cpu_exit(void *p)
{
    unsigned int cpu = (unsigned int)(uintptr_t)p - 1;
    pthread_mutex_lock(&cpu_mu);
    cpu_used &= ~(1u << cpu);
    pthread_mutex_unlock(&cpu_mu);
}

static void pcpu_init(void)
{
    pthread_key_create(&cpu_key, cpu_exit);
    if (__start_pyb_kp_percpu && &__stop_pyb_kp_percpu[0] > &__start_pyb_kp_percpu[0]) {
        pcpu_static_size = (size_t)(__stop_pyb_kp_percpu - __start_pyb_kp_percpu);
        pcpu_static = aligned_alloc(64, ((pcpu_static_size + 63) & ~(size_t)63) * PYB_KP_NR_CPUS);
        if (!pcpu_static) {
            fputs("pybcache kpatch: cannot allocate the per-CPU areas\n", stderr);
            abort();
        }
        pcpu_static_size = (pcpu_static_size + 63) & ~(size_t)63;
        for (int c = 0; c < PYB_KP_NR_CPUS; c++)
            memcpy(pcpu_static + (size_t)c * pcpu_static_size, __start_pyb_kp_percpu,
                   (size_t)(__stop_pyb_kp_percpu - __start_pyb_kp_percpu));
    }
}

/* This thread's simulated CPU: the lowest free one at its first use (kept until it exits), or a shared
 * one when all are taken. check 1: smp_processor_id's preemption check, 2: __this_cpu_<what>'s. */
int pyb_kp_cpu(int check, const char *what, const char *file, int line)
{
    if (check && !pyb_kp_context(PYB_KP_CTX_ATOMIC) && !T.irqs_off)
        report(PYB_KP_PREEMPTIBLE_CPU, file, line, what, NULL, 0, check - 1);
    if (TX.cpu)
        return TX.cpu - 1;
    pthread_once(&pcpu_once, pcpu_init);
    pthread_mutex_lock(&cpu_mu);
    int cpu = -1;
    for (int c = 0; c < PYB_KP_NR_CPUS; c++) {
        if (!(cpu_used & (1u << c))) {
            cpu = c;
            break;
        }
    }
    if (cpu >= 0) {
        cpu_used |= 1u << cpu;
        pthread_setspecific(cpu_key, (void *)(uintptr_t)(cpu + 1));
    } else {
        cpu = (int)(cpu_shared_next++ % PYB_KP_NR_CPUS);   /* shared: see kpatch_ext.h */
    }
    pthread_mutex_unlock(&cpu_mu);
    TX.cpu = cpu + 1;
    return cpu;
}

void *pyb_kp_per_cpu_ptr(const void *ptr, int cpu, const char *file, int line)
{
    if (cpu < 0 || cpu >= PYB_KP_NR_CPUS)
        pyb_kp_bug(file, line);           /* the kernel would address memory that is no CPU's */
    const char *p = ptr;
    if (__start_pyb_kp_percpu && p >= __start_pyb_kp_percpu && p < __stop_pyb_kp_percpu) {
        pthread_once(&pcpu_once, pcpu_init);
        return pcpu_static + (size_t)cpu * pcpu_static_size + (size_t)(p - __start_pyb_kp_percpu);
    }
    const size_t *hdr = (const size_t *)(p - KP_PCPU_HEADER);
    if (hdr[0] != KP_PCPU_MAGIC)
        pyb_kp_bug(file, line);           /* not a per-CPU pointer */
    return (void *)(p + (size_t)cpu * hdr[1]);
}

void *pyb_kp_alloc_percpu(size_t size, size_t align, gfp_t gfp, const char *file, int line)
{
    (void)align;                          /* copies are 64-byte strided; alignment up to 16 holds */
    size_t stride = (size + 63) & ~(size_t)63;
    char *b = pyb_kp_alloc(KP_PCPU_HEADER + stride * PYB_KP_NR_CPUS, gfp, 1, file, line);
    if (!b)
        return NULL;
    ((size_t *)b)[0] = KP_PCPU_MAGIC;
    ((size_t *)b)[1] = stride;
    return b + KP_PCPU_HEADER;
}

void pyb_kp_free_percpu(void *ptr, const char *file, int line)
{
    if (!ptr)
        return;
    pyb_kp_free((char *)ptr - KP_PCPU_HEADER, file, line);
}
