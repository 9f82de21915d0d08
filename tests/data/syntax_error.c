// SPDX-License-Identifier: GPL-2.0-only
/* Does not compile on purpose. */
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/wait.h>
#include <pybcache/kpatch.h>

static void start(struct cached_dev *dc, struct bio *bio) { undeclared_thing(dc, bio) }
