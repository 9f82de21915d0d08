/* pyb_kpatch.c - see pyb_kpatch.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "pyb_kpatch.h"

#include <dlfcn.h>
#include <stdlib.h>

_Static_assert(PYB_OPS_EHUNG == PYB_KP_EHUNG && PYB_OPS_EINTR == PYB_KP_EINTR &&
               PYB_OPS_EFATAL == PYB_KP_EFATAL && PYB_OPS_EBROKEN == PYB_KP_EBROKEN,
               "the module's escape codes are the vtable's");

int pyb_kpatch_open(const char *path, const pyb_kp_module **out, const char **err)
{
    /* RTLD_LOCAL: two patches may define the same static names and the same runtime symbols. */
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        *err = dlerror();
        return -1;
    }
    pyb_kp_module_fn fn = (pyb_kp_module_fn)dlsym(h, PYB_KP_MODULE_SYMBOL);
    if (!fn) {
        *err = "the module does not export " PYB_KP_MODULE_SYMBOL " (not built by pybcache.load_patch)";
        dlclose(h);
        return -1;
    }
    const pyb_kp_module *m = fn();
    if (!m || m->abi != PYB_KP_ABI) {
        *err = "the module was built for another version of the shim (ABI mismatch)";
        dlclose(h);
        return -1;
    }
    *out = m;
    return 0;
}

int pyb_kpatch_tracker_create(const pyb_kp_module *m, const pyb_kp_config *cfg, pyb_kpatch_tracker **out,
                              int *err)
{
    pyb_kpatch_tracker *t = calloc(1, sizeof(*t));
    if (!t)
        return PYB_KP_ENOMEM;
    t->module = m;
    int rc = m->create(cfg, &t->inst, err);
    if (rc == PYB_KP_ENOMEM) {
        free(t);
        return rc;
    }
    *out = t;
    return rc;
}

void pyb_kpatch_tracker_destroy(pyb_kpatch_tracker *t, uint64_t *leaked_bytes, uint64_t *leaked_allocations)
{
    if (!t)
        return;
    t->module->destroy(t->inst, leaked_bytes, leaked_allocations);
    free(t);
}

static void kp_ctx_nop(void *self, void *ctx)
{
    (void)self;
    (void)ctx;
}

static int kp_start(void *self, void *ctx, uint64_t off, uint64_t len, int may_block, uint64_t *resume)
{
    (void)ctx;
    (void)may_block;                  /* a patch cannot resume: it may sleep inside write_start */
    (void)resume;
    pyb_kpatch_tracker *t = self;
    int rc = t->module->start(t->inst, off, len);
    return rc == PYB_KP_ALLOC_FAILED ? PYB_OPS_UNTRACKED : rc;
}

static int kp_end(void *self, void *ctx, uint64_t off, uint64_t len)
{
    (void)ctx;
    pyb_kpatch_tracker *t = self;
    return t->module->end(t->inst, off, len);
}

static int kp_is_active(void *self, void *ctx, uint64_t off, uint64_t len)
{
    (void)ctx;
    pyb_kpatch_tracker *t = self;
    return t->module->is_active(t->inst, off, len);
}

static void kp_stats(void *self, pyb_ops_stats *out)
{
    pyb_kpatch_tracker *t = self;
    pyb_kp_stats s;
    t->module->stats(t->inst, &s);
    *out = (pyb_ops_stats){s.starts, s.ends, s.checks, s.alloc_failures, 0, 0};
}

static void kp_memory(void *self, pyb_ops_memory *out)
{
    pyb_kpatch_tracker *t = self;
    pyb_kp_memory m;
    t->module->memory(t->inst, &m);
    *out = (pyb_ops_memory){m.init_bytes, m.op_bytes, m.total_bytes, m.peak_bytes, m.op_allocations,
                            m.peak_op_allocations};
}

static void kp_destroy(void *self) { pyb_kpatch_tracker_destroy(self, NULL, NULL); }

const pyb_ops pyb_kpatch_ops = {
    .name = "kpatch",
    .flags = 0,
    .ctx_size = 0,
    .ctx_init = kp_ctx_nop,
    .ctx_done = kp_ctx_nop,
    .start = kp_start,
    .end = kp_end,
    .is_active = kp_is_active,
    .stats = kp_stats,
    .memory = kp_memory,
    .destroy = kp_destroy,
};
