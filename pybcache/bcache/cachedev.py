"""The cached-device model and the stale-read race (docs/design.md, "The cached-device model"): the
public API.

* :class:`CachedDevice` - a backing device of versioned blocks, a cache index and a bypass-write tracker,
  with whole operations (``write``, ``read``) and step-by-step ones (``begin_write``, ``begin_read``).
* :func:`race` - the native race stress: reader and bypass-writer threads on a small hot region, with the
  stale-read oracle.
* :func:`explore` - every interleaving of a bounded set of reads and writes, stepped through the real C
  model and tracker, with the first counterexample as a readable step list.
* :func:`fio` - the v2 cover letter's fio table in the model: a random read/write mix over a working set,
  every tracking variant measured in the same run.

All work runs in C threads without the GIL; these functions validate their arguments first, so that a bad
argument raises before anything runs.
"""
from __future__ import annotations

import inspect
import math
import os
import statistics
from typing import Any, Callable, Iterable, Iterator, Sequence

from ._cachedev import (ALLOC_FAILURES, CHECKS, DEFAULT_ALLOC_FAILURE, DEFAULT_POOL_PAGES, DELAYS, GRANULARITIES,
                        MAX_EXPLORE_OPS, MAX_EXPLORE_RECLAIMS,
                        MAX_EXPLORE_RESTARTS, MAX_EXPLORE_STEPS, MAX_INFLIGHT, MAX_READ_BLOCKS, MAX_THREADS,
                        INVALIDATES, OVERFLOWS, TRACKS, WRITE_KINDS,
                        CachedDevice, PendingRead, PendingWrite, _as_patch, _Explorer, _FioBench, _race_slice,
                        canonical_check)
from .kpatch._kpatch import FAIL_ALLOC_MODES, PatchTracker
from ._tracker import FREES as FREE_POLICIES, UNHIJACKS, FaultInjection
from .variants import VARIANTS
from ..units import GiB as _GiB, KiB as _KiB, MiB as _MiB
from ..validate import (check_bool, check_choice as _choice, check_int as _int, check_number as _number,
                       check_pow2 as _pow2)

__all__ = ["CachedDevice", "PendingRead", "PendingWrite", "race", "explore", "explore_prefixes", "fio",
           "render_step", "VARIANTS", "CHECKS", "GRANULARITIES", "EXPLORER_SEMANTICS", "WRITE_KINDS", "TRACKS",
           "INVALIDATES", "ALLOC_FAILURES", "DEFAULT_ALLOC_FAILURE", "DEFAULT_POOL_PAGES"]

Progress = Callable[[Iterable[Any], int], Iterable[Any]]

_RACE_SLICE_S = 0.5
_FIO_SLICE_S = 0.25
_EXPLORE_BATCH = 20000


# -- argument checking --------------------------------------------------------------------------------

def _lab_only(patch: Any, **given: tuple[Any, Any]) -> None:
    """With a patch as ``sync``, an option of the lab's trackers (``name=(value, default)``) that is
    not at its default is a ValueError naming both."""
    for name, (value, default) in given.items():
        if value is not default and not (type(value) is type(default) and value == default):
            raise ValueError(f"sync={patch.name!r} (a patch) and {name} are mutually exclusive: {name} applies to "
                             f"the lab's trackers, not to a patch")


def _model_options(check: Any, restart: Any, granularity: Any, alloc_failure: Any) -> tuple[str, bool, str, str]:
    """The read path's and the tracker's options that race and explore share, checked in this order (check
    made canonical)."""
    check = canonical_check(_choice(check, "check", CHECKS))
    return (check, check_bool(restart, "restart"), _choice(granularity, "granularity", GRANULARITIES),
            _choice(alloc_failure, "alloc_failure", ALLOC_FAILURES))


def _write_options(write_kind: Any, track: Any) -> tuple[str, str]:
    """What the writes are and which of them the tracker counts (race and explore)."""
    return _choice(write_kind, "write_kind", WRITE_KINDS), _choice(track, "track", TRACKS)


def _non_default(**given: tuple[Any, Any]) -> dict[str, Any]:
    """The writethrough options (``name=(value, default)``) that are not at their default: passed on,
    and reported in ``config``, only then, so that a bypass-only run is called and reported as before."""
    return {name: value for name, (value, default) in given.items() if value != default}


def _hung(hung_timeout: Any, patch: Any) -> float:
    """A patch's bound on any wait, in seconds (10 by default); only with a patch."""
    if hung_timeout is None:
        return 10.0
    if patch is None:
        raise ValueError("hung_timeout applies to a patch (sync=KernelPatch or a .c path), not to the lab's trackers")
    return _number(hung_timeout, "hung_timeout", 0.0, 3600.0, open_low=True)


def report_counts(reports: Iterable[dict[str, Any]]) -> dict[str, int]:
    """A patch's kernel reports (PatchTracker.kernel_reports) as a count per kind."""
    out: dict[str, int] = {}
    for r in reports:
        out[r["kind"]] = out.get(r["kind"], 0) + int(r["count"])
    return out


def patch_label(patch: Any) -> str:
    """How outputs name a patch: ``"<name> (<path>)"``."""
    return f"{patch.name} ({patch.path})"


def _progress(progress: Progress | None, items: Iterable[Any], total: int) -> Iterator[Any]:
    if progress is None:
        yield from items
    else:
        if not callable(progress):
            raise TypeError(f"progress must be a callable (iterable, total) -> iterable or None, "
                            f"got {type(progress).__name__}")
        yield from progress(items, total)


# -- race ---------------------------------------------------------------------------------------------

