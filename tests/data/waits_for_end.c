// SPDX-License-Identifier: GPL-2.0-only
/* write_start sleeps on the instance's own wait queue until a write_end wakes it. */
#include <linux/slab.h>
#include <linux/wait.h>
#include <pybcache/kpatch.h>
struct st { wait_queue_head_t wq; int go; };
static int init(struct cached_dev *dc) { struct st *s = kzalloc(sizeof(*s), GFP_KERNEL); if (!s) return -ENOMEM; init_waitqueue_head(&s->wq); dc->bypass = s; return 0; }
static void fini(struct cached_dev *dc) { kfree(dc->bypass); }
static void start(struct cached_dev *dc, struct bio *bio) { struct st *s = dc->bypass; (void)bio; wait_event(s->wq, READ_ONCE(s->go)); }
static void end(struct cached_dev *dc, struct bio *bio) { struct st *s = dc->bypass; (void)bio; WRITE_ONCE(s->go, 1); wake_up(&s->wq); }
static bool rd(struct cached_dev *dc, struct bio *bio) { (void)dc; (void)bio; return false; }
static const struct pybcache_patch_ops ops = { .name = "waits-for-end", .init = init, .exit = fini, .write_start = start, .write_end = end, .read_bypass = rd };
PYBCACHE_PATCH(ops);
