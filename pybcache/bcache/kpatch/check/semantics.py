"""The ``semantics`` check: random single-threaded starts, ends and reads against the reference model
(a read overlapping an active write must bypass), a failing sequence shrunk to its shortest."""
from __future__ import annotations

import random
import threading
from typing import Any

from ....units import GiB
from .context import (CHUNK, FAIL_ALLOC_TEXT, SEMANTICS_DEVICE, SHRINK_TRIALS, _consumed_end_bio_leaks, _Context,
                      _fmt_bytes, _fmt_range, _Stop)


# == semantics ======================================================================================

# An operation: ("start", wid, off, len), ("end", wid) or ("read", off, len).
Op = tuple


def _semantics_ops(rng: random.Random, device: int, n: int) -> list[Op]:
    """A random sequence of starts, ends and reads that dwells on the ranges where trackers go wrong:
    chunk and page boundaries, multi-chunk and page-crossing ranges, ranges that end exactly on a chunk
    boundary, the device's last partial chunk, and writes that overlap writes in flight."""
    boundaries = [0, CHUNK, 2 * CHUNK, 32 * GiB, 64 * GiB, 96 * GiB, 128 * GiB, device // CHUNK * CHUNK]
    active: dict[int, tuple[int, int]] = {}
    ops: list[Op] = []
    next_id = 0

    def clip(off: int, ln: int) -> tuple[int, int]:
        off = max(0, min(off, device - 1))
        return off, max(1, min(ln, device - off))

    def some_range() -> tuple[int, int]:
        b = rng.choice(boundaries)
        form = rng.randrange(7)
        if form == 0:                                   # small, inside a chunk near a boundary
            return clip(b + rng.randrange(-4, 4) * 4096, rng.choice((512, 4096, 128 * 1024)))
        if form == 1:                                   # multi-chunk, crossing the boundary
            return clip(b - rng.randrange(1, 3 * CHUNK), rng.randrange(CHUNK, 4 * CHUNK))
        if form == 2:                                   # ends exactly on a chunk boundary
            end = max(CHUNK, b + rng.randrange(-2, 3) * CHUNK)
            ln = rng.choice((512, 4096, CHUNK, CHUNK + 512, 2 * CHUNK))
            return clip(max(0, end - ln), min(ln, end))
        if form == 3:                                   # starts exactly on a chunk boundary
            return clip(b + rng.randrange(-1, 2) * CHUNK, rng.choice((1, 512, 4096, CHUNK)))
        if form == 4:                                   # the last partial chunk, up to the device end
            off = device - rng.choice((1, 512, 4096, device % CHUNK, device % CHUNK + CHUNK))
            return clip(off, device - off)
        if form == 5 and active:                        # overlapping a write in flight
            off, ln = rng.choice(list(active.values()))
            a = off + rng.randrange(0, ln)
            return clip(a - rng.randrange(0, 2 * CHUNK), rng.randrange(1, 3 * CHUNK))
        # one byte either side of a boundary
        return clip(b + rng.choice((-1, 0)), rng.choice((1, 2)))

    for _ in range(n):
        r = rng.random()
        if r < 0.35 and len(active) < 24:
            off, ln = some_range()
            active[next_id] = (off, ln)
            ops.append(("start", next_id, off, ln))
            next_id += 1
        elif r < 0.6 and active:
            wid = rng.choice(list(active))
            del active[wid]
            ops.append(("end", wid))
        else:
            if active and rng.random() < 0.5:           # a read at the edge of a write in flight
                off, ln = rng.choice(list(active.values()))
                edge = rng.choice((off, off + ln - 1))
                ops.append(("read", *clip(edge - rng.randrange(0, 2), rng.randrange(1, 3))))
            else:
                ops.append(("read", *some_range()))
    return ops


def _render_ops(ops: list[Op], failure: str) -> list[str]:
    starts = {op[1]: (op[2], op[3]) for op in ops if op[0] == "start"}
    names: dict[int, str] = {}
    lines = []
    for op in ops:
        if op[0] == "start":
            names[op[1]] = chr(ord("A") + len(names)) if len(names) < 26 else f"W{op[1]}"
            lines.append(f"write {names[op[1]]} starts {_fmt_range(op[2], op[3])}")
        elif op[0] == "end":
            # a WARN_ON's counterexample is the last operations of a sequence: a write may have started before them
            span = _fmt_range(*starts[op[1]]) if op[1] in starts else "(started before these operations)"
            bg = " (completed in the background while the next start waited)" if len(op) > 2 else ""
            lines.append(f"write {names.get(op[1], f'W{op[1]}')} ends {span}{bg}")
        else:
            lines.append(f"read {_fmt_range(op[1], op[2])}")
    lines[-1] += f": {failure}"
    return lines


class _Background:
    """The writes of a single-threaded sequence completing by themselves while a start sleeps: when the
    patch's start waits (the shim's wait hook fires on the waiting thread) and has seen every end made so
    far (``settled_ends``, so this never depends on timing), a helper thread ends the oldest write in
    flight (a bio completes on its own, as it would in the kernel), one at a time, until the start
    returns. Each such end is recorded in the sequence run (``("end", wid, "background")``) and the
    reference model sees it too. Nothing in flight: the start hangs, as it would in the kernel."""

    def __init__(self, t: Any, ref: Any, active: dict[int, tuple[int, int]], realized: list[Op]):
        self.t, self.ref, self.active, self.realized = t, ref, active, realized
        self.lock = threading.Lock()            # the sequence's state: held by the main thread but in starts
        self.poke = threading.Event()
        self.thread: threading.Thread | None = None
        self.target = 0                         # ends made when the helper last ended one
        self.ends = 0                           # writes it ended
        self.stopped = False
        self.error: BaseException | None = None
        t.t._wait_hook = self._hook

    def _hook(self) -> None:                    # on the waiting thread, GIL held
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, name="background-completion", daemon=True)
            self.thread.start()
        self.poke.set()

    def _run(self) -> None:
        while True:
            self.poke.wait()
            self.poke.clear()
            if self.stopped:
                return
            with self.lock:
                if self.stopped or not self.active:
                    continue
                st = self.t.stats()
                if not st["sleeping"] or st["settled_ends"] < self.target:
                    continue
                wid = next(iter(self.active))   # the oldest write in flight
                off, ln = self.active.pop(wid)
                try:
                    self.t.end(off, ln)
                except BaseException as e:   # noqa: BLE001 - the start that waits then hangs: reported there
                    self.error = e
                    continue
                self.ref.end(off, ln)
                self.realized.append(("end", wid, "background"))
                self.ends += 1
                self.target = self.t.stats()["write_ends"]

    def start(self, off: int, ln: int) -> bool:
        """The patch's start, with the sequence's state open to the helper while it runs."""
        self.lock.release()
        try:
            return self.t.start(off, ln)
        finally:
            self.lock.acquire()

    def close(self) -> None:
        self.stopped = True
        self.poke.set()
        self.t.t._wait_hook = None
        if self.thread is not None:
            self.lock.release()
            try:
                self.thread.join()
            finally:
                self.lock.acquire()


