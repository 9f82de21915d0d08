// SPDX-License-Identifier: GPL-2.0-only
/*
 * none.c - the lab's `none` variant as a patch: no tracker at all (`pybcache explore --sync none`, the
 * unpatched bcache of the cached-device model, csrc/pyb_cachedev.c with no tracker attached).
 *
 * write_start and write_end count nothing and read_bypass never asks a read to bypass the cache, so a
 * read that overlaps a bypass write in flight is served from the cache like any other. Both explorers
 * must find a violation: the call-level explorer a stale read, the patch-level one a missed bypass
 * (tests/kpatch/test_explorers_agree.py).
 */
#include <linux/kernel.h>
#include <linux/bio.h>
#include <pybcache/kpatch.h>

static void untracked_write_start(struct cached_dev *dc, struct bio *bio)
{
        (void)dc;
        (void)bio;
}

static void untracked_write_end(struct cached_dev *dc, struct bio *bio)
{
        (void)dc;
        (void)bio;
}

static bool untracked_read_bypass(struct cached_dev *dc, struct bio *bio)
{
        (void)dc;
        (void)bio;
        return false;
}

static const struct pybcache_patch_ops untracked_ops = {
        .name = "lab-none",
        .write_start = untracked_write_start,
        .write_end = untracked_write_end,
        .read_bypass = untracked_read_bypass,
};
PYBCACHE_PATCH(untracked_ops);
