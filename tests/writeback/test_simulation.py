"""The simulation the writeback experiments run on (``pybcache/writeback/simulation.py``): bandwidth sharing,
the direct writer, the dirtying tasks (buffered overwriter, cgroup workloads) and the tick loop, on tiny
scenarios (each test well under half a second)."""
from __future__ import annotations

import random
import re
from types import SimpleNamespace

import pytest

from helpers.writeback_recorder import _Recorder
from pybcache.validate import range_text
from pybcache.writeback import simulation
from pybcache.writeback.experiment import Scenario, run_once
from pybcache.writeback.jiffies import SimulatedClock, MonotonicClock, WritebackTunables
from pybcache.writeback.model import GiB, KiB, MiB, PAGE_SIZE, Throttle, WritebackModel
from pybcache.writeback.workqueue import IOStream
from pybcache.writeback.simulation import (BufferedOverwriter, CgroupWorkload, DeviceModel, DirectWriter, Simulation,
                                           share_bandwidth)


# A scenario small enough for a run in tens of milliseconds that still throttles its memcgs (a small
# memory.max, a high op rate), so the two mechanisms differ: the baseline's foreign flushes write the
# background file, the series' only the bdev mapping.
TINY = Scenario(foreground_total=256 * MiB, cgroups=2, background_file_size=16 * MiB, dirtyable_memory=64 * MiB,
                memory=1 * GiB, cgroup_memory_max=1 * MiB, cgroup_ops_rate=500.0)


def _message(name: str, lo, hi=None, *, open_low: bool = False) -> str:
    return "^" + re.escape(f"{name} must be in {range_text(lo, hi, open_low=open_low)}")


def test_bandwidth_is_shared_by_weight_and_a_satisfied_streams_leftover_goes_to_the_rest():
    assert share_bandwidth(100.0, [3.0, 1.0], [1000.0, 1000.0]) == pytest.approx([75.0, 25.0])
    assert share_bandwidth(100.0, [3.0, 1.0], [10.0, 1000.0]) == pytest.approx([10.0, 90.0])
    # two rounds of leftovers: a takes 10, then b its 30, then c the rest
    assert share_bandwidth(120.0, [1.0, 1.0, 1.0], [10.0, 30.0, 500.0]) == pytest.approx([10.0, 30.0, 80.0])
    # a stream without demand or weight gets nothing, and less demand than capacity leaves capacity over
    assert share_bandwidth(100.0, [0.0, 1.0, 5.0], [50.0, 20.0, 0.0]) == [0.0, 20.0, 0.0]
    assert share_bandwidth(100.0, [], []) == []
    assert share_bandwidth(0.0, [1.0], [5.0]) == [0.0]
    # exactly the demand is satisfied (not offered more)
    assert share_bandwidth(100.0, [1.0, 1.0], [50.0, 50.0]) == [50.0, 50.0]
    assert share_bandwidth(1e-10, [1.0], [5.0]) == [0.0]
    # small figures are bytes like any others: a demand under one byte, a capacity under one byte
    assert share_bandwidth(100.0, [1.0], [0.5]) == [0.5]
    assert share_bandwidth(0.5, [1.0, 1.0], [5.0, 5.0]) == [0.25, 0.25]


def test_a_direct_writer_rounds_up_to_whole_blocks_and_keeps_iodepth_in_flight():
    w = DirectWriter(10 * 4096 + 1, 4096, 4)
    assert w.total_requests == 11 and w.total_bytes == 11 * 4096
    assert (w.block_size, w.iodepth) == (4096, 4)
    assert (w.served, w.completed, w.submitted, w.latency_sum, w.completion_time) == (0.0, 0, 0, 0.0, None)
    assert w.weight() == 0.0 and w.mean_latency == 0.0 and not w.done and w.demand() == 11 * 4096
    w.start(2.0)
    assert w.start_time == 2.0 and w.submitted == 4 and w.weight() == 4 * 4096.0
    small = DirectWriter(2 * 4096, 4096, 8)
    small.start(0.0)
    assert small.submitted == 2
    assert DirectWriter(1, 1, 1 << 20).total_bytes == 1


