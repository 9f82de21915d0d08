/*
 * bench_ops.c - what the tracker vtable costs the native stress: the lab's tracker driven through its
 * devirtualised path (pyb_stress_begin: pyb_tracker_* called directly, as before the vtable) against
 * the same tracker driven through indirect calls (a copy of pyb_lab_ops, which the drivers do not
 * recognise as the lab's), alternating in one process, one round each per pass. Prints the median
 * ops/s of each and the ratio indirect / direct. Not a test: timing never decides pass/fail here.
 *
 *   build/bench_ops [passes] [ops per thread] [threads] [sync: 0 global, 1 page, 2 atomic]
 */
#include <stdio.h>
#include <stdlib.h>

#include "../pyb_ops_lab.h"
#include "../pyb_stress.h"

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double run(pyb_ops_tracker t, uint64_t size, const pyb_stress_config *cfg)
{
    pyb_stress_result out[PYB_STRESS_MAX_THREADS];
    pyb_run *r;
    if (pyb_stress_begin_ops(t, size, cfg, NULL, out, &r) != 0 || pyb_run_finish(r, NULL) != 0) {
        fprintf(stderr, "stress failed\n");
        exit(1);
    }
    uint64_t ops = 0, wall = 0;
    for (uint32_t i = 0; i < cfg->threads; i++) {
        ops += out[i].ops;
        wall = out[i].elapsed_ns > wall ? out[i].elapsed_ns : wall;
    }
    return wall ? ops / (wall / 1e9) : 0.0;
}

int main(int argc, char **argv)
{
    int passes = argc > 1 ? atoi(argv[1]) : 9;
    uint64_t ops = argc > 2 ? strtoull(argv[2], NULL, 10) : 200000;
    uint32_t threads = argc > 3 ? (uint32_t)atoi(argv[3]) : 2;
    int sync = argc > 4 ? atoi(argv[4]) : PYB_SYNC_PAGE;
    if (passes < 1 || passes > 99 || !ops || !threads || threads > 64 || sync < 0 || sync > 2)
        return 2;
    uint64_t size = 1ull << 36;
    pyb_tracker_config tc = {0};
    tc.device_size = size;
    tc.chunk_size = 1 << 20;
    tc.sync = sync;
    tc.counter_bits = sync == PYB_SYNC_ATOMIC ? 64 : 16;
    tc.overflow = PYB_OVERFLOW_WAIT;
    tc.alloc_failure = PYB_ALLOC_HIJACK;
    pyb_tracker *tr;
    if (pyb_tracker_create(&tc, &tr) != 0)
        return 1;
    pyb_ops copy = pyb_lab_ops; /* same functions, another address: the drivers' indirect path */
    pyb_ops_tracker direct = pyb_ops_lab(tr), indirect = {&copy, tr};
    pyb_stress_config cfg = {0};
    cfg.threads = threads;
    cfg.ops = ops;
    cfg.region_len = 1ull << 30;
    cfg.write_len = 128 << 10;
    cfg.depth = 4;
    cfg.seed = 1;
    double d[99], ind[99], ratio[99];
    run(direct, size, &cfg); /* warm-up */
    for (int i = 0; i < passes; i++) {
        /* alternate which goes first, so that neither always runs on a warmer machine */
        if (i % 2) {
            ind[i] = run(indirect, size, &cfg);
            d[i] = run(direct, size, &cfg);
        } else {
            d[i] = run(direct, size, &cfg);
            ind[i] = run(indirect, size, &cfg);
        }
        ratio[i] = ind[i] / d[i];
    }
    qsort(d, passes, sizeof(double), cmp);
    qsort(ind, passes, sizeof(double), cmp);
    qsort(ratio, passes, sizeof(double), cmp);
    printf("sync %d, %u threads, %llu ops/thread, %d passes: direct %.0f ops/s, indirect %.0f ops/s (medians); "
           "median per-pass ratio indirect/direct %.3f (min %.3f, max %.3f)\n",
           sync, threads, (unsigned long long)ops, passes, d[passes / 2], ind[passes / 2], ratio[passes / 2],
           ratio[0], ratio[passes - 1]);
    pyb_tracker_destroy(tr);
    return 0;
}
