"""Unit tests of the cached-device model: the request-path steps, the oracle and bad input."""
from __future__ import annotations

import pytest

import pybcache
from pybcache import CachedDevice
from pybcache.bcache import cachedev

pytestmark = pytest.mark.native

B = 4096
SYNCS = ("global", "page", "atomic")


def dev(sync="page", **kw):
    kw.setdefault("chunk_size", B)
    return CachedDevice(16 * B, sync=sync, **kw)


def run_race_timeline(d):
    """B.4: W invalidates, R misses and reads old data before W lands, W completes, R inserts."""
    w = d.begin_write(0, B)
    r = d.begin_read(0, B)
    assert w.step() == "start"
    assert w.step() == "invalidate"
    while r.next_step != "insert":
        r.step()
    w.step()  # land
    w.step()  # end
    r.step()  # insert (or skip, when bypassing)
    return w, r


def test_unpatched_model_caches_old_data_in_the_write_window():
    d = dev("none")
    w, r = run_race_timeline(d)
    assert r.result["versions"] == [0] and r.result["inserted"] == 1
    assert d.cache_entry(0) == ("valid", 0)
    assert d.backing_version(0) == w.version == 1
    assert d.stale_cached_blocks() == 1
    again = d.read(0, B)
    assert again["hit"] and again["stale"] and again["versions"] == [0]
    assert d.stats()["stale_reads"] == 1


@pytest.mark.parametrize("sync", SYNCS)
def test_read_miss_overlapping_active_write_bypasses_the_cache(sync):
    d = dev(sync)
    _, r = run_race_timeline(d)
    assert r.result["bypassed"] and r.result["inserted"] == 0
    assert d.stale_cached_blocks() == 0
    again = d.read(0, B)
    assert not again["stale"] and again["versions"] == [1] and again["inserted"] == 1
    s = d.stats()
    assert s["read_bypasses"] == 1 and s["stale_reads"] == 0
    assert d.tracker_stats()["starts"] == d.tracker_stats()["ends"] == 1


@pytest.mark.parametrize("check", ["entry", "before"])
@pytest.mark.parametrize("sync", SYNCS)
def test_check_at_entry_misses_a_write_that_starts_before_the_lookup(sync, check):
    d = dev(sync, check=check)
    assert d.check == "entry"
    r = d.begin_read(0, B)
    assert r.step() == "check"          # at request entry: nothing active yet
    w = d.begin_write(0, B)
    w.step(), w.step()                  # start + invalidate
    assert r.step() == "lookup"         # after the invalidation: a plain miss
    assert r.step() == "check_key"      # the node did not move since the lookup: key placed
    assert r.step() == "backing"        # old data
    w.step(), w.step()                  # land + end
    assert r.step() == "insert"
    assert r.result["inserted"] == 1 and not r.result["bypassed"] and r.result["restarts"] == 0
    assert d.stale_cached_blocks() == 1


@pytest.mark.parametrize("sync", SYNCS)
def test_check_in_the_miss_path_is_saved_by_the_check_key_restart(sync):
    d = dev(sync, check="miss")
    r = d.begin_read(0, B)
    assert r.step() == "lookup" and r.step() == "check"   # no active write yet
    seq = d.node_sequence(0)
    w = d.begin_write(0, B)
    w.step(), w.step()                                    # start + invalidate: the node moves
    assert d.node_sequence(0) == seq + 1
    assert r.step() == "check_key"                        # -EINTR: back to the lookup
    assert r.next_step == "lookup"
    assert [r.step() for _ in range(2)] == ["lookup", "check"]
    assert r.next_step == "backing"                       # the write is seen now: bypass, no check key
    r.run()
    w.run()
    assert r.result["bypassed"] and r.result["restarts"] == 1 and r.result["inserted"] == 0
    assert d.stale_cached_blocks() == 0 and d.stats()["check_key_restarts"] == 1


@pytest.mark.parametrize("sync", SYNCS)
def test_check_in_the_miss_path_without_the_restart_caches_old_data(sync):
    d = dev(sync, check="miss", restart=False)
    r = d.begin_read(0, B)
    r.step(), r.step()                  # lookup + check: nothing active
    w = d.begin_write(0, B)
    w.step(), w.step()                  # start + invalidate
    assert r.step() == "check_key"      # the node moved, but the key is placed anyway
    assert r.step() == "backing"
    w.run()
    r.run()
    assert r.result["inserted"] == 1 and r.result["restarts"] == 0
    assert d.stale_cached_blocks() == 1


