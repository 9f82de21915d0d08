"""check-patch's semantics check (``pybcache/bcache/kpatch/check/semantics.py``): its random operations, their
rendering and overlap, and shrinking with a stand-in replay whose failure is chosen here.
No compiled patch, no child process: the parts that are pure, on inputs chosen here."""
from __future__ import annotations

import random

from pybcache.bcache.kpatch.check import context as cpctx, semantics as cpsem
from pybcache.bcache.kpatch.check.context import CHUNK
from pybcache.units import GiB


KiB = 1024


def _draws():
    """The check's own 24 draws (seeds and fault probabilities as _check_semantics makes them)."""
    return [cpsem._semantics_ops(random.Random(seed * 7919 + int(fp * 10)), cpctx.SEMANTICS_DEVICE, 300)
            for fp in (0.0, 0.3) for seed in range(12)]


def _ranges(ops):
    return [(op[2], op[3]) for op in ops if op[0] == "start"] + [(op[1], op[2]) for op in ops if op[0] == "read"]


def test_semantics_ops_are_valid_sequences_of_starts_ends_and_reads_on_the_device():
    dev = cpctx.SEMANTICS_DEVICE
    for ops in _draws():
        assert len(ops) == 300
        active, next_id = set(), 0
        for op in ops:
            if op[0] == "start":
                assert op[1] == next_id and len(op) == 4      # ids in order from 0
                active.add(op[1])
                next_id += 1
                assert len(active) <= 24
            elif op[0] == "end":
                assert len(op) == 2 and op[1] in active       # only a write in flight ends
                active.remove(op[1])
            else:
                assert op[0] == "read" and len(op) == 3
        for off, ln in _ranges(ops):
            assert 0 <= off and 1 <= ln and off + ln <= dev
    assert _draws()[0] == _draws()[0]                          # seeded: the same draw every time