class _Replay:
    """Runs an op sequence on a fresh patch tracker beside the reference model; finds the first op
    where the patch is wrong."""

    def __init__(self, ctx: _Context, device: int, fault_probability: float, seed: int, *,
                 first_fails: bool = False, coarse_fails: bool = False):
        self.ctx, self.device, self.fp, self.seed = ctx, device, fault_probability, seed
        self.first_fails = first_fails      # instead: the first allocation of the sequence fails, no other
        #: a bypass coarser than the declared granularity is the failure looked for (else only counted)
        self.coarse_fails = coarse_fails
        declared = getattr(ctx.patch, "bypass_granularity", 0) or 0
        self.granularity = max(CHUNK, declared)
        self.declared = declared
        self.reads = self.must = self.false_bypasses = self.coarse = self.beyond = 0
        #: the first bypass coarser than the declared granularity of a counted run: its index and text
        self.first_beyond: tuple[int, str] | None = None
        self.waits = self.background_ends = self.injected = self.reserve = 0
        #: the last run's operations as they ran (ends made in the background included, ends of writes
        #: they had already ended left out), up to the failing read
        self.realized: list[Op] = []
        #: the first WARN_ON of these runs: (the ops up to it, its index, the message). WARN_ON_ONCE fires
        #: once per process, so a warning is recorded, not replayed.
        self.first_warning: tuple[list[Op], int, str] | None = None

    def run(self, ops: list[Op], *, count: bool = False) -> tuple[int, str] | None:
        """(index of the first read that did not bypass a write in flight, what it saw) or None; with
        ``coarse_fails``, of the first read that bypassed with no write in flight in its regions of the declared
        granularity (the reference's 32 MiB chunks when none is declared). ``count`` adds to the figures."""
        from .... import FaultInjection
        from ...reference import BypassWriteTracker as Reference
        fault: FaultInjection | None
        if self.first_fails:
            fault = FaultInjection(probability=1.0, times=1)
        else:
            fault = FaultInjection(probability=self.fp, seed=self.seed) if self.fp else None
        t = self.ctx.tracker(self.device, fault=fault)
        ref = Reference(self.device, chunk_size=CHUNK, sync="page", counter_bits=64, overflow="wrap")
        active: dict[int, tuple[int, int]] = {}
        untracked: set[int] = set()
        realized: list[Op] = []
        self.realized = realized
        bg = _Background(t, ref, active, realized)
        bg.lock.acquire()
        try:
            for i, op in enumerate(ops):
                if op[0] == "start":
                    if not bg.start(op[2], op[3]):
                        untracked.add(op[1])
                    ref.start(op[2], op[3])
                    active[op[1]] = (op[2], op[3])
                    realized.append(op)
                elif op[0] == "end":
                    if op[1] not in active:
                        continue            # ended in the background while a later start waited
                    off, ln = active.pop(op[1])
                    t.end(off, ln)
                    ref.end(off, ln)
                    realized.append(op)
                else:
                    realized.append(op)
                    off, ln = op[1], op[2]
                    got = t.is_active(off, ln)
                    overlap = [(wid, w) for wid, w in active.items() if w[0] < off + ln and off < w[0] + w[1]]
                    chunk_level = ref.is_active(off, ln)
                    g = self.granularity
                    beyond = got and not overlap and not any(
                        w[0] // g <= (off + ln - 1) // g and off // g <= (w[0] + w[1] - 1) // g
                        for w in active.values())
                    if count:
                        self.reads += 1
                        self.must += bool(overlap)
                        self.false_bypasses += got and not overlap
                        self.coarse += got and not chunk_level
                        self.beyond += beyond
                    if beyond:
                        unit = ("the reference's 32 MiB chunks; the patch declares no coarser "
                                ".bypass_granularity") if not self.declared else (
                                f"its declared .bypass_granularity of {_fmt_bytes(self.declared)}")
                        where = "chunks" if not self.declared else "regions"
                        text = (f"bypasses, but no write in flight lies in its {where} ({unit}): a needless "
                                f"bypass of the cache, coarser than the design's tracking")
                        if self.coarse_fails:
                            return i, text
                        if count and self.first_beyond is None:
                            self.first_beyond = (i, text)
                    if overlap and not got and not self.coarse_fails:
                        wid, w = overlap[0]
                        failed = " (an allocation failed in its start)" if wid in untracked else ""
                        return i, (f"does NOT bypass, but a write of {_fmt_range(*w)} is in flight{failed}: a "
                                   f"miss here caches data that write is about to replace")
                if self.first_warning is None and t.stats()["warnings"]:
                    msgs = [r["message"] for r in t.kernel_reports() if r["kind"] == "warning"]
                    self.first_warning = (ops[max(0, i - 11):i + 1], i, f"WARN_ON fired: {msgs[-1] if msgs else '?'}")
            return None
        finally:
            bg.close()
            bg.lock.release()
            if count:
                self.injected += fault.injected if fault is not None else 0
                st = t.stats()
                self.waits += st["waits"]
                self.reserve += st["reserve_taken"]
                self.background_ends += bg.ends
            t.close()
            self.ctx.trackers.remove(t)