def test_every_btree_update_moves_the_node_sequence():
    d = dev("page", region_blocks=1)
    r = d.begin_read(0, B)
    r.step()                            # lookup: a read-only walk
    assert d.node_sequence(0) == 0
    r.step()                            # check key insertion
    assert d.node_sequence(0) == 1
    r.run()                             # replace-insert
    assert d.node_sequence(0) == 2
    d.write(0, B)                       # invalidation
    assert d.node_sequence(0) == 3 and d.node_sequence(1) == 0


def test_invalidation_after_check_key_is_a_miss_collision():
    d = dev("none")
    r = d.begin_read(0, B)
    r.step()                            # lookup
    r.step()                            # check key placed
    r.step()                            # backing read
    w = d.begin_write(0, B)
    w.step(), w.step()                  # start + invalidate: the check key is gone
    r.step()                            # insert refused
    assert r.result["collided"] == 1 and r.result["inserted"] == 0
    assert d.stats()["miss_collisions"] == 1
    w.run()
    assert d.stale_cached_blocks() == 0


def test_hit_returns_cached_version_in_one_step():
    d = dev()
    d.write(0, 2 * B)
    d.read(0, 2 * B)
    r = d.begin_read(0, 2 * B)
    assert r.step() == "lookup" and r.done
    assert r.result == {"versions": [1, 1], "hit": True, "bypassed": False, "inserted": 0, "collided": 0,
                        "stale": False, "restarts": 0}


def test_later_write_of_overlapping_range_wins_by_version():
    d = dev()
    a, b = d.begin_write(0, 2 * B), d.begin_write(B, 2 * B)
    a.step(), b.step()
    b.run()
    a.run()
    assert [d.backing_version(i) for i in range(4)] == [1, 2, 2, 0]
    assert [d.completed_version(i) for i in range(4)] == [1, 2, 2, 0]


def test_untracked_write_under_injected_fault_reopens_the_window():
    fault = pybcache.FaultInjection(probability=1.0, times=1)
    d = dev("page", alloc_failure="untracked", fault=fault)
    w, r = run_race_timeline(d)
    assert w.untracked
    assert d.stale_cached_blocks() == 1
    assert d.tracker_stats()["faults_injected"] == 1
    assert fault.injected == 1  # the device shares the caller's injector (issue #11), no copy


@pytest.mark.parametrize("policy, pool_pages", [("hijack", 0), ("pool", 1), ("mempool", 0), ("mempool", 1)])
def test_hijack_pool_and_mempool_keep_the_write_tracked_under_injected_fault(policy, pool_pages):
    fault = pybcache.FaultInjection(probability=1.0, times=1)
    d = dev("page", alloc_failure=policy, fault=fault, pool_pages=pool_pages)
    w, r = run_race_timeline(d)
    assert not w.untracked and r.result["bypassed"]
    assert d.stale_cached_blocks() == 0


def test_steps_report_done_and_refuse_more():
    d = dev()
    w = d.begin_write(0, B)
    assert w.run() == 1 and w.done and w.next_step == "done"
    with pytest.raises(RuntimeError):
        w.step()
    r = d.begin_read(0, B)
    r.run()
    with pytest.raises(RuntimeError):
        r.step()


def test_none_read_skips_the_check_step():
    d = dev("none")
    r = d.begin_read(0, B)
    assert [r.step() for _ in range(4)] == ["lookup", "check_key", "backing", "insert"] and r.done
    assert d.tracker_stats() is None and d.tracker_memory() is None and d.tracker_counts() is None


def test_reclaim_and_tracker_counts_after_quiescence():
    d = dev("atomic")
    d.write(0, B)
    assert d.tracker_counts().tolist() == [0] * 16
    assert d.reclaim() == 1
    assert d.tracker_memory()["pages"] == 0


def test_properties_echo_the_configuration():
    d = CachedDevice(8 * B, sync="global", check="before", write_delay_ns=5, delay="yield", bounce_copy=False,
                     restart=False, granularity="page")
    assert (d.device_size, d.block_size, d.n_blocks, d.sync, d.check) == (8 * B, B, 8, "global", "entry")
    assert (d.restart, d.granularity) == (False, "page")
    assert (d.write_delay_ns, d.delay, d.bounce_copy, d.counter_bits) == (5, "yield", False, 16)
    assert "CachedDevice(" in repr(d)


