/*
 * pybcache/kpatch_abi.h - the interface between a compiled patch module and the program that loads it.
 *
 * A patch module is one shared object built by pybcache.load_patch from the user's patch file and the
 * shim runtime (csrc/kpatch/kpatch_rt.c; pybcache/kpatch_rt/ when installed). It exports one symbol,
 * PYB_KP_MODULE_SYMBOL, a function that returns the module's table below. The loader (csrc/pyb_kpatch.c) checks `abi` and calls nothing else
 * by name. Patch authors never include this file; it is plain C11 with no Python and no kernel names.
 *
 * An instance is one tracker: a `struct cached_dev` handed to the patch's init, plus the shim's
 * per-tracker state (allocation accounting, fault hook, report and log buffers). The byte-range calls
 * take ranges the caller has validated (len > 0, off + len <= device_size); they round outward to
 * 512-byte sectors (chunks are multiples of 512, so the chunks a range overlaps do not change) and cut
 * ranges longer than PYB_KP_MAX_BIO_BYTES into several bios, the same way for start and end.
 */
#ifndef PYBCACHE_KPATCH_ABI_H
#define PYBCACHE_KPATCH_ABI_H

#include <stddef.h>
#include <stdint.h>

#define PYB_KP_ABI 4
#define PYB_KP_MODULE_SYMBOL "pybcache_kpatch_module"
#define PYB_KP_MAX_BIO_BYTES (1ull << 31)

/* Return codes of the operations (negative: the instance is broken and refuses further operations). */
#define PYB_KP_OK 0
#define PYB_KP_ALLOC_FAILED 1   /* start: an allocation failed (was injected) during this call */
#define PYB_KP_EHUNG (-1)       /* a wait or a spinlock exceeded the hung-task bound (a report says where) */
#define PYB_KP_EINTR (-2)       /* the host's interrupt hook asked a wait to stop */
#define PYB_KP_EFATAL (-3)      /* a fatal report (spinlock recursion) escaped the patch */
#define PYB_KP_EBROKEN (-4)     /* an earlier operation escaped: the patch's state is unknown */
#define PYB_KP_EINIT (-5)       /* create: the patch's init returned an error (in *err) */
#define PYB_KP_ENOMEM (-6)      /* create: the shim could not allocate the instance */

/* Operation that was running when a report was made. */
enum pyb_kp_op { PYB_KP_OP_NONE = 0, PYB_KP_OP_INIT, PYB_KP_OP_EXIT, PYB_KP_OP_START, PYB_KP_OP_END,
                 PYB_KP_OP_CHECK, PYB_KP_OP_RCU_CALLBACK };

