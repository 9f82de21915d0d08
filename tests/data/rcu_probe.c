// SPDX-License-Identifier: GPL-2.0-only
/*
 * Purpose-built for tests/test_kpatch_rcu.py: a patch that lets a test force interleavings of the shim's
 * RCU machinery and of its escapes. Each write_start does what the first 4 KiB block of its bio names
 * (the CMD_* below); read_bypass of block CMD_READ reads the published object inside rcu_read_lock.
 * The test drives the rest through the kpt_* functions, which it calls with ctypes on the same loaded
 * module (a second dlopen of a path returns the handle already loaded, so the state below is shared):
 * semaphores to sequence threads, a one-shot per-thread trap at a shim test hook (kpatch.h), and an RCU
 * read-side section held by a thread outside any operation.
 */
#include <semaphore.h>
#include <time.h>

#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/rcupdate.h>
#include <linux/bio.h>
#include <pybcache/kpatch.h>

enum { CMD_NOP, CMD_PUBLISH, CMD_RETIRE, CMD_QUEUE_FREE, CMD_QUEUE_CALLBACK, CMD_READ, CMD_RECURSE, CMD_LOCK };

#define OBJ_MAGIC 0x0b1ec7edu
#define NSEMS 8
#define WAIT_SECONDS 30                 /* a test that loses a post fails instead of hanging */

struct obj {
        unsigned int magic;
        struct rcu_head rcu;
};

struct state {
        struct obj __rcu *cur;          /* the published object (CMD_PUBLISH, CMD_RETIRE) */
};

struct holder {
        struct rcu_head rcu;
};

static sem_t sems[NSEMS];
static DEFINE_SPINLOCK(shared_lock);    /* one lock for every instance of the module (CMD_RECURSE, CMD_LOCK) */
static DEFINE_SPINLOCK(callback_lock);  /* taken by the call_rcu callback, with interrupts on */
static int read_post = -1, read_wait = -1;      /* CMD_READ: post / wait inside its read-side section */
static unsigned long stale_reads;       /* CMD_READ found the object freed (atomic) */
static __thread int trap_point, trap_post, trap_wait;
static __thread unsigned long long trap_n;

void kpt_post(int i)
{
        if (i >= 0 && i < NSEMS)
                sem_post(&sems[i]);
}

/* 0 once semaphore i is posted, -1 after WAIT_SECONDS. */
int kpt_wait(int i)
{
        struct timespec deadline, now;

        if (i < 0 || i >= NSEMS)
                return 0;
        clock_gettime(CLOCK_REALTIME, &deadline);
        deadline.tv_sec += WAIT_SECONDS;
        for (;;) {
                if (sem_timedwait(&sems[i], &deadline) == 0)
                        return 0;
                clock_gettime(CLOCK_REALTIME, &now);
                if (now.tv_sec > deadline.tv_sec ||
                    (now.tv_sec == deadline.tv_sec && now.tv_nsec >= deadline.tv_nsec))
                        return -1;
        }
}

/* Forget every post, trap and counter (called at the start of each test). */
void kpt_reset(void)
{
        for (int i = 0; i < NSEMS; i++) {
                sem_destroy(&sems[i]);
                sem_init(&sems[i], 0, 0);
        }
        read_post = read_wait = -1;
        __atomic_store_n(&stale_reads, 0, __ATOMIC_RELAXED);
}

__attribute__((constructor)) static void kpt_init(void)
{
        for (int i = 0; i < NSEMS; i++)
                sem_init(&sems[i], 0, 0);
}

/* The calling thread, the next time it reaches shim hook `point`, posts `post` and waits for `wait`. */
void kpt_trap(int point, int post, int wait)
{
        trap_point = point;
        trap_post = post;
        trap_wait = wait;
}

/* The `n` of the last hook this thread was trapped at. */
unsigned long long kpt_trapped_n(void) { return trap_n; }

void kpt_read_sync(int post, int wait)
{
        read_post = post;
        read_wait = wait;
}

