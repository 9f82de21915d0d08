/*
 * pyb_nbdkit.c - an nbdkit plugin that serves the cached-device model (csrc/pyb_cachedev.h) as a block
 * device, so that unmodified NBD clients (fio's nbd engine, nbdcopy, nbdsh, qemu-img) drive it.
 * `pybcache serve` compiles it with the model's sources at run time (pybcache/bcache/nbd/server.py) and starts
 * nbdkit with it; docs/design.md ("Serving over NBD") is the contract, docs/serve.md the user guide.
 *
 * Parameters (nbdkit key=value):
 *   size=BYTES           device size, a positive multiple of 4096 (required)
 *   sync=none|global|page|atomic   tracking variant; none = the unpatched kernel (default page)
 *   write_delay_ns=N     time a bypass write's data takes to land after its invalidation (default 0)
 *   chunk_size=BYTES     tracker chunk, a power of two >= 512 (default 32M)
 *   patch=PATH           a compiled kernel patch module (pybcache.bcache.kpatch.load.compile_patch) to run as the
 *                        tracker instead of the lab's (sync and chunk_size then do not apply): opened
 *                        with pyb_kpatch_open, one instance for the server's life; its write_start runs
 *                        on the request thread (it may sleep, bounded by hung_ns), its write_end on the
 *                        completion thread. A failed operation answers that request with EIO and every
 *                        later one too (the tracker is broken); stats records the code.
 *   hung_ns=N            the patch's bound on any wait or spinlock acquisition (default 10 s)
 *   end_bio_intact=0|1   1: the patch's write_end gets an untouched bio; 0 (default): the bio as bcache's
 *                        cached_dev_write_complete sees it (bi_size 0, bi_sector at the end)
 *   stats=PATH           where .cleanup writes the model's counters as JSON at quiescence
 *
 * Requests (the model's blocks are 4096 bytes; a request is widened to the blocks it touches):
 *   pread   the model's read of those blocks (lookup, check key, tracker check, backing read,
 *           replace-insert), in pieces of at most PYB_CD_MAX_READ_BLOCKS blocks. Every 512-byte
 *           sector returned carries a header: "PYBCBLK1", the 4 KiB block number, the version the
 *           read returned and the sector's byte offset (little-endian u64s); the rest is zero. A
 *           client sees a stale read as an old version; the model's oracle counts it as well.
 *   pwrite  a bypass write of those blocks: START (tracker start) and INVALIDATE on the request
 *           thread; LAND (after write_delay_ns) and END (tracker end) on the completion thread, as a
 *           backing device's completion would run them; the reply goes out after END, as bcache
 *           completes the user bio only after the backing bio (cached_dev_write_complete). The
 *           client's bytes are not kept: what is stored is the new version.
 *   trim    bcache sends a discard down the bypass path (check_should_bypass, then
 *           bch_data_invalidate and a discard to the backing device): the same as pwrite.
 *   flush   a no-op: a write is acknowledged only after it has landed and ended, and the model has
 *           no volatile cache, so there is nothing left to make durable (FUA is native for the same
 *           reason).
 *
 * Threads: nbdkit's parallel model; any number of request threads, one completion thread.
 * Invariants:
 *   C1 every queued completion is owned by the queue until the completion thread sets done (under
 *      q_lock); the requester frees it afterwards, or, if it gave up waiting (abandoned, under q_lock),
 *      the completion thread frees it. So no wait leaves memory referenced by a returned request.
 *   C2 the write delay is one constant, so due times are non-decreasing in queue order (taken under
 *      q_lock): the queue is a FIFO and its head is always the next completion due.
 *   C3 the completion thread never waits for a request thread, and request threads wait only for
 *      the completion thread (bounded by WAIT_BOUND_NS past the due time): no cycle, no self-wait.
 */
#define NBDKIT_API_VERSION 2
#include <nbdkit-plugin.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pyb_cachedev.h"
#include "pyb_kpatch.h"
#include "pyb_tracker.h"

#define THREAD_MODEL NBDKIT_THREAD_MODEL_PARALLEL

#define BLOCK 4096u
#define SECTOR 512u
#define WAIT_BOUND_NS (30ull * 1000000000ull) /* a requester waits at most this past its due time */
#define MAX_DELAY_NS (10ull * 1000000000ull)

