# Exported C-level view of pybcache.bcache.kpatch._kpatch: the drivers of pybcache.bcache._cachedev take a PatchTracker the
# caller built and drive its instance through the tracker vtable (csrc/pyb_ops.h, pyb_kpatch_ops).
from libc.stdint cimport uint64_t

from pybcache.bcache.includes.pyb_kpatch cimport pyb_kp_instance, pyb_kp_module, pyb_kpatch_tracker
from pybcache.bcache.includes.pyb_ops cimport pyb_ops_tracker

# A patch's range operation (the module's start, end or is_active entry).
ctypedef int (*_kp_range_op)(pyb_kp_instance *inst, uint64_t off, uint64_t len) noexcept nogil


cdef class PatchModule:
    cdef const pyb_kp_module *_m        # the loaded module (never unloaded)
    cdef readonly str library
    cdef readonly str name
    cdef readonly object bypass_granularity   # ops.bypass_granularity in bytes (0: the reference's chunks)


cdef class PatchTracker:
    cdef pyb_kpatch_tracker *_t         # owned; NULL once closed
    cdef readonly object patch
    cdef readonly uint64_t device_size
    cdef readonly object fault
    cdef readonly double hung_timeout
    cdef readonly str end_bio           # "consumed" (bcache's cached_dev_write_complete) or "intact"
    cdef public object _wait_hook       # called (GIL held, exceptions ignored) each time a patch thread
                                        # of this tracker is about to sleep in a wait; None: nothing
    cdef readonly tuple end_contexts  # the contexts its ends rotate over (END_CONTEXTS names)
    cdef readonly str fail_alloc      # FAIL_ALLOC_MODES name
    cdef object _pending          # an exception raised by a signal handler during a wait
    cdef dict _leaked
    cdef int _users               # drivers (CachedDevice) holding _t; close() refuses while > 0 (GIL)
    cdef int _calls               # calls in progress without the GIL (start, end, is_active,
                                  # rcu_barrier); close() refuses while > 0 (GIL)
    cdef pyb_ops_tracker _opt     # _t as the tracker vtable, for _ops_capsule (the native stress)

    cdef int _check_signals(self) noexcept
    cdef pyb_kpatch_tracker *_live(self) except NULL
    cdef int _raise_for(self, int rc, str what) except -1
    cdef int _range_call(self, _kp_range_op op, object offset, object length, str what) except -2


# The reports of any instance of a module (the explorer's per-schedule ones), rendered as
# PatchTracker.kernel_reports renders them.
cdef list _instance_reports(pyb_kpatch_tracker *t)
# The exception for a failed operation (rc < 0) of an instance: TimeoutError for a hung one, else
# RuntimeError, naming the fatal report (None if rc >= 0).
cdef object _instance_error(pyb_kpatch_tracker *t, int rc, str what, double hung_timeout)
