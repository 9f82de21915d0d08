/*
 * model.cpp - a Relacy model of the atomic variant's lockless protocol (csrc/pyb_tracker.h): page
 * install by CAS, counter increment and decrement against the read-side check, and RCU-style
 * reclamation (tag, grace period, unpublish, grace period, free), over the explorer's small scenarios
 * (1w1r, 2w1r, 1w2r), each with a reclaimer thread, with the slot empty or holding an idle page at the
 * start. It models the protocol, not the C file: the memory orders come from orders.h, which
 * check_orders.py compares with pyb_tracker.c. One chunk, 64-bit counters; hijack, overflow and the
 * grace-period timeout are out of the model (a timeout only makes a reclaim untag, a path modelled
 * here when a start cancels the tag).
 *
 * Checked in every execution Relacy explores:
 *   - no use after free and no data race: a page's `alive` flag is a plain (rl::var) variable that
 *     the allocating thread sets before publishing the page and the reclaimer clears when it frees
 *     it, and every access to a page reads it first (a read not ordered with the free is a race);
 *   - a check made after a start (ordered by the writer's flag) sees the write in flight;
 *   - I1: while a write is in flight its page stays the published one, and its end finds its count
 *     (no underflow).
 *
 * Build: g++ -std=c++17 -O1 -I. model.cpp (make relacy at top level builds it twice, real and
 * -DPYB_RELACY_MUTANT, and requires the real one to pass and the mutant to fail).
 */
/* Standard headers first: relacy.hpp redefines `delete` for what follows it. */
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include <relacy/relacy.hpp>

#include "orders.h"

namespace {

constexpr unsigned MAX_THREADS = 4; /* writers + readers + the reclaimer */
constexpr unsigned MAX_PAGES = 4;   /* pages are never reused: one per possible allocation, 1-based */
constexpr unsigned TAG = 2;         /* PYB_RETIRE_TAG; a word is page_id << 2 | tag */

struct scenario {
    const char *name;
    unsigned writers, readers;
    bool idle_page; /* the slot starts with an all-zero page the reclaimer may retire */
};

scenario g_sc; /* set before each rl::simulate */
unsigned long g_frees, g_cancels; /* executions in which the reclaimer freed / a start cancelled a tag */

struct model : rl::test_suite<model, MAX_THREADS> {
    rl::atomic<unsigned> word;               /* the slot word */
    rl::atomic<unsigned> gp;                 /* the grace-period number */
    rl::atomic<unsigned> reader[MAX_THREADS]; /* each thread's record: 0 outside, else its number */
    rl::atomic<unsigned> ctr[MAX_PAGES + 1];  /* each page's one counter */
    rl::var<int> alive[MAX_PAGES + 1];        /* plain memory: set at allocation, cleared at free */
    rl::atomic<unsigned> next_page;           /* the allocator (its own synchronisation: acq_rel) */
    rl::atomic<int> started[MAX_THREADS];     /* writer i's start is complete (release) */
    rl::atomic<int> readers_done;             /* readers that have made their check */
    rl::atomic<int> underflows;

    void before()
    {
        unsigned first = 1;
        word.store(0, rl::mo_relaxed, $);
        if (g_sc.idle_page) {
            alive[1]($) = 1;
            word.store(1u << 2, rl::mo_relaxed, $);
            first = 2;
        }
        gp.store(1, rl::mo_relaxed, $);
        for (unsigned i = 0; i < MAX_THREADS; i++) {
            reader[i].store(0, rl::mo_relaxed, $);
            started[i].store(0, rl::mo_relaxed, $);
        }
        for (unsigned p = 0; p <= MAX_PAGES; p++)
            ctr[p].store(0, rl::mo_relaxed, $);
        next_page.store(first, rl::mo_relaxed, $);
        readers_done.store(0, rl::mo_relaxed, $);
        underflows.store(0, rl::mo_relaxed, $);
    }

    void after() { RL_ASSERT(underflows.load(rl::mo_relaxed, $) == 0); }

    /* rcu_op_begin / ctx_unpin for a context pinned for one operation. */
    void enter(unsigned me) { reader[me].exchange(gp.load(MO_GP_READ, $), MO_ANNOUNCE, $); }
    void leave(unsigned me) { reader[me].store(0, MO_LEAVE, $); }

    unsigned touch(unsigned w) /* the page of a non-zero word, checked alive before any access */
    {
        unsigned pg = w >> 2;
        RL_ASSERT(pg >= 1 && pg <= MAX_PAGES);
        RL_ASSERT(alive[pg]($) == 1);
        return pg;
    }

    unsigned start(unsigned me) /* start_page_atomic, 64-bit counters: returns the page counted on */
    {
        enter(me);
        for (;;) {
            unsigned w = word.load(MO_WORD_LOAD, $);
            if (w == 0) {
                unsigned pg = next_page.fetch_add(1, rl::mo_acq_rel, $);
                RL_ASSERT(pg <= MAX_PAGES);
                alive[pg]($) = 1; /* calloc */
                unsigned expected = 0;
                if (!word($).compare_exchange_strong(expected, pg << 2, MO_WORD_INSTALL, rl::mo_acquire))
                    alive[pg]($) = 0; /* lost the race: never published, freed at once */
                continue;
            }
            if (w & TAG) {
                if (!word($).compare_exchange_strong(w, w & ~TAG, MO_WORD_CANCEL, rl::mo_acquire))
                    continue;
                w &= ~TAG;
                g_cancels++;
            }
            unsigned pg = touch(w);
            ctr[pg].fetch_add(1, MO_CTR_INC, $);
            leave(me);
            return pg;
        }
    }

