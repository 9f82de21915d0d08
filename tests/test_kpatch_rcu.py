"""The shim runtime's RCU and escape paths under forced interleavings (tests/kpatches/rcu_probe.c).

Each test sequences its threads with semaphores inside the probe patch and traps a thread at one of the
shim's test hooks (pybcache/kpatch.h, enum pyb_kp_hook), so the interleaving it describes happens on
every run: none of these tests depends on timing or on a lucky schedule.
"""
from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap
import threading

import pytest

import pybcache
from kpatch_util import BAD

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