def race(*, sync: Any = "page", check: str = "after", restart: bool = True, granularity: str = "chunk",
         alloc_failure: str = DEFAULT_ALLOC_FAILURE,
         fault_probability: float = 0.0, pool_pages: int | None = None, threads: int = 2,
         writers: int | None = None, seconds: float = 2.0, min_ops: int = 0, seed: int = 0,
         region_blocks: int = 64, block_size: int = 4096, chunk_size: int = 4096, max_write_blocks: int = 4,
         read_blocks: int = 1, write_delay_ns: int = 20_000, delay: str = "spin", reclaim_every: int = 0,
         hung_timeout: float | None = None, write_kind: str = "bypass", cache_alloc_fail: float = 0.0,
         track: str = "bypass", invalidate: str = "at-submit", unhijack: str = "at-end",
         fail_alloc: str = "all", progress: Progress | None = None) -> dict[str, Any]:
    """Run the native race stress: ``writers`` threads issue bypass writes (each waits
    ``write_delay_ns`` between invalidating the cache and landing its data) and the other threads read,
    all on a hot region of ``region_blocks`` blocks, for ``seconds`` and until ``min_ops`` operations.

    :param sync: ``"none"`` (unpatched), ``"global"``, ``"page"`` or ``"atomic"``, or a kernel patch: a
        :class:`pybcache.KernelPatch` or the path of its ``.c`` file (one instance for the run; its
        starts may sleep, its ends run on the completion threads; ``alloc_failure``, ``pool_pages``,
        ``granularity="page"`` and ``chunk_size`` are then a ValueError). Default ``"page"``.
    :param check: where reads consult the tracker: ``"entry"``, ``"miss"``, ``"after"`` (default) or
        ``"read-done"``; ``"before"`` is the old name of ``"entry"``. See :class:`CachedDevice`.
    :param restart: the check key's -EINTR restart of the lookup (default True).
    :param granularity: the read check covers ``"chunk"`` (default) or whole tracking ``"page"`` s.
    :param alloc_failure: the tracker's policy on page-allocation failure: ``"untracked"``, ``"hijack"``,
        ``"pool"`` or ``"mempool"`` (default, :data:`DEFAULT_ALLOC_FAILURE`: mempool_alloc with a
        sleeping mask; a start with no page waits in rounds of the tracker's scaled clock).
    :param fault_probability: chance in [0, 1] that a tracker page allocation fails. Default 0.
    :param pool_pages: pages reserved for ``alloc_failure="pool"`` or ``"mempool"`` (its min_nr); default
        1 for those, else 0.
    :param threads: native threads, in [2, 256]. Default 2.
    :param writers: how many of them write, in [1, threads - 1]; default ``threads // 2``.
    :param seconds: run time, in (0, 3600]. Default 2.
    :param min_ops: keep running past ``seconds`` until this many operations, in [0, 10**12]. Default 0.
    :param seed: seed of the threads' random streams, >= 0.
    :param region_blocks: the hot region (= the device), in blocks, [1, 2**20]. Default 64.
    :param block_size: bytes per block, a power of two in [512, 1 MiB]. Default 4096.
    :param chunk_size: tracker chunk in bytes, a power of two >= 512. Default 4096 (one block per
        chunk, so that some reads are not bypassed; 32 MiB would bypass every read during any write).
    :param max_write_blocks: writes cover 1..this many blocks, in [1, region_blocks]. Default 4.
    :param read_blocks: blocks per read, in [1, min(64, region_blocks)]. Default 1.
    :param write_delay_ns: the write window, in [0, 10**9] ns. Default 20000.
    :param delay: ``"spin"`` (default) or ``"yield"`` while a write waits.
    :param reclaim_every: if > 0, writer 0 reclaims idle tracker pages every that many writes.
    :param hung_timeout: a patch's bound in seconds on any wait or spinlock acquisition, in (0, 3600]
        (patch only; default 10). A patch that hangs or deadlocks stops the run with TimeoutError
        (RuntimeError for another fatal report) naming its kernel report. A patch's ``write_end`` rotates
        over hard-irq, soft-irq and worker context.
    :param fail_alloc: a patch's allocations ``fault_probability`` may fail: ``"all"`` (default) or
        ``"can-fail"`` (only those the kernel can fail; docs/check-patch.md).
    :param write_kind: ``"bypass"`` (default), ``"writethrough"`` or ``"mixed"`` (each writer's
        odd-numbered writes bypass, even-numbered writethrough): a writethrough write inserts its
        version into the cache instead of invalidating, unless its cache allocation fails.
    :param cache_alloc_fail: chance in [0, 1] that a writethrough write's cache allocation fails (its
        insert then invalidates: the writethrough fallback), from the threads' seeded streams. Default 0.
    :param track: which writes call the tracker: ``"bypass"`` (default, the v2 patch),
        ``"invalidations"`` (also the writethrough fallbacks) or ``"all"``. ``write_kind="discard"``: every
        write a discard (the bypass branch: a bypass write in every step).
    :param invalidate: when a bypass write invalidates its cached range: ``"at-submit"`` (default,
        Linux 6.12 and the v2 patch) or ``"after-write"`` (the v1 approach: once its data has landed, on
        its completion thread; see :class:`CachedDevice`). Combines with any ``sync``.
    :param unhijack: the tracker's ``unhijack``: ``"at-end"`` (default) or ``"on-decay"`` (md's way; a
        drained hijacked page reverts after two reclaims, so give ``reclaim_every``).
    :param progress: optional ``(iterable, total) -> iterable`` wrapper (a progress bar).
    :returns: ``stale_reads, stale_cached_blocks, reads, writes, read_bypasses, cache_inserts,
        miss_collisions`` plus ``ops, seconds, ops_per_s, stale_reads_per_s, read_hits,
        untracked_writes, underflows, alloc_failures, hijack_events, mempool_waits, mempool_rounds,
        faults_injected, reclaimed,
        tracker_checks, check_key_restarts``, with a ``write_kind`` other than bypass
        ``writethrough_writes, writethrough_fallbacks``, ``kernel_reports`` (a patch's reports, a count per kind;
        {} for the lab's trackers) and the configuration under ``config`` (``write_kind``,
        ``cache_alloc_fail``, ``track`` and ``invalidate`` only when not at their defaults; as the model received it:
        ``check`` is the placement the device runs; ``sync`` is a patch's path, ``patch`` its
        ``"<name> (<path>)"`` or None).
    """
    patch = _as_patch(sync)
    if patch is None:
        sync = _choice(sync, "sync", VARIANTS)
    else:
        _lab_only(patch, alloc_failure=(alloc_failure, DEFAULT_ALLOC_FAILURE),
                  pool_pages=(pool_pages, None),
                  granularity=(granularity, "chunk"), chunk_size=(chunk_size, 4096), unhijack=(unhijack, "at-end"))
    ht = _hung(hung_timeout, patch)
    fail = _choice(fail_alloc, "fail_alloc", FAIL_ALLOC_MODES)
    if patch is None and fail != "all":
        raise ValueError("fail_alloc applies to a patch (sync=KernelPatch or a .c path), not to the lab's trackers")
    check, restart, granularity, alloc_failure = _model_options(check, restart, granularity, alloc_failure)
    fp = _number(fault_probability, "fault_probability", 0.0, 1.0)
    pp = ((DEFAULT_POOL_PAGES if alloc_failure in ("pool", "mempool") else 0) if pool_pages is None
          else _int(pool_pages, "pool_pages", 0, 1 << 20))
    th = _int(threads, "threads", 2, MAX_THREADS)
    wr = th // 2 if writers is None else _int(writers, "writers", 1, th - 1)
    secs = _number(seconds, "seconds", 0.0, 3600.0, open_low=True)
    mo = _int(min_ops, "min_ops", 0, 10 ** 12)
    sd = _int(seed, "seed", 0, (1 << 63) - 1)
    rb = _int(region_blocks, "region_blocks", 1, 1 << 20)
    bs = _pow2(block_size, "block_size", 512, 1 << 20)
    cs = _pow2(chunk_size, "chunk_size", 512, 1 << 62)
    mw = _int(max_write_blocks, "max_write_blocks", 1, rb)
    rdb = _int(read_blocks, "read_blocks", 1, min(MAX_READ_BLOCKS, rb))
    wd = _int(write_delay_ns, "write_delay_ns", 0, 10 ** 9)
    delay = _choice(delay, "delay", DELAYS)
    re = _int(reclaim_every, "reclaim_every", 0, 1 << 62)
    wk, tk = _write_options(write_kind, track)
    caf = _number(cache_alloc_fail, "cache_alloc_fail", 0.0, 1.0)
    wt_run = _non_default(write_kind=(wk, "bypass"), cache_alloc_fail=(caf, 0.0))
    inv = _choice(invalidate, "invalidate", INVALIDATES)
    wt_dev = _non_default(track=(tk, "bypass"), invalidate=(inv, "at-submit"))
    uh = _non_default(unhijack=(_choice(unhijack, "unhijack", UNHIJACKS), "at-end"))
    fault = FaultInjection(probability=fp, seed=sd) if fp > 0 else None
    if patch is None:
        dev = CachedDevice(rb * bs, sync=sync, check=check, restart=restart, granularity=granularity,
                           block_size=bs, region_blocks=1, write_delay_ns=wd, delay=delay, chunk_size=cs,
                           alloc_failure=alloc_failure, pool_pages=pp, fault=fault, **wt_dev, **uh)
    else:
        # write_end rotates over hard-irq, soft-irq and worker context (docs/check-patch.md)
        ptracker = patch.tracker(rb * bs, fault=fault, hung_timeout=ht, end_contexts="all", fail_alloc=fail)
        dev = CachedDevice(rb * bs, tracker=ptracker, check=check, restart=restart, granularity=granularity,
                           block_size=bs, region_blocks=1, write_delay_ns=wd, delay=delay, **wt_dev)

    totals: dict[str, int] = {}
    elapsed_ns = 0
    n_slices = max(1, math.ceil(secs / _RACE_SLICE_S))

    def slices() -> Iterator[int]:
        k = 0
        while k < n_slices or totals.get("ops", 0) < mo:
            yield k
            k += 1

    for k in _progress(progress, slices(), n_slices):
        part = _race_slice(dev, threads=th, writers=wr, ops=0,
                           seconds=min(_RACE_SLICE_S, secs - k * _RACE_SLICE_S) if k < n_slices else _RACE_SLICE_S,
                           region_blk=0, region_blocks=rb, max_write_blocks=mw, read_blocks=rdb,
                           reclaim_every=re, seed=sd + k, **wt_run)
        elapsed_ns += part.pop("elapsed_ns")
        for key, v in part.items():
            totals[key] = totals.get(key, 0) + v
    ts = dev.tracker_stats() or {}
    elapsed = elapsed_ns / 1e9
    return {
        "stale_reads": totals["stale_reads"],
        "stale_cached_blocks": dev.stale_cached_blocks(),
        "reads": totals["reads"],
        "writes": totals["writes"],
        "read_bypasses": totals["read_bypasses"],
        "cache_inserts": totals["cache_inserts"],
        "miss_collisions": totals["miss_collisions"],
        "ops": totals["ops"],
        "seconds": elapsed,
        "ops_per_s": totals["ops"] / elapsed if elapsed else 0.0,
        "stale_reads_per_s": totals["stale_reads"] / elapsed if elapsed else 0.0,
        "read_hits": totals["read_hits"],
        "untracked_writes": totals["untracked_writes"],
        "underflows": ts.get("underflows", 0),
        "alloc_failures": ts.get("alloc_failures", 0),
        "hijack_events": ts.get("hijack_events", 0),
        "mempool_waits": ts.get("mempool_waits", 0),
        "mempool_rounds": ts.get("mempool_rounds", 0),
        "faults_injected": ts.get("faults_injected", 0),
        "reclaimed": totals["reclaimed"],
        "tracker_checks": totals["tracker_checks"],
        "check_key_restarts": totals["check_key_restarts"],
        **({"writethrough_writes": totals.get("writethrough_writes", 0),
            "writethrough_fallbacks": totals.get("writethrough_fallbacks", 0)} if wk != "bypass" else {}),
        "kernel_reports": report_counts(dev.tracker.kernel_reports()) if isinstance(dev.tracker, PatchTracker) else {},
        "config": {"sync": dev.sync if patch is None else patch.path,
                   "patch": None if patch is None else patch_label(patch), "check": dev.check,
                   "restart": dev.restart, "granularity": dev.granularity,
                   "alloc_failure": alloc_failure, "fault_probability": fp,
                   "pool_pages": pp, "threads": th, "writers": wr, "region_blocks": rb, "block_size": bs,
                   "chunk_size": cs, "max_write_blocks": mw, "read_blocks": rdb, "write_delay_ns": wd,
                   "delay": delay, "reclaim_every": re, "seed": sd,
                   "hung_timeout": ht if patch is not None else None, **wt_run, **wt_dev, **uh,
                   **({"fail_alloc": fail} if patch is not None else {})},
    }


