"""The ``semantics`` check: random single-threaded starts, ends and reads against the reference model
(a read overlapping an active write must bypass), a failing sequence shrunk to its shortest."""
from __future__ import annotations

import random

from ....units import GiB
from .context import (CHUNK, FAIL_ALLOC_TEXT, SEMANTICS_DEVICE, SHRINK_TRIALS, _Context, _Stop, _fmt_range)


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
            lines.append(f"write {names.get(op[1], f'W{op[1]}')} ends {span}")
        else:
            lines.append(f"read {_fmt_range(op[1], op[2])}")
    lines[-1] += f": {failure}"
    return lines


class _Replay:
    """Runs an op sequence on a fresh patch tracker beside the reference model; finds the first op
    where the patch is wrong."""

    def __init__(self, ctx: _Context, device: int, fault_probability: float, seed: int, *,
                 first_fails: bool = False):
        self.ctx, self.device, self.fp, self.seed = ctx, device, fault_probability, seed
        self.first_fails = first_fails      # instead: the first allocation of the sequence fails, no other
        self.reads = self.must = self.false_bypasses = self.coarse = 0
        #: allocation failures injected over this replayer's runs
        self.injected = 0
        #: the first WARN_ON of these runs: (the ops up to it, its index, the message). WARN_ON_ONCE fires
        #: once per process, so a warning is recorded, not replayed.
        self.first_warning: tuple[list[Op], int, str] | None = None

    def run(self, ops: list[Op], *, count: bool = False) -> tuple[int, str] | None:
        """(index of the first read that did not bypass a write in flight, what it saw) or None.
        ``count`` adds to the figures."""
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
        try:
            for i, op in enumerate(ops):
                if op[0] == "start":
                    if not t.start(op[2], op[3]):
                        untracked.add(op[1])
                    ref.start(op[2], op[3])
                    active[op[1]] = (op[2], op[3])
                elif op[0] == "end":
                    off, ln = active.pop(op[1])
                    t.end(off, ln)
                    ref.end(off, ln)
                else:
                    off, ln = op[1], op[2]
                    got = t.is_active(off, ln)
                    overlap = [(wid, w) for wid, w in active.items() if w[0] < off + ln and off < w[0] + w[1]]
                    chunk_level = ref.is_active(off, ln)
                    if count:
                        self.reads += 1
                        self.must += bool(overlap)
                        self.false_bypasses += got and not overlap
                        self.coarse += got and not chunk_level
                    if overlap and not got:
                        wid, w = overlap[0]
                        failed = " (an allocation failed in its start)" if wid in untracked else ""
                        return i, (f"does NOT bypass, but a write of {_fmt_range(*w)} is in flight{failed}: a "
                                   f"miss here caches data that write is about to replace")
                if self.first_warning is None and t.stats()["warnings"]:
                    msgs = [r["message"] for r in t.kernel_reports() if r["kind"] == "warning"]
                    self.first_warning = (ops[max(0, i - 11):i + 1], i, f"WARN_ON fired: {msgs[-1] if msgs else '?'}")
            return None
        finally:
            self.injected += fault.injected if fault is not None else 0
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
    reads = must = false_bypasses = coarse = injected = 0
    warning = None
    for fp, seed in runs:
        replay = _Replay(ctx, SEMANTICS_DEVICE, fp, seed)
        ops = _semantics_ops(random.Random(seed * 7919 + int(fp * 10)), SEMANTICS_DEVICE, 300)
        found = replay.run(ops, count=True)
        injected += replay.injected
        reads, must = reads + replay.reads, must + replay.must
        false_bypasses, coarse = false_bypasses + replay.false_bypasses, coarse + replay.coarse
        if warning is None and replay.first_warning is not None:
            warning = (seed, fp, *replay.first_warning)
        if found is not None:
            small, failure = _shrink(replay, ops, found[0], SHRINK_TRIALS)
            faults = f"fault probability {fp}"
            if fp:
                # Random faults move when operations are removed, which keeps unneeded ones in the
                # sequence. Try the read with only the writes it overlaps, the first allocation failing.
                core = _overlapping_starts(small) + [small[-1]]
                first = _Replay(ctx, SEMANTICS_DEVICE, 0.0, 0, first_fails=True)
                again = first.run(core) if len(core) < len(small) else None
                if again is not None:
                    small, failure = core[:again[0] + 1], again[1]
                    faults = "only the first allocation failing"
            also = f"; also, in seed {warning[0]}: {warning[4]}" if warning else ""
            raise _Stop(f"a read overlapping an active write did not bypass (seed {seed}, fault probability "
                        f"{fp}; shrunk from {found[0] + 1} to {len(small)} operations, {faults}){also}",
                        _render_ops(small, failure), "missed bypass")
        n_ops += len(ops)
    if warning is not None:
        seed, fp, shown, index, message = warning
        lines = _render_ops(shown, message)
        if index >= len(shown):
            lines.insert(0, f"(the {index + 1 - len(shown)} earlier operations of seed {seed} omitted)")
        raise _Stop(f"op {index + 1} of seed {seed}, fault probability {fp}: {message}", lines, "WARN_ON")
    figure = f"{false_bypasses}/{reads} false bypasses"
    detail = (f"{len(runs)} sequences ({n_ops} operations; 12 without and 12 with allocation failures "
              f"at p = 0.3, {injected:,} injected: {FAIL_ALLOC_TEXT[ctx.fail_alloc]}): all {must} reads "
              f"overlapping a write in flight bypassed; {false_bypasses} of "
              f"{reads} reads bypassed without overlapping one, {coarse} of them coarser than 32 MiB chunks")
    return figure, detail, {}
