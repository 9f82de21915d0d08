/* pyb_driver.c - see pyb_driver.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "pyb_driver.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

/* A thread sleeping on its ring looks again after this long even without a wake (so that a stop
 * request is seen). */
#define NAP_NS 1000000ull

static void deadline_after(struct timespec *ts, uint64_t ns)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ns += (uint64_t)ts->tv_nsec;
    ts->tv_sec += (time_t)(ns / 1000000000ull);
    ts->tv_nsec = (long)(ns % 1000000000ull);
}

static int cond_init_monotonic(pthread_cond_t *cv)
{
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0)
        return -1;
    int rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (rc == 0)
        rc = pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
    return rc ? -1 : 0;
}

/* ------------------------------------------------------------------------------------------------ */
/* Runs                                                                                               */

int pyb_run_create(uint32_t n, uint64_t wait_timeout_ns, pyb_run **out)
{
    *out = NULL;
    pyb_run *r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    r->tids = calloc(n ? n : 1, sizeof(*r->tids));
    r->threads = calloc(n ? n : 1, sizeof(*r->threads));
    if (!r->tids || !r->threads || pthread_mutex_init(&r->mu, NULL) != 0) {
        free(r->tids);
        free(r->threads);
        free(r);
        return -ENOMEM;
    }
    if (cond_init_monotonic(&r->cv) != 0) {
        pthread_mutex_destroy(&r->mu);
        free(r->tids);
        free(r->threads);
        free(r);
        return -ENOMEM;
    }
    atomic_init(&r->stop, 0);
    r->wait_timeout_ns = wait_timeout_ns;
    r->gate = (pyb_gate)PYB_GATE_INIT;
    r->n = n;
    *out = r;
    return 0;
}

