/*
 * pybcache/kpatch.h - the kernel-API shim a bcache bypass-tracking patch is compiled against.
 *
 * A patch is one C file written against kernel APIs (the headers in the linux folder beside this one
 * all forward here). pybcache.load_patch compiles it with the shim runtime (pybcache/kpatch_rt/) and runs
 * it as a tracker. Every name below keeps its kernel semantics; where userspace differs the comment
 * says how. docs/check-patch.md is the user's guide; this header is the contract.
 *
 * Context. The shim keeps, per thread, the kernel context the lab simulates: process context for
 * write_start and read_bypass (interrupts enabled, on the block submission path); for write_end the
 * context the caller chose (hard-irq, soft-irq, a worker in process context, or inline on the
 * submitter: where the kernel's closure runs cached_dev_write_complete); the spinlocks held, and the
 * rcu_read_lock depth. From it, as might_sleep and lockdep would, it reports (the full list, with the
 * Linux 6.12 sources each follows, is in docs/check-patch.md, "lockdep's rules"):
 *   - a sleeping call (an allocation whose gfp allows direct reclaim, wait_event, synchronize_rcu,
 *     might_sleep) with a spinlock held, interrupts disabled, in hard-irq context or inside an RCU
 *     read-side section: "BUG: sleeping function called from invalid context";
 *   - a lock class taken in hard-irq (soft-irq) context and elsewhere with interrupts (soft-irqs)
 *     enabled: lockdep's "inconsistent {IN-HARDIRQ-W} -> {HARDIRQ-ON-W} usage" (a class is the
 *     spin_lock_init call site, or the DEFINE_SPINLOCK variable, as in the kernel); a trylock is no
 *     use in irq context; lock orders that close a cycle, or put an irq-safe class before an irq-unsafe
 *     one; interrupts enabled in a hard-irq handler;
 *   - __GFP_IO / __GFP_FS allocations on the submission path; a blocking call in a wait_event condition;
 *   - spin_unlock of a lock another thread holds, or that nobody holds (the shim then leaves the lock
 *     as it was); spin_lock of a lock the thread already holds (fatal, it would deadlock);
 *   - WARN_ON* that fire (they return their condition); an operation that returns with a lock held.
 * Reports are records the lab reads (pybcache/kpatch_abi.h); BUG_ON/BUG print the kernel's line on
 * stderr and abort the process (the lab runs checks in a child process).
 *
 * The second group of APIs (mempool, mutex, rwlock, seqlock, preempt and bottom halves, per-CPU data, timed
 * waits, pages, kmem caches) is pybcache/kpatch_ext.h, included at the end of this file.
 *
 * Waits are bounded: a wait_event, synchronize_rcu or spinlock acquisition that lasts longer than the
 * tracker's hung bound is reported (hung task / lockup) and the operation is abandoned; the tracker
 * then refuses further operations. Sleeping waits are also interruptible by the lab (Ctrl-C). An
 * abandoned operation (hung, lockup, spinlock recursion, interrupted) releases the spinlocks it held
 * (the innermost 16 it nested) and ends its RCU read-side section, so that other threads and other
 * trackers of the module, which share its static locks, carry on.
 */
#ifndef PYBCACHE_KPATCH_H
#define PYBCACHE_KPATCH_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>   /* loff_t (patches are compiled as gnu11, as the kernel is) */

/* ---------------------------------------------------------------------------------------------- */
/* compiler.h: attributes and access helpers                                                        */

#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#undef __always_inline
#define __always_inline inline __attribute__((always_inline))
#define noinline __attribute__((noinline))
#define __maybe_unused __attribute__((unused))
#define __always_unused __attribute__((unused))
#define __used __attribute__((used))
#define __cold __attribute__((cold))
#define __pure __attribute__((pure))
#define __packed __attribute__((packed))
#define __aligned(x) __attribute__((aligned(x)))
#define __printf(a, b) __attribute__((format(printf, a, b)))
#define __must_check __attribute__((warn_unused_result))
#define __noreturn __attribute__((noreturn))
#define ____cacheline_aligned __attribute__((aligned(64)))
#define ____cacheline_aligned_in_smp ____cacheline_aligned
#define __read_mostly
#define __init
#define __exit
#define __rcu
#define __iomem
#define __user
#define __force
#define __percpu
#define __acquires(x)
#define __releases(x)
#define __must_hold(x)
#define fallthrough __attribute__((fallthrough))
#define barrier() __asm__ __volatile__("" ::: "memory")
#if defined(__x86_64__) || defined(__i386__)
#define cpu_relax() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield" ::: "memory")
#else
#define cpu_relax() barrier()
#endif
#define EXPORT_SYMBOL(sym)
#define EXPORT_SYMBOL_GPL(sym)
#define MODULE_LICENSE(x)
#define MODULE_AUTHOR(x)
#define MODULE_DESCRIPTION(x)
#define BUILD_BUG_ON(cond) _Static_assert(!(cond), "BUILD_BUG_ON(" #cond ")")
#define BUILD_BUG_ON_MSG(cond, msg) _Static_assert(!(cond), msg)

/* READ_ONCE/WRITE_ONCE: one untorn, unordered access (relaxed atomics, so TSan sees them as such). */
#define READ_ONCE(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define WRITE_ONCE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELAXED)
#define data_race(expr) (expr)

/* ---------------------------------------------------------------------------------------------- */
/* types.h                                                                                         */

typedef uint8_t u8;
typedef uint16_t u16;
typedef uint32_t u32;
typedef uint64_t u64;
typedef int8_t s8;
typedef int16_t s16;
typedef int32_t s32;
typedef int64_t s64;
typedef uint8_t __u8;
typedef uint16_t __u16;
typedef uint32_t __u32;
typedef uint64_t __u64;
typedef int32_t __s32;
typedef int64_t __s64;
typedef u64 sector_t;
typedef unsigned int gfp_t;
typedef unsigned int blk_opf_t;
typedef uintptr_t phys_addr_t;

/* ---------------------------------------------------------------------------------------------- */
/* kernel.h, minmax.h, math.h, log2.h, bits                                                        */

#define SECTOR_SHIFT 9
#define SECTOR_SIZE (1 << SECTOR_SHIFT)
#define PAGE_SHIFT 12
#define PAGE_SIZE (1UL << PAGE_SHIFT)
#define PAGE_MASK (~(PAGE_SIZE - 1))
#define PAGE_SECTORS_SHIFT (PAGE_SHIFT - SECTOR_SHIFT)
#define PAGE_SECTORS (1U << PAGE_SECTORS_SHIFT)
#define BITS_PER_BYTE 8
#define BITS_PER_LONG (sizeof(long) * 8)
#define U8_MAX ((u8)~0U)
#define U16_MAX ((u16)~0U)
#define U32_MAX ((u32)~0U)
#define U64_MAX ((u64)~0ULL)
#define S8_MAX ((s8)(U8_MAX >> 1))
#define S16_MAX ((s16)(U16_MAX >> 1))
#define S32_MAX ((s32)(U32_MAX >> 1))
#define S64_MAX ((s64)(U64_MAX >> 1))
#define HZ 1000

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define container_of(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))
#define BIT(n) (1UL << (n))
#define BIT_ULL(n) (1ULL << (n))
#define GENMASK(h, l) (((~0UL) << (l)) & (~0UL >> (BITS_PER_LONG - 1 - (h))))
#define GENMASK_ULL(h, l) (((~0ULL) << (l)) & (~0ULL >> (63 - (h))))