@pytest.mark.parametrize("kwargs, exc, word", [
    ({"device_size": 0}, ValueError, "device_size"),
    ({"device_size": 4097}, ValueError, "device_size"),
    ({"device_size": 1.5}, TypeError, "device_size"),
    ({"device_size": B, "sync": "spin"}, ValueError, "sync"),
    ({"device_size": B, "sync": 1}, TypeError, "sync"),
    ({"device_size": B, "check": "during"}, ValueError, "check"),
    ({"device_size": B, "restart": 1}, TypeError, "restart"),
    ({"device_size": B, "granularity": "block"}, ValueError, "granularity"),
    ({"device_size": B, "block_size": 1000}, ValueError, "block_size"),
    ({"device_size": B, "region_blocks": 3}, ValueError, "region_blocks"),
    ({"device_size": B, "write_delay_ns": -1}, ValueError, "write_delay_ns"),
    ({"device_size": B, "delay": "sleep"}, ValueError, "delay"),
    ({"device_size": B, "bounce_copy": 1}, TypeError, "bounce_copy"),
    ({"device_size": B, "chunk_size": 1000}, ValueError, "chunk_size"),
    ({"device_size": B, "alloc_failure": "retry"}, ValueError, "alloc_failure"),
    ({"device_size": B, "fault": 0.5}, TypeError, "fault"),
])
def test_bad_construction_arguments_name_the_argument(kwargs, exc, word):
    size = kwargs.pop("device_size")
    with pytest.raises(exc, match=word):
        CachedDevice(size, **kwargs)


@pytest.mark.parametrize("offset, length, exc, word", [
    (-B, B, ValueError, "offset"),
    (1, B, ValueError, "offset"),
    (0, 0, ValueError, "length"),
    (0, 100, ValueError, "length"),
    (15 * B, 2 * B, ValueError, "device_size"),
    (0.0, B, TypeError, "offset"),
    (0, True, TypeError, "length"),
    ("0", B, TypeError, "offset"),
])
def test_bad_ranges_raise_and_change_nothing(offset, length, exc, word):
    d = dev()
    for call in (d.write, d.read, d.begin_write, d.begin_read):
        with pytest.raises(exc, match=word):
            call(offset, length)
    assert d.stats()["reads"] == d.stats()["writes"] == 0
    assert d.tracker_stats()["starts"] == 0


def test_read_longer_than_64_blocks_is_refused():
    d = CachedDevice(128 * B, sync="none")
    with pytest.raises(ValueError, match="64 blocks"):
        d.read(0, 65 * B)
    d.write(0, 65 * B)  # writes have no such limit


def test_bad_block_index_is_refused():
    d = dev()
    for call in (d.cache_entry, d.backing_version, d.completed_version):
        with pytest.raises(ValueError, match="block"):
            call(16)
        with pytest.raises(TypeError, match="block"):
            call(None)


def test_pending_operations_cannot_be_built_directly():
    from pybcache.bcache.cachedev import PendingRead, PendingWrite
    with pytest.raises(TypeError):
        PendingWrite()
    with pytest.raises(TypeError):
        PendingRead()


# -- read-check granularity -------------------------------------------------------------------------------

def _read_during_write(granularity, write_block, read_block, **kw):
    d = CachedDevice(64 * B, sync="page", chunk_size=B, granularity=granularity, **kw)
    w = d.begin_write(write_block * B, B)
    w.step(), w.step()                  # start + invalidate: in flight
    res = d.read(read_block * B, B)
    w.run()
    return res


def test_chunk_granularity_bypasses_only_reads_of_the_written_chunk():
    assert _read_during_write("chunk", 5, 5)["bypassed"]
    assert not _read_during_write("chunk", 5, 9)["bypassed"]


def test_page_granularity_bypasses_any_read_on_the_same_tracking_page():
    # 4 KiB chunks, 16-bit counters: one tracking page covers 2048 chunks, so all 64 blocks here
    assert _read_during_write("page", 5, 9)["bypassed"]
    assert _read_during_write("page", 5, 63)["bypassed"]


def test_page_granularity_stops_at_the_page_boundary():
    # 32-bit counters: 1024 chunks per page; a write on page 0 does not make a read on page 1 bypass
    d = CachedDevice(2048 * B, sync="atomic", counter_bits=32, chunk_size=B, granularity="page")
    w = d.begin_write(0, B)
    w.step(), w.step()
    assert d.read(1023 * B, B)["bypassed"] and not d.read(1024 * B, B)["bypassed"]
    w.run()


# -- a write's start waits at most wait_timeout, interruptibly, and is undone exactly (review 5) ---------