def test_a_direct_writers_requests_complete_in_order_at_interpolated_times():
    w = DirectWriter(4 * 100, 100, 2)
    w.start(0.0)
    w.deliver(0.0, 0.0, 1.0)
    w.deliver(-5.0, 0.0, 1.0)
    assert w.served == 0.0 and w.completed == 0
    w.deliver(1.0, 0.0, 1.0)
    assert w.served == 1.0
    w.served = 0.0
    w.deliver(150.0, 0.0, 1.0)          # request 1 completes at 100/150 of the tick, request 3 is submitted
    assert w.completed == 1 and w.submitted == 3 and w.served == 150.0
    assert w.latency_sum == pytest.approx(100 / 150)
    assert w.weight() == 200.0 and w.demand() == 250.0
    w.deliver(150.0, 1.0, 2.0)          # 150 -> 300: requests 2 (at 200) and 3 (at 300) complete
    assert w.completed == 3 and w.submitted == 4
    t2, t3 = 1.0 + 2.0 * 50 / 150, 1.0 + 2.0 * 150 / 150
    assert w.latency_sum == pytest.approx(100 / 150 + t2 - 0.0 + t3 - 100 / 150)
    w.deliver(1000.0, 3.0, 1.0)         # capped at the total: the last completes at 100/1000 of the tick
    assert w.done and w.served == 400.0 and w.completion_time == pytest.approx(3.1)
    assert w.demand() == 0.0 and w.mean_latency == pytest.approx(w.latency_sum / 4)
    w.deliver(1000.0, 4.0, 1.0)
    assert w.completed == 4 and w.served == 400.0


def test_a_direct_writer_completes_a_request_a_rounding_error_short_of_its_boundary():
    w = DirectWriter(200, 100, 1)
    w.start(0.0)
    w.deliver(100 - 1e-7, 0.0, 1.0)
    assert w.completed == 1 and w.latency_sum == pytest.approx(1.0)
    w = DirectWriter(200, 100, 1)
    w.start(0.0)
    w.deliver(100 - 1e-3, 0.0, 1.0)
    assert w.completed == 0


@pytest.mark.parametrize("make, exc, message", [
    (lambda: DirectWriter(0, 1, 1), ValueError, _message("total_bytes", 1)),
    (lambda: DirectWriter(1, 0, 1), ValueError, _message("block_size", 1)),
    (lambda: DirectWriter(1, 1, 0), ValueError, _message("iodepth", 1, 1 << 20)),
    (lambda: DirectWriter(1, 1, (1 << 20) + 1), ValueError, _message("iodepth", 1, 1 << 20)),
    (lambda: DeviceModel(0.0, 1, 1, 1), ValueError, _message("bandwidth", 0, open_low=True)),
    (lambda: DeviceModel(1.0, 0, 1, 1), ValueError, _message("writeback_request_bytes", 1)),
    (lambda: DeviceModel(1.0, 1, 0, 1), ValueError, _message("wbt_normal_depth", 1)),
    (lambda: DeviceModel(1.0, 1, 1, 0), ValueError, _message("wbt_background_depth", 1)),
])
def test_simulation_parts_refuse_bad_arguments_by_name(make, exc, message):
    with pytest.raises(exc, match=message):
        make()


def test_a_device_model_takes_its_smallest_values():
    assert DeviceModel(1e-9, 1, 1, 1).bandwidth == 1e-9


