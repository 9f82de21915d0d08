"""The example patches on simple sequences, and the two v2 failures the check-patch battery must report."""
from __future__ import annotations

import threading

import pytest

import pybcache
from helpers.kpatch_util import EXAMPLES

pytestmark = [pytest.mark.native, pytest.mark.e2e]

GiB, MiB, KiB = pybcache.GiB, pybcache.MiB, pybcache.KiB
CHUNK = 32 * MiB
EXAMPLE_NAMES = ["v2_posted", "v3_proposal", "v3_atomic"]


@pytest.fixture(autouse=True)
def cache_dir(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("PYBCACHE_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "kpatch-cache"))


@pytest.fixture(params=EXAMPLE_NAMES)
def patch(request):
    return pybcache.load_patch(EXAMPLES / f"{request.param}.c")


def test_each_example_names_itself(patch):
    assert patch.name in ("v2-posted", "v3-proposal", "v3-atomic")


def test_a_write_is_visible_to_overlapping_reads_until_it_ends(patch):
    t = patch.tracker(10 * GiB)
    assert not t.is_active(0, 4096)
    assert t.start(CHUNK + 4096, 128 * KiB)
    assert t.is_active(CHUNK, 4096) and t.is_active(2 * CHUNK - 4096, 4096)
    assert not t.is_active(0, CHUNK) and not t.is_active(2 * CHUNK, 4096)
    t.end(CHUNK + 4096, 128 * KiB)
    assert not t.is_active(CHUNK, CHUNK)


def test_a_write_spanning_chunks_and_pages_counts_each_once(patch):
    t = patch.tracker(200 * GiB)
    span = (64 * GiB - CHUNK, 3 * CHUNK)      # the last chunk of page 0 and two of page 1 (u16 layouts)
    t.start(*span)
    t.start(64 * GiB, 4096)
    for k in range(3):
        assert t.is_active(64 * GiB - CHUNK + k * CHUNK, 1)
    t.end(*span)
    assert t.is_active(64 * GiB, 4096) and not t.is_active(64 * GiB - CHUNK, 1)
    t.end(64 * GiB, 4096)
    assert not t.is_active(0, 200 * GiB)


def test_the_last_partial_chunk_is_tracked(patch):
    size = 10 * GiB + 5 * MiB + 100            # not even a whole sector at the end
    t = patch.tracker(size)
    t.start(size - 1, 1)
    assert t.is_active(10 * GiB, 1) and not t.is_active(10 * GiB - 1, 1)
    t.end(size - 1, 1)
    assert not t.is_active(10 * GiB, size - 10 * GiB)


def test_memory_is_back_to_idle_after_all_ends(patch):
    t = patch.tracker(1 << 40)
    idle = t.memory()["total_bytes"]
    writes = [(i * 37 * GiB, 128 * KiB) for i in range(20)]
    for w in writes:
        t.start(*w)
    assert t.memory()["pages"] > 0
    for w in writes:
        t.end(*w)
    t.rcu_barrier()                           # v3_atomic frees its pages after a grace period
    assert t.memory()["total_bytes"] == idle and t.memory()["pages"] == 0
    assert t.close() == {"leaked_bytes": 0, "leaked_allocations": 0}


def stolen_increment(t):
    """A's page allocation fails, B's succeeds, A ends: is B, still in flight, visible?"""
    a_tracked = t.start(0, 4096)
    b_tracked = t.start(0, 4096)
    t.end(0, 4096)
    return a_tracked, b_tracked, t.is_active(0, 4096)


def test_v2_loses_a_write_to_a_stolen_increment_after_an_allocation_failure(tmp_path):
    # a module of its own: pr_warn_ratelimited's state is the module's (once per process, as per boot), and
    # another test of this worker may have spent its burst
    copy = tmp_path / "v2_posted.c"
    copy.write_bytes((EXAMPLES / "v2_posted.c").read_bytes())
    t = pybcache.load_patch(copy).tracker(GiB, fault=pybcache.FaultInjection(probability=1.0, times=1))
    assert stolen_increment(t) == (False, True, False)    # B in flight, invisible: the stale-read window
    (log,) = t.kernel_log()
    assert log["level"] == 4 and "untracked" in log["message"]


@pytest.mark.parametrize("name", ["v3_proposal", "v3_atomic"])
def test_v3_keeps_the_write_visible_after_an_allocation_failure(name):
    fault = pybcache.FaultInjection(probability=1.0, times=1)
    t = pybcache.load_patch(EXAMPLES / f"{name}.c").tracker(GiB, fault=fault)
    assert stolen_increment(t)[2] is True
    t.end(0, 4096)
    assert not t.is_active(0, 4096) and t.kernel_reports() == []


def test_v2_u16_counter_wraps_at_65536_writes_in_flight():
    t = pybcache.load_patch(EXAMPLES / "v2_posted.c").tracker(GiB)
    for _ in range(65_535):
        t.start(0, 4096)
    assert t.is_active(0, 4096)
    t.start(0, 4096)                          # the 65,536th
    assert not t.is_active(0, 4096)           # 65,536 writes in flight read as none


def test_v3_blocks_the_65536th_writer_until_an_end_and_loses_no_count():
    t = pybcache.load_patch(EXAMPLES / "v3_proposal.c").tracker(GiB)
    for _ in range(65_535):
        t.start(0, 4096)
    errors = []
    writer = threading.Thread(target=lambda: errors.append(t.start(0, 4096)))
    writer.start()                            # blocks in wait_event (or runs after the end below)
    t.end(0, 4096)                            # a completion makes room and wakes it
    writer.join(60)
    assert not writer.is_alive() and errors == [True]
    for _ in range(65_534):
        t.end(0, 4096)
    assert t.is_active(0, 4096)               # one write still in flight is still counted
    t.end(0, 4096)
    assert not t.is_active(0, 4096)
    assert t.kernel_reports() == []
