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
from .context import (CHUNK, CONTEXT_KINDS, EXPLORE_BUDGET_S, EXPLORE_SCENARIOS, HUNG_TIMEOUT, MEMORY_SIZES,
                      OVERFLOW_PAST, OVERFLOW_WAIT_S, OVERFLOW_WRITES,
                      RACE_FAULT_PROBABILITIES, SEMANTICS_DEVICE, STRESS_DEVICE, _Context,
                      _Heartbeat, _Stop, _Traced)
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
    if st["level"] is not None:
        return (f"waits at {st['level']:,} in flight, 0 lost",
                f"{expected:,} writes on chunk 0; the patch's start waited with {st['level']:,} in flight (its "
                f"counter maximum, below 65,535) and ends on a completion thread let it go on, "
                f"{OVERFLOW_PAST} past it: every read during them bypassed, none afterwards; nothing hung "
                f"(hung bound {HUNG_TIMEOUT:g} s)", {})
    return (f"{OVERFLOW_WRITES:,} in flight, 0 lost",
            f"{OVERFLOW_WRITES:,} writes on chunk 0 ({OVERFLOW_WRITES - (1 << 16) + 1} past 65,535), ends on a "
            f"completion thread: every read during them bypassed, none afterwards; nothing hung "
            f"(hung bound {HUNG_TIMEOUT:g} s)", {})


# == balance ========================================================================================

def _stress(ctx: _Context, t: _Traced, seconds: float, seed: int, submitters: int = 3) -> dict[str, int]:
    """``submitters`` threads start writes of random ranges (small ones near boundaries, multi-chunk,
    page-crossing, up to the device end) and hand them to a completion thread, which ends them in
    random order; for ``seconds``, then everything drains."""
    import queue
    device = STRESS_DEVICE
    inflight: "queue.Queue[tuple[int, int] | None]" = queue.Queue(maxsize=4096)
    stop = time.monotonic() + seconds
    # one count per submitter (each written by its own thread only), summed after the join
    writes, reads = [0] * submitters, [0] * submitters
    errors: list[BaseException] = []
    barrier = threading.Barrier(submitters + 1)

    def put(item: tuple[int, int] | None) -> bool:
        """Hand ``item`` to the completion thread; False (item dropped) once a thread has failed: a
        completion thread that died takes nothing more, and a put that waits for it must not block."""
        while not errors:
            try:
                inflight.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def submit(k: int) -> None:
        rng = random.Random(seed * 31 + k)
        barrier.wait()
        try:
            while time.monotonic() < stop and not errors:
                for _ in range(64):
                    off, ln = _semantics_ops_range(rng, device)
                    t.start(off, ln)
                    if not put((off, ln)):
                        return
                    writes[k] += 1
                    t.is_active(*_semantics_ops_range(rng, device))
                    reads[k] += 1
        except BaseException as e:   # noqa: BLE001
            errors.append(e)

    def complete() -> None:
        rng = random.Random(seed)
        held: list[tuple[int, int]] = []
        barrier.wait()
        done = 0
        try:
            while True:
                try:
                    item = inflight.get(timeout=0.05)
                except queue.Empty:
                    if errors:          # a submitter failed: its closing None may never come
                        return
                    continue
                if item is None:
                    done += 1
                    if done == submitters:
                        break
                    continue
                held.append(item)
                while len(held) > 8 or (held and rng.random() < 0.3):
                    t.end(*held.pop(rng.randrange(len(held))))
            for item in held:
                t.end(*item)
        except BaseException as e:   # noqa: BLE001
            errors.append(e)

    def submit_then_close(k: int) -> None:
        submit(k)
        put(None)

    ths = [threading.Thread(target=submit_then_close, args=(k,), name=f"submitter-{k}") for k in range(submitters)]
    ths.append(threading.Thread(target=complete, name="completion"))
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    if errors:
        raise errors[0]
    return {"writes": sum(writes), "reads": sum(reads)}


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
    counts = _stress(ctx, t, ctx.seconds, seed=1)
    t.rcu_barrier()
    active = _sweep(t, STRESS_DEVICE)
    mem = t.memory()
    if active:
        shown = ", ".join(str(c) for c in active[:8]) + (" ..." if len(active) > 8 else "")
        raise _Stop(f"at quiescence {len(active)} chunk(s) still make reads bypass: counts leaked",
                    [f"{counts['writes']:,} writes started and ended by 3 submitters and a completion thread "
                     f"(allocation failures p = 0.1, {fault.injected:,} injected)",
                     f"read sweep at quiescence: chunks {shown} bypass"], f"{len(active)} chunks leaked")
    if mem["total_bytes"] != idle:
        raise _Stop(f"at quiescence the patch holds {mem['total_bytes']:,} B, not its idle {idle:,} B "
                    f"({mem['pages']} allocation(s) of operations still live)",
                    [f"{counts['writes']:,} writes started and ended, rcu_barrier() done",
                     f"memory: {mem['total_bytes']:,} B held, idle was {idle:,} B"], "memory not back")
    s = t.stats()
    return (f"{counts['writes']:,} writes, 0 leaked",
            f"{counts['writes']:,} writes and {counts['reads']:,} reads from 3 submitters, ends on a completion "
            f"thread, {ctx.seconds:g} s, allocation failures p = 0.1 ({fault.injected:,} injected): at "
            f"quiescence no chunk of {(STRESS_DEVICE + CHUNK - 1) // CHUNK:,} bypasses and memory is back to "
            f"{idle:,} B (peak {mem['peak_bytes']:,} B, {s['allocations']:,} allocations)", {})


