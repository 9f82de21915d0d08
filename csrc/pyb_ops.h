/*
 * pyb_ops.h - one tracker interface for every driver: the lab's own pyb_tracker and a loaded patch.
 *
 * A driver (the cached-device model, race, explore, fio, stress) holds a pyb_ops_tracker and calls
 * through its table instead of calling pyb_tracker_* directly, so that the same driver runs the lab's
 * tracker (pyb_ops_lab.h) or a user's kernel patch (csrc/pyb_kpatch.h): the cached-device model and its
 * workloads (pyb_cachedev.h, pyb_workload.h), the explorer and the stress (pyb_stress_begin_ops).
 * docs/check-patch.md, "Integration", says what each does with a tracker that cannot resume.
 *
 * Per-caller context. Each driver thread owns `ctx_size` bytes of context, initialised by ctx_init
 * and finished by ctx_done (the lab tracker keeps its pyb_ctx there: batched statistics and the atomic
 * variant's pinned slot; a patch needs none, ctx_size 0). A context is used by one thread at a time.
 *
 * Ranges are validated by the caller: len > 0 and off + len <= device size.
 */
#ifndef PYB_OPS_H
#define PYB_OPS_H

#include <stddef.h>
#include <stdint.h>

/* Non-negative results of start (bits). */
#define PYB_OPS_UNTRACKED 1      /* some chunk went untracked (lab tracker), or an allocation failed
                                    during the call (patch: whether it coped is the patch's business) */
#define PYB_OPS_WOULD_BLOCK 2    /* may_block was 0 and the start must wait; resume from *resume */

/* Negative results of any operation: the tracker is broken and refuses further operations. */
#define PYB_OPS_EHUNG (-1)       /* a wait or lock exceeded the hung bound (a report says where) */
#define PYB_OPS_EINTR (-2)       /* the host's interrupt hook stopped a wait */
#define PYB_OPS_EFATAL (-3)      /* a fatal kernel report (e.g. spinlock recursion) */
#define PYB_OPS_EBROKEN (-4)     /* an earlier operation failed in one of the ways above */

/* Capability bits. */
#define PYB_OPS_CAN_RESUME 1     /* start honours may_block == 0 (returns WOULD_BLOCK and a resume
                                    offset); without it, start may sleep inside the call, so callers
                                    must not hold the GIL and must complete ends on other threads */
#define PYB_OPS_RELEASE_ACQUIRE 2 /* end releases and is_active acquires (pyb_tracker.h, "Ordering
                                    for callers"); a patch gets whatever its own locks give */

typedef struct pyb_ops_stats {
    uint64_t starts, ends, checks;        /* operations (for a patch: bios passed to it) */
    uint64_t alloc_failures;              /* allocations that failed (injected) */
    uint64_t untracked_writes, underflows; /* lab tracker only; a patch cannot report them (0) */
} pyb_ops_stats;

typedef struct pyb_ops_memory {
    uint64_t idle_bytes;     /* lab: directory bytes; patch: bytes its init allocated and still holds */
    uint64_t op_bytes;       /* lab: page bytes; patch: bytes its operations hold */
    uint64_t total_bytes, peak_bytes;
    uint64_t op_allocations, peak_op_allocations;  /* lab: pages; patch: live allocations of operations */
} pyb_ops_memory;

typedef struct pyb_ops {
    const char *name;
    unsigned flags;          /* PYB_OPS_CAN_RESUME | PYB_OPS_RELEASE_ACQUIRE */
    size_t ctx_size;
    void (*ctx_init)(void *self, void *ctx);
    void (*ctx_done)(void *self, void *ctx);
    /* A bypass write of [off, off+len) begins. >= 0: PYB_OPS_* bits; < 0: PYB_OPS_E*. With may_block
     * == 0 and PYB_OPS_CAN_RESUME, a start that must wait returns PYB_OPS_WOULD_BLOCK with *resume
     * set (the range before it is counted); call again from *resume. */
    int (*start)(void *self, void *ctx, uint64_t off, uint64_t len, int may_block, uint64_t *resume);
    /* The write completed (a completion: run it on a thread other than the submitter's). 0 or < 0. */
    int (*end)(void *self, void *ctx, uint64_t off, uint64_t len);
    /* Must a read miss of [off, off+len) bypass the cache? 1, 0, or < 0. */
    int (*is_active)(void *self, void *ctx, uint64_t off, uint64_t len);
    void (*stats)(void *self, pyb_ops_stats *out);
    void (*memory)(void *self, pyb_ops_memory *out);
    void (*destroy)(void *self);
} pyb_ops;

/* What a driver holds. */
typedef struct pyb_ops_tracker {
    const pyb_ops *ops;
    void *self;
} pyb_ops_tracker;

#endif /* PYB_OPS_H */