# -- explore ------------------------------------------------------------------------------------------

#: What the explorer checks, printed with its results (docs/cachedev.md says the same).
EXPLORER_SEMANTICS = ("the protocol under sequential consistency, each step one atomic action; a tracker call "
                      "is one step per lock hold (a tracking page for global/page, a chunk for atomic); "
                      "memory-model effects (weakened acquire/release, hardware reordering) are not explored")

_PLACEMENT_TEXT = {"entry": "at ENTRY (before the lookup)", "miss": "in the MISS path (before the check key)",
                   "after": "AFTER the check key", "read-done": "at READ-DONE (after the backing read)"}


def _schedule_bound(writes: int, reads: int, read_steps: int) -> int:
    """Interleavings when every operation runs all its steps once (restarts add more, hits fewer);
    only sizes the progress bar."""
    total = writes * 4 + reads * read_steps
    n = math.factorial(total)
    n //= math.factorial(4) ** writes
    n //= math.factorial(read_steps) ** reads
    return n


def _blocks(lo: int, hi: int) -> str:
    return f"block {lo}" if hi - lo == 1 else f"blocks [{lo}, {hi})"


def _chunks(lo: int, hi: int, chunk_size: int) -> str:
    first, last = lo // chunk_size, (hi - 1) // chunk_size
    return f"chunk {first}" if first == last else f"chunks [{first}, {last + 1})"


def _entry(e: int) -> str:
    if e == 0:
        return "empty"
    if e & 3 == 1:
        return f"check key #{(e >> 2) & 0xFFFFFFFFF}"
    return f"valid v{e >> 2}"


def _write_tracker_text(rec: dict[str, Any], chunk_size: int) -> str:
    f = rec["flags"]
    where = _chunks(rec["lo"], rec["hi"], chunk_size)
    if "blocked" in f:
        return f"tracker start stops at a full counter ({rec['count']}): WAITS for an end; {where} counted so far"
    if "untracked" in f:
        return f"tracker start on {where}: page allocation failed, write left UNTRACKED"
    if "wrapped" in f:
        return f"tracker start on {where}: counter WRAPPED to {rec['count']} (overflow)"
    if "clamped" in f:
        return f"tracker start on {where}: counter CLAMPED at {rec['count']} (increment dropped)"
    return f"tracker start on {where}: counter {rec['count']}"