def test_a_task_stays_paused_until_its_pause_ends_and_records_each_pause():
    model = WritebackModel()
    task = simulation._Task(model)
    assert (task.nr_dirtied, task.paused_until, task.recheck, task.pauses, task.paused_jiffies) == \
        (0, None, False, 0, 0)
    assert task.runnable(100)
    assert task.apply(Throttle(pause=0, recheck=False, throttled=False), 100) is False
    assert task.apply(Throttle(pause=0, recheck=True, throttled=True), 100) is True and task.recheck
    assert task.paused_until is None and task.pauses == 0
    assert task.apply(Throttle(pause=5, recheck=False, throttled=True), 100) is True
    assert task.paused_until == 105 and task.pauses == 1 and task.paused_jiffies == 5 and not task.recheck
    assert not task.runnable(104)
    assert task.paused_until == 105
    assert task.runnable(105) and task.paused_until is None
    assert task.apply(Throttle(pause=1, recheck=False, throttled=True), 105) is True and task.paused_until == 106
    assert task.runnable(106)
    task.apply(Throttle(pause=3, recheck=True, throttled=True), 200)
    assert task.pauses == 3 and task.paused_jiffies == 9 and task.paused_until == 203


def _model_with_file(size: int | None = 100 * PAGE_SIZE):
    model = WritebackModel(mechanism="owner-wb")
    disk = model.add_disk("vda", 100 * MiB)
    inode = model.create_inode(disk, "f", size=size)
    return model, disk, inode


def test_an_overwriter_dirties_its_share_of_the_clean_pages_and_carries_fractions():
    model, _disk, inode = _model_with_file()
    over = BufferedOverwriter(model, model.root, inode, 10 * PAGE_SIZE)   # 10 pages/s of a 100-page file
    assert over.rate_pages == 10.0 and over.memcg is model.root and over.inode is inode
    over.tick(1, 0.25)                # 2.5 pages touched, all clean: 2 dirtied, 0.5 carried
    assert inode.dirty == 2 and over._carry == pytest.approx(0.5)
    over.tick(2, 0.25)                # 98 clean x 2.5 / 100 + 0.5 = 2.95
    assert inode.dirty == 4 and over._carry == pytest.approx(0.95)
    assert over.task.nr_dirtied == 4
    over.tick(3, 100.0)               # the whole file touched: every clean page (96) plus the carry
    assert inode.dirty == 100
    zero = BufferedOverwriter(model, model.root, model.create_inode(_disk, "g", size=PAGE_SIZE), 0)
    zero.tick(4, 1.0)
    assert zero.inode.dirty == 0 and zero.task.nr_dirtied == 0


def test_an_overwriter_dirties_a_single_page_when_a_tick_touches_one():
    model, _disk, inode = _model_with_file(128 * PAGE_SIZE)
    over = BufferedOverwriter(model, model.root, inode, 16 * PAGE_SIZE)
    over.tick(1, 0.0625)              # 1 page of 128 touched, all clean
    assert inode.dirty == 1 and over._carry == 0.0


def test_an_overwriter_checks_its_throttling_once_it_reaches_ratelimit_pages(monkeypatch):
    model, _disk, inode = _model_with_file(1024 * PAGE_SIZE)
    calls = []
    monkeypatch.setattr(model, "_balance_dirty_pages",
                        lambda wb, n: calls.append(n) or Throttle(pause=0, recheck=False, throttled=False))
    over = BufferedOverwriter(model, model.root, inode, 32 * PAGE_SIZE)
    over.tick(1, 1.0)                 # exactly 32 pages = ratelimit_pages
    assert inode.dirty == 32 and calls == [32] and over.task.nr_dirtied == 0


def test_an_overwriter_checks_its_throttling_every_ratelimit_pages(monkeypatch):
    model, _disk, inode = _model_with_file(1000 * PAGE_SIZE)
    calls = []
    monkeypatch.setattr(model, "_balance_dirty_pages",
                        lambda wb, n: calls.append((wb, n)) or Throttle(pause=7, recheck=False, throttled=True))
    over = BufferedOverwriter(model, model.root, inode, 31 * PAGE_SIZE)
    over.tick(1, 1.0)
    assert calls == [] and over.task.nr_dirtied == 31
    over.tick(2, 1.0)                 # 31 + 30 >= 32: one check with what was dirtied, which is reset
    assert len(calls) == 1 and calls[0][0] is inode.wb and calls[0][1] >= 32
    assert over.task.nr_dirtied == 0 and over.task.paused_until == 9
    over.tick(5, 1.0)                 # paused: nothing dirtied
    assert len(calls) == 1 and over.task.nr_dirtied == 0
    over.task.paused_until = None
    over.task.recheck = True          # over the limit: it asks again before dirtying, and stops if told to
    dirty = inode.dirty
    over.tick(10, 1.0)
    assert calls[-1] == (inode.wb, 0) and inode.dirty == dirty


