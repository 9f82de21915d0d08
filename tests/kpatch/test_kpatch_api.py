"""The shim's second API group (pybcache/kpatch_ext.h) keeps the kernel's semantics, each probed by a
purpose-built patch: tests/data/mempool_probe.c (mempool_t) and tests/data/api_probe.c (the rest; the write's
GiB index picks the case)."""
from __future__ import annotations

import re
import threading
import time

import pytest

import pybcache
from helpers.kpatch_util import BAD, EXAMPLES, V3_MEMPOOL_EDITS, edit_proposal, write_v3_mempool

pytestmark = [pytest.mark.native, pytest.mark.e2e]

GiB = pybcache.GiB


@pytest.fixture(autouse=True)
def cache_dir(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("PYBCACHE_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "kpatch-cache"))


@pytest.fixture(scope="module")
def mempool_patch(tmp_path_factory):
    import os
    os.environ.setdefault("PYBCACHE_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "kpatch-cache"))
    return pybcache.load_patch(BAD / "mempool_probe.c")


@pytest.fixture(scope="module")
def api_patch(tmp_path_factory):
    import os
    os.environ.setdefault("PYBCACHE_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "kpatch-cache"))
    # the probe's write_end picks its case from the bio's sector, and several tests end writes they never started:
    # it gets the bio intact (a call site that saved an unconsumed copy), not consumed as bcache hands it
    return pybcache.load_patch(BAD / "api_probe.c", end_bio="intact")


def log(t):
    return [r["message"] for r in t.kernel_log()]


def reports(t):
    return {r["kind"]: r for r in t.kernel_reports()}


def on_thread(fn, *args):
    """Run fn on a thread of its own (as the drivers run write_end) and return its result."""
    out = {}
    th = threading.Thread(target=lambda: out.setdefault("r", fn(*args)))
    th.start()
    th.join(60)
    assert not th.is_alive()
    return out.get("r")


# -- mempool -------------------------------------------------------------------------------------------


def test_mempool_hands_out_its_reserve_when_the_allocator_fails_then_wakes_a_waiter_with_a_freed_element(mempool_patch):
    # Every allocation of an operation fails: the pool's allocator can never give an element, so whatever
    # mempool_alloc returns comes from the reserve (min_nr 1).
    fault = pybcache.FaultInjection(probability=1.0)
    t = mempool_patch.tracker(32 * GiB, fault=fault, hung_timeout=30.0)
    assert t.start(0, 4096) is False                   # slot 0: the allocator failed once, the reserve served
    assert log(t) == ["alloc 0 1 curr=0"]
    assert t.stats()["alloc_failures"] == 1            # no reclaim-less retry needed: the reserve had one
    out = {}
    waiter = threading.Thread(target=lambda: out.setdefault("r", t.start(4096, 4096)))   # slot 1: reserve empty
    waiter.start()
    deadline = time.monotonic() + 30
    while t.stats()["alloc_failures"] < 3 and time.monotonic() < deadline:   # no-reclaim try, full-mask try
        time.sleep(0.005)
    assert t.stats()["alloc_failures"] >= 3 and waiter.is_alive()   # both tries failed: it waits (never NULL)
    t.end(0, 4096)                                     # slot 0's element goes back to the reserve ...
    waiter.join(30)
    assert not waiter.is_alive() and out["r"] is False
    # ... and the waiter got that element. The end logs after mempool_free has woken the waiter, so the two lines
    # come in either order and the end reads curr_nr before (1) or after (0) the waiter took the element
    rest = log(t)[1:]
    assert "alloc 1 1 curr=0" in rest and sorted(rest) in (["alloc 1 1 curr=0", "free 0 curr=1"],
                                                            ["alloc 1 1 curr=0", "free 0 curr=0"]), rest
    t.end(4096, 4096)
    assert t.close() == {"leaked_bytes": 0, "leaked_allocations": 0}


def test_mempool_alloc_with_a_non_sleeping_mask_returns_null_once_the_reserve_is_empty(mempool_patch):
    t = mempool_patch.tracker(32 * GiB, fault=pybcache.FaultInjection(probability=1.0))
    t.start(0, 4096)                                   # takes the reserve
    t.start(GiB, 4096)                                 # GFP_NOWAIT: allocator fails, reserve empty: NULL
    assert log(t) == ["alloc 0 1 curr=0", "nowait NULL curr=0"]
    assert t.stats()["alloc_failures"] == 2            # one try only: no full-mask retry without reclaim
    t.end(0, 4096)
    t.close()


def test_mempool_free_refills_the_reserve_only_below_min_nr(mempool_patch):
    t = mempool_patch.tracker(32 * GiB)                # no faults: elements come from the allocator
    t.start(0, 4096)
    t.start(4096, 4096)
    assert log(t) == ["alloc 0 0 curr=1", "alloc 1 0 curr=1"]
    base = t.stats()["frees"]
    t.end(0, 4096)                                     # the reserve is full (1 = min_nr): kfree'd
    assert t.stats()["frees"] == base + 1 and log(t)[-1] == "free 0 curr=1"
    t.end(4096, 4096)
    assert t.close() == {"leaked_bytes": 0, "leaked_allocations": 0}


def test_mempool_refill_after_a_drain_goes_back_to_the_reserve_not_the_allocator(mempool_patch):
    fault = pybcache.FaultInjection(probability=1.0, times=1)   # the first try fails: the reserve serves
    t = mempool_patch.tracker(32 * GiB, fault=fault)
    t.start(0, 4096)
    frees = t.stats()["frees"]
    t.end(0, 4096)
    assert log(t) == ["alloc 0 1 curr=0", "free 0 curr=1"] and t.stats()["frees"] == frees   # kept, not freed
    t.close()


def test_a_mempool_wait_nothing_can_end_is_reported_hung_in_mempool_alloc(mempool_patch):
    t = mempool_patch.tracker(32 * GiB, fault=pybcache.FaultInjection(probability=1.0), hung_timeout=1.0)
    t.start(0, 4096)                                   # the reserve's only element stays in flight
    with pytest.raises(TimeoutError, match="blocked for more than the hung bound in mempool_alloc"):
        t.start(4096, 4096)


def test_mempool_alloc_that_may_sleep_under_a_spinlock_is_might_sleep(mempool_patch):
    t = mempool_patch.tracker(32 * GiB)
    t.start(2 * GiB, 4096)
    r = reports(t)["might_sleep"]
    assert "mempool_alloc" in r["message"] and r["lock"] == "probe_lock" and r["operation"] == "write_start"


# -- the rest ------------------------------------------------------------------------------------------


def run(t, gib, end=True):
    t.start(gib * GiB, 4096)
    if end:
        on_thread(t.end, gib * GiB, 4096)


def test_cached_dev_has_the_disk_capacity_data_offset_and_fields_the_patch_embeds(api_patch):
    t = api_patch.tracker(32 * GiB + 1)
    sectors = 32 * GiB // 512 + 1
    assert log(t)[0] == f"capacity {sectors} bdev {sectors} offset 0 name bcache0 embedded 0"   # zeroed
    run(t, 0)
    assert log(t)[1].endswith(" magic 77")             # the embedded field init wrote, seen by write_start
    assert reports(t) == {}
    t.close()


def test_a_mutex_taken_in_interrupt_context_is_sleeping_in_atomic_context(api_patch):
    t = api_patch.tracker(32 * GiB)
    run(t, 1)
    r = reports(t)["might_sleep"]
    assert r["operation"] == "write_end" and r["hardirq"] and "mutex_lock" in r["message"]
    assert r["message"].startswith("BUG: sleeping function called from invalid context")
    t.close()


def test_a_mutex_held_at_return_and_released_by_another_thread_is_reported(api_patch):
    t = api_patch.tracker(32 * GiB)
    run(t, 15)
    rs = reports(t)
    assert "with a mutex held (probe_mutex" in rs["lock_held_at_return"]["message"]
    assert rs["mutex_wrong_owner"]["operation"] == "write_end"
    t.close()


def test_rwlock_read_in_irq_is_consistent_with_reads_and_irqsave_writes_not_with_plain_writes(api_patch):
    t = api_patch.tracker(32 * GiB)
    run(t, 2)                                          # read in process context and in hard-irq
    run(t, 4)                                          # written with interrupts saved, read in hard-irq
    assert reports(t) == {}
    run(t, 3)                                          # written with interrupts on, read in hard-irq
    r = reports(t)["inconsistent_lock_state"]
    assert r["lock"] == "write_then_irq" and "{HARDIRQ-ON-W} -> {IN-HARDIRQ-R}" in r["message"]
    t.close()


def test_preempt_disable_and_spin_lock_bh_are_atomic_context(api_patch):
    t = api_patch.tracker(32 * GiB)
    run(t, 5)
    assert reports(t)["might_sleep"]["locks_held"] == 1          # the preempt count, no lock
    t2 = api_patch.tracker(32 * GiB)
    run(t2, 8)
    r = reports(t2)["might_sleep"]
    assert r["lock"] == "bh_lock" and not r["irqs_disabled"]     # _bh leaves interrupts on
    t.close()
    t2.close()


def test_local_bh_enable_in_hard_irq_context_warns(api_patch):
    t = api_patch.tracker(32 * GiB)
    run(t, 9)
    assert reports(t)["warning"]["operation"] == "write_end"
    t.close()


def test_per_cpu_counters_sum_over_cpus_and_smp_processor_id_in_preemptible_code_is_reported(api_patch):
    t = api_patch.tracker(32 * GiB)
    for _ in range(3):
        run(t, 6, end=False)
    on_thread(t.start, 6 * GiB, 4096)                  # another thread: another simulated CPU
    t.is_active(6 * GiB, 4096)
    assert log(t)[-1] == "percpu 4 4"                  # DEFINE_PER_CPU and alloc_percpu, every CPU summed
    assert reports(t) == {}                            # get_cpu: preemption disabled
    run(t, 7, end=False)
    r = reports(t)["preemptible_cpu_access"]
    assert r["message"].startswith("BUG: using smp_processor_id() in preemptible [00000000] code")
    t.close()


def test_seqlock_reader_sees_the_writers_pair_and_an_even_count(api_patch):
    t = api_patch.tracker(32 * GiB)
    run(t, 10, end=False)
    run(t, 10, end=False)
    t.is_active(10 * GiB, 4096)
    assert log(t)[-1] == "pair 2 2 seq 4"
    assert reports(t) == {}
    t.close()


def test_wait_event_timeout_and_io_schedule_timeout_return_what_the_kernel_returns(api_patch):
    t = api_patch.tracker(32 * GiB)
    run(t, 11, end=False)
    run(t, 12, end=False)
    # false at the timeout: 0; true at once: the whole timeout left; a running task does not sleep; a
    # sleeping one nobody wakes sleeps out its timeout
    assert log(t)[1:] == ["timeout false 0", "timeout true 1000", "running 1000", "sleeping 0"]
    t.close()


def test_pages_and_kmem_cache_objects_are_accounted_injected_and_constructed(api_patch):
    t = api_patch.tracker(32 * GiB)
    idle = t.memory()["page_bytes"]
    t.start(13 * GiB, 4096)
    assert t.memory()["page_bytes"] == idle + 4096 and log(t)[-1] == "page allocated"
    on_thread(t.end, 13 * GiB, 4096)
    run(t, 14)
    assert log(t)[-1] == "object c0ffee"               # the constructor ran
    assert t.memory()["page_bytes"] == idle
    t.close()
    fault = pybcache.FaultInjection(probability=1.0)
    t = api_patch.tracker(32 * GiB, fault=fault)
    t.start(13 * GiB, 4096)
    t.start(14 * GiB, 4096)
    assert log(t)[-2:] == ["page NULL", "object 0"] and fault.injected == 2
    t.close()


def test_kmem_cache_destroy_with_an_object_live_leaves_it_allocated(api_patch):
    t = api_patch.tracker(32 * GiB)
    t.start(14 * GiB, 4096)                            # an object never freed
    # exit destroys the cache (warning, as mm/slab_common.c does); the object stays, counted as leaked
    assert t.close() == {"leaked_bytes": 48, "leaked_allocations": 1}


def test_the_examples_still_load_with_the_fuller_cached_dev():
    for name in ("v2_posted.c", "v3_proposal.c", "v3_atomic.c"):
        t = pybcache.load_patch(EXAMPLES / name).tracker(GiB)
        t.start(0, 4096)
        assert t.is_active(0, 4096)
        t.end(0, 4096)
        assert t.close() == {"leaked_bytes": 0, "leaked_allocations": 0}


@pytest.mark.xdist_group("native-threads")
def test_a_tracker_built_on_the_shims_mempool_passes_the_battery(tmp_path):
    # the proposal with a two-page mempool reserve and mempool_alloc(GFP_NOIO), which waits when the reserve is
    # empty and never returns NULL, under the battery's injected faults (generated from the proposal now:
    # helpers/kpatch_util.py, V3_MEMPOOL_EDITS)
    from pybcache.bcache.kpatch.check import check_patch
    result = check_patch(write_v3_mempool(tmp_path), seconds=1.0,
                         checks=["semantics", "explore", "overflow", "balance", "context"])
    failed = {c.name: c.detail for c in result.checks if not c.passed}
    assert result.passed and not failed, failed
    # every check that drives the pool says how many reserve elements it used: the single-threaded semantics
    # check (seeded faults: the same count every run) took some when mempool_alloc's first, non-retrying try
    # failed; the overflow check's writes on one chunk never allocate past the first page
    by = {c.name: c.detail for c in result.checks}
    used = {name: int(m.group(1).replace(",", "")) for name in ("semantics", "overflow", "balance", "context")
            if (m := re.search(r"([\d,]+) mempool reserve elements used", by[name]))}
    assert set(used) == {"semantics", "overflow", "balance", "context"}, by
    assert used["semantics"] > 0 and used["overflow"] == 0, used


def test_the_mempool_variant_is_the_proposal_with_its_edits_and_a_stale_edit_is_an_error():
    source = edit_proposal(V3_MEMPOOL_EDITS)
    assert "kzalloc" not in source and "bypass_granularity" not in source
    for call in ("mempool_create_kmalloc_pool(2, PAGE_SIZE)", "mempool_alloc(t->page_pool, GFP_NOIO)",
                 "mempool_free(pg->counters, pool)", "mempool_destroy(t->page_pool)", '.name = "v3-mempool"'):
        assert source.count(call) == 1, call
    with pytest.raises(ValueError, match="'bypass_init'.*not in it"):
        edit_proposal([("bypass_init", "mempool_create", "")])   # the proposal itself has no pool
    with pytest.raises(ValueError, match="'no_such_function' is not defined"):
        edit_proposal([("no_such_function", "x", "y")])


def test_a_mutex_waiter_sleeps_until_the_holder_releases_it(api_patch):
    t = api_patch.tracker(32 * GiB, hung_timeout=30.0)
    t.start(15 * GiB, 4096)                            # returns holding probe_mutex
    out = {}
    waiter = threading.Thread(target=lambda: out.setdefault("r", t.start(0, 4096)))   # mutex_lock: waits
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive() and log(t)[-1].startswith("capacity")   # not through mutex_lock yet
    on_thread(t.end, 15 * GiB, 4096)                   # released (by another thread: reported)
    waiter.join(30)
    assert not waiter.is_alive() and log(t)[-1].startswith("mutex counter ")   # (a static: shared count)
    t.close()


def test_a_mutex_nobody_releases_is_a_hung_task_in_mutex_lock(api_patch):
    t = api_patch.tracker(32 * GiB, hung_timeout=1.0)
    t.start(15 * GiB, 4096)                            # returns holding probe_mutex (this thread)
    out = {}

    def other():
        try:
            t.start(0, 4096)
        except TimeoutError as e:
            out["e"] = str(e)

    on_thread(other)                                   # another thread: it waits, nobody releases
    assert "blocked for more than the hung bound in mutex_lock" in out["e"]
    release_probe_mutex(api_patch)


def release_probe_mutex(patch):
    """probe_mutex is static (shared by every tracker of the module): release it through a fresh tracker's
    write_end, so that the next test finds it free."""
    t = patch.tracker(32 * GiB)
    on_thread(t.end, 15 * GiB, 4096)
    t.close()


def test_a_mutex_taken_twice_by_its_holder_is_recursive_locking(api_patch):
    t = api_patch.tracker(32 * GiB)
    t.start(15 * GiB, 4096)
    with pytest.raises(RuntimeError, match="possible recursive locking detected: probe_mutex"):
        t.start(0, 4096)                               # the same thread: it would wait for itself
    release_probe_mutex(api_patch)


def test_a_seqcount_reader_facing_a_writer_that_never_ends_is_a_lockup(api_patch):
    t = api_patch.tracker(32 * GiB, hung_timeout=1.0)
    run(t, 16, end=False)
    assert reports(t) == {}                            # the writer had preemption disabled
    with pytest.raises(TimeoutError, match="soft lockup: a reader of &left_odd spun"):
        t.is_active(16 * GiB, 4096)


def test_an_rwlock_written_and_kept_is_reported_at_return_and_its_reader_locks_up(api_patch):
    t = api_patch.tracker(32 * GiB, hung_timeout=1.0)
    run(t, 17, end=False)
    assert "with an rwlock held (left_held" in reports(t)["lock_held_at_return"]["message"]
    out = {}

    def reader():
        try:
            t.is_active(17 * GiB, 4096)
        except TimeoutError as e:
            out["e"] = str(e)

    on_thread(reader)
    assert "BUG: rwlock lockup suspected: left_held not acquired" in out["e"]