/* Configuration: written by .config/.config_complete before any request, read-only afterwards. */
static int64_t cfg_size = -1;
static int cfg_sync = PYB_SYNC_PAGE; /* or -1 = none */
static uint64_t cfg_delay_ns;
static int64_t cfg_chunk = 32 << 20;
static char *cfg_stats;
static char *cfg_patch;              /* patch=PATH, or NULL */
static uint64_t cfg_hung_ns = 10ull * 1000000000ull;
static int cfg_end_bio_intact;
static int cfg_sync_given, cfg_chunk_given;

/* Built by .get_ready, destroyed by .unload; the pointers are read-only while serving. */
static pyb_tracker *tracker;
static pyb_kpatch_tracker *patch;    /* patch=: the instance */
static pyb_cachedev *dev;

/* Request counters: relaxed atomics (only their totals at quiescence are read). */
static _Atomic uint64_t n_pread, n_pwrite, n_trim, n_flush, n_abandoned;

/* The completion queue (C1, C2): every field below is guarded by q_lock. */
struct completion {
    pyb_cd_write w;          /* the write; its LAND and END steps run on the completion thread */
    uint64_t due_ns;         /* pyb_now_ns() at which its data lands */
    int done;                /* END has run */
    int abandoned;           /* the requester gave up waiting; the completion thread frees it */
    pthread_cond_t cond;     /* signalled when done is set */
    struct completion *next;
};
static pthread_mutex_t q_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t q_work;  /* CLOCK_MONOTONIC; signalled when the queue becomes non-empty or stops */
static struct completion *q_head, *q_tail;
static int q_stop;             /* .cleanup: drain everything now, then exit */
/* nbdkit's main thread only (.after_fork, .cleanup): */
static int q_running;          /* the completion thread was started and not yet joined */
static pthread_t q_thread;
/* The completion thread's own model context (used by that thread only). */
static pyb_cd_ctx completion_ctx;
static pthread_condattr_t mono_attr; /* CLOCK_MONOTONIC, for q_work and every completion's cond;
                                        set in .after_fork, before any request */

static void to_timespec(uint64_t ns, struct timespec *ts)
{
    ts->tv_sec = (time_t)(ns / 1000000000ull);
    ts->tv_nsec = (long)(ns % 1000000000ull);
}

/* ---------------------------------------------------------------------------------------------- */
/* Configuration                                                                                    */

static int pyb_config(const char *key, const char *value)
{
    if (strcmp(key, "size") == 0) {
        cfg_size = nbdkit_parse_size(value);
        if (cfg_size <= 0 || cfg_size % BLOCK) {
            nbdkit_error("size must be a positive multiple of %u, got %s", BLOCK, value);
            return -1;
        }
    } else if (strcmp(key, "sync") == 0) {
        cfg_sync_given = 1;
        if (strcmp(value, "none") == 0)
            cfg_sync = -1;
        else if (strcmp(value, "global") == 0)
            cfg_sync = PYB_SYNC_GLOBAL;
        else if (strcmp(value, "page") == 0)
            cfg_sync = PYB_SYNC_PAGE;
        else if (strcmp(value, "atomic") == 0)
            cfg_sync = PYB_SYNC_ATOMIC;
        else {
            nbdkit_error("sync must be none, global, page or atomic, got %s", value);
            return -1;
        }
    } else if (strcmp(key, "write_delay_ns") == 0) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(value, &end, 10);
        if (errno || *end || end == value || v > MAX_DELAY_NS) {
            nbdkit_error("write_delay_ns must be an integer in [0, %llu], got %s", MAX_DELAY_NS, value);
            return -1;
        }
        cfg_delay_ns = v;
    } else if (strcmp(key, "chunk_size") == 0) {
        cfg_chunk_given = 1;
        cfg_chunk = nbdkit_parse_size(value);
        if (cfg_chunk < 512 || (cfg_chunk & (cfg_chunk - 1))) {
            nbdkit_error("chunk_size must be a power of two >= 512, got %s", value);
            return -1;
        }
    } else if (strcmp(key, "patch") == 0) {
        free(cfg_patch);
        cfg_patch = strdup(value);
        if (!cfg_patch) {
            nbdkit_error("strdup: %m");
            return -1;
        }
    } else if (strcmp(key, "hung_ns") == 0) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(value, &end, 10);
        if (errno || *end || end == value || !v || v > 3600ull * 1000000000ull) {
            nbdkit_error("hung_ns must be an integer in [1, 3600e9], got %s", value);
            return -1;
        }
        cfg_hung_ns = v;
    } else if (strcmp(key, "end_bio_intact") == 0) {
        if (strcmp(value, "0") != 0 && strcmp(value, "1") != 0) {
            nbdkit_error("end_bio_intact must be 0 or 1, got %s", value);
            return -1;
        }
        cfg_end_bio_intact = value[0] == '1';
    } else if (strcmp(key, "stats") == 0) {
        free(cfg_stats);
        cfg_stats = strdup(value);
        if (!cfg_stats) {
            nbdkit_error("strdup: %m");
            return -1;
        }
    } else {
        nbdkit_error("unknown parameter %s (size, sync, write_delay_ns, chunk_size, patch, hung_ns, end_bio_intact, stats)", key);
        return -1;
    }
    return 0;
}