def test_an_overwriter_needs_a_fixed_size_file_of_its_model():
    model, _disk, inode = _model_with_file(None)
    with pytest.raises(ValueError, match="^inode must be a fixed-size file"):
        BufferedOverwriter(model, model.root, inode, 1.0)
    model2, _, sized = _model_with_file()
    with pytest.raises(ValueError, match="^rate must be in"):
        BufferedOverwriter(model2, model2.root, sized, -1.0)
    with pytest.raises(TypeError, match="^model must be a WritebackModel"):
        BufferedOverwriter(None, model2.root, sized, 1.0)
    with pytest.raises(TypeError, match="^memcg must be a Memcg"):
        BufferedOverwriter(model2, None, sized, 1.0)
    with pytest.raises(TypeError, match="^inode must be an Inode"):
        BufferedOverwriter(model2, model2.root, None, 1.0)
    with pytest.raises(ValueError, match="^memcg must be a memcg of this model$"):
        BufferedOverwriter(model2, model.root, sized, 1.0)          # another model's memcg
    with pytest.raises(ValueError, match="^inode "):
        BufferedOverwriter(model, model.root, sized, 1.0)           # another model's inode


def _workload(model, disk, **kw):
    memcg = model.create_memcg("cg")
    data = model.create_inode(disk, "d")
    meta = model.create_inode(disk, "m")
    args = dict(ops_rate=10.0, data_pages_per_op=1, metadata_pages_per_op=2, rng=random.Random(3), start=0.5)
    args.update(kw)
    return CgroupWorkload(model, memcg, data, meta, **args)


def test_a_cgroup_workload_runs_its_poisson_operations_from_its_start():
    model, disk, _ = _model_with_file()
    w = _workload(model, disk)
    assert (w.ops_rate, w.data_pages, w.metadata_pages, w.next_op, w.ops) == (10.0, 1, 2, 0.5, 0)
    w.tick(1, 0.0, 0.5)                # the first operation is at 0.5, not before
    assert w.ops == 0
    rng = random.Random(3)
    times = [0.5]
    while times[-1] < 1.5:
        times.append(times[-1] + rng.expovariate(10.0))
    w.tick(2, 0.5, 1.0)
    n = sum(1 for t in times if t < 1.5)
    assert w.ops == n and w.next_op == times[n]
    assert w.data_inode.dirty == n and w.metadata_inode.dirty == 2 * n
    assert w.memcg.nr_dirty == 3 * n


def test_a_cgroup_workload_without_data_or_metadata_pages_dirties_only_the_other():
    model, disk, _ = _model_with_file()
    w = _workload(model, disk, data_pages_per_op=0, metadata_pages_per_op=1, start=0.0)
    w.tick(1, 0.0, 1.0)
    assert w.ops > 0 and w.data_inode.dirty == 0 and w.metadata_inode.dirty == w.ops
    w2 = _workload(model, disk, data_pages_per_op=2, metadata_pages_per_op=0, start=0.0)
    w2.tick(1, 0.0, 1.0)
    assert w2.ops > 0 and w2.data_inode.dirty == 2 * w2.ops and w2.metadata_inode.dirty == 0