/* min/max evaluate each argument once; min_t/max_t convert both to `type` first. */
#define min(a, b) ({ __typeof__(a) _a_ = (a); __typeof__(b) _b_ = (b); _a_ < _b_ ? _a_ : _b_; })
#define max(a, b) ({ __typeof__(a) _a_ = (a); __typeof__(b) _b_ = (b); _a_ > _b_ ? _a_ : _b_; })
#define min3(a, b, c) min(min(a, b), c)
#define max3(a, b, c) max(max(a, b), c)
#define min_t(type, a, b) ({ type _a_ = (type)(a); type _b_ = (type)(b); _a_ < _b_ ? _a_ : _b_; })
#define max_t(type, a, b) ({ type _a_ = (type)(a); type _b_ = (type)(b); _a_ > _b_ ? _a_ : _b_; })
#define clamp(v, lo, hi) min(max(v, lo), hi)
#define clamp_t(type, v, lo, hi) min_t(type, max_t(type, v, lo), hi)
#define swap(a, b) do { __typeof__(a) _t_ = (a); (a) = (b); (b) = _t_; } while (0)

#define DIV_ROUND_UP(n, d) (((n) + (d) - 1) / (d))
#define DIV_ROUND_UP_ULL(n, d) DIV_ROUND_UP((unsigned long long)(n), (d))
#define __round_mask(x, y) ((__typeof__(x))((y) - 1))
#define round_up(x, y) ((((x) - 1) | __round_mask(x, y)) + 1)           /* y a power of two */
#define round_down(x, y) ((x) & ~__round_mask(x, y))                     /* y a power of two */
#define roundup(x, y) ((((x) + ((y) - 1)) / (y)) * (y))
#define rounddown(x, y) ((x) - ((x) % (y)))
#define ALIGN(x, a) round_up(x, a)
#define ALIGN_DOWN(x, a) round_down(x, a)
#define IS_ALIGNED(x, a) (((x) & ((__typeof__(x))(a) - 1)) == 0)
static inline u64 div_u64(u64 n, u32 d) { return n / d; }
static inline u64 div64_u64(u64 n, u64 d) { return n / d; }

static inline int fls(unsigned int x) { return x ? 32 - __builtin_clz(x) : 0; }
static inline int fls64(u64 x) { return x ? 64 - __builtin_clzll(x) : 0; }
static inline unsigned long __ffs(unsigned long x) { return (unsigned long)__builtin_ctzl(x); }
static inline unsigned long __fls(unsigned long x) { return BITS_PER_LONG - 1 - (unsigned long)__builtin_clzl(x); }
#define hweight32(x) __builtin_popcount(x)
#define hweight64(x) __builtin_popcountll(x)
/* ilog2(n): floor(log2(n)) for n > 0; a constant expression for a constant n (gcc and clang fold it). */
#define ilog2(n) ((int)(63 - __builtin_clzll((unsigned long long)(n))))
#define is_power_of_2(n) ((n) != 0 && (((n) & ((n) - 1)) == 0))
#define roundup_pow_of_two(n) (1ULL << fls64((u64)(n) - 1))
#define rounddown_pow_of_two(n) (1ULL << ilog2(n))
#define order_base_2(n) ((n) > 1 ? ilog2((n) - 1) + 1 : 0)

/* Bit operations on unsigned long arrays: set/clear/change/test_and_* are atomic (test_and_* fully
 * ordered, the others unordered), the __ forms are not. */
#define BIT_WORD(nr) ((nr) / BITS_PER_LONG)
#define BIT_MASK(nr) (1UL << ((nr) % BITS_PER_LONG))
#define BITS_TO_LONGS(n) DIV_ROUND_UP(n, BITS_PER_LONG)
#define DECLARE_BITMAP(name, bits) unsigned long name[BITS_TO_LONGS(bits)]
static inline void set_bit(long nr, volatile unsigned long *a)
{ __atomic_fetch_or((unsigned long *)&a[BIT_WORD(nr)], BIT_MASK(nr), __ATOMIC_RELAXED); }
static inline void clear_bit(long nr, volatile unsigned long *a)
{ __atomic_fetch_and((unsigned long *)&a[BIT_WORD(nr)], ~BIT_MASK(nr), __ATOMIC_RELAXED); }
static inline bool test_bit(long nr, const volatile unsigned long *a)
{ return (__atomic_load_n((unsigned long *)&a[BIT_WORD(nr)], __ATOMIC_RELAXED) & BIT_MASK(nr)) != 0; }
static inline bool test_and_set_bit(long nr, volatile unsigned long *a)
{ return (__atomic_fetch_or((unsigned long *)&a[BIT_WORD(nr)], BIT_MASK(nr), __ATOMIC_SEQ_CST) & BIT_MASK(nr)) != 0; }
static inline bool test_and_clear_bit(long nr, volatile unsigned long *a)
{ return (__atomic_fetch_and((unsigned long *)&a[BIT_WORD(nr)], ~BIT_MASK(nr), __ATOMIC_SEQ_CST) & BIT_MASK(nr)) != 0; }
static inline void __set_bit(long nr, unsigned long *a) { a[BIT_WORD(nr)] |= BIT_MASK(nr); }
static inline void __clear_bit(long nr, unsigned long *a) { a[BIT_WORD(nr)] &= ~BIT_MASK(nr); }

/* ---------------------------------------------------------------------------------------------- */
/* errno.h (kernel numbers; functions return them negated)                                         */

#define EPERM 1
#define ENOENT 2
#define EINTR 4
#define EIO 5
#define ENXIO 6
#define E2BIG 7
#define EAGAIN 11
#define ENOMEM 12
#define EFAULT 14
#define EBUSY 16
#define EEXIST 17
#define ENODEV 19
#define EINVAL 22
#define ENOSPC 28
#define ERANGE 34
#define ENOSYS 38
#define EOVERFLOW 75
#define EOPNOTSUPP 95
#define ETIMEDOUT 110
#define MAX_ERRNO 4095
#define IS_ERR_VALUE(x) ((unsigned long)(void *)(x) >= (unsigned long)-MAX_ERRNO)
static inline void *ERR_PTR(long error) { return (void *)error; }
static inline long PTR_ERR(const void *ptr) { return (long)ptr; }
static inline bool IS_ERR(const void *ptr) { return IS_ERR_VALUE(ptr); }
static inline bool IS_ERR_OR_NULL(const void *ptr) { return !ptr || IS_ERR_VALUE(ptr); }

/* ---------------------------------------------------------------------------------------------- */
/* The shim runtime (pybcache/kpatch_rt). Patches call these only through the kernel names below.   */