# == context ========================================================================================

def _check_context(ctx: _Context) -> tuple[str, str, dict]:
    from .... import FaultInjection
    fault = FaultInjection(probability=0.3, seed=3)
    t = ctx.tracker(STRESS_DEVICE, fault=fault)
    counts = _stress(ctx, t, min(1.0, ctx.seconds), seed=2)
    # the overflow path too (a wait at the counter maximum), on a tracker of its own
    t2 = ctx.tracker(SEMANTICS_DEVICE)
    _overflow_run(ctx, t2, (1 << 16) + 2, judge=False)     # lost counts are overflow's verdict
    reports = [r for r in ctx.reports() if r["kind"] in CONTEXT_KINDS]
    if reports:
        kinds = sorted({r["kind"] for r in reports})
        raise _Stop(f"{len(reports)} context report(s): {', '.join(kinds)}",
                    [f"{r['message']} (in {r['operation']}, {r['count']}x)" for r in reports],
                    ", ".join(kinds))
    return ("0 reports", f"{counts['writes']:,} writes with allocation failures at p = 0.3 "
            f"({fault.injected:,} injected), ends in hard-irq context on a completion thread, and 65,538 writes "
            f"on one chunk through its maximum: no might-sleep, lock-state or unlock report", {})


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
            res = explore(sync=ctx.patch, writes=w, reads=r, fault_at=k)
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
    # -- the patch's own steps (issue 26; pybcache/bcache/kpatch/check/patch_level.py) --
    from .patch_level import check_patch_level
    figure, detail, extra = check_patch_level(ctx.path)
    return (f"{schedules:,} schedules + {figure}, 0 violations",
            f"call-level: scenarios {', '.join(f'{w}w{r}r' for w, r in EXPLORE_SCENARIOS)}, each with no fault and "
            f"with the k-th allocation failing for every k that injects ({runs} explorations), no kernel report; "
            + detail, extra)


def _check_race(ctx: _Context) -> tuple[str, str, dict]:
    """Native reader and writer threads on the cached-device model, allocation faults at p = 0 and 0.3."""
    from ...cachedev import race
    parts = []
    context_seen: set[str] = set()
    for p in RACE_FAULT_PROBABILITIES:
        res = race(sync=ctx.patch, threads=4, seconds=ctx.seconds, fault_probability=p,
                   seed=1)
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
        + (f" (also reported, judged by context: {', '.join(sorted(context_seen))})" if context_seen else ""), {})


_CHECK_FUNCTIONS: dict[str, Callable[[_Context], tuple[str, str, dict]]] = {
    "semantics": _check_semantics, "explore": _check_explore, "race": _check_race,
    "overflow": _check_overflow, "balance": _check_balance, "context": _check_context,
    "memory": _check_memory,
}


def _child_main(argv: list[str]) -> int:
    check, path, library, seconds, heartbeat_path = argv
    hb = _Heartbeat(heartbeat_path)
    try:
        try:
            ctx = _Context(path, library, float(seconds), hb)
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
    return {"passed": passed, "figure": figure, "detail": detail, "counterexample": counterexample,
            "extra": extra}


def _where(ctx: _Context) -> str:
    return ctx.heartbeat.where()
