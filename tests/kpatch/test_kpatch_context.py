"""The shim's kernel context checks fire on purpose-built bad patches, and stay quiet on the examples."""
from __future__ import annotations

import threading

import pytest

import pybcache
from helpers.kpatch_util import BAD, EXAMPLES

pytestmark = [pytest.mark.native, pytest.mark.e2e]

GiB = pybcache.GiB
KiB = pybcache.KiB


@pytest.fixture(autouse=True)
def cache_dir(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("PYBCACHE_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "kpatch-cache"))


def kinds(t):
    return sorted(r["kind"] for r in t.kernel_reports())


def test_a_sleeping_allocation_under_a_spinlock_is_reported_as_might_sleep():
    t = pybcache.load_patch(BAD / "sleep_under_lock.c").tracker(GiB)
    t.start(0, 4096)
    t.start(0, 4096)
    (r,) = t.kernel_reports()
    assert r["kind"] == "might_sleep" and r["operation"] == "write_start" and r["count"] == 2
    assert r["lock"] == "big_lock" and r["locks_held"] == 1 and r["irqs_disabled"]
    assert r["message"].startswith("BUG: sleeping function called from invalid context at ")
    assert "sleep_under_lock.c" in r["message"] and "big_lock held since" in r["message"]


def test_a_lock_taken_in_write_end_and_with_interrupts_on_elsewhere_is_inconsistent_lock_state():
    t = pybcache.load_patch(BAD / "irq_unsafe_lock.c").tracker(GiB)
    t.start(0, 4096)
    assert kinds(t) == []                      # one usage alone is consistent
    t.end(0, 4096)
    (r,) = t.kernel_reports()
    assert r["kind"] == "inconsistent_lock_state" and r["operation"] == "write_end" and r["hardirq"]
    assert "inconsistent {HARDIRQ-ON-W} -> {IN-HARDIRQ-W} usage." in r["message"]
    assert r["lock"] == "count_lock"


def test_double_unlock_and_unlock_by_another_thread_are_reported():
    t = pybcache.load_patch(BAD / "unlock_bugs.c").tracker(GiB)
    t.start(0, 4096)                           # unlocks lock_a twice
    assert kinds(t) == ["double_unlock"]
    t.start(0, 64 * KiB)                       # returns holding lock_b ...
    done = threading.Thread(target=t.end, args=(0, 64 * KiB))   # ... that a completion thread releases
    done.start()
    done.join(60)
    assert not done.is_alive()
    assert kinds(t) == ["double_unlock", "lock_held_at_return", "unlock_not_held"]
    by_kind = {r["kind"]: r for r in t.kernel_reports()}
    assert by_kind["unlock_not_held"]["lock"] == "lock_b" and by_kind["unlock_not_held"]["operation"] == "write_end"
    assert by_kind["double_unlock"]["message"].startswith("BUG: spinlock already unlocked: lock_a")


def test_fault_injection_fails_plain_allocations_and_never_nofail_ones():
    fault = pybcache.FaultInjection(probability=1.0)
    t = pybcache.load_patch(BAD / "alloc_probe.c").tracker(GiB, fault=fault)
    assert t.start(0, 4096) is False
    s = t.stats()
    assert s["alloc_failures"] == 1 == fault.injected
    assert s["nofail_allocations"] == 1
    assert t.memory()["page_bytes"] == 200     # the __GFP_NOFAIL allocation only
    t.end(0, 4096)
    assert t.memory()["page_bytes"] == 0


def test_init_and_exit_run_without_fault_injection():
    fault = pybcache.FaultInjection(probability=1.0)
    t = pybcache.load_patch(EXAMPLES / "v3_proposal.c").tracker(GiB, fault=fault)
    assert t.memory()["directory_bytes"] > 0 and fault.injected == 0
    assert t.close() == {"leaked_bytes": 0, "leaked_allocations": 0}


def test_memory_returns_to_its_idle_figure_after_every_end():
    t = pybcache.load_patch(BAD / "alloc_probe.c").tracker(GiB)
    idle = t.memory()["total_bytes"]
    for i in range(10):
        t.start(i * 4096, 4096)
    assert t.memory()["total_bytes"] == idle + 10 * 300 and t.memory()["pages"] == 20
    for i in range(10):
        t.end(i * 4096, 4096)
    m = t.memory()
    assert m["total_bytes"] == idle and m["pages"] == 0 and m["peak_bytes"] == idle + 3000


def test_warn_on_returns_its_condition_and_is_reported():
    t = pybcache.load_patch(BAD / "alloc_probe.c").tracker(GiB)
    assert t.is_active(0, 4096) is False
    assert kinds(t) == []
    assert t.is_active(0, 8192) is True        # WARN_ON(bio_sectors > 8) returned true
    (r,) = t.kernel_reports()
    assert r["kind"] == "warning" and r["message"].startswith("WARNING: at ") and t.stats()["warnings"] == 1


@pytest.mark.parametrize("name", ["v2_posted", "v3_proposal", "v3_atomic"])
def test_the_examples_break_no_context_rule(name):
    t = pybcache.load_patch(EXAMPLES / f"{name}.c").tracker(
        200 * GiB, fault=pybcache.FaultInjection(probability=0.5, seed=3))
    for i in range(50):
        t.start(i * 3 * GiB, 128 * KiB)
        t.is_active(i * GiB, 4096)
    for i in range(50):
        t.end(i * 3 * GiB, 128 * KiB)
    assert t.kernel_reports() == []
