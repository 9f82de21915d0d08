/*
 * pyb_ops_lab.h - the pyb_ops table of the lab's own tracker (pyb_tracker.h).
 *
 * self is the pyb_tracker, ctx a pyb_ctx (ctx_size bytes). start maps to pyb_tracker_start (may_block
 * and *resume as there; PYB_START_UNTRACKED / WOULD_BLOCK keep their bit values), end and is_active to
 * pyb_tracker_end / pyb_tracker_is_active (never negative), ctx_done to pyb_tracker_ctx_done. destroy
 * is pyb_tracker_destroy: a driver that only borrows the tracker never calls it.
 *
 * Drivers that need the lab tracker's extras (split calls, resume, undo, unpin, counts, reclaim) test
 * `t.ops == &pyb_lab_ops` and call pyb_tracker_* on pyb_ops_lab_tracker(t) directly: the
 * devirtualised path, the same calls as before the vtable existed.
 */
#ifndef PYB_OPS_LAB_H
#define PYB_OPS_LAB_H

#include "pyb_ops.h"
#include "pyb_tracker.h"

extern const pyb_ops pyb_lab_ops;

/* The lab tracker t as a pyb_ops_tracker (t may be NULL: no tracker). */
static inline pyb_ops_tracker pyb_ops_lab(pyb_tracker *t)
{
    pyb_ops_tracker o = {t ? &pyb_lab_ops : NULL, t};
    return o;
}

/* The lab tracker behind t, or NULL if t is something else (a patch) or nothing. */
static inline pyb_tracker *pyb_ops_lab_tracker(pyb_ops_tracker t) { return t.ops == &pyb_lab_ops ? t.self : NULL; }

#endif /* PYB_OPS_LAB_H */
