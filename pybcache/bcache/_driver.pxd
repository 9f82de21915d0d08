# The Python side of a native run (csrc/pyb_driver.h), shared by the modules that start one
# (inline: compiled into each module that cimports it).
from cpython.exc cimport PyErr_CheckSignals
from libc.stdint cimport uint64_t

from pybcache.bcache._argcheck cimport _check_wait_timeout
from pybcache.bcache.includes.pyb_driver cimport pyb_run, pyb_run_finish, pyb_run_stop, pyb_run_timeout, pyb_run_wait

cdef enum:
    _SLICE_NS = 50000000   # how often a waiting caller looks for signals (50 ms)


cdef inline int _finish_run(pyb_run *run, pyb_run_timeout *to) except? -9999:
    """Wait for a native run in slices with the GIL released, checking for signals between slices.
    On a signal's exception (Ctrl-C: KeyboardInterrupt) stop the run, join its threads (they roll back
    a start in progress and end every write in flight) and re-raise. Returns pyb_run_finish's code."""
    cdef int done = 0, rc
    while not done:
        with nogil:
            done = pyb_run_wait(run, _SLICE_NS)
        if not done:
            try:
                PyErr_CheckSignals()
            except BaseException:
                pyb_run_stop(run)
                with nogil:
                    pyb_run_finish(run, NULL)
                raise
    with nogil:
        rc = pyb_run_finish(run, to)
    return rc


cdef inline double _wait_timeout(object value, object owner) except -1.0:
    """The bound on a start's wait in seconds (0.0 = none): ``value`` if given, else
    ``owner.wait_timeout`` if it has one (None there = no bound), else 10 s; checked as the tracker's
    own ``wait_timeout`` is (_check_wait_timeout)."""
    if value is None:
        value = getattr(owner, "wait_timeout", 10.0)
        if value is None:
            return 0.0
    return _check_wait_timeout(value)


cdef inline object _timeout_error(pyb_run_timeout *to, uint64_t chunk_size, double limit_s):
    """The TimeoutError of a run that stopped because a start waited past wait_timeout: what it
    waited for (room in a counter at its maximum, or a mempool page) and at which chunk."""
    cdef uint64_t chunk = to.offset // chunk_size
    where = f"chunk {chunk} (bytes [{chunk * chunk_size}, {(chunk + 1) * chunk_size}))"
    if to.wait_page:
        what = (f"a tracking page for {where}: the mempool reserve stayed empty and every allocation "
                f"failed (alloc_failure=\"mempool\")")
    else:
        what = f"{where} to drop below its counter's maximum (overflow=\"wait\")"
    return TimeoutError(
        f"a bypass write's start waited {to.waited_ns / 1e9:.3g} s (wait_timeout={limit_s:g}) for {what}; "
        f"the run was stopped, that start rolled back and every write ended")
