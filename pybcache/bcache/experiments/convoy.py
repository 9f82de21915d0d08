"""The ``writeback_lock`` convoy (issue 27 §5): what a sleeping bypass-write start costs the writeback thread and
the writes behind it, as ratios against the same run with starts that do not sleep.

Linux 6.12 facts the model rests on:

* every write to a cached device takes ``dc->writeback_lock`` for read before deciding anything
  (``cached_dev_write``, drivers/md/bcache/request.c:990) and releases it only when the whole request completes
  (``cached_dev_write_complete``, :977); the tracker's start (v2's and v3's) sits inside the bypass branch
  (:1017), after that ``down_read``, so a start that sleeps (an overflow wait, a mempool wait) sleeps holding the
  read side;
* in writeback mode, with dirty data, the writeback thread loops: ``down_write`` (drivers/md/bcache/writeback.c:749),
  ``refill_dirty`` under it, ``up_write`` (:818), then ``read_dirty`` without it; attaching takes it too
  (drivers/md/bcache/super.c:1295);
* an rwsem with a writer waiting admits no new reader while readers hold it: the fast path fails once the waiters
  flag is set (``rwsem_read_trylock``, kernel/locking/rwsem.c:248-256) and the slow path queues a reader behind the
  writer when other readers own the lock (:1006-1008). So while the writeback thread waits for the sleeping start,
  every write that arrives queues behind it, and then behind the thread's ``refill_dirty`` as well.

The model is a deterministic event simulation (no threads, no clock): writes arrive every ``gap_us``; each takes
the read side (FIFO behind a waiting or holding writer), runs its start (``sleep_us`` for every ``sleep_every``-th
write, 0 for the others), its I/O (``io_us``) and releases at completion; the writeback thread asks for the write
side every ``period_us`` after it last released it (its ``read_dirty``) and holds it ``hold_us`` (its
``refill_dirty``). Reader lock stealing (:1011-1031, only when no other reader holds the lock) and the handoff bit
are not modelled: with writes in flight there is always another reader, so a new reader queues. The latencies are
*assumed* (knobs); what the model measures is the ratio to the same arrivals and schedule with non-sleeping starts.
In writethrough and writearound modes there is no dirty data: the writeback thread, when woken, takes the lock,
finds nothing to do, releases it and sleeps (writeback.c:749, :758-770), so there is no convoy: the figures are for
writeback mode.

Run ``python -m pybcache.bcache.experiments.convoy [--json]`` for the table of docs/design-answers.md.
"""
from __future__ import annotations

import argparse
import sys
import heapq
import json
from collections import deque
from typing import Any

from ...validate import check_int

__all__ = ["convoy", "simulate"]


def simulate(*, gap_us: int, io_us: int, sleep_us: int, sleep_every: int, hold_us: int, period_us: int,
             horizon_us: int) -> dict[str, Any]:
    """One run of the event model (all times integer microseconds). Returns the writeback thread's waits for
    the write side and the writes' waits for the read side."""
    ev: list[tuple[int, int, int, str, int]] = []   # (time, order, seq, kind, write id)
    seq = 0

    def push(t: int, order: int, kind: str, wid: int = -1) -> None:
        nonlocal seq
        heapq.heappush(ev, (t, order, seq, kind, wid))
        seq += 1

    n = horizon_us // gap_us
    for i in range(n):
        push(i * gap_us, 2, "arrive", i)
    push(period_us, 2, "wb_want", -1)
    readers = 0
    writer = False
    queue: deque[tuple[str, int, int]] = deque()   # (who, write id, since)
    wb_waits: list[int] = []
    read_waits = [0] * n
    done = 0

    def grant_read(t: int, wid: int) -> None:
        nonlocal readers
        readers += 1
        sleep = sleep_us if sleep_every and (wid + 1) % sleep_every == 0 else 0
        push(t + sleep + io_us, 0, "complete", wid)

    def grant_write(t: int, since: int) -> None:
        nonlocal writer
        writer = True
        wb_waits.append(t - since)
        push(t + hold_us, 0, "wb_release", -1)

    def wake(t: int) -> None:
        # the queue's head decides: a writer gets the lock alone once no reader holds it; else every reader
        # queued up to the next writer is granted (rwsem_mark_wake)
        while queue and not writer:
            who, wid, since = queue[0]
            if who == "w":
                if readers:
                    return
                queue.popleft()
                grant_write(t, since)
                return
            queue.popleft()
            read_waits[wid] = t - since
            grant_read(t, wid)

    while ev:
        t, _, _, kind, wid = heapq.heappop(ev)
        if kind == "arrive":
            if writer or queue:
                queue.append(("r", wid, t))
            else:
                grant_read(t, wid)
        elif kind == "complete":
            readers -= 1
            done += 1
            wake(t)
        elif kind == "wb_want":
            if t >= horizon_us:
                continue
            if not writer and not readers and not queue:
                grant_write(t, t)
            else:
                queue.append(("w", -1, t))
        elif kind == "wb_release":
            writer = False
            wake(t)
            push(t + period_us, 2, "wb_want", -1)
    assert done == n and readers == 0 and not writer
    delayed = [w for w in read_waits if w > 0]
    return {
        "writes": n, "writeback_passes": len(wb_waits),
        "writeback_wait_us": sum(wb_waits), "writeback_wait_max_us": max(wb_waits, default=0),
        "writes_delayed": len(delayed), "write_delay_us": sum(delayed), "write_delay_max_us": max(delayed, default=0),
    }