struct pyb_kp_lock_class {
    unsigned int usage;            /* lockdep usage bits (the runtime's KP_USED_*), atomic fetch_or */
    unsigned int reported;         /* conflicts already reported, one bit each (atomic fetch_or) */
    int id;                        /* 1 + index in the runtime's class table (where usage sites, names and
                                    * the lock order live), 0 until first used (written once under the
                                    * runtime's dep_mu; acquire loads) */
    int spare;
    const void *spare_p[3];        /* unused: keeps spinlock_t the size it had, so that the memory
                                    * figures of patches that embed locks stay comparable */
};

/* A real pthread spinlock plus the debug state the checks need. `owner` is written by the holder
 * (set after acquiring, cleared before releasing) and read by any thread (relaxed atomics). */
typedef struct spinlock {
    pthread_spinlock_t raw;        /* initialised by spin_lock_init or DEFINE_SPINLOCK's constructor */
    void *owner;                   /* the holding thread's shim context, or NULL */
    const char *name;              /* for reports: the lock expression at its init, or its variable */
    struct pyb_kp_lock_class *cls; /* lockdep class (NULL: the lock's own `own` class) */
    struct pyb_kp_lock_class own;
} spinlock_t;

void pyb_kp_spin_init(spinlock_t *l, const char *name, struct pyb_kp_lock_class *cls);
void pyb_kp_spin_lock(spinlock_t *l, int irq_mode, unsigned long *flags, const char *file, int line);
int pyb_kp_spin_trylock(spinlock_t *l, int irq_mode, unsigned long *flags, const char *file, int line);
void pyb_kp_spin_unlock(spinlock_t *l, int irq_mode, unsigned long flags, const char *file, int line);
int pyb_kp_spin_is_locked(spinlock_t *l);
void pyb_kp_assert_held(spinlock_t *l, const char *file, int line);
void pyb_kp_might_sleep(int what, const char *file, int line);
void *pyb_kp_alloc(size_t size, gfp_t gfp, int zero, const char *file, int line);
void pyb_kp_free(const void *p, const char *file, int line);
int pyb_kp_warn(const char *file, int line);
__attribute__((noreturn)) void pyb_kp_bug(const char *file, int line);
__attribute__((format(printf, 4, 5))) void pyb_kp_printk(int level, const char *file, int line,
                                                         const char *fmt, ...);
int pyb_kp_ratelimit(void *state, const char *file, int line);
unsigned long pyb_kp_jiffies(void);

/* ---------------------------------------------------------------------------------------------- */
/* bug.h, printk.h                                                                                 */

#define KERN_SOH "\001"                  /* printk(KERN_ERR "...") as in the kernel: SOH, then the level */
#define KERN_EMERG KERN_SOH "0"
#define KERN_ALERT KERN_SOH "1"
#define KERN_CRIT KERN_SOH "2"
#define KERN_ERR KERN_SOH "3"
#define KERN_WARNING KERN_SOH "4"
#define KERN_NOTICE KERN_SOH "5"
#define KERN_INFO KERN_SOH "6"
#define KERN_DEBUG KERN_SOH "7"
#define KERN_CONT KERN_SOH "c"
#ifndef pr_fmt
#define pr_fmt(fmt) fmt
#endif
#define pr_emerg(fmt, ...) pyb_kp_printk(0, __FILE__, __LINE__, pr_fmt(fmt), ##__VA_ARGS__)
#define pr_crit(fmt, ...) pyb_kp_printk(2, __FILE__, __LINE__, pr_fmt(fmt), ##__VA_ARGS__)
#define pr_err(fmt, ...) pyb_kp_printk(3, __FILE__, __LINE__, pr_fmt(fmt), ##__VA_ARGS__)
#define pr_warn(fmt, ...) pyb_kp_printk(4, __FILE__, __LINE__, pr_fmt(fmt), ##__VA_ARGS__)
#define pr_warning pr_warn
#define pr_notice(fmt, ...) pyb_kp_printk(5, __FILE__, __LINE__, pr_fmt(fmt), ##__VA_ARGS__)
#define pr_info(fmt, ...) pyb_kp_printk(6, __FILE__, __LINE__, pr_fmt(fmt), ##__VA_ARGS__)
#define pr_debug(fmt, ...) do { if (0) pyb_kp_printk(7, __FILE__, __LINE__, pr_fmt(fmt), ##__VA_ARGS__); } while (0)
#define pr_devel pr_debug
/* printk(KERN_x "fmt"): the level is read from the KERN_SOH prefix (default: warning). */
#define printk(fmt, ...) pyb_kp_printk(-1, __FILE__, __LINE__, fmt, ##__VA_ARGS__)

/* Rate limits as the kernel's defaults: at most 10 messages per call site per 5 s. */
#define DEFAULT_RATELIMIT_INTERVAL (5 * HZ)
#define DEFAULT_RATELIMIT_BURST 10
struct ratelimit_state {
    pthread_mutex_t lock;
    int interval, burst, printed;
    unsigned long begin;
    unsigned long missed;
};
#define RATELIMIT_STATE_INIT(name, interval_init, burst_init) \
    { PTHREAD_MUTEX_INITIALIZER, (interval_init), (burst_init), 0, 0, 0 }
#define DEFINE_RATELIMIT_STATE(name, interval_init, burst_init) \
    struct ratelimit_state name = RATELIMIT_STATE_INIT(name, interval_init, burst_init)
#define __ratelimit(rs) pyb_kp_ratelimit((rs), __FILE__, __LINE__)
#define pyb_kp_printk_ratelimited(level, fmt, ...) ({ \
    static DEFINE_RATELIMIT_STATE(_rs_, DEFAULT_RATELIMIT_INTERVAL, DEFAULT_RATELIMIT_BURST); \
    if (__ratelimit(&_rs_)) pyb_kp_printk(level, __FILE__, __LINE__, fmt, ##__VA_ARGS__); })
#define printk_ratelimited(fmt, ...) pyb_kp_printk_ratelimited(-1, fmt, ##__VA_ARGS__)
#define pr_err_ratelimited(fmt, ...) pyb_kp_printk_ratelimited(3, pr_fmt(fmt), ##__VA_ARGS__)
#define pr_warn_ratelimited(fmt, ...) pyb_kp_printk_ratelimited(4, pr_fmt(fmt), ##__VA_ARGS__)
#define pr_notice_ratelimited(fmt, ...) pyb_kp_printk_ratelimited(5, pr_fmt(fmt), ##__VA_ARGS__)
#define pr_info_ratelimited(fmt, ...) pyb_kp_printk_ratelimited(6, pr_fmt(fmt), ##__VA_ARGS__)
#define pyb_kp_printk_once(level, fmt, ...) ({ static bool _done_; \
    if (!__atomic_exchange_n(&_done_, true, __ATOMIC_RELAXED)) pyb_kp_printk(level, __FILE__, __LINE__, fmt, ##__VA_ARGS__); })
#define printk_once(fmt, ...) pyb_kp_printk_once(-1, fmt, ##__VA_ARGS__)
#define pr_err_once(fmt, ...) pyb_kp_printk_once(3, pr_fmt(fmt), ##__VA_ARGS__)
#define pr_warn_once(fmt, ...) pyb_kp_printk_once(4, pr_fmt(fmt), ##__VA_ARGS__)
#define pr_info_once(fmt, ...) pyb_kp_printk_once(6, pr_fmt(fmt), ##__VA_ARGS__)

/* WARN_ON* report and return their condition; BUG_ON/BUG print "kernel BUG at FILE:LINE!" and abort. */
#define WARN_ON(cond) ({ int _w_ = !!(cond); if (unlikely(_w_)) pyb_kp_warn(__FILE__, __LINE__); unlikely(_w_); })
#define WARN_ON_ONCE(cond) ({ static bool _warned_; int _w_ = !!(cond); \
    if (unlikely(_w_) && !__atomic_exchange_n(&_warned_, true, __ATOMIC_RELAXED)) pyb_kp_warn(__FILE__, __LINE__); \
    unlikely(_w_); })