def _overlapping_starts(ops: list[Op]) -> list[Op]:
    """The starts of the writes still in flight at the last op (a read) that overlap it, in order."""
    active: dict[int, Op] = {}
    for op in ops[:-1]:
        if op[0] == "start":
            active[op[1]] = op
        elif op[0] == "end":
            active.pop(op[1], None)
    off, ln = ops[-1][1], ops[-1][2]
    return [op for op in active.values() if op[2] < off + ln and off < op[2] + op[3]]


def _shrink(replay: _Replay, ops: list[Op], idx: int, trials: int) -> tuple[list[Op], str]:
    """The failing prefix with every op removed that the failure does not need (a start takes its end
    along), one op at a time until none can go or ``trials`` replays were spent: a count, not a time,
    so that the counterexample is the same on any machine."""
    ops = ops[:idx + 1]
    found = replay.run(ops)
    assert found is not None
    ops, failure = ops[:found[0] + 1], found[1]
    changed = True
    while changed and trials > 0:
        changed = False
        i = len(ops) - 2
        while i >= 0 and trials > 0:
            trials -= 1
            op = ops[i]
            drop = {i} | ({j for j, o in enumerate(ops) if o[0] == "end" and o[1] == op[1]}
                          if op[0] == "start" else set())
            trial = [o for j, o in enumerate(ops) if j not in drop]
            got = replay.run(trial) if trial else None
            if got is not None:
                ops, failure, changed = trial[:got[0] + 1], got[1], True
            i = min(i - 1, len(ops) - 2)
    return ops, failure