static void *trampoline(void *arg)
{
    pyb_run_thread *th = arg;
    pyb_run *r = th->run;
    void *ret = NULL;
    /* Short sleeps of the waits below mean microseconds, not the default 50 us of timer slack. */
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
    if (pyb_gate_wait(&r->gate) > 0)
        ret = th->fn(th->arg);
    pthread_mutex_lock(&r->mu);
    if (ret)
        r->failed = 1;
    if (--r->live == 0)
        pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

int pyb_run_launch(pyb_run *r, uint32_t i, void *(*fn)(void *), void *arg)
{
    if (r->launch_failed || i >= r->n)
        return -EAGAIN;
    r->threads[i] = (pyb_run_thread){r, fn, arg};
    pthread_mutex_lock(&r->mu);
    r->live++;
    pthread_mutex_unlock(&r->mu);
    if (pthread_create(&r->tids[r->launched], r->attr, trampoline, &r->threads[i]) != 0) {
        pthread_mutex_lock(&r->mu);
        r->live--;
        pthread_mutex_unlock(&r->mu);
        r->launch_failed = 1;
        return -EAGAIN;
    }
    r->launched++;
    return 0;
}

void pyb_run_go(pyb_run *r) { pyb_gate_open(&r->gate, r->launch_failed ? -1 : 1); }

int pyb_run_wait(pyb_run *r, uint64_t ns)
{
    struct timespec ts;
    deadline_after(&ts, ns);
    pthread_mutex_lock(&r->mu);
    while (r->live) {
        if (pthread_cond_timedwait(&r->cv, &r->mu, &ts) == ETIMEDOUT)
            break;
    }
    int done = r->live == 0;
    pthread_mutex_unlock(&r->mu);
    return done;
}

void pyb_run_stop(pyb_run *r) { pyb_fetch_or(&r->stop, PYB_RUN_STOP_CALLER, PYB_RELAXED); }

void pyb_run_timed_out(pyb_run *r, uint32_t thread, uint64_t offset, uint64_t waited_ns, int wait_page)
{
    pthread_mutex_lock(&r->mu);
    if (!r->timed_out) {
        r->timed_out = 1;
        r->timeout = (pyb_run_timeout){thread, offset, waited_ns, wait_page};
    }
    pthread_mutex_unlock(&r->mu);
    pyb_fetch_or(&r->stop, PYB_RUN_STOP_TIMEOUT, PYB_RELAXED);
}

int pyb_run_finish(pyb_run *r, pyb_run_timeout *to)
{
    for (uint32_t i = 0; i < r->launched; i++)
        pthread_join(r->tids[i], NULL);
    /* Every thread has been joined: the fields under mu are ours now. */
    int rc = 0;
    if (r->launch_failed)
        rc = -EAGAIN;
    else if (r->failed)
        rc = -ENOMEM;
    else if (r->timed_out)
        rc = -ETIMEDOUT;
    else if (pyb_load(&r->stop, PYB_RELAXED) & PYB_RUN_STOP_CALLER)
        rc = -EINTR;
    if (to && r->timed_out)
        *to = r->timeout;
    if (r->free_priv)
        r->free_priv(r->priv);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    free(r->tids);
    free(r->threads);
    free(r);
    return rc;
}

/* ------------------------------------------------------------------------------------------------ */
/* Waits                                                                                              */

void pyb_driver_undo_start(pyb_tracker *t, pyb_ctx *ctx, uint64_t off, uint64_t resume)
{
    /* The tracker's own undo (not an end: no end is counted), with the record the abandoned start
     * kept in ctx: the pages it left untracked and the counters it clamped or wrapped are skipped, so
     * exactly its own increments are removed (pyb_start_record). It resets ctx's carry and record. */
    pyb_tracker_undo_start(t, ctx, off, resume > off ? resume - off : 0);
}

/* A start that would block (ret, resume: what the first attempt returned): wait for it, bounded. Out of
 * line, so that the common start that does not wait saves no registers for it. */
static __attribute__((noinline)) int start_wait(pyb_tracker *t, pyb_ctx *ctx, pyb_run *run, pyb_ring *ring,
                                                uint32_t thread, uint64_t off, uint64_t len,
                                                pyb_driver_waits *waits, int ret, uint64_t resume)
{
    /* Before sleeping: our own writes in flight may be what holds the counter (or the page) up. */
    if (ring)
        pyb_ring_set_state(ring, PYB_RING_BLOCKED);
    const int full = !(ret & PYB_START_WAIT_PAGE); /* found a counter at its maximum (not a page short) */
    const uint64_t counted = ctx->stats.overflow_waits + ctx->stats.mempool_waits;
    const uint64_t t0 = pyb_now_ns();
    const uint64_t limit = run->wait_timeout_ns ? t0 + run->wait_timeout_ns : UINT64_MAX;
    uint64_t now = t0;
    /* A full counter: the completer, just told, usually makes room within microseconds, and a futex
     * sleep and wake cost more than that on shared cores (measured with every such start sleeping
     * at once: 0.14x the throughput, 2 threads at depth 32 on one chunk whose maximum is 48, 2
     * loaded cores). So look again a few times first; each look is a counter check. Not for a
     * page: each look would call the allocator. */
    for (uint32_t i = 0; !(ret & PYB_START_WAIT_PAGE) && i < PYB_BACKOFF_SPINS + PYB_BACKOFF_YIELDS; i++) {
        if (i < PYB_BACKOFF_SPINS) {
            pyb_cpu_relax();
        } else {
            pyb_tracker_ctx_unpin(t, ctx); /* hold no slot while yielding (a reclaim may want it) */
            sched_yield();
        }
        ret = pyb_tracker_start(t, ctx, resume, off + len - resume, 0, &resume);
        if (!(ret & PYB_START_WOULD_BLOCK))
            goto done;
    }
    for (;;) {
        /* The tracker keeps what the start has done so far in ctx between the slices: the waits it
         * counted (counted once per start) and what an undo must skip. */
        uint64_t until = limit - now > PYB_DRIVER_WAIT_SLICE_NS ? now + PYB_DRIVER_WAIT_SLICE_NS : limit;
        ret = pyb_tracker_start_until(t, ctx, resume, off + len - resume, until, &resume);
        now = pyb_now_ns();
        if (!(ret & PYB_START_TIMED_OUT))
            break;
        if (now >= limit || pyb_run_stopped(run)) {
            pyb_driver_undo_start(t, ctx, off, resume);
            if (now >= limit)
                pyb_run_timed_out(run, thread, resume, now - t0, (ret & PYB_START_WAIT_PAGE) != 0);
            ret = -1;
            break;
        }
    }
done:
    now = pyb_now_ns();
    if (ring)
        pyb_ring_clear_state(ring, PYB_RING_BLOCKED);
    /* The tracker counts a wait only once it sleeps; a start that found its counter full waited too,
     * however briefly (once per start either way). */
    if (full && ctx->stats.overflow_waits + ctx->stats.mempool_waits == counted)
        ctx->stats.overflow_waits++;
    if (ctx->stats.overflow_waits + ctx->stats.mempool_waits != counted) {
        waits->starts++;
        waits->ns += now - t0;
    }
    return ret;
}

int pyb_driver_start_bounded(pyb_tracker *t, pyb_ctx *ctx, pyb_run *run, pyb_ring *ring, uint32_t thread,
                             uint64_t off, uint64_t len, pyb_driver_waits *waits)
{
    uint64_t resume;
    int ret = pyb_tracker_start(t, ctx, off, len, 0, &resume);
    if (__builtin_expect(!(ret & PYB_START_WOULD_BLOCK), 1))
        return ret;
    return start_wait(t, ctx, run, ring, thread, off, len, waits, ret, resume);
}

/* ------------------------------------------------------------------------------------------------ */
/* Rings                                                                                              */

int pyb_ring_init(pyb_ring *r, size_t elem, uint64_t low, uint64_t high, uint64_t limit)
{
    memset(r, 0, sizeof(*r));
    uint64_t size = 1;
    while (size < limit)
        size <<= 1;
    r->slots = calloc(size, elem);
    if (!r->slots)
        return -ENOMEM;
    if (pthread_mutex_init(&r->mu, NULL) != 0) {
        free(r->slots);
        return -ENOMEM;
    }
    if (cond_init_monotonic(&r->cv) != 0) {
        pthread_mutex_destroy(&r->mu);
        free(r->slots);
        return -ENOMEM;
    }
    if (cond_init_monotonic(&r->room_cv) != 0) {
        pthread_cond_destroy(&r->cv);
        pthread_mutex_destroy(&r->mu);
        free(r->slots);
        return -ENOMEM;
    }
    atomic_init(&r->tail, 0);
    atomic_init(&r->room_wait, 0);
    atomic_init(&r->head, 0);
    atomic_init(&r->state, 0);
    atomic_init(&r->sleeping, 0);
    r->low = low;
    r->high = high;
    r->limit = limit;
    r->mask = size - 1;
    r->elem = elem;
    return 0;
}

void pyb_ring_destroy(pyb_ring *r)
{
    if (!r->slots)
        return;
    pthread_cond_destroy(&r->room_cv);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    free(r->slots);
    r->slots = NULL;
}

void pyb_ring_wake(pyb_ring *r)
{
    pthread_mutex_lock(&r->mu);
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

void pyb_ring_wake_room(pyb_ring *r)
{
    pthread_mutex_lock(&r->mu);
    pthread_cond_signal(&r->room_cv);
    pthread_mutex_unlock(&r->mu);
}

void pyb_ring_set_state(pyb_ring *r, uint32_t bits)
{
    pyb_fetch_or(&r->state, bits, PYB_SEQ_CST);
    if (pyb_load(&r->sleeping, PYB_SEQ_CST))
        pyb_ring_wake(r);
}

void pyb_ring_clear_state(pyb_ring *r, uint32_t bits) { pyb_fetch_and(&r->state, ~bits, PYB_SEQ_CST); }

/* The two ring waits' phases before they sleep: spin PYB_BACKOFF_SPINS times, run `idle` once, then yield
 * PYB_BACKOFF_YIELDS times. Returns 1 while the caller should look again, 0 once it is time to sleep. */
static int backoff_before_sleep(uint32_t *calls, int *idled, void (*idle)(void *), void *arg)
{
    ++*calls;
    if (*calls <= PYB_BACKOFF_SPINS) {
        pyb_cpu_relax();
        return 1;
    }
    if (!*idled && idle) {
        idle(arg);
        *idled = 1;
    }
    if (*calls <= PYB_BACKOFF_SPINS + PYB_BACKOFF_YIELDS) {
        sched_yield();
        return 1;
    }
    return 0;
}

int pyb_ring_wait_room(pyb_ring *r, const pyb_run *run, void (*idle)(void *), void *arg)
{
    uint32_t calls = 0;
    int idled = 0;
    while (!pyb_ring_has_room(r)) {
        if (pyb_run_stopped(run))
            return -1;
        if (backoff_before_sleep(&calls, &idled, idle, arg))
            continue;
        /* Sleep until the completer frees a slot (it wakes us, see pyb_ring_pop) or a nap has passed. */
        pthread_mutex_lock(&r->mu);
        pyb_store(&r->room_wait, 1, PYB_SEQ_CST);
        if (r->pushed - pyb_load(&r->head, PYB_SEQ_CST) >= r->limit && !pyb_run_stopped(run)) {
            struct timespec ts;
            deadline_after(&ts, NAP_NS);
            pthread_cond_timedwait(&r->room_cv, &r->mu, &ts);
        }
        pyb_store(&r->room_wait, 0, PYB_RELAXED);
        pthread_mutex_unlock(&r->mu);
    }
    return 0;
}

uint64_t pyb_ring_await(pyb_ring *r, const pyb_run *run, void (*idle)(void *), void *arg)
{
    uint32_t calls = 0;
    int idled = 0;
    for (;;) {
        /* state before tail: seeing DONE (set after the last push) then guarantees the final tail. */
        uint32_t st = pyb_load(&r->state, PYB_ACQUIRE);
        uint64_t tail = pyb_load(&r->tail, PYB_ACQUIRE);
        uint64_t count = tail - r->popped;
        if (count > r->high)
            return count - r->low;
        if (count && ((st & (PYB_RING_BLOCKED | PYB_RING_DONE)) || pyb_run_stopped(run)))
            return count;
        if (!count && (st & PYB_RING_DONE))
            return 0;
        if (backoff_before_sleep(&calls, &idled, idle, arg))
            continue;
        /* Sleep until the submitter pushes past `high` or changes state (it wakes us, see
         * pyb_ring_push), or a nap has passed. */
        pthread_mutex_lock(&r->mu);
        pyb_store(&r->sleeping, 1, PYB_SEQ_CST);
        if (pyb_load(&r->tail, PYB_SEQ_CST) == tail && pyb_load(&r->state, PYB_SEQ_CST) == st &&
            !pyb_run_stopped(run)) {
            struct timespec ts;
            deadline_after(&ts, NAP_NS);
            pthread_cond_timedwait(&r->cv, &r->mu, &ts);
        }
        pyb_store(&r->sleeping, 0, PYB_RELAXED);
        pthread_mutex_unlock(&r->mu);
    }
}
