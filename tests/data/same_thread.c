// SPDX-License-Identifier: GPL-2.0-only
/* WARN_ON when write_end runs on the thread that ran a write_start: ends must run elsewhere. */
#define _GNU_SOURCE
#include <unistd.h>
#include <sys/syscall.h>
#include <linux/slab.h>
#include <linux/bug.h>
#include <pybcache/kpatch.h>
static _Thread_local int mine;          /* set on the thread that ran a start */
static void start(struct cached_dev *dc, struct bio *bio) { (void)dc; (void)bio; mine = 1; }
static void end(struct cached_dev *dc, struct bio *bio) { (void)dc; (void)bio; WARN_ON(mine); }
static bool rd(struct cached_dev *dc, struct bio *bio) { (void)dc; (void)bio; return false; }
static const struct pybcache_patch_ops ops = { .name = "same-thread", .write_start = start, .write_end = end, .read_bypass = rd };
PYBCACHE_PATCH(ops);
