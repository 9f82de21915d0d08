"""check-patch's and serve's own logic, function by function: no compiled patch, no child process, no nbdkit.

``pybcache/bcache/kpatch/check/runner.py`` runs a user's patch in child processes and
``pybcache/bcache/nbd/server.py`` starts nbdkit: both too slow to run under every mutant. Their own logic is pure:
the JSON of a result, a check's wall bound, the names and tails a dead child leaves, the heartbeat a child writes
and the parent reads, the byte and range texts of a counterexample, the semantics check's random operations, their
rendering and shrinking (with a stand-in replay whose failure is chosen here), the quiescence sweep (a stand-in
tracker), and serve's tool check, durations, argument checks and nbdkit command line (stand-ins for the compilers).
Issue #16.
"""
from __future__ import annotations

import random
import threading
from pathlib import Path

import pytest

from pybcache.bcache.kpatch.check import checks as cpchk
from pybcache.bcache.kpatch.check import context as cpctx
from pybcache.bcache.kpatch.check import semantics as cpsem
from pybcache.bcache.kpatch.check import runner as cp
from pybcache.bcache.nbd import server as serve
from pybcache import units
from pybcache.bcache.variants import VARIANTS
from pybcache.bcache.kpatch.check.context import CHUNK
from pybcache.units import GiB, MiB, TiB

KiB = 1024


# ---- the results' JSON -------------------------------------------------------------------------------------

def test_a_checks_json_has_every_field_and_its_wall_time_rounded_to_milliseconds():
    r = cp.CheckResult("semantics", False, "missed bypass", "FAILED: x", ["write A starts"], 1.23456)
    assert r.to_json() == {"name": "semantics", "passed": False, "figure": "missed bypass", "detail": "FAILED: x",
                           "counterexample": ["write A starts"], "wall_s": 1.235}
    assert cp.CheckResult("race", True, "0", "ok").to_json()["counterexample"] is None


def test_the_battery_passes_only_if_every_check_passed_and_its_json_says_so():
    ok, bad = cp.CheckResult("a", True, "1", "d"), cp.CheckResult("b", False, "2", "e", wall_s=0.5)
    assert cp.CheckPatchResult("p.c", "n", [ok, ok], []).passed is True
    assert cp.CheckPatchResult("p.c", "n", [ok, bad], []).passed is False
    assert cp.CheckPatchResult("p.c", "n", [bad, ok], []).passed is False
    r = cp.CheckPatchResult("p.c", "v3", [ok, bad], [{"device": 1}], tsan=True, seconds=3.0, wall_s=9.87654)
    assert r.to_json() == {"patch": "p.c", "name": "v3", "passed": False, "checks": [ok.to_json(), bad.to_json()],
                           "memory": [{"device": 1}], "tsan": True, "seconds": 3.0, "wall_s": 9.877}
    plain = cp.CheckPatchResult("p.c", None, [ok], []).to_json()
    assert plain["passed"] is True and plain["tsan"] is False and plain["seconds"] == 2.0 and plain["wall_s"] == 0


# ---- the parent: wall bounds, dead children ----------------------------------------------------------------

def test_each_checks_wall_bound_grows_with_its_seconds_and_five_fold_under_tsan():
    assert cp._wall_bound("balance", 2.0, False) == 42.0
    assert cp._wall_bound("race", 3.0, False) == 40 + 2 * 3.0 * 2    # two fault probabilities
    assert cp._wall_bound("explore", 2.0, False) == 600.0
    for check in ("semantics", "overflow", "context", "memory"):
        assert cp._wall_bound(check, 7.0, False) == 40.0
    assert cp._wall_bound("balance", 3.0, True) == 215.0
    assert cp._wall_bound("memory", 3.0, True) == 200.0


def test_a_signal_is_named_by_its_name_else_by_its_number():
    assert cp._signal_name(11) == "SIGSEGV"
    assert cp._signal_name(6) == "SIGABRT"
    assert cp._signal_name(37) == "signal 37"


def test_a_dead_childs_tail_is_its_last_six_lines_without_json():
    lines = [f"line {i}" for i in range(10)] + ['{"passed": true}']
    assert cp._tail(lines) == [f"line {i}" for i in range(4, 10)]
    assert cp._tail(["only"]) == ["only"]
    assert cp._tail([]) is None
    assert cp._tail(['{"a": 1}']) is None