@pytest.mark.parametrize("sync", SYNCS)
def test_a_write_whose_start_waits_past_wait_timeout_is_undone_and_not_run(sync):
    d = dev(sync, counter_max=1, wait_timeout=0.05)
    held = d.begin_write(B, B)                 # chunk 1 at its maximum 1
    assert held.step() == "start"
    with pytest.raises(TimeoutError, match=r"write of \[0, 8192\) .* at chunk 1 \(byte offset 4096\) for room "
                                           r"in its counter .* undone exactly and the write was not run"):
        d.write(0, 2 * B)                      # counts chunk 0, then waits on chunk 1
    assert list(d.tracker_counts()[:3]) == [0, 1, 0]
    assert d.backing_version(0) == 0 and d.completed_version(0) == 0
    assert d.stats()["writes"] == 1 and d.tracker_stats()["underflows"] == 0
    held.run()
    assert d.write(0, 2 * B) > 0 and not d.tracker_counts().any()


@pytest.mark.parametrize("sync", SYNCS)
def test_a_pending_writes_start_that_times_out_leaves_the_write_done_and_unrun(sync):
    d = dev(sync, counter_max=1, wait_timeout=0.05)
    d.read(0, B)                               # block 0 cached
    assert d.cache_entry(0)[0] == "valid"
    held = d.begin_write(B, B)
    held.step()
    w = d.begin_write(0, 2 * B)
    with pytest.raises(TimeoutError, match="at chunk 1"):
        w.step()
    assert w.timed_out and w.done and w.next_step == "done"
    with pytest.raises(RuntimeError):
        w.step()
    assert list(d.tracker_counts()[:3]) == [0, 1, 0]
    assert d.cache_entry(0)[0] == "valid"      # never invalidated: the write did not run


def test_without_a_bound_a_waiting_write_is_interruptible_and_undone():
    import signal

    class Interrupted(Exception):
        pass

    def on_alarm(signum, frame):
        raise Interrupted

    d = dev("page", counter_max=1, wait_timeout=None)
    held = d.begin_write(B, B)
    held.step()
    old = signal.signal(signal.SIGALRM, on_alarm)
    try:
        with pytest.raises(Interrupted):        # armed inside: an early alarm is still expected here
            signal.setitimer(signal.ITIMER_REAL, 0.2)
            d.write(0, 2 * B)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert list(d.tracker_counts()[:3]) == [0, 1, 0] and d.backing_version(0) == 0


def test_wait_timeout_is_validated_like_the_trackers_and_defaults_to_ten_seconds():
    assert dev().wait_timeout == 10.0 and dev(wait_timeout=None).wait_timeout is None
    with pytest.raises(ValueError, match="wait_timeout"):
        dev(wait_timeout=0)
    with pytest.raises(TypeError, match="wait_timeout"):
        dev(wait_timeout="1")
    with pytest.raises(ValueError, match="counter_max"):
        dev(counter_max=0)


def test_a_tiny_real_race_returns_the_documented_keys():
    out = cachedev.race(seconds=0.01, threads=2, region_blocks=8)
    assert out["ops"] == out["reads"] + out["writes"] > 0 and out["stale_reads"] == 0
    assert out["config"]["sync"] == "page" and out["kernel_reports"] == {}


def test_real_explore_prefixes_cover_the_whole_search():
    prefixes = cachedev.explore_prefixes(2, writes=1, reads=1)
    assert prefixes == [(0, 0), (0, 1), (1, 1)]
    whole = cachedev.explore(writes=1, reads=1)
    assert sum(cachedev.explore(writes=1, reads=1, prefix=p)["schedules"] for p in prefixes) == whole["schedules"]


def test_a_tiny_real_fio_returns_a_row_per_variant():
    out = cachedev.fio(size=1 << 20, seconds=0.02, jobs=1, inflight=1, write_size=16384, variants=("none", "page"))
    assert [r["variant"] for r in out["rows"]] == ["none", "page"]
    assert out["rows"][0]["ns_per_io_vs_none"] == 1.0 and out["rows"][1]["stale_reads"] == 0


def test_the_models_default_policy_is_mempool_with_one_reserve_page_and_other_policies_have_none():
    from pybcache.bcache.cachedev import CachedDevice, DEFAULT_ALLOC_FAILURE, DEFAULT_POOL_PAGES
    assert (DEFAULT_ALLOC_FAILURE, DEFAULT_POOL_PAGES) == ("mempool", 1)
    for sync in ("page", "none"):
        d = CachedDevice(64 * B, sync=sync)
        assert (d.alloc_failure, d.pool_pages) == ("mempool", 1)
    assert CachedDevice(64 * B, alloc_failure="hijack").pool_pages == 0
    assert CachedDevice(64 * B, alloc_failure="pool").pool_pages == 1
    assert CachedDevice(64 * B, pool_pages=0).pool_pages == 0
    assert CachedDevice(64 * B).tracker_memory()["page_bytes"] == 4096  # the reserve page, counted