def test_a_throttled_cgroup_workload_stops_and_resumes_without_a_burst(monkeypatch):
    model, disk, _ = _model_with_file()
    w = _workload(model, disk, ops_rate=1000.0, data_pages_per_op=8, metadata_pages_per_op=8, start=0.0)
    calls = []
    monkeypatch.setattr(model, "_balance_dirty_pages",
                        lambda wb, n: calls.append(n) or Throttle(pause=10, recheck=False, throttled=True))
    w.tick(1, 0.0, 1.0)
    assert w.ops == 2 and calls == [32] and w.task.nr_dirtied == 0 and w.task.paused_until == 11
    w.tick(5, 0.0, 1.0)                 # paused
    assert w.ops == 2
    w.tick(11, 50.0, 0.0)              # resumed: the next operation is not before now
    assert w.next_op >= 50.0
    calls.clear()
    monkeypatch.setattr(model, "_balance_dirty_pages",
                        lambda wb, n: calls.append(n) or Throttle(pause=0, recheck=True, throttled=True))
    w.task.recheck = True
    ops = w.ops
    w.tick(12, 50.0, 1.0)               # over the limit: asks first (0 pages), and dirties nothing
    assert calls == [0] and w.ops == ops


def test_a_cgroup_workload_checks_its_arguments_by_name():
    model, disk, _ = _model_with_file()
    for kw, message in [({"ops_rate": 0.0}, _message("ops_rate", 0, open_low=True)),
                        ({"data_pages_per_op": -1}, _message("data_pages_per_op", 0)),
                        ({"metadata_pages_per_op": -1}, _message("metadata_pages_per_op", 0)),
                        ({"start": -1.0}, _message("start", 0))]:
        with pytest.raises(ValueError, match=message):
            _workload(model, disk, **kw)
    with pytest.raises(TypeError, match="^rng must be a random.Random"):
        _workload(model, disk, rng=3)
    memcg = model.create_memcg("x")
    inode = model.create_inode(disk, "i")
    for args, message in [((None, memcg, inode, inode), "model must be a WritebackModel"),
                          ((model, None, inode, inode), "memcg must be a Memcg"),
                          ((model, memcg, None, inode), "data_inode must be an Inode"),
                          ((model, memcg, inode, None), "metadata_inode must be an Inode")]:
        with pytest.raises(TypeError, match=f"^{message}, got NoneType$"):
            CgroupWorkload(*args, ops_rate=1.0, data_pages_per_op=1, metadata_pages_per_op=1,
                           rng=random.Random(), start=0.0)
    other, odisk, oinode = _model_with_file()
    for args, message in [((model, other.root, inode, inode), "memcg must be a memcg of this model"),
                          ((model, memcg, oinode, inode), "data_inode must be an inode of this model"),
                          ((model, memcg, inode, oinode), "metadata_inode must be an inode of this model")]:
        with pytest.raises(ValueError, match=f"^{message}$"):
            CgroupWorkload(*args, ops_rate=1.0, data_pages_per_op=1, metadata_pages_per_op=1,
                           rng=random.Random(), start=0.0)


def _sim(direct: DirectWriter | None, *, hz: int = 250, tick: int = 1, **kw) -> Simulation:
    model = WritebackModel(mechanism="owner-wb", clock=SimulatedClock(hz), tunables=WritebackTunables(hz=hz))
    device = DeviceModel(100.0 * MiB, 1 * MiB, 8, 4)
    return Simulation(model, device, tick_jiffies=tick, direct=direct, **kw)


def test_a_lone_direct_writer_gets_the_whole_device():
    direct = DirectWriter(10 * MiB, 1 * MiB, 4)
    direct.start(0.0)
    sim = _sim(direct, tick=5)
    assert sim.dt == 5 / 250 and sim.ticks == 0 and sim.device_bytes == 0.0 and sim.writeback_bytes == 0.0
    elapsed = sim.run_until_direct_done(10.0)
    assert direct.completion_time == pytest.approx(0.1)
    assert elapsed == sim.clock.elapsed_seconds == pytest.approx(0.1) and sim.ticks == 5
    assert sim.device_bytes == pytest.approx(10 * MiB) and sim.writeback_bytes == 0.0