def test_a_dead_childs_tail_starts_at_the_kernel_bug_line_however_much_followed_it():
    lines = ["before"] + ["kernel BUG at pyb.c:12!"] + [f"after {i}" for i in range(9)]
    assert cp._tail(lines) == ["kernel BUG at pyb.c:12!"] + [f"after {i}" for i in range(5)]
    near_end = ["a", "b", "c", "d", "e", "f", "g", "kernel BUG at x.c:1!", "h"]
    assert cp._tail(near_end) == ["kernel BUG at x.c:1!", "h"]


def test_the_tsan_report_is_the_first_reports_first_eight_lines_stripped():
    lines = ["noise", "  WARNING: ThreadSanitizer: data race (pid=1)  "] + [f"  frame {i}" for i in range(9)]
    lines += ["WARNING: ThreadSanitizer: second"]
    assert cp._tsan_report(lines) == ["WARNING: ThreadSanitizer: data race (pid=1)"] + [f"frame {i}" for i in range(7)]
    assert cp._tsan_report(["WARNING: ThreadSanitizer: x"]) == ["WARNING: ThreadSanitizer: x"]
    assert cp._tsan_report(["ThreadSanitizer", "WARNING: AddressSanitizer"]) is None


# ---- the heartbeat: what a child writes, the parent reads --------------------------------------------------

def test_the_heartbeat_names_each_threads_call_its_range_and_the_thread(tmp_path):
    path = tmp_path / "hb"
    hb = cpctx._Heartbeat(str(path))
    assert path.stat().st_size == 64 * 64
    assert cp._read_heartbeat(path) is None and hb.where() == "a tracker call"
    hb.set(1, 4096, 512)
    me = threading.current_thread().name
    assert hb.where() == f"write_start(4 KiB, 512) [{me}]"

    def other():
        hb.set(4)

    t = threading.Thread(target=other, name="completer")
    t.start()
    t.join()
    both = f"write_start(4 KiB, 512) [{me}]; rcu_barrier [completer]"
    assert hb.where() == both
    assert cp._read_heartbeat(path) == both       # what the parent reads from the file
    hb.set(0)
    assert cp._read_heartbeat(path) == "rcu_barrier [completer]"


def test_the_heartbeat_shows_a_range_for_the_three_ranged_calls_only(tmp_path):
    hb = cpctx._Heartbeat(str(tmp_path / "hb"))
    me = threading.current_thread().name
    for call, text in [(1, "write_start(32 MiB, 1 KiB)"), (2, "write_end(32 MiB, 1 KiB)"),
                       (3, "read_bypass(32 MiB, 1 KiB)"), (4, "rcu_barrier"), (5, "close (the patch's exit)"),
                       (6, "init (the patch's init)"), (7, "?"), (99, "?")]:
        hb.set(call, CHUNK, 1024)
        assert hb.where() == f"{text} [{me}]"


def test_the_heartbeat_keeps_the_first_failed_call_after_its_slot_is_cleared(tmp_path):
    hb = cpctx._Heartbeat(str(tmp_path / "hb"))
    me = threading.current_thread().name
    assert hb.failed is None
    hb.set(2, CHUNK, CHUNK)
    hb.record_failure()
    hb.set(3, 0, 1)
    hb.record_failure()                           # a second failure does not replace the first
    hb.set(0)
    assert hb.failed == f"write_end(32 MiB, 32 MiB) [{me}]"
    assert hb.where() == f"write_end(32 MiB, 32 MiB) [{me}]"
    hb.set(4)
    assert hb.where() == f"rcu_barrier [{me}]"    # a call in progress comes first


def test_the_failure_recorded_is_the_failing_threads_call_not_another_threads(tmp_path):
    hb = cpctx._Heartbeat(str(tmp_path / "hb"))
    hb.set(1, 0, 512)                             # this thread (slot 0) is in a write_start

    def fail():
        hb.set(2, CHUNK, 4096)
        hb.record_failure()

    t = threading.Thread(target=fail, name="completer")
    t.start()
    t.join()
    assert hb.failed == "write_end(32 MiB, 4 KiB) [completer]"


def test_a_heartbeat_slot_holds_forty_bytes_of_thread_name_and_threads_take_slots_in_turn(tmp_path):
    path = tmp_path / "hb"
    hb = cpctx._Heartbeat(str(path))
    long_name = "n" * 39 + "XYZ"                  # 42 characters: the slot keeps the first 40

    def run(name, call):
        t = threading.Thread(target=hb.set, args=(call, 512, 512), name=name)
        t.start()
        t.join()

    run(long_name, 1)
    run("second", 2)
    data = path.read_bytes()
    assert data[24:64] == long_name[:40].encode()
    assert data[64 + 24:64 + 30] == b"second"
    assert cpctx._Heartbeat.describe(data) == f"write_start(512, 512) [{long_name[:40]}]; write_end(512, 512) [second]"