/* Kinds of report. Python renders each in the kernel's wording (pybcache/bcache/kpatch/load.py, _REPORT_TEXT). */
enum pyb_kp_report_kind {
    PYB_KP_MIGHT_SLEEP = 1,      /* a sleeping call in atomic context; detail = enum pyb_kp_sleeper */
    PYB_KP_INCONSISTENT_LOCK,    /* lockdep: detail 0 = {IN-HARDIRQ-W} -> {HARDIRQ-ON-W}, 1 = the reverse,
                                  * 2, 3 the same for SOFTIRQ; rwlocks: 4 {IN-HARDIRQ-R} -> {HARDIRQ-ON-W},
                                  * 5 the reverse, 6 {IN-HARDIRQ-W} -> {HARDIRQ-ON-R}, 7 the reverse */
    PYB_KP_UNLOCK_NOT_HELD,      /* spin_unlock of a lock another thread holds ("wrong owner") */
    PYB_KP_DOUBLE_UNLOCK,        /* spin_unlock of a lock nobody holds ("already unlocked") */
    PYB_KP_SPIN_RECURSION,       /* spin_lock of a lock this thread holds (fatal: would deadlock) */
    PYB_KP_LOCKUP,               /* a spinlock (detail 0) or rwlock (1) not acquired, a seqcount reader spinning (2),
                                  * within the hung bound (fatal) */
    PYB_KP_HUNG_TASK,            /* a wait not finished within the hung bound (fatal) */
    PYB_KP_WARN,                 /* WARN_ON / WARN_ON_ONCE / WARN fired */
    PYB_KP_LOCK_HELD_AT_RETURN,  /* an operation returned holding a spinlock or with irqs disabled */
    PYB_KP_SUSPICIOUS_RCU,       /* rcu_dereference outside rcu_read_lock */
    PYB_KP_BAD_FREE,             /* kfree of a pointer the shim did not allocate (or already freed) */
    PYB_KP_NOT_HELD,             /* lockdep_assert_held / assert_spin_locked failed */
    PYB_KP_CIRCULAR_LOCKING = 13, /* lockdep: a new lock order closes a cycle; detail 0 = circular (other_lock
                                  * held, lock taken), 1 = recursive (a second lock of a held class) */
    PYB_KP_IRQ_LOCK_ORDER,       /* lockdep: irq-safe -> irq-unsafe; detail bit 0: soft-irq (else hard-irq),
                                  * bit 1: found when a usage was marked ("irq lock inversion"), else when
                                  * the order was added ("X-safe -> X-unsafe lock order") */
    PYB_KP_IRQS_ENABLED_IN_IRQ,  /* a hard-irq handler (write_end in hard-irq) enabled interrupts */
    PYB_KP_GFP_IO_SUBMISSION,    /* an allocation that may recurse into I/O (__GFP_IO or __GFP_FS) on the
                                  * block submission path; detail = the gfp mask */
    PYB_KP_BLOCK_IN_WAIT_COND,   /* a sleeping call inside a wait_event condition; detail = enum pyb_kp_sleeper */
    /* The second API group (pybcache/kpatch_ext.h; numbered after the context rules). */
    PYB_KP_RECURSIVE_LOCKING = 18, /* mutex_lock of a mutex this thread holds (detail 0), or an rwlock it writes (1) */
    PYB_KP_BAD_UNLOCK_BALANCE,   /* mutex_unlock of a mutex nobody holds */
    PYB_KP_MUTEX_WRONG_OWNER,    /* mutex_unlock by a thread that does not hold it (released anyway) */
    PYB_KP_PREEMPTIBLE_CPU,      /* smp_processor_id/this_cpu_ptr (detail 0) or __this_cpu_<lock> (1) preemptible */
};

/* Where write_end runs (the kernel's cached_dev_write_complete runs where the last closure reference
 * drops: in the bio's completion, hard or soft irq, on a workqueue, or inline on the submitter). */
enum pyb_kp_end_context { PYB_KP_END_HARDIRQ = 0, PYB_KP_END_SOFTIRQ, PYB_KP_END_WORKER, PYB_KP_END_INLINE,
                          PYB_KP_END_CONTEXTS };
#define PYB_KP_END_ALL ((1u << PYB_KP_END_CONTEXTS) - 1)

/* Which allocations fault injection may fail (pyb_kp_config.fail_mode). */
enum pyb_kp_fail_mode {
    PYB_KP_FAIL_CAN_FAIL = 0,    /* only those the kernel can fail: a mask that cannot sleep (GFP_ATOMIC,
                                  * GFP_NOWAIT), __GFP_NORETRY / __GFP_RETRY_MAYFAIL, or more than
                                  * PAGE_ALLOC_COSTLY_ORDER (32 KiB) */
    PYB_KP_FAIL_ALL,             /* every allocation but __GFP_NOFAIL (adversarial) */
};

/* What slept, for PYB_KP_MIGHT_SLEEP. */
enum pyb_kp_sleeper { PYB_KP_SLEEP_ALLOC = 0, PYB_KP_SLEEP_WAIT_EVENT, PYB_KP_SLEEP_SYNCHRONIZE_RCU,
                      PYB_KP_SLEEP_MIGHT_SLEEP, PYB_KP_SLEEP_MUTEX, PYB_KP_SLEEP_MEMPOOL,
                      PYB_KP_SLEEP_WAIT_TIMEOUT, PYB_KP_SLEEP_SCHEDULE };

/*
 * One report. Strings point into the patch module (string literals: __FILE__, lock names) and live as
 * long as it is loaded (modules are never unloaded). Identical reports (kind, file, line, lock) are
 * merged and counted.
 */