def test_the_run_stops_at_its_time_limit_in_whole_ticks():
    direct = DirectWriter(1 << 40, 1 * MiB, 4)
    direct.start(0.0)
    sim = _sim(direct, tick=2)
    assert sim.run_until_direct_done(0.1) == pytest.approx(0.104)      # ceil(0.1 / 0.008) = 13 ticks
    assert sim.ticks == 13 and not direct.done
    with pytest.raises(ValueError, match="^no direct writer to wait for$"):
        _sim(None).run_until_direct_done(1.0)


def test_the_observer_sees_every_tick_after_it_ran():
    seen = []
    sim = _sim(None, observer=lambda s: seen.append((s.ticks, s.clock.now())))
    sim.tick()
    sim.tick()
    assert seen == [(1, sim.model.clock.now() - 1), (2, sim.model.clock.now())]


def test_a_simulation_checks_its_arguments():
    model = WritebackModel(clock=SimulatedClock(250))
    device = DeviceModel(1.0, 1, 1, 1)
    with pytest.raises(TypeError, match="^model must be a WritebackModel"):
        Simulation(None, device, tick_jiffies=1, direct=None)
    with pytest.raises(TypeError, match="^model.clock must be a SimulatedClock$"):
        Simulation(WritebackModel(clock=MonotonicClock(250)), device, tick_jiffies=1, direct=None)
    with pytest.raises(TypeError, match="^device must be a DeviceModel"):
        Simulation(model, None, tick_jiffies=1, direct=None)
    for bad in (0, (1 << 32) + 1):
        with pytest.raises(ValueError, match=_message("tick_jiffies", 1, 1 << 32)):
            Simulation(model, device, tick_jiffies=bad, direct=None)
    assert Simulation(model, device, tick_jiffies=1 << 32, direct=None).tick_jiffies == 1 << 32
    with pytest.raises(TypeError, match="^direct must be a DirectWriter or None"):
        Simulation(model, device, tick_jiffies=1, direct="fio")
    with pytest.raises(TypeError, match="^observer must be"):
        Simulation(model, device, tick_jiffies=1, direct=None, observer=3)


def test_writeback_shares_the_device_by_its_throttling_depth_and_every_byte_is_counted(monkeypatch):
    calls = []
    events: list = []
    real = simulation.share_bandwidth

    def recording(capacity, weights, demands):
        grants = real(capacity, weights, demands)
        calls.append((capacity, list(weights), list(demands), grants))
        events.append(("share", grants))
        return grants
    monkeypatch.setattr(simulation, "share_bandwidth", recording)
    real_run, real_deliver = WritebackModel._writeback_run, IOStream.deliver

    def run(self, wb, pages):
        events.append(("run", wb, pages))
        return real_run(self, wb, pages)

    def deliver(self, pages):
        events.append(("deliver", self, pages))
        return real_deliver(self, pages)
    monkeypatch.setattr(WritebackModel, "_writeback_run", run)
    monkeypatch.setattr(IOStream, "deliver", deliver)
    rec = _Recorder()
    sc = TINY
    run_once("bdev-devt", sc, seed=1, observer=rec)
    sim = rec.sim
    dt = sc.tick_jiffies / sc.hz
    depths = set()
    for capacity, weights, demands, grants in calls:
        assert capacity == pytest.approx(sc.device_bandwidth * dt)
        assert weights[0] <= sc.foreground_iodepth * sc.foreground_block_size      # the direct writer first
        wb = weights[1:]
        n = sum(1 for d in demands[1:] if d > 0)
        if wb:
            assert len(set(wb)) == 1 and n > 0                # split evenly among the writeback streams
            depth = wb[0] * n / sc.writeback_request_bytes
            assert depth in (sc.wbt_normal_depth, sc.wbt_background_depth)
            depths.add(depth)
    assert depths == {sc.wbt_normal_depth, sc.wbt_background_depth}   # both classes were seen
    # the device's bytes are the direct writer's plus writeback's, and writeback's are the pages written
    assert sim.device_bytes == pytest.approx(sim.direct.served + sim.writeback_bytes)
    assert sim.writeback_bytes > 0
    assert sim.device_bytes <= sc.device_bandwidth * sim.clock.elapsed_seconds * (1 + 1e-9)
    written = rec.sim.model.stats.written_by_reason
    assert sim.writeback_bytes == (sum(written.values()) - written["mount"] - written.get("sync", 0)) * PAGE_SIZE
    # after the direct writer (first), each writeback work and then each flush stream gets its own grant, in
    # whole pages with its fraction carried
    assert _check_grants(events, first=1) >= 2