def test_a_thread_name_cut_inside_a_character_reads_with_a_replacement_character(tmp_path):
    hb = cpctx._Heartbeat(str(tmp_path / "hb"))
    t = threading.Thread(target=hb.set, args=(4,), name="a" * 39 + "\u00e9")    # the 40th byte is half of it
    t.start()
    t.join()
    assert hb.where() == "rcu_barrier [" + "a" * 39 + "\ufffd]"


def test_the_heartbeat_wraps_its_slots_after_sixty_four_threads(tmp_path):
    hb = cpctx._Heartbeat(str(tmp_path / "hb"))
    for i in range(65):
        t = threading.Thread(target=hb.set, args=(4,), name=f"t{i}")
        t.start()
        t.join()
    assert hb.where().split("; ")[0] == "rcu_barrier [t64]"     # thread 64 took slot 0 again
    assert len(hb.where().split("; ")) == 64


def test_a_missing_heartbeat_file_reads_as_nothing(tmp_path):
    assert cp._read_heartbeat(tmp_path / "absent") is None


# ---- bytes and ranges as text ------------------------------------------------------------------------------

@pytest.mark.parametrize("x,text", [
    (0, "0"), (512, "512"), (1023, "1023"), (1024, "1 KiB"), (1536, "1,536"), (4 * KiB, "4 KiB"),
    (4 * KiB + 1, "4 KiB + 1"), (4 * KiB + 512, "4 KiB + 512"), (4 * KiB + 513, "5 KiB - 511"),
    (5000, "5 KiB - 120"), (CHUNK, "32 MiB"), (CHUNK - 1, "32 MiB - 1"), (3 * GiB + 1, "3072 MiB + 1"),
    (64 * GiB + 512, "64 GiB + 512"), (cpctx.SEMANTICS_DEVICE, "129 GiB + 12 MiB + 512"), (TiB, "1 TiB"),
    (5 * TiB + 1, "5 TiB + 1"), (2 * TiB, "2 TiB"), (3 * MiB + 7, "3072 KiB + 7"),
    # a rest subtracted whole changes the signs of its own terms
    (64 * GiB - 16 * KiB + 512, "64 GiB - 15 KiB - 512"), (128 * GiB - CHUNK + 2, "128 GiB - 32 MiB + 2"),
    (64 * GiB + 12 * MiB - 1, "64 GiB + 12 MiB - 1"),
])
def test_bytes_are_shown_in_the_largest_exact_unit_else_the_nearest_plus_or_minus_a_remainder(x, text):
    assert cpctx._fmt_bytes(x) == text


def test_a_range_shows_its_ends_and_the_chunks_it_touches():
    assert cpctx._fmt_range(0, CHUNK) == "[0, 32 MiB) (chunk 0)"
    assert cpctx._fmt_range(CHUNK - 1, 2) == "[32 MiB - 1, 32 MiB + 1) (chunks 0-1)"
    assert cpctx._fmt_range(CHUNK, 1) == "[32 MiB, 32 MiB + 1) (chunk 1)"
    assert cpctx._fmt_range(0, 3 * CHUNK + 1) == "[0, 96 MiB + 1) (chunks 0-3)"


# ---- the semantics check's operations ----------------------------------------------------------------------

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


# ---- rendering, overlap, shrinking -------------------------------------------------------------------------