unsigned long kpt_stale_reads(void) { return __atomic_load_n(&stale_reads, __ATOMIC_RELAXED); }

void kpt_reader_lock(void) { rcu_read_lock(); }
void kpt_reader_unlock(void) { rcu_read_unlock(); }

void pyb_kp_test_hook(int point, unsigned long long n)
{
        if (point != trap_point)
                return;
        trap_point = 0;
        trap_n = n;
        kpt_post(trap_post);
        kpt_wait(trap_wait);
}

static void probe_callback(struct rcu_head *head)
{
        spin_lock(&callback_lock);      /* interrupts on: right in soft-irq context, not in hard-irq */
        spin_unlock(&callback_lock);
        WARN_ON(1);                     /* on purpose: the report records the context the callback ran in */
        kfree(container_of(head, struct holder, rcu));
}

static int probe_init(struct cached_dev *dc)
{
        dc->bypass = kzalloc(sizeof(struct state), GFP_KERNEL);
        return dc->bypass ? 0 : -ENOMEM;
}

static void probe_exit(struct cached_dev *dc)
{
        struct state *s = dc->bypass;

        kfree(rcu_dereference_protected(s->cur, true));
        kfree(s);
}

static void queue_callback(gfp_t gfp)
{
        struct holder *h = kmalloc(sizeof(*h), gfp | __GFP_NOFAIL);

        call_rcu(&h->rcu, probe_callback);
}

static void probe_write_start(struct cached_dev *dc, struct bio *bio)
{
        struct state *s = dc->bypass;
        struct obj *o;

        switch (bio->bi_iter.bi_sector >> 3) {
        case CMD_PUBLISH:
                o = kzalloc(sizeof(*o), GFP_NOIO | __GFP_NOFAIL);
                o->magic = OBJ_MAGIC;
                kfree(xchg(&s->cur, o));
                break;
        case CMD_RETIRE:
                o = xchg(&s->cur, NULL);        /* unpublished, then freed after a grace period */
                kfree_rcu(o, rcu);
                break;
        case CMD_QUEUE_FREE:
                o = kzalloc(sizeof(*o), GFP_NOIO | __GFP_NOFAIL);
                kfree_rcu(o, rcu);
                break;
        case CMD_QUEUE_CALLBACK:
                queue_callback(GFP_NOIO);
                break;
        case CMD_RECURSE:
                spin_lock(&shared_lock);
                spin_lock(&shared_lock);        /* fatal: the operation escapes holding shared_lock */
                break;
        case CMD_LOCK:
                spin_lock(&shared_lock);
                spin_unlock(&shared_lock);
                break;
        }
}

static void probe_write_end(struct cached_dev *dc, struct bio *bio)
{
        (void)dc;
        /* the command is the bio's last 4 KiB block: the same whether the bio is consumed (0 sectors, bi_sector
         * at its end) or intact */
        if (((bio_end_sector(bio) - 1) >> 3) == CMD_QUEUE_CALLBACK)
                queue_callback(GFP_ATOMIC);     /* queued in hard-irq context */
}

static bool probe_read_bypass(struct cached_dev *dc, struct bio *bio)
{
        struct state *s = dc->bypass;
        struct obj *o;

        if ((bio->bi_iter.bi_sector >> 3) != CMD_READ)
                return false;
        rcu_read_lock();
        o = rcu_dereference(s->cur);
        kpt_post(read_post);
        kpt_wait(read_wait);
        if (o && WARN_ON(READ_ONCE(o->magic) != OBJ_MAGIC))     /* freed under the reader */
                __atomic_fetch_add(&stale_reads, 1, __ATOMIC_RELAXED);
        rcu_read_unlock();
        return o != NULL;
}

static const struct pybcache_patch_ops probe_ops = {
        .name = "rcu-probe",
        .init = probe_init,
        .exit = probe_exit,
        .write_start = probe_write_start,
        .write_end = probe_write_end,
        .read_bypass = probe_read_bypass,
};
PYBCACHE_PATCH(probe_ops);
