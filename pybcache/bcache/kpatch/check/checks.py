"""The checks that drive the patch with threads and the lab's models (overflow, balance, context, memory,
explore, race), the table of every check, and the child process's entry point: one check per child."""
from __future__ import annotations

import json
import random
import sys
import threading
import time
import traceback
from typing import Any, Callable

from ....units import GiB, TiB
from .context import (CHUNK, CONTEXT_KINDS, EXPLORE_BUDGET_S, EXPLORE_SCENARIOS, FAIL_ALLOC_TEXT, HUNG_TIMEOUT,
                      MEMORY_SIZES, OVERFLOW_PAST, OVERFLOW_WAIT_S, OVERFLOW_WRITES,
                      RACE_FAULT_PROBABILITIES, SEMANTICS_DEVICE, STRESS_DEVICE,
                      _consumed_end_bio_leaks, _Context, _Heartbeat, _Stop, _Traced, _fmt_ends)
from .semantics import _check_semantics


# == overflow =======================================================================================

def _overflow_run(ctx: _Context, t: _Traced, writes: int, judge: bool = True) -> dict[str, Any]:
    """A submitter starts ``writes`` writes on chunk 0 while a completion thread ends them. The
    completer holds back until 65,535 are in flight and the submitter is blocked in a start (or done),
    so that the counter's maximum is reached whatever the scheduling; after every start and every end
    that leaves writes in flight, a read of chunk 0 must bypass. A patch that waits at a lower maximum
    is found so: the submitter stays blocked in one start for :data:`OVERFLOW_WAIT_S` with fewer in
    flight; that number becomes the level at which the completer ends writes (``state["level"]``), one
    write each time the submitter is blocked again. The time is only a hint (a submitter descheduled for
    that long looks the same), so the level is checked by what follows: a start that returns with more
    than ``level + 1`` in flight (the one is an end the completer made but has not counted yet) proves
    the patch does not wait there, and the level is retracted (``state["retracted"]``) - the run goes on
    towards the u16 maximum as if it had never been taken - and no level is taken below the highest
    number in flight seen so far less one (``state["peak"]``). Raises :class:`_Stop` on a lost count."""
    one = (0, 4096)
    state: dict[str, Any] = {"started": 0, "ended": 0, "in_start_since": 0.0, "done": False, "error": None,
                             "lost": None, "level": None, "retracted": 0, "peak": 0}
    lock = threading.Lock()
    full = (1 << 16) - 1
    bound = time.monotonic() + HUNG_TIMEOUT * 4 + 60

    def submitter() -> None:
        try:
            for _ in range(writes):
                level = state["level"]
                if level is not None and state["started"] >= level + OVERFLOW_PAST:
                    break                   # a lower maximum, passed as often as the u16 one would be
                state["in_start_since"] = time.monotonic()
                t.start(*one)
                state["in_start_since"] = 0.0
                with lock:
                    state["started"] += 1
                    s, e = state["started"], state["ended"]
                    state["peak"] = max(state["peak"], s - e)
                    if state["level"] is not None and s - e > state["level"] + 1:
                        state["level"] = None           # it did not wait there: not its maximum
                        state["retracted"] += 1
                if state["lost"] is None and not t.is_active(*one):
                    state["lost"] = (s, e, "after a start")
        except BaseException as exc:   # noqa: BLE001 - reported by the caller
            state["error"] = exc
        finally:
            state["done"] = True

    def completer() -> None:
        try:
            while state["ended"] < writes and time.monotonic() < bound:
                since = state["in_start_since"]
                blocked_for = time.monotonic() - since if since else 0.0
                with lock:
                    inflight = state["started"] - state["ended"]
                    level = state["level"]
                    if (level is None and inflight and blocked_for > OVERFLOW_WAIT_S
                            and inflight + 1 >= state["peak"]):
                        level = state["level"] = inflight   # the patch seems to wait at this maximum
                if level is not None:
                    # keep it there: one end each time the submitter is blocked at it again
                    ready = inflight >= level and blocked_for > 0.05
                else:
                    ready = inflight >= full and blocked_for > 0.05
                if inflight and (state["done"] or ready):
                    t.end(*one)
                    with lock:
                        state["ended"] += 1
                        s, e = state["started"], state["ended"]
                    if s > e and state["lost"] is None and not t.is_active(*one):
                        state["lost"] = (s, e, "after an end")
                elif state["done"] and not inflight:
                    return
                else:
                    time.sleep(0.002)
        except BaseException as exc:   # noqa: BLE001
            state["error"] = state["error"] or exc

    threads = [threading.Thread(target=submitter, name="submitter"),
               threading.Thread(target=completer, name="completion")]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if state["error"] is not None:
        raise state["error"]
    if state["lost"] is not None and judge:
        s, e, when = state["lost"]
        inflight = s - e
        u16 = " = 2^16: a u16 counter wrapped there (u16 overflow)" if inflight % (1 << 16) == 0 else ""
        raise _Stop(f"a count was lost at the counter maximum: {inflight:,} writes in flight on chunk 0 and "
                    f"a read of chunk 0 does not bypass",
                    [f"{s:,} writes start on chunk 0 [0, 4096) (submitter thread)",
                     f"{e:,} of them end (completion thread)",
                     f"read [0, 4096) (chunk 0) {when}: does NOT bypass with {inflight:,} writes in flight"
                     f"{u16}"], "count lost")
    return state


