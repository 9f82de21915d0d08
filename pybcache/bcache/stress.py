"""Native multi-threaded stress of a tracker: pthreads started from C, the GIL released."""
from __future__ import annotations

from typing import Any

from .kpatch._kpatch import PatchTracker
from ._tracker import BypassWriteTracker, native_stress

__all__ = ["stress"]


def stress(tracker: BypassWriteTracker | PatchTracker, *, threads: int = 2, ops: int | None = None,
           seconds: float | None = None, region: tuple[int, int] | None = None,
           write_length: int = 128 * 1024, depth: int = 4, partition: bool = False,
           reclaim_every: int = 0, seed: int = 0, wait_timeout: float | None = None,
           completions: str = "thread") -> dict[str, Any]:
    """Drive ``tracker`` from ``threads`` native threads until each has started ``ops`` writes or
    ``seconds`` have passed.

    ``tracker`` is a :class:`pybcache.BypassWriteTracker` or a :class:`pybcache.bcache.kpatch.load.PatchTracker` (a
    loaded kernel patch, :func:`pybcache.load_patch`): a patch's starts may sleep inside the patch (bounded by its
    ``hung_timeout``, not by ``wait_timeout``), its ends run on the completion threads (``completions="inline"`` and
    ``reclaim_every`` are then a ValueError), and an operation it fails stops the run with TimeoutError (hung) or
    RuntimeError naming its kernel report.

    Each thread repeats: start a write of ``write_length`` bytes at a random offset of its region,
    check a random 4 KiB range with ``is_active``, and hand the write to a completion thread of its
    own, which ends the oldest so that about ``depth`` stay in flight, as completion context does in
    the kernel: a start blocked on a full counter (``overflow="wait"``) never holds an end hostage.
    Every write has ended when the call returns, so at quiescence every counter is zero.

    A start that finds a counter at its maximum (``overflow="wait"``), or no page for it under
    ``alloc_failure="mempool"``, sleeps on the tracker's wait queue (woken by the end or the freed page
    it waits for) at most ``wait_timeout``; past it the run stops, rolls that start back, ends every
    write and raises :class:`TimeoutError` naming the chunk and what it waited for. The call waits for
    its threads in slices, so Ctrl-C stops the run the same way and raises KeyboardInterrupt.

    :param threads: native threads, 1..256. Default 2.
    :param ops: writes per thread (give exactly one of ``ops`` and ``seconds``).
    :param seconds: run time per thread, in (0, 3600].
    :param region: ``(offset, length)`` the writes land in; default the whole device.
    :param write_length: bytes per write. Default 128 KiB (the v2 cover letter's fio write size).
    :param depth: writes in flight per thread, 1..4096 (within ``depth`` +- a band of a quarter of it,
        at least min(depth, 8) and at most 64, so that the two threads hand over in batches; each
        thread's ``inflight_mean`` reports the mean seen). Default 4.
    :param partition: give thread i only the i-th equal part of the region (e.g. distinct pages).
    :param reclaim_every: if > 0, thread 0 calls ``reclaim()`` every that many iterations.
    :param seed: seed of the per-thread random streams.
    :param wait_timeout: seconds a start may wait (a full counter, a mempool page), a number in
        (0, 1e6] (numpy numbers too, checked as the tracker's own); default None: the tracker's
        ``wait_timeout`` if it has one (None there: no bound), else 10.
    :param completions: ``"thread"`` (default) or ``"inline"``: each thread ends its own oldest write
        before a new start (no completion threads; a start blocked on a full counter then waits for
        ends only its own thread could make, and times out).
    :returns: ``{"threads", "ops", "ops_per_s", "elapsed_s", "completions", "wait_timeout",
        "per_thread": [...]}``; each thread's entry has ``ops, starts, ends, checks, active_hits,
        untracked, reclaimed, elapsed_s, cpu_s, completion_cpu_s, blocked_starts, blocked_s,
        completer_wakes, inflight_mean, ops_per_s``.
    :raises TimeoutError: a start waited past ``wait_timeout`` (nothing is left half-applied).
    """
    if not isinstance(tracker, (BypassWriteTracker, PatchTracker)):
        raise TypeError(f"tracker must be a pybcache.BypassWriteTracker or pybcache.bcache.kpatch.load.PatchTracker, "
                        f"got {type(tracker).__name__}")
    return native_stress(tracker, threads=threads, ops=ops, seconds=seconds, region=region,
                         write_length=write_length, depth=depth, partition=partition,
                         reclaim_every=reclaim_every, seed=seed, wait_timeout=wait_timeout,
                         completions=completions)
