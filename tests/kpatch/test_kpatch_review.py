"""Regressions of the review of issue #12 in the patch runtime and its drivers: a tracker's lifetime
against calls in progress, where a patch's write_end runs, and a failed completion thread."""
from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import pytest

import pybcache
from pybcache.bcache.kpatch._kpatch import PatchModule
from pybcache.bcache.cachedev import explore

from helpers.kpatch_util import BAD

pytestmark = [pytest.mark.native, pytest.mark.e2e]

MiB = 1 << 20


def _wait_for(cond, what, bound=30.0):
    """Poll cond() until true; the bound only stops a broken build from hanging the run."""
    limit = time.monotonic() + bound
    while not cond():
        assert time.monotonic() < limit, f"{what} did not happen within {bound} s"
        time.sleep(0.01)


def test_close_is_refused_while_another_thread_is_inside_a_call_and_succeeds_after():
    # write_start sleeps on the instance's wait queue until a write_end wakes it: closing then would
    # free the instance under the sleeping call (a use-after-free before the fix).
    t = pybcache.load_patch(BAD / "waits_for_end.c").tracker(MiB, hung_timeout=60.0)
    out = {}
    th = threading.Thread(target=lambda: out.setdefault("start", t.start(0, 4096)))
    th.start()
    try:
        _wait_for(lambda: t.stats()["starts"] == 1, "the start")
        with pytest.raises(RuntimeError, match="inside 1 call"):
            t.close()
        assert not t.closed
        t.end(0, 4096)  # wakes the sleeping start
    finally:
        th.join()
    assert out["start"] is True
    assert t.close() == {"leaked_bytes": 0, "leaked_allocations": 0}
    assert t.closed


def test_the_explorer_runs_a_patchs_write_end_on_a_thread_other_than_the_one_that_ran_its_start():
    # same_thread.c warns (WARN_ON) when write_end runs on a thread that ran a write_start; the explorer
    # is single-threaded, so before the fix every schedule that reached END had that report. Its END steps
    # now rotate over the four contexts, and only the inline one runs on the explorer's own thread (the
    # submitter's, as the kernel's inline completion does): exactly those schedules warn.
    patch = pybcache.load_patch(BAD / "same_thread.c")
    before = patch._module.end_counts()
    res = explore(sync=patch, writes=1, reads=1)
    ran = {c: n - before[c] for c, n in patch._module.end_counts().items()}
    assert res["finished"] and res["schedules"] > 0
    assert any(s["step"] == "end" for s in res["counterexample_steps"])
    assert all(n > 0 for n in ran.values()), ran
    assert res["report_schedules"] == ran["inline"]


def test_a_shared_object_that_is_not_a_patch_module_is_refused_and_unloaded(tmp_path):
    # A library without the module symbol: the open fails and its handle must be closed (it leaked).
    src = tmp_path / "not_a_patch.c"
    src.write_text("int pybcache_not_a_patch(void) { return 1; }\n")
    lib = tmp_path / "not_a_patch.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    with pytest.raises(ValueError, match="does not export"):
        PatchModule(str(lib))
    assert str(lib) not in Path("/proc/self/maps").read_text()