def _check_grants(events: list, first: int = 0) -> int:
    """Check that after each sharing the streams (writeback works, then flush streams) ran in the order of
    the grants from index ``first`` on, each with its grant in whole pages plus the fraction it carried;
    returns the most streams sharing one tick."""
    carry: dict[int, float] = {}
    grants = None
    most = 0
    k = 0
    for event in events:
        if event[0] == "share":
            grants, k = event[1], first
            most = max(most, len(grants) - first)
        elif grants is not None and k < len(grants):
            _, stream, pages = event
            value = grants[k] / PAGE_SIZE + carry.get(id(stream), 0.0)
            assert pages == int(value)
            carry[id(stream)] = value - int(value)
            k += 1
    return most


def _periodic_sim(dirty: list[int], monkeypatch=None, events=None) -> tuple[Simulation, list]:
    """No direct writer; one file per memcg (so one wb each) with ``dirty`` pages, written by periodic
    writeback after 1 s (expiry and flusher period 1 s, ticks of 0.1 s, a 1 MiB/s device)."""
    tunables = WritebackTunables(hz=100, dirty_expire_centisecs=100, dirty_writeback_centisecs=100)
    model = WritebackModel(mechanism="owner-wb", clock=SimulatedClock(100), tunables=tunables)
    disk = model.add_disk("vda", 1 * MiB)
    inodes = []
    for i, n in enumerate(dirty):
        inode = model.create_inode(disk, f"f{i}")
        model.dirty_pages(inode, n, model.create_memcg(f"m{i}"))
        inodes.append(inode)
    if monkeypatch is not None:
        real_share, real_run = simulation.share_bandwidth, model._writeback_run

        def share(capacity, weights, demands):
            grants = real_share(capacity, weights, demands)
            events.append(("share", grants))
            return grants

        def run(wb, pages):
            events.append(("run", wb, pages))
            return real_run(wb, pages)
        monkeypatch.setattr(simulation, "share_bandwidth", share)
        monkeypatch.setattr(model, "_writeback_run", run)
    return Simulation(model, DeviceModel(1.0 * MiB, 64 * KiB, 8, 4), tick_jiffies=10, direct=None), inodes


def test_a_lone_dirty_page_is_written_once_it_expires():
    sim, [inode] = _periodic_sim([1])
    for _ in range(30):
        sim.tick()
    assert inode.dirty == 0 and inode.written == 1
    assert sim.writeback_bytes == sim.device_bytes == PAGE_SIZE


def test_concurrent_writeback_streams_each_write_their_own_grant_in_whole_pages(monkeypatch):
    events: list = []
    # the middle one is done first: from then on the last one's grant differs from it
    sim, inodes = _periodic_sim([450, 30, 700], monkeypatch, events)
    for _ in range(60):
        sim.tick()
    assert [i.dirty for i in inodes] == [0, 0, 0] and [i.written for i in inodes] == [450, 30, 700]
    assert _check_grants(events) == 3
    assert sim.writeback_bytes == sim.device_bytes == (30 + 700 + 450) * PAGE_SIZE