def render_step(rec: dict[str, Any], *, check: str, granularity: str, chunk_size: int, max_restarts: int,
                patch: bool = False, track: str = "bypass") -> str:
    """One counterexample step record (from the explorer) as a sentence. ``patch``: the tracker was a
    kernel patch (its calls are named by the kernel's hooks, its counters are not visible); ``track``:
    which writes the tracker counted. A write whose invalidation follows its landing (``invalidate=
    "after-write"``) carries the flag ``after_write``."""
    op, step, f = rec["op"], rec["step"], rec["flags"]
    for flag, label in (("detached", "detached path"), ("discard", "discard")):
        if flag in f:
            plain = {**rec, "flags": [x for x in f if x != flag]}
            text = render_step(plain, check=check, granularity=granularity, chunk_size=chunk_size,
                               max_restarts=max_restarts, patch=patch, track=track)
            return text.replace(f"{op} {step}:", f"{op} {step} ({label}):", 1)
    more = "; more tracker steps of this call follow" if "more" in f else ""
    if "writethrough" in f:
        fails = "; its cache allocation will FAIL (the insert falls back)" if "fallback" in f else ""
        if step == "start" and "uncounted" in f:
            return f"{op} start (writethrough): version v{rec['version']}; not counted (track={track}){fails}"
        if step == "start":
            plain = {**rec, "flags": [x for x in f if x not in ("writethrough", "fallback")]}
            rest = render_step(plain, check=check, granularity=granularity, chunk_size=chunk_size,
                               max_restarts=max_restarts, patch=patch, track=track)
            return rest.replace(f"{op} start:", f"{op} start (writethrough):", 1) + fails
        if step == "invalidate" and "fallback" in f:
            return (f"{op} insert: cache allocation failed -> invalidate (the writethrough fallback): cache "
                    f"{_blocks(rec['lo'], rec['hi'])} emptied (check keys included); the node sequence moves")
        if step == "invalidate":
            return (f"{op} insert: cache {_blocks(rec['lo'], rec['hi'])} = v{rec['version']} (writethrough; "
                    "newest version wins, check keys overwritten); the node sequence moves")
    if step == "start" and "uncounted" in f:
        return f"{op} start: version v{rec['version']}; not counted (track={track})"
    if step == "end" and "uncounted" in f:
        return f"{op} end: not counted (no tracker end); v{rec['version']} completed"
    if patch and step in ("start", "end"):
        where = f"bytes [{rec['lo']}, {rec['hi']})"
        if step == "start":
            what = ("an allocation failed during the call (the write may be UNTRACKED)" if "untracked" in f
                    else "returned")
            return f"{op} start: version v{rec['version']}; patch write_start on {where}: {what}"
        return f"{op} end: patch write_end on {where} (a completion); v{rec['version']} completed"
    if patch and step == "check":
        verdict = "an active write overlaps -> the read bypasses the cache" if "active" in f else "no active write"
        return f"{op} patch read_bypass {_PLACEMENT_TEXT[check]}: {verdict}"
    if step == "start":
        tracker = "no tracking (unpatched)" if "no_tracking" in f else _write_tracker_text(rec, chunk_size)
        return f"{op} start: version v{rec['version']}; {tracker}{more}"
    if step == "invalidate":
        late = " (after-write: its data has landed)" if "after_write" in f else ""
        return (f"{op} invalidate{late}: cache {_blocks(rec['lo'], rec['hi'])} emptied (check keys included); "
                "the node sequence moves")
    if step == "land":
        return f"{op} land: v{rec['version']} reaches the backing device ({_blocks(rec['lo'], rec['hi'])})"
    if step == "end":
        if "no_tracking" in f:
            return f"{op} end: no tracking; v{rec['version']} completed"
        what = (f"tracker end on {_chunks(rec['lo'], rec['hi'], chunk_size)}: "
                + ("found a zero counter (UNDERFLOW refused)" if "underflow" in f else f"counter {rec['count']}"))
        return f"{op} end: {what}{more}" if more else f"{op} end: {what}; v{rec['version']} completed"
    if step == "check":
        scope = " (whole tracking page)" if granularity == "page" else ""
        verdict = "an active write overlaps -> the read bypasses the cache" if "active" in f else "no active write"
        return f"{op} tracker check {_PLACEMENT_TEXT[check]}{scope}: {verdict}{more}"
    if step == "lookup":
        seen = ", ".join(f"block {rec['lo'] + i} {_entry(e)}" for i, e in enumerate(rec["a"]))
        if "hit" in f:
            return f"{op} lookup: {seen} -> hit"
        tail = "already bypassing, no check key" if "active" in f else "miss"
        return f"{op} lookup: {seen} -> {tail}"
    if step == "check_key":
        if "restart" in f:
            cut = f"; restart bound {max_restarts} reached, schedule cut" if "capped" in f else ""
            return (f"{op} check key: node sequence moved {rec['count']} -> {rec['seq_now']} since the lookup: "
                    f"-EINTR, the lookup restarts (restart {rec['version']}){cut}")
        if "forced" in f:
            return (f"{op} check key: node sequence moved {rec['count']} -> {rec['seq_now']} since the lookup, "
                    f"but the restart is switched off: check key placed anyway")
        return f"{op} check key: node sequence unchanged ({rec['count']}): check key placed on the missed blocks"
    if step == "backing":
        got = ", ".join(f"block {rec['lo'] + i} = v{v}" for i, v in enumerate(rec["a"]) if rec["b"][i])
        return f"{op} backing read: {got}"
    if step == "insert":
        if "active" in f:
            return f"{op} replace-insert skipped (bypass): nothing cached"
        if rec["version"]:
            return (f"{op} replace-insert: check key gone on {rec['version']} block(s) -> miss collision; "
                    f"{rec['count']} block(s) cached")
        return f"{op} replace-insert: check key intact -> {rec['count']} block(s) cached"
    if step == "return":
        vals = ", ".join(f"v{v}" + (" (STALE)" if v < floor else "") for v, floor in zip(rec["a"], rec["b"]))
        if "stale" in f:
            return f"{op} returns {vals}: STALE READ, a newer version had completed before {op} began"
        return f"{op} returns {vals}"
    if step == "reclaim":
        return f"{op} reclaim: {rec['version']} idle tracker page(s) freed"
    if step == "stale_block":
        return (f"at quiescence: block {rec['lo']} is cached as v{rec['a'][0]} but the backing device holds "
                f"v{rec['b'][0]} (STALE CACHED BLOCK: later reads hit old data)")
    if step == "stuck":
        return "every unfinished operation is blocked: the schedule is stuck"
    raise ValueError(f"unknown explorer step {step!r}")


