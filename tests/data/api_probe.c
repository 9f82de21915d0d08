// SPDX-License-Identifier: GPL-2.0-only
/* The shim's second API group, probed (tests/kpatch/test_kpatch_api.py). The write's GiB index picks the
 * case (write_start, and write_end where it says so); read_bypass of GiB 6 logs the per-CPU sums and of
 * GiB 10 the seqlock-protected pair. Each case logs what the test checks. */
/* The per-tracker state lives in struct cached_dev, as the real patch's fields would (static variables are
 * shared by every tracker of the module). */
#define PYBCACHE_CACHED_DEV_FIELDS unsigned long probe_embedded[4]; int probe_magic; \
        long *dyn_per_cpu; struct kmem_cache *probe_cache;
#include <linux/bottom_half.h>
#include <linux/mm.h>
#include <linux/mutex.h>
#include <linux/percpu.h>
#include <linux/preempt.h>
#include <linux/rwlock.h>
#include <linux/sched.h>
#include <linux/seqlock.h>
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/wait.h>
#include <pybcache/kpatch.h>

static DEFINE_MUTEX(probe_mutex);
static DEFINE_RWLOCK(read_both);        /* read in process context and in hard-irq: consistent */
static DEFINE_RWLOCK(write_then_irq);   /* written with interrupts on, read in hard-irq: inconsistent */
static DEFINE_RWLOCK(write_irqsave);    /* written with interrupts saved, read in hard-irq: consistent */
static DEFINE_SPINLOCK(bh_lock);
static DEFINE_SEQLOCK(pair_lock);
static seqcount_t left_odd = SEQCNT_ZERO(left_odd);   /* GiB 16: a writer that never ends */
static DEFINE_RWLOCK(left_held);                      /* GiB 17: written and never released */
static u64 pair_a, pair_b;              /* written under pair_lock, read by read_seqbegin/retry */
static DEFINE_PER_CPU(long, starts_per_cpu);
static DECLARE_WAIT_QUEUE_HEAD(never_wq);
static int never;                       /* never set: wait_event_timeout's condition */
static struct page *pages[16];
static void *objects[16];
static unsigned long counter;

static void probe_ctor(void *p) { *(u32 *)p = 0xc0ffee; }

static int probe_init(struct cached_dev *dc)
{
        pr_info("capacity %llu bdev %llu offset %llu name %s embedded %lu",
                (unsigned long long)get_capacity(dc->disk.disk), (unsigned long long)bdev_nr_sectors(dc->bdev),
                (unsigned long long)dc->sb.data_offset, dc->disk.name,
                dc->probe_embedded[0] + dc->probe_embedded[3] + (unsigned long)dc->probe_magic);
        dc->probe_magic = 77;
        dc->dyn_per_cpu = alloc_percpu(long);
        dc->probe_cache = kmem_cache_create("probe_cache", 48, 0, SLAB_HWCACHE_ALIGN, probe_ctor);
        return dc->dyn_per_cpu && dc->probe_cache ? 0 : -ENOMEM;
}

static void probe_exit(struct cached_dev *dc)
{
        free_percpu(dc->dyn_per_cpu);
        kmem_cache_destroy(dc->probe_cache);   /* warns if an object is still allocated */
}

