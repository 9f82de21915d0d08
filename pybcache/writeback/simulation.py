"""A fixed-tick simulation of one disk: the device's bandwidth shared by direct I/O and writeback, and the
workloads that dirty pages or write directly.

The device serves ``bandwidth x dt`` bytes per tick, shared among the streams that want service in proportion
to the bytes each keeps in flight (a device that serves queued requests in turn): the direct writer keeps
``iodepth x block_size`` in flight; writeback keeps what write-back throttling allows, ``depth x request size``
with the normal depth while any normal-class writeback is active and the background depth otherwise, split
evenly among the active writeback streams. Capacity a stream cannot use goes to the others. Nothing sleeps:
time is the simulated clock.
"""
from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass
from typing import Callable, Sequence

from ..validate import check_callable, check_instance, check_int, check_number
from .jiffies import SimulatedClock, jiffies_add, time_before
from .model import PAGE_SIZE, Inode, Memcg, Throttle, Writeback, WritebackModel
from .workqueue import IOStream, SimulatedWorkqueue

__all__ = ["share_bandwidth", "DirectWriter", "BufferedOverwriter", "CgroupWorkload", "DeviceModel", "Simulation"]


def share_bandwidth(capacity: float, weights: Sequence[float], demands: Sequence[float]) -> list[float]:
    """Split ``capacity`` among streams in proportion to ``weights``, never giving a stream more than its
    demand; what a satisfied stream leaves is shared again among the rest (water-filling).

    Invariant: the grants sum to ``min(capacity, sum(demands))`` (up to rounding) and each is <= its demand.
    """
    n = len(weights)
    grants = [0.0] * n
    active = [i for i in range(n) if demands[i] > 0 and weights[i] > 0]
    remaining = float(capacity)
    while active and remaining > 1e-9:
        total_weight = sum(weights[i] for i in active)
        offer = {i: remaining * weights[i] / total_weight for i in active}
        satisfied = [i for i in active if demands[i] - grants[i] <= offer[i]]
        if not satisfied:
            for i in active:
                grants[i] += offer[i]
            remaining = 0.0
            break
        for i in satisfied:
            need = demands[i] - grants[i]
            grants[i] += need
            remaining -= need
            active.remove(i)
    return grants


