/*
 * pyb_driver.h - what the native drivers (pyb_stress.c, pyb_workload.c) share: a run of pthreads
 * that its caller can wait for in slices, stop and bound; the single-producer single-consumer ring
 * that carries a submitting thread's writes to its completion thread; and the bounded waits.
 *
 * Completions. In the kernel a bypass write ends from completion context, never on the thread that
 * submitted it, so a submitter blocked on a full counter (overflow "wait") cannot hold an end back.
 * The drivers do the same: every submitting thread has a completion thread of its own, fed by a
 * ring. The submitter starts a write and pushes it; the completer ends the oldest once more than
 * `depth` writes are in flight (or, in the race stress, once each write is due), and every one it
 * holds when its submitter is blocked on a full counter, has finished, or the run is stopped.
 *
 * Waiting. A submitter's start goes through pyb_driver_start_bounded: one try without waiting (the
 * common path), and on PYB_START_WOULD_BLOCK (a counter at its maximum under overflow "wait", or an
 * empty mempool reserve) it tells its completer to end everything it holds; for a full counter it
 * looks again a few times (spin, then yield: the completer usually makes room within microseconds),
 * then it sleeps on the tracker's own wait queues (pyb_tracker_start_until, woken by the end or the
 * page refill it waits for) in slices of PYB_DRIVER_WAIT_SLICE_NS, looking at the run's stop flag
 * between slices, the last slice ending at the run's wait_timeout. Past the timeout (or on a stop) the submitter undoes
 * the part of its start already counted (pyb_driver_undo_start), records what it waited for and
 * where, and stops the run; every thread then stops, every completer ends what is in flight, and
 * pyb_run_finish returns -ETIMEDOUT. Every other wait (room in the ring, a completer waiting for
 * work or for a write to become due) ends when another thread of the run progresses, and checks
 * the stop flag too.
 *
 * The caller's side: a driver's *_begin starts the threads and returns a pyb_run; pyb_run_wait
 * waits up to a slice for every thread to finish (so that a caller holding the GIL can check for
 * signals between slices), pyb_run_stop asks every thread to stop, and pyb_run_finish joins them,
 * frees the run and says how it ended.
 */
#ifndef PYB_DRIVER_H
#define PYB_DRIVER_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "pyb_atomic.h"
#include "pyb_tracker.h"

/* Bits of pyb_run.stop. */
#define PYB_RUN_STOP_CALLER 1u  /* pyb_run_stop */
#define PYB_RUN_STOP_TIMEOUT 2u /* a start waited past wait_timeout */

/* The first start that waited past wait_timeout (pyb_run_finish returned -ETIMEDOUT). */
typedef struct pyb_run_timeout {
    uint32_t thread;    /* index of the submitting thread */
    uint64_t offset;    /* byte offset the start was waiting at: the first byte of the chunk whose
                           counter stayed at its maximum, or of the first chunk of the page it had no
                           mempool page for (or the write's own offset) */
    uint64_t waited_ns; /* how long it waited */
    int wait_page;      /* 1: it waited for a mempool page (PYB_START_WAIT_PAGE); 0: for room in a
                           counter at its maximum (overflow "wait") */
} pyb_run_timeout;

typedef struct pyb_run pyb_run;
typedef struct pyb_ring pyb_ring; /* below */

/* One thread of a run: its function and argument, set before pyb_run_launch. */
typedef struct pyb_run_thread {
    pyb_run *run;
    void *(*fn)(void *);
    void *arg;
} pyb_run_thread;

struct pyb_run {
    /* Stop requests: fetch_or by pyb_run_stop or a timed-out submitter, relaxed loads by every
     * thread (a request only: no data is published through it). */
    _Atomic uint32_t stop;
    uint64_t wait_timeout_ns;  /* 0 = no bound; immutable during the run */