#define WARN(cond, fmt, ...) ({ int _w_ = !!(cond); if (unlikely(_w_)) { \
    pyb_kp_printk(4, __FILE__, __LINE__, fmt, ##__VA_ARGS__); pyb_kp_warn(__FILE__, __LINE__); } unlikely(_w_); })
#define WARN_ONCE(cond, fmt, ...) ({ static bool _warned_; int _w_ = !!(cond); \
    if (unlikely(_w_) && !__atomic_exchange_n(&_warned_, true, __ATOMIC_RELAXED)) { \
        pyb_kp_printk(4, __FILE__, __LINE__, fmt, ##__VA_ARGS__); pyb_kp_warn(__FILE__, __LINE__); } unlikely(_w_); })
#define BUG() pyb_kp_bug(__FILE__, __LINE__)
#define BUG_ON(cond) do { if (unlikely(cond)) pyb_kp_bug(__FILE__, __LINE__); } while (0)

/* ---------------------------------------------------------------------------------------------- */
/* sched.h: might_sleep                                                                            */

#define might_sleep() pyb_kp_might_sleep(PYB_KP_SLEEP_MIGHT_SLEEP_, __FILE__, __LINE__)
#define might_sleep_if(cond) do { if (cond) might_sleep(); } while (0)
#define cond_resched() ({ might_sleep(); 0; })
#define PYB_KP_SLEEP_ALLOC_ 0               /* = enum pyb_kp_sleeper in kpatch_abi.h */
#define PYB_KP_SLEEP_WAIT_EVENT_ 1
#define PYB_KP_SLEEP_SYNCHRONIZE_RCU_ 2
#define PYB_KP_SLEEP_MIGHT_SLEEP_ 3
#define jiffies pyb_kp_jiffies()            /* milliseconds of CLOCK_MONOTONIC (HZ = 1000) */

/* ---------------------------------------------------------------------------------------------- */
/* slab.h, gfp.h: every allocation goes through the lab's fault injection and memory accounting      */

#define ___GFP_DIRECT_RECLAIM 0x01u
#define ___GFP_KSWAPD_RECLAIM 0x02u
#define ___GFP_IO 0x04u
#define ___GFP_FS 0x08u
#define ___GFP_HIGH 0x10u
#define ___GFP_NOWARN 0x20u
#define ___GFP_NOFAIL 0x40u
#define ___GFP_ZERO 0x80u
#define ___GFP_NORETRY 0x100u
#define ___GFP_RETRY_MAYFAIL 0x200u
#define ___GFP_NOMEMALLOC 0x400u
#define ___GFP_ACCOUNT 0x800u
#define __GFP_DIRECT_RECLAIM ((gfp_t)___GFP_DIRECT_RECLAIM)
#define __GFP_KSWAPD_RECLAIM ((gfp_t)___GFP_KSWAPD_RECLAIM)
#define __GFP_RECLAIM ((gfp_t)(___GFP_DIRECT_RECLAIM | ___GFP_KSWAPD_RECLAIM))
#define __GFP_IO ((gfp_t)___GFP_IO)
#define __GFP_FS ((gfp_t)___GFP_FS)
#define __GFP_HIGH ((gfp_t)___GFP_HIGH)
#define __GFP_NOWARN ((gfp_t)___GFP_NOWARN)
#define __GFP_NOFAIL ((gfp_t)___GFP_NOFAIL)   /* never fails: bypasses fault injection, as failslab does */
#define __GFP_ZERO ((gfp_t)___GFP_ZERO)
#define __GFP_NORETRY ((gfp_t)___GFP_NORETRY)
#define __GFP_RETRY_MAYFAIL ((gfp_t)___GFP_RETRY_MAYFAIL)
#define __GFP_NOMEMALLOC ((gfp_t)___GFP_NOMEMALLOC)
#define __GFP_ACCOUNT ((gfp_t)___GFP_ACCOUNT)
#define GFP_ATOMIC (__GFP_HIGH | __GFP_KSWAPD_RECLAIM)
#define GFP_NOWAIT (__GFP_KSWAPD_RECLAIM | __GFP_NOWARN)
#define GFP_NOIO (__GFP_RECLAIM)
#define GFP_NOFS (__GFP_RECLAIM | __GFP_IO)
#define GFP_KERNEL (__GFP_RECLAIM | __GFP_IO | __GFP_FS)
#define GFP_KERNEL_ACCOUNT (GFP_KERNEL | __GFP_ACCOUNT)
static inline bool gfpflags_allow_blocking(gfp_t gfp) { return (gfp & __GFP_DIRECT_RECLAIM) != 0; }

#define ZERO_SIZE_PTR ((void *)16)
#define ZERO_OR_NULL_PTR(x) ((unsigned long)(x) <= (unsigned long)ZERO_SIZE_PTR)
#define kmalloc(size, gfp) pyb_kp_alloc((size), (gfp), 0, __FILE__, __LINE__)
#define kzalloc(size, gfp) pyb_kp_alloc((size), (gfp), 1, __FILE__, __LINE__)
#define kvmalloc(size, gfp) kmalloc(size, gfp)
#define kvzalloc(size, gfp) kzalloc(size, gfp)
/* kmalloc_array/kcalloc return NULL when n * size overflows, before any allocation. */
#define kmalloc_array(n, size, gfp) ({ size_t _b_; \
    __builtin_mul_overflow((size_t)(n), (size_t)(size), &_b_) ? NULL : pyb_kp_alloc(_b_, (gfp), 0, __FILE__, __LINE__); })
#define kcalloc(n, size, gfp) ({ size_t _b_; \
    __builtin_mul_overflow((size_t)(n), (size_t)(size), &_b_) ? NULL : pyb_kp_alloc(_b_, (gfp), 1, __FILE__, __LINE__); })
#define kvmalloc_array(n, size, gfp) kmalloc_array(n, size, gfp)
#define kvcalloc(n, size, gfp) kcalloc(n, size, gfp)
#define kfree(p) pyb_kp_free((p), __FILE__, __LINE__)
#define kvfree(p) kfree(p)
#define kfree_sensitive(p) kfree(p)
#define get_zeroed_page(gfp) ((unsigned long)kzalloc(PAGE_SIZE, (gfp)))
#define __get_free_page(gfp) ((unsigned long)kmalloc(PAGE_SIZE, (gfp)))
#define free_page(addr) kfree((void *)(addr))
#define struct_size(p, member, n) (sizeof(*(p)) + sizeof(*(p)->member) * (size_t)(n))
#define flex_array_size(p, member, n) (sizeof(*(p)->member) * (size_t)(n))