def _check_overflow(ctx: _Context) -> tuple[str, str, dict]:
    t = ctx.tracker(SEMANTICS_DEVICE)
    st = _overflow_run(ctx, t, OVERFLOW_WRITES)
    expected = OVERFLOW_WRITES if st["level"] is None else st["level"] + OVERFLOW_PAST
    if st["ended"] != expected or st["started"] != expected:
        raise _Stop(f"{st['started']:,} writes started and the completion thread ended {st['ended']:,} of "
                    f"them within the bound ({expected:,} expected)", None, "incomplete")
    if t.is_active(0, 4096):
        raise _Stop(f"every one of the {expected:,} writes ended and chunk 0 is still active: an end "
                    f"was lost", [f"{OVERFLOW_WRITES:,} writes start and end on chunk 0 [0, 4096)",
                                  "read [0, 4096) (chunk 0): still bypasses (a count leaked)"], "count leaked")
    s = t.stats()
    if s["starts"] != s["ends"]:
        raise _Stop(f"the shim saw {s['starts']:,} starts and {s['ends']:,} ends", None, "unbalanced")
    paths = _paths(s["waits"], s["mempool_waits"], s["reserve_taken"])
    if st["level"] is not None:
        return (f"waits at {st['level']:,} in flight, 0 lost",
                f"{expected:,} writes on chunk 0; the patch's start waited with {st['level']:,} in flight (its "
                f"counter maximum, below 65,535) and ends on a completion thread let it go on, "
                f"{OVERFLOW_PAST} past it: every read during them bypassed, none afterwards; {paths}; nothing "
                f"hung (hung bound {HUNG_TIMEOUT:g} s)", {})
    return (f"{OVERFLOW_WRITES:,} in flight, 0 lost",
            f"{OVERFLOW_WRITES:,} writes on chunk 0 ({OVERFLOW_WRITES - (1 << 16) + 1} past 65,535), ends on a "
            f"completion thread: every read during them bypassed, none afterwards; {paths}; nothing hung "
            f"(hung bound {HUNG_TIMEOUT:g} s)", {})


# == balance ========================================================================================

#: Completion threads of the stress, and the delay of a write's end after its start returned: drawn per
#: write in [COMPLETION_DELAY_S / 2, 3 * COMPLETION_DELAY_S / 2) (so ends come in random order).
COMPLETERS = 2
COMPLETION_DELAY_S = 0.001
#: Writes the stress keeps in flight at most: a submitter waits for ends beyond that (the ends come on
#: their own schedule, so that wait always ends).
STRESS_MAX_INFLIGHT = 4096