typedef struct pyb_kp_report {
    int kind;                /* enum pyb_kp_report_kind */
    int op;                  /* enum pyb_kp_op */
    const char *file;        /* where it happened */
    int line;
    const char *lock;        /* the lock's name, or NULL */
    const char *other_lock;  /* lockdep order reports: the other lock's name, else NULL */
    const char *other_file;  /* lockdep: where the conflicting usage was first seen; might_sleep: where the */
    int other_line;          /*   innermost held lock was taken; NULL/0 when none */
    int detail;              /* kind-specific, see the enums above */
    int hardirq;             /* context at the time: in simulated hard-irq context */
    int irqs_disabled;       /*   local interrupts disabled */
    int locks_held;          /*   spinlocks held by the thread (the kernel's preempt count) */
    int rcu_depth;           /*   rcu_read_lock nesting */
    int end_context;         /*   write_end's context (enum pyb_kp_end_context), or -1 outside write_end */
    uint64_t count;          /* times this report was made */
    /* PYB_KP_HUNG_TASK only (0 otherwise), as the first report of its site saw them: what could still
     * have woken the waiter. */
    uint64_t inflight;       /* writes whose write_start returned and whose write_end was not yet called */
    uint64_t ends_during;    /* write_end operations completed while the waiter waited */
    uint64_t others_running; /* operations of the instance running on other threads, not inside a wait */
    uint64_t rcu_queued;     /* RCU callbacks of the instance queued and not yet run */
} pyb_kp_report;

/* One printk record. text is formatted from the patch's own format string (never from ours). */
#define PYB_KP_LOG_TEXT 240
typedef struct pyb_kp_log {
    int level;               /* kernel log level: 3 err, 4 warning, 5 notice, 6 info, 7 debug */
    const char *file;
    int line;
    uint64_t suppressed;     /* messages a ratelimit dropped at this call site before this one */
    char text[PYB_KP_LOG_TEXT];
} pyb_kp_log;

typedef struct pyb_kp_stats {
    uint64_t starts, ends, checks;           /* write_start, write_end and read_bypass calls (bios) */
    uint64_t allocations, frees;             /* successful allocations and frees of this instance */
    uint64_t alloc_failures;                 /* allocations that failed (injected) */
    uint64_t nofail_allocations;             /* __GFP_NOFAIL allocations (never failed) */
    uint64_t warnings;                       /* WARN_ON* that fired */
    uint64_t reports;                        /* distinct reports recorded (see pyb_kp_report) */
    uint64_t reports_dropped;                /* reports lost because the buffer was full */
    uint64_t log_records, log_dropped;       /* printk records kept / lost */
    uint64_t rcu_pending;                    /* kfree_rcu / call_rcu callbacks not yet run (whole module) */
    uint64_t waits;                          /* wait_event calls that slept (their condition was false) */
    uint64_t sleeping;                       /* threads asleep in a wait of this instance now */
    uint64_t writes_in_flight;               /* start operations returned minus end operations begun */
    uint64_t write_ends;                     /* end operations completed */
    /* The number of completed end operations the latest sleeper had seen before it last evaluated its
     * condition and went to sleep: a host that ended write k sees the waiter still waiting after that
     * end once settled_ends >= k (the semantics check's background completion). */
    uint64_t settled_ends;
    uint64_t ends_in[PYB_KP_END_CONTEXTS];   /* write_end calls (bios) by context */
    uint64_t reserve_taken;                  /* mempool elements handed out from a pool's reserve */
    uint64_t mempool_waits;                  /* mempool_alloc calls that slept for an element */
} pyb_kp_stats;

typedef struct pyb_kp_memory {
    uint64_t init_bytes;       /* live bytes allocated by init (the patch's idle footprint) */
    uint64_t op_bytes;         /* live bytes allocated by operations (pages and the like) */
    uint64_t total_bytes;      /* init_bytes + op_bytes */
    uint64_t peak_bytes;       /* the largest total_bytes seen */
    uint64_t op_allocations;   /* live allocations made by operations */
    uint64_t peak_op_allocations;
} pyb_kp_memory;