/* ---------------------------------------------------------------------------------------------- */
/* spinlock.h                                                                                      */

#define PYB_KP_IRQ_NONE 0     /* spin_lock: interrupts untouched */
#define PYB_KP_IRQ_DISABLE 1  /* spin_lock_irq / spin_unlock_irq: disable, then enable unconditionally */
#define PYB_KP_IRQ_SAVE 2     /* spin_lock_irqsave / spin_unlock_irqrestore: save, disable, restore */

#define __SPIN_LOCK_UNLOCKED(lockname) { 0, NULL, #lockname, NULL, { 0 } }
/* A file-scope spinlock; a constructor runs pthread_spin_init on it before any code can use it (glibc's
 * unlocked value is not 0 on every architecture). Its lockdep class is the variable itself. */
#define DEFINE_SPINLOCK(x) spinlock_t x = __SPIN_LOCK_UNLOCKED(x); \
    __attribute__((constructor)) static void pyb_kp_init_##x(void) { pyb_kp_spin_init(&x, #x, NULL); }
/* One lockdep class per call site, as the kernel's static lock_class_key does. */
#define spin_lock_init(l) do { static struct pyb_kp_lock_class _key_; pyb_kp_spin_init((l), #l, &_key_); } while (0)
#define spin_lock(l) pyb_kp_spin_lock((l), PYB_KP_IRQ_NONE, NULL, __FILE__, __LINE__)
#define spin_unlock(l) pyb_kp_spin_unlock((l), PYB_KP_IRQ_NONE, 0, __FILE__, __LINE__)
#define spin_lock_irq(l) pyb_kp_spin_lock((l), PYB_KP_IRQ_DISABLE, NULL, __FILE__, __LINE__)
#define spin_unlock_irq(l) pyb_kp_spin_unlock((l), PYB_KP_IRQ_DISABLE, 0, __FILE__, __LINE__)
#define spin_lock_irqsave(l, flags) pyb_kp_spin_lock((l), PYB_KP_IRQ_SAVE, &(flags), __FILE__, __LINE__)
#define spin_unlock_irqrestore(l, flags) pyb_kp_spin_unlock((l), PYB_KP_IRQ_SAVE, (flags), __FILE__, __LINE__)
#define spin_trylock(l) pyb_kp_spin_trylock((l), PYB_KP_IRQ_NONE, NULL, __FILE__, __LINE__)
#define spin_trylock_irqsave(l, flags) pyb_kp_spin_trylock((l), PYB_KP_IRQ_SAVE, &(flags), __FILE__, __LINE__)
#define spin_is_locked(l) pyb_kp_spin_is_locked(l)
#define assert_spin_locked(l) pyb_kp_assert_held((l), __FILE__, __LINE__)
#define lockdep_assert_held(l) pyb_kp_assert_held((l), __FILE__, __LINE__)

/* irqflags.h, hardirq.h, sched/mm.h: the simulated CPU's interrupt state, as lockdep tracks it. Enabling
 * interrupts marks every held lock as taken with interrupts enabled (lockdep's HARDIRQ-ON), so an
 * irq-safe lock held across local_irq_enable is an inconsistent lock state; enabling them in a hard-irq
 * handler (write_end in hard-irq) is reported. memalloc_noio_save opens a scope in which allocations lose
 * __GFP_IO and __GFP_FS, as current_gfp_context() strips them. */
#define PYB_KP_IRQ_OP_DISABLE 0
#define PYB_KP_IRQ_OP_ENABLE 1
#define PYB_KP_IRQ_OP_SAVE 2
#define PYB_KP_IRQ_OP_RESTORE 3
void pyb_kp_irq(int op, unsigned long *flags, const char *file, int line);
int pyb_kp_in_context(int what);
unsigned int pyb_kp_memalloc_noio(int save, unsigned int flags);
#define local_irq_disable() pyb_kp_irq(PYB_KP_IRQ_OP_DISABLE, NULL, __FILE__, __LINE__)
#define local_irq_enable() pyb_kp_irq(PYB_KP_IRQ_OP_ENABLE, NULL, __FILE__, __LINE__)
#define local_irq_save(flags) pyb_kp_irq(PYB_KP_IRQ_OP_SAVE, &(flags), __FILE__, __LINE__)
#define local_irq_restore(flags) do { unsigned long _f_ = (flags); \
    pyb_kp_irq(PYB_KP_IRQ_OP_RESTORE, &_f_, __FILE__, __LINE__); } while (0)
#define irqs_disabled() (pyb_kp_in_context(0) != 0)
#define in_hardirq() (pyb_kp_in_context(1) != 0)
#define in_irq() in_hardirq()
#define in_serving_softirq() (pyb_kp_in_context(2) != 0)
#define in_softirq() in_serving_softirq()
#define in_interrupt() (in_hardirq() || in_serving_softirq())
#define in_task() (!in_interrupt())
#define memalloc_noio_save() pyb_kp_memalloc_noio(1, 0)
#define memalloc_noio_restore(flags) ((void)pyb_kp_memalloc_noio(0, (flags)))

/* ---------------------------------------------------------------------------------------------- */
/* atomic.h: C11 atomics with the kernel's orderings. Non-value-returning RMWs (inc, dec, add, sub)  */
/* and read/set are unordered (relaxed); value-returning RMWs and cmpxchg/xchg are fully ordered     */
/* (a full barrier before and after, as the kernel's __atomic_op_fence), and a failed cmpxchg is     */
/* unordered. The _relaxed/_acquire/_release forms are as named.                                     */

typedef struct { int counter; } atomic_t;
typedef struct { s64 counter; } atomic64_t;
typedef atomic64_t atomic_long_t;
#define ATOMIC_INIT(i) { (i) }
#define ATOMIC64_INIT(i) { (i) }
#define ATOMIC_LONG_INIT(i) { (i) }

#define smp_mb() __atomic_thread_fence(__ATOMIC_SEQ_CST)
#define smp_rmb() __atomic_thread_fence(__ATOMIC_ACQUIRE)
#define smp_wmb() __atomic_thread_fence(__ATOMIC_RELEASE)
#define smp_mb__before_atomic() smp_mb()
#define smp_mb__after_atomic() smp_mb()
#define smp_load_acquire(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define smp_store_release(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define smp_store_mb(x, v) do { __atomic_store_n(&(x), (v), __ATOMIC_RELAXED); smp_mb(); } while (0)

/* Fully ordered generic forms on plain objects. */
#define xchg(p, v) ({ smp_mb(); __typeof__(*(p)) _r_ = __atomic_exchange_n((p), (v), __ATOMIC_SEQ_CST); smp_mb(); _r_; })
#define cmpxchg(p, old, new) ({ __typeof__(*(p)) _o_ = (old); smp_mb(); \
    if (__atomic_compare_exchange_n((p), &_o_, (new), false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) { smp_mb(); } _o_; })