    void end(unsigned me, unsigned mine) /* end_page_atomic, 64-bit counters */
    {
        enter(me);
        unsigned w = word.load(MO_WORD_LOAD, $);
        RL_ASSERT((w >> 2) == mine); /* I1: the page the start counted on is still the published one */
        if (w == 0) {
            underflows.fetch_add(1, rl::mo_relaxed, $);
        } else {
            unsigned pg = touch(w);
            unsigned v = ctr[pg].load(rl::mo_relaxed, $);
            while (v && !ctr[pg]($).compare_exchange_weak(v, v - 1, MO_CTR_DEC, rl::mo_relaxed)) {
            }
            if (v == 0)
                underflows.fetch_add(1, rl::mo_relaxed, $);
        }
        leave(me);
    }

    bool is_active(unsigned me) /* active_page_atomic */
    {
        enter(me);
        unsigned w = word.load(MO_WORD_LOAD, $);
        bool active = false;
        if (w != 0)
            active = ctr[touch(w)].load(MO_CTR_CHECK, $) != 0;
        leave(me);
        return active;
    }

    void grace_period(unsigned me) /* rcu_gp_begin + rcu_gp_wait (unbounded here) */
    {
        unsigned target = gp.fetch_add(1, MO_GP_ADVANCE, $) + 1;
        for (unsigned i = 0; i < MAX_THREADS; i++) {
            if (i == me)
                continue;
            for (;;) {
                unsigned v = reader[i].load(MO_READER_POLL, $);
                if (v == 0 || v >= target)
                    break;
                rl::yield(1, $);
            }
        }
    }

    void reclaim(unsigned me) /* reclaim_atomic for the one slot */
    {
        unsigned w = word.load(MO_RECLAIM_LOAD, $);
        if (w == 0 || (w & TAG) || ctr[w >> 2].load(MO_ZERO_SCAN, $) != 0)
            return;
        if (!word($).compare_exchange_strong(w, w | TAG, MO_WORD_TAG, rl::mo_relaxed))
            return;
        grace_period(me);
        w = word.load(MO_RECLAIM_LOAD, $);
        if (!(w & TAG))
            return; /* a start cancelled the tag */
        unsigned pg = w >> 2;
        if (ctr[pg].load(MO_ZERO_SCAN, $) == 0 && word($).compare_exchange_strong(w, 0u, MO_WORD_UNPUBLISH, rl::mo_relaxed)) {
            grace_period(me);
            alive[pg]($) = 0; /* free */
            g_frees++;
        } else {
            word($).compare_exchange_strong(w, w & ~TAG, MO_WORD_UNTAG, rl::mo_relaxed);
        }
    }

    void thread(unsigned me)
    {
        const unsigned w = g_sc.writers, r = g_sc.readers;
        if (me < w) { /* a writer: start, tell the readers, end once they have checked */
            unsigned pg = start(me);
            started[me].store(1, rl::mo_release, $);
            while (readers_done.load(rl::mo_acquire, $) != (int)r)
                rl::yield(1, $);
            end(me, pg);
        } else if (me < w + r) { /* a reader: a check after a start it has seen must see it */
            for (unsigned i = 0; i < w; i++) {
                if (started[i].load(rl::mo_acquire, $)) {
                    RL_ASSERT(is_active(me));
                    break;
                }
            }
            if (w == 0 || !started[0].load(rl::mo_relaxed, $))
                is_active(me); /* a check racing the start: any answer is allowed, but it runs */
            readers_done.fetch_add(1, rl::mo_acq_rel, $);
        } else if (me == w + r) {
            reclaim(me);
        }
    }
};

} // namespace

int main(int argc, char **argv)
{
    const scenario all[] = {
        {"1w1r", 1, 1, false}, {"2w1r", 2, 1, false}, {"1w2r", 1, 2, false},
        {"1w1r+idle", 1, 1, true}, {"2w1r+idle", 2, 1, true}, {"1w2r+idle", 1, 2, true},
    };
    unsigned long iterations = argc > 1 ? strtoul(argv[1], nullptr, 10) : 200000;
    int failed = 0;
    std::ofstream quiet("/dev/null"); /* Relacy's report (the execution history) with RELACY_VERBOSE=1 */
    for (const scenario &sc : all) {
        g_sc = sc;
        g_frees = g_cancels = 0;
        rl::test_params p;
        p.iteration_count = iterations;
        p.search_type = rl::sched_random;
        p.output_stream = getenv("RELACY_VERBOSE") ? &std::cout : &quiet;
        p.progress_stream = &quiet;
        bool ok = rl::simulate<model>(p);
        if (ok)
            std::printf("relacy %-10s ok: %lu executions, the page freed in %lu, retire tags cancelled %lu times\n",
                        sc.name, iterations, g_frees, g_cancels);
        else
            std::printf("relacy %-10s FAILED: %s at execution %lu\n", sc.name, rl::test_result_str(p.test_result),
                        (unsigned long)p.stop_iteration);
        failed += !ok;
    }
    return failed ? 1 : 0;
}