def explore(*, sync: Any = "page", check: str = "after", restart: bool = True, granularity: str = "chunk",
            alloc_failure: str = DEFAULT_ALLOC_FAILURE, fault_at: int = 0, writes: int = 2, reads: int = 1,
            reclaims: int = 0,
            write_blocks: int = 1, read_blocks: int = 1, chunk_size: int = 4096,
            pool_pages: int = DEFAULT_POOL_PAGES, counter_bits: int | None = None, counter_max: int | None = None,
            overflow: str = "wait",
            preload: int = 0, max_restarts: int = 3,
            reduce: bool = True, max_schedules: int = 0, hung_timeout: float | None = None,
            write_kind: str = "bypass", cache_alloc_fail: int = 0, track: str = "bypass",
            invalidate: str = "at-submit", detached: bool = False, unhijack: str = "at-end",
            fail_alloc: str = "all",
            progress: Progress | None = None, prefix: Sequence[int] | None = None) -> dict[str, Any]:
    """Run ``writes`` bypass writes of blocks ``[0, write_blocks)``, ``reads`` reads of blocks
    ``[0, read_blocks)`` and ``reclaims`` daemon reclaims under every interleaving of their steps, each
    step a call into the C model and tracker, on a fresh device and tracker per schedule.

    It checks the protocol under sequential consistency with each step one atomic action
    (:data:`EXPLORER_SEMANTICS`); multi-chunk tracker calls are one step per lock hold.

    :param sync: ``"none"``, ``"global"``, ``"page"`` (default) or ``"atomic"``, or a kernel patch (a
        :class:`pybcache.KernelPatch` or the path of its ``.c`` file): a fresh instance per schedule,
        its START, END and CHECK one step each (a patch cannot resume), ``fault_at`` counting its
        allocations (init excluded); the lab-only options (``alloc_failure``, ``chunk_size``,
        ``pool_pages``, ``counter_bits``, ``counter_max``, ``overflow``, ``preload``,
        ``granularity="page"``) are then a ValueError. The explored writes (at most 8 in flight) stay
        far below any counter maximum a patch plausibly has; a patch start that sleeps anyway (or any
        hang) stops the search after ``hung_timeout`` with TimeoutError naming its kernel report.
    :param check: ``"entry"``, ``"miss"``, ``"after"`` (default) or ``"read-done"``; ``"before"`` = ``"entry"``.
    :param restart: the check key's -EINTR restart (default True; False shows what it prevents).
    :param granularity: ``"chunk"`` (default) or ``"page"``: what a read's check covers.
    :param alloc_failure: ``"untracked"``, ``"hijack"``, ``"pool"`` or ``"mempool"`` (default,
        :data:`DEFAULT_ALLOC_FAILURE`; a start that finds no page takes one more step per allocator
        attempt: mempool_alloc's second attempt, then one per round of waiting).
    :param fault_at: if K > 0, the K-th tracker page allocation of every schedule fails. Default 0.
    :param writes: bypass writes, reads: reads, reclaims: daemon ``reclaim()`` calls (at most 4);
        each >= 0, 1 <= writes + reads + reclaims <= 8. Default 2, 1 and 0.
    :param write_blocks: blocks per write, in [1, 64]. Default 1.
    :param read_blocks: blocks per read, in [1, 64]. Default 1.
    :param chunk_size: tracker chunk in bytes, a power of two >= 512 (blocks are 4096 bytes). Default 4096.
    :param pool_pages: reserve pages for ``alloc_failure="pool"`` or ``"mempool"`` (min_nr), in [0, 64].
        Default 1.
    :param counter_bits: 16, 32, 64 or None (16 for the lock variants, 64 for atomic).
    :param overflow: ``"wrap"``, ``"clamp"`` or ``"wait"`` (default) at a counter's maximum; under
        ``"wait"`` a write's start is not scheduled while its counter is full.
    :param counter_max: None (the width's maximum) or a lowered one in [1, 2**counter_bits - 1], so
        that overflow is a few steps away (a maximum of 2 with 2 writes: the second start finds its
        counter full); kept in the same storage, as md-bitmap keeps 16383 in 16 bits.
    :param preload: other writes to chunk 0 in flight for the whole schedule (they never land or
        end), in [0, 2**counter_bits - 1], so that the explored writes reach a 16-bit maximum.
        Default 0.
    :param max_restarts: a read restarted more often than this is cut there (counted in
        ``restart_capped_schedules``), in [0, 16]. Default 3.
    :param reduce: partial-order reduction (default True): skip orders of independent steps that an
        explored schedule already covers (sleep sets; every interleaving is equivalent to an explored
        one, so the verdict is the same); False runs every interleaving.
    :param max_schedules: stop after this many runs (0 = all), >= 0.
    :param hung_timeout: a patch's bound in seconds on any wait (patch only; default 10).
    :param fail_alloc: a patch's allocations ``fault_at`` counts and fails: ``"all"`` (default: every one
        but ``__GFP_NOFAIL``) or ``"can-fail"`` (only those the kernel can fail: a mask that cannot sleep,
        ``__GFP_NORETRY``/``__GFP_RETRY_MAYFAIL``, or more than 32 KiB; docs/check-patch.md). A patch's
        END steps rotate over the four contexts of ``write_end`` (hard-irq, soft-irq, worker, inline on
        the explorer's own thread), counted across schedules.
    :param write_kind: ``"bypass"`` (default), ``"writethrough"`` or ``"mixed"`` (W1, W3, ... bypass,
        W2, W4, ... writethrough): a writethrough write's ``invalidate`` step is its cache insert.
    :param cache_alloc_fail: K > 0: the K-th writethrough cache allocation of every schedule (drawn
        at the writes' starts, in order) fails, and that write's insert invalidates instead (the
        writethrough fallback); 0 (default) = never. In [0, 2**62].
    :param track: which writes the tracker counts: ``"bypass"`` (default: the v2 patch, bypass writes
        only), ``"invalidations"`` (bypass writes and writethrough fallbacks) or ``"all"`` (every write,
        a detached one included). ``write_kind="discard"``: every write a discard, which bcache sends
        down the bypass branch (a bypass write in every step, counted under every ``track``).
    :param invalidate: ``"at-submit"`` (default: Linux 6.12 and the v2 patch) or ``"after-write"`` (the
        v1 approach: a bypass write's ``invalidate`` step follows its ``land``; writethrough writes keep
        their order). Combines with any ``sync`` and ``track``.
    :param detached: W1 is submitted while the cached device has no cache set (the detached path:
        straight to the backing device, no tracker call, no cache step) and the device attaches right
        after, before any other operation begins; the schedules explore W1's landing and end among the
        others. Counted by the tracker only under ``track="all"``. Needs ``writes >= 1``. Default False.
    :param unhijack: the lab tracker's ``unhijack`` (``"at-end"``, default, or ``"on-decay"``: a drained
        hijacked page reverts only after two ``reclaims``, md's daemon).
    :param progress: optional ``(iterable, total) -> iterable`` wrapper (a progress bar).
    :param prefix: None (default: the whole search) or the operation indices chosen first, as
        :func:`explore_prefixes` lists them: only the schedules that begin so are explored, and the
        results over all prefixes of one depth add up to the whole search's (the distributed explorer,
        :func:`pybcache.explore_distributed`).
    :returns: ``schedules, violations, counterexample`` (a list of step sentences, or None) and
        ``counterexample_steps`` (the step records), ``finished`` (every schedule explored),
        ``stale_read_schedules, stale_cache_schedules, bypass_schedules, collision_schedules,
        untracked_schedules, underflow_schedules, restart_schedules, restart_capped_schedules,
        stuck_schedules, wrap_schedules, clamp_schedules, blocked_schedules, reclaimed_schedules,
        pruned_runs, faults_injected``, ``report_schedules`` (a patch: schedules in which it made a
        kernel report), ``semantics`` and the configuration under ``config`` (``sync`` is a patch's
        path, ``patch`` its ``"<name> (<path>)"`` or None; ``write_kind``, ``cache_alloc_fail``,
        ``track``, ``invalidate``, ``detached`` and ``unhijack`` only when not at their defaults).
    """
    ex, config = _explorer(sync=sync, check=check, restart=restart, granularity=granularity,
                           alloc_failure=alloc_failure, fault_at=fault_at, writes=writes, reads=reads,
                           reclaims=reclaims, write_blocks=write_blocks, read_blocks=read_blocks,
                           chunk_size=chunk_size, pool_pages=pool_pages, counter_bits=counter_bits,
                           counter_max=counter_max, overflow=overflow, preload=preload,
                           max_restarts=max_restarts, reduce=reduce, max_schedules=max_schedules,
                           hung_timeout=hung_timeout, write_kind=write_kind, cache_alloc_fail=cache_alloc_fail,
                           track=track, invalidate=invalidate, detached=detached, unhijack=unhijack,
                           fail_alloc=fail_alloc)
    if prefix is not None:
        ex.set_prefix(_prefix_bytes(prefix, config["writes"] + config["reads"] + config["reclaims"]))
    sync, w, r, ms = config["sync"], config["writes"], config["reads"], config["max_schedules"]
    check, granularity, cs, mr = config["check"], config["granularity"], config["chunk_size"], config["max_restarts"]
    bound = _schedule_bound(w, r, 4 if sync == "none" else 5)
    if ms:
        bound = min(bound, ms)
    batches = max(1, math.ceil(bound / _EXPLORE_BATCH))

    def run() -> Iterator[int]:
        done = 0
        k = 0
        while True:
            budget = _EXPLORE_BATCH if not ms else min(_EXPLORE_BATCH, ms - done)
            finished = ex.run(budget)
            done += budget
            yield k
            k += 1
            if finished or (ms and done >= ms):
                return

    for _ in _progress(progress, run(), batches):
        pass
    out = ex.result()
    steps = out.pop("steps")
    out["counterexample"] = None if steps is None else [
        render_step(x, check=check, granularity=granularity, chunk_size=cs, max_restarts=mr,
                    patch=config["patch"] is not None, **_non_default(track=(config.get("track", "bypass"), "bypass")))
        for x in steps]
    if out["counterexample"] is not None and config.get("detached"):
        counted = "counted by the tracker (track=all)" if config.get("track") == "all" else "no tracker call"
        out["counterexample"].insert(0, f"W1 was submitted while the device had no cache set (the detached path: "
                                        f"{counted}, no cache step); the device then attached")
    out["counterexample_steps"] = steps
    out["semantics"] = EXPLORER_SEMANTICS
    out["config"] = config
    return out