#define cmpxchg_relaxed(p, old, new) ({ __typeof__(*(p)) _o_ = (old); \
    __atomic_compare_exchange_n((p), &_o_, (new), false, __ATOMIC_RELAXED, __ATOMIC_RELAXED); _o_; })
#define try_cmpxchg(p, pold, new) ({ smp_mb(); \
    bool _ok_ = __atomic_compare_exchange_n((p), (pold), (new), false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED); \
    if (_ok_) { smp_mb(); } _ok_; })

#define PYB_KP_ATOMIC_OPS(pfx, T, V)                                                                   \
static inline V pfx##_read(const T *v) { return __atomic_load_n(&v->counter, __ATOMIC_RELAXED); }     \
static inline V pfx##_read_acquire(const T *v) { return __atomic_load_n(&v->counter, __ATOMIC_ACQUIRE); } \
static inline void pfx##_set(T *v, V i) { __atomic_store_n(&v->counter, i, __ATOMIC_RELAXED); }       \
static inline void pfx##_set_release(T *v, V i) { __atomic_store_n(&v->counter, i, __ATOMIC_RELEASE); } \
static inline void pfx##_add(V i, T *v) { __atomic_fetch_add(&v->counter, i, __ATOMIC_RELAXED); }     \
static inline void pfx##_sub(V i, T *v) { __atomic_fetch_sub(&v->counter, i, __ATOMIC_RELAXED); }     \
static inline void pfx##_inc(T *v) { __atomic_fetch_add(&v->counter, 1, __ATOMIC_RELAXED); }          \
static inline void pfx##_dec(T *v) { __atomic_fetch_sub(&v->counter, 1, __ATOMIC_RELAXED); }          \
static inline V pfx##_fetch_add(V i, T *v)                                                             \
{ smp_mb(); V r = __atomic_fetch_add(&v->counter, i, __ATOMIC_SEQ_CST); smp_mb(); return r; }          \
static inline V pfx##_fetch_sub(V i, T *v)                                                             \
{ smp_mb(); V r = __atomic_fetch_sub(&v->counter, i, __ATOMIC_SEQ_CST); smp_mb(); return r; }          \
static inline V pfx##_add_return(V i, T *v) { return pfx##_fetch_add(i, v) + i; }                    \
static inline V pfx##_sub_return(V i, T *v) { return pfx##_fetch_sub(i, v) - i; }                    \
static inline V pfx##_inc_return(T *v) { return pfx##_add_return(1, v); }                             \
static inline V pfx##_dec_return(T *v) { return pfx##_sub_return(1, v); }                             \
static inline V pfx##_add_return_relaxed(V i, T *v)                                                   \
{ return __atomic_fetch_add(&v->counter, i, __ATOMIC_RELAXED) + i; }                                  \
static inline V pfx##_inc_return_relaxed(T *v) { return pfx##_add_return_relaxed(1, v); }            \
static inline V pfx##_dec_return_relaxed(T *v) { return pfx##_add_return_relaxed(-1, v); }           \
static inline V pfx##_fetch_add_release(V i, T *v)                                                     \
{ return __atomic_fetch_add(&v->counter, i, __ATOMIC_RELEASE); }                                      \
static inline V pfx##_fetch_sub_release(V i, T *v)                                                     \
{ return __atomic_fetch_sub(&v->counter, i, __ATOMIC_RELEASE); }                                      \
static inline bool pfx##_dec_and_test(T *v) { return pfx##_dec_return(v) == 0; }                      \
static inline bool pfx##_inc_and_test(T *v) { return pfx##_inc_return(v) == 0; }                      \
static inline bool pfx##_sub_and_test(V i, T *v) { return pfx##_sub_return(i, v) == 0; }              \
static inline V pfx##_xchg(T *v, V n) { return xchg(&v->counter, n); }                               \
static inline V pfx##_cmpxchg(T *v, V o, V n) { return cmpxchg(&v->counter, o, n); }                  \
static inline bool pfx##_try_cmpxchg(T *v, V *o, V n) { return try_cmpxchg(&v->counter, o, n); }      \
/* add_unless: add i unless the value is u; true if it added. Fully ordered when it adds. */           \
static inline bool pfx##_add_unless(T *v, V i, V u)                                                    \
{                                                                                                      \
    V c = pfx##_read(v);                                                                               \
    do {                                                                                               \
        if (c == u)                                                                                    \
            return false;                                                                              \
    } while (!pfx##_try_cmpxchg(v, &c, c + i));                                                        \
    return true;                                                                                       \
}                                                                                                      \
static inline bool pfx##_inc_not_zero(T *v) { return pfx##_add_unless(v, 1, 0); }                     \
static inline V pfx##_dec_if_positive(T *v)                                                            \
{                                                                                                      \
    V c = pfx##_read(v);                                                                               \
    do {                                                                                               \
        if (c <= 0)                                                                                    \
            return c - 1;                                                                              \
    } while (!pfx##_try_cmpxchg(v, &c, c - 1));                                                        \
    return c - 1;                                                                                      \
}

PYB_KP_ATOMIC_OPS(atomic, atomic_t, int)
PYB_KP_ATOMIC_OPS(atomic64, atomic64_t, s64)
PYB_KP_ATOMIC_OPS(atomic_long, atomic_long_t, s64)

/* ---------------------------------------------------------------------------------------------- */
/* wait.h: a wait queue that cannot lose a wakeup. wait_event(wq, cond) samples the queue's wake     */
/* sequence, then evaluates cond, and sleeps only if no wake_up has happened since the sample (a     */
/* futex compare); wake_up advances the sequence (fully ordered) and wakes sleepers. So a waker that */
/* makes cond true before calling wake_up is always seen. cond is evaluated in the waiting thread    */
/* and may take a spinlock. Exclusive waits are not modelled: wake_up wakes every waiter.            */

typedef struct wait_queue_head {
    unsigned int seq;      /* wake sequence: RMW seq_cst by wake_up, loaded seq_cst by waiters */
    unsigned int waiters;  /* threads between their first sample and leaving (seq_cst RMWs) */
} wait_queue_head_t;

#define __WAIT_QUEUE_HEAD_INITIALIZER(name) { 0, 0 }
#define DECLARE_WAIT_QUEUE_HEAD(name) wait_queue_head_t name = __WAIT_QUEUE_HEAD_INITIALIZER(name)
static inline void init_waitqueue_head(wait_queue_head_t *wq) { wq->seq = 0; wq->waiters = 0; }
void pyb_kp_wait_enter(wait_queue_head_t *wq, const char *file, int line);
void pyb_kp_wait_sleep(wait_queue_head_t *wq, unsigned int seq, unsigned long long *t0, const char *file, int line);
void pyb_kp_wait_leave(wait_queue_head_t *wq);
void pyb_kp_wake_up(wait_queue_head_t *wq);
/* The condition runs with the task's state already set to sleep (after the first evaluation, as
 * ___wait_event in the kernel): a sleeping call inside it is reported (pyb_kp_wait_cond). */
void pyb_kp_wait_cond(int on);
#define wait_event(wq, cond) do {                                                                      \
    unsigned long long _t0_ = 0;                                                                       \
    pyb_kp_wait_enter(&(wq), __FILE__, __LINE__);                                                      \
    for (int _first_ = 1;; _first_ = 0) {                                                              \
        unsigned int _seq_ = __atomic_load_n(&(wq).seq, __ATOMIC_SEQ_CST);                             \
        if (!_first_) pyb_kp_wait_cond(1);                                                             \
        int _c_ = !!(cond);                                                                            \
        if (!_first_) pyb_kp_wait_cond(0);                                                             \
        if (_c_)                                                                                       \
            break;                                                                                     \
        pyb_kp_wait_sleep(&(wq), _seq_, &_t0_, __FILE__, __LINE__);                                    \
    }                                                                                                  \
    pyb_kp_wait_leave(&(wq));                                                                          \
} while (0)
#define wait_event_idle(wq, cond) wait_event(wq, cond)
#define io_wait_event(wq, cond) wait_event(wq, cond)
#define wake_up(wq) pyb_kp_wake_up(wq)
#define wake_up_all(wq) pyb_kp_wake_up(wq)
#define wake_up_interruptible(wq) pyb_kp_wake_up(wq)
static inline bool waitqueue_active(wait_queue_head_t *wq) { return __atomic_load_n(&wq->waiters, __ATOMIC_SEQ_CST) != 0; }

/* ---------------------------------------------------------------------------------------------- */
/* rcupdate.h: a userspace RCU for a harness that controls its threads (quiescent-state based).      */
/* Guarantees:                                                                                      */
/*  - synchronize_rcu returns only after every rcu_read_lock section that began before it was called */
/*    has ended (on every thread), and everything the caller did before it happens-before those     */
/*    readers' later sections.                                                                      */
/*  - A kfree_rcu / call_rcu callback runs only after every read-side section that began before the  */
/*    call has ended: a reader that loaded the object before it was unpublished (then queued) never  */
/*    sees it freed; a section that begins later cannot find it.                                    */
/*  - It runs charged to the tracker whose operation queued it (its reports, its allocations), only  */
/*    at that tracker's poll points: after each of its operations has returned (outside it: never in */
/*    write_end's hard-irq context; this poll never blocks), in its rcu_barrier and in its close.    */
/*    Context: simulated soft-irq (interrupts enabled, atomic: a callback must not sleep). Callbacks */
/*    of one tracker run in the order they were queued. One that escapes breaks its tracker.         */
/*  - rcu_barrier returns once every callback its tracker had queued has run, including one another  */
/*    thread of the tracker is running; close runs them all (and those they queue) before it frees, */
/*    both bounded by the hung bound. A callback queued outside any operation never runs.           */
/* The protocol that gives these is stated in the runtime, csrc/kpatch/kpatch_rt.c (section RCU). */
/* Read-side sections are atomic context: a sleeping call inside one is reported, as with             */
/* non-preemptible RCU. Since v5.0 a region with interrupts disabled, a spinlock held, or in hard-irq */
/* or soft-irq context is a reader too (synchronize_rcu waits for it; rcu_dereference_sched is legal  */
/* there, rcupdate.h's rcu_read_lock_sched_held being !preemptible()); plain rcu_dereference still    */
/* wants rcu_read_lock. Not provided: SRCU, expedited grace periods; rcu_read_lock_bh/sched are       */
/* aliases of rcu_read_lock.                                                                        */

struct rcu_head {
    struct rcu_head *next;            /* the queueing tracker's pending list (under its cb_mu) */
    void (*func)(struct rcu_head *);  /* call_rcu callback, or NULL for kfree_rcu */
    void *obj;                        /* kfree_rcu: the object to free */
    unsigned long long gp;            /* grace period the callback waits for */
};
typedef struct rcu_head rcu_head_t;
void pyb_kp_rcu_read_lock(void);
void pyb_kp_rcu_read_unlock(const char *file, int line);
int pyb_kp_rcu_read_lock_held(void);
void pyb_kp_rcu_dereference_check(const char *file, int line);
void pyb_kp_synchronize_rcu(const char *file, int line);
void pyb_kp_call_rcu(struct rcu_head *head, void (*func)(struct rcu_head *), void *obj);
#define rcu_read_lock() pyb_kp_rcu_read_lock()
#define rcu_read_unlock() pyb_kp_rcu_read_unlock(__FILE__, __LINE__)
#define rcu_read_lock_bh() rcu_read_lock()
#define rcu_read_unlock_bh() rcu_read_unlock()
#define rcu_read_lock_held() pyb_kp_rcu_read_lock_held()
#define rcu_read_lock_sched() rcu_read_lock()
#define rcu_read_unlock_sched() rcu_read_unlock()
int pyb_kp_rcu_read_lock_sched_held(void);
#define rcu_read_lock_sched_held() pyb_kp_rcu_read_lock_sched_held()
#define rcu_read_lock_any_held() (rcu_read_lock_held() || rcu_read_lock_sched_held())
#define rcu_dereference_sched_check(p, c) rcu_dereference_check(p, (c) || rcu_read_lock_sched_held())
#define rcu_dereference_sched(p) rcu_dereference_sched_check(p, 0)
#define rcu_dereference(p) ({ pyb_kp_rcu_dereference_check(__FILE__, __LINE__); __atomic_load_n(&(p), __ATOMIC_ACQUIRE); })
#define rcu_dereference_check(p, c) ({ if (!(c)) pyb_kp_rcu_dereference_check(__FILE__, __LINE__); \
    __atomic_load_n(&(p), __ATOMIC_ACQUIRE); })