    pthread_mutex_t mu;        /* guards live, failed and the timeout record */
    pthread_cond_t cv;         /* signalled (under mu) when live drops to 0; CLOCK_MONOTONIC */
    uint32_t live;             /* threads launched and not yet returned (under mu) */
    int failed;                /* a thread returned non-NULL: it could not allocate (under mu) */
    int timed_out;             /* `timeout` holds the first timeout (under mu) */
    pyb_run_timeout timeout;   /* under mu */

    pyb_gate gate;             /* every thread waits here until all are launched */
    uint32_t n, launched;      /* threads planned, threads created (creator only) */
    int launch_failed;         /* pthread_create failed (creator only) */
    pthread_t *tids;           /* [n] (creator only) */
    pyb_run_thread *threads;   /* [n], read-only once launched */
    pthread_attr_t *attr;      /* NULL or the attributes every thread is created with (creator only) */

    void *priv;                /* the driver's state, freed by free_priv after the join */
    void (*free_priv)(void *);
};

/* Allocate a run of n threads (0 on success, -ENOMEM). */
int pyb_run_create(uint32_t n, uint64_t wait_timeout_ns, pyb_run **out);
/* Create thread i running fn(arg); it waits at the gate until pyb_run_go. 0 or -EAGAIN (then call
 * pyb_run_go anyway: the threads created leave without running). */
int pyb_run_launch(pyb_run *r, uint32_t i, void *(*fn)(void *), void *arg);
/* Open the gate: run every thread, or none if a launch failed. */
void pyb_run_go(pyb_run *r);
/* Wait up to ns nanoseconds for every thread to return; 1 if they all have. */
int pyb_run_wait(pyb_run *r, uint64_t ns);
/* Ask every thread to stop; they roll back a start in progress and end what is in flight. */
void pyb_run_stop(pyb_run *r);
/* Join every thread and free the run. Returns 0, -EAGAIN (thread creation failed), -ENOMEM (a
 * thread could not allocate), -ETIMEDOUT (*to filled in; to may be NULL) or -EINTR (pyb_run_stop). */
int pyb_run_finish(pyb_run *r, pyb_run_timeout *to);

static inline int pyb_run_stopped(const pyb_run *r) { return pyb_load(&r->stop, PYB_RELAXED) != 0; }
/* Record a timeout (the first one is kept) and stop the run. */
void pyb_run_timed_out(pyb_run *r, uint32_t thread, uint64_t offset, uint64_t waited_ns, int wait_page);

/*
 * The phases of the ring waits below: spin (one pause hint a call) for the first PYB_BACKOFF_SPINS
 * looks, yield for PYB_BACKOFF_YIELDS more, then sleep on a condition variable until the other
 * thread wakes the sleeper (or a nap passes). Short phases: on shared cores a spinning or yielding
 * waiter takes the CPU from the thread it waits for (longer ones measured slower, pybcache stress on
 * 2 loaded cores).
 */
#define PYB_BACKOFF_SPINS 16
#define PYB_BACKOFF_YIELDS 2

/*
 * Undo a start left waiting by PYB_START_WOULD_BLOCK: remove exactly the increments it made in
 * [off, resume) (pyb_tracker_undo_start with the record it kept in ctx: untracked pages and clamped
 * or wrapped counters are skipped; no end is counted), and reset ctx's carry and record so that
 * nothing leaks into the next start.
 */
void pyb_driver_undo_start(pyb_tracker *t, pyb_ctx *ctx, uint64_t off, uint64_t resume);

/* A blocked start sleeps on the tracker's wait queue at most this long before it looks at the run's
 * stop flag again. A slice that ends inside a mempool round costs no allocator attempt: the resumed
 * start sleeps the rest of that round first (pyb_ctx.round_end), so the attempts follow the rounds
 * (one per mempool_round_ns, by default PYB_MEMPOOL_RETRY_NS), not the slices; a stop is seen within
 * 10 ms. */
#define PYB_DRIVER_WAIT_SLICE_NS (10 * PYB_MEMPOOL_RETRY_NS)

