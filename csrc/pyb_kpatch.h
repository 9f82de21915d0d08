/*
 * pyb_kpatch.h - load a compiled patch module and drive it as a tracker through pyb_ops.
 *
 * The module (built by pybcache.load_patch from the user's patch and the shim runtime) is opened with
 * dlopen and never closed: its threads' RCU reader records and lock classes live in it, and a thread
 * that ran a patch operation keeps a destructor pointing into it until it exits.
 */
#ifndef PYB_KPATCH_H
#define PYB_KPATCH_H

#include <stdint.h>

/* Found beside this header in the source tree and in the copy a wheel ships (pybcache/csrc/). */
#include "kpatch/include/pybcache/kpatch_abi.h"
#include "pyb_ops.h"

/* Open the module at path. Returns 0 and *out, or -1 with *err set to a static or dlerror() message
 * (the C library's own text, valid until the next dl call on this thread). */
int pyb_kpatch_open(const char *path, const pyb_kp_module **out, const char **err);

/* A patch instance as a tracker. */
typedef struct pyb_kpatch_tracker {
    const pyb_kp_module *module;
    pyb_kp_instance *inst;
} pyb_kpatch_tracker;

/* Build an instance (runs the patch's init). Returns PYB_KP_OK with *out, or a PYB_KP_E* code; on
 * PYB_KP_EINIT *err holds the patch's error and *out is still set (its reports can be read) and must
 * be destroyed with pyb_kpatch_tracker_destroy. */
int pyb_kpatch_tracker_create(const pyb_kp_module *m, const pyb_kp_config *cfg, pyb_kpatch_tracker **out,
                              int *err);
/* Run exit, free what the patch left allocated (reported through the pointers, either may be NULL). */
void pyb_kpatch_tracker_destroy(pyb_kpatch_tracker *t, uint64_t *leaked_bytes, uint64_t *leaked_allocations);

/* The pyb_ops table for a pyb_kpatch_tracker (self = the pyb_kpatch_tracker). */
extern const pyb_ops pyb_kpatch_ops;

#endif /* PYB_KPATCH_H */
