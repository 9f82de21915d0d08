"""The flush workqueue: the same queueing rules with real worker threads and on simulated time."""
from __future__ import annotations

import threading

import pytest

from pybcache.writeback import ForeignFlushWorkqueue, SimulatedWorkqueue, WorkItem, WriteRequest

TIMEOUT = 10.0


def _threaded():
    return ForeignFlushWorkqueue(workers=2)


def _simulated():
    return SimulatedWorkqueue(max_active=2, io=lambda request: request.write(request.nr_pages))


@pytest.fixture(params=["threads", "simulated"])
def wq(request):
    queue = _threaded() if request.param == "threads" else _simulated()
    yield queue
    queue.shutdown(drain=False)


def _run(wq) -> None:
    """Let the executor finish what it has (threads: wait; simulated: run)."""
    if isinstance(wq, SimulatedWorkqueue):
        wq.step()
        wq.reap()
    assert wq.drain(TIMEOUT)


def test_a_queued_item_runs_once(wq):
    runs = []
    item = WorkItem(lambda: runs.append(1), name="a")
    assert wq.queue(item)
    _run(wq)
    assert runs == [1]
    assert not item.busy
    assert wq.stats.queued == wq.stats.completed == 1


def test_a_pending_item_is_not_queued_twice(wq):
    gate = threading.Event()
    blocker = WorkItem(lambda: gate.wait(TIMEOUT), name="blocker")
    other = WorkItem(lambda: gate.wait(TIMEOUT), name="other")
    runs = []
    item = WorkItem(lambda: runs.append(1), name="item")
    if isinstance(wq, SimulatedWorkqueue):
        gate.set()
        assert wq.queue(item) and not wq.queue(item)
    else:
        assert wq.queue(blocker) and wq.queue(other)   # both workers busy
        assert wq.queue(item)
        assert not wq.queue(item)
        gate.set()
    _run(wq)
    assert runs == [1]
    assert wq.stats.duplicates == 1


def test_cancel_removes_a_pending_item_and_calls_its_hook_once(wq):
    cancelled = []
    runs = []
    item = WorkItem(lambda: runs.append(1), name="x", on_cancel=lambda: cancelled.append(1))
    gate = threading.Event()
    blockers = [WorkItem(lambda: gate.wait(TIMEOUT), name=f"b{i}") for i in range(2)]
    if isinstance(wq, ForeignFlushWorkqueue):
        for b in blockers:
            wq.queue(b)
    assert wq.queue(item)
    assert wq.cancel(item)
    assert not wq.cancel(item)
    gate.set()
    _run(wq)
    assert runs == [] and cancelled == [1]
    assert wq.stats.cancelled == 1


def test_a_generator_work_gets_the_pages_its_request_wrote(wq):
    seen = []
    store = {"dirty": 10}

    def write(n: int) -> int:
        done = min(n, store["dirty"])
        store["dirty"] -= done
        return done

    def work():
        written = yield WriteRequest("mapping", 25, write)
        seen.append(written)

    assert wq.queue(WorkItem(work, name="gen"))
    _run(wq)
    assert seen == [10] and store["dirty"] == 0
    assert wq.stats.pages_written == 10


def test_a_failing_work_is_counted_and_the_executor_keeps_working(wq):
    def boom():
        raise RuntimeError("boom")

    runs = []
    assert wq.queue(WorkItem(boom, name="boom"))
    assert wq.queue(WorkItem(lambda: runs.append(1), name="ok"))
    _run(wq)
    assert runs == [1]
    assert wq.stats.failed == 1 and isinstance(wq.last_error, RuntimeError)


def test_shutdown_with_drain_runs_everything_pending(wq):
    runs = []
    for i in range(20):
        wq.queue(WorkItem(lambda i=i: runs.append(i), name=str(i)))
    assert wq.shutdown(drain=True) == 0
    assert sorted(runs) == list(range(20))
    assert wq.closed and not wq.queue(WorkItem(lambda: None))
    assert wq.stats.rejected_closed == 1
    assert wq.shutdown() == 0        # idempotent


def test_shutdown_without_drain_cancels_pending_and_lets_running_finish():
    wq = ForeignFlushWorkqueue(workers=1)
    started, gate = threading.Event(), threading.Event()
    runs, cancelled = [], []

    def slow():
        started.set()
        gate.wait(TIMEOUT)
        runs.append("slow")

    wq.queue(WorkItem(slow, name="slow"))
    assert started.wait(TIMEOUT)
    for i in range(5):
        wq.queue(WorkItem(lambda: runs.append("never"), name=str(i), on_cancel=lambda: cancelled.append(1)))
    threading.Timer(0.05, gate.set).start()
    assert wq.shutdown(drain=False) == 5
    assert runs == ["slow"] and len(cancelled) == 5
    assert wq.stats.queued == wq.stats.completed + wq.stats.cancelled
    assert all(not t.is_alive() for t in wq._threads)


def test_an_item_queued_while_running_runs_again_afterwards_never_concurrently():
    wq = ForeignFlushWorkqueue(workers=4)
    inside = []
    lock = threading.Lock()
    started, gate = threading.Event(), threading.Event()
    count = [0]

    def work():
        with lock:
            inside.append(1)
            assert len(inside) == 1
        count[0] += 1
        if count[0] == 1:
            started.set()
            gate.wait(TIMEOUT)
        with lock:
            inside.pop()

    item = WorkItem(work, name="self")
    wq.queue(item)
    assert started.wait(TIMEOUT)
    assert wq.queue(item)            # running: accepted once more
    assert not wq.queue(item)        # already re-queued
    gate.set()
    assert wq.drain(TIMEOUT)
    assert count[0] == 2
    wq.shutdown()


def test_simulated_executor_serves_io_only_when_the_device_grants_it():
    wq = SimulatedWorkqueue(max_active=1)
    store = {"dirty": 100}
    result = []

    def write(n: int) -> int:
        done = min(n, store["dirty"])
        store["dirty"] -= done
        return done

    def work():
        result.append((yield WriteRequest("m", 100, write, available=lambda: store["dirty"])))

    second = []
    wq.queue(WorkItem(work, name="w"))
    wq.queue(WorkItem(lambda: second.append(1), name="second"))
    wq.step()
    (stream,) = wq.streams()
    assert stream.demand_pages() == 100
    stream.deliver(30)
    wq.reap()
    assert result == [] and store["dirty"] == 70 and second == []   # max_active=1: the second waits
    stream.deliver(70)
    wq.reap()
    wq.step()
    assert result == [100] and second == [1]


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="workers"):
        ForeignFlushWorkqueue(workers=0)
    with pytest.raises(ValueError, match="max_active"):
        SimulatedWorkqueue(max_active=0)
    with pytest.raises(TypeError, match="fn"):
        WorkItem(42)  # type: ignore[arg-type]
    wq = SimulatedWorkqueue()
    with pytest.raises(TypeError, match="item"):
        wq.queue("not a work item")  # type: ignore[arg-type]
    assert wq.stats.queued == 0