/* A submitter's starts that waited in pyb_driver_start_bounded (found a counter at its maximum, or
 * waited for a mempool page: the starts counted in ctx's overflow_waits and mempool_waits), and how
 * long they waited. Plain fields: the submitter's own. */
typedef struct pyb_driver_waits {
    uint64_t starts, ns;
} pyb_driver_waits;

/*
 * A submitter's start of [off, off + len), bounded by its run (see "Waiting" above): returns the
 * start's PYB_START_* bits once the whole range is counted (0 or PYB_START_UNTRACKED), or -1 if
 * the run was stopped or the wait passed the run's wait_timeout first; then the part counted has
 * been undone (pyb_driver_undo_start), a timeout recorded (pyb_run_timed_out: thread, where, how
 * long, and whether for a page) and the run stopped. `ring` is the submitter's ring to its completer
 * (NULL: it has none), held PYB_RING_BLOCKED while it waits. A start that waited is counted once in
 * ctx, as the tracker counts its own waits: in overflow_waits if it found a counter at its maximum
 * (even if room came before it slept), in mempool_waits if the tracker waited for a page (not for
 * one failed allocator attempt); `waits` counts the same starts.
 */
int pyb_driver_start_bounded(pyb_tracker *t, pyb_ctx *ctx, pyb_run *run, pyb_ring *ring, uint32_t thread,
                             uint64_t off, uint64_t len, pyb_driver_waits *waits);

/*
 * The ring between one submitter and its completer. Entries are `elem` bytes; positions count up
 * from 0 and entry p lives in slot p & mask. The submitter fills slot `pushed` and publishes it by
 * storing tail; the completer reads entries below tail, ends them and publishes head; the
 * submitter reuses a slot only below head. At most `limit` entries are in the ring. Once more than
 * `high` are, the completer ends the oldest down to `low` (all of them in the other cases of
 * pyb_ring_await), and the submitter wakes a sleeping completer only on a push that crosses `high`.
 *
 * A driver keeping D writes in flight uses low = D - band, high = D, limit = D + band with band =
 * pyb_ring_band(D): the writes in flight stay within D +- band, and the two threads hand over about
 * once every `band` writes rather than on every write (a hand-over that has to wake a thread costs
 * a system call and a scheduling delay on shared cores).
 */
static inline uint64_t pyb_ring_band(uint64_t d)
{
    uint64_t lo = d < 8 ? d : 8, band = d / 4 > lo ? d / 4 : lo;
    return band < 64 ? band : 64;
}
#define PYB_RING_BLOCKED 1u /* the submitter waits on a full counter: end everything */
#define PYB_RING_DONE 2u    /* the submitter has finished: end everything, then leave */

struct pyb_ring {
    /* Submitter side. tail: seq_cst stores (the Dekker pair with `sleeping`, see pyb_ring_push),
     * acquire loads by the completer. state: seq_cst read-modify-writes by the submitter, acquire
     * loads by the completer. room_wait: 1 while the submitter sleeps on room_cv or is about to;
     * seq_cst store and load (the Dekker pair with head, see pyb_ring_pop). pushed, head_seen,
     * wakes (pushes that woke the completer): the submitter's own. */
    _Alignas(PYB_CACHELINE) _Atomic uint64_t tail;
    _Atomic uint32_t state;
    _Atomic uint32_t room_wait;
    uint64_t pushed, head_seen, wakes;
    /* Completer side. head: seq_cst stores, acquire loads by the submitter (slots below it are
     * free). sleeping: 1 while the completer sleeps on cv or is about to; seq_cst store and load
     * (the other half of the pair with tail). popped: the completer's own. */
    _Alignas(PYB_CACHELINE) _Atomic uint64_t head;
    _Atomic uint32_t sleeping;
    uint64_t popped;
    pthread_mutex_t mu;        /* orders a sleep against its wake; guards no data */
    pthread_cond_t cv;         /* the completer sleeps here */
    pthread_cond_t room_cv;    /* the submitter sleeps here */
    /* Immutable during the run. */
    _Alignas(PYB_CACHELINE) uint64_t low, high, limit, mask;
    size_t elem;
    unsigned char *slots;      /* entries: see above for who may touch which */
};