class DirectWriter:
    """A sequential ``O_DIRECT`` writer with a fixed queue depth (fio ``--direct=1 --iodepth=N``).

    Requests complete in submission order as the device serves their bytes; a completion submits the next
    request, so ``iodepth`` requests stay in flight until the last ones. Latency is measured per request from
    submission to completion (within a tick, completions are placed by linear interpolation).

    :param total_bytes: bytes to write, > 0.
    :param block_size: bytes per request, > 0.
    :param iodepth: requests in flight, >= 1.
    """

    def __init__(self, total_bytes: int, block_size: int, iodepth: int) -> None:
        total_bytes = check_int(total_bytes, "total_bytes", 1)
        block_size = check_int(block_size, "block_size", 1)
        iodepth = check_int(iodepth, "iodepth", 1, 1 << 20)
        self.block_size = block_size
        self.iodepth = iodepth
        self.total_requests = -(-total_bytes // block_size)
        self.total_bytes = self.total_requests * block_size
        self.served = 0.0
        self.completed = 0
        self.submitted = 0
        self._submit_times: deque[float] = deque()
        self.latency_sum = 0.0
        self.completion_time: float | None = None
        self.start_time = 0.0

    def start(self, t: float) -> None:
        self.start_time = t
        while self.submitted < min(self.iodepth, self.total_requests):
            self._submit_times.append(t)
            self.submitted += 1

    @property
    def done(self) -> bool:
        return self.completed >= self.total_requests

    def weight(self) -> float:
        return float((self.submitted - self.completed) * self.block_size)

    def demand(self) -> float:
        return 0.0 if self.done else self.total_bytes - self.served

    def deliver(self, nbytes: float, t0: float, dt: float) -> None:
        if nbytes <= 0 or self.done:
            return
        before = self.served
        self.served = min(self.total_bytes, before + nbytes)
        bs = self.block_size
        while self.completed < self.total_requests and self.served >= (self.completed + 1) * bs - 1e-6:
            boundary = (self.completed + 1) * self.block_size
            tc = t0 + dt * max(0.0, min(1.0, (boundary - before) / nbytes))
            self.latency_sum += tc - self._submit_times.popleft()
            self.completed += 1
            if self.submitted < self.total_requests:
                self._submit_times.append(tc)
                self.submitted += 1
            if self.completed == self.total_requests:
                self.completion_time = tc

    @property
    def mean_latency(self) -> float:
        return self.latency_sum / self.completed if self.completed else 0.0


class _Task:
    """Throttling state of one dirtying task (``current->nr_dirtied`` and its pause)."""

    def __init__(self, model: WritebackModel) -> None:
        self.model = model
        self.nr_dirtied = 0
        self.paused_until: int | None = None
        self.recheck = False
        self.pauses = 0
        self.paused_jiffies = 0

    def runnable(self, now: int) -> bool:
        if self.paused_until is not None:
            if time_before(now, self.paused_until):
                return False
            self.paused_until = None
        return True

    def apply(self, throttle: Throttle, now: int) -> bool:
        """Record a throttling decision; True if the task must stop dirtying for now."""
        self.recheck = throttle.recheck
        if throttle.pause > 0:
            self.paused_until = jiffies_add(now, throttle.pause)
            self.pauses += 1
            self.paused_jiffies += throttle.pause
            return True
        return throttle.recheck


class BufferedOverwriter:
    """A task rewriting a fixed-size file through the page cache in a loop (fio buffered overwrite).

    It writes ``rate`` bytes/s; a rewritten page that is already dirty stays one dirty page, so each tick the
    clean pages it touches (its share of the file times the clean pages) become dirty.
    """

    def __init__(self, model: WritebackModel, memcg: Memcg, inode: Inode, rate: float) -> None:
        check_instance(model, "model", WritebackModel, "a WritebackModel")
        check_instance(memcg, "memcg", Memcg, "a Memcg")
        check_instance(inode, "inode", Inode, "an Inode")
        model._check_memcg("memcg", memcg)
        model._check_inode(inode)
        rate = check_number(rate, "rate", 0)
        if inode.size_pages is None:
            raise ValueError("inode must be a fixed-size file (created with size=...)")
        self.model = model
        self.memcg = memcg
        self.inode = inode
        self.rate_pages = rate / PAGE_SIZE
        self.task = _Task(model)
        self._carry = 0.0

    def tick(self, now: int, dt: float) -> None:
        if not self.task.runnable(now):
            return
        wb = self.inode.wb
        if self.task.recheck and wb is not None:
            if self.task.apply(self.model._balance_dirty_pages(wb, 0), now):
                return
        size = self.inode.size_pages or 1
        touched = self.rate_pages * dt
        clean = size - self.inode.dirty
        want = clean * min(1.0, touched / size) + self._carry
        pages = int(want)
        self._carry = want - pages
        if pages <= 0:
            return
        dirtied = self.model._dirty_pages(self.inode, pages, self.memcg)
        self.task.nr_dirtied += dirtied
        wb = self.inode.wb
        if wb is not None and self.task.nr_dirtied >= self.model.tunables.ratelimit_pages:
            throttle = self.model._balance_dirty_pages(wb, self.task.nr_dirtied)
            self.task.nr_dirtied = 0
            self.task.apply(throttle, now)


class CgroupWorkload:
    """A task in a memcg creating small files: each operation dirties data pages of the memcg's own file and
    new metadata pages in the block device's mapping (charged to the memcg, owned by root's wb).

    Operations arrive as a Poisson process of rate ``ops_rate`` (closed loop: a pause delays the next one).
    The task checks its throttling every ``ratelimit_pages`` dirtied pages, against its own file's wb.
    """

    def __init__(self, model: WritebackModel, memcg: Memcg, data_inode: Inode, metadata_inode: Inode, *,
                 ops_rate: float, data_pages_per_op: int, metadata_pages_per_op: int, rng: random.Random,
                 start: float) -> None:
        check_instance(model, "model", WritebackModel, "a WritebackModel")
        check_instance(memcg, "memcg", Memcg, "a Memcg")
        check_instance(data_inode, "data_inode", Inode, "an Inode")
        check_instance(metadata_inode, "metadata_inode", Inode, "an Inode")
        model._check_memcg("memcg", memcg)
        model._check_inode(data_inode, "data_inode")
        model._check_inode(metadata_inode, "metadata_inode")
        ops_rate = check_number(ops_rate, "ops_rate", 0, open_low=True)
        data_pages_per_op = check_int(data_pages_per_op, "data_pages_per_op", 0)
        metadata_pages_per_op = check_int(metadata_pages_per_op, "metadata_pages_per_op", 0)
        check_instance(rng, "rng", random.Random, "a random.Random")
        start = check_number(start, "start", 0)
        self.model = model
        self.memcg = memcg
        self.data_inode = data_inode
        self.metadata_inode = metadata_inode
        self.ops_rate = ops_rate
        self.data_pages = data_pages_per_op
        self.metadata_pages = metadata_pages_per_op
        self.rng = rng
        self.next_op = start
        self.task = _Task(model)
        self.ops = 0

    def tick(self, now: int, t: float, dt: float) -> None:
        task = self.task
        was_paused = task.paused_until is not None
        if not task.runnable(now):
            return
        if was_paused:
            self.next_op = max(self.next_op, t)   # closed loop: no burst of operations after a pause
        wb = self.data_inode.wb
        if task.recheck and wb is not None:
            if task.apply(self.model._balance_dirty_pages(wb, 0), now):
                return
        end = t + dt
        model = self.model
        ratelimit = model.tunables.ratelimit_pages
        while self.next_op < end:
            if self.data_pages:
                task.nr_dirtied += model._dirty_pages(self.data_inode, self.data_pages, self.memcg)
            if self.metadata_pages:
                task.nr_dirtied += model._dirty_pages(self.metadata_inode, self.metadata_pages, self.memcg)
            self.ops += 1
            self.next_op += self.rng.expovariate(self.ops_rate)
            wb = self.data_inode.wb
            if wb is not None and task.nr_dirtied >= ratelimit:
                throttle = model._balance_dirty_pages(wb, task.nr_dirtied)
                task.nr_dirtied = 0
                if task.apply(throttle, now):
                    break


@dataclass(frozen=True)
class DeviceModel:
    """How the device shares its bandwidth (see the module docstring).

    :param bandwidth: bytes/s the device completes.
    :param writeback_request_bytes: bytes per writeback request.
    :param wbt_normal_depth: writeback requests in flight while normal-class writeback is active.
    :param wbt_background_depth: writeback requests in flight when only background-class writeback is active.
    """

    bandwidth: float
    writeback_request_bytes: int
    wbt_normal_depth: int
    wbt_background_depth: int

    def __post_init__(self) -> None:
        check_number(self.bandwidth, "bandwidth", 0, open_low=True)
        check_int(self.writeback_request_bytes, "writeback_request_bytes", 1)
        check_int(self.wbt_normal_depth, "wbt_normal_depth", 1)
        check_int(self.wbt_background_depth, "wbt_background_depth", 1)


class Simulation:
    """Advance a :class:`~pybcache.writeback.model.WritebackModel` tick by tick on its simulated clock.

    Each tick: the dirtying tasks run (and may throttle, which may queue foreign flushes); idle flushers pick
    their next work; the workqueue starts pending flush works; the device splits the tick's bandwidth among
    the direct writer, the active writeback works and the running flush works; finished flush works resume.

    :param observer: called with the simulation at the end of every tick, or None (default). It must only
        read (the clock, ``direct.served``, ``model.nr_dirty``, each inode's ``dirty``, ``written`` and
        ``written_by_reason``); ``pybcache report`` uses it for the writeback timeline plot.
    """

    def __init__(self, model: WritebackModel, device: DeviceModel, *, tick_jiffies: int,
                 direct: DirectWriter | None, overwriters: Sequence[BufferedOverwriter] = (),
                 workloads: Sequence[CgroupWorkload] = (),
                 observer: Callable[["Simulation"], None] | None = None) -> None:
        check_instance(model, "model", WritebackModel, "a WritebackModel")
        if not isinstance(model.clock, SimulatedClock):
            raise TypeError("model.clock must be a SimulatedClock")
        check_instance(device, "device", DeviceModel, "a DeviceModel")
        tick_jiffies = check_int(tick_jiffies, "tick_jiffies", 1, 1 << 32)
        if direct is not None:
            check_instance(direct, "direct", DirectWriter, "a DirectWriter or None")
        self.model = model
        self.clock: SimulatedClock = model.clock
        self.device = device
        self.tick_jiffies = tick_jiffies
        self.direct = direct
        self.overwriters = list(overwriters)
        self.workloads = list(workloads)
        check_callable(observer, "observer", allow_none=True)
        self.observer = observer
        self.dt = tick_jiffies / model.tunables.hz
        self._carry: dict[int, float] = {}
        self.ticks = 0
        self.device_bytes = 0.0
        self.writeback_bytes = 0.0

    def tick(self) -> None:
        model = self.model
        t0 = self.clock.elapsed_seconds
        now = self.clock.advance(self.tick_jiffies)
        dt = self.dt
        for writer in self.overwriters:
            writer.tick(now, dt)
        for workload in self.workloads:
            workload.tick(now, t0, dt)
        # only the flushers that may have something to do: the others' flusher_next_work would return None
        for wb in model._flushers_to_scan():
            model._flusher_next_work(wb)
        workqueue = model.workqueue
        if isinstance(workqueue, SimulatedWorkqueue):
            workqueue.step()
            streams: list[IOStream] = workqueue.streams()
        else:
            streams = []

        # who wants the device this tick
        wbs: list[Writeback] = []
        wb_demand: list[int] = []
        for wb in model._flushers_to_scan():
            if wb.active is None:
                continue
            demand = model._writeback_demand(wb)
            if demand <= 0:
                model._writeback_run(wb, 0)   # finishes the work
                continue
            wbs.append(wb)
            wb_demand.append(demand)
        stream_demand = [s.demand_pages() for s in streams]
        normal_active = (any(wb.active is not None and wb.active.io_class == "normal" for wb in wbs)
                         or any(s.io_class == "normal" for s, d in zip(streams, stream_demand) if d > 0))
        n_writeback = sum(1 for d in wb_demand if d > 0) + sum(1 for d in stream_demand if d > 0)
        dev = self.device
        depth = dev.wbt_normal_depth if normal_active else dev.wbt_background_depth
        wb_weight = depth * dev.writeback_request_bytes / n_writeback if n_writeback else 0.0

        weights: list[float] = []
        demands: list[float] = []
        if self.direct is not None and not self.direct.done:
            weights.append(self.direct.weight())
            demands.append(self.direct.demand())
        for d in wb_demand:
            weights.append(wb_weight)
            demands.append(d * PAGE_SIZE)
        for d in stream_demand:
            weights.append(wb_weight)
            demands.append(d * PAGE_SIZE)
        grants = share_bandwidth(dev.bandwidth * dt, weights, demands)

        k = 0
        if self.direct is not None and not self.direct.done:
            self.direct.deliver(grants[0], t0, dt)
            self.device_bytes += grants[0]
            k = 1
        for wb in wbs:
            pages = self._pages(id(wb), grants[k])
            k += 1
            written = model._writeback_run(wb, pages)
            self.device_bytes += written * PAGE_SIZE
            self.writeback_bytes += written * PAGE_SIZE
        for stream in streams:
            pages = self._pages(id(stream), grants[k])
            k += 1
            written = stream.deliver(pages)
            self.device_bytes += written * PAGE_SIZE
            self.writeback_bytes += written * PAGE_SIZE
            if stream.done:
                self._carry.pop(id(stream), None)
        if isinstance(workqueue, SimulatedWorkqueue):
            workqueue.reap()
        self.ticks += 1
        if self.observer is not None:
            self.observer(self)

    def _pages(self, key: int, nbytes: float) -> int:
        value = nbytes / PAGE_SIZE + self._carry.get(key, 0.0)
        pages = int(value)
        self._carry[key] = value - pages
        return pages

    def run_until_direct_done(self, max_seconds: float) -> float:
        """Tick until the direct writer finishes (or ``max_seconds`` of simulated time); returns the time."""
        if self.direct is None:
            raise ValueError("no direct writer to wait for")
        limit = math.ceil(max_seconds / self.dt)
        for _ in range(limit):
            if self.direct.done:
                break
            self.tick()
        return self.clock.elapsed_seconds