def test_a_counterexample_names_writes_by_letter_and_puts_the_failure_on_its_last_line():
    ops = [("start", 5, 0, CHUNK), ("start", 9, CHUNK, 512), ("end", 5), ("read", CHUNK, 1)]
    assert cpsem._render_ops(ops, "missed") == [
        "write A starts [0, 32 MiB) (chunk 0)",
        "write B starts [32 MiB, 32 MiB + 512) (chunk 1)",
        "write A ends [0, 32 MiB) (chunk 0)",
        "read [32 MiB, 32 MiB + 1) (chunk 1): missed",
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
        "write A starts [0, 512) (chunk 0)",
        "write A ends [0, 512) (chunk 0)",
        "read [0, 1) (chunk 0): WARN_ON fired: x",
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


# ---- the quiescence sweep ----------------------------------------------------------------------------------

class _Tracker:
    def __init__(self, active_chunks):
        self.active, self.calls = set(active_chunks), []

    def is_active(self, off, ln):
        self.calls.append((off, ln))
        return off // CHUNK in self.active


def test_the_sweep_reads_every_chunk_the_last_one_partial_and_lists_those_that_bypass():
    t = _Tracker({1, 3})
    assert cpchk._sweep(t, 3 * CHUNK + 512) == [1, 3]
    assert t.calls == [(0, CHUNK), (CHUNK, CHUNK), (2 * CHUNK, CHUNK), (3 * CHUNK, 512)]
    t = _Tracker(set())
    assert cpchk._sweep(t, 2 * CHUNK) == [] and t.calls == [(0, CHUNK), (CHUNK, CHUNK)]
    t = _Tracker({0})
    assert cpchk._sweep(t, 1) == [0] and t.calls == [(0, 1)]


# ==== serve.py ==============================================================================================

def test_the_install_line_names_the_missing_tools_and_their_debian_packages():
    assert serve._install_line(["nbdkit"]) == \
        "nbdkit not found: install the Debian package with `sudo apt-get install nbdkit`"
    assert serve._install_line(["nbdkit", "nbdkit-plugin.h", "fio", "nbdcopy"]) == (
        "nbdkit, nbdkit-plugin.h, fio, nbdcopy not found: install the Debian packages with "
        "`sudo apt-get install fio libnbd-bin nbdkit nbdkit-plugin-dev`")
    assert serve._install_line(["fio", "nbdcopy"]).endswith("packages with `sudo apt-get install fio libnbd-bin`")
    assert serve._install_line(["nbdkit", "nbdkit"]).endswith("the Debian package with `sudo apt-get install nbdkit`")


def test_require_tools_raises_naming_only_the_tools_not_on_path(monkeypatch):
    present = {"nbdkit"}
    looked = []

    def which(tool):
        looked.append(tool)
        return f"/usr/bin/{tool}" if tool in present else None

    monkeypatch.setattr(serve.shutil, "which", which)
    assert serve.require_tools("nbdkit") is None
    with pytest.raises(serve.ToolMissing) as ex:
        serve.require_tools("nbdcopy", "nbdkit", "fio")
    assert str(ex.value) == serve._install_line(["nbdcopy", "fio"])
    assert looked == ["nbdkit", "nbdcopy", "nbdkit", "fio"]
    assert issubclass(serve.ToolMissing, RuntimeError)


@pytest.mark.parametrize("text,ns", [
    ("0", 0), ("1", 10 ** 9), ("1.", 10 ** 9), (" 5 ms ", 5 * 10 ** 6), ("0.5us", 500), ("1.5ns", 2),
    ("10s", 10 ** 10), ("10000ms", 10 ** 10), ("10000000000ns", 10 ** 10), ("0.000000001s", 1),
    ("000000000010", 10 ** 10), (3, 3 * 10 ** 9),
])
def test_a_duration_is_nanoseconds_of_its_unit_and_a_bare_number_is_seconds(text, ns):
    assert units.parse_duration(text) == ns


@pytest.mark.parametrize("text", ["", "soon", "-1ms", "5 min", "1e3ms", "5MS", "0.0000000001s", "1000000000000ns",
                                  "ms", "1..5s", "1,5s"])
def test_what_is_not_a_duration_is_refused_naming_the_argument(text):
    with pytest.raises(ValueError) as ex:
        units.parse_duration(text, name="--write-delay")
    assert str(ex.value) == f"--write-delay: {text!r} is not a duration (use e.g. 0, 500us, 5ms, 1s)"


@pytest.mark.parametrize("text", ["10.000000001s", "10000000001ns", "11", "100000000000ns"])
def test_a_duration_over_ten_seconds_is_refused_naming_the_argument_and_the_range(text):
    with pytest.raises(ValueError) as ex:
        units.parse_duration(text, name="--write-delay")
    assert str(ex.value) == f"--write-delay: must be in [0, 10s], got {text!r}"
    with pytest.raises(ValueError, match=r"^duration: "):
        units.parse_duration(text)


# ---- Server: arguments, URI, the nbdkit command line -------------------------------------------------------

def _patch(name="mine", path="/src/mine.c"):
    from pybcache.bcache.kpatch.load import KernelPatch
    p = KernelPatch.__new__(KernelPatch)
    p.name, p.path = name, path
    return p


def test_a_server_keeps_its_options_and_starts_with_nothing_running():
    s = serve.Server()
    assert (s.sync, s.size, s.write_delay_ns, s.threads, s.chunk_size, s.plugin, s.port) == \
        ("page", 10 << 30, 5_000_000, 64, 32 << 20, "c", None)
    assert s.patch is None and s.hung_timeout is None and s.stats is None and s.pid is None and s.socket is None
    s = serve.Server(sync="none", size=4096, write_delay_ns=0, socket=Path("/run/x.sock"), threads=1,
                     chunk_size=512, plugin="python")
    assert (s.sync, s.size, s.write_delay_ns, s.threads, s.chunk_size, s.plugin) == \
        ("none", 4096, 0, 1, 512, "python")
    assert s.socket == "/run/x.sock" and isinstance(s.socket, str)
    for sync in VARIANTS:
        assert serve.Server(sync=sync).sync == sync


def test_a_server_with_a_patch_names_it_and_takes_a_hung_timeout():
    p = _patch()
    s = serve.Server(sync=p, hung_timeout=2.5)
    assert s.patch is p and s.sync == "mine (/src/mine.c)" and s.hung_timeout == 2.5
    assert serve.Server(sync=p, hung_timeout=3600).hung_timeout == 3600
    assert serve.Server(sync=p).hung_timeout is None


@pytest.mark.parametrize("kw,exc,message", [
    ({"sync": "spin"}, ValueError, "sync must be one of none, global, page, atomic, a KernelPatch or a patch's "
                                   ".c file, got 'spin'"),
    ({"sync": 3}, ValueError, "sync must be one of none, global, page, atomic, a KernelPatch or a patch's .c file, "
                              "got 3"),
    ({"hung_timeout": 1.0}, ValueError, "hung_timeout applies to a patch (sync=KernelPatch or a .c path), not to the "
                                        "lab's trackers"),
    ({"size": 4096.0}, TypeError, "size must be an int, got float"),
    ({"write_delay_ns": True}, TypeError, "write_delay_ns must be an int, got bool"),
    ({"threads": "4"}, TypeError, "threads must be an int, got str"),
    ({"chunk_size": 1.0}, TypeError, "chunk_size must be an int, got float"),
    ({"size": 0}, ValueError, "size must be a positive multiple of 4096 up to 1099511627776 (1 TiB), got 0"),
    ({"size": 4097}, ValueError, "size must be a positive multiple of 4096 up to 1099511627776 (1 TiB), got 4097"),
    ({"size": (1 << 40) + 4096}, ValueError, "size must be a positive multiple of 4096 up to 1099511627776 (1 TiB), "
                                             "got 1099511631872"),
    ({"write_delay_ns": -1}, ValueError, "write_delay_ns must be in [0, 10000000000], got -1"),
    ({"write_delay_ns": 10 ** 10 + 1}, ValueError, "write_delay_ns must be in [0, 10000000000], got 10000000001"),
    ({"threads": 0}, ValueError, "threads must be in [1, 1024], got 0"),
    ({"threads": 1025}, ValueError, "threads must be in [1, 1024], got 1025"),
    ({"chunk_size": 256}, ValueError, "chunk_size must be a power of two >= 512, got 256"),
    ({"chunk_size": 768}, ValueError, "chunk_size must be a power of two >= 512, got 768"),
    ({"port": 0}, ValueError, "port must be an int in [1, 65535], got 0"),
    ({"port": 65536}, ValueError, "port must be an int in [1, 65535], got 65536"),
    ({"port": True}, ValueError, "port must be an int in [1, 65535], got True"),
    ({"port": "80"}, ValueError, "port must be an int in [1, 65535], got '80'"),
    ({"port": 1234, "socket": "/tmp/x.sock"}, ValueError, "socket and port are exclusive: a server listens on one "
                                                          "of them"),
    ({"plugin": "rust"}, ValueError, "plugin must be 'c' or 'python', got 'rust'"),
])
def test_a_server_refuses_each_bad_argument_by_name_with_its_type_or_range(kw, exc, message):
    with pytest.raises(exc) as ex:
        serve.Server(**kw)
    assert type(ex.value) is exc and str(ex.value) == message


@pytest.mark.parametrize("kw,message", [
    ({"chunk_size": 64 << 20}, "sync (a patch) and chunk_size are mutually exclusive: chunk_size applies to the "
                               "lab's trackers, not to a patch"),
    ({"plugin": "python"}, "sync (a patch) needs plugin='c'"),
    ({"hung_timeout": 0}, "hung_timeout must be a number of seconds in (0, 3600], got 0"),
    ({"hung_timeout": 3600.5}, "hung_timeout must be a number of seconds in (0, 3600], got 3600.5"),
    ({"hung_timeout": True}, "hung_timeout must be a number of seconds in (0, 3600], got True"),
    ({"hung_timeout": "1"}, "hung_timeout must be a number of seconds in (0, 3600], got '1'"),
])
def test_a_server_with_a_patch_refuses_the_lab_options_and_a_bad_hung_timeout(kw, message):
    with pytest.raises(ValueError) as ex:
        serve.Server(sync=_patch(), **kw)
    assert str(ex.value) == message


def test_a_server_takes_the_bounds_of_each_range():
    for kw in ({"size": 1 << 40}, {"write_delay_ns": 10 ** 10}, {"threads": 1024}, {"port": 1}, {"port": 65535},
               {"chunk_size": 1 << 40}):
        s = serve.Server(**kw)
        for k, v in kw.items():
            assert getattr(s, k) == v


def test_the_uri_is_the_tcp_port_on_localhost_else_the_unix_socket():
    assert serve.Server(port=10809).uri == "nbd://127.0.0.1:10809/"
    assert serve.Server(socket="/run/p.sock").uri == "nbd+unix:///?socket=/run/p.sock"


@pytest.fixture
def plugin(monkeypatch):
    built = []

    def build_plugin():
        built.append(True)
        return Path("/cache/pyb-nbdkit.so")

    monkeypatch.setattr(serve, "build_plugin", build_plugin)
    return built


def test_the_nbdkit_command_runs_the_c_plugin_on_the_socket_with_the_models_options(plugin):
    s = serve.Server(sync="atomic", size=1 << 30, write_delay_ns=7, socket="/run/s.sock", threads=3,
                     chunk_size=1 << 20)
    assert s._command("/tmp/st.json", "/tmp/pid") == [
        "nbdkit", "--foreground", "--exit-with-parent", "-P", "/tmp/pid", "--threads", "3", "-U", "/run/s.sock",
        "/cache/pyb-nbdkit.so", "size=1073741824", "sync=atomic", "write_delay_ns=7", "chunk_size=1048576",
        "stats=/tmp/st.json"]


def test_the_nbdkit_command_listens_on_localhost_for_a_port_and_runs_the_python_plugin_when_asked(plugin):
    s = serve.Server(port=10809, plugin="python")
    assert s._command("st", "pid") == [
        "nbdkit", "--foreground", "--exit-with-parent", "-P", "pid", "--threads", "64", "-i", "127.0.0.1",
        "-p", "10809", "python", str(serve._PYTHON_PLUGIN), "size=10737418240", "sync=page",
        "write_delay_ns=5000000", "chunk_size=33554432", "stats=st"]
    assert plugin == []                            # the C plugin is not built for the Python one


def test_the_nbdkit_command_for_a_patch_loads_its_compiled_library_with_its_hung_bound(plugin, monkeypatch):
    import pybcache.bcache.kpatch.load
    compiled = []

    def compile_patch(path):
        compiled.append(path)
        return Path("/cache/mine.so"), ""

    monkeypatch.setattr(pybcache.bcache.kpatch.load, "compile_patch", compile_patch)
    s = serve.Server(sync=_patch(), socket="/s", hung_timeout=2.5, write_delay_ns=9, size=8192)
    assert s._command("st", "pid") == [
        "nbdkit", "--foreground", "--exit-with-parent", "-P", "pid", "--threads", "64", "-U", "/s",
        "/cache/pyb-nbdkit.so", "size=8192", "patch=/cache/mine.so", "write_delay_ns=9", "stats=st",
        "hung_ns=2500000000"]
    assert compiled == ["/src/mine.c"]
    assert serve.Server(sync=_patch(), socket="/s")._command("st", "pid")[-1] == "stats=st"
    assert serve.Server(sync=_patch(), socket="/s", hung_timeout=1e-10)._command("st", "pid")[-1] == "hung_ns=1"


def test_a_server_never_started_is_not_alive_and_stops_waits_and_reports_nothing():
    s = serve.Server()
    assert s.alive() is False and s.pid is None and s.wait(0.01) is None
    assert s.stop() is None and s.stats is None and s._error_text() == ""