def _check_semantics(ctx: _Context) -> tuple[str, str, dict]:
    """Seeded random single-threaded sequences, without and with allocation failures (p = 0.3),
    against the reference model: a read that overlaps a write in flight must bypass."""
    runs = [(0.0, seed) for seed in range(12)] + [(0.3, seed) for seed in range(12)]
    n_ops = 0
    reads = must = false_bypasses = coarse = waits = background = injected = reserve = 0
    warning = None
    beyond: tuple[float, int, list[Op], int] | None = None      # the first bypass coarser than declared
    for fp, seed in runs:
        replay = _Replay(ctx, SEMANTICS_DEVICE, fp, seed)
        ops = _semantics_ops(random.Random(seed * 7919 + int(fp * 10)), SEMANTICS_DEVICE, 300)
        found = replay.run(ops, count=True)
        reads, must = reads + replay.reads, must + replay.must
        false_bypasses, coarse = false_bypasses + replay.false_bypasses, coarse + replay.coarse
        waits, background = waits + replay.waits, background + replay.background_ends
        injected += replay.injected
        reserve += replay.reserve
        if warning is None and replay.first_warning is not None:
            warning = (seed, fp, *replay.first_warning)
        if beyond is None and replay.first_beyond is not None:
            beyond = (fp, seed, ops, replay.first_beyond[0])
        if found is not None:
            small, failure = _shrink(replay, ops, found[0], SHRINK_TRIALS)
            replay.run(small)
            shown = replay.realized
            faults = f"fault probability {fp}"
            if fp:
                # Random faults move when operations are removed, which keeps unneeded ones in the
                # sequence. Try the read with only the writes it overlaps, the first allocation failing.
                core = _overlapping_starts(small) + [small[-1]]
                first = _Replay(ctx, SEMANTICS_DEVICE, 0.0, 0, first_fails=True)
                again = first.run(core) if len(core) < len(small) else None
                if again is not None:
                    small, failure = core[:again[0] + 1], again[1]
                    shown = first.realized
                    faults = "only the first allocation failing"
            also = f"; also, in seed {warning[0]}: {warning[4]}" if warning else ""
            raise _Stop(f"a read overlapping an active write did not bypass (seed {seed}, fault probability "
                        f"{fp}; shrunk from {found[0] + 1} to {len(small)} operations, {faults}){also}",
                        _render_ops(shown, failure), "missed bypass")
        n_ops += len(ops)
    if warning is not None:
        seed, fp, shown, index, message = warning
        lines = _render_ops(shown, message)
        if index >= len(shown):
            lines.insert(0, f"(the {index + 1 - len(shown)} earlier operations of seed {seed} omitted)")
        raise _Stop(f"op {index + 1} of seed {seed}, fault probability {fp}: {message}", lines, "WARN_ON")
    if beyond is not None:
        fp, seed, ops, index = beyond
        consumed = _consumed_end_bio_leaks(ctx)
        if consumed is not None:
            raise _Stop("reads bypass where no write is in flight, because write_end reads the write's range from "
                        "the bio it is handed, which at bcache's completion has 0 sectors left: no count ever drops",
                        consumed, "end saw 0 sectors")
        replay = _Replay(ctx, SEMANTICS_DEVICE, fp, seed, coarse_fails=True)
        small, failure = _shrink(replay, ops, index, SHRINK_TRIALS)
        replay.run(small)
        declared = getattr(ctx.patch, "bypass_granularity", 0) or 0
        unit = (f"its declared granularity of {_fmt_bytes(declared)}" if declared else
                "the reference's 32 MiB chunks (declare a coarser one in the ops: .bypass_granularity)")
        raise _Stop(f"a read bypassed with no write in flight in {unit} (seed {seed}, fault probability {fp}; "
                    f"shrunk from {index + 1} to {len(small)} operations); {false_bypasses} of {reads} reads "
                    f"bypassed without overlapping a write, {coarse} coarser than 32 MiB chunks",
                    _render_ops(replay.realized, failure), "coarser bypass")
    declared = getattr(ctx.patch, "bypass_granularity", 0) or 0
    declared_text = (f" (every one within the patch's declared .bypass_granularity of {_fmt_bytes(declared)})"
                     if declared else "")
    figure = f"{false_bypasses}/{reads} false bypasses"
    detail = (f"{len(runs)} sequences ({n_ops} operations; 12 without and 12 with allocation failures "
              f"at p = 0.3, {injected:,} injected: {FAIL_ALLOC_TEXT[ctx.fail_alloc]}): all {must} reads "
              f"overlapping a write in flight bypassed; "
              f"{false_bypasses} of {reads} reads bypassed without overlapping one, {coarse} of them coarser than "
              f"32 MiB chunks{declared_text}; "
              f"{waits} starts waited in the patch, {background} writes completed in the background while "
              f"a start waited, {reserve:,} mempool reserve elements used")
    return figure, detail, {}
