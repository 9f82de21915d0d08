"""check-patch's child context (``pybcache/bcache/kpatch/check/context.py``): the heartbeat a child writes and the
parent reads, and bytes and ranges as a counterexample prints them.
No compiled patch, no child process: the parts that are pure, on inputs chosen here."""
from __future__ import annotations

import threading

import pytest

from pybcache.bcache.kpatch.check import context as cpctx, runner as cp
from pybcache.bcache.kpatch.check.context import CHUNK
from pybcache.units import GiB, MiB, TiB


KiB = 1024


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
    assert cpctx._fmt_range(0, CHUNK) == "[0, 32 MiB) (sectors 0-65,535, chunk 0)"
    assert cpctx._fmt_range(CHUNK - 1, 2) == "[32 MiB - 1, 32 MiB + 1) (sectors 65,535-65,536, chunks 0-1)"
    assert cpctx._fmt_range(CHUNK, 1) == "[32 MiB, 32 MiB + 1) (sector 65,536, chunk 1)"
    assert cpctx._fmt_range(0, 3 * CHUNK + 1) == "[0, 96 MiB + 1) (sectors 0-196,608, chunks 0-3)"