def _explorer(*, sync: str, check: str, restart: bool, granularity: str, alloc_failure: str, fault_at: int,
              writes: int, reads: int, reclaims: int, write_blocks: int, read_blocks: int, chunk_size: int,
              pool_pages: int, counter_bits: int | None, counter_max: int | None, overflow: str, preload: int,
              max_restarts: int, reduce: bool, max_schedules: int,
              hung_timeout: float | None = None, write_kind: str = "bypass", cache_alloc_fail: int = 0,
              track: str = "bypass", invalidate: str = "at-submit", detached: bool = False,
              unhijack: str = "at-end", fail_alloc: str = "all") -> tuple[_Explorer, dict[str, Any]]:
    """:func:`explore`'s arguments checked: its C explorer and its ``config``."""
    patch = _as_patch(sync)
    if patch is None:
        sync = _choice(sync, "sync", VARIANTS)
    else:
        _lab_only(patch, alloc_failure=(alloc_failure, DEFAULT_ALLOC_FAILURE), chunk_size=(chunk_size, 4096),
                  pool_pages=(pool_pages, 1), counter_bits=(counter_bits, None), counter_max=(counter_max, None),
                  overflow=(overflow, "wait"), preload=(preload, 0), granularity=(granularity, "chunk"),
                  unhijack=(unhijack, "at-end"))
        sync = patch.path
    ht = _hung(hung_timeout, patch)
    fail = _choice(fail_alloc, "fail_alloc", FAIL_ALLOC_MODES)
    if patch is None and fail != "all":
        raise ValueError("fail_alloc applies to a patch (sync=KernelPatch or a .c path), not to the lab's trackers")
    check, restart, granularity, alloc_failure = _model_options(check, restart, granularity, alloc_failure)
    fa = _int(fault_at, "fault_at", 0, 1 << 62)
    w = _int(writes, "writes", 0, MAX_EXPLORE_OPS)
    r = _int(reads, "reads", 0, MAX_EXPLORE_OPS)
    rc = _int(reclaims, "reclaims", 0, MAX_EXPLORE_RECLAIMS)
    if not 1 <= w + r + rc <= MAX_EXPLORE_OPS:
        raise ValueError(f"writes + reads + reclaims must be in [1, {MAX_EXPLORE_OPS}], got {w} + {r} + {rc}")
    wb = _int(write_blocks, "write_blocks", 1, 64)
    rb = _int(read_blocks, "read_blocks", 1, MAX_READ_BLOCKS)
    cs = _pow2(chunk_size, "chunk_size", 512, 1 << 40)
    pp = _int(pool_pages, "pool_pages", 0, 64)
    if counter_bits is None:
        bits = 64 if sync == "atomic" else 16
    else:
        bits = _int(counter_bits, "counter_bits", 16, 64)
        if bits not in (16, 32, 64):
            raise ValueError(f"counter_bits must be 16, 32, 64 or None, got {counter_bits!r}")
    of = _choice(overflow, "overflow", OVERFLOWS)
    width_max = (1 << bits) - 1 if bits < 64 else (1 << 64) - 1
    cm = width_max if counter_max is None else _int(counter_max, "counter_max", 1, min(width_max, 1 << 62))
    pl = _int(preload, "preload", 0, min(cm, 1 << 62))
    mr = _int(max_restarts, "max_restarts", 0, MAX_EXPLORE_RESTARTS)
    if not isinstance(reduce, bool):
        raise TypeError(f"reduce must be a bool, got {type(reduce).__name__}")
    ms = _int(max_schedules, "max_schedules", 0, 1 << 62)
    wk, tk = _write_options(write_kind, track)
    caf = _int(cache_alloc_fail, "cache_alloc_fail", 0, 1 << 62)
    inv = _choice(invalidate, "invalidate", INVALIDATES)
    dt = check_bool(detached, "detached")
    if dt and w < 1:
        raise ValueError("detached=True needs writes >= 1 (W1 is the write submitted on the detached path)")
    uh = _choice(unhijack, "unhijack", UNHIJACKS)
    wt = _non_default(write_kind=(wk, "bypass"), cache_alloc_fail=(caf, 0), track=(tk, "bypass"),
                      invalidate=(inv, "at-submit"), detached=(dt, False), unhijack=(uh, "at-end"))
    ex = _Explorer("page" if patch is not None else sync, check, restart, granularity, alloc_failure, pp, fa,
                   w, r, rc, mr, wb, rb, 4096, cs, 0 if counter_bits is None else bits, of, pl, reduce,
                   0 if counter_max is None else cm,
                   patch=None if patch is None else patch._module, hung_timeout=ht,
                   end_bio_intact=patch is not None and getattr(patch, "end_bio", "consumed") == "intact", **wt,
                   patch_fail_mode=FAIL_ALLOC_MODES.index(fail))
    return ex, {"sync": sync, "patch": None if patch is None else patch_label(patch),
                "hung_timeout": ht if patch is not None else None, "check": check, "restart": restart,
                "granularity": granularity, **({"fail_alloc": fail} if patch is not None else {}),
                "alloc_failure": alloc_failure, "fault_at": fa, "writes": w, "reads": r, "reclaims": rc,
                "write_blocks": wb, "read_blocks": rb, "chunk_size": cs, "pool_pages": pp,
                "counter_bits": bits, "counter_max": cm, "overflow": of, "preload": pl, "max_restarts": mr,
                "reduce": reduce, "max_schedules": ms, **wt}


def _prefix_bytes(prefix: Sequence[int], n_ops: int) -> bytes:
    if isinstance(prefix, (str, bytes)) or not isinstance(prefix, Sequence):
        raise TypeError(f"prefix must be a sequence of operation indices, got {type(prefix).__name__}")
    if len(prefix) > MAX_EXPLORE_STEPS:
        raise ValueError(f"prefix: at most {MAX_EXPLORE_STEPS} choices, got {len(prefix)}")
    return bytes(_int(c, f"prefix[{i}]", 0, n_ops - 1) for i, c in enumerate(prefix))


def explore_prefixes(depth: int, *, max_count: int = 1 << 16, **config: Any) -> list[tuple[int, ...]] | None:
    """The prefixes that cut :func:`explore`'s search (same ``config`` keywords) at ``depth`` choices,
    in the order the search visits them; a schedule that ends above ``depth`` is a shorter prefix of
    its own. :func:`explore` with ``prefix=p`` over every listed ``p`` finds exactly the whole search's
    schedules, and its first counterexample is the first found in that order.

    :param depth: in [1, 1024].
    :param max_count: give up (return None) past this many prefixes, in [1, 2**24]. Default 65536.
    """
    d = _int(depth, "depth", 1, MAX_EXPLORE_STEPS)
    mc = _int(max_count, "max_count", 1, 1 << 24)
    unknown = sorted(set(config) - set(_EXPLORE_CONFIG))
    if unknown:
        raise TypeError(f"explore_prefixes: unknown argument {unknown[0]!r}")
    ex, _ = _explorer(**{**_EXPLORE_CONFIG, **config})
    got = ex.prefixes(d, mc)
    return None if got is None else [tuple(p) for p in got]


#: explore()'s configuration arguments and their defaults (what explore_prefixes takes)
_EXPLORE_CONFIG = {name: p.default for name, p in inspect.signature(explore).parameters.items()
                   if name not in ("progress", "prefix")}