/* What the host hands to create. */
typedef struct pyb_kp_config {
    uint64_t device_size;      /* bytes, > 0; the patch sees DIV_ROUND_UP(device_size, 512) sectors */
    /* Fault injection: fail the allocation of `size` bytes? NULL = never. Called from any thread, never
     * for __GFP_NOFAIL allocations and never during init/exit (kernel fault_attr semantics live in the
     * host's implementation, csrc/pyb_fault.c). */
    int (*should_fail)(void *arg, uint64_t size);
    void *should_fail_arg;
    /* Interrupt hook: polled about every 50 ms by a sleeping wait; non-zero stops it (PYB_KP_EINTR).
     * May be NULL. Never called with a spinlock held. */
    int (*interrupted)(void *arg);
    void *interrupted_arg;
    uint64_t hung_ns;          /* bound on any wait or spinlock acquisition, > 0 */
    /* 0: write_end gets the bio as bcache's cached_dev_write_complete sees s->orig_bio of a bypass write,
     * its iterator consumed by bch_data_invalidate (bi_size 0, bi_sector at the end); 1: untouched. */
    int end_bio_intact;
    /* Contexts `end` rotates over (a mask of 1 << enum pyb_kp_end_context; 0: hard-irq only). The n-th end
     * of the module (every instance counted, in call order) takes the (n mod k)-th of the k contexts in the
     * mask; INLINE only through claim_end_context or end_in (it must run on the submitting thread). */
    unsigned int end_contexts;
    int fail_mode;             /* enum pyb_kp_fail_mode */
} pyb_kp_config;

typedef struct pyb_kp_instance pyb_kp_instance;

typedef struct pyb_kp_module {
    int abi;                                   /* PYB_KP_ABI */
    const char *name;                          /* the patch's ops.name */
    const char *missing_op;                    /* NULL, or the first required op the patch left NULL */
    /* Build an instance and run the patch's init (without fault injection). Returns PYB_KP_OK,
     * PYB_KP_EINIT (the patch's error in *err), PYB_KP_ENOMEM, or a negative escape code. */
    int (*create)(const pyb_kp_config *cfg, pyb_kp_instance **out, int *err);
    /* Run the patch's exit (without fault injection) unless broken, run every RCU callback of the
     * instance (bounded by hung_ns), free what is still allocated and report it in *leaked_bytes /
     * *leaked_allocations (either may be NULL). No operation of inst may be in flight. */
    void (*destroy)(pyb_kp_instance *inst, uint64_t *leaked_bytes, uint64_t *leaked_allocations);
    int (*start)(pyb_kp_instance *inst, uint64_t off, uint64_t len);      /* process context, may sleep */
    /* write_end in the context claimed for this instance (claim_end_context), else the next of the rotation
     * over cfg.end_contexts without INLINE (see pyb_kp_config). */
    int (*end)(pyb_kp_instance *inst, uint64_t off, uint64_t len);
    int (*is_active)(pyb_kp_instance *inst, uint64_t off, uint64_t len);  /* 1 / 0, or a negative code */
    void (*stats)(pyb_kp_instance *inst, pyb_kp_stats *out);
    void (*memory)(pyb_kp_instance *inst, pyb_kp_memory *out);
    /* Copy up to n reports / log records from index `from`; returns how many exist in total. */
    size_t (*reports)(pyb_kp_instance *inst, size_t from, pyb_kp_report *out, size_t n);
    size_t (*log)(pyb_kp_instance *inst, size_t from, pyb_kp_log *out, size_t n);
    /* Return once every RCU callback inst had queued has run (after grace periods; bounded by
     * hung_ns, interruptible); returns how many this call ran. Operations of inst poll too. */
    uint64_t (*rcu_barrier)(pyb_kp_instance *inst);
    uint64_t bypass_granularity;               /* the patch's ops.bypass_granularity (bytes, 0: none declared) */
    /* write_end in the given context (enum pyb_kp_end_context) on the calling thread. */
    int (*end_in)(pyb_kp_instance *inst, uint64_t off, uint64_t len, int context);
    /* The context of inst's next `end`: the next of the rotation over cfg.end_contexts, INLINE included.
     * The caller runs that end on the submitting thread if it is INLINE (single-stepped drivers). */
    int (*claim_end_context)(pyb_kp_instance *inst);
    /* write_end calls (bios) by context, every instance of the module counted since it was loaded. */
    void (*end_counts)(uint64_t out[PYB_KP_END_CONTEXTS]);
} pyb_kp_module;

typedef const pyb_kp_module *(*pyb_kp_module_fn)(void);

#endif /* PYBCACHE_KPATCH_ABI_H */