static int pyb_config_complete(void)
{
    if (cfg_size < 0) {
        nbdkit_error("size=BYTES is required");
        return -1;
    }
    if (cfg_patch && (cfg_sync_given || cfg_chunk_given)) {
        nbdkit_error("patch=PATH and %s: the second applies to the lab's trackers, not to a patch",
                     cfg_sync_given ? "sync" : "chunk_size");
        return -1;
    }
    return 0;
}

static int pyb_get_ready(void)
{
    pyb_ops_tracker ops = {NULL, NULL};
    if (cfg_patch) {
        const pyb_kp_module *m;
        const char *err;
        if (pyb_kpatch_open(cfg_patch, &m, &err) != 0) {
            nbdkit_error("patch=%s: %s", cfg_patch, err);
            return -1;
        }
        pyb_kp_config kc;
        memset(&kc, 0, sizeof(kc)); /* no fault injection, no interrupt hook */
        kc.device_size = (uint64_t)cfg_size;
        kc.hung_ns = cfg_hung_ns;
        kc.end_bio_intact = cfg_end_bio_intact;
        int init_err = 0, rc = pyb_kpatch_tracker_create(m, &kc, &patch, &init_err);
        if (rc != PYB_KP_OK) {
            nbdkit_error("patch=%s: its init failed (code %d, init returned %d)", cfg_patch, rc, init_err);
            if (rc != PYB_KP_ENOMEM)
                pyb_kpatch_tracker_destroy(patch, NULL, NULL);
            patch = NULL;
            return -1;
        }
        ops.ops = &pyb_kpatch_ops;
        ops.self = patch;
    } else if (cfg_sync >= 0) {
        pyb_tracker_config tc;
        memset(&tc, 0, sizeof(tc)); /* zero = each later option's default */
        tc.device_size = (uint64_t)cfg_size;
        tc.chunk_size = (uint64_t)cfg_chunk;
        tc.counter_bits = cfg_sync == PYB_SYNC_ATOMIC ? 64 : 16; /* the v2 cover letter's widths (docs/design.md) */
        tc.sync = cfg_sync;
        tc.overflow = PYB_OVERFLOW_WAIT;
        tc.alloc_failure = PYB_ALLOC_HIJACK;
        if (pyb_tracker_create(&tc, &tracker) != 0) {
            nbdkit_error("could not create the tracker");
            return -1;
        }
    }
    pyb_cd_config cfg;
    memset(&cfg, 0, sizeof(cfg)); /* zero = each later option's default (check after the check key) */
    cfg.device_size = (uint64_t)cfg_size;
    cfg.block_size = BLOCK;
    cfg.region_blocks = 64;
    cfg.tracker = tracker;
    cfg.ops = ops;
    cfg.check = PYB_CHECK_AFTER;
    cfg.delay_mode = PYB_DELAY_YIELD; /* unused: writes wait on the completion queue */
    cfg.write_delay_ns = 0;
    cfg.bounce_copy = 1;
    if (pyb_cd_create(&cfg, &dev) != 0) {
        nbdkit_error("could not allocate a model of %" PRId64 " bytes", cfg_size);
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------------- */
/* The completion thread                                                                            */

static void *completion_thread(void *arg)
{
    (void)arg;
    pyb_cd_ctx *ctx = &completion_ctx;
    pyb_cd_ctx_init(dev, ctx);
    pthread_mutex_lock(&q_lock);
    for (;;) {
        if (!q_head) {
            if (q_stop)
                break;
            struct timespec ts;
            to_timespec(pyb_now_ns() + 100000000ull, &ts); /* bounded: re-check q_stop every 100 ms */
            pthread_cond_timedwait(&q_work, &q_lock, &ts);
            continue;
        }
        uint64_t now = pyb_now_ns();
        if (q_head->due_ns > now && !q_stop) {
            struct timespec ts;
            to_timespec(q_head->due_ns, &ts);
            pthread_cond_timedwait(&q_work, &q_lock, &ts);
            continue;
        }
        /* Take every completion that is due (C2: they are a prefix of the queue). */
        struct completion *batch = q_head, *last = q_head;
        while (last->next && (last->next->due_ns <= now || q_stop))
            last = last->next;
        q_head = last->next;
        if (!q_head)
            q_tail = NULL;
        last->next = NULL;
        pthread_mutex_unlock(&q_lock);
        for (struct completion *c = batch; c; c = c->next) {
            pyb_cd_write_step(dev, ctx, &c->w); /* LAND */
            pyb_cd_write_step(dev, ctx, &c->w); /* END */
        }
        pyb_cd_ctx_done(dev, ctx);
        pthread_mutex_lock(&q_lock);
        for (struct completion *c = batch, *next; c; c = next) {
            next = c->next;
            c->done = 1;
            if (c->abandoned) {
                pthread_cond_destroy(&c->cond);
                free(c);
            } else {
                pthread_cond_signal(&c->cond);
            }
        }
    }
    pthread_mutex_unlock(&q_lock);
    pyb_cd_ctx_done(dev, ctx);
    return NULL;
}

static int pyb_after_fork(void)
{
    pthread_condattr_init(&mono_attr);
    pthread_condattr_setclock(&mono_attr, CLOCK_MONOTONIC);
    pthread_cond_init(&q_work, &mono_attr);
    int rc = pthread_create(&q_thread, NULL, completion_thread, NULL);
    if (rc) {
        errno = rc;
        nbdkit_error("pthread_create: %m");
        return -1;
    }
    q_running = 1;
    return 0;
}

/* The distinct kernel reports the patch made (0 without one). */
static uint64_t patch_reports(void)
{
    if (!patch)
        return 0;
    pyb_kp_stats ks;
    patch->module->stats(patch->inst, &ks);
    return ks.reports;
}

/* Quiescence: every connection is closed. Drain the completions, then write the counters. */
static void pyb_cleanup(void)
{
    if (q_running) {
        pthread_mutex_lock(&q_lock);
        q_stop = 1;
        pthread_cond_signal(&q_work);
        pthread_mutex_unlock(&q_lock);
        pthread_join(q_thread, NULL);
        q_running = 0;
    }
    if (!cfg_stats || !dev)
        return;
    pyb_cd_stats s;
    pyb_cd_get_stats(dev, &s);
    uint64_t stale_cached = pyb_cd_stale_cached_blocks(dev), cached = pyb_cd_cached_blocks(dev);
    char tmp[4096];
    if (snprintf(tmp, sizeof(tmp), "%s.tmp", cfg_stats) >= (int)sizeof(tmp)) {
        nbdkit_error("stats path too long");
        return;
    }
    FILE *f = fopen(tmp, "w");
    if (!f) {
        nbdkit_error("%s: %m", tmp);
        return;
    }
    /* Records only (STYLE: no prose from C); pybcache/bcache/nbd/server.py renders them. */
    fprintf(f,
            "{\"reads\": %" PRIu64 ", \"writes\": %" PRIu64 ", \"read_bypasses\": %" PRIu64
            ", \"cache_inserts\": %" PRIu64 ", \"stale_reads\": %" PRIu64 ", \"stale_cached_blocks\": %" PRIu64
            ", \"read_hits\": %" PRIu64 ", \"read_misses\": %" PRIu64 ", \"miss_collisions\": %" PRIu64
            ", \"untracked_writes\": %" PRIu64 ", \"cached_blocks\": %" PRIu64 ", \"nbd_reads\": %" PRIu64
            ", \"nbd_writes\": %" PRIu64 ", \"nbd_trims\": %" PRIu64 ", \"nbd_flushes\": %" PRIu64
            ", \"abandoned_writes\": %" PRIu64 ", \"tracker_error\": %d, \"patch_reports\": %" PRIu64 "}\n",
            s.reads, s.writes, s.read_bypasses, s.cache_inserts, s.stale_reads, stale_cached, s.read_hits,
            s.read_misses, s.miss_collisions, s.untracked_writes, cached, pyb_load(&n_pread, PYB_RELAXED),
            pyb_load(&n_pwrite, PYB_RELAXED), pyb_load(&n_trim, PYB_RELAXED), pyb_load(&n_flush, PYB_RELAXED),
            pyb_load(&n_abandoned, PYB_RELAXED), pyb_cd_error(dev), patch_reports());
    if (fclose(f) != 0 || rename(tmp, cfg_stats) != 0)
        nbdkit_error("%s: %m", cfg_stats);
}

static void pyb_unload(void)
{
    pyb_cleanup(); /* idempotent: nothing left to drain if .cleanup ran */
    pyb_cd_destroy(dev);
    pyb_tracker_destroy(tracker);
    pyb_kpatch_tracker_destroy(patch, NULL, NULL);
    dev = NULL;
    tracker = NULL;
    patch = NULL;
    free(cfg_patch);
    cfg_patch = NULL;
    free(cfg_stats);
    cfg_stats = NULL;
}

/* ---------------------------------------------------------------------------------------------- */
/* Connections and requests                                                                         */

static int handle_token;

static void *pyb_open(int readonly)
{
    (void)readonly;
    return &handle_token; /* every connection shares the one device */
}

static int64_t pyb_get_size(void *handle)
{
    (void)handle;
    return cfg_size;
}

static int pyb_can_multi_conn(void *handle)
{
    (void)handle;
    return 1; /* writes are complete when acknowledged, so every connection sees them */
}

static int pyb_can_fua(void *handle)
{
    (void)handle;
    return NBDKIT_FUA_NATIVE;
}

static int pyb_can_flush(void *handle)
{
    (void)handle;
    return 1;
}

static int pyb_can_trim(void *handle)
{
    (void)handle;
    return 1;
}

static inline void put_le64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* The 4096 bytes of block blk at version v: 8 sectors, each with its header (see the top). */
static void encode_block(unsigned char *img, uint64_t blk, uint64_t version)
{
    memset(img, 0, BLOCK);
    for (unsigned s = 0; s < BLOCK / SECTOR; s++) {
        unsigned char *p = img + s * SECTOR;
        memcpy(p, "PYBCBLK1", 8);
        put_le64(p + 8, blk);
        put_le64(p + 16, version);
        put_le64(p + 24, blk * BLOCK + s * SECTOR);
    }
}

static int pyb_pread(void *handle, void *buf, uint32_t count, uint64_t offset, uint32_t flags)
{
    (void)handle;
    (void)flags;
    pyb_fetch_add(&n_pread, 1, PYB_RELAXED);
    uint64_t first = offset / BLOCK, end = (offset + count + BLOCK - 1) / BLOCK;
    unsigned char *out = buf, tmp[BLOCK];
    pyb_cd_ctx ctx;
    pyb_cd_read r;
    pyb_cd_ctx_init(dev, &ctx);
    for (uint64_t blk = first; blk < end;) {
        uint64_t n = end - blk < PYB_CD_MAX_READ_BLOCKS ? end - blk : PYB_CD_MAX_READ_BLOCKS;
        pyb_cd_read_run(dev, &ctx, &r, blk, n);
        if (pyb_cd_error(dev)) { /* the patch failed (this read's check or an earlier operation) */
            pyb_cd_ctx_done(dev, &ctx);
            nbdkit_error("the patch's tracker is broken (code %d)", pyb_cd_error(dev));
            errno = EIO;
            return -1;
        }
        for (uint64_t i = 0; i < n; i++) {
            uint64_t b0 = (blk + i) * BLOCK;
            uint64_t lo = b0 > offset ? b0 : offset;
            uint64_t hi = b0 + BLOCK < offset + count ? b0 + BLOCK : offset + count;
            if (lo == b0 && hi == b0 + BLOCK) {
                encode_block(out + (b0 - offset), blk + i, r.version[i]);
            } else {
                encode_block(tmp, blk + i, r.version[i]);
                memcpy(out + (lo - offset), tmp + (lo - b0), hi - lo);
            }
        }
        blk += n;
    }
    pyb_cd_ctx_done(dev, &ctx);
    return 0;
}

/* A bypass write of the blocks [offset, offset + count) touches (see the top). */
static int bypass_write(uint64_t offset, uint32_t count)
{
    uint64_t first = offset / BLOCK, end = (offset + count + BLOCK - 1) / BLOCK;
    struct completion *c = calloc(1, sizeof(*c));
    if (!c) {
        nbdkit_error("out of memory");
        errno = ENOMEM;
        return -1;
    }
    pthread_cond_init(&c->cond, &mono_attr);
    pyb_cd_ctx ctx;
    pyb_cd_ctx_init(dev, &ctx);
    pyb_cd_write_init(&c->w, first, end - first);
    pyb_cd_write_step(dev, &ctx, &c->w); /* START: may wait under overflow "wait" (never on q_lock) */
    if (c->w.step == PYB_W_DONE || pyb_cd_error(dev)) { /* a patch's write_start failed: nothing ran */
        int code = pyb_cd_error(dev);
        /* After an earlier failure this start returned (the broken tracker refused it); the write is
         * answered EIO without its other steps, as a failed I/O. */
        pyb_cd_ctx_done(dev, &ctx);
        pthread_cond_destroy(&c->cond);
        free(c);
        nbdkit_error("the patch's tracker is broken (code %d)", code);
        errno = EIO;
        return -1;
    }
    pyb_cd_write_step(dev, &ctx, &c->w); /* INVALIDATE */
    pyb_cd_ctx_done(dev, &ctx);

    pthread_mutex_lock(&q_lock);
    c->due_ns = pyb_now_ns() + cfg_delay_ns; /* C2: taken under q_lock */
    if (q_tail)
        q_tail->next = c;
    else
        q_head = c;
    q_tail = c;
    pthread_cond_signal(&q_work);
    uint64_t give_up = c->due_ns + WAIT_BOUND_NS;
    struct timespec ts;
    to_timespec(give_up, &ts);
    while (!c->done) {
        if (pthread_cond_timedwait(&c->cond, &q_lock, &ts) == ETIMEDOUT && !c->done) {
            c->abandoned = 1; /* C1: the completion thread frees it */
            pthread_mutex_unlock(&q_lock);
            pyb_fetch_add(&n_abandoned, 1, PYB_RELAXED);
            nbdkit_error("write of %u bytes at %" PRIu64 " not completed %llu s after its due time", count,
                         offset, WAIT_BOUND_NS / 1000000000ull);
            errno = EIO;
            return -1;
        }
    }
    pthread_mutex_unlock(&q_lock);
    int failed = c->w.error; /* written by the completion thread before done (under q_lock) */
    pthread_cond_destroy(&c->cond);
    free(c);
    if (failed) {
        nbdkit_error("the patch's write_end failed (code %d)", failed);
        errno = EIO;
        return -1;
    }
    return 0;
}

static int pyb_pwrite(void *handle, const void *buf, uint32_t count, uint64_t offset, uint32_t flags)
{
    (void)handle;
    (void)buf;
    (void)flags; /* FUA: complete on acknowledgement anyway */
    pyb_fetch_add(&n_pwrite, 1, PYB_RELAXED);
    return bypass_write(offset, count);
}

static int pyb_trim(void *handle, uint32_t count, uint64_t offset, uint32_t flags)
{
    (void)handle;
    (void)flags;
    pyb_fetch_add(&n_trim, 1, PYB_RELAXED);
    return bypass_write(offset, count);
}

static int pyb_flush(void *handle, uint32_t flags)
{
    (void)handle;
    (void)flags;
    pyb_fetch_add(&n_flush, 1, PYB_RELAXED);
    return 0;
}

static struct nbdkit_plugin plugin = {
    .name = "pybcache",
    .longname = "pybcache cached-device model",
    .version = "1",
    .description = "the bcache bypass-write race and its tracking fix, served over NBD",
    .config = pyb_config,
    .config_complete = pyb_config_complete,
    .config_help = "size=BYTES sync=none|global|page|atomic write_delay_ns=N chunk_size=BYTES patch=PATH "
                   "hung_ns=N end_bio_intact=0|1 stats=PATH",
    .get_ready = pyb_get_ready,
    .after_fork = pyb_after_fork,
    .cleanup = pyb_cleanup,
    .unload = pyb_unload,
    .open = pyb_open,
    .get_size = pyb_get_size,
    .can_multi_conn = pyb_can_multi_conn,
    .can_fua = pyb_can_fua,
    .can_flush = pyb_can_flush,
    .can_trim = pyb_can_trim,
    .pread = pyb_pread,
    .pwrite = pyb_pwrite,
    .trim = pyb_trim,
    .flush = pyb_flush,
    .errno_is_preserved = 1,
};

NBDKIT_REGISTER_PLUGIN(plugin)