static void probe_start(struct cached_dev *dc, struct bio *bio)
{
        sector_t s = bio->bi_iter.bi_sector;
        unsigned int mode = (unsigned int)(s >> 21), slot = (unsigned int)((s >> 3) % 16);
        unsigned long flags;
        void *p;
        long r;
        int cpu;
        switch (mode) {
        case 0:
                mutex_lock(&probe_mutex);
                counter++;
                mutex_unlock(&probe_mutex);
                pr_info("mutex counter %lu magic %d", counter, dc->probe_magic);
                break;
        case 2:
                read_lock(&read_both);
                read_unlock(&read_both);
                break;
        case 3:
                write_lock(&write_then_irq);
                write_unlock(&write_then_irq);
                break;
        case 4:
                write_lock_irqsave(&write_irqsave, flags);
                write_unlock_irqrestore(&write_irqsave, flags);
                break;
        case 5:
                preempt_disable();
                p = kmalloc(32, GFP_KERNEL);
                preempt_enable();
                kfree(p);
                break;
        case 6:
                cpu = get_cpu();
                this_cpu_inc(starts_per_cpu);
                (*per_cpu_ptr(dc->dyn_per_cpu, cpu))++;
                put_cpu();
                break;
        case 7:
                pr_info("cpu %d", smp_processor_id());
                break;
        case 8:
                spin_lock_bh(&bh_lock);
                p = kmalloc(32, GFP_NOIO);
                spin_unlock_bh(&bh_lock);
                kfree(p);
                break;
        case 10:
                write_seqlock(&pair_lock);
                pair_a++;
                pair_b++;
                write_sequnlock(&pair_lock);
                break;
        case 11:
                r = wait_event_timeout(never_wq, READ_ONCE(never), HZ);
                pr_info("timeout false %ld", r);
                r = wait_event_timeout(never_wq, !READ_ONCE(never), HZ);
                pr_info("timeout true %ld", r);
                break;
        case 12:
                r = io_schedule_timeout(HZ);
                pr_info("running %ld", r);
                set_current_state(TASK_UNINTERRUPTIBLE);
                r = io_schedule_timeout(HZ / 10);
                pr_info("sleeping %ld", r);
                break;
        case 13:
                pages[slot] = alloc_page(GFP_NOIO);
                if (pages[slot])
                        memset(page_address(pages[slot]), 0xab, PAGE_SIZE);
                pr_info("page %s", pages[slot] ? "allocated" : "NULL");
                break;
        case 14:
                objects[slot] = kmem_cache_alloc(dc->probe_cache, GFP_NOIO);
                pr_info("object %x", objects[slot] ? *(u32 *)objects[slot] : 0);
                break;
        case 15:
                mutex_lock(&probe_mutex);            /* returns holding it: released by write_end */
                break;
        case 16:
                preempt_disable();
                raw_write_seqcount_begin(&left_odd); /* the count stays odd */
                preempt_enable();
                break;
        case 17:
                write_lock_irq(&left_held);          /* returns holding it */
                break;
        default:
                break;
        }
}

static void probe_end(struct cached_dev *dc, struct bio *bio)
{
        sector_t s = bio->bi_iter.bi_sector;
        unsigned int mode = (unsigned int)(s >> 21), slot = (unsigned int)((s >> 3) % 16);
        (void)dc;
        switch (mode) {
        case 1:
                mutex_lock(&probe_mutex);            /* a sleeping lock in hard-irq context */
                mutex_unlock(&probe_mutex);
                break;
        case 2:
                read_lock(&read_both);
                read_unlock(&read_both);
                break;
        case 3:
                read_lock(&write_then_irq);
                read_unlock(&write_then_irq);
                break;
        case 4:
                read_lock(&write_irqsave);
                read_unlock(&write_irqsave);
                break;
        case 9:
                local_bh_disable();
                local_bh_enable();                   /* in hard-irq context: a warning */
                break;
        case 13:
                if (pages[slot])
                        __free_page(pages[slot]);
                pages[slot] = NULL;
                break;
        case 14:
                kmem_cache_free(dc->probe_cache, objects[slot]);
                objects[slot] = NULL;
                break;
        case 15:
                mutex_unlock(&probe_mutex);          /* not the owner */
                break;
        default:
                break;
        }
}

static bool probe_read(struct cached_dev *dc, struct bio *bio)
{
        unsigned int mode = (unsigned int)(bio->bi_iter.bi_sector >> 21), seq;
        long sum = 0, dyn = 0;
        u64 a, b;
        int cpu;
        (void)dc;
        if (mode == 6) {
                for_each_possible_cpu(cpu) {
                        sum += per_cpu(starts_per_cpu, cpu);
                        dyn += *per_cpu_ptr(dc->dyn_per_cpu, cpu);
                }
                pr_info("percpu %ld %ld", sum, dyn);
        } else if (mode == 16) {
                seq = read_seqcount_begin(&left_odd);  /* spins: no writer will end */
                pr_info("seqcount %u", seq);
        } else if (mode == 17) {
                read_lock(&left_held);                 /* spins: the writer returned holding it */
                read_unlock(&left_held);
        } else if (mode == 10) {
                do {
                        seq = read_seqbegin(&pair_lock);
                        a = READ_ONCE(pair_a);
                        b = READ_ONCE(pair_b);
                } while (read_seqretry(&pair_lock, seq));
                pr_info("pair %llu %llu seq %u", (unsigned long long)a, (unsigned long long)b, seq);
        }
        return false;
}

static const struct pybcache_patch_ops ops = {
        .name = "api-probe", .init = probe_init, .exit = probe_exit, .write_start = probe_start,
        .write_end = probe_end, .read_bypass = probe_read,
};
PYBCACHE_PATCH(ops);
