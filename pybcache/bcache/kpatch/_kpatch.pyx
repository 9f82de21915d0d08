# cython: language_level=3
"""Compiled binding of loaded kernel patches. Public names are in :mod:`pybcache.bcache.kpatch.load`.

A patch module is a shared object built by :func:`pybcache.load_patch`; this module opens it through
csrc/pyb_kpatch.c and drives its instances. Every operation runs without the GIL: a patch may sleep
inside write_start (a wait_event), and its waits poll this module's interrupt hook, which takes the GIL
only to check for signals.
"""
from libc.stdint cimport int64_t, uint64_t
from libc.string cimport memset

from pybcache.bcache._argcheck cimport _as_int, _check_byte_range, _typename
from pybcache.bcache.includes.pyb_fault cimport pyb_fault, pyb_fault_should_fail
from pybcache.bcache.includes.pyb_kpatch cimport *

from cpython.exc cimport PyErr_CheckSignals
from cpython.pycapsule cimport PyCapsule_New

from pybcache.bcache.includes.pyb_ops cimport pyb_kpatch_ops

# The caller's injector itself (its pyb_fault), so that a patch shares it and its `injected` count
# exactly as a BypassWriteTracker does.
from pybcache.bcache._tracker cimport FaultInjection, _mcs_registry
from pybcache.bcache.includes.pyb_atomic cimport pyb_mcs_registry, pyb_mcs_registry_share

# One queued-lock node registry per process (this module links its own copy of the C core too).
pyb_mcs_registry_share(_mcs_registry())


def _mcs_registry_address():
    """The address of the queued-lock node registry this module's C core uses (tests: one per process)."""
    return <size_t>pyb_mcs_registry()


#: The contexts write_end can run in, by their code (enum pyb_kp_end_context): a bio completion in hard-irq
#: or soft-irq context, a work item (process context), inline on the submitting thread.
END_CONTEXTS = ("hardirq", "softirq", "worker", "inline")
#: Which allocations fault injection may fail, by code (enum pyb_kp_fail_mode).
FAIL_ALLOC_MODES = ("can-fail", "all")


def _end_context_mask(value):
    """``end_contexts`` (a name, ``"all"``, or an iterable of names) as the runtime's bit mask."""
    names = END_CONTEXTS if value == "all" else ((value,) if isinstance(value, str) else value)
    try:
        names = tuple(names)
    except TypeError:
        raise TypeError(f"end_contexts must be 'all', one of {END_CONTEXTS} or an iterable of them, "
                        f"got {_typename(value)}") from None
    if not names:
        raise ValueError(f"end_contexts must name at least one of {END_CONTEXTS}")
    mask = 0
    for n in names:
        if n not in END_CONTEXTS:
            raise ValueError(f"end_contexts: {n!r} is not one of {END_CONTEXTS} (or 'all')")
        mask |= 1 << END_CONTEXTS.index(n)
    return mask, tuple(c for c in END_CONTEXTS if mask & (1 << END_CONTEXTS.index(c)))


cdef int _should_fail(void *arg, uint64_t size) noexcept nogil:
    return pyb_fault_should_fail(<pyb_fault *>arg, size)


cdef int _interrupted(void *arg) noexcept nogil:
    with gil:
        return (<PatchTracker>arg)._check_signals()


cdef class PatchModule:
    """A loaded patch module (the compiled .so). Use :func:`pybcache.load_patch`."""
    # Fields: pybcache/bcache/kpatch/_kpatch.pxd.

    def __cinit__(self, library):
        cdef const char *err = NULL
        cdef bytes path = str(library).encode()
        if pyb_kpatch_open(path, &self._m, &err) != 0:
            raise ValueError(f"cannot load the patch module {library}: {(<bytes>err).decode(errors='replace')}")
        if self._m.missing_op != NULL:
            raise ValueError(f"the patch's pybcache_patch_ops has no {self._m.missing_op.decode()}; "
                             f"write_start, write_end and read_bypass are required")
        self.library = str(library)
        self.name = self._m.name.decode(errors="replace")
        g = self._m.bypass_granularity
        if g % (32 << 20):
            raise ValueError(f"the patch's ops.bypass_granularity must be 0 or a multiple of 32 MiB (33554432 "
                             f"bytes), got {g}")
        self.bypass_granularity = g

    def end_counts(self):
        """write_end calls (bios) by context since the module was loaded, every instance counted
        (the explorer's per-schedule ones too): ``{"hardirq", "softirq", "worker", "inline"}``."""
        cdef uint64_t out[4]
        self._m.end_counts(out)
        return {END_CONTEXTS[i]: out[i] for i in range(4)}


