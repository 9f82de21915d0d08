"""The shim runtime's RCU and escape paths under forced interleavings (tests/data/rcu_probe.c).

Each test sequences its threads with semaphores inside the probe patch and traps a thread at one of the
shim's test hooks (pybcache/kpatch.h, enum pyb_kp_hook), so the interleaving it describes happens on
every run: none of these tests depends on timing or on a lucky schedule.
"""
from __future__ import annotations

import ctypes
import os
import textwrap
import threading

import pytest
from helpers.clirun import run_python

import pybcache
from helpers.kpatch_util import BAD, EXAMPLES

pytestmark = [pytest.mark.native, pytest.mark.e2e]

GiB = pybcache.GiB
BLOCK = 4096
PROBE = BAD / "rcu_probe.c"
# The probe's commands (the first 4 KiB block of a bio) and the shim's hook points.
CMD_NOP, CMD_PUBLISH, CMD_RETIRE, CMD_QUEUE_FREE, CMD_QUEUE_CALLBACK, CMD_READ, CMD_RECURSE, CMD_LOCK = range(8)
HOOK_POLL_SCANNED, HOOK_POLL_COLLECTED = 1, 2


@pytest.fixture(autouse=True)
def cache_dir(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("PYBCACHE_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "kpatch-cache"))


def _control(patch):
    lib = ctypes.CDLL(patch.library)          # the module already loaded: its state is shared
    lib.kpt_trapped_n.restype = ctypes.c_ulonglong
    lib.kpt_stale_reads.restype = ctypes.c_ulong
    lib.kpt_reset()
    return lib


@pytest.fixture
def probe():
    patch = pybcache.load_patch(PROBE)
    return patch, _control(patch)


def cmd(n):
    return n * BLOCK, BLOCK


def in_thread(fn, *args):
    th = threading.Thread(target=fn, args=args, daemon=True)
    th.start()
    return th


class Reader:
    """A thread inside an RCU read-side section (outside any operation) until release()."""

    def __init__(self, lib):
        self._lib, self._go, self._in = lib, threading.Event(), threading.Event()
        self._th = in_thread(self._run)
        assert self._in.wait(30)

    def _run(self):
        self._lib.kpt_reader_lock()
        self._in.set()
        self._go.wait(30)
        self._lib.kpt_reader_unlock()

    def release(self):
        self._go.set()
        self._th.join(30)
        assert not self._th.is_alive()


def test_a_callback_queued_after_a_pollers_reader_scan_waits_for_the_reader_that_started_since(probe):
    # Finding 1: poller P scans the readers (none), then reader R enters and loads the object, then E
    # unpublishes it and kfree_rcu's it, then P collects callbacks. The object's grace period began
    # after P's scan, so P must not free it under R.
    patch, lib = probe
    t = patch.tracker(GiB)
    t.start(*cmd(CMD_PUBLISH))
    lib.kpt_read_sync(2, 3)                                  # R: post 2 once loaded, then wait for 3

    def poller():
        lib.kpt_trap(HOOK_POLL_SCANNED, 0, 1)               # P: post 0 at the scan, then wait for 1
        t.start(*cmd(CMD_QUEUE_FREE))                        # a callback pending, so P's poll scans
    p = in_thread(poller)
    assert lib.kpt_wait(0) == 0                              # P has scanned: no reader
    r = in_thread(t.is_active, *cmd(CMD_READ))
    assert lib.kpt_wait(2) == 0                              # R holds the object
    t.start(*cmd(CMD_RETIRE))                                # E: unpublish, kfree_rcu
    lib.kpt_post(1)                                          # P collects and runs what is ready
    p.join(30)
    lib.kpt_post(3)                                          # R reads the object it loaded
    r.join(30)
    assert not p.is_alive() and not r.is_alive()
    assert lib.kpt_stale_reads() == 0 and t.kernel_reports() == []
    t.rcu_barrier()
    assert t.memory()["page_bytes"] == 0 and t.stats()["rcu_pending"] == 0
    assert t.close() == {"leaked_bytes": 0, "leaked_allocations": 0}


def test_a_callback_runs_in_soft_irq_context_even_when_queued_from_write_end(probe):
    # Finding 3: after write_end (hard-irq) the poll ran callbacks with hard-irq set and interrupts off,
    # and a lock the callback takes with spin_lock was then reported as inconsistent lock state.
    patch, lib = probe
    t = patch.tracker(GiB)
    t.end(*cmd(CMD_QUEUE_CALLBACK))                          # queued in hard-irq, run at the poll after it
    t.start(*cmd(CMD_QUEUE_CALLBACK))                        # queued in process context
    (r,) = t.kernel_reports()                                # the callback's own WARN_ON, twice
    assert r["kind"] == "warning" and r["operation"] == "rcu_callback" and r["count"] == 2
    assert not r["hardirq"] and not r["irqs_disabled"] and r["locks_held"] == 0
    assert t.close() == {"leaked_bytes": 0, "leaked_allocations": 0}


def test_a_callback_is_run_and_reported_by_the_tracker_that_queued_it(probe):
    # Finding 3: another tracker's poll ran the callback, so its reports and context were that tracker's.
    patch, lib = probe
    a, b = patch.tracker(GiB), patch.tracker(GiB)
    reader = Reader(lib)
    a.start(*cmd(CMD_QUEUE_CALLBACK))                        # not ready: a reader is in a section
    reader.release()
    b.is_active(*cmd(CMD_NOP))                               # b's poll: must leave a's callback alone
    assert b.kernel_reports() == []
    assert a.rcu_barrier() == 1
    assert [(r["kind"], r["operation"]) for r in a.kernel_reports()] == [("warning", "rcu_callback")]
    assert a.close() == b.close() == {"leaked_bytes": 0, "leaked_allocations": 0}


def test_closing_a_tracker_runs_its_callbacks_even_while_another_trackers_poll_is_stopped_midway(tmp_path):
    # Finding 2: b's poll took a's callback into its private list and stopped there; a's close found
    # nothing to run, freed the object, and b then freed it again. Run in a child: on failure the
    # child, not the test process, touches freed memory.
    proc = run_python(textwrap.dedent(f"""
        import sys, threading
        sys.path[:0] = [{os.path.dirname(os.path.abspath(__file__))!r}, {str(BAD.parent)!r}]
        from test_kpatch_rcu import Reader, _control, cmd, in_thread, CMD_QUEUE_FREE, CMD_NOP, HOOK_POLL_COLLECTED
        import pybcache
        patch = pybcache.load_patch({str(PROBE)!r})
        lib = _control(patch)
        a, b = patch.tracker(pybcache.GiB), patch.tracker(pybcache.GiB)
        reader = Reader(lib)
        a.start(*cmd(CMD_QUEUE_FREE))                        # pending: a reader is in a section
        reader.release()
        def other():
            lib.kpt_trap(HOOK_POLL_COLLECTED, 0, 1)          # stop b's poll after it collects
            b.is_active(*cmd(CMD_NOP))
            lib.kpt_trap(0, -1, -1)
            lib.kpt_post(0)                                  # b's poll did not stop: say so
        th = in_thread(other)
        assert lib.kpt_wait(0) == 0
        leaked = a.close()
        lib.kpt_post(1)
        th.join(30)
        print("leaked", leaked["leaked_bytes"], leaked["leaked_allocations"], flush=True)
    """), env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["leaked", "0", "0"]


def test_an_escape_releases_the_spinlocks_it_held_for_the_same_thread(probe):
    # Finding 16: after an escape the pthread spinlock stayed held and the thread still owned it, so the
    # same thread's next operation on the lock was reported as recursion.
    patch, lib = probe
    broken, other = patch.tracker(GiB), patch.tracker(GiB, hung_timeout=0.5)
    with pytest.raises(RuntimeError, match="spinlock recursion"):
        broken.start(*cmd(CMD_RECURSE))
    assert [r["kind"] for r in broken.kernel_reports()] == ["spin_recursion"]
    assert other.start(*cmd(CMD_LOCK)) is True
    assert other.kernel_reports() == []


def test_an_escape_releases_the_spinlocks_it_held_for_other_threads(probe):
    # Finding 16: another thread spun on the abandoned lock until the hung bound and escaped too.
    patch, lib = probe
    broken, other = patch.tracker(GiB), patch.tracker(GiB, hung_timeout=0.5)
    with pytest.raises(RuntimeError, match="spinlock recursion"):
        broken.start(*cmd(CMD_RECURSE))
    result = []
    th = in_thread(lambda: result.append(other.start(*cmd(CMD_LOCK))))
    th.join(30)
    assert result == [True] and other.kernel_reports() == []


@pytest.mark.parametrize("threads, rounds", [(3, 400)])
def test_v3_atomic_page_churn_from_several_threads_reads_no_freed_page_and_leaks_nothing(threads, rounds):
    # Accompanies the forced interleavings above (it cannot fail on demand): pages installed and freed
    # through kfree_rcu by every thread at once, with readers inside rcu_read_lock all along.
    t = pybcache.load_patch(EXAMPLES / "v3_atomic.c").tracker(GiB)
    idle = t.memory()["total_bytes"]
    start = threading.Barrier(threads)
    errors = []

    def worker(k):
        try:
            start.wait(30)
            for i in range(rounds):
                t.start(0, BLOCK)
                t.is_active(0, BLOCK)
                t.end(0, BLOCK)
        except BaseException as e:           # reported below, after every thread has stopped
            errors.append(e)
    workers = [in_thread(worker, k) for k in range(threads)]
    for w in workers:
        w.join(120)
    assert not any(w.is_alive() for w in workers) and errors == []
    assert not t.is_active(0, GiB) and t.kernel_reports() == []
    t.rcu_barrier()
    assert t.memory()["total_bytes"] == idle
    assert t.close() == {"leaked_bytes": 0, "leaked_allocations": 0}