/* 0 or -ENOMEM. low <= high < limit. */
int pyb_ring_init(pyb_ring *r, size_t elem, uint64_t low, uint64_t high, uint64_t limit);
void pyb_ring_destroy(pyb_ring *r);

static inline void *pyb_ring_entry(pyb_ring *r, uint64_t pos) { return r->slots + (pos & r->mask) * r->elem; }

/* Submitter: is there room for one more entry? */
static inline int pyb_ring_has_room(pyb_ring *r)
{
    if (r->pushed - r->head_seen < r->limit)
        return 1;
    r->head_seen = pyb_load(&r->head, PYB_ACQUIRE);
    return r->pushed - r->head_seen < r->limit;
}
/* Submitter: the slot to fill next (only when there is room). */
static inline void *pyb_ring_next(pyb_ring *r) { return pyb_ring_entry(r, r->pushed); }
void pyb_ring_wake(pyb_ring *r);
/* Submitter: publish the slot filled. The seq_cst store of tail and seq_cst load of sleeping pair
 * with the completer's seq_cst store of sleeping and load of tail in pyb_ring_await: one of the two
 * sees the other's store, so either the completer sees the entry or we see it asleep and wake it.
 * A push that leaves `high` or fewer entries needs no wake (the completer would not act on it). A
 * push whose count from head_seen passes `high` looks at head again first: head_seen may be from
 * before the completer's last pops (it is refreshed only now and then), and a stale count would wake
 * the completer on every push of the band after each crossing. A head just loaded is never above
 * the true one, so the count is never below the true count and no push that crosses `high` is
 * missed; one wake per band remains. */
static inline void pyb_ring_push(pyb_ring *r)
{
    pyb_store(&r->tail, ++r->pushed, PYB_SEQ_CST);
    if (r->pushed - r->head_seen <= r->high)
        return;
    r->head_seen = pyb_load(&r->head, PYB_ACQUIRE);
    if (r->pushed - r->head_seen > r->high && pyb_load(&r->sleeping, PYB_SEQ_CST)) {
        r->wakes++;
        pyb_ring_wake(r);
    }
}
/* Submitter: set or clear PYB_RING_* bits (and wake the completer if it sleeps: same pairing). */
void pyb_ring_set_state(pyb_ring *r, uint32_t bits);
void pyb_ring_clear_state(pyb_ring *r, uint32_t bits);
/* Submitter: wait for room (bounded by the completer's progress; each sleep is a nap at most).
 * Returns 0, or -1 if the run was stopped first. `idle(arg)` runs once before the first yield. */
int pyb_ring_wait_room(pyb_ring *r, const pyb_run *run, void (*idle)(void *), void *arg);

/* Completer: wait until some entries may be ended and return how many (the oldest ones), or 0 when
 * the submitter has finished and the ring is empty. `idle(arg)` runs once before the completer
 * yields or sleeps (to unpin its tracker context). */
uint64_t pyb_ring_await(pyb_ring *r, const pyb_run *run, void (*idle)(void *), void *arg);
/* Completer: the oldest entry not yet popped, and free the n oldest (waking the submitter if it
 * sleeps for room: the same pairing as pyb_ring_push, with head and room_wait). */
static inline void *pyb_ring_oldest(pyb_ring *r) { return pyb_ring_entry(r, r->popped); }
void pyb_ring_wake_room(pyb_ring *r);
static inline void pyb_ring_pop(pyb_ring *r, uint64_t n)
{
    r->popped += n;
    pyb_store(&r->head, r->popped, PYB_SEQ_CST);
    if (pyb_load(&r->room_wait, PYB_SEQ_CST))
        pyb_ring_wake_room(r);
}

#endif /* PYB_DRIVER_H */