cdef class PatchTracker:
    """A patch instance driven as a tracker (see :meth:`pybcache.KernelPatch.tracker`). Wherever the
    lab takes a :class:`pybcache.BypassWriteTracker` it takes one of these too (``CachedDevice(tracker=
    ...)``, :func:`pybcache.stress`); its ends then run on completion threads."""
    # Fields: pybcache/bcache/kpatch/_kpatch.pxd.

    def __cinit__(self, PatchModule module not None, object patch, device_size, fault=None, hung_timeout=10.0,
                  end_bio="consumed", end_contexts="hardirq", fail_alloc="all"):
        cdef pyb_kp_config cfg
        cdef int err = 0, rc
        memset(&cfg, 0, sizeof(cfg))
        ds = _as_int(device_size, "device_size")
        if ds <= 0 or ds > (1 << 62):
            raise ValueError(f"device_size must be in [1, 2**62] bytes, got {device_size!r}")
        if fault is not None and not isinstance(fault, FaultInjection):
            raise TypeError(f"fault must be a pybcache.FaultInjection or None, got {_typename(fault)}")
        if isinstance(hung_timeout, bool) or not isinstance(hung_timeout, (int, float)):
            raise TypeError(f"hung_timeout must be a number of seconds > 0, got {_typename(hung_timeout)}")
        if not (0 < hung_timeout <= 3600):
            raise ValueError(f"hung_timeout must be in (0, 3600] seconds, got {hung_timeout!r}")
        if end_bio not in ("consumed", "intact"):
            raise ValueError(f"end_bio must be 'consumed' or 'intact', got {end_bio!r}")
        cfg.end_bio_intact = end_bio == "intact"
        self.end_bio = end_bio
        cfg.device_size = <uint64_t>ds
        if fault is not None:
            cfg.should_fail = _should_fail
            cfg.should_fail_arg = (<FaultInjection>fault)._f
        cfg.interrupted = _interrupted
        cfg.interrupted_arg = <void *>self
        cfg.hung_ns = <uint64_t>(hung_timeout * 1e9)
        mask, self.end_contexts = _end_context_mask(end_contexts)
        cfg.end_contexts = mask
        if not isinstance(fail_alloc, str) or fail_alloc not in FAIL_ALLOC_MODES:
            raise ValueError(f"fail_alloc must be one of {FAIL_ALLOC_MODES}, got {fail_alloc!r}")
        cfg.fail_mode = FAIL_ALLOC_MODES.index(fail_alloc)
        self.fail_alloc = fail_alloc
        self.patch = patch
        self.device_size = cfg.device_size
        self.fault = fault
        self.hung_timeout = float(hung_timeout)
        with nogil:
            rc = pyb_kpatch_tracker_create(module._m, &cfg, &self._t, &err)
        if rc == PYB_KP_ENOMEM:
            self._t = NULL
            raise MemoryError("cannot allocate the patch's tracker")
        if rc != PYB_KP_OK:
            reports = self.kernel_reports()
            self.close()
            if rc == PYB_KP_EINIT:
                raise RuntimeError(f"the patch's init returned {err}" + _reports_suffix(reports))
            raise RuntimeError(f"the patch's init did not complete ({_ESCAPES.get(rc, rc)})" + _reports_suffix(reports))

    def __dealloc__(self):
        # No call can be in progress (each holds a reference to self). The patch's exit and the RCU
        # barrier may wait (bounded by the hung bound), so they run without the GIL.
        cdef pyb_kpatch_tracker *t = self._t
        self._t = NULL
        if t != NULL:
            with nogil:
                pyb_kpatch_tracker_destroy(t, NULL, NULL)

    def __repr__(self):
        return f"PatchTracker(patch={self.patch.name!r}, device_size={self.device_size}, end_bio={self.end_bio!r})"

    cdef int _check_signals(self) noexcept:
        hook = self._wait_hook
        if hook is not None:
            try:
                hook()
            except BaseException:   # noqa: BLE001 - a host's hook must not stop the patch's wait
                pass
        try:
            PyErr_CheckSignals()
        except BaseException as e:   # KeyboardInterrupt and whatever a handler raised
            self._pending = e
            return 1
        return 0

    cdef pyb_kpatch_tracker *_live(self) except NULL:
        if self._t == NULL:
            raise RuntimeError("the tracker is closed")
        return self._t

    cdef int _range_call(self, _kp_range_op op, object offset, object length, str what) except -2:
        """One of the patch's range operations on a checked byte range, without the GIL (counted in
        ``_calls`` so that close() refuses meanwhile); raises for a failed one, else returns its code."""
        cdef pyb_kpatch_tracker *t = self._live()
        cdef uint64_t off, ln
        cdef int rc
        _check_byte_range(offset, length, self.device_size, &off, &ln)
        self._calls += 1
        try:
            with nogil:
                rc = op(t.inst, off, ln)
        finally:
            self._calls -= 1
        self._raise_for(rc, what)
        return rc

    cdef int _raise_for(self, int rc, str what) except -1:
        if rc >= 0:
            return 0
        if rc == PYB_KP_EINTR and self._pending is not None:
            e, self._pending = self._pending, None
            raise e
        raise _instance_error(self._live(), rc, what, self.hung_timeout)

    def start(self, offset, length):
        """A bypass write of ``[offset, offset + length)`` begins: ``write_start`` in process context.

        :returns: False if an allocation failed during the call (what the patch did about it is its own
            business), else True.
        """
        return self._range_call(self._live().module.start, offset, length, "write_start") != PYB_KP_ALLOC_FAILED

    def end(self, offset, length, context=None):
        """The write completed: ``write_end`` on the calling thread, in ``context`` (one of
        :data:`END_CONTEXTS`; ``"inline"`` is the submitting thread's own process context, so call it
        from the thread that started the write), or by default in the next of the tracker's
        ``end_contexts`` rotation without ``"inline"`` (hard-irq unless the tracker was built with
        others)."""
        cdef pyb_kpatch_tracker *t
        cdef uint64_t off, ln
        cdef int rc, c
        if context is None:
            self._range_call(self._live().module.end, offset, length, "write_end")
            return
        if not isinstance(context, str) or context not in END_CONTEXTS:
            raise ValueError(f"context must be one of {END_CONTEXTS} or None, got {context!r}")
        c = END_CONTEXTS.index(context)
        t = self._live()
        _check_byte_range(offset, length, self.device_size, &off, &ln)
        self._calls += 1
        try:
            with nogil:
                rc = t.module.end_in(t.inst, off, ln, c)
        finally:
            self._calls -= 1
        self._raise_for(rc, "write_end")

    def is_active(self, offset, length):
        """``read_bypass`` in process context: must a read miss of the range bypass the cache?"""
        return self._range_call(self._live().module.is_active, offset, length, "read_bypass") == 1

    def stats(self):
        """Counters: ``starts``, ``ends``, ``checks`` (bios passed to the patch), ``alloc_failures``
        (injected), ``allocations``, ``frees``, ``nofail_allocations``, ``warnings`` (WARN_ON* fired),
        ``reports``, ``reports_dropped``, ``log_records``, ``log_dropped``, ``rcu_pending``, ``waits``
        (wait_event calls that slept), ``sleeping`` (threads asleep in a wait now), ``writes_in_flight``
        (starts returned and not yet ended), ``write_ends`` (end operations completed), ``settled_ends``
        (the completed ends the latest sleeper had seen when it last went to sleep), ``ends_in``
        (write_end calls by context: ``{"hardirq", "softirq", "worker", "inline"}``), ``reserve_taken``
        (mempool elements operations took from a pool's reserve), ``mempool_waits`` (mempool_alloc calls
        that slept for an element)."""
        cdef pyb_kpatch_tracker *t = self._live()
        cdef pyb_kp_stats s
        t.module.stats(t.inst, &s)
        return dict(starts=s.starts, ends=s.ends, checks=s.checks, alloc_failures=s.alloc_failures,
                    allocations=s.allocations, frees=s.frees, nofail_allocations=s.nofail_allocations,
                    warnings=s.warnings, reports=s.reports, reports_dropped=s.reports_dropped,
                    log_records=s.log_records, log_dropped=s.log_dropped, rcu_pending=s.rcu_pending,
                    waits=s.waits, sleeping=s.sleeping, writes_in_flight=s.writes_in_flight,
                    write_ends=s.write_ends, settled_ends=s.settled_ends,
                    reserve_taken=s.reserve_taken, mempool_waits=s.mempool_waits,
                    ends_in={END_CONTEXTS[i]: s.ends_in[i] for i in range(4)})

    def memory(self):
        """Bytes the patch holds, counted from its allocations: ``directory_bytes`` (allocated by init
        and still held: the idle footprint), ``page_bytes`` (allocated by operations), ``total_bytes``,
        ``peak_bytes``, ``pages`` / ``peak_pages`` (live allocations made by operations, whatever
        their size)."""
        cdef pyb_kpatch_tracker *t = self._live()
        cdef pyb_kp_memory m
        t.module.memory(t.inst, &m)
        return dict(directory_bytes=m.init_bytes, page_bytes=m.op_bytes, total_bytes=m.total_bytes,
                    peak_bytes=m.peak_bytes, pages=m.op_allocations, peak_pages=m.peak_op_allocations)

    def kernel_reports(self):
        """What the context checks and WARN_ON* reported, as dicts with the kernel's wording in
        ``message`` (see :func:`pybcache.bcache.kpatch.load.render_report` for the keys)."""
        return _instance_reports(self._live())

    def kernel_log(self):
        """The patch's printk messages: dicts ``level`` (0-7), ``message``, ``file``, ``line`` and
        ``suppressed`` (messages a ratelimit dropped at that call site before this one)."""
        cdef pyb_kpatch_tracker *t = self._live()
        cdef pyb_kp_log buf[8]
        cdef size_t got = 0, total, i
        out = []
        while True:
            total = t.module.log(t.inst, got, buf, 8)
            i = 0
            while i < 8 and got < total:
                out.append(dict(level=buf[i].level, message=(<bytes>buf[i].text).decode(errors="replace"),
                                file=_str(buf[i].file), line=buf[i].line, suppressed=buf[i].suppressed))
                i += 1
                got += 1
            if got >= total:
                return out

    def rcu_barrier(self):
        """Return once every kfree_rcu/call_rcu callback this tracker had queued has run, waiting for
        grace periods (bounded by ``hung_timeout``) and running the ready ones on this thread
        (operations of this tracker run ready ones too). Returns how many this call ran."""
        cdef pyb_kpatch_tracker *t = self._live()
        cdef uint64_t n
        self._calls += 1
        try:
            with nogil:
                n = t.module.rcu_barrier(t.inst)
        finally:
            self._calls -= 1
        return n

    def close(self):
        """Run the patch's exit (without fault injection), wait for its RCU callbacks, free what it
        still holds and say how much that was: ``{"leaked_bytes", "leaked_allocations"}``. Idempotent.
        Refused (RuntimeError, nothing changed) while a cached device uses the tracker or another
        thread is inside one of its calls."""
        cdef uint64_t b = 0, n = 0
        cdef pyb_kpatch_tracker *t = self._t
        if t != NULL and self._users:
            raise RuntimeError(f"the tracker is in use by {self._users} cached device(s); close them first")
        if t != NULL and self._calls:
            raise RuntimeError(f"the tracker is inside {self._calls} call(s) (start, end, is_active or "
                               f"rcu_barrier) on other threads; close it once they have returned")
        if t != NULL:
            self._t = NULL
            with nogil:
                pyb_kpatch_tracker_destroy(t, &b, &n)
            self._leaked = dict(leaked_bytes=b, leaked_allocations=n)
        return dict(self._leaked) if self._leaked is not None else dict(leaked_bytes=0, leaked_allocations=0)

    def _ops_capsule(self):
        """(internal) The instance as a ``pyb_ops_tracker`` (csrc/pyb_ops.h) in a PyCapsule named
        ``pybcache.pyb_ops_tracker``, for drivers outside this module (pybcache.stress). Valid while this
        tracker is open; the caller holds this object and calls :meth:`_use` around its run."""
        self._opt.ops = &pyb_kpatch_ops
        self._opt.self = <void *>self._live()
        return PyCapsule_New(&self._opt, b"pybcache.pyb_ops_tracker", NULL)

    def _use(self, int delta):
        """(internal) A driver outside this module starts (+1) or stops (-1) using the instance:
        :meth:`close` refuses while one is."""
        self._users += delta

    def _raise_code(self, int rc, str what):
        """(internal) Raise for a failed operation's code (PYB_OPS_E*), naming the kernel report."""
        self._raise_for(rc, what)

    @property
    def closed(self):
        return self._t == NULL


