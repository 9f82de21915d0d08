// SPDX-License-Identifier: GPL-2.0-only
/* Dies on purpose by a real-time signal (one Python's signal module has no name for) in write_start. */
#include <signal.h>
#include <unistd.h>
#include <linux/slab.h>
#include <pybcache/kpatch.h>

static void start(struct cached_dev *dc, struct bio *bio) { (void)dc; (void)bio; kill(getpid(), SIGRTMIN + 3); }
static void end(struct cached_dev *dc, struct bio *bio) { (void)dc; (void)bio; }
static bool none_read(struct cached_dev *dc, struct bio *bio) { (void)dc; (void)bio; return false; }
static const struct pybcache_patch_ops ops = { .name = "rt-signal", .write_start = start, .write_end = end,
        .read_bypass = none_read };
PYBCACHE_PATCH(ops);