#define rcu_dereference_protected(p, c) ({ WARN_ON_ONCE(!(c)); __atomic_load_n(&(p), __ATOMIC_RELAXED); })
#define rcu_dereference_raw(p) __atomic_load_n(&(p), __ATOMIC_ACQUIRE)
#define rcu_access_pointer(p) __atomic_load_n(&(p), __ATOMIC_RELAXED)
#define rcu_assign_pointer(p, v) __atomic_store_n(&(p), (v), __ATOMIC_RELEASE)
#define RCU_INIT_POINTER(p, v) __atomic_store_n(&(p), (v), __ATOMIC_RELAXED)
#define rcu_replace_pointer(p, v, c) ({ __typeof__(p) _old_ = rcu_dereference_protected(p, c); \
    rcu_assign_pointer(p, v); _old_; })
#define synchronize_rcu() pyb_kp_synchronize_rcu(__FILE__, __LINE__)
#define call_rcu(head, fn) pyb_kp_call_rcu((head), (fn), NULL)
/* kfree_rcu(ptr, rhf): free ptr after a grace period, using its rcu_head field rhf (never sleeps). */
#define kfree_rcu(ptr, rhf) do { __typeof__(ptr) _p_ = (ptr); if (_p_) pyb_kp_call_rcu(&_p_->rhf, NULL, _p_); } while (0)
#define kfree_rcu_mightsleep(ptr) do { synchronize_rcu(); kfree(ptr); } while (0)
#define kvfree_rcu(ptr, rhf) kfree_rcu(ptr, rhf)