def test_semantics_ops_dwell_on_the_ranges_the_docs_promise():
    dev, page = cpctx.SEMANTICS_DEVICE, 32 * GiB
    every = [r for ops in _draws() for r in _ranges(ops)]
    kinds = {
        "multi-chunk": [r for r in every if r[0] // CHUNK != (r[0] + r[1] - 1) // CHUNK],
        "page-crossing": [r for r in every if r[0] // page != (r[0] + r[1] - 1) // page],
        "ends on a chunk boundary": [r for r in every if (r[0] + r[1]) % CHUNK == 0],
        "one byte past a boundary": [r for r in every if (r[0] + r[1]) % CHUNK == 1],
        "starts on a chunk boundary": [r for r in every if r[0] % CHUNK == 0 and r[0]],
        "in the last partial chunk": [r for r in every if r[0] >= dev // CHUNK * CHUNK],
        "up to the device's end": [r for r in every if r[0] + r[1] == dev],
    }
    for kind, found in kinds.items():
        assert len(found) >= 10, kind
    per_draw_kinds = [{op[0] for op in ops} for ops in _draws()]
    assert all(k == {"start", "end", "read"} for k in per_draw_kinds)


def test_semantics_ops_overlap_writes_in_flight_and_read_at_their_edges():
    overlapping_starts = edge_reads = 0
    for ops in _draws():
        active = {}
        for op in ops:
            if op[0] == "start":
                overlapping_starts += any(o < op[2] + op[3] and op[2] < o + n for o, n in active.values())
                active[op[1]] = (op[2], op[3])
            elif op[0] == "end":
                del active[op[1]]
            else:
                off, ln = op[1], op[2]
                edge_reads += ln <= 2 and any(abs(off - o) <= 2 or abs(off - (o + n - 1)) <= 2
                                              for o, n in active.values())
    assert overlapping_starts >= 50 and edge_reads >= 50


class _ScriptedRng:
    """A stand-in random.Random: answers each call with the next scripted value and records the call."""

    def __init__(self, *answers):
        self.answers, self.calls = list(answers), []

    def _next(self, call):
        self.calls.append(call)
        return self.answers.pop(0)

    def random(self):
        return self._next(("random",))

    def choice(self, seq):
        value = self._next(("choice", tuple(seq)))
        assert value in tuple(seq)
        return value

    def randrange(self, *args):
        value = self._next(("randrange", *args))
        assert value in range(*args)
        return value


DEV = cpctx.SEMANTICS_DEVICE


BOUNDARIES = (0, CHUNK, 2 * CHUNK, 32 * GiB, 64 * GiB, 96 * GiB, 128 * GiB, DEV // CHUNK * CHUNK)


def test_each_form_of_range_is_drawn_from_the_documented_choices():
    # form 0: small, inside a chunk near a boundary
    rng = _ScriptedRng(0.0, 64 * GiB, 0, -4, 128 * KiB)
    assert cpsem._semantics_ops(rng, DEV, 1) == [("start", 0, 64 * GiB - 4 * 4096, 128 * KiB)]
    assert rng.calls == [("random",), ("choice", BOUNDARIES), ("randrange", 7), ("randrange", -4, 4),
                         ("choice", (512, 4096, 128 * 1024))]
    # form 1: multi-chunk, crossing the boundary
    rng = _ScriptedRng(0.34, 32 * GiB, 1, 3 * CHUNK - 1, 4 * CHUNK - 1)
    assert cpsem._semantics_ops(rng, DEV, 1) == [("start", 0, 32 * GiB - 3 * CHUNK + 1, 4 * CHUNK - 1)]
    assert rng.calls[2:] == [("randrange", 7), ("randrange", 1, 3 * CHUNK), ("randrange", CHUNK, 4 * CHUNK)]
    # form 2: ends exactly on a chunk boundary (never before the first one)
    rng = _ScriptedRng(0.0, 2 * CHUNK, 2, 2, CHUNK + 512)
    assert cpsem._semantics_ops(rng, DEV, 1) == [("start", 0, 4 * CHUNK - CHUNK - 512, CHUNK + 512)]
    assert rng.calls[3:] == [("randrange", -2, 3), ("choice", (512, 4096, CHUNK, CHUNK + 512, 2 * CHUNK))]
    rng = _ScriptedRng(0.0, 0, 2, -2, 2 * CHUNK)
    assert cpsem._semantics_ops(rng, DEV, 1) == [("start", 0, 0, CHUNK)]
    # form 3: starts exactly on a chunk boundary
    rng = _ScriptedRng(0.0, CHUNK, 3, 1, 1)
    assert cpsem._semantics_ops(rng, DEV, 1) == [("start", 0, 2 * CHUNK, 1)]
    assert rng.calls[3:] == [("randrange", -1, 2), ("choice", (1, 512, 4096, CHUNK))]
    # form 4: the last partial chunk, up to the device's end
    tail = DEV % CHUNK
    rng = _ScriptedRng(0.0, 0, 4, tail + CHUNK)
    assert cpsem._semantics_ops(rng, DEV, 1) == [("start", 0, DEV - tail - CHUNK, tail + CHUNK)]
    assert rng.calls[3:] == [("choice", (1, 512, 4096, tail, tail + CHUNK))]
    # form 6 (and 5 with nothing in flight): one byte either side of a boundary
    for form in (5, 6):
        rng = _ScriptedRng(0.0, CHUNK, form, -1, 2)
        assert cpsem._semantics_ops(rng, DEV, 1) == [("start", 0, CHUNK - 1, 2)]
        assert rng.calls[3:] == [("choice", (-1, 0)), ("choice", (1, 2))]


def test_a_range_overlapping_a_write_in_flight_starts_up_to_two_chunks_before_a_byte_of_it():
    rng = _ScriptedRng(0.0, 64 * GiB, 3, 0, CHUNK,            # A: [64 GiB, +32 MiB)
                       0.0, 0, 5, (64 * GiB, CHUNK), CHUNK - 1, 2 * CHUNK - 1, 3 * CHUNK - 1)
    ops = cpsem._semantics_ops(rng, DEV, 2)
    a = 64 * GiB + CHUNK - 1
    assert ops[1] == ("start", 1, a - 2 * CHUNK + 1, 3 * CHUNK - 1)
    assert rng.calls[-4:] == [("choice", ((64 * GiB, CHUNK),)), ("randrange", 0, CHUNK),
                              ("randrange", 0, 2 * CHUNK), ("randrange", 1, 3 * CHUNK)]


def test_ranges_are_clipped_to_the_device():
    # one byte before 0: clipped to offset 0; a 2-byte range at the last byte: clipped to 1 byte
    assert cpsem._semantics_ops(_ScriptedRng(0.0, 0, 6, -1, 2), DEV, 1) == [("start", 0, 0, 2)]
    last = DEV // CHUNK * CHUNK
    rng = _ScriptedRng(0.0, last, 3, 1, CHUNK)                # a chunk past the last boundary
    assert cpsem._semantics_ops(rng, DEV, 1) == [("start", 0, DEV - 1, 1)]
    rng = _ScriptedRng(0.0, last, 1, 1, 4 * CHUNK - 1)       # runs past the end: cut there
    assert cpsem._semantics_ops(rng, DEV, 1) == [("start", 0, last - 1, DEV - last + 1)]


def test_ops_start_below_035_end_below_06_and_read_otherwise():
    # start A, then 0.35 is not a start: an end; then a read of a drawn range (nothing in flight)
    rng = _ScriptedRng(0.0, CHUNK, 3, 0, 512, 0.35, 0, 0.6, CHUNK, 3, 0, 4096)
    assert cpsem._semantics_ops(rng, DEV, 3) == [("start", 0, CHUNK, 512), ("end", 0), ("read", CHUNK, 4096)]
    assert rng.calls[6] == ("choice", (0,))                   # the write to end, among those in flight
    # 0.59 with nothing in flight is a read; 0.6 with one in flight is a read, at its edge half the time
    rng = _ScriptedRng(0.59, CHUNK, 3, 0, 512)
    assert cpsem._semantics_ops(rng, DEV, 1) == [("read", CHUNK, 512)]
    rng = _ScriptedRng(0.0, CHUNK, 3, 0, 4096, 0.6, 0.49, (CHUNK, 4096), CHUNK + 4095, 1, 2)
    assert cpsem._semantics_ops(rng, DEV, 2)[1] == ("read", CHUNK + 4094, 2)
    assert rng.calls[-5:] == [("random",), ("choice", ((CHUNK, 4096),)), ("choice", (CHUNK, CHUNK + 4095)),
                              ("randrange", 0, 2), ("randrange", 1, 3)]
    rng = _ScriptedRng(0.0, CHUNK, 3, 0, 4096, 0.6, 0.5, 0, 3, 0, 1)
    assert cpsem._semantics_ops(rng, DEV, 2)[1] == ("read", 0, 1)     # 0.5: a drawn range instead


def test_no_more_than_24_writes_are_in_flight():
    answers = []
    for _ in range(24):
        answers += [0.0, CHUNK, 3, 0, 512]
    answers += [0.0, 0]                                        # the 25th start: an end instead
    ops = cpsem._semantics_ops(_ScriptedRng(*answers), DEV, 25)
    assert [op[0] for op in ops] == ["start"] * 24 + ["end"]


def test_a_counterexample_names_writes_by_letter_and_puts_the_failure_on_its_last_line():
    ops = [("start", 5, 0, CHUNK), ("start", 9, CHUNK, 512), ("end", 5), ("read", CHUNK, 1)]
    assert cpsem._render_ops(ops, "missed") == [
        "write A starts [0, 32 MiB) (sectors 0-65,535, chunk 0)",
        "write B starts [32 MiB, 32 MiB + 512) (sector 65,536, chunk 1)",
        "write A ends [0, 32 MiB) (sectors 0-65,535, chunk 0)",
        "read [32 MiB, 32 MiB + 1) (sector 65,536, chunk 1): missed",
    ]


def test_writes_past_the_26th_are_named_by_their_id():
    ops = [("start", i, i * CHUNK, 1) for i in range(28)] + [("end", 27)]
    lines = cpsem._render_ops(ops, "f")
    assert lines[0].startswith("write A starts") and lines[25].startswith("write Z starts")
    assert lines[26].startswith("write W26 starts") and lines[27].startswith("write W27 starts")
    assert lines[28].startswith("write W27 ends") and lines[28].endswith(": f")


def test_a_window_of_operations_names_a_write_started_before_it_by_its_id():
    # the WARN_ON counterexample shows a sequence's last operations: an end there may have no start
    ops = [("end", 3), ("start", 4, 0, 512), ("end", 4), ("read", 0, 1)]
    assert cpsem._render_ops(ops, "WARN_ON fired: x") == [
        "write W3 ends (started before these operations)",
        "write A starts [0, 512) (sector 0, chunk 0)",
        "write A ends [0, 512) (sector 0, chunk 0)",
        "read [0, 1) (sector 0, chunk 0): WARN_ON fired: x",
    ]


def test_the_overlapping_starts_are_the_writes_in_flight_at_the_read_that_overlap_it_in_order():
    a, b, c, d = ("start", 0, 0, 100), ("start", 1, 200, 100), ("start", 2, 50, 200), ("start", 3, 300, 10)
    e = ("start", 4, 99, 1)
    ops = [a, b, c, d, e, ("end", 4), ("end", 7), ("read", 99, 201)]
    assert cpsem._overlapping_starts(ops) == [a, b, c]    # d starts where the read ends; e ended
    assert cpsem._overlapping_starts([b, ("read", 100, 100)]) == []   # b starts where the read ends
    assert cpsem._overlapping_starts([a, ("read", 99, 1)]) == [a]


def test_the_overlapping_starts_use_the_reads_own_offset_and_length():
    a, b, c = ("start", 0, 0, 10), ("start", 5, 100, 10), ("start", 6, 150, 10)
    assert cpsem._overlapping_starts([a, b, c, ("read", 100, 1)]) == [b]
    assert cpsem._overlapping_starts([a, b, ("read", 105, 1)]) == [b]      # inside a write, past its start
    assert cpsem._overlapping_starts([a, ("read", 10, 1)]) == []           # a write ending where the read starts


class _Replay:
    """A stand-in replay: the failure is a read overlapping the write starting at ``bad`` while it is in
    flight (with ``alone``: while it is the only write in flight); records every sequence it runs. An end
    without its start raises, as the real replay does."""

    def __init__(self, bad, alone=False):
        self.bad, self.alone, self.runs = bad, alone, []

    def run(self, ops):
        self.runs.append(list(ops))
        active = {}
        for i, op in enumerate(ops):
            if op[0] == "start":
                active[op[1]] = op
            elif op[0] == "end":
                del active[op[1]]
            elif any(s[2] == self.bad and s[2] < op[1] + op[2] and op[1] < s[2] + s[3] for s in active.values()):
                if not self.alone or len(active) == 1:
                    return i, f"missed after {len(ops)} ops"
        return None


def _failing_sequence():
    return [("start", 0, 0, 10), ("start", 1, 1000, 10), ("read", 0, 5), ("start", 2, 5000, 10), ("end", 0),
            ("read", 20, 5), ("read", 1005, 1), ("end", 1), ("start", 3, 1000, 10), ("read", 9000, 1),
            ("read", 1000, 1), ("read", 0, 1)]


def test_shrinking_keeps_exactly_the_write_and_the_read_the_failure_needs():
    replay = _Replay(bad=1000)
    small, failure = cpsem._shrink(replay, _failing_sequence(), 6, 5000)
    assert small == [("start", 1, 1000, 10), ("read", 1005, 1)]
    assert failure == "missed after 2 ops"
    assert replay.runs[0] == _failing_sequence()[:7]          # the failing prefix, nothing after it
    assert len(replay.runs) < 30


def test_shrinking_cuts_at_the_first_failure_found():
    replay = _Replay(bad=1000)
    ops = [("start", 0, 1000, 10), ("end", 0), ("start", 1, 1000, 10), ("start", 2, 0, 1), ("read", 1000, 1),
           ("end", 2), ("read", 1001, 1)]
    small, failure = cpsem._shrink(replay, ops, 6, 5000)
    assert small == [("start", 1, 1000, 10), ("read", 1000, 1)] and failure == "missed after 2 ops"
    small, failure = cpsem._shrink(_Replay(bad=1000), ops, 6, 0)
    assert small == ops[:5] and failure == "missed after 7 ops"         # with no trial: up to the first failure


def test_shrinking_drops_a_read_alone():
    replay = _Replay(bad=1000, alone=True)
    ops = [("start", 0, 0, 1), ("end", 0), ("read", 0, 1), ("start", 1, 1000, 10), ("read", 1000, 1)]
    small, _ = cpsem._shrink(replay, ops, 4, 5000)
    assert small == [("start", 1, 1000, 10), ("read", 1000, 1)]
    # the trial without the read at offset 0 keeps the end of write 0 (a read takes nothing along)
    assert replay.runs[2] == [("start", 0, 0, 1), ("end", 0), ("start", 1, 1000, 10), ("read", 1000, 1)]


def test_shrinking_drops_a_start_together_with_its_end():
    # the failure needs write 1 alone in flight: the end of write 0 stays until write 0 itself goes
    replay = _Replay(bad=1000, alone=True)
    ops = [("start", 0, 0, 1), ("start", 1, 1000, 10), ("end", 0), ("read", 1000, 1)]
    small, failure = cpsem._shrink(replay, ops, 3, 5000)
    assert small == [("start", 1, 1000, 10), ("read", 1000, 1)] and failure == "missed after 2 ops"
    assert [("start", 1, 1000, 10), ("read", 1000, 1)] in replay.runs[1:]


def test_shrinking_stops_after_its_trial_budget():
    replay = _Replay(bad=1000)
    small, failure = cpsem._shrink(replay, _failing_sequence(), 6, 0)
    assert small == _failing_sequence()[:7] and failure == "missed after 7 ops" and len(replay.runs) == 1
    replay = _Replay(bad=1000)
    small, _ = cpsem._shrink(replay, _failing_sequence(), 6, 1)
    assert len(replay.runs) == 2                               # the first run and one trial
    assert small == [op for op in _failing_sequence()[:7] if op != ("read", 20, 5)]   # the op before the read
    replay = _Replay(bad=1000)
    cpsem._shrink(replay, _failing_sequence(), 6, 3)
    assert len(replay.runs) == 4


def test_shrinking_tries_again_after_a_pass_that_removed_something():
    # one pass drops ops from the last but one backwards while the failure stays; then one more pass, which
    # finds nothing left to drop
    replay = _Replay(bad=7)
    ops = [("start", 0, 7, 1), ("read", 0, 1), ("start", 1, 3, 1), ("read", 7, 1)]
    small, failure = cpsem._shrink(replay, ops, 3, 5000)
    assert small == [("start", 0, 7, 1), ("read", 7, 1)] and failure == "missed after 2 ops"
    # the passes: drop start 1, drop the first read, drop start 0 (fails), then one more pass finding nothing
    assert replay.runs[1:] == [
        [("start", 0, 7, 1), ("read", 0, 1), ("read", 7, 1)],
        [("start", 0, 7, 1), ("read", 7, 1)],
        [("read", 7, 1)],
        [("read", 7, 1)],
    ]
