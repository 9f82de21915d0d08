# Declarations of csrc/pyb_kpatch.h and csrc/kpatch/include/pybcache/kpatch_abi.h.
from libc.stdint cimport uint64_t

cdef extern from "pyb_kpatch.h" nogil:
    enum:
        PYB_KP_ABI
        PYB_KP_OK
        PYB_KP_ALLOC_FAILED
        PYB_KP_EHUNG
        PYB_KP_EINTR
        PYB_KP_EFATAL
        PYB_KP_EBROKEN
        PYB_KP_EINIT
        PYB_KP_ENOMEM
        PYB_KP_LOG_TEXT
        PYB_KP_END_CONTEXTS
        PYB_KP_END_ALL

    ctypedef struct pyb_kp_report:
        int kind
        int op
        const char *file
        int line
        const char *lock
        const char *other_lock
        const char *other_file
        int other_line
        int detail
        int hardirq
        int irqs_disabled
        int locks_held
        int rcu_depth
        int end_context
        uint64_t count
        uint64_t inflight, ends_during, others_running, rcu_queued

    ctypedef struct pyb_kp_log:
        int level
        const char *file
        int line
        uint64_t suppressed
        char text[240]

    ctypedef struct pyb_kp_stats:
        uint64_t starts, ends, checks, allocations, frees, alloc_failures, nofail_allocations, warnings
        uint64_t reports, reports_dropped, log_records, log_dropped, rcu_pending
        uint64_t waits, sleeping, writes_in_flight, write_ends, settled_ends
        uint64_t ends_in[4]
        uint64_t reserve_taken, mempool_waits

    ctypedef struct pyb_kp_memory:
        uint64_t init_bytes, op_bytes, total_bytes, peak_bytes, op_allocations, peak_op_allocations

    ctypedef struct pyb_kp_config:
        uint64_t device_size
        int (*should_fail)(void *arg, uint64_t size) noexcept nogil
        void *should_fail_arg
        int (*interrupted)(void *arg) noexcept nogil
        void *interrupted_arg
        uint64_t hung_ns
        int end_bio_intact
        unsigned int end_contexts
        int fail_mode

    ctypedef struct pyb_kp_instance:
        pass

    ctypedef struct pyb_kp_module:
        int abi
        const char *name
        const char *missing_op
        int (*create)(const pyb_kp_config *cfg, pyb_kp_instance **out, int *err) noexcept nogil
        void (*destroy)(pyb_kp_instance *inst, uint64_t *leaked_bytes, uint64_t *leaked_allocations) noexcept nogil
        int (*start)(pyb_kp_instance *inst, uint64_t off, uint64_t len) noexcept nogil
        int (*end)(pyb_kp_instance *inst, uint64_t off, uint64_t len) noexcept nogil
        int (*is_active)(pyb_kp_instance *inst, uint64_t off, uint64_t len) noexcept nogil
        void (*stats)(pyb_kp_instance *inst, pyb_kp_stats *out) noexcept nogil
        void (*memory)(pyb_kp_instance *inst, pyb_kp_memory *out) noexcept nogil
        size_t (*reports)(pyb_kp_instance *inst, size_t start, pyb_kp_report *out, size_t n) noexcept nogil
        size_t (*log)(pyb_kp_instance *inst, size_t start, pyb_kp_log *out, size_t n) noexcept nogil
        uint64_t (*rcu_barrier)(pyb_kp_instance *inst) noexcept nogil
        uint64_t bypass_granularity
        int (*end_in)(pyb_kp_instance *inst, uint64_t off, uint64_t len, int context) noexcept nogil
        int (*claim_end_context)(pyb_kp_instance *inst) noexcept nogil
        void (*end_counts)(uint64_t *out) noexcept nogil

    ctypedef struct pyb_kpatch_tracker:
        const pyb_kp_module *module
        pyb_kp_instance *inst

    # Open a patch module (never closed); 0, or -1 with *err set.
    int pyb_kpatch_open(const char *path, const pyb_kp_module **out, const char **err) noexcept
    # Build an instance and run the patch's init; PYB_KP_OK or a PYB_KP_E* code.
    int pyb_kpatch_tracker_create(const pyb_kp_module *m, const pyb_kp_config *cfg, pyb_kpatch_tracker **out,
                                  int *err) noexcept
    # Run exit and free what is left, reporting it.
    void pyb_kpatch_tracker_destroy(pyb_kpatch_tracker *t, uint64_t *leaked_bytes,
                                    uint64_t *leaked_allocations) noexcept