def _stress(ctx: _Context, t: _Traced, seconds: float, seed: int, submitters: int = 3) -> dict[str, int]:
    """``submitters`` threads start writes of random ranges (small ones near boundaries, multi-chunk,
    page-crossing, up to the device end); :data:`COMPLETERS` completion threads end each write about
    :data:`COMPLETION_DELAY_S` after its start returned, in random order, whatever the submitters do: as
    bios complete by themselves, so a submitter asleep in a patch's wait (its reserve empty, a counter at
    its maximum) is woken by the ends of the writes in flight, never held up by its own. For
    ``seconds``, then everything drains."""
    import heapq
    device = STRESS_DEVICE
    stop = time.monotonic() + seconds
    # the writes in flight, by due time: (due, sequence, off, len), under `cond`
    pending: list[tuple[float, int, int, int]] = []
    cond = threading.Condition()
    state = {"seq": 0, "open": submitters, "peak": 0}
    # one count per submitter (each written by its own thread only), summed after the join
    writes, reads = [0] * submitters, [0] * submitters
    errors: list[BaseException] = []
    barrier = threading.Barrier(submitters + COMPLETERS)

    def submit(k: int) -> None:
        rng = random.Random(seed * 31 + k)
        barrier.wait()
        try:
            while time.monotonic() < stop and not errors:
                for _ in range(64):
                    off, ln = _semantics_ops_range(rng, device)
                    delay = COMPLETION_DELAY_S * (0.5 + rng.random())
                    t.start(off, ln)
                    with cond:
                        while len(pending) >= STRESS_MAX_INFLIGHT and not errors:
                            cond.wait(0.05)
                        if errors:
                            return
                        state["seq"] += 1
                        heapq.heappush(pending, (time.monotonic() + delay, state["seq"], off, ln))
                        state["peak"] = max(state["peak"], len(pending))
                        cond.notify()
                    writes[k] += 1
                    t.is_active(*_semantics_ops_range(rng, device))
                    reads[k] += 1
        except BaseException as e:   # noqa: BLE001
            errors.append(e)
        finally:
            with cond:
                state["open"] -= 1
                cond.notify_all()

    def complete() -> None:
        barrier.wait()
        try:
            while True:
                with cond:
                    while True:
                        if errors:
                            return
                        now = time.monotonic()
                        if pending and pending[0][0] <= now:
                            _, _, off, ln = heapq.heappop(pending)
                            cond.notify_all()          # a submitter waiting for room
                            break
                        if not pending and not state["open"]:
                            return
                        cond.wait(min(0.05, pending[0][0] - now) if pending else 0.05)
                t.end(off, ln)
        except BaseException as e:   # noqa: BLE001
            errors.append(e)
            with cond:
                cond.notify_all()

    ths = [threading.Thread(target=submit, args=(k,), name=f"submitter-{k}") for k in range(submitters)]
    ths += [threading.Thread(target=complete, name=f"completion-{k}") for k in range(COMPLETERS)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    if errors:
        raise errors[0]
    st = t.stats()
    return {"writes": sum(writes), "reads": sum(reads), "waits": st["waits"], "peak_inflight": state["peak"],
            "reserve": st["reserve_taken"], "mempool_waits": st["mempool_waits"]}


def _paths(waits: int, mempool_waits: int, reserve: int) -> str:
    """The wait and reserve paths a run took, for a check's details."""
    return (f"{waits:,} waits taken in wait_event and {mempool_waits:,} in mempool_alloc, {reserve:,} mempool "
            f"reserve elements used")


def _semantics_ops_range(rng: random.Random, device: int) -> tuple[int, int]:
    """One range of the kinds :func:`_semantics_ops` draws (boundaries, multi-chunk, device end)."""
    b = rng.choice((0, CHUNK, rng.randrange(0, device // (32 * GiB) + 1) * 32 * GiB, device - 1))
    form = rng.randrange(4)
    if form == 0:
        off, ln = b + rng.randrange(-8, 8) * 4096, rng.choice((4096, 128 * 1024))
    elif form == 1:
        off, ln = b - rng.randrange(0, 2 * CHUNK), rng.randrange(1, 3 * CHUNK)
    elif form == 2:
        off, ln = b - CHUNK, CHUNK
    else:
        off, ln = device - rng.randrange(1, 2 * CHUNK), 2 * CHUNK
    off = max(0, min(off, device - 1))
    return off, max(1, min(ln, device - off))


def _sweep(t: _Traced, device: int) -> list[int]:
    """Chunks of the device where a read bypasses (there should be none at quiescence)."""
    return [c for c in range((device + CHUNK - 1) // CHUNK)
            if t.is_active(c * CHUNK, min(CHUNK, device - c * CHUNK))]


def _check_balance(ctx: _Context) -> tuple[str, str, dict]:
    from .... import FaultInjection
    fault = FaultInjection(probability=0.1, seed=7)
    t = ctx.tracker(STRESS_DEVICE, fault=fault)
    idle = t.memory()["total_bytes"]
    try:
        counts = _stress(ctx, t, ctx.seconds, seed=1)
    except TimeoutError as e:
        # counts that never drop also fill counters up to a patch's maximum, where its starts wait for ever
        consumed = _consumed_end_bio_leaks(ctx)
        if consumed is None:
            raise
        raise _Stop(f"a start hung ({e}), because write_end reads the write's range from the bio it is handed, "
                    f"which at bcache's completion has 0 sectors left: no count ever drops",
                    consumed, "end saw 0 sectors") from None
    t.rcu_barrier()
    active = _sweep(t, STRESS_DEVICE)
    mem = t.memory()
    if active:
        shown = ", ".join(str(c) for c in active[:8]) + (" ..." if len(active) > 8 else "")
        consumed = _consumed_end_bio_leaks(ctx)
        if consumed is not None:
            raise _Stop(f"at quiescence {len(active)} chunk(s) still make reads bypass: counts leaked, because "
                        f"write_end reads the write's range from the bio it is handed, which at bcache's "
                        f"completion has 0 sectors left", consumed + [
                            f"(the stress: {counts['writes']:,} writes started and ended; read sweep at "
                            f"quiescence: chunks {shown} bypass)"], "end saw 0 sectors")
        raise _Stop(f"at quiescence {len(active)} chunk(s) still make reads bypass: counts leaked",
                    [f"{counts['writes']:,} writes started and ended by 3 submitters and {COMPLETERS} completion "
                     f"threads (allocation failures p = 0.1, {fault.injected:,} injected: "
                     f"{FAIL_ALLOC_TEXT[ctx.fail_alloc]})",
                     f"read sweep at quiescence: chunks {shown} bypass"], f"{len(active)} chunks leaked")
    if mem["total_bytes"] != idle:
        raise _Stop(f"at quiescence the patch holds {mem['total_bytes']:,} B, not its idle {idle:,} B "
                    f"({mem['pages']} allocation(s) of operations still live)",
                    [f"{counts['writes']:,} writes started and ended, rcu_barrier() done",
                     f"memory: {mem['total_bytes']:,} B held, idle was {idle:,} B"], "memory not back")
    s = t.stats()
    return (f"{counts['writes']:,} writes, 0 leaked",
            f"{counts['writes']:,} writes and {counts['reads']:,} reads from 3 submitters, {_ENDS_TEXT}, "
            f"{ctx.seconds:g} s, allocation failures p = 0.1 ({fault.injected:,} injected: "
            f"{FAIL_ALLOC_TEXT[ctx.fail_alloc]}), "
            f"{_paths(counts['waits'], counts['mempool_waits'], counts['reserve'])}, "
            f"write_end handed the {_end_bio_text(ctx)}: at "
            f"quiescence no chunk of {(STRESS_DEVICE + CHUNK - 1) // CHUNK:,} bypasses and memory is back to "
            f"{idle:,} B (peak {mem['peak_bytes']:,} B, {s['allocations']:,} allocations)", {})


#: How the stress ends its writes, for the details.
_ENDS_TEXT = (f"ends on {COMPLETERS} completion threads about {COMPLETION_DELAY_S * 1000:g} ms after each start, "
              f"whatever the submitters do")


def _end_bio_text(ctx: _Context) -> str:
    if ctx.end_bio == "intact":
        return "bio intact (--end-bio intact)"
    return "bio as cached_dev_write_complete sees it (bi_size 0)"


# == context ========================================================================================

#: Writes the context check runs with write_end pinned to each context in turn.
CONTEXT_PHASE_WRITES = 256


def _context_phases(ctx: _Context, fault: Any) -> None:
    """For each context write_end can run in (:data:`END_CONTEXTS`), a tracker of its own: a submitter
    starts :data:`CONTEXT_PHASE_WRITES` writes (reads between them) and their ends run in that context, on
    a completion thread, or on the submitter itself right after its start for ``inline`` (the closure's
    last reference dropped in the submission path). Ends complete in random order, a few in flight; a write held
    back is ended once the submitter has queued nothing for :data:`COMPLETION_DELAY_S` (it may be asleep in the
    patch's wait for that end), so a tracker that waits for its reserve is not held up by its own writes."""
    import queue
    from .._kpatch import END_CONTEXTS
    for k, where in enumerate(END_CONTEXTS):
        t = ctx.tracker(STRESS_DEVICE, fault=fault)
        rng = random.Random(100 + k)
        if where == "inline":
            for _ in range(CONTEXT_PHASE_WRITES):
                off, ln = _semantics_ops_range(rng, STRESS_DEVICE)
                t.start(off, ln)
                t.is_active(*_semantics_ops_range(rng, STRESS_DEVICE))
                t.end(off, ln, context="inline")
            continue
        q: "queue.Queue[tuple[int, int] | None]" = queue.Queue()
        errors: list[BaseException] = []

        def complete(where: str = where, q: Any = q, errors: list[BaseException] = errors) -> None:
            crng = random.Random(7)
            held: list[tuple[int, int]] = []
            try:
                while True:
                    try:
                        # a write held back is ended once no new one came for COMPLETION_DELAY_S: the
                        # submitter may be asleep in the patch waiting for exactly these ends
                        item = q.get(timeout=COMPLETION_DELAY_S) if held else q.get()
                    except queue.Empty:
                        t.end(*held.pop(crng.randrange(len(held))), context=where)
                        continue
                    if item is None:
                        break
                    held.append(item)
                    while len(held) > 4 or (held and crng.random() < 0.5):
                        t.end(*held.pop(crng.randrange(len(held))), context=where)
                for item in held:
                    t.end(*item, context=where)
            except BaseException as e:   # noqa: BLE001
                errors.append(e)

        th = threading.Thread(target=complete, name=f"completion-{where}")
        th.start()
        try:
            for _ in range(CONTEXT_PHASE_WRITES):
                if errors:
                    break
                off, ln = _semantics_ops_range(rng, STRESS_DEVICE)
                t.start(off, ln)
                q.put((off, ln))
                t.is_active(*_semantics_ops_range(rng, STRESS_DEVICE))
        finally:
            q.put(None)
            th.join()
        if errors:
            raise errors[0]


def _ends_by_context(ctx: _Context) -> str:
    from .._kpatch import END_CONTEXTS
    total = dict.fromkeys(END_CONTEXTS, 0)
    for t in ctx.trackers:
        if not t.closed:
            for c, n in t.stats()["ends_in"].items():
                total[c] += n
    return _fmt_ends(total)


def _check_context(ctx: _Context) -> tuple[str, str, dict]:
    from .... import FaultInjection
    fault = FaultInjection(probability=0.3, seed=3)
    t = ctx.tracker(STRESS_DEVICE, fault=fault)
    counts = _stress(ctx, t, min(1.0, ctx.seconds), seed=2)
    # every end context in turn, each on a tracker of its own
    _context_phases(ctx, fault)
    # the overflow path too (a wait at the counter maximum), on a tracker of its own
    t2 = ctx.tracker(SEMANTICS_DEVICE)
    _overflow_run(ctx, t2, (1 << 16) + 2, judge=False)     # lost counts are overflow's verdict
    ends = _ends_by_context(ctx)
    reports = [r for r in ctx.reports() if r["kind"] in CONTEXT_KINDS]
    if reports:
        kinds = sorted({r["kind"] for r in reports})
        raise _Stop(f"{len(reports)} context report(s): {', '.join(kinds)} (write_end ran {ends})",
                    [f"{r['message']} (in {r['operation']}, {r['count']}x)" for r in reports],
                    ", ".join(kinds))
    return ("0 reports", f"{counts['writes']:,} writes with allocation failures at p = 0.3 "
            f"({fault.injected:,} injected; {FAIL_ALLOC_TEXT[ctx.fail_alloc]}), "
            f"{_paths(counts['waits'], counts['mempool_waits'], counts['reserve'])}, "
            f"ends on {COMPLETERS} completion threads about {COMPLETION_DELAY_S * 1000:g} ms after each start "
            f"(write_end's context rotating over hard-irq, soft-irq and a worker), "
            f"{CONTEXT_PHASE_WRITES} writes with write_end pinned to each context, and 65,538 writes on one "
            f"chunk through its maximum; write_end ran {ends}: no might-sleep, lockdep, RCU, gfp or unlock "
            f"report", {})


# == memory =========================================================================================

def _check_memory(ctx: _Context) -> tuple[str, str, dict]:
    from ....units import format_bytes
    from ...experiments.memory import POSTED_TABLE
    rows = []
    for size in MEMORY_SIZES:
        t = ctx.tracker(size)
        idle = t.memory()["total_bytes"]
        t.start(0, size)                  # one write over the whole device: every page allocated
        peak = t.memory()["peak_bytes"]
        t.end(0, size)
        t.rcu_barrier()
        label = f"{size // TiB}T"
        posted = POSTED_TABLE.get(label, {})
        rows.append({"size_bytes": size, "idle_bytes": idle, "peak_bytes": peak,
                     "posted": {v: list(posted[v]) for v in posted}})
        t.close()
        ctx.trackers.remove(t)
    figure = ", ".join(f"{r['size_bytes'] // TiB}T {format_bytes(r['idle_bytes'])} / "
                       f"{format_bytes(r['peak_bytes'])}" for r in rows)
    return (figure, "idle / peak bytes the patch allocated (init; one write over the whole device), beside "
            "the v2 cover letter's page-lock and atomic figures", {"rows": rows})


# == explore and race (through the driver vtable) ===================================================

def _check_explore(ctx: _Context) -> tuple[str, str, dict]:
    """Every interleaving of the standard scenarios, with an allocation failure injected at each
    allocation in turn (fault_at = 1, 2, ... until a run injects nothing). Fails as incomplete if that
    takes more than :data:`EXPLORE_BUDGET_S`, rather than claim every k."""
    from ...cachedev import explore, render_step
    ends0 = ctx.patch._module.end_counts()
    schedules = runs = 0
    deadline = time.monotonic() + EXPLORE_BUDGET_S
    for w, r in EXPLORE_SCENARIOS:
        k = 0
        while True:
            if time.monotonic() > deadline:
                raise _Stop(f"the fault_at sweep was not finished within {EXPLORE_BUDGET_S:g} s: scenario "
                            f"{w}w{r}r still injects at fault_at={k - 1} ({runs} explorations, {schedules:,} "
                            f"schedules, 0 violations so far); allocations past it were never failed",
                            None, "incomplete")
            res = explore(sync=ctx.patch, writes=w, reads=r, fault_at=k, fail_alloc=ctx.fail_alloc)
            schedules += res["schedules"]
            runs += 1
            if res["violations"]:
                cfg = res["config"]
                steps = [render_step(x, check=cfg["check"], granularity=cfg["granularity"],
                                     chunk_size=cfg["chunk_size"], max_restarts=cfg["max_restarts"])
                         for x in res["counterexample_steps"]]
                raise _Stop(f"{res['violations']:,} of {res['schedules']:,} schedules of {w}w{r}r with "
                            f"fault_at={k} violate the oracle", steps, f"{res['violations']:,} violations")
            if res.get("report_schedules"):
                # docs/design.md (check-patch): a WARN_ON fails the check that ran it. The explorer counts
                # schedules with a report but not their kinds, so any report fails explore (a context report fails
                # context as well).
                raise _Stop(f"{res['report_schedules']:,} of {res['schedules']:,} schedules of {w}w{r}r with "
                            f"fault_at={k} made a kernel report (a WARN_ON or a context report: the explorer "
                            f"does not tell which)", None, "kernel report")
            if k > 0 and not res["faults_injected"]:
                break
            k += 1
    ends = {c: n - ends0[c] for c, n in ctx.patch._module.end_counts().items()}
    # -- the patch's own steps (issue 26; pybcache/bcache/kpatch/check/patch_level.py) --
    from .patch_level import check_patch_level
    figure, detail, extra = check_patch_level(ctx.path, fail_alloc=ctx.fail_alloc, end_bio=ctx.end_bio)
    return (f"{schedules:,} schedules + {figure}, 0 violations",
            f"call-level: scenarios {', '.join(f'{w}w{r}r' for w, r in EXPLORE_SCENARIOS)}, each with no fault and "
            f"with the k-th allocation failing for every k that injects ({runs} explorations; "
            f"{FAIL_ALLOC_TEXT[ctx.fail_alloc]}), write_end ran {_fmt_ends(ends)}, no kernel report; " + detail, extra)


def _check_race(ctx: _Context) -> tuple[str, str, dict]:
    """Native reader and writer threads on the cached-device model, allocation faults at p = 0 and 0.3."""
    from ...cachedev import race
    parts = []
    context_seen: set[str] = set()
    for p in RACE_FAULT_PROBABILITIES:
        res = race(sync=ctx.patch, threads=4, seconds=ctx.seconds, fault_probability=p,
                   seed=1, fail_alloc=ctx.fail_alloc)
        parts.append(res)
        if res["stale_reads"] or res["stale_cached_blocks"]:
            raise _Stop(f"fault probability {p}: {res['stale_reads']:,} stale reads, "
                        f"{res['stale_cached_blocks']:,} stale cached blocks in {res['ops']:,} operations",
                        None, f"{res['stale_reads']:,} stale reads")
        reports = res.get("kernel_reports") or {}
        # docs/design.md, "check-patch": a WARN_ON (or a hang's report) fails the check that ran it; context reports are
        # context's verdict, shown here only
        failing = {k: n for k, n in reports.items() if k not in CONTEXT_KINDS}
        if failing:
            kinds = ", ".join(f"{k} {n:,}x" for k, n in sorted(failing.items()))
            raise _Stop(f"fault probability {p}: the patch made kernel reports in {res['ops']:,} operations: "
                        f"{kinds}", None, "WARN_ON" if "warning" in failing else ", ".join(sorted(failing)))
        context_seen.update(k for k in reports if k in CONTEXT_KINDS)
    ops = sum(x["ops"] for x in parts)
    return (f"{ops:,} ops, 0 stale", "; ".join(
        f"p = {p}: {x['reads']:,} reads ({x['read_bypasses']:,} bypassed), {x['writes']:,} writes, 0 stale "
        f"reads, 0 stale cached blocks, no WARN_ON" for p, x in zip(RACE_FAULT_PROBABILITIES, parts))
        + f"; allocation failures: {FAIL_ALLOC_TEXT[ctx.fail_alloc]}"
        + (f" (also reported, judged by context: {', '.join(sorted(context_seen))})" if context_seen else ""), {})


_CHECK_FUNCTIONS: dict[str, Callable[[_Context], tuple[str, str, dict]]] = {
    "semantics": _check_semantics, "explore": _check_explore, "race": _check_race,
    "overflow": _check_overflow, "balance": _check_balance, "context": _check_context,
    "memory": _check_memory,
}


def _child_main(argv: list[str]) -> int:
    check, path, library, seconds, heartbeat_path, *rest = argv
    end_bio = rest[0] if rest else "consumed"
    hb = _Heartbeat(heartbeat_path)
    try:
        try:
            ctx = _Context(path, library, float(seconds), hb, end_bio)
        except ValueError as e:
            print(json.dumps({"passed": False, "figure": "", "detail": str(e), "extra": {"load_error": str(e)}}))
            return 0
        out = _run_check(check, ctx)
        out.setdefault("extra", {})["name"] = ctx.patch.name
        sys.stdout.flush()
        print(json.dumps(out))
        return 0
    finally:
        sys.stdout.flush()


def _run_check(check: str, ctx: _Context) -> dict[str, Any]:
    fn = _CHECK_FUNCTIONS[check]
    extra: dict[str, Any] = {}
    try:
        figure, detail, extra = fn(ctx)
        passed, counterexample = True, None
    except _Stop as s:
        passed, figure, detail, counterexample = False, s.figure, f"FAILED: {s.detail}", s.counterexample
    except NotImplementedError as e:
        passed, figure, detail, counterexample = False, "-", f"FAILED: {e}", None
    except TimeoutError as e:
        where = _where(ctx)
        passed, figure, detail, counterexample = False, "hung", f"FAILED: hung in {where}: {e}", None
    except RuntimeError as e:
        passed, figure, detail, counterexample = False, "broken", f"FAILED: {e}", None
    except Exception as e:  # an error of the check itself: say so rather than pass
        tb = traceback.format_exception(type(e), e, e.__traceback__)
        passed, figure, detail, counterexample = (False, "error", f"FAILED: internal error of the check: "
                                                  f"{type(e).__name__}: {e}", [x.rstrip() for x in tb[-3:]])
    reports = []
    try:
        reports = ctx.reports()
    except RuntimeError:
        pass
    warnings = [r for r in reports if r["kind"] == "warning"]
    if passed and warnings:
        passed, figure = False, "WARN_ON"
        detail = f"FAILED: WARN_ON fired ({len(warnings)} site(s))"
        counterexample = [r["message"] for r in warnings]
    elif reports and check != "context":
        others = sorted({r["kind"] for r in reports if r["kind"] != "warning"})
        if others:
            detail += f" (also reported, judged by context: {', '.join(others)})"
    out: dict[str, Any] = {"passed": passed, "figure": figure, "detail": detail, "counterexample": counterexample,
                           "extra": extra}
    if not passed:
        try:
            out["log"] = _log_lines(ctx.logs(), ctx.log_dropped[0])
        except RuntimeError:
            pass
    return out


#: The patch's printk lines a failed check keeps (the first ones; the count of the others is said).
LOG_LINES = 20
_LEVELS = {0: "emerg", 1: "alert", 2: "crit", 3: "err", 4: "warn", 5: "notice", 6: "info", 7: "debug"}


def _log_lines(records: list[dict[str, Any]], dropped: int = 0) -> list[str]:
    """The patch's pr_* output, as ``info reserve_wait.c:12: message``: the first :data:`LOG_LINES`, then how
    many more there were."""
    import os
    lines = []
    for r in records[:LOG_LINES]:
        where = f"{os.path.basename(r['file'])}:{r['line']}" if r.get("file") else "?"
        suppressed = f" ({r['suppressed']} suppressed before)" if r.get("suppressed") else ""
        lines.append(f"{_LEVELS.get(r['level'], r['level'])} {where}: {r['message']}{suppressed}")
    more = max(0, len(records) - LOG_LINES) + dropped
    if more:
        lines.append(f"... and {more:,} more line(s)")
    return lines


def _where(ctx: _Context) -> str:
    return ctx.heartbeat.where()