/* Test hooks, for the shim's own tests (tests/kpatch/test_kpatch_rcu.py); a patch never needs them. A patch
 * file that defines pyb_kp_test_hook is called at these points of the shim's RCU poll, on the polling
 * thread with no shim lock held, so that a test can hold that thread there and force an interleaving.
 * A module whose patch does not define it never calls it (a weak, hidden reference in the runtime). */
enum pyb_kp_hook {
    PYB_KP_HOOK_POLL_SCANNED = 1,  /* the readers were scanned; no callback collected yet (n = 0) */
    PYB_KP_HOOK_POLL_COLLECTED,    /* n callbacks were taken off the pending list; none has run yet */
};
void pyb_kp_test_hook(int point, unsigned long long n);

/* ---------------------------------------------------------------------------------------------- */
/* bio.h, blkdev.h, and the bcache stand-in                                                        */

enum req_op { REQ_OP_READ = 0, REQ_OP_WRITE = 1, REQ_OP_FLUSH = 2, REQ_OP_DISCARD = 3 };
#define REQ_OP_BITS 8
#define REQ_OP_MASK ((1u << REQ_OP_BITS) - 1)
#define READ 0
#define WRITE 1
struct block_device {
    sector_t pyb_nr_sectors;       /* the shim's: size in 512-byte sectors (use bdev_nr_sectors) */
};
static inline sector_t bdev_nr_sectors(struct block_device *bdev) { return bdev->pyb_nr_sectors; }
static inline loff_t bdev_nr_bytes(struct block_device *bdev) { return (loff_t)(bdev->pyb_nr_sectors << SECTOR_SHIFT); }
struct bvec_iter {
    sector_t bi_sector;            /* first 512-byte sector */
    unsigned int bi_size;          /* bytes remaining */
};
struct bio {
    struct block_device *bi_bdev;
    blk_opf_t bi_opf;              /* REQ_OP_* in the low bits, flags above */
    struct bvec_iter bi_iter;
    void *bi_private;
    void *pyb_write_private;       /* the shim's: see pyb_write_private() below */
};
static inline enum req_op bio_op(const struct bio *bio) { return (enum req_op)(bio->bi_opf & REQ_OP_MASK); }
static inline bool op_is_write(blk_opf_t op) { return (op & 1) != 0; }
static inline int bio_data_dir(const struct bio *bio) { return op_is_write(bio->bi_opf) ? WRITE : READ; }
#define bio_sectors(bio) ((sector_t)((bio)->bi_iter.bi_size >> SECTOR_SHIFT))
#define bio_end_sector(bio) ((bio)->bi_iter.bi_sector + bio_sectors(bio))

/* The bcache device's disk (drivers/md/bcache/bcache.h: struct bcache_device's `disk`): its capacity
 * is what bcache exports, bdev_nr_sectors(dc->bdev) - dc->sb.data_offset (super.c's set_capacity). */
struct gendisk {
    sector_t pyb_capacity;         /* the shim's: use get_capacity() */
    char disk_name[32];
};
static inline sector_t get_capacity(struct gendisk *disk) { return disk->pyb_capacity; }
/* The subset of struct bcache_device a tracker may read. */
struct bcache_device {
    struct gendisk *disk;
    char name[12];                 /* "bcache0" */
};
/* The subset of struct cache_sb a tracker may read: the backing device's data offset, in sectors. The lab's
 * tracker is handed sectors of the bcache device, so the shim's backing device begins with its data:
 * data_offset is 0 here (bcache's default is BDEV_DATA_START_DEFAULT, 16 sectors). */
struct cache_sb {
    u64 data_offset;
    u16 block_size;                /* sectors; 1 here (512-byte blocks) */
};

/* The cached device as a tracker sees it: the backing device, the bcache disk, the superblock's sizes, the
 * patch's own state. Written by the shim before init and never changed after (read from any thread).
 * A patch that wants its state inside the struct, as the real patch adds fields to drivers/md/bcache's
 * struct cached_dev, defines PYBCACHE_CACHED_DEV_FIELDS (member declarations) before its first include: the
 * shim allocates the struct at the size the patch sees (PYBCACHE_PATCH exports it) and zeroes it. */
struct cached_dev {
    struct bcache_device disk;     /* dc->disk.disk: get_capacity() = the device's sectors */
    struct block_device *bdev;     /* backing device: bdev_nr_sectors(dc->bdev) */
    struct cache_sb sb;
    void *bypass;                  /* the patch's state, set by its init (NULL before) */
    void *patch_private;           /* the same, under another name (NULL before init) */
#ifdef PYBCACHE_CACHED_DEV_FIELDS
    PYBCACHE_CACHED_DEV_FIELDS
#endif
};

/* The per-write private area: the fields a patch adds to bcache's `struct search` (one per request,
 * alive from the write's submission to cached_dev_write_complete). Declare its size in the ops
 * (.write_private_size = sizeof(struct my_write)); pyb_write_private(bio) then returns it: zeroed
 * before write_start, the same bytes in the write_end of the same bio. NULL when none is declared (and
 * in read_bypass). write_end is handed the bio as cached_dev_write_complete sees s->orig_bio of a
 * bypass write, its iterator consumed by bch_data_invalidate (bi_size 0, bi_sector at the write's end;
 * drivers/md/bcache/request.c:108-128 of Linux 6.12): a tracker records its range here at start.
 * (`check-patch --end-bio intact` hands it an untouched bio, for a call site that saves a copy.) */
static inline void *pyb_write_private(const struct bio *bio) { return bio->pyb_write_private; }

/* A patch's operations. write_start runs in process context before the write's invalidation and may
 * sleep; write_end runs in hard-irq context when the backing write has completed; read_bypass runs
 * in process context on a cache miss and returns true when the miss must not be cached. init and
 * exit run in process context without fault injection; init returns 0 or a negative errno. */
struct pybcache_patch_ops {
    const char *name;
    int (*init)(struct cached_dev *dc);
    void (*exit)(struct cached_dev *dc);
    void (*write_start)(struct cached_dev *dc, struct bio *bio);
    void (*write_end)(struct cached_dev *dc, struct bio *bio);
    bool (*read_bypass)(struct cached_dev *dc, struct bio *bio);
    size_t write_private_size;     /* bytes of per-write private area (pyb_write_private), 0: none */
    /* The patch's declared bypass granularity, in bytes: a read may bypass while a write in flight lies
     * in the same aligned region of this size (md-bitmap's hijacked half page, say). 0: the reference's
     * 32 MiB chunks. A multiple of 32 MiB; check-patch fails a bypass coarser than this. */
    unsigned long long bypass_granularity;
};

/* PYBCACHE_PATCH(ops): declare the patch's operations (exactly once, in the patch file). */
#define PYBCACHE_PATCH(ops) \
    __attribute__((visibility("default"), used)) const struct pybcache_patch_ops *const pybcache_patch_ops_ptr = &(ops); \
    __attribute__((visibility("default"), used)) const size_t pybcache_patch_dc_size = sizeof(struct cached_dev); \
    __attribute__((visibility("default"), used)) const size_t pybcache_patch_dc_align = __alignof__(struct cached_dev)

#include "kpatch_ext.h"

#endif /* PYBCACHE_KPATCH_H */