def test_granted_bytes_become_whole_pages_with_the_fraction_carried():
    sim = _sim(None)
    assert sim._pages(1, 1.5 * PAGE_SIZE) == 1
    assert sim._pages(1, 0.75 * PAGE_SIZE) == 1      # 0.5 carried + 0.75
    assert sim._carry[1] == pytest.approx(0.25)
    assert sim._pages(1, 0.75 * PAGE_SIZE) == 1 and sim._carry[1] == pytest.approx(0.0)
    assert sim._pages(2, 0.5 * PAGE_SIZE) == 0


class _Stream:
    """A flush stream stand-in: its demand in pages, its I/O class, what it was delivered."""

    def __init__(self, pages: int, io_class: str):
        self.pages, self.io_class, self.got, self.done = pages, io_class, [], False

    def demand_pages(self) -> int:
        return self.pages

    def deliver(self, pages: int) -> int:
        self.got.append(pages)
        written = min(pages, self.pages)
        self.pages -= written
        self.done = self.pages == 0
        return written


@pytest.mark.parametrize("one_page_stream", [True, False])
def test_a_tick_grants_every_wanting_wb_and_stream_its_own_share_of_the_device(monkeypatch, one_page_stream):
    # One tick with a direct writer, three flushers (idle, with a spent work, with a live background work) and
    # flush streams (a normal one wanting nothing, optionally a normal one wanting one page, a background one
    # whose demand fits in its share, so it finishes this tick): each wb and stream that wants pages gets the
    # grant the device's split gives it at the depth of the I/O classes that want pages, in whole pages; the
    # spent work is finished with 0 pages; the finished stream's carried fraction is dropped.
    model = WritebackModel(mechanism="bdev-devt", clock=SimulatedClock(250), tunables=WritebackTunables(hz=250))
    device = DeviceModel(100.0 * MiB, 1 * MiB, 8, 4)
    direct = DirectWriter(10 * MiB, 1 * MiB, 4)
    direct.start(0.0)
    sim = Simulation(model, device, tick_jiffies=1, direct=direct)
    idle, spent, live = (SimpleNamespace(active=a) for a in (None, SimpleNamespace(io_class="normal"),
                                                             SimpleNamespace(io_class="background")))
    wb_pages = {id(spent): 0, id(live): 200}
    runs: list = []
    monkeypatch.setattr(model, "_flushers_to_scan", lambda: [idle, spent, live])
    monkeypatch.setattr(model, "_flusher_next_work", lambda wb: None)
    monkeypatch.setattr(model, "_writeback_demand", lambda wb: wb_pages[id(wb)])
    monkeypatch.setattr(model, "_writeback_run", lambda wb, pages: runs.append((wb, pages)) or pages)
    streams = [_Stream(0, "normal")] + ([_Stream(1, "normal")] if one_page_stream else []) + [_Stream(20, "background")]
    monkeypatch.setattr(model.workqueue, "streams", lambda: list(streams))
    monkeypatch.setattr(model.workqueue, "step", lambda: None)
    monkeypatch.setattr(model.workqueue, "reap", lambda: None)
    weight_direct, demand_direct = direct.weight(), direct.demand()
    sim.tick()

    wanting = 1 + (2 if one_page_stream else 1)       # the live wb and the streams that want pages
    depth = device.wbt_normal_depth if one_page_stream else device.wbt_background_depth
    share = depth * device.writeback_request_bytes / wanting
    demands = [demand_direct, 200 * PAGE_SIZE] + [s_pages * PAGE_SIZE for s_pages in
                                                   ([0, 1, 20] if one_page_stream else [0, 20])]
    grants = simulation.share_bandwidth(device.bandwidth * sim.dt, [weight_direct] + [share] * (len(demands) - 1),
                                        demands)
    pages = [int(g / PAGE_SIZE) for g in grants]
    assert runs == [(spent, 0), (live, pages[1])] and pages[1] > 0
    assert [s.got for s in streams] == [[p] for p in pages[2:]]
    assert streams[-1].done and id(streams[-1]) not in sim._carry and id(live) in sim._carry
