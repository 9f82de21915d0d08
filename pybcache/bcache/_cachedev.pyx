# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""Compiled core of the cached-device model, its native workloads and the explorer.

Public names are re-exported by :mod:`pybcache.bcache.cachedev`. Arguments are checked here with the GIL held;
the model then runs in C, without the GIL wherever it may wait or loop.

A device holds its tracker through the tracker vtable (csrc/pyb_ops.h): a
:class:`pybcache.BypassWriteTracker` (cimported from :mod:`pybcache.bcache._tracker`: the caller's object, or
one built from the device's options) or a :class:`pybcache.bcache.kpatch.load.PatchTracker` (a loaded kernel patch).
"""
cimport cython
from cpython.exc cimport PyErr_CheckSignals
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memset

from pybcache.bcache.includes.pyb_atomic cimport pyb_mcs_registry, pyb_mcs_registry_share, pyb_now_ns
from pybcache.bcache.includes.pyb_cachedev cimport *
from pybcache.bcache.includes.pyb_explore cimport *
from pybcache.bcache.includes.pyb_fault cimport pyb_fault, pyb_fault_init, pyb_fault_injected
from pybcache.bcache.includes.pyb_kpatch cimport pyb_kpatch_tracker
from pybcache.bcache.includes.pyb_ops cimport PYB_OPS_EBROKEN, pyb_kpatch_ops, pyb_ops_lab, pyb_ops_tracker
from pybcache.bcache.includes.pyb_tracker cimport *
from pybcache.bcache.includes.pyb_workload cimport *
from pybcache.bcache._argcheck cimport _as_int, _choice, _typename
from pybcache.bcache._driver cimport _finish_run, _timeout_error, _wait_timeout
from pybcache.bcache.includes.pyb_driver cimport pyb_run, pyb_run_timeout

import os

import numpy as np

from pybcache.bcache.kpatch._kpatch cimport PatchModule, PatchTracker, _instance_error
from pybcache.bcache._tracker cimport BypassWriteTracker, FaultInjection, _mcs_registry

# One queued-lock node registry per process: a device runs the caller's tracker with this module's copy
# of the C core, so its lock tails must name pybcache.bcache._tracker's nodes (csrc/pyb_atomic.h).
pyb_mcs_registry_share(_mcs_registry())


def _mcs_registry_address():
    """The address of the queued-lock node registry this module's C core uses (tests: one per process)."""
    return <size_t>pyb_mcs_registry()

from pybcache.bcache.variants import VARIANTS
#: Read-side check placements; "before" is the old name of "entry" (kept as an alias).
CHECKS = ("entry", "miss", "after", "read-done", "before")
GRANULARITIES = ("chunk", "page")
DELAYS = ("spin", "yield")
ALLOC_FAILURES = ("untracked", "hijack", "pool", "mempool")
#: The policy the model's tracker uses unless told otherwise (chosen from the sustained-load figures,
#: docs/design-answers.md, "Why mempool is the default"), with its reserve (min_nr) for the model.
DEFAULT_ALLOC_FAILURE = "mempool"
#: The reserve (mempool's min_nr, pool's pages) the model gives "mempool" and "pool" unless told otherwise:
#: with one page, one failed allocation under sustained load neither stalls the writer nor loses a write
#: under either mask (docs/design-answers.md, "Why mempool with one reserve page is the default").
DEFAULT_POOL_PAGES = 1
OVERFLOWS = ("wrap", "clamp", "wait")
#: What writes are (bypass, writethrough, or mixed: odd-numbered bypass, even-numbered writethrough), and
#: which writes the tracker counts (csrc/pyb_cachedev.h).
WRITE_KINDS = ("bypass", "writethrough", "mixed", "discard")
TRACKS = ("bypass", "invalidations", "all")
#: When a bypass write invalidates its cached range: at submission (Linux 6.12 and the v2 patch) or once
#: its backing write has completed (the v1 approach). Writethrough writes keep their order either way.
INVALIDATES = ("at-submit", "after-write")
_INVALIDATE_CODE = {"at-submit": PYB_INV_AT_SUBMIT, "after-write": PYB_INV_AFTER_WRITE}
_WRITE_KIND_CODE = {"bypass": PYB_XW_BYPASS, "writethrough": PYB_XW_WRITETHROUGH, "mixed": PYB_XW_MIXED,
                    "discard": PYB_XW_DISCARD}
_TRACK_CODE = {"bypass": PYB_TRACK_BYPASS, "invalidations": PYB_TRACK_INVALIDATIONS, "all": PYB_TRACK_ALL}
MAX_READ_BLOCKS = PYB_CD_MAX_READ_BLOCKS
MAX_THREADS = PYB_WORKLOAD_MAX_THREADS
MAX_INFLIGHT = PYB_WORKLOAD_MAX_INFLIGHT
MAX_EXPLORE_OPS = PYB_EXPLORE_MAX_OPS

cdef uint64_t _MAX_DEVICE = 1 << 50   # 1 PiB: the model keeps 24 bytes per block in memory
cdef uint64_t _SLICE_NS = 50000000     # a waiting write checks for signals (Ctrl-C) this often

_SYNC_CODE = {"global": PYB_SYNC_GLOBAL, "page": PYB_SYNC_PAGE, "atomic": PYB_SYNC_ATOMIC}
_ALLOC_CODE = {"untracked": PYB_ALLOC_UNTRACKED, "hijack": PYB_ALLOC_HIJACK, "pool": PYB_ALLOC_POOL,
               "mempool": PYB_ALLOC_MEMPOOL}
_WRITE_STEPS = {PYB_W_START: "start", PYB_W_INVALIDATE: "invalidate", PYB_W_LAND: "land", PYB_W_END: "end",
                PYB_W_DONE: "done"}
_READ_STEPS = {PYB_R_LOOKUP: "lookup", PYB_R_CHECK: "check", PYB_R_CHECK_KEY: "check_key",
               PYB_R_BACKING: "backing", PYB_R_INSERT: "insert", PYB_R_DONE: "done"}
_CHECK_CODE = {"entry": PYB_CHECK_ENTRY, "before": PYB_CHECK_ENTRY, "miss": PYB_CHECK_MISS, "after": PYB_CHECK_AFTER,
               "read-done": PYB_CHECK_READ_DONE}
_GRAN_CODE = {"chunk": PYB_GRAN_CHUNK, "page": PYB_GRAN_PAGE}


def canonical_check(str check):
    """The placement a check option names ("before" is the old name of "entry")."""
    return "entry" if check == "before" else check


cdef object _stats_dict(pyb_cd_stats *s):
    return {
        "reads": s.reads, "read_hits": s.read_hits, "read_misses": s.read_misses,
        "read_bypasses": s.read_bypasses, "cache_inserts": s.cache_inserts,
        "blocks_inserted": s.blocks_inserted, "miss_collisions": s.miss_collisions,
        "stale_reads": s.stale_reads, "writes": s.writes, "untracked_writes": s.untracked_writes,
        "bounce_bytes": s.bounce_bytes, "tracker_checks": s.tracker_checks,
        "check_key_restarts": s.check_key_restarts,
        "writethrough_writes": s.writethrough_writes, "writethrough_fallbacks": s.writethrough_fallbacks,
    }


cdef void _stats_add(pyb_cd_stats *dst, const pyb_cd_stats *src) noexcept nogil:
    dst.reads += src.reads
    dst.read_hits += src.read_hits
    dst.read_misses += src.read_misses
    dst.read_bypasses += src.read_bypasses
    dst.cache_inserts += src.cache_inserts
    dst.blocks_inserted += src.blocks_inserted
    dst.miss_collisions += src.miss_collisions
    dst.stale_reads += src.stale_reads
    dst.writes += src.writes
    dst.untracked_writes += src.untracked_writes
    dst.bounce_bytes += src.bounce_bytes
    dst.tracker_checks += src.tracker_checks
    dst.check_key_restarts += src.check_key_restarts
    dst.writethrough_writes += src.writethrough_writes
    dst.writethrough_fallbacks += src.writethrough_fallbacks


cdef bint _same(object value, object default):
    """Is an option at its default (so that it may be combined with tracker= or a patch)?"""
    return value is default or (type(value) is type(default) and value == default)


def _as_patch(sync):
    """The KernelPatch that ``sync`` names (a KernelPatch, or the path of a ``.c`` file or of an
    existing file), or None for a lab variant name (or anything else, which the sync check rejects)."""
    if isinstance(sync, str) and sync in VARIANTS:
        return None
    from pybcache.bcache.kpatch.load import KernelPatch, load_patch
    if isinstance(sync, KernelPatch):
        return sync
    if isinstance(sync, os.PathLike) or (isinstance(sync, str) and (sync.endswith(".c") or os.path.isfile(sync))):
        return load_patch(sync)
    return None


@cython.final
cdef class CachedDevice:
    """A bcache cached device in miniature: a backing device of versioned blocks, a cache index, and
    (unless ``sync="none"``) a bypass-write tracker consulted by read misses. See docs/design.md ("The cached-device model") and
    ``docs/cachedev.md``.

    :param device_size: bytes, a positive multiple of ``block_size``, at most 2**50. The model keeps
        24 bytes per block, touched at construction (a 320 GiB device takes about 2 GiB).
    :param sync: ``"none"`` (no tracking: the unpatched kernel), ``"global"``, ``"page"`` or
        ``"atomic"`` (the tracker's synchronisation variant). Default ``"page"``.
    :param check: where a read consults the tracker: ``"entry"`` (at request entry, before the
        lookup: unsafe, kept to demonstrate it), ``"miss"`` (in the cache-miss path, before the check
        key: safe because a moved node sequence restarts the lookup), ``"after"`` (after the check
        key; default), ``"read-done"`` (after the backing read, before the insert: unsafe, kept to
        demonstrate it). ``"before"`` is accepted as the old name of ``"entry"``.
    :param restart: the check-key step restarts the lookup when the node's sequence moved since it
        (the kernel's -EINTR). Default True; False models the bug the restart prevents.
    :param granularity: what a read's check covers: ``"chunk"`` (the counters overlapping the missed
        range; default) or ``"page"`` (every counter of the tracking pages it touches).
    :param block_size: bytes per block, a power of two in [512, 1 MiB]. Default 4096.
    :param region_blocks: blocks per cache-index lock, a power of two in [1, 2**20]. Default 64.
    :param write_delay_ns: time a bypass write's data takes to land after its invalidation, in
        [0, 10**10] ns (the dm-delay analogue). Default 0.
    :param delay: how :meth:`write` waits for it: ``"spin"`` (default) or ``"yield"``.
    :param bounce_copy: a read miss that will be inserted copies its data once (bcache's bounce
        buffer); a bypassing read does not. Default True.
    :param chunk_size, counter_bits, overflow, alloc_failure, pool_pages, fault, unhijack: the tracker's
        options, as for :class:`pybcache.BypassWriteTracker` (ignored, but still validated, with
        ``sync="none"``), except the defaults: ``alloc_failure`` :data:`DEFAULT_ALLOC_FAILURE` and
        ``pool_pages`` None (one reserve page for ``"mempool"`` and ``"pool"``, else 0). ``fault`` is shared, not copied: its ``injected`` count moves when the
        model injects (also :meth:`tracker_stats` ``["faults_injected"]``).
    :param wait_timeout: bound in seconds on the wait of a write's ``start`` (:meth:`write`,
        :meth:`PendingWrite.step`) for room in a counter under ``overflow="wait"``, in (0, 1e6] or
        None (no bound); validated as the tracker's. Default 10.0. Past it the call raises
        TimeoutError naming the chunk, with the start undone exactly and the write not run. The
        wait releases the GIL and is interruptible (Ctrl-C) either way.
    :param counter_max: the counters' maximum, as for :class:`pybcache.BypassWriteTracker` (None =
        the width's); a low one puts overflow a few writes away. Default None.
    :param tracker: a :class:`pybcache.BypassWriteTracker` or a :class:`pybcache.bcache.kpatch.load.PatchTracker` the
        caller built, of at least ``device_size`` bytes, used instead of one built from the options
        above (which must then keep their defaults: a ValueError names both arguments). The device
        shares it: its statistics and its fault injector's ``injected`` move with the model.
        Default None.
    :param write_kind: what :meth:`write` and :meth:`begin_write` issue: ``"bypass"`` (default),
        ``"writethrough"`` (the ``invalidate`` step inserts the new version into the cache, or, if
        its cache allocation fails, invalidates: the writethrough fallback), ``"mixed"`` (the
        device's odd-numbered writes bypass, even-numbered writethrough) or ``"discard"`` (every write
        a discard: bcache sends it down the bypass branch, so it is a bypass write in every step and
        the tracker counts it under every ``track``).
    :param cache_alloc_fail: K > 0: the K-th cache allocation of a writethrough write fails (counted
        per device from 1, drawn at its ``start``); 0 (default) = never.
    :param track: which writes call the tracker: ``"bypass"`` (default: the v2 patch, only bypass
        writes), ``"invalidations"`` (also writethrough writes whose insert falls back) or ``"all"``.
        An uncounted write calls neither the tracker's start nor its end.
    :param invalidate: when a bypass write invalidates its cached range: ``"at-submit"`` (default:
        Linux 6.12 and the v2 patch, right after ``start``, while the data is in flight) or
        ``"after-write"`` (the v1 approach: after ``land``, so its steps run ``start``, ``land``,
        ``invalidate``, ``end``). Writethrough writes keep their order (their fallback still
        invalidates in flight). Independent of the tracker: any ``sync`` combines with it.

    ``sync`` may also be a :class:`pybcache.KernelPatch` or the path of a patch's ``.c`` file (loaded
    with :func:`pybcache.load_patch`): the device then builds ``patch.tracker(device_size, fault=fault,
    hung_timeout=wait_timeout)``. With a patch (given either way) :attr:`sync` is ``"patch"``,
    :attr:`patch` is the KernelPatch, the lab-only options (``chunk_size``, ``counter_bits``,
    ``overflow``, ``alloc_failure``, ``pool_pages``, ``counter_max``, ``granularity="page"``) are a
    ValueError, a write's ``start`` may sleep inside the patch (without the GIL, bounded by the
    patch's hung bound), its ``end`` runs on a thread of its own (a completion, as an interrupt
    would), and an operation the patch fails raises TimeoutError (hung) or RuntimeError naming the
    patch's kernel report; the tracker is then broken.

    Every method is thread-safe. Whole operations (:meth:`write`, :meth:`read`) release the GIL while
    they run in C; step-by-step operations come from :meth:`begin_write` and :meth:`begin_read`.
    """
    cdef pyb_cachedev *_d
    cdef pyb_tracker *_t           # the lab tracker's C pointer (owned by self.tracker), or NULL
    cdef pyb_fault *_f             # the injector's (owned by self.fault), or NULL
    cdef PatchTracker _pt          # the patch's tracker (self.tracker), or None
    cdef readonly object tracker   # the BypassWriteTracker or PatchTracker in use, or None
    cdef readonly object patch     # the KernelPatch behind a patch tracker, or None
    cdef readonly uint64_t device_size
    cdef readonly uint32_t block_size
    cdef readonly uint64_t n_blocks
    cdef readonly uint32_t region_blocks
    cdef readonly str sync
    cdef readonly str check
    cdef readonly bint restart
    cdef readonly str granularity
    cdef readonly uint64_t write_delay_ns
    cdef readonly str delay
    cdef readonly bint bounce_copy
    cdef readonly uint64_t chunk_size
    cdef readonly int counter_bits
    cdef readonly str overflow
    cdef readonly str alloc_failure
    cdef readonly str unhijack
    cdef readonly uint32_t pool_pages
    cdef readonly object fault
    cdef readonly object wait_timeout
    cdef readonly uint64_t counter_max
    cdef readonly str write_kind
    cdef readonly uint64_t cache_alloc_fail
    cdef readonly str track
    cdef readonly str invalidate
    cdef uint64_t _wait_timeout_ns
    cdef uint64_t _n_writes        # writes begun (write_kind "mixed": odd-numbered bypass)

    def __cinit__(self, device_size, *, sync="page", check="after", restart=True, granularity="chunk",
                  block_size=4096, region_blocks=64,
                  write_delay_ns=0, delay="spin", bounce_copy=True, chunk_size=32 * 1024 * 1024,
                  counter_bits=None, overflow="wait", alloc_failure=DEFAULT_ALLOC_FAILURE, pool_pages=None, fault=None,
                  wait_timeout=10.0, counter_max=None, tracker=None, write_kind="bypass", cache_alloc_fail=0,
                  track="bypass", invalidate="at-submit", unhijack="at-end"):
        cdef pyb_cd_config cfg
        cdef int rc
        cdef BypassWriteTracker bt
        memset(&cfg, 0, sizeof(cfg))
        bs = _as_int(block_size, "block_size")
        if bs < 512 or bs > (1 << 20) or (bs & (bs - 1)):
            raise ValueError(f"block_size must be a power of two in [512, 1048576], got {block_size!r}")
        ds = _as_int(device_size, "device_size")
        if ds <= 0 or <uint64_t>ds > _MAX_DEVICE or ds % bs:
            raise ValueError(f"device_size must be a positive multiple of block_size ({bs}) up to 2**50 bytes, "
                             f"got {device_size!r}")
        lab_options = dict(chunk_size=(chunk_size, 32 * 1024 * 1024), counter_bits=(counter_bits, None),
                           overflow=(overflow, "wait"), alloc_failure=(alloc_failure, DEFAULT_ALLOC_FAILURE),
                           pool_pages=(pool_pages, None), counter_max=(counter_max, None),
                           unhijack=(unhijack, "at-end"))
        # the reserve: DEFAULT_POOL_PAGES for the policies that have one (mempool's min_nr, pool's pages)
        pp = (DEFAULT_POOL_PAGES if isinstance(alloc_failure, str) and alloc_failure in ("pool", "mempool") else 0) \
            if pool_pages is None else pool_pages
        patch = _as_patch(sync)
        if tracker is not None:
            if not isinstance(tracker, (BypassWriteTracker, PatchTracker)):
                raise TypeError(f"tracker must be a pybcache.BypassWriteTracker or pybcache.bcache.kpatch.load.PatchTracker, "
                                f"got {_typename(tracker)}")
            given = ["sync"] if patch is not None or not _same(sync, "page") else []
            given += ["fault"] if fault is not None else []
            given += ["wait_timeout"] if not _same(wait_timeout, 10.0) else []
            given += [n for n, (v, default) in lab_options.items() if not _same(v, default)]
            if given:
                raise ValueError(f"tracker and {given[0]} are mutually exclusive: the tracker brings its own "
                                 f"{given[0]} (pass the option to the tracker's constructor instead)")
            if <uint64_t>tracker.device_size < <uint64_t>ds:
                raise ValueError(f"tracker: its device_size {tracker.device_size} is smaller than device_size {ds}")
            if isinstance(tracker, PatchTracker):
                if (<PatchTracker>tracker)._t == NULL:
                    raise ValueError("tracker: the PatchTracker is closed")
                patch = tracker.patch
        elif patch is not None:
            for n, (v, default) in lab_options.items():
                if not _same(v, default):
                    raise ValueError(f"sync={patch.name!r} (a patch) and {n} are mutually exclusive: {n} applies "
                                     f"to the lab's trackers, not to a patch")
        if patch is None:
            sy = _choice(sync, "sync", VARIANTS) if tracker is None else tracker.sync
        else:
            sy = "patch"
        ck = canonical_check(_choice(check, "check", CHECKS))
        if not isinstance(restart, (bool, np.bool_)):
            raise TypeError(f"restart must be a bool, got {_typename(restart)}")
        gr = _choice(granularity, "granularity", GRANULARITIES)
        if patch is not None and gr == "page":
            raise ValueError(f"sync={patch.name!r} (a patch) and granularity='page' are mutually exclusive: "
                             f"granularity='page' applies to the lab's trackers, not to a patch")
        rb = _as_int(region_blocks, "region_blocks")
        if rb < 1 or rb > (1 << 20) or (rb & (rb - 1)):
            raise ValueError(f"region_blocks must be a power of two in [1, 1048576], got {region_blocks!r}")
        wd = _as_int(write_delay_ns, "write_delay_ns")
        if wd < 0 or wd > 10 ** 10:
            raise ValueError(f"write_delay_ns must be in [0, 10**10], got {write_delay_ns!r}")
        dl = _choice(delay, "delay", DELAYS)
        if not isinstance(bounce_copy, (bool, np.bool_)):
            raise TypeError(f"bounce_copy must be a bool, got {_typename(bounce_copy)}")
        wk = _choice(write_kind, "write_kind", WRITE_KINDS)
        caf = _as_int(cache_alloc_fail, "cache_alloc_fail")
        if caf < 0 or caf > (1 << 62):
            raise ValueError(f"cache_alloc_fail must be in [0, 2**62] (0 = never; K = the K-th writethrough cache "
                             f"allocation fails), got {cache_alloc_fail!r}")
        tk = _choice(track, "track", TRACKS)
        inv = _choice(invalidate, "invalidate", INVALIDATES)

        # The tracker: the caller's, a patch's new instance, or one built from the options (which its
        # constructor validates, with the same messages; with sync="none" only to validate them).
        if tracker is None and patch is not None:
            if wait_timeout is not None and (isinstance(wait_timeout, bool)
                                             or not isinstance(wait_timeout, (int, float))):
                raise TypeError(f"wait_timeout must be a number of seconds or None, got {_typename(wait_timeout)}")
            tracker = patch.tracker(ds, fault=fault, hung_timeout=10.0 if wait_timeout is None else wait_timeout)
        elif tracker is None and (sy != "none" or fault is not None or not _same(wait_timeout, 10.0)
                                  or not all(_same(v, d) for v, d in lab_options.values())):
            tracker = BypassWriteTracker(ds, chunk_size=chunk_size, sync="page" if sy == "none" else sy,
                                         counter_bits=counter_bits, overflow=overflow, alloc_failure=alloc_failure,
                                         pool_pages=pp, fault=fault, wait_timeout=wait_timeout,
                                         counter_max=counter_max, unhijack=unhijack)
        self.device_size = <uint64_t>ds
        self.block_size = <uint32_t>bs
        self.n_blocks = <uint64_t>(ds // bs)
        self.region_blocks = <uint32_t>rb
        self.sync = sy
        self.check = ck
        self.restart = bool(restart)
        self.granularity = gr
        self.write_delay_ns = <uint64_t>wd
        self.delay = dl
        self.bounce_copy = bool(bounce_copy)
        self.write_kind = wk
        self.cache_alloc_fail = <uint64_t>caf
        self.track = tk
        self.invalidate = inv
        self.patch = patch
        if isinstance(tracker, PatchTracker):
            self._pt = <PatchTracker>tracker
            self.fault = tracker.fault
            self.wait_timeout = tracker.hung_timeout
            self.overflow = self.alloc_failure = self.unhijack = ""
            self._wait_timeout_ns = 0
            cfg.ops.ops = &pyb_kpatch_ops
            cfg.ops.self = <void *>self._pt._t
        elif tracker is None:   # sync="none" with every tracker option at its default: nothing to validate
            self.chunk_size = 32 * 1024 * 1024
            self.counter_bits = 16
            self.overflow = "wait"
            self.alloc_failure = DEFAULT_ALLOC_FAILURE
            self.pool_pages = DEFAULT_POOL_PAGES
            self.unhijack = "at-end"
            self.wait_timeout = 10.0
            self.counter_max = 65535   # the 16-bit width's, as a "page" tracker built from these options
            self._wait_timeout_ns = 10 * 1000000000
        else:
            bt = <BypassWriteTracker>tracker
            self.chunk_size = bt.chunk_size
            self.counter_bits = bt.counter_bits
            self.overflow = bt.overflow
            self.alloc_failure = bt.alloc_failure
            self.unhijack = bt.unhijack
            self.pool_pages = bt.pool_pages
            self.fault = bt.fault
            self.wait_timeout = bt.wait_timeout
            self.counter_max = bt.counter_max
            self._wait_timeout_ns = bt._wait_timeout_ns
            if sy == "none":
                tracker = None   # validated only: the unpatched kernel has no tracker
            else:
                self._t = bt._t
                cfg.tracker = self._t
        if self.fault is not None:
            self._f = (<FaultInjection>self.fault)._f
        self.tracker = tracker
        cfg.device_size = self.device_size
        cfg.block_size = self.block_size
        cfg.region_blocks = self.region_blocks
        cfg.check = _CHECK_CODE[ck]
        cfg.no_restart = 0 if self.restart else 1
        cfg.granularity = _GRAN_CODE[gr]
        cfg.delay_mode = PYB_DELAY_SPIN if dl == "spin" else PYB_DELAY_YIELD
        cfg.write_delay_ns = self.write_delay_ns
        cfg.bounce_copy = 1 if self.bounce_copy else 0
        cfg.track = _TRACK_CODE[tk]
        cfg.cache_alloc_fail = self.cache_alloc_fail
        cfg.invalidate = _INVALIDATE_CODE[inv]
        with nogil:
            rc = pyb_cd_create(&cfg, &self._d)
        if rc != 0:
            raise MemoryError(f"could not allocate a model of {ds} bytes ({self.n_blocks} blocks)")
        if self._pt is not None:
            self._pt._users += 1

    def __dealloc__(self):
        pyb_cd_destroy(self._d)
        if self._pt is not None and self._d != NULL:
            self._pt._users -= 1

    def _workload_error(self, int rc):
        self._raise_error(rc, "a tracker operation of the run")

    cdef int _raise_error(self, int rc, str what) except -1:
        """Raise for a failed tracker operation (rc < 0): the patch's error naming its kernel report."""
        if rc >= 0:
            return 0
        if self._pt is not None and self._pt._t != NULL:
            self._pt._raise_for(rc, what)
        raise RuntimeError(f"{what} failed ({rc}); the tracker is broken")

    def __repr__(self):
        return (f"CachedDevice(device_size={self.device_size}, sync={self.sync!r}, check={self.check!r}, "
                f"restart={self.restart}, granularity={self.granularity!r}, block_size={self.block_size}, "
                f"write_delay_ns={self.write_delay_ns}, wait_timeout={self.wait_timeout!r})")

    cdef int _start(self, pyb_cd_ctx *ctx, pyb_cd_write *w) except -1:
        """Run a write's START step: at once when it need not wait, else waiting with the GIL released
        in slices, checking for signals between them, at most ``wait_timeout``. If the wait passes it
        or a signal handler raises, the start is undone exactly (pyb_cd_write_abandon) and the write
        will not run; TimeoutError names the chunk."""
        cdef uint64_t limit = 0, until
        cdef int rc, left
        with nogil:   # a patch's start runs whole here and may sleep (bounded by its hung bound)
            rc = pyb_cd_write_try_start(self._d, ctx, w)
        if w.error:
            self._raise_error(w.error, "write_start")
        if rc != PYB_W_BLOCKED:
            return 0
        if self._wait_timeout_ns:
            limit = pyb_now_ns() + self._wait_timeout_ns
        while True:
            until = pyb_now_ns() + _SLICE_NS
            if limit and until > limit:
                until = limit
            with nogil:
                rc = pyb_cd_write_start_until(self._d, ctx, w, until)
            if rc != PYB_W_BLOCKED:
                return 0
            pyb_tracker_ctx_unpin(self._t, &ctx.tctx)
            try:
                PyErr_CheckSignals()
            except BaseException:
                pyb_cd_write_abandon(self._d, ctx, w)
                raise
            if limit and pyb_now_ns() >= limit:
                left = pyb_cd_write_abandon(self._d, ctx, w)
                off = w.blk * self.block_size
                what = ("a free page (alloc_failure='mempool')" if w.wait_page else
                        f"room in its counter (at its maximum {self.counter_max}, overflow='wait')")
                undone = ("its start was undone exactly" if not left else
                          f"its start was undone up to chunk {ctx.tctx.rec.lost_from} and left counted from it on "
                          f"(too high, never too low)")
                raise TimeoutError(
                    f"write of [{off}, {off + w.nblk * self.block_size}) waited {self.wait_timeout} s "
                    f"(wait_timeout) at chunk {w.resume // self.chunk_size} (byte offset {w.resume}) for {what}; "
                    f"{undone} and the write was not run")

    cdef void _set_kind(self, pyb_cd_write *w) noexcept:
        """A new write's kind (write_kind; "mixed": the device's odd-numbered writes bypass)."""
        self._n_writes += 1
        if self.write_kind == "writethrough" or (self.write_kind == "mixed" and self._n_writes % 2 == 0):
            w.kind = PYB_WK_WRITETHROUGH
        elif self.write_kind == "discard":
            w.kind = PYB_WK_DISCARD

    cdef int _complete(self, pyb_cd_ctx *ctx, pyb_cd_write *w, bint whole) except -1:
        """After pyb_cd_write_submit (whole: the delay and every step left) or for one step: with a
        patch, on a thread of its own (a completion); with the lab tracker (or none), here. Raises for a
        failed write_end."""
        cdef int rc = 0
        if self._pt is None or (not whole and w.step != PYB_W_END):
            with nogil:
                if whole:
                    pyb_cd_delay(pyb_cd_write_delay_mode(self._d), pyb_cd_write_delay_ns(self._d))
                    while w.step != PYB_W_DONE:
                        pyb_cd_write_step(self._d, ctx, w)
                else:
                    pyb_cd_write_step(self._d, ctx, w)
            return 0
        with nogil:
            rc = pyb_cd_write_complete_on_thread(self._d, ctx, w, 1 if whole else 0)
        if rc:   # the start stays counted (reads of its range bypass) and the device is broken
            raise OSError(rc, "could not start a completion thread; the write's start stays counted and "
                              "the device is broken")
        if w.error:
            self._raise_error(w.error, "write_end")
        return 0

    cdef int _check_range(self, object offset, object length, uint64_t max_blocks, uint64_t *blk,
                          uint64_t *nblk) except -1:
        o = _as_int(offset, "offset")
        n = _as_int(length, "length")
        if o < 0 or <uint64_t>o >= self.device_size:
            raise ValueError(f"offset must be in [0, {self.device_size}) (device_size), got {offset!r}")
        if o % self.block_size:
            raise ValueError(f"offset must be a multiple of block_size ({self.block_size}), got {offset!r}")
        if n <= 0 or n % self.block_size:
            raise ValueError(f"length must be a positive multiple of block_size ({self.block_size}), got {length!r}")
        if <uint64_t>n > self.device_size - <uint64_t>o:
            raise ValueError(f"range [offset, offset + length) = [{o}, {o + n}) ends past device_size "
                             f"{self.device_size}")
        if max_blocks and <uint64_t>(n // self.block_size) > max_blocks:
            raise ValueError(f"length must be at most {max_blocks} blocks ({max_blocks * self.block_size} bytes) "
                             f"for a read, got {length!r}")
        blk[0] = <uint64_t>(o // self.block_size)
        nblk[0] = <uint64_t>(n // self.block_size)
        return 0

    cdef uint64_t _check_block(self, object block) except? 0xFFFFFFFFFFFFFFFF:
        b = _as_int(block, "block")
        if b < 0 or <uint64_t>b >= self.n_blocks:
            raise ValueError(f"block must be in [0, {self.n_blocks}) (n_blocks), got {block!r}")
        return <uint64_t>b

    # -- whole operations -----------------------------------------------------------------------------

    def write(self, offset, length):
        """A bypass write of ``[offset, offset + length)``: take a version, start it on the tracker,
        invalidate the cached range, wait ``write_delay_ns``, land the data, end it on the tracker
        (with ``invalidate="after-write"``: wait, land, then invalidate, then end). Runs without the GIL.

        :param offset: bytes, a multiple of ``block_size``.
        :param length: bytes, a positive multiple of ``block_size``; the range must fit the device.
        :returns: the version the write stored.
        :raises TimeoutError: its start waited ``wait_timeout`` seconds for room in a counter
            (``overflow="wait"``); the message names the chunk. The start is undone exactly and the
            write is not run. A signal handler's exception (KeyboardInterrupt) likewise undoes it.
        :raises OSError: with a patch, the thread that runs its END could not be started: the write's
            start stays counted (reads of its range bypass the cache) and the device is broken (later
            writes raise RuntimeError).
        """
        cdef uint64_t blk, nblk, version
        cdef pyb_cd_ctx ctx
        cdef pyb_cd_write w
        self._check_range(offset, length, 0, &blk, &nblk)
        if pyb_cd_error(self._d):   # an earlier failure (a patch's, or a completion thread's) broke it
            self._raise_error(PYB_OPS_EBROKEN, "write")
        pyb_cd_ctx_init(self._d, &ctx)
        pyb_cd_write_init(&w, blk, nblk)
        self._set_kind(&w)
        try:
            self._start(&ctx, &w)
            with nogil:
                pyb_cd_write_submit(self._d, &ctx, &w)  # INVALIDATE (none if after-write)
            self._complete(&ctx, &w, True)             # the delay, LAND, END (after-write: LAND, INVALIDATE, END)
        finally:
            pyb_cd_ctx_done(self._d, &ctx)
        return w.version

    def read(self, offset, length):
        """A read of ``[offset, offset + length)`` (at most 64 blocks) through the cache.

        :returns: a dict ``{"versions": [int per block], "hit": bool, "bypassed": bool,
            "inserted": int, "collided": int, "stale": bool, "restarts": int}``: ``bypassed`` when
            an active bypass write made the read skip the cache, ``inserted``/``collided`` in blocks,
            ``stale`` when a block is older than a write that completed before the read began,
            ``restarts`` the lookups its check-key step restarted.
        """
        cdef uint64_t blk, nblk
        cdef pyb_cd_ctx ctx
        cdef pyb_cd_read r
        self._check_range(offset, length, PYB_CD_MAX_READ_BLOCKS, &blk, &nblk)
        with nogil:
            pyb_cd_ctx_init(self._d, &ctx)
            pyb_cd_read_run(self._d, &ctx, &r, blk, nblk)
            pyb_cd_ctx_done(self._d, &ctx)
        if r.error:
            self._raise_error(r.error, "read_bypass")
        return _read_result(&r)

    # -- step by step ---------------------------------------------------------------------------------

    def begin_write(self, offset, length):
        """A bypass write to run one step at a time (``start``, ``invalidate``, ``land``, ``end``;
        ``start``, ``land``, ``invalidate``, ``end`` with ``invalidate="after-write"``) with
        :meth:`PendingWrite.step`; the write delay is not applied. Arguments as for :meth:`write`."""
        cdef uint64_t blk, nblk
        self._check_range(offset, length, 0, &blk, &nblk)
        return PendingWrite._new(self, blk, nblk)

    def begin_read(self, offset, length):
        """A read to run one step at a time with :meth:`PendingRead.step`: ``lookup``, ``check_key``,
        ``backing``, ``insert``, with ``check`` first (``"entry"``), between ``lookup`` and
        ``check_key`` (``"miss"``) or after ``check_key`` (``"after"``), and skipped with
        ``sync="none"``. A ``check_key`` that finds the node's sequence moved since the lookup sends
        the read back to ``lookup`` (unless ``restart=False``). Arguments as for :meth:`read`."""
        cdef uint64_t blk, nblk
        self._check_range(offset, length, PYB_CD_MAX_READ_BLOCKS, &blk, &nblk)
        return PendingRead._new(self, blk, nblk)

    # -- inspection -----------------------------------------------------------------------------------

    def cache_entry(self, block):
        """The cache index entry of ``block``: ``("empty", None)``, ``("check", token)`` or
        ``("valid", version)``."""
        cdef uint64_t b = self._check_block(block)
        cdef uint64_t e = pyb_cd_cache_entry(self._d, b)
        if e == PYB_CD_EMPTY:
            return ("empty", None)
        if (e & 3) == PYB_CD_TAG_CHECK:
            return ("check", e >> 2)
        return ("valid", e >> 2)

    def backing_version(self, block):
        """The version on the backing device for ``block`` (0 = never written)."""
        return pyb_cd_backing_version(self._d, self._check_block(block))

    def completed_version(self, block):
        """The newest version of a completed write to ``block`` (the stale-read oracle's floor)."""
        return pyb_cd_completed_version(self._d, self._check_block(block))

    def node_sequence(self, block):
        """The sequence number of the cache-index node holding ``block``: every update of the node
        (invalidation, check-key insertion, replace-insert) moves it."""
        return pyb_cd_node_seq(self._d, self._check_block(block))

    def stale_cached_blocks(self):
        """Valid cache entries whose version differs from the backing device. Meaningful at
        quiescence (no operation in flight): then every one of them is stale data that later reads
        will hit."""
        cdef uint64_t n
        with nogil:
            n = pyb_cd_stale_cached_blocks(self._d)
        return n

    def cached_blocks(self):
        """Valid cache entries."""
        cdef uint64_t n
        with nogil:
            n = pyb_cd_cached_blocks(self._d)
        return n

    def stats(self):
        """Operation counters: ``reads, read_hits, read_misses, read_bypasses, cache_inserts,
        blocks_inserted, miss_collisions, stale_reads, writes, untracked_writes, bounce_bytes``
        (``cache_inserts`` and ``miss_collisions`` count reads)."""
        cdef pyb_cd_stats s
        pyb_cd_get_stats(self._d, &s)
        return _stats_dict(&s)

    def tracker_stats(self):
        """The tracker's statistics (as :meth:`pybcache.BypassWriteTracker.stats`, or a patch's as
        :meth:`pybcache.bcache.kpatch.load.PatchTracker.stats`) plus ``faults_injected``, or None with ``sync="none"``."""
        cdef pyb_tracker_stats s
        if self._pt is not None:   # the patch's own counters (PatchTracker.stats) and the injector's
            out = self._pt.stats()
            out["faults_injected"] = pyb_fault_injected(self._f) if self._f != NULL else 0
            return out
        if self._t == NULL:
            return None
        pyb_tracker_get_stats(self._t, &s)
        return {
            "starts": s.starts, "ends": s.ends, "untracked_writes": s.untracked_writes,
            "alloc_failures": s.alloc_failures, "underflows": s.underflows,
            "hijack_events": s.hijack_events, "hijacked_pages": s.hijacked_pages,
            "pool_pages_used": s.pool_pages_used, "overflow_waits": s.overflow_waits,
            "overflow_clamps": s.overflow_clamps, "overflow_wraps": s.overflow_wraps,
            "pages_allocated": s.pages_allocated, "pages_freed": s.pages_freed,
            "mempool_waits": s.mempool_waits, "mempool_rounds": s.mempool_rounds,
            "mempool_wakeups": s.mempool_wakeups, "mempool_nulls": s.mempool_nulls,
            "faults_injected": pyb_fault_injected(self._f) if self._f != NULL else 0,
        }

    def tracker_memory(self):
        """The tracker's memory (as :meth:`pybcache.BypassWriteTracker.memory` or
        :meth:`pybcache.bcache.kpatch.load.PatchTracker.memory`), or None."""
        cdef pyb_tracker_memory m
        if self._pt is not None:
            return self._pt.memory()
        if self._t == NULL:
            return None
        pyb_tracker_get_memory(self._t, &m)
        return {
            "directory_bytes": m.directory_bytes, "page_bytes": m.page_bytes, "total_bytes": m.total_bytes,
            "peak_bytes": m.peak_bytes, "pages": m.pages, "peak_pages": m.peak_pages,
        }

    def tracker_counts(self):
        """A copy of every chunk's counter (uint64 array), or None with ``sync="none"`` or a patch
        (whose counters the lab cannot see)."""
        if self._t == NULL:
            return None
        out = np.empty(pyb_tracker_n_chunks(self._t), dtype=np.uint64)
        cdef uint64_t[::1] view = out
        if view.shape[0]:
            with nogil:
                pyb_tracker_counts(self._t, &view[0])
        return out

    def reclaim(self):
        """Free tracker pages whose counters are all zero (md's daemon job); returns pages freed."""
        cdef uint64_t n = 0
        if self._t != NULL:
            with nogil:
                n = pyb_tracker_reclaim(self._t)
        return n


cdef object _read_result(pyb_cd_read *r):
    return {
        "versions": [r.version[i] for i in range(r.nblk)],
        "hit": bool(r.hit), "bypassed": bool(r.active), "inserted": r.inserted,
        "collided": r.collided, "stale": r.stale != 0, "restarts": r.restarts,
    }


cdef class _Stepped:
    """What an operation run one step at a time holds: its device and a context of its own."""
    cdef CachedDevice dev
    cdef pyb_cd_ctx *ctx

    def __cinit__(self):
        self.ctx = <pyb_cd_ctx *>PyMem_Malloc(sizeof(pyb_cd_ctx))
        if self.ctx == NULL:
            raise MemoryError()

    def __dealloc__(self):
        PyMem_Free(self.ctx)


@cython.final
cdef class PendingWrite(_Stepped):
    """A bypass write run one step at a time (from :meth:`CachedDevice.begin_write`). Not for use by
    two threads at once."""
    cdef pyb_cd_write w

    def __init__(self):
        raise TypeError("use CachedDevice.begin_write() to create a PendingWrite")

    @staticmethod
    cdef PendingWrite _new(CachedDevice dev, uint64_t blk, uint64_t nblk):
        cdef PendingWrite p = PendingWrite.__new__(PendingWrite)
        p.dev = dev
        pyb_cd_write_init(&p.w, blk, nblk)
        dev._set_kind(&p.w)
        pyb_cd_ctx_init(dev._d, p.ctx)
        return p

    @property
    def kind(self):
        """``"bypass"``, ``"writethrough"`` or ``"discard"`` (the device's ``write_kind``)."""
        return ("writethrough" if self.w.kind == PYB_WK_WRITETHROUGH else
                "discard" if self.w.kind == PYB_WK_DISCARD else "bypass")

    @property
    def fallback(self):
        """True once ``start`` has run for a writethrough write whose cache allocation fails: its
        ``invalidate`` step then invalidates instead of inserting."""
        return bool(self.w.fallback)

    @property
    def counted(self):
        """Whether the tracker counts this write (decided at ``start`` by the device's ``track``)."""
        return bool(self.w.counted)

    @property
    def after_write(self):
        """True once ``start`` has run for a write whose ``invalidate`` follows its ``land`` (a bypass
        write on a device with ``invalidate="after-write"``)."""
        return bool(self.w.late)

    @property
    def next_step(self):
        """The step :meth:`step` will run next: ``"start"``, ``"invalidate"``, ``"land"``, ``"end"``
        or ``"done"``."""
        return _WRITE_STEPS[self.w.step]

    @property
    def done(self):
        return self.w.step == PYB_W_DONE

    @property
    def version(self):
        """The write's version (0 before ``start``)."""
        return self.w.version

    @property
    def untracked(self):
        """True if ``start`` left part of the range untracked (page allocation failure)."""
        return bool(self.w.untracked)

    @property
    def timed_out(self):
        """True if ``start`` waited past the device's ``wait_timeout`` (or was interrupted): the start
        was undone and the write is done without having run."""
        return bool(self.w.timed_out)

    def step(self):
        """Run the next step and return its name.

        :raises RuntimeError: if the write is already done.
        :raises TimeoutError: ``start`` waited the device's ``wait_timeout`` for room in a counter; as
            for :meth:`CachedDevice.write`, the start is undone and the write is then done (not run).
        """
        cdef int s
        if self.w.step == PYB_W_DONE:
            raise RuntimeError("this write is already done")
        if self.w.step == PYB_W_START:
            try:   # may wait for room under overflow="wait": bounded, interruptible
                self.dev._start(self.ctx, &self.w)
            finally:
                pyb_cd_ctx_done(self.dev._d, self.ctx)
            return "start"
        s = self.w.step
        try:
            self.dev._complete(self.ctx, &self.w, False)   # END of a patch: on a thread of its own
        finally:
            pyb_cd_ctx_done(self.dev._d, self.ctx)
        return _WRITE_STEPS[s]

    def run(self):
        """Run every remaining step; returns the version."""
        while self.w.step != PYB_W_DONE:
            self.step()
        return self.w.version


@cython.final
cdef class PendingRead(_Stepped):
    """A read run one step at a time (from :meth:`CachedDevice.begin_read`). Not for use by two
    threads at once."""
    cdef pyb_cd_read r

    def __init__(self):
        raise TypeError("use CachedDevice.begin_read() to create a PendingRead")

    @staticmethod
    cdef PendingRead _new(CachedDevice dev, uint64_t blk, uint64_t nblk):
        cdef PendingRead p = PendingRead.__new__(PendingRead)
        p.dev = dev
        pyb_cd_ctx_init(dev._d, p.ctx)
        pyb_cd_read_init(dev._d, p.ctx, &p.r, blk, nblk)
        return p

    @property
    def next_step(self):
        """The step :meth:`step` will run next: ``"lookup"``, ``"check"``, ``"backing"``, ``"insert"``
        or ``"done"``."""
        return _READ_STEPS[pyb_cd_read_next(self.dev._d, &self.r)]

    @property
    def done(self):
        return self.r.step == PYB_R_DONE

    @property
    def result(self):
        """The read's result as :meth:`CachedDevice.read` returns it, or None until it is done."""
        if self.r.step != PYB_R_DONE:
            return None
        return _read_result(&self.r)

    def step(self):
        """Run the next step and return its name.

        :raises RuntimeError: if the read is already done.
        """
        cdef int s
        if self.r.step == PYB_R_DONE:
            raise RuntimeError("this read is already done")
        with nogil:
            s = pyb_cd_read_step(self.dev._d, self.ctx, &self.r)
            pyb_cd_ctx_done(self.dev._d, self.ctx)
        if self.r.error:
            self.dev._raise_error(self.r.error, "read_bypass")
        return _READ_STEPS[s]

    def run(self):
        """Run every remaining step; returns :attr:`result`."""
        while self.r.step != PYB_R_DONE:
            self.step()
        return self.result


# -- native workloads ---------------------------------------------------------------------------------

cdef object _workload_totals(pyb_workload_result *res, uint32_t n):
    """The totals of a run's threads. ``cpu_ns`` is every thread's CPU time, completion threads
    included (``completion_cpu_ns`` is theirs alone): the CPU the I/O cost."""
    cdef pyb_cd_stats total
    cdef uint64_t ops = 0, reads = 0, writes = 0, reclaimed = 0, cpu = 0, completion_cpu = 0, wall = 0
    cdef uint64_t blocked = 0, blocked_ns = 0, inflight_sum = 0, inflight_samples = 0
    memset(&total, 0, sizeof(total))
    for i in range(n):
        ops += res[i].ops
        reads += res[i].reads
        writes += res[i].writes
        reclaimed += res[i].reclaimed
        cpu += res[i].cpu_ns + res[i].completion_cpu_ns
        completion_cpu += res[i].completion_cpu_ns
        blocked += res[i].blocked_writes
        blocked_ns += res[i].blocked_ns
        inflight_sum += res[i].inflight_sum
        inflight_samples += res[i].inflight_samples
        wall = max(wall, res[i].elapsed_ns)
        _stats_add(&total, &res[i].stats)
    out = _stats_dict(&total)
    out.update({"ops": ops, "reads": reads, "writes": writes, "reclaimed": reclaimed, "cpu_ns": cpu,
                "completion_cpu_ns": completion_cpu, "blocked_writes": blocked, "blocked_ns": blocked_ns,
                "inflight_sum": inflight_sum, "inflight_samples": inflight_samples, "elapsed_ns": wall})
    return out


cdef object _run_workload(int rc, pyb_run *run, str what, uint64_t chunk_size, double wait_timeout,
                          pyb_cachedev *d=NULL, object on_error=None):
    """Wait for a started workload (interruptibly) and turn its outcome into an exception or None. A
    tracker operation that failed (a patch's: pyb_cd_error(d)) comes first: on_error(code) raises it."""
    cdef pyb_run_timeout to
    if rc == 0:
        rc = _finish_run(run, &to)
    if d != NULL and pyb_cd_error(d) and on_error is not None:
        on_error(pyb_cd_error(d))
    if rc == -110:
        raise _timeout_error(&to, chunk_size, wait_timeout)
    if rc == -22:
        raise ValueError(f"invalid {what} configuration")
    if rc != 0:
        raise RuntimeError(f"{what} failed (error {rc}): could not start its threads")


def _race_slice(CachedDevice dev, *, uint32_t threads, uint32_t writers, uint64_t ops, double seconds,
                uint64_t region_blk, uint64_t region_blocks, uint32_t max_write_blocks, uint32_t read_blocks,
                uint64_t reclaim_every, uint64_t seed, wait_timeout=None, str write_kind="bypass",
                double cache_alloc_fail=0.0):
    """One run of the native race stress on ``dev`` (arguments validated by pybcache.bcache.cachedev.race).
    ``wait_timeout``: as :func:`pybcache.stress`'s (None: the device's ``wait_timeout`` if it has one,
    else 10 s)."""
    cdef pyb_race_config cfg
    cdef int rc
    cdef pyb_run *run = NULL
    cdef double wt = _wait_timeout(wait_timeout, dev)
    cfg.threads = threads
    cfg.writers = writers
    cfg.ops = ops
    cfg.seconds = seconds
    cfg.region_blk = region_blk
    cfg.region_blocks = region_blocks
    cfg.max_write_blocks = max_write_blocks
    cfg.read_blocks = read_blocks
    cfg.reclaim_every = reclaim_every
    cfg.seed = seed
    cfg.writes_kind = _WRITE_KIND_CODE[write_kind]
    cfg.cache_alloc_fail_p = cache_alloc_fail
    cdef pyb_workload_result *res = <pyb_workload_result *>PyMem_Malloc(sizeof(pyb_workload_result) * threads)
    if res == NULL:
        raise MemoryError()
    try:
        with nogil:
            rc = pyb_race_begin(dev._d, &cfg, <uint64_t>(wt * 1e9), res, &run)
        _run_workload(rc, run, "race stress", dev.chunk_size or 1, wt, dev._d, dev._workload_error)
        return _workload_totals(res, threads)
    finally:
        PyMem_Free(res)


@cython.final
cdef class _FioBench:
    """One device of ``device_size`` bytes and one tracker per variant, for the fio-like mix: each
    slice plugs one variant's tracker in (at quiescence), empties the cache and runs the jobs."""
    cdef pyb_cachedev *_d
    cdef pyb_tracker **_ts
    cdef int _n
    cdef readonly tuple variants
    cdef readonly uint64_t chunk_size
    cdef PatchTracker _pt        # variant "patch": the caller's patch tracker, or None

    def __cinit__(self, uint64_t device_size, tuple variants, uint64_t chunk_size, uint32_t block_size,
                  bint bounce_copy, str granularity="chunk", str free="eager", PatchTracker patch_tracker=None):
        cdef pyb_cd_config cfg
        cdef pyb_tracker_config tc
        cdef int rc
        self.variants = variants
        self.chunk_size = chunk_size
        self._n = len(variants)
        self._ts = <pyb_tracker **>PyMem_Malloc(sizeof(pyb_tracker *) * max(self._n, 1))
        if self._ts == NULL:
            raise MemoryError()
        for i in range(self._n):
            self._ts[i] = NULL
        if ("patch" in variants) != (patch_tracker is not None):
            raise ValueError("the variant 'patch' and patch_tracker go together")
        if patch_tracker is not None:
            if patch_tracker._t == NULL or patch_tracker.device_size < device_size:
                raise ValueError("patch_tracker: closed, or smaller than the device")
            self._pt = patch_tracker
            self._pt._users += 1
        for i, v in enumerate(variants):
            if v == "none" or v == "patch":
                continue
            memset(&tc, 0, sizeof(tc))
            tc.device_size = device_size
            tc.chunk_size = chunk_size
            tc.counter_bits = 64 if v == "atomic" else 16
            tc.sync = _SYNC_CODE[v]
            # The fio table's policy (review 17): overflow "wait" and alloc_failure "hijack", not the
            # tracker's default "mempool" - with no fault injection here an allocation never fails,
            # so the allocation-failure policy never acts. No tracker wait_timeout: the drivers
            # start with may_block 0 and own the wait, bounded by run()'s wait_timeout.
            tc.overflow = PYB_OVERFLOW_WAIT
            tc.alloc_failure = PYB_ALLOC_HIJACK
            tc.free_policy = PYB_FREE_DEFERRED if free == "deferred" else PYB_FREE_EAGER
            if pyb_tracker_create(&tc, &self._ts[i]) != 0:
                raise MemoryError("could not allocate a tracker")
        memset(&cfg, 0, sizeof(cfg))
        cfg.device_size = device_size
        cfg.block_size = block_size
        cfg.region_blocks = 64
        cfg.check = PYB_CHECK_AFTER
        cfg.granularity = _GRAN_CODE[granularity]
        cfg.bounce_copy = 1 if bounce_copy else 0
        with nogil:
            rc = pyb_cd_create(&cfg, &self._d)
        if rc != 0:
            raise MemoryError(f"could not allocate a model of {device_size} bytes")

    def __dealloc__(self):
        pyb_cd_destroy(self._d)
        if self._pt is not None:
            self._pt._users -= 1
        if self._ts != NULL:
            for i in range(self._n):
                pyb_tracker_destroy(self._ts[i])
            PyMem_Free(self._ts)

    def run(self, int variant, *, uint32_t jobs, double seconds, uint32_t read_percent, uint32_t read_blocks,
            uint32_t write_blocks, uint32_t inflight, uint64_t seed, uint64_t ops=0, wait_timeout=None,
            str write_kind="bypass", double cache_alloc_fail=0.0, str track="bypass"):
        """Run one slice of variant number ``variant`` for ``seconds`` or ``ops`` operations per job
        (whichever comes first; 0 = no limit of that kind); returns the totals of its jobs (``cpu_ns``:
        submitting and completion threads) and ``tracker_starts``/``tracker_ends``, the calls the
        variant's lab tracker counted in this slice (0 for "none" and "patch"). ``wait_timeout`` bounds a
        start's wait on a full counter (default 10 s). ``write_kind``, ``cache_alloc_fail`` (a chance in
        [0, 1]) and ``track`` as :func:`race`'s; ``track`` is set on the device for this slice."""
        cdef pyb_fio_config cfg
        cdef int rc
        cdef pyb_run *run = NULL
        cdef double wt = _wait_timeout(wait_timeout, None)
        cdef pyb_tracker_stats st0, st1
        cdef int track_code
        if variant < 0 or variant >= self._n:
            raise ValueError(f"variant must be in [0, {self._n}), got {variant}")
        if write_kind not in _WRITE_KIND_CODE:
            raise ValueError(f"write_kind must be one of {tuple(_WRITE_KIND_CODE)}, got {write_kind!r}")
        if not (0.0 <= cache_alloc_fail <= 1.0):
            raise ValueError(f"cache_alloc_fail must be in [0, 1], got {cache_alloc_fail!r}")
        if track not in _TRACK_CODE:
            raise ValueError(f"track must be one of {TRACKS}, got {track!r}")
        track_code = _TRACK_CODE[track]
        memset(&st0, 0, sizeof(st0))
        memset(&st1, 0, sizeof(st1))
        cfg.jobs = jobs
        cfg.ops = ops
        cfg.seconds = seconds
        cfg.read_percent = read_percent
        cfg.read_blocks = read_blocks
        cfg.write_blocks = write_blocks
        cfg.inflight = inflight
        cfg.seed = seed
        cfg.writes_kind = _WRITE_KIND_CODE[write_kind]
        cfg.cache_alloc_fail_p = cache_alloc_fail
        cdef pyb_workload_result *res = <pyb_workload_result *>PyMem_Malloc(sizeof(pyb_workload_result) * jobs)
        if res == NULL:
            raise MemoryError()
        cdef pyb_ops_tracker tracker = pyb_ops_lab(self._ts[variant])
        if self.variants[variant] == "patch":
            tracker.ops = &pyb_kpatch_ops
            tracker.self = <void *>self._pt._live()
        try:
            if self._ts[variant] != NULL:
                pyb_tracker_get_stats(self._ts[variant], &st0)
            with nogil:
                pyb_cd_set_ops(self._d, tracker)
                pyb_cd_set_track(self._d, track_code)   # at quiescence, like the tracker
                pyb_cd_reset_cache(self._d)
                rc = pyb_fio_begin(self._d, &cfg, <uint64_t>(wt * 1e9), res, &run)
            try:
                _run_workload(rc, run, "fio mix", self.chunk_size, wt, self._d, self._patch_error)
            finally:
                pyb_cd_set_tracker(self._d, NULL)   # at quiescence: the run is finished either way
            out = _workload_totals(res, jobs)
            if self._ts[variant] != NULL:
                pyb_tracker_get_stats(self._ts[variant], &st1)
            out["tracker_starts"] = st1.starts - st0.starts
            out["tracker_ends"] = st1.ends - st0.ends
            return out
        finally:
            PyMem_Free(res)

    def _patch_error(self, int rc):
        self._pt._raise_for(rc, "a patch operation of the fio mix")

    def tracker_pages_allocated(self, int variant):
        """Page allocations a variant's tracker has made so far (0 for "none"; a patch: its successful
        allocations, whatever their size)."""
        cdef pyb_tracker_stats st
        if 0 <= variant < self._n and self.variants[variant] == "patch":
            return self._pt.stats()["allocations"]
        if variant < 0 or variant >= self._n or self._ts[variant] == NULL:
            return 0
        pyb_tracker_get_stats(self._ts[variant], &st)
        return st.pages_allocated

    def tracker_pages(self, int variant):
        """Peak tracking pages of a variant's tracker (0 for "none"; a patch: its peak live allocations
        made by operations)."""
        cdef pyb_tracker_memory m
        if 0 <= variant < self._n and self.variants[variant] == "patch":
            return self._pt.memory()["peak_pages"]
        if variant < 0 or variant >= self._n or self._ts[variant] == NULL:
            return 0
        pyb_tracker_get_memory(self._ts[variant], &m)
        return m.peak_pages


# -- explorer -----------------------------------------------------------------------------------------

_STEP_KINDS = {PYB_X_WRITE: "write", PYB_X_READ: "read", PYB_X_DAEMON: "daemon", PYB_X_ORACLE: "oracle"}
_EXTRA_STEPS = {PYB_X_RETURN: "return", PYB_X_RECLAIM: "reclaim", PYB_X_STALE_BLOCK: "stale_block",
                PYB_X_STUCK: "stuck"}
_STEP_FLAGS = (
    (PYB_XF_NO_TRACKING, "no_tracking"), (PYB_XF_UNTRACKED, "untracked"), (PYB_XF_UNDERFLOW, "underflow"),
    (PYB_XF_WRAPPED, "wrapped"), (PYB_XF_CLAMPED, "clamped"), (PYB_XF_BLOCKED, "blocked"),
    (PYB_XF_MORE, "more"), (PYB_XF_HIT, "hit"), (PYB_XF_ACTIVE, "active"), (PYB_XF_RESTART, "restart"),
    (PYB_XF_STALE, "stale"), (PYB_XF_CAPPED, "capped"), (PYB_XF_FORCED, "forced"),
    (PYB_XF_WRITETHROUGH, "writethrough"), (PYB_XF_FALLBACK, "fallback"), (PYB_XF_UNCOUNTED, "uncounted"),
    (PYB_XF_AFTER_WRITE, "after_write"),
    (PYB_XF_DISCARD, "discard"), (PYB_XF_DETACHED, "detached"),
)
_OVERFLOW_NAMES = {"wrap": PYB_OVERFLOW_WRAP, "clamp": PYB_OVERFLOW_CLAMP, "wait": PYB_OVERFLOW_WAIT}
MAX_EXPLORE_RESTARTS = PYB_EXPLORE_MAX_RESTARTS
MAX_EXPLORE_RECLAIMS = PYB_EXPLORE_MAX_RECLAIMS
MAX_EXPLORE_STEPS = PYB_EXPLORE_MAX_STEPS


cdef object _step_record(const pyb_explore_step *s):
    """One counterexample step as a dict; pybcache.bcache.cachedev renders it into a sentence."""
    kind = _STEP_KINDS[s.kind]
    if s.step in _EXTRA_STEPS:
        name = _EXTRA_STEPS[s.step]
    elif kind == "write":
        name = _WRITE_STEPS[s.step]
    else:
        name = _READ_STEPS[s.step]
    return {
        "op": ("W", "R", "D", "")[s.kind] + (str(s.number) if s.number else ""), "kind": kind, "step": name,
        "flags": [n for bit, n in _STEP_FLAGS if s.flags & bit],
        "lo": s.lo, "hi": s.hi, "version": s.version, "count": s.count, "seq_now": s.seq_now,
        "a": [s.a[i] for i in range(s.nvals)], "b": [s.b[i] for i in range(s.nvals)],
    }


@cython.final
cdef class _Explorer:
    """The C explorer over one configuration (arguments validated by pybcache.bcache.cachedev.explore)."""
    cdef pyb_explorer *_e
    cdef PatchModule _patch       # the patch explored (kept loaded), or None
    cdef double _hung_timeout

    cdef object _patch_failure(self):
        """The exception for a run the patch stopped (-EIO): its init failed, or an operation did."""
        cdef int err = 0
        cdef pyb_kpatch_tracker *t = pyb_explore_patch(self._e, &err)
        init = pyb_explore_patch_init_error(self._e)
        if init:
            return RuntimeError(f"the patch's init returned {init} in the explorer")
        if t == NULL:
            return RuntimeError("the patch failed in the explorer")
        e = _instance_error(t, err if err < 0 else -4, "a patch operation in the explorer", self._hung_timeout)
        return e

    def __cinit__(self, str sync, str check, bint restart, str granularity, str alloc_failure,
                  uint32_t pool_pages, uint64_t fault_at, uint32_t writes, uint32_t reads, uint32_t reclaims,
                  uint32_t max_restarts, uint32_t write_blocks, uint32_t read_blocks, uint32_t block_size,
                  uint64_t chunk_size, int counter_bits, str overflow, uint64_t preload, bint reduce,
                  uint64_t counter_max=0, PatchModule patch=None, double hung_timeout=10.0,
                  str write_kind="bypass", uint64_t cache_alloc_fail=0, str track="bypass",
                  str invalidate="at-submit", bint detached=False, str unhijack="at-end",
                  bint end_bio_intact=False, int patch_fail_mode=1):
        cdef pyb_explore_config cfg
        memset(&cfg, 0, sizeof(cfg))
        if patch is not None:   # a fresh instance of the patch per schedule; sync is then unused
            cfg.patch = patch._m
            cfg.hung_ns = max(<uint64_t>(hung_timeout * 1e9), 1)
            cfg.end_bio_intact = end_bio_intact
            cfg.patch_fail_mode = patch_fail_mode
            self._patch = patch
            self._hung_timeout = hung_timeout
            sync = "page"
        cfg.sync = PYB_EXPLORE_NO_TRACKING if sync == "none" else _SYNC_CODE[sync]
        cfg.check = _CHECK_CODE[check]
        cfg.no_restart = 0 if restart else 1
        cfg.granularity = _GRAN_CODE[granularity]
        cfg.alloc_failure = _ALLOC_CODE[alloc_failure]
        cfg.pool_pages = pool_pages
        cfg.counter_bits = counter_bits
        cfg.overflow = _OVERFLOW_NAMES[overflow]
        cfg.preload = preload
        cfg.counter_max = counter_max
        cfg.fault_at = fault_at
        cfg.writes = writes
        cfg.reads = reads
        cfg.reclaims = reclaims
        cfg.max_restarts = max_restarts
        cfg.reduce = 1 if reduce else 0
        cfg.write_blocks = write_blocks
        cfg.read_blocks = read_blocks
        cfg.n_blocks = max(write_blocks, read_blocks)
        cfg.block_size = block_size
        cfg.chunk_size = chunk_size
        cfg.writes_kind = _WRITE_KIND_CODE[write_kind]
        cfg.cache_alloc_fail = cache_alloc_fail
        cfg.track = _TRACK_CODE[track]
        cfg.invalidate = _INVALIDATE_CODE[invalidate]
        cfg.detached = 1 if detached else 0
        cfg.unhijack = PYB_UNHIJACK_ON_DECAY if unhijack == "on-decay" else PYB_UNHIJACK_AT_END
        rc = pyb_explore_create(&cfg, &self._e)
        if rc == -22:
            raise ValueError("invalid explorer configuration")
        if rc != 0:
            raise MemoryError()

    def __dealloc__(self):
        pyb_explore_destroy(self._e)

    def run(self, uint64_t budget):
        """Explore up to ``budget`` more schedules (0 = all); True when every schedule is done."""
        cdef int rc
        with nogil:
            rc = pyb_explore_run(self._e, budget)
        if rc == -5:
            raise self._patch_failure()
        if rc == -22:
            raise ValueError("prefix: the search would not take this prefix")
        if rc == -7:
            raise RuntimeError(f"a schedule exceeded {PYB_EXPLORE_MAX_STEPS} steps")
        if rc == -11:
            raise OSError(11, "could not start the thread that runs the patch's write_end in the explorer")
        if rc < 0:
            raise MemoryError("the explorer could not build a tracker")
        return rc == 1

    def set_prefix(self, bytes choices):
        """Explore only the schedules that begin with these choices (before the first run)."""
        if pyb_explore_set_prefix(self._e, <const uint8_t *>choices, <uint32_t>len(choices)) != 0:
            raise ValueError(f"prefix: not a prefix of this search (at most {PYB_EXPLORE_MAX_STEPS} "
                             f"operation indices, before any run), got {list(choices)!r}")

    def prefixes(self, uint32_t depth, uint32_t max_count):
        """The prefixes that cut this search at ``depth``, in the search's order (a list of bytes),
        or None when there are more than ``max_count``."""
        if not 1 <= depth <= PYB_EXPLORE_MAX_STEPS:
            raise ValueError(f"depth must be in [1, {PYB_EXPLORE_MAX_STEPS}], got {depth}")
        cdef uint8_t *op = <uint8_t *>PyMem_Malloc(<size_t>depth * max_count + 1)
        cdef uint32_t *lp = <uint32_t *>PyMem_Malloc(sizeof(uint32_t) * max_count + 4)
        cdef int64_t n
        if op == NULL or lp == NULL:
            PyMem_Free(op)
            PyMem_Free(lp)
            raise MemoryError()
        try:
            with nogil:
                n = pyb_explore_prefixes(self._e, depth, op, lp, max_count)
            if n == -28:  # ENOSPC
                return None
            if n == -7:
                raise RuntimeError(f"a schedule exceeded {PYB_EXPLORE_MAX_STEPS} steps")
            if n == -5:
                raise self._patch_failure()
            if n == -22:
                raise ValueError("prefixes: the explorer has already run")
            if n < 0:
                raise MemoryError("the explorer could not build a tracker")
            return [op[i * depth:i * depth + lp[i]] for i in range(n)]
        finally:
            PyMem_Free(op)
            PyMem_Free(lp)

    def result(self):
        cdef pyb_explore_result *r = <pyb_explore_result *>pyb_explore_result_of(self._e)
        steps = [_step_record(&r.steps[i]) for i in range(r.n_steps)]
        return {
            "schedules": r.schedules, "violations": r.violations,
            "stale_read_schedules": r.stale_read_schedules, "stale_cache_schedules": r.stale_cache_schedules,
            "bypass_schedules": r.bypass_schedules, "collision_schedules": r.collision_schedules,
            "untracked_schedules": r.untracked_schedules, "underflow_schedules": r.underflow_schedules,
            "restart_schedules": r.restart_schedules, "restart_capped_schedules": r.restart_capped_schedules,
            "stuck_schedules": r.stuck_schedules, "partial_violation_schedules": r.partial_violation_schedules,
            "wrap_schedules": r.wrap_schedules,
            "clamp_schedules": r.clamp_schedules, "blocked_schedules": r.blocked_schedules,
            "reclaimed_schedules": r.reclaimed_schedules, "pruned_runs": r.pruned_runs,
            "faults_injected": r.faults_injected, "report_schedules": r.report_schedules,
            "finished": bool(r.finished),
            "steps": steps or None,
        }