# -- fio ----------------------------------------------------------------------------------------------

def _per_io(res: dict[str, int]) -> float | None:
    return res["cpu_ns"] / res["ops"] if res["ops"] and res["cpu_ns"] else None


def _vs_track_bypass(row: dict[str, Any], pairs: list[tuple[dict[str, int], dict[str, int]]],
                     base: dict[str, Any]) -> None:
    """A fio row's cost against its variant's ``track="bypass"`` row of the same run: the per-round CPU
    ns-per-I/O ratios (median and range) from ``pairs`` (this row's slice, the baseline's slice) and the
    ratio of read-bypass fractions over the whole run."""
    ratios = []
    for a, b in pairs:
        x, y = _per_io(a), _per_io(b)
        if x is not None and y is not None:
            ratios.append(x / y)
    row["ns_per_io_vs_track_bypass"] = statistics.median(ratios) if ratios else None
    row["ns_per_io_vs_track_bypass_range"] = [min(ratios), max(ratios)] if ratios else None
    row["bypass_fraction_vs_track_bypass"] = (row["bypass_fraction"] / base["bypass_fraction"]
                                              if base["bypass_fraction"] else None)


def fio(*, size: int = 10 * _GiB, jobs: int | None = None, seconds: float = 2.0,
        variants: Sequence[str] = VARIANTS, read_percent: int = 70, inflight: int = 160,
        read_size: int = 4 * _KiB, write_size: int = 128 * _KiB, bounce_copy: bool = True,
        chunk_size: int = 32 * _MiB, granularity: str = "chunk", free: str = "eager", seed: int = 0,
        sync: Any = None, hung_timeout: float | None = None, write_kind: str = "bypass",
        cache_alloc_fail: float = 0.0, track: str | Sequence[str] = "bypass",
        progress: Progress | None = None) -> dict[str, Any]:
    """The v2 cover letter's fio table in the model: ``jobs`` threads issue random ``read_size`` reads
    (``read_percent`` of operations) and random ``write_size`` bypass writes over a working set of
    ``size`` bytes, with ``inflight`` writes in flight in total, once per tracking variant.

    The variants run in alternating slices of 0.25 s (the order rotating every round) on one device
    whose cache is emptied before each slice, so every variant sees the same machine conditions; the
    overhead ratio is the median over rounds of the per-round ratio to ``"none"``.

    :param size: working set in bytes, a multiple of ``write_size``, in [write_size, 1 TiB]. The model
        keeps 24 bytes per 4 KiB block (320 GiB: about 2 GiB of memory).
    :param jobs: threads, in [1, 256]; default ``min(16, os.cpu_count())``.
    :param seconds: measured time per variant, in (0, 3600]. Default 2.
    :param variants: a non-empty subset of ``("none", "global", "page", "atomic")``, no repeats.
    :param read_percent: in [0, 100]. Default 70 (the v2 cover letter's 20,977 of 29,971 IOPS).
    :param inflight: bypass writes in flight over all jobs, in [jobs, 4096 * jobs]. Default 160 (the
        v2 cover letter's 8,956 write IOPS times its 18.3 ms write latency, by Little's law).
    :param read_size: bytes per read, a multiple of 4096 up to 256 KiB. Default 4 KiB.
    :param write_size: bytes per write, a multiple of 4096. Default 128 KiB.
    :param bounce_copy: charge a read miss that is inserted its bounce-buffer copy. Default True.
    :param chunk_size: tracker chunk, a power of two >= 512. Default 32 MiB.
    :param granularity: what a read's check covers: ``"chunk"`` (default, the design as described) or
        ``"page"`` (the whole tracking page, 64 GiB with the defaults).
    :param free: the lock variants' page lifetime, ``"eager"`` (default: freed when its last counter
        drops to zero) or ``"deferred"`` (kept until ``reclaim()``, which the mix never calls); which
        one the posted patch does is not known. The rows report allocations per 1,000 writes.
    :param seed: >= 0.
    :param sync: None, or a kernel patch (a :class:`pybcache.KernelPatch` or the path of its ``.c``
        file) measured as one more variant, ``"patch"``, after ``variants``: one instance of
        ``size`` bytes for the whole run, its ends on the completion threads (``granularity="page"``
        is then a ValueError; ``chunk_size`` and ``free`` apply to the lab's variants only). Its row's
        ``tracking_pages`` and ``pages_allocated`` count the patch's allocations, whatever their size.
    :param hung_timeout: the patch's bound on any wait, in (0, 3600] s (patch only; default 10).
    :param write_kind: the writes: ``"bypass"`` (default), ``"writethrough"``, ``"mixed"`` (each job's
        odd-numbered writes bypass, even-numbered writethrough) or ``"discard"`` (the bypass branch), as
        :func:`race`'s.
    :param cache_alloc_fail: chance in [0, 1] that a writethrough write's cache allocation fails (the
        writethrough fallback: it invalidates instead of inserting). Default 0; > 0 needs writethrough
        writes (``write_kind`` ``"writethrough"`` or ``"mixed"``).
    :param track: which writes the tracker counts, as :func:`race`'s: ``"bypass"`` (default, the v2
        patch), ``"invalidations"`` (also the writethrough fallbacks) or ``"all"``; or a non-empty list
        of them without repeats (or a comma-separated string): every tracking variant then runs once per
        ``track`` value in the same alternating slices ("none" once: it has no tracker), and with
        ``"bypass"`` in the list each row gets its cost as ratios to the same variant's ``track="bypass"``
        row of the same run.
    :param progress: optional ``(iterable, total) -> iterable`` wrapper (a progress bar).
    :returns: ``{"rows": [...], "config": {...}}``; each row has ``variant, ops_per_s, ns_per_io,
        ns_per_io_vs_none, read_bypasses, cache_inserts, stale_reads, reads, writes, read_hits,
        bypass_fraction, inserts_avoided, tracking_pages, pages_allocated,
        allocations_per_1000_writes``. With ``write_kind``, ``cache_alloc_fail`` or ``track`` not at their
        defaults, each row also has ``track, writethrough_writes, writethrough_fallbacks,
        tracker_starts`` (the lab tracker's counted chunk starts in the measured slices; 0 for "none"
        and "patch") and, with ``"bypass"`` among the tracks, ``ns_per_io_vs_track_bypass`` (the median
        over rounds of the per-round CPU-ns-per-I/O ratio), ``ns_per_io_vs_track_bypass_range``
        (``[min, max]`` of those per-round ratios) and ``bypass_fraction_vs_track_bypass`` (the ratio of
        read-bypass fractions; None when the baseline has none); ``config`` then has ``write_kind``,
        ``cache_alloc_fail`` and ``tracks``. Tracking pages and allocations are the variant's tracker's,
        shared by its ``track`` rows.
    """
    if isinstance(variants, str):
        variants = [v.strip() for v in variants.split(",") if v.strip()]
    if not isinstance(variants, (list, tuple)) or not variants:
        raise TypeError(f"variants must be a non-empty list of {VARIANTS}")
    vs = tuple(_choice(v, "variants", VARIANTS) for v in variants)
    if len(set(vs)) != len(vs):
        raise ValueError(f"variants must not repeat, got {list(vs)}")
    ws = _int(write_size, "write_size", 4096, 1 << 30)
    if ws % 4096:
        raise ValueError(f"write_size must be a multiple of 4096, got {write_size!r}")
    rs = _int(read_size, "read_size", 4096, MAX_READ_BLOCKS * 4096)
    if rs % 4096:
        raise ValueError(f"read_size must be a multiple of 4096, got {read_size!r}")
    sz = _int(size, "size", ws, 1 << 40)
    if sz % ws:
        raise ValueError(f"size must be a multiple of write_size ({ws}), got {size!r}")
    jb = min(16, os.cpu_count() or 1) if jobs is None else _int(jobs, "jobs", 1, MAX_THREADS)
    secs = _number(seconds, "seconds", 0.0, 3600.0, open_low=True)
    rp = _int(read_percent, "read_percent", 0, 100)
    inf = _int(inflight, "inflight", jb, MAX_INFLIGHT * jb)
    if not isinstance(bounce_copy, bool):
        raise TypeError(f"bounce_copy must be a bool, got {type(bounce_copy).__name__}")
    cs = _pow2(chunk_size, "chunk_size", 512, 1 << 62)
    gr = _choice(granularity, "granularity", GRANULARITIES)
    fr = _choice(free, "free", FREE_POLICIES)
    sd = _int(seed, "seed", 0, (1 << 63) - 1)
    patch = None if sync is None else _as_patch(sync)
    if sync is not None and patch is None:
        raise ValueError(f"sync must be None, a KernelPatch or the path of a patch's .c file, got {sync!r} "
                         f"(the lab's variants are chosen with variants=)")
    if patch is not None:
        _lab_only(patch, granularity=(gr, "chunk"))
    ht = _hung(hung_timeout, patch)
    wk = _choice(write_kind, "write_kind", WRITE_KINDS)
    caf = _number(cache_alloc_fail, "cache_alloc_fail", 0.0, 1.0)
    if caf > 0 and wk not in ("writethrough", "mixed"):
        raise ValueError(f"cache_alloc_fail applies to writethrough writes (write_kind 'writethrough' or 'mixed'), "
                         f"got cache_alloc_fail={cache_alloc_fail!r} with write_kind={wk!r}")
    if isinstance(track, str):
        track = [t.strip() for t in track.split(",") if t.strip()]
    if not isinstance(track, (list, tuple)) or not track:
        raise TypeError(f"track must be one of {TRACKS} or a non-empty list of them")
    tks = tuple(_choice(t, "track", TRACKS) for t in track)
    if len(set(tks)) != len(tks):
        raise ValueError(f"track must not repeat, got {list(tks)}")
    extended = wk != "bypass" or caf != 0.0 or tks != ("bypass",)
    ptracker = None if patch is None else patch.tracker(sz, hung_timeout=ht)
    if patch is not None:
        vs = (*vs, "patch")
    # The measured columns: (variant index, track); "none" has no tracker, so it runs once.
    cols = [(i, t) for i, v in enumerate(vs) for t in (tks[:1] if v == "none" else tks)]

    bench = _FioBench(sz, vs, cs, 4096, bounce_copy, gr, fr,
                      **({"patch_tracker": ptracker} if ptracker is not None else {}))
    rounds = max(2, round(secs / _FIO_SLICE_S))
    slice_s = secs / rounds
    kw: dict[str, Any] = dict(jobs=jb, read_percent=rp, read_blocks=rs // 4096, write_blocks=ws // 4096,
              inflight=max(1, inf // jb))
    if extended:
        kw.update(write_kind=wk, cache_alloc_fail=caf)
    # Warm-up (not measured): page in the code and let the CPU settle.
    def track_kw(t: str) -> dict[str, str]:   # the default run is called as before the option existed
        return {"track": t} if extended else {}
    bench.run(0, seconds=min(0.1, slice_s), seed=sd, **track_kw(cols[0][1]), **kw)
    allocated_before = [bench.tracker_pages_allocated(i) for i in range(len(vs))]
    per_round: list[dict[tuple[int, str], dict[str, int]]] = []
    for k in _progress(progress, range(rounds), rounds):
        row: dict[tuple[int, str], dict[str, int]] = {}
        for j in range(len(cols)):
            i, t = cols[(j + k) % len(cols)]
            # A variant's track columns share a round's seed: the same random stream, only the tracking differs.
            row[(i, t)] = bench.run(i, seconds=slice_s, seed=sd + 1 + k * len(vs) + i, **track_kw(t), **kw)
        per_round.append(row)

    def total(c: tuple[int, str], key: str) -> int:
        return sum(r[c][key] for r in per_round)

    rows: list[dict[str, Any]] = []
    for c in cols:
        i, t = c
        v = vs[i]
        ops, reads, cpu, wall = total(c, "ops"), total(c, "reads"), total(c, "cpu_ns"), total(c, "elapsed_ns")
        rows.append({
            "variant": v,
            **({"track": t} if extended else {}),
            **({"patch": patch_label(patch)} if v == "patch" else {}),
            "ops_per_s": ops / (wall / 1e9) if wall else 0.0,
            "ns_per_io": cpu / ops if ops else 0.0,
            "read_bypasses": total(c, "read_bypasses"),
            "cache_inserts": total(c, "cache_inserts"),
            "stale_reads": total(c, "stale_reads"),
            "reads": reads,
            "writes": total(c, "writes"),
            "read_hits": total(c, "read_hits"),
            "bypass_fraction": total(c, "read_bypasses") / reads if reads else 0.0,
            "insert_fraction": total(c, "cache_inserts") / reads if reads else 0.0,
            "tracking_pages": bench.tracker_pages(i),
            "pages_allocated": bench.tracker_pages_allocated(i) - allocated_before[i],
            **({"writethrough_writes": total(c, "writethrough_writes"),
                "writethrough_fallbacks": total(c, "writethrough_fallbacks"),
                "tracker_starts": total(c, "tracker_starts")} if extended else {}),
        })
        writes = rows[-1]["writes"]
        rows[-1]["allocations_per_1000_writes"] = 1000 * rows[-1]["pages_allocated"] / writes if writes else 0.0
    none_col = next((c for c in cols if vs[c[0]] == "none"), None)
    base = next((r for r in rows if r["variant"] == "none"), None)
    for c, r in zip(cols, rows):
        if extended and "bypass" in tks:
            bc = c if vs[c[0]] == "none" else (c[0], "bypass")   # "none" ran once: it is its own baseline
            _vs_track_bypass(r, [(rd[c], rd[bc]) for rd in per_round], rows[cols.index(bc)])
        if base is None or none_col is None:
            r["ns_per_io_vs_none"] = None
            r["inserts_avoided"] = None
            continue
        ratios = []
        for rd in per_round:
            a, b = rd[c], rd[none_col]
            if a["ops"] and b["ops"] and b["cpu_ns"]:
                ratios.append((a["cpu_ns"] / a["ops"]) / (b["cpu_ns"] / b["ops"]))
        r["ns_per_io_vs_none"] = statistics.median(ratios) if ratios else None
        base_inserts = base["insert_fraction"]
        r["inserts_avoided"] = (1.0 - r["insert_fraction"] / base_inserts) if base_inserts else 0.0
    return {
        "rows": rows,
        "config": {"size": sz, "jobs": jb, "seconds": secs, "rounds": rounds, "variants": list(vs),
                   "read_percent": rp, "inflight": max(1, inf // jb) * jb, "read_size": rs, "write_size": ws,
                   "bounce_copy": bounce_copy, "chunk_size": cs, "granularity": gr, "free": fr, "seed": sd,
                   "chunks": -(-sz // cs), "sync": None if patch is None else patch.path,
                   "patch": None if patch is None else patch_label(patch),
                   "hung_timeout": ht if patch is not None else None,
                   **({"write_kind": wk, "cache_alloc_fail": caf, "tracks": list(tks)} if extended else {})},
        **({"kernel_reports": report_counts(ptracker.kernel_reports())} if ptracker is not None else {}),
    }
