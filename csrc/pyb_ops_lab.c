/* pyb_ops_lab.c - see pyb_ops_lab.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "pyb_ops_lab.h"

_Static_assert(PYB_OPS_UNTRACKED == PYB_START_UNTRACKED && PYB_OPS_WOULD_BLOCK == PYB_START_WOULD_BLOCK,
               "the lab tracker's start bits are the vtable's");

static void lab_ctx_init(void *self, void *ctx)
{
    (void)self;
    pyb_ctx init = PYB_CTX_INIT;
    *(pyb_ctx *)ctx = init;
}

static void lab_ctx_done(void *self, void *ctx) { pyb_tracker_ctx_done(self, ctx); }

static int lab_start(void *self, void *ctx, uint64_t off, uint64_t len, int may_block, uint64_t *resume)
{
    uint64_t r = off;
    int ret = pyb_tracker_start(self, ctx, off, len, may_block, &r);
    if (resume)
        *resume = r;
    return ret & (PYB_START_UNTRACKED | PYB_START_WOULD_BLOCK);
}

static int lab_end(void *self, void *ctx, uint64_t off, uint64_t len)
{
    pyb_tracker_end(self, ctx, off, len);
    return 0;
}

static int lab_is_active(void *self, void *ctx, uint64_t off, uint64_t len)
{
    return pyb_tracker_is_active(self, ctx, off, len) != 0;
}

static void lab_stats(void *self, pyb_ops_stats *out)
{
    pyb_tracker_stats s;
    pyb_tracker_get_stats(self, &s);
    /* checks: the lab tracker does not count them (0). */
    *out = (pyb_ops_stats){s.starts, s.ends, 0, s.alloc_failures, s.untracked_writes, s.underflows};
}

static void lab_memory(void *self, pyb_ops_memory *out)
{
    pyb_tracker_memory m;
    pyb_tracker_get_memory(self, &m);
    *out = (pyb_ops_memory){m.directory_bytes, m.page_bytes, m.total_bytes, m.peak_bytes, m.pages, m.peak_pages};
}

static void lab_destroy(void *self) { pyb_tracker_destroy(self); }

const pyb_ops pyb_lab_ops = {
    .name = "lab",
    .flags = PYB_OPS_CAN_RESUME | PYB_OPS_RELEASE_ACQUIRE,
    .ctx_size = sizeof(pyb_ctx),
    .ctx_init = lab_ctx_init,
    .ctx_done = lab_ctx_done,
    .start = lab_start,
    .end = lab_end,
    .is_active = lab_is_active,
    .stats = lab_stats,
    .memory = lab_memory,
    .destroy = lab_destroy,
};
