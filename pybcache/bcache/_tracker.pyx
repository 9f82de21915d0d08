# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""Compiled core of the bypass-write tracker. Public names are re-exported by :mod:`pybcache`.

Arguments are checked here with the GIL held; element work then runs in C. Batch calls validate every
element before any counter changes, then run their whole loop in one ``nogil`` block.
"""
cimport cython
from cpython.exc cimport PyErr_CheckSignals
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_RawFree, PyMem_RawRealloc
from libc.stdint cimport int64_t, uint32_t, uint64_t
from libc.string cimport memset

import numpy as np

cimport numpy as cnp

from pybcache.bcache.includes.pyb_atomic cimport pyb_mcs_registry, pyb_now_ns
from pybcache.bcache.includes.pyb_fault cimport pyb_fault, pyb_fault_init, pyb_fault_injected
from pybcache.bcache.includes.pyb_floor cimport (pyb_floor_atomic_pair_ns, pyb_floor_shared_atomic_pair_ns,
                                         pyb_floor_shared_lock_pair_ns, pyb_floor_shared_spin_pair_ns,
                                         pyb_floor_spin_pair_ns)
from pybcache.bcache.includes.pyb_driver cimport pyb_run, pyb_run_timeout
from pybcache.bcache.includes.pyb_stress cimport (PYB_STRESS_MAX_DEPTH, PYB_STRESS_MAX_SAMPLES, PYB_STRESS_MAX_THREADS,
                                          pyb_stress_begin, pyb_stress_begin_ops, pyb_stress_config,
                                          pyb_stress_options, pyb_stress_result)
from pybcache.bcache.includes.pyb_tracker cimport *
from pybcache.bcache.includes.pyb_ops cimport pyb_ops_lab, pyb_ops_tracker
from cpython.pycapsule cimport PyCapsule_GetPointer
from pybcache.bcache._argcheck cimport _as_int, _check_wait_timeout, _typename
from pybcache.bcache._driver cimport _finish_run, _timeout_error, _wait_timeout

cnp.import_array()

cdef extern from "_pyint.h":
    void pyb_int_as_i64(object x, int64_t *out) noexcept

from pybcache._log import log_untracked

from pybcache.bcache.variants import SYNCS
OVERFLOWS = ("wrap", "clamp", "wait")
ALLOC_FAILURES = ("untracked", "hijack", "pool", "mempool")
#: The mempool allocation's mask: a sleeping one (GFP_NOIO) or one without direct reclaim (GFP_NOWAIT).
GFPS = ("noio", "nowait")
FREES = ("eager", "deferred")
UNHIJACKS = ("at-end", "on-decay")
COUNTER_BITS = (16, 32, 64)
LOCKS = ("pthread", "spin_yield", "ticket", "mcs")
PAGE_SIZE = PYB_PAGE_SIZE

cdef uint64_t _MAX_DEVICE = 1 << 62   # 4 EiB: far beyond any device, keeps offset arithmetic in range
cdef uint64_t _SLICE_NS = 50000000     # a waiting call checks for signals (Ctrl-C) this often


cdef inline void _ctx_init(pyb_ctx *ctx) noexcept nogil:
    """A fresh context: no statistics, nothing pinned, an empty start record (only its count and
    overflow flag need clearing; that keeps a single call from copying the whole record)."""
    memset(&ctx.stats, 0, sizeof(ctx.stats))
    ctx.pinned = -1
    ctx.carry = 0
    ctx.rec.n = 0
    ctx.rec.lost = 0


cdef struct _KeptRecord:
    uint64_t element
    pyb_start_record rec


cdef struct _RecordLog:
    # The start records of a batch's completed elements that left something uncounted (untracked
    # pages, clamped or wrapped counters), so that undoing the batch undoes each of them exactly.
    # Grown without the GIL, only on those rare elements.
    _KeptRecord *kept
    size_t n
    size_t cap
    uint64_t unkept_from   # the first element whose record could not be kept (out of memory), or
                           # UINT64_MAX: the undo leaves it and every later completed element counted


cdef void _keep_record(_RecordLog *log, uint64_t element, const pyb_start_record *rec) noexcept nogil:
    cdef _KeptRecord *grown
    cdef size_t cap
    if log.unkept_from != <uint64_t>-1:
        return
    if log.n == log.cap:
        cap = log.cap * 2 if log.cap else 8
        grown = <_KeptRecord *>PyMem_RawRealloc(log.kept, cap * sizeof(_KeptRecord))
        if grown == NULL:
            log.unkept_from = element
            return
        log.kept = grown
        log.cap = cap
    log.kept[log.n].element = element
    log.kept[log.n].rec = rec[0]
    log.n += 1


cdef class FaultInjection:
    """Allocation-failure injection with the kernel's fault-injection attributes.

    Applied to every page allocation on the ``start`` path of the trackers it is given to (the
    construction of a tracker and its reserve pool are never subject to it). Deterministic for a
    given seed when used from one thread.

    :param probability: chance that an eligible allocation fails, a fraction in [0, 1]
        (the kernel's ``probability`` is in percent). Default 0.0.
    :param interval: only every ``interval``-th eligible allocation may fail; >= 1. Default 1.
    :param times: how many failures may be injected; -1 = unlimited. Default -1.
    :param space: a budget in bytes consumed by allocations before any may fail; >= 0. Default 0.
    :param seed: seed of the random stream; >= 0. Default 0.
    """
    # Fields: pybcache/bcache/_tracker.pxd (exported, issue #11).

    def __cinit__(self, probability=0.0, interval=1, times=-1, space=0, seed=0):
        # a number, but not a bool nor an np.timedelta64 (a numpy integer subclass; float(NaT) raises)
        if (isinstance(probability, (bool, np.timedelta64))
                or not isinstance(probability, (int, float, np.integer, np.floating))):
            raise TypeError(f"probability must be a number in [0, 1], got {_typename(probability)}")
        p = float(probability)
        if not (0.0 <= p <= 1.0):
            raise ValueError(f"probability must be in [0, 1], got {probability!r}")
        iv = _as_int(interval, "interval")
        if iv < 1:
            raise ValueError(f"interval must be >= 1, got {interval!r}")
        tm = _as_int(times, "times")
        if tm < -1:
            raise ValueError(f"times must be -1 (unlimited) or >= 0, got {times!r}")
        sp = _as_int(space, "space")
        if sp < 0:
            raise ValueError(f"space must be >= 0, got {space!r}")
        sd = _as_int(seed, "seed")
        if sd < 0:
            raise ValueError(f"seed must be >= 0, got {seed!r}")
        self._f = <pyb_fault *>PyMem_Malloc(sizeof(pyb_fault))
        if self._f == NULL:
            raise MemoryError()
        pyb_fault_init(self._f, p, <uint64_t>iv, tm, sp, <uint64_t>sd)
        self.probability = p
        self.interval = iv
        self.times = tm
        self.space = sp
        self.seed = sd

    def __dealloc__(self):
        PyMem_Free(self._f)

    @property
    def injected(self):
        """Failures injected so far."""
        return pyb_fault_injected(self._f)

    def __repr__(self):
        return (f"FaultInjection(probability={self.probability!r}, interval={self.interval}, "
                f"times={self.times}, space={self.space}, seed={self.seed}, injected={self.injected})")


@cython.final
cdef class BypassWriteTracker:
    """Per-chunk counts of in-flight bypass writes (docs/design.md, "The tracker").

    :param device_size: backing device size in bytes, > 0; the last chunk may be partial.
    :param chunk_size: bytes per counter, a power of two >= 512. Default 32 MiB (the v2 patch).
    :param sync: ``"global"`` (one spinlock), ``"page"`` (a spinlock per page slot, the posted
        choice) or ``"atomic"`` (lockless). Default ``"page"``.
    :param counter_bits: 16, 32, 64 or None (16 for the lock variants, 64 for ``"atomic"``).
    :param counter_max: None (default: ``2**counter_bits - 1``) or a smaller maximum, in
        [1, 2**counter_bits - 1], kept in the same storage: md-bitmap keeps 16383 in 16 bits, and a
        maximum of 1 or 2 puts overflow a few operations away for the explorer and tests.
    :param overflow: at a counter's maximum: ``"wrap"``, ``"clamp"`` or ``"wait"`` (default: block
        the writer until an end makes room, as md-bitmap does).
    :param alloc_failure: when a page allocation fails: ``"untracked"`` (the posted patch),
        ``"hijack"`` (md-bitmap's two coarse counters in the slot), ``"pool"`` (a reserve, then hijack)
        or ``"mempool"`` (default: the kernel's ``mempool_alloc`` as Linux 6.12 has it: the allocator
        without reclaim, the reserve, the allocator with reclaim, the reserve, then rounds of waiting
        for a page to return to the reserve, each followed by the allocator and the reserve; never
        fails under ``gfp="noio"``).
    :param pool_pages: pages reserved at construction for ``"pool"`` or ``"mempool"`` (mempool's
        ``min_nr``); >= 0. A freed page wakes a mempool waiter only while the reserve is below it, so
        with 0 no free ever wakes one: each round runs its whole length.
    :param gfp: the mempool allocation's mask: ``"noio"`` (default: a sleeping mask, ``GFP_NOIO``) or
        ``"nowait"`` (no direct reclaim, as ``GFP_NOWAIT``/``GFP_ATOMIC``: one allocator attempt and
        the reserve, then NULL, and the page is left untracked as in the posted patch). Only for
        ``alloc_failure="mempool"``.
    :param mempool_round: the real length in seconds of one mempool wait round, in (0, 60], or None
        (default: 0.001, a clock scaled 5000:1 from the kernel's ``io_schedule_timeout(5 * HZ)``).
        :meth:`stats` counts rounds (``mempool_rounds``, ``mempool_wakeups``), so that modelled time
        is ``rounds x 5 s`` whatever the scale.
    :param free: page lifetime: ``"eager"`` (default: the lock variants free a page when its last
        counter drops to zero) or ``"deferred"`` (kept until :meth:`reclaim`, md's daemon). The atomic
        variant frees only in :meth:`reclaim` either way.
    :param unhijack: when a hijacked page goes back to "no page", so that the next start tries the
        allocator again: ``"at-end"`` (default: the end that drains both halves) or ``"on-decay"``
        (md-bitmap's way: a drained page stays hijacked until two :meth:`reclaim` passes, md's bitmap
        daemon, have found it drained; a start on it in between restarts the decay; docs/design.md).
    :param wait_timeout: bound in seconds on each wait of a start (a full counter under
        ``overflow="wait"``, or no page under ``"mempool"``), > 0, or None for no bound. Default 10.0.
        Past it the call raises :class:`TimeoutError` naming the chunk and undoes what it counted.
        Waits are interruptible (KeyboardInterrupt) either way.
    :param fault: a :class:`FaultInjection` applied to start-path page allocations, or None.
    :param lock: how the lock variants wait for a held lock: ``"pthread"`` (default: a pthread
        spinlock, spins until free) or ``"spin_yield"`` (spins briefly, then yields the CPU between
        attempts). Only for ``sync="global"`` and ``"page"``. *Userspace only:* a kernel spinlock holder
        cannot be preempted, a pthread one can, and with more threads than CPUs the waiters then burn
        their time slices; ``"spin_yield"`` is the remedy ``pybcache bench`` measures. ``"ticket"``: a
        FIFO ticket lock (served in arrival order; spins, then yields like ``"spin_yield"``), an option
        ``pybcache bench`` measures against the default under same-chunk contention. ``"mcs"``: a
        queued lock after the kernel's qspinlock (FIFO among queued waiters, each spinning on its own
        cache line; spins, then yields), measured beside ``"ticket"``.

    Every method is thread-safe. A page stays hijacked at least until both halves are zero, so a write's
    start and end always hit the same storage.
    """
    # Fields and cdef methods: pybcache/bcache/_tracker.pxd (exported, issue #11).

    def __cinit__(self, device_size, *, chunk_size=32 * 1024 * 1024, sync="page", counter_bits=None,
                  overflow="wait", alloc_failure="mempool", pool_pages=0, fault=None, lock="pthread",
                  free="eager", wait_timeout=10.0, counter_max=None, gfp="noio", mempool_round=None,
                  unhijack="at-end"):
        cdef pyb_tracker_config cfg
        memset(&cfg, 0, sizeof(cfg))
        ds = _as_int(device_size, "device_size")
        if ds <= 0 or <uint64_t>ds > _MAX_DEVICE:
            raise ValueError(f"device_size must be in [1, 2**62] bytes, got {device_size!r}")
        cs = _as_int(chunk_size, "chunk_size")
        if cs < 512 or (cs & (cs - 1)) or <uint64_t>cs > _MAX_DEVICE:
            raise ValueError(f"chunk_size must be a power of two >= 512, got {chunk_size!r}")
        if not isinstance(sync, str):
            raise TypeError(f"sync must be a str, one of {SYNCS}, got {_typename(sync)}")
        if sync not in SYNCS:
            raise ValueError(f"sync must be one of {SYNCS}, got {sync!r}")
        if counter_bits is None:
            bits = 64 if sync == "atomic" else 16
        else:
            bits = _as_int(counter_bits, "counter_bits")
            if bits not in COUNTER_BITS:
                raise ValueError(f"counter_bits must be 16, 32, 64 or None, got {counter_bits!r}")
        cdef uint64_t width_max = 0xFFFFFFFFFFFFFFFF if bits == 64 else (1 << bits) - 1
        cdef uint64_t cmax = 0
        if counter_max is not None:
            if isinstance(counter_max, bool) or not (isinstance(counter_max, int) or (
                    isinstance(counter_max, np.integer) and counter_max.dtype.kind in "iu")):
                raise TypeError(f"counter_max must be an int or None, got {_typename(counter_max)}")
            if not (1 <= int(counter_max) <= width_max):
                raise ValueError(f"counter_max must be in [1, {width_max}] (counter_bits={bits}) or None, "
                                 f"got {counter_max!r}")
            cmax = <uint64_t>int(counter_max)
        if not isinstance(overflow, str):
            raise TypeError(f"overflow must be a str, one of {OVERFLOWS}, got {_typename(overflow)}")
        if overflow not in OVERFLOWS:
            raise ValueError(f"overflow must be one of {OVERFLOWS}, got {overflow!r}")
        if not isinstance(alloc_failure, str):
            raise TypeError(f"alloc_failure must be a str, one of {ALLOC_FAILURES}, got {_typename(alloc_failure)}")
        if alloc_failure not in ALLOC_FAILURES:
            raise ValueError(f"alloc_failure must be one of {ALLOC_FAILURES}, got {alloc_failure!r}")
        pp = _as_int(pool_pages, "pool_pages")
        if pp < 0 or pp > 1 << 20:
            raise ValueError(f"pool_pages must be in [0, 1048576], got {pool_pages!r}")
        if pp and alloc_failure not in ("pool", "mempool"):
            raise ValueError(f"pool_pages={pp} needs alloc_failure='pool' or 'mempool', "
                             f"got alloc_failure={alloc_failure!r}")
        if fault is not None and not isinstance(fault, FaultInjection):
            raise TypeError(f"fault must be a pybcache.FaultInjection or None, got {_typename(fault)}")
        if not isinstance(lock, str):
            raise TypeError(f"lock must be a str, one of {LOCKS}, got {_typename(lock)}")
        if lock not in LOCKS:
            raise ValueError(f"lock must be one of {LOCKS}, got {lock!r}")
        if lock != "pthread" and sync == "atomic":
            raise ValueError(f"lock={lock!r} needs a lock variant (sync='global' or 'page'); 'atomic' takes no lock")
        if not isinstance(free, str):
            raise TypeError(f"free must be a str, one of {FREES}, got {_typename(free)}")
        if free not in FREES:
            raise ValueError(f"free must be one of {FREES}, got {free!r}")
        if not isinstance(unhijack, str):
            raise TypeError(f"unhijack must be a str, one of {UNHIJACKS}, got {_typename(unhijack)}")
        if unhijack not in UNHIJACKS:
            raise ValueError(f"unhijack must be one of {UNHIJACKS}, got {unhijack!r}")
        wait_timeout = _check_wait_timeout(wait_timeout)
        if not isinstance(gfp, str):
            raise TypeError(f"gfp must be a str, one of {GFPS}, got {_typename(gfp)}")
        if gfp not in GFPS:
            raise ValueError(f"gfp must be one of {GFPS}, got {gfp!r}")
        if gfp != "noio" and alloc_failure != "mempool":
            raise ValueError(f"gfp={gfp!r} needs alloc_failure='mempool', got alloc_failure={alloc_failure!r}")
        if mempool_round is None:
            mempool_round = PYB_MEMPOOL_RETRY_NS / 1e9
        elif isinstance(mempool_round, bool) or not isinstance(mempool_round, (int, float)):
            raise TypeError(f"mempool_round must be a number of seconds or None, got {_typename(mempool_round)}")
        elif not (0 < mempool_round <= 60):
            raise ValueError(f"mempool_round must be in (0, 60] seconds, got {mempool_round!r}")

        cfg.device_size = <uint64_t>ds
        cfg.chunk_size = <uint64_t>cs
        cfg.counter_bits = bits
        cfg.sync = SYNCS.index(sync)
        cfg.overflow = OVERFLOWS.index(overflow)
        cfg.alloc_failure = ALLOC_FAILURES.index(alloc_failure)
        cfg.pool_pages = <uint32_t>pp
        cfg.fault = (<FaultInjection>fault)._f if fault is not None else NULL
        cfg.lock_mode = (PYB_LOCK_SPIN_YIELD if lock == "spin_yield" else
                         PYB_LOCK_TICKET if lock == "ticket" else
                         PYB_LOCK_MCS if lock == "mcs" else PYB_LOCK_PTHREAD)
        cfg.free_policy = PYB_FREE_DEFERRED if free == "deferred" else PYB_FREE_EAGER
        # C callers of this tracker (the native drivers) get the same bound on their blocking starts
        cfg.wait_timeout_ns = 0 if wait_timeout is None else max(<uint64_t>(wait_timeout * 1e9), 1)
        cfg.counter_max = cmax
        cfg.gfp = GFPS.index(gfp)
        cfg.mempool_round_ns = max(<uint64_t>(mempool_round * 1e9), 1)
        cfg.unhijack = PYB_UNHIJACK_ON_DECAY if unhijack == "on-decay" else PYB_UNHIJACK_AT_END
        rc = pyb_tracker_create(&cfg, &self._t)
        if rc != 0:
            if rc == -12:
                raise MemoryError("cannot allocate the tracker's directory or pool")
            raise ValueError(f"invalid tracker configuration (error {rc})")
        self.device_size = cfg.device_size
        self.chunk_size = cfg.chunk_size
        self.sync = sync
        self.counter_bits = bits
        self.overflow = overflow
        self.alloc_failure = alloc_failure
        self.pool_pages = cfg.pool_pages
        self.fault = fault
        self.lock = lock
        self.free = free
        self.unhijack = unhijack
        self.wait_timeout = wait_timeout
        self._wait_timeout_ns = cfg.wait_timeout_ns
        self.gfp = gfp
        self.mempool_round = cfg.mempool_round_ns / 1e9
        self.n_chunks = pyb_tracker_n_chunks(self._t)
        # waits: overflow "wait" or a mempool page; uncounted chunks: untracked pages, clamps, wraps
        self._keeps = ((overflow == "wait" or alloc_failure == "mempool")
                       and (alloc_failure == "untracked" or overflow != "wait" or gfp == "nowait"))

    def __dealloc__(self):
        if self._t != NULL:
            pyb_tracker_destroy(self._t)

    @classmethod
    def posted_v2(cls, device_size, *, free="eager", **overrides):
        """The patch as posted: page lock, u16 counters, wrap on overflow, untracked on allocation
        failure. Keyword overrides replace any of those.

        :param free: the page lifetime, *assumed*: the cover letter does not say when a page is freed.
            Default ``"eager"`` (its idle memory table holds no page once no write is active, which
            eager freeing gives at once and deferred freeing only after a reclaim); pass
            ``"deferred"`` for the md-bitmap-style alternative.
        """
        kw = dict(sync="page", counter_bits=16, overflow="wrap", alloc_failure="untracked", free=free)
        kw.update(overrides)
        return cls(device_size, **kw)

    def __repr__(self):
        return (f"BypassWriteTracker(device_size={self.device_size}, chunk_size={self.chunk_size}, "
                f"sync={self.sync!r}, counter_bits={self.counter_bits}, overflow={self.overflow!r}, "
                f"alloc_failure={self.alloc_failure!r}, pool_pages={self.pool_pages}, lock={self.lock!r}, "
                f"free={self.free!r}, unhijack={self.unhijack!r}, wait_timeout={self.wait_timeout!r}"
                + (f", gfp={self.gfp!r}, mempool_round={self.mempool_round!r})" if self.alloc_failure == "mempool"
                   else ")"))

    @property
    def n_pages(self):
        """Page slots in the directory (pages at full allocation)."""
        return pyb_tracker_n_slots(self._t)

    @property
    def chunks_per_page(self):
        """Counters per 4 KiB page: 4096 * 8 // counter_bits."""
        return pyb_tracker_chunks_per_page(self._t)

    @property
    def counter_max(self):
        """The largest value a counter holds: 2**counter_bits - 1 unless ``counter_max`` lowered it."""
        return pyb_tracker_counter_max(self._t)

    # -- argument checks ---------------------------------------------------------------------------

    cdef int _check_range(self, object offset, object length, uint64_t *off, uint64_t *ln) except -1:
        cdef int64_t o, n
        if type(offset) is int and type(length) is int:
            pyb_int_as_i64(offset, &o)
            pyb_int_as_i64(length, &n)
        else:
            o = _as_int(offset, "offset")
            n = _as_int(length, "length")
        if o < 0 or <uint64_t>o >= self.device_size:
            raise ValueError(f"offset must be in [0, {self.device_size}) (device_size), got {offset!r}")
        if n <= 0:
            raise ValueError(f"length must be > 0, got {length!r}")
        if <uint64_t>n > self.device_size - <uint64_t>o:
            raise ValueError(f"range [offset, offset + length) = [{offset}, {int(offset) + int(length)}) ends past "
                             f"device_size {self.device_size}")
        off[0] = <uint64_t>o
        ln[0] = <uint64_t>n
        return 0

    # -- single calls (GIL held: a GIL round-trip costs more than the work) --------------------------
    #
    # A single call keeps its statistics in self._gil_stats, plain counters that only code holding the
    # GIL touches (this module does not declare free-threading support, so the GIL is always there);
    # that spares every call an atomic read-modify-write on the tracker's shared statistics.

    cdef void _fold(self, pyb_ctx *ctx) noexcept:
        cdef pyb_tstats *g = &self._gil_stats
        cdef pyb_tstats *s = &ctx.stats
        g.starts += s.starts
        g.ends += s.ends
        g.untracked_writes += s.untracked_writes
        g.alloc_failures += s.alloc_failures
        g.underflows += s.underflows
        g.hijack_events += s.hijack_events
        g.overflow_waits += s.overflow_waits
        g.overflow_clamps += s.overflow_clamps
        g.overflow_wraps += s.overflow_wraps
        g.mempool_waits += s.mempool_waits
        g.mempool_nulls += s.mempool_nulls

    # -- waiting and undoing (the slow path of a start) -----------------------------------------------

    cdef int _wait(self, pyb_ctx *ctx, uint64_t off, uint64_t ln, uint64_t *resume, object element) except -1:
        """Finish a start of ``[off, off + ln)`` that returned WOULD_BLOCK at ``*resume``: wait with the
        GIL released, in slices, checking for signals between them; raise TimeoutError past
        ``wait_timeout``. Returns the start's final bits. The caller undoes ``[off, *resume)`` if this
        raises."""
        cdef uint64_t limit = pyb_now_ns() + self._wait_timeout_ns if self._wait_timeout_ns else 0
        cdef uint64_t until, end = off + ln
        cdef int ret
        while True:
            until = pyb_now_ns() + _SLICE_NS
            if limit and until > limit:
                until = limit
            with nogil:
                ret = pyb_tracker_start_until(self._t, ctx, resume[0], end - resume[0], until, resume)
            if not (ret & PYB_START_TIMED_OUT):
                return ret
            pyb_tracker_ctx_unpin(self._t, ctx)
            PyErr_CheckSignals()
            if limit and pyb_now_ns() >= limit:
                what = ("a free page (alloc_failure='mempool': none came back to the reserve and the "
                        "allocator kept failing)" if ret & PYB_START_WAIT_PAGE else
                        f"room in its counter (at its maximum {self.counter_max}, overflow='wait')")
                at = f"batch element {element}: " if element is not None else ""
                raise TimeoutError(
                    f"{at}start of [{off}, {end}) waited {self.wait_timeout} s (wait_timeout) at chunk "
                    f"{resume[0] // self.chunk_size} (byte offset {resume[0]}) for {what}")

    cdef str _undone(self, uint64_t left_from):
        """How much of an abandoned start its undo removed: the end of a TimeoutError's message.
        ``left_from``: the first chunk the undo left counted, or UINT64_MAX."""
        if left_from == <uint64_t>-1:
            return "its increments were undone exactly; nothing of it is left counted"
        return (f"its increments were undone up to chunk {left_from}; from that chunk on they are left "
                f"counted (its record of skipped chunks overflowed): too high, never too low - a read "
                f"there bypasses the cache, it never reads stale data")

    # -- single calls, continued -----------------------------------------------------------------------

    def start(self, offset, length):
        """A bypass write of bytes ``[offset, offset + length)`` begins: count it in every chunk it
        overlaps, allocating pages lazily. A start that must wait (a full counter under
        ``overflow="wait"``, or no page under ``alloc_failure="mempool"``) blocks the caller with the
        GIL released until an ``end`` (or a freed page) lets it go on.

        :returns: True if every chunk was tracked, False if an allocation failure left some untracked.
        :raises TimeoutError: the wait lasted ``wait_timeout`` seconds; the message names the chunk.
            The start's increments are undone exactly - the chunks it did not count (a page left
            untracked, a counter clamped or wrapped) are skipped, so no other write's count is
            taken - and the message says so (or, in the rare case that its record of skipped chunks
            overflowed, from which chunk on its counts were left: too high, never too low).
            KeyboardInterrupt likewise undoes it.
        """
        cdef uint64_t off, ln, resume = 0, left_from
        cdef pyb_ctx ctx
        cdef int ret
        self._check_range(offset, length, &off, &ln)
        _ctx_init(&ctx)
        ret = pyb_tracker_start(self._t, &ctx, off, ln, 0, &resume)
        if ret & PYB_START_WOULD_BLOCK:
            try:
                ret = self._wait(&ctx, off, ln, &resume, None)
            except BaseException as e:
                left_from = <uint64_t>-1
                if pyb_tracker_undo_start(self._t, &ctx, off, resume - off):
                    left_from = ctx.rec.lost_from
                if isinstance(e, TimeoutError):
                    raise TimeoutError(f"{e}; {self._undone(left_from)}") from None
                raise
            finally:
                pyb_tracker_ctx_unpin(self._t, &ctx)
                self._fold(&ctx)
        else:
            pyb_tracker_ctx_unpin(self._t, &ctx)
            self._fold(&ctx)
        if ret & PYB_START_UNTRACKED:
            log_untracked(1)
            return False
        return True

    def end(self, offset, length):
        """The write of ``[offset, offset + length)`` completed: decrement every chunk it overlaps,
        blindly, as the posted patch does. A decrement that finds zero is refused and counted in
        ``stats()["underflows"]``."""
        cdef uint64_t off, ln
        cdef pyb_ctx ctx
        self._check_range(offset, length, &off, &ln)
        _ctx_init(&ctx)
        pyb_tracker_end(self._t, &ctx, off, ln)
        pyb_tracker_ctx_unpin(self._t, &ctx)
        self._fold(&ctx)

    def is_active(self, offset, length):
        """The read-miss check: is any chunk overlapping ``[offset, offset + length)`` counted?
        Never allocates and never modifies a counter."""
        cdef uint64_t off, ln
        cdef pyb_ctx ctx
        cdef int active
        self._check_range(offset, length, &off, &ln)
        _ctx_init(&ctx)
        active = pyb_tracker_is_active(self._t, &ctx, off, ln)
        pyb_tracker_ctx_unpin(self._t, &ctx)
        return active != 0

    def count(self, offset):
        """The counter covering byte ``offset`` (the coarse half counter if its page is hijacked)."""
        cdef int64_t o = _as_int(offset, "offset")
        if o < 0 or <uint64_t>o >= self.device_size:
            raise ValueError(f"offset must be in [0, {self.device_size}) (device_size), got {offset!r}")
        return pyb_tracker_count(self._t, <uint64_t>o)

    # -- batch calls ---------------------------------------------------------------------------------

    cdef tuple _check_batch(self, object offsets, object lengths):
        """Validate a batch; returns (offsets uint64 array, lengths uint64 array or None, scalar len)."""
        fast = self._check_batch_fast(offsets, lengths)
        if fast is not None:
            return fast
        offs = _int_array(offsets, "offsets")
        if offs.ndim != 1:
            raise ValueError(f"offsets must be 1-dimensional, got shape {offs.shape}")
        hi = 0
        if offs.size:
            hi = offs.max()
            if offs.min() < 0 or hi >= <object>self.device_size:
                raise ValueError(f"offsets must all be in [0, {self.device_size}) (device_size)")
        if isinstance(lengths, (int, np.integer)) and not isinstance(lengths, bool):
            n = _as_int(lengths, "lengths")
            if n <= 0:
                raise ValueError(f"lengths must be > 0, got {lengths!r}")
            if offs.size and hi > <object>self.device_size - n:
                raise ValueError(f"every range [offset, offset + length) must end at or before device_size "
                                 f"{self.device_size}")
            return _as_u64(offs), None, n
        lens = _int_array(lengths, "lengths")
        if lens.shape != offs.shape:
            raise ValueError(f"lengths must be a scalar or have the shape of offsets {offs.shape}, "
                             f"got shape {lens.shape}")
        if lens.size and lens.min() <= 0:
            raise ValueError("lengths must all be > 0")
        o64 = _as_u64(offs)
        l64 = _as_u64(lens)
        if lens.size and np.any(l64 > np.uint64(self.device_size) - o64):
            raise ValueError(f"every range [offset, offset + length) must end at or before device_size "
                             f"{self.device_size}")
        return o64, l64, 0

    cdef object _check_batch_fast(self, object offsets, object lengths):
        """The common batch - a 1-D C-contiguous int64 or uint64 array and one valid length - in two
        passes: a memcpy into a private uint64 copy and the copy's unsigned maximum, which is at most
        device_size - length exactly when every range is valid (a negative int64 reads as 2**63 or
        more). Returns what :meth:`_check_batch` returns, or None when the batch is not of this shape or
        not valid: the general checks then run and raise their own error, so a bad batch gets the same
        error either way. The copy, not the caller's array, is validated and handed to C."""
        if type(offsets) is not np.ndarray or isinstance(lengths, bool) or not isinstance(lengths, (int, np.integer)):
            return None
        dt = offsets.dtype
        if offsets.ndim != 1 or not offsets.size or not dt.isnative or dt.kind not in "iu" or dt.itemsize != 8 \
                or not offsets.flags.c_contiguous:
            return None
        try:
            n = _as_int(lengths, "lengths")  # the general checks' own test of an integer
        except (TypeError, ValueError):
            return None
        if not 0 < n <= <object>self.device_size:
            return None
        o64 = offsets.view(np.uint64).copy()
        if o64.max() > <object>self.device_size - n:
            return None
        return o64, None, n

    def start_many(self, offsets, lengths):
        """:meth:`start` for every ``(offsets[i], lengths[i])`` in order, in C without the GIL (and
        dropping it for any wait, as :meth:`start` does).

        :param offsets: 1-D integer array.
        :param lengths: an int, or an integer array of the same shape.
        :returns: a bool array, True where every chunk of that write was tracked.
        :raises TimeoutError: one element's wait lasted ``wait_timeout`` seconds; the message names the
            element and the chunk. Every start the batch made is undone first, exactly as for
            :meth:`start` (each element's skipped chunks are kept for it), so nothing of the batch is
            left counted unless the message says from where on (a record that overflowed or could not
            be kept: too high, never too low). KeyboardInterrupt likewise.
        """
        o64, l64, n = self._check_batch(offsets, lengths)
        cdef const uint64_t[::1] ov = o64
        cdef const uint64_t[::1] lv = l64 if l64 is not None else o64
        cdef int have_lens = l64 is not None
        cdef uint64_t scalar = n
        cdef Py_ssize_t i = 0, k, count = ov.shape[0]
        out = np.ones(count, dtype=np.bool_)
        cdef cnp.npy_bool[::1] res = out
        cdef pyb_ctx ctx
        cdef uint64_t resume = 0, ln, left_from
        cdef uint64_t untracked = 0
        cdef int ret = 0
        cdef bint keeps = self._keeps
        cdef _RecordLog log
        cdef size_t li = 0
        memset(&log, 0, sizeof(log))
        log.unkept_from = <uint64_t>-1
        _ctx_init(&ctx)
        try:
            while i < count:
                with nogil:
                    while i < count:
                        # the clean elements in C; element i (if any) was started and needs a look
                        i += <Py_ssize_t>pyb_tracker_start_many(self._t, &ctx, &ov[i], &lv[i] if have_lens else NULL,
                                                               scalar, <size_t>(count - i), &ret, &resume)
                        if i == count or ret & PYB_START_WOULD_BLOCK:
                            break
                        if ret & PYB_START_UNTRACKED:
                            res[i] = 0
                            untracked += 1
                        if keeps and (ctx.rec.n or ctx.rec.lost):
                            _keep_record(&log, <uint64_t>i, &ctx.rec)
                        i += 1
                if i == count:
                    break
                # element i must wait: with the GIL, in slices (signals, the bound); undo all on failure
                ln = lv[i] if have_lens else scalar
                try:
                    ret = self._wait(&ctx, ov[i], ln, &resume, i)
                except BaseException as e:
                    left_from = <uint64_t>-1
                    with nogil:
                        if pyb_tracker_undo_start(self._t, &ctx, ov[i], resume - ov[i]):
                            left_from = ctx.rec.lost_from
                        for k in range(i):
                            if <uint64_t>k >= log.unkept_from:
                                break  # no record kept: left counted (too high, never too low)
                            if li < log.n and log.kept[li].element == <uint64_t>k:
                                if pyb_tracker_undo_recorded(self._t, &ctx, ov[k], lv[k] if have_lens else scalar,
                                                             &log.kept[li].rec):
                                    left_from = min(left_from, log.kept[li].rec.lost_from)
                                li += 1
                            else:
                                pyb_tracker_undo_recorded(self._t, &ctx, ov[k], lv[k] if have_lens else scalar, NULL)
                    # the undone starts are not starts any more
                    ctx.stats.starts -= <uint64_t>i
                    ctx.stats.untracked_writes -= untracked
                    untracked = 0
                    if isinstance(e, TimeoutError):
                        msg = f"{e}; {self._undone(left_from)}"
                        if log.unkept_from < <uint64_t>i:
                            msg += (f"; elements {log.unkept_from} to {i - 1} are left counted (their records "
                                    f"could not be kept: out of memory), too high, never too low")
                        raise TimeoutError(msg) from None
                    raise
                if ret & PYB_START_UNTRACKED:
                    res[i] = 0
                    untracked += 1
                if keeps and (ctx.rec.n or ctx.rec.lost):
                    _keep_record(&log, <uint64_t>i, &ctx.rec)
                i += 1
        finally:
            pyb_tracker_ctx_done(self._t, &ctx)
            PyMem_RawFree(log.kept)
        if untracked:
            log_untracked(untracked)
        return out

    def end_many(self, offsets, lengths):
        """:meth:`end` for every ``(offsets[i], lengths[i])`` in order, in C without the GIL."""
        o64, l64, n = self._check_batch(offsets, lengths)
        cdef const uint64_t[::1] ov = o64
        cdef const uint64_t[::1] lv = l64 if l64 is not None else o64
        cdef int have_lens = l64 is not None
        cdef uint64_t scalar = n
        cdef Py_ssize_t i, count = ov.shape[0]
        cdef pyb_ctx ctx
        _ctx_init(&ctx)
        with nogil:
            if count:
                pyb_tracker_end_many(self._t, &ctx, &ov[0], &lv[0] if have_lens else NULL, scalar, <size_t>count)
            pyb_tracker_ctx_done(self._t, &ctx)

    def is_active_many(self, offsets, lengths):
        """:meth:`is_active` for every ``(offsets[i], lengths[i])``, in C without the GIL.

        :returns: a bool array.
        """
        o64, l64, n = self._check_batch(offsets, lengths)
        cdef const uint64_t[::1] ov = o64
        cdef const uint64_t[::1] lv = l64 if l64 is not None else o64
        cdef int have_lens = l64 is not None
        cdef uint64_t scalar = n
        cdef Py_ssize_t i, count = ov.shape[0]
        out = np.zeros(count, dtype=np.bool_)
        cdef cnp.npy_bool[::1] res = out
        cdef pyb_ctx ctx
        _ctx_init(&ctx)
        with nogil:
            for i in range(count):
                res[i] = pyb_tracker_is_active(self._t, &ctx, ov[i], lv[i] if have_lens else scalar) != 0
            pyb_tracker_ctx_done(self._t, &ctx)
        return out

    # -- inspection ----------------------------------------------------------------------------------

    def counts(self):
        """A copy of every chunk's counter as a uint64 array of ``n_chunks`` (a hijacked page shows
        each chunk's half counter)."""
        out = np.empty(self.n_chunks, dtype=np.uint64)
        cdef uint64_t[::1] view = out
        if self.n_chunks:
            with nogil:
                pyb_tracker_counts(self._t, &view[0])
        return out

    def reclaim(self):
        """Free pages whose counters are all zero (md's daemon job; with ``free="deferred"`` the only
        way a page is freed). A freed page refills the mempool reserve first while it is below
        ``pool_pages``. Returns the number freed. With ``unhijack="on-decay"`` it is also md's daemon
        pass over hijacked pages: a drained one is marked, a marked one still drained goes back to "no
        page" (``stats()["hijacked_pages"]`` drops; not counted in the return value)."""
        cdef uint64_t n
        with nogil:
            n = pyb_tracker_reclaim(self._t)
        return n

    def stats(self):
        """Event counters and gauges, as a dict (docs/design.md, "The tracker")."""
        cdef pyb_tracker_stats s
        cdef pyb_tstats *g = &self._gil_stats
        pyb_tracker_get_stats(self._t, &s)
        s.starts += g.starts
        s.ends += g.ends
        s.untracked_writes += g.untracked_writes
        s.alloc_failures += g.alloc_failures
        s.underflows += g.underflows
        s.hijack_events += g.hijack_events
        s.overflow_waits += g.overflow_waits
        s.overflow_clamps += g.overflow_clamps
        s.overflow_wraps += g.overflow_wraps
        s.mempool_waits += g.mempool_waits
        s.mempool_nulls += g.mempool_nulls
        return {
            "starts": s.starts, "ends": s.ends, "untracked_writes": s.untracked_writes,
            "alloc_failures": s.alloc_failures, "underflows": s.underflows,
            "hijack_events": s.hijack_events, "hijacked_pages": s.hijacked_pages,
            "pool_pages_used": s.pool_pages_used, "overflow_waits": s.overflow_waits,
            "overflow_clamps": s.overflow_clamps, "overflow_wraps": s.overflow_wraps,
            "pages_allocated": s.pages_allocated, "pages_freed": s.pages_freed,
            "mempool_waits": s.mempool_waits, "pool_refills": s.pool_refills,
            "mempool_rounds": s.mempool_rounds, "mempool_wakeups": s.mempool_wakeups,
            "mempool_nulls": s.mempool_nulls,
        }

    def memory(self):
        """Bytes and pages held, counted from the real allocations: the directory, pages in use (and
        the reserve pool), and the peak."""
        cdef pyb_tracker_memory m
        pyb_tracker_get_memory(self._t, &m)
        return {
            "directory_bytes": m.directory_bytes, "page_bytes": m.page_bytes, "total_bytes": m.total_bytes,
            "peak_bytes": m.peak_bytes, "pages": m.pages, "peak_pages": m.peak_pages,
        }


cdef object _as_u64(object arr):
    """A validated (non-negative) integer array from :func:`_int_array` as C-contiguous uint64. That array
    is already this call's private copy (the loop runs without the GIL, so the validated values must be
    the ones it runs on), so no second copy is made when it is uint64 already."""
    return np.ascontiguousarray(arr, dtype=np.uint64)


cdef object _int_array(object values, str name):
    """values as a private numpy integer array (a copy even when values already is one: the checks that
    follow must see what the C loop will run on, not an array another thread can still change); TypeError
    otherwise."""
    if isinstance(values, (str, bytes)) or values is None:
        raise TypeError(f"{name} must be an integer array, got {_typename(values)}")
    try:
        arr = np.array(values)
    except Exception as exc:
        raise TypeError(f"{name} must be an integer array: {exc}") from None
    if arr.size == 0 and arr.dtype.kind == "f" and not isinstance(values, np.ndarray):
        return arr.astype(np.int64)  # an empty list: no elements, no dtype to check
    if arr.dtype == np.bool_ or arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must have an integer dtype, got {arr.dtype}")
    if arr.dtype == np.uint64 and arr.size and arr.max() > (1 << 63) - 1:
        raise ValueError(f"{name} must all be in [0, 2**63)")
    return arr


cdef class _EmptyPair:
    """Two empty methods with the tracker's signature: the floor of a Python-to-Cython call."""
    def start(self, offset, length):
        pass

    def end(self, offset, length):
        pass


cdef void *_mcs_registry() noexcept nogil:
    """This module's queued-lock node registry (the one every module's copy of the C core shares)."""
    return pyb_mcs_registry()


def _mcs_registry_address():
    """The address of the queued-lock node registry this module's C core uses (tests: one per process)."""
    return <size_t>pyb_mcs_registry()


def floors(uint64_t n=2000000):
    """The machine's floors, measured now: ns per bare C atomic pair, per spinlock pair, and per
    shared-counter pair bounced between 2 threads pinned to two distinct CPUs (``shared_pinned``:
    whether the pinning took; ``cpus``: the CPUs this process may use - with one, the threads share it)."""
    cdef double a, s, sh
    cdef int pinned = 0, cpus = 0
    with nogil:
        a = pyb_floor_atomic_pair_ns(n)
        s = pyb_floor_spin_pair_ns(n)
        sh = pyb_floor_shared_atomic_pair_ns(n // 4 if n >= 4 else 1, &pinned, &cpus)
    return {"atomic_pair_ns": a, "spinlock_pair_ns": s, "shared_atomic_pair_ns": sh,
            "shared_pinned": bool(pinned), "cpus": cpus}


def floor_pair_ns(str kind, uint64_t n):
    """One of :func:`floors`' single-thread floors alone, measured now: ns per bare C pair, ``kind``
    ``"atomic"`` (a ``fetch_add``+``fetch_sub`` pair on one counter) or ``"spinlock"`` (two pthread spinlock
    lock/increment/unlock). Lets a caller time a floor beside a pair it measures, round after round."""
    cdef double ns
    if kind == "atomic":
        with nogil:
            ns = pyb_floor_atomic_pair_ns(n)
    elif kind == "spinlock":
        with nogil:
            ns = pyb_floor_spin_pair_ns(n)
    else:
        raise ValueError(f"kind must be 'atomic' or 'spinlock', got {kind!r}")
    return ns


def lock_floors(uint64_t n=500000):
    """The lock variants' 2-thread bounce floors, measured now: ns per lock/increment/unlock pair by 2
    threads pinned to distinct CPUs on one pthread spinlock, with the counter on its own cache line
    (``shared_spin_pair_ns``: two lines bounce, as a tracker slot's lock and its page's counter do) and on
    the lock's line (``shared_spin_colocated_pair_ns``: one line); and the same two-line floor for the
    ticket lock (``shared_ticket_pair_ns``) and the queued lock (``shared_mcs_pair_ns``)."""
    cdef double sep, col, tk, mcs
    cdef int p1 = 0, p2 = 0, p3 = 0, p4 = 0
    with nogil:
        sep = pyb_floor_shared_spin_pair_ns(n, 0, &p1)
        col = pyb_floor_shared_spin_pair_ns(n, 1, &p2)
        tk = pyb_floor_shared_lock_pair_ns(n, PYB_LOCK_TICKET, 0, &p3)
        mcs = pyb_floor_shared_lock_pair_ns(n, PYB_LOCK_MCS, 0, &p4)
    return {"shared_spin_pair_ns": sep, "shared_spin_colocated_pair_ns": col, "shared_ticket_pair_ns": tk,
            "shared_mcs_pair_ns": mcs, "shared_pinned": bool(p1 and p2 and p3 and p4)}



def _weighted_percentiles(samples, weights, qs):
    """Percentiles (``qs`` in [0, 100]) of samples each standing for ``weight`` timed iterations: the
    smallest sample whose weighted share at or below it reaches q (numpy's inverted CDF, weights allowed)."""
    return [int(v) for v in np.percentile(samples, qs, weights=weights, method="inverted_cdf")]


COMPLETIONS = ("thread", "inline")


def native_stress(tracker, *, threads=2, ops=None, seconds=None, region=None,
                  write_length=128 * 1024, depth=4, partition=False, reclaim_every=0, seed=0,
                  wait_timeout=None, completions="thread", sample_every=0, sample_capacity=65536, checks=True,
                  cpus=0, null_tracker=False, pin=False):
    """Run the native pthread stress on ``tracker`` with the GIL released; see :func:`pybcache.stress`.
    The call waits for the threads in slices and checks for signals between them, so Ctrl-C stops the
    run (every write ended, a start in progress rolled back) and raises KeyboardInterrupt.

    Beyond :func:`pybcache.stress`'s arguments:

    :param completions: ``"thread"`` (default): every thread's writes end on a completion thread of
        its own, as in the kernel; ``"inline"``: each thread ends its own oldest write before starting
        a new one (the driver before completion threads, for the tracker's hot path alone). With
        ``"inline"`` a start blocked on a full counter waits for ends only its own thread could make:
        it holds them hostage and the run times out.

    :param sample_every: if > 0, time one iteration (the start, the check and the hand-over to the
        completion thread; with ``completions="inline"`` the end of the oldest write too) in
        ``sample_every``; the others run untimed, so the clock reads barely touch throughput. Default 0.
    :param sample_capacity: samples kept per thread, 1..2**24; past it a uniform reservoir. Default 65536.
    :param checks: False to leave out the ``is_active`` call (pure start/end pairs). Default True.
    :param cpus: if > 0, run every thread on the first ``cpus`` CPUs this process may use
        (oversubscription: 8 threads on ``cpus=2``). Default 0 (no affinity).
    :param null_tracker: True to run the same loop on a do-nothing tracker: every start is one relaxed
        atomic add and every end one subtract on a single counter all threads share (the pair of
        :func:`pybcache.floors`' ``shared_atomic_pair_ns``), a check one load; ``tracker`` then only sizes
        the device and is left untouched. What the driver's own loop costs around the tracker's calls, so
        that a pair's cost splits into the driver's and the tracker's. A lab tracker only, no
        ``reclaim_every``. Default False.
    :param pin: True to run submitting thread ``i`` on the ``(i mod cpus)``-th of the ``cpus`` CPUs alone (as
        :func:`pybcache.floors` pins its two threads; best effort: a refused affinity leaves the thread on
        all of them; each thread's entry says ``pinned``: whether its pinning took effect); needs ``cpus`` > 0.
        Completion threads stay on all ``cpus``. Default False.
    :returns: as :func:`pybcache.stress` (the submitting threads' ``cpu_s``; their completion threads'
        in ``completion_cpu_s``), each thread's entry also with ``vol_switches`` and
        ``invol_switches`` (context switches: blocked, preempted), ``completer_wakes`` (hand-overs that
        had to wake its sleeping completion thread: about one per band of writes), ``start_s`` (monotonic clock when it
        began, to see how the threads' runs overlapped) and, when sampling, ``sampled``,
        ``sample_max_ns`` and ``latency_ns`` (its kept samples, ndarray of uint64); the whole run's
        ``latency`` = ``{sampled, kept, mean_ns, p50_ns, p90_ns, p99_ns, p999_ns, max_ns}``, each
        thread's samples weighted by its timed iterations per kept sample, or None without sampling.
    """
    cdef pyb_stress_config cfg
    cdef pyb_stress_options opt
    cdef pyb_ops_tracker vt
    memset(&cfg, 0, sizeof(cfg))
    memset(&opt, 0, sizeof(opt))
    # A BypassWriteTracker through its devirtualised path, or a PatchTracker (pybcache.bcache.kpatch._kpatch, which
    # cimports this module) through the vtable it hands over in a capsule.
    patch = not isinstance(tracker, BypassWriteTracker)
    if patch and not callable(getattr(tracker, "_ops_capsule", None)):
        raise TypeError(f"tracker must be a pybcache.BypassWriteTracker or pybcache.bcache.kpatch.load.PatchTracker, "
                        f"got {_typename(tracker)}")
    th = _as_int(threads, "threads")
    if th < 1 or th > PYB_STRESS_MAX_THREADS:
        raise ValueError(f"threads must be in [1, {PYB_STRESS_MAX_THREADS}], got {threads!r}")
    if (ops is None) == (seconds is None):
        raise ValueError("give exactly one of ops= or seconds=")
    if ops is not None:
        n = _as_int(ops, "ops")
        if n < 1:
            raise ValueError(f"ops must be >= 1, got {ops!r}")
        cfg.ops = <uint64_t>n
    else:
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
            raise TypeError(f"seconds must be a number, got {_typename(seconds)}")
        if not (0 < seconds <= 3600):
            raise ValueError(f"seconds must be in (0, 3600], got {seconds!r}")
        cfg.seconds = seconds
    if region is None:
        region = (0, tracker.device_size)
    try:
        r_off, r_len = region
    except (TypeError, ValueError):
        raise TypeError("region must be a (offset, length) pair or None") from None
    ro = _as_int(r_off, "region offset")
    rl = _as_int(r_len, "region length")
    if ro < 0 or rl <= 0 or <uint64_t>(ro + rl) > tracker.device_size:
        raise ValueError(f"region must lie within [0, {tracker.device_size}), got {region!r}")
    wl = _as_int(write_length, "write_length")
    dp = _as_int(depth, "depth")
    if dp < 1 or dp > PYB_STRESS_MAX_DEPTH:
        raise ValueError(f"depth must be in [1, {PYB_STRESS_MAX_DEPTH}], got {depth!r}")
    span = rl // th if partition else rl
    if wl < 1 or wl > span:
        raise ValueError(f"write_length must be in [1, {span}] (the region{' per thread' if partition else ''}), "
                         f"got {write_length!r}")
    re = _as_int(reclaim_every, "reclaim_every")
    if re < 0:
        raise ValueError(f"reclaim_every must be >= 0, got {reclaim_every!r}")
    sd = _as_int(seed, "seed")
    if sd < 0:
        raise ValueError(f"seed must be >= 0, got {seed!r}")
    se = _as_int(sample_every, "sample_every")
    if se < 0 or se > 0xFFFFFFFF:
        raise ValueError(f"sample_every must be in [0, 2**32), got {sample_every!r}")
    sc = _as_int(sample_capacity, "sample_capacity")
    if sc < 1 or sc > PYB_STRESS_MAX_SAMPLES:
        raise ValueError(f"sample_capacity must be in [1, {PYB_STRESS_MAX_SAMPLES}], got {sample_capacity!r}")
    if not isinstance(checks, bool):
        raise TypeError(f"checks must be a bool, got {_typename(checks)}")
    if not isinstance(completions, str) or completions not in COMPLETIONS:
        raise (ValueError if isinstance(completions, str) else TypeError)(
            f"completions must be one of {COMPLETIONS}, got {completions!r}")
    if patch and completions == "inline":
        raise ValueError("completions='inline' ends writes on the submitting thread; a patch's write_end is a "
                         "completion and runs on a thread of its own (use completions='thread')")
    if patch and reclaim_every:
        raise ValueError("reclaim_every applies to the lab's trackers, not to a patch")
    if not isinstance(null_tracker, bool):
        raise TypeError(f"null_tracker must be a bool, got {_typename(null_tracker)}")
    if null_tracker and (patch or reclaim_every):
        raise ValueError("null_tracker=True replaces a lab tracker's calls; it takes neither a patch nor "
                         "reclaim_every")
    cdef double wt = _wait_timeout(wait_timeout, tracker)
    cp = _as_int(cpus, "cpus")
    if cp < 0 or cp > 4096:
        raise ValueError(f"cpus must be in [0, 4096], got {cpus!r}")
    if not isinstance(pin, bool):
        raise TypeError(f"pin must be a bool, got {_typename(pin)}")
    if pin and not cp:
        raise ValueError("pin=True pins each thread to one of the cpus= CPUs: give cpus > 0")
    cdef cnp.ndarray buf = np.zeros(th * sc if se else 0, dtype=np.uint64)
    opt.sample_every = <uint32_t>se
    opt.sample_capacity = <uint32_t>sc
    opt.samples = <uint64_t *>cnp.PyArray_DATA(buf) if se else NULL
    opt.skip_checks = 0 if checks else 1
    opt.cpus = <uint32_t>cp
    opt.inline_ends = 1 if completions == "inline" else 0
    opt.wait_timeout_ns = <uint64_t>(wt * 1e9)
    opt.null_tracker = 1 if null_tracker else 0
    opt.pin_threads = 1 if pin else 0
    cfg.threads = <uint32_t>th
    cfg.region_off = <uint64_t>ro
    cfg.region_len = <uint64_t>rl
    cfg.write_len = <uint64_t>wl
    cfg.depth = <uint32_t>dp
    cfg.partition = 1 if partition else 0
    cfg.reclaim_every = <uint64_t>re
    cfg.seed = <uint64_t>sd
    cdef pyb_stress_result *res = <pyb_stress_result *>PyMem_Malloc(sizeof(pyb_stress_result) * th)
    if res == NULL:
        raise MemoryError()
    cdef int rc
    cdef pyb_stress_result r
    cdef pyb_run *run = NULL
    cdef pyb_run_timeout to
    cdef uint64_t size = tracker.device_size
    if patch:
        vt = (<pyb_ops_tracker *>PyCapsule_GetPointer(tracker._ops_capsule(), b"pybcache.pyb_ops_tracker"))[0]
        tracker._use(1)
    else:
        vt = pyb_ops_lab((<BypassWriteTracker>tracker)._t)
    try:
        with nogil:
            rc = pyb_stress_begin_ops(vt, size, &cfg, &opt, res, &run)
        if rc == 0:
            rc = _finish_run(run, &to)
        if patch:
            tracker._use(-1)
            patch = None   # released
            for i in range(th):
                if res[i].start_error or res[i].end_error:
                    tracker._raise_code(res[i].start_error or res[i].end_error, "the native stress")
        if rc == -110:
            raise _timeout_error(&to, tracker.chunk_size, wt)
        if rc == -22 and cp:
            raise ValueError(f"cpus={cpus!r}: the system refused that CPU affinity")
        if rc != 0:
            raise RuntimeError(f"native stress failed (error {rc}): could not start its threads")
        per_thread = []
        for i in range(th):
            r = res[i]
            per_thread.append({
                "ops": r.ops, "starts": r.starts, "ends": r.ends, "checks": r.checks,
                "active_hits": r.active_hits, "untracked": r.untracked, "reclaimed": r.reclaimed,
                "elapsed_s": r.elapsed_ns / 1e9, "cpu_s": r.cpu_ns / 1e9,
                "ops_per_s": r.ops / (r.elapsed_ns / 1e9) if r.elapsed_ns else 0.0,
                "vol_switches": r.vol_switches, "invol_switches": r.invol_switches,
                "start_s": r.start_ns / 1e9, "completion_cpu_s": r.completion_cpu_ns / 1e9,
                "blocked_starts": r.blocked_starts, "blocked_s": r.blocked_ns / 1e9,
                "completer_wakes": r.completer_wakes, "pinned": bool(r.pinned),
                "inflight_mean": r.inflight_sum / r.inflight_samples if r.inflight_samples else None,
            })
            if se:
                per_thread[i].update({
                    "sampled": r.sampled, "sample_max_ns": r.sample_max_ns,
                    "latency_ns": buf[i * sc: i * sc + <Py_ssize_t>r.samples_kept].copy(),
                })
    finally:
        if patch:
            tracker._use(-1)
        PyMem_Free(res)
    total_ops = sum(p["ops"] for p in per_thread)
    wall = max(p["elapsed_s"] for p in per_thread)
    latency = None
    if se:
        kept = [p["latency_ns"] for p in per_thread if p["latency_ns"].size]
        if kept:
            xs = np.concatenate(kept)
            ws = np.concatenate([np.full(p["latency_ns"].size, p["sampled"] / p["latency_ns"].size)
                                 for p in per_thread if p["latency_ns"].size])
            p50, p90, p99, p999 = _weighted_percentiles(xs, ws, (50, 90, 99, 99.9))
            latency = {"sampled": sum(p["sampled"] for p in per_thread), "kept": int(xs.size),
                       "mean_ns": float(np.average(xs, weights=ws)), "p50_ns": p50, "p90_ns": p90,
                       "p99_ns": p99, "p999_ns": p999,
                       "max_ns": max(p["sample_max_ns"] for p in per_thread)}
    return {
        "threads": th, "per_thread": per_thread, "ops": total_ops,
        "ops_per_s": total_ops / wall if wall > 0 else 0.0,
        "elapsed_s": wall, "latency": latency, "completions": completions, "wait_timeout": wt or None,
    }
