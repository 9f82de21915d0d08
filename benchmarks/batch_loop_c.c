/*
 * The batch loops alone, without Python: pyb_tracker_start_many + end_many of 400,000 128 KiB writes at
 * random 4 KiB-aligned offsets against the bare floor of the variant (spinlock pair for global/page, atomic
 * pair for atomic), timed in this thread's CPU time, floor then pair, in 9 interleaved rounds; prints the
 * last round's ns and the median ratio with its range. One write is held on every page so pages stay
 * resident. Used to decide on the slot prefetch (docs/benchmarks.md); build and run from the repository:
 *
 *   cc -std=c11 -D_GNU_SOURCE -O2 -pthread -Icsrc -o /tmp/batch_loop benchmarks/batch_loop_c.c \
 *       csrc/pyb_tracker.c csrc/pyb_atomic.c csrc/pyb_fault.c csrc/pyb_floor.c
 *   /tmp/batch_loop DEVICE_BYTES SYNC     # SYNC: 0 global, 1 page, 2 atomic; e.g. 10737418240 1
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "pyb_floor.h"
#include "pyb_tracker.h"

static double cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static uint64_t rng = 88172645463325252ull;
static uint64_t xorshift(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s DEVICE_BYTES SYNC(0 global, 1 page, 2 atomic)\n", argv[0]);
        return 2;
    }
    const uint64_t dev = strtoull(argv[1], NULL, 0), write = 128 * 1024, chunk = 32 << 20;
    const int sync = atoi(argv[2]), rounds = 9;
    const size_t n = 400000;
    if (dev < 2 * write || sync < 0 || sync > 2) {
        fprintf(stderr, "DEVICE_BYTES must be >= %llu and SYNC in [0, 2]\n", (unsigned long long)(2 * write));
        return 2;
    }
    uint64_t *offs = malloc(n * sizeof(*offs));
    if (!offs)
        return 1;
    for (size_t i = 0; i < n; i++)
        offs[i] = (xorshift() % ((dev - write) / 4096)) * 4096;
    pyb_tracker_config cfg = {.device_size = dev, .chunk_size = chunk, .sync = sync,
                              .counter_bits = sync == PYB_SYNC_ATOMIC ? 64 : 16};
    pyb_tracker *t;
    if (pyb_tracker_create(&cfg, &t) != 0) {
        fprintf(stderr, "pyb_tracker_create failed\n");
        return 1;
    }
    pyb_ctx ctx = PYB_CTX_INIT;
    int ret;
    uint64_t resume;
    const uint64_t span = pyb_tracker_chunks_per_page(t) * chunk;
    for (uint64_t p = 0; p * span < dev; p++) { /* one write held on every page */
        uint64_t o = p * span + span - 4096;
        if (o + 4096 <= dev)
            pyb_tracker_start(t, &ctx, o, 4096, 0, &resume);
    }
    double r[9], pair = 0, floor = 0;
    for (int k = 0; k < rounds; k++) {
        double c0 = cpu_ns();
        if (sync == PYB_SYNC_ATOMIC)
            pyb_floor_atomic_pair_ns(n);
        else
            pyb_floor_spin_pair_ns(n);
        double c1 = cpu_ns();
        pyb_tracker_start_many(t, &ctx, offs, NULL, write, n, &ret, &resume);
        pyb_tracker_end_many(t, &ctx, offs, NULL, write, n);
        double c2 = cpu_ns();
        r[k] = (c2 - c1) / (c1 - c0);
        pair = (c2 - c1) / (double)n;
        floor = (c1 - c0) / (double)n;
    }
    for (int a = 0; a < rounds; a++) /* sort for the median */
        for (int b = a + 1; b < rounds; b++)
            if (r[b] < r[a]) {
                double x = r[a];
                r[a] = r[b];
                r[b] = x;
            }
    printf("pair %.2f ns floor %.2f ns (last round); median ratio %.3f (min %.3f max %.3f)\n", pair, floor,
           r[rounds / 2], r[0], r[rounds - 1]);
    pyb_tracker_ctx_done(t, &ctx);
    pyb_tracker_destroy(t);
    free(offs);
    return 0;
}