cdef list _instance_reports(pyb_kpatch_tracker *t):
    cdef pyb_kp_report buf[16]
    cdef pyb_kp_report r
    cdef size_t got = 0, total, i
    from pybcache.bcache.kpatch.load import render_report
    out = []
    while True:
        total = t.module.reports(t.inst, got, buf, 16)
        i = 0
        while i < 16 and got < total:
            r = buf[i]
            out.append(render_report(dict(
                kind=r.kind, op=r.op, file=_str(r.file), line=r.line, lock=_str(r.lock),
                other_lock=_str(r.other_lock), other_file=_str(r.other_file), other_line=r.other_line,
                detail=r.detail, hardirq=bool(r.hardirq), irqs_disabled=bool(r.irqs_disabled),
                locks_held=r.locks_held, rcu_depth=r.rcu_depth,
                end_context=END_CONTEXTS[r.end_context] if 0 <= r.end_context < 4 else None,
                count=r.count, inflight=r.inflight, ends_during=r.ends_during,
                others_running=r.others_running, rcu_queued=r.rcu_queued)))
            i += 1
            got += 1
        if got >= total:
            return out


cdef object _instance_error(pyb_kpatch_tracker *t, int rc, str what, double hung_timeout):
    if rc >= 0:
        return None
    fatal = [r for r in _instance_reports(t) if r["kind"] in ("hung_task", "lockup", "spin_recursion",
                                                               "recursive_locking")]
    detail = f": {fatal[-1]['message']}" if fatal else ""
    if rc == PYB_KP_EHUNG:
        return TimeoutError(f"{what} did not finish within hung_timeout={hung_timeout:g} s{detail}; "
                            f"the tracker is broken")
    if rc == PYB_KP_EBROKEN:
        return RuntimeError(f"{what}: the tracker is broken by an earlier failure{detail}")
    return RuntimeError(f"{what} stopped ({_ESCAPES.get(rc, rc)}){detail}; the tracker is broken")


cdef inline object _str(const char *s):
    return None if s == NULL else (<bytes>s).decode(errors="replace")


_ESCAPES = {PYB_KP_EHUNG: "hung", PYB_KP_EINTR: "interrupted", PYB_KP_EFATAL: "fatal report",
            PYB_KP_EBROKEN: "broken"}


def _reports_suffix(reports):
    return "".join(f"\n  {r['message']}" for r in reports)