def convoy(*, sleep_us: int = 1000, sleep_every: int = 1000, gap_us: int = 100, io_us: int = 200,
           hold_us: int = 1000, period_us: int = 10_000, horizon_us: int = 1_000_000) -> dict[str, Any]:
    """The same arrivals and writeback schedule with sleeping starts and without.

    :param sleep_us: how long a sleeping start sleeps, in [1, 10**8] µs (1,000: about one write's completion, an
        overflow wait; 5,000,000: one ``mempool_alloc`` round of ``io_schedule_timeout(5 * HZ)`` that no freed
        element ends). Default 1,000.
    :param sleep_every: every this-many-th write's start sleeps, in [1, 10**6]. Default 1,000.
    :param gap_us: time between two writes' arrivals, in [1, 10**6]. Default 100 (10,000 writes/s).
    :param io_us: a write's time from its start to its completion, in [1, 10**7]. Default 200.
    :param hold_us: the writeback thread's time under the write side (``refill_dirty``), in [1, 10**7]. Default 1,000.
    :param period_us: its time between releasing the write side and asking again (``read_dirty``), in
        [1, 10**8]. Default 10,000.
    :param horizon_us: writes arrive for this long, in [gap_us, 10**9]. Default 1 s.
    :returns: ``{"config", "sleeping", "baseline"`` (the two runs' figures: writeback passes, its total and
        largest wait for the write side, writes that waited for the read side, their total and largest wait),
        ``"writeback_wait_ratio", "writes_delayed_ratio", "write_delay_ratio"}`` (sleeping / baseline; None when
        the baseline's figure is 0).
    """
    cfg = {"sleep_us": check_int(sleep_us, "sleep_us", 1, 10 ** 8),
           "sleep_every": check_int(sleep_every, "sleep_every", 1, 10 ** 6),
           "gap_us": check_int(gap_us, "gap_us", 1, 10 ** 6), "io_us": check_int(io_us, "io_us", 1, 10 ** 7),
           "hold_us": check_int(hold_us, "hold_us", 1, 10 ** 7),
           "period_us": check_int(period_us, "period_us", 1, 10 ** 8)}
    cfg["horizon_us"] = check_int(horizon_us, "horizon_us", cfg["gap_us"], 10 ** 9)
    if cfg["horizon_us"] // cfg["gap_us"] > 5_000_000:
        raise ValueError(f"horizon_us / gap_us must be at most 5,000,000 writes, got "
                         f"{cfg['horizon_us'] // cfg['gap_us']:,}")
    base = {k: v for k, v in cfg.items() if k != "sleep_us"}
    sleeping = simulate(**base, sleep_us=cfg["sleep_us"])
    baseline = simulate(**base, sleep_us=0)

    def ratio(key: str) -> float | None:
        return sleeping[key] / baseline[key] if baseline[key] else None

    return {"config": cfg, "sleeping": sleeping, "baseline": baseline,
            "writeback_wait_ratio": ratio("writeback_wait_us"), "writes_delayed_ratio": ratio("writes_delayed"),
            "write_delay_ratio": ratio("write_delay_us")}


def main(argv: list[str] | None = None) -> int:
    """The command line; a bad value exits 2 with one line naming it (no traceback)."""
    try:
        return _main(argv)
    except (ValueError, TypeError) as exc:
        print(f"python -m pybcache.bcache.experiments.convoy: error: {exc}", file=sys.stderr)
        return 2


def _main(argv: list[str] | None) -> int:
    summary = " ".join((__doc__ or "").split("\n\n")[0].split())
    ap = argparse.ArgumentParser(prog="python -m pybcache.bcache.experiments.convoy", description=summary)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rows = [convoy(sleep_us=s, sleep_every=e, horizon_us=h)
            for s, e, h in ((1000, 1000, 1_000_000), (1000, 100, 1_000_000), (5_000_000, 100_000, 20_000_000))]
    if args.json:
        print(json.dumps({"rows": rows}, indent=1))
        return 0

    def fmt(x: Any) -> str:
        return "-" if x is None else f"{x:.1f}" if isinstance(x, float) else f"{x:,}"

    print("| sleep µs | every | writeback wait µs (sleeping / baseline) | ratio | max wait µs | writes delayed "
          "(sleeping / baseline) | ratio | total write delay µs | ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        s, b, c = r["sleeping"], r["baseline"], r["config"]
        print(f"| {fmt(c['sleep_us'])} | {fmt(c['sleep_every'])} | {fmt(s['writeback_wait_us'])} / "
              f"{fmt(b['writeback_wait_us'])} | {fmt(r['writeback_wait_ratio'])} | {fmt(s['writeback_wait_max_us'])} / "
              f"{fmt(b['writeback_wait_max_us'])} | {fmt(s['writes_delayed'])} / {fmt(b['writes_delayed'])} | "
              f"{fmt(r['writes_delayed_ratio'])} | {fmt(s['write_delay_us'])} / {fmt(b['write_delay_us'])} | "
              f"{fmt(r['write_delay_ratio'])} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
