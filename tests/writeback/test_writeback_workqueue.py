"""The flush workqueue: the same queueing rules with real worker threads and on simulated time."""
from __future__ import annotations

import threading
import time

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
    def cancel_one():
        cancelled.append(1)
        if len(cancelled) == 5:       # every pending item is cancelled: only now may the running one end
            gate.set()

    for i in range(5):
        wq.queue(WorkItem(lambda: runs.append("never"), name=str(i), on_cancel=cancel_one))
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


def test_a_work_whose_io_raises_is_closed_so_its_cleanup_runs_and_the_error_is_counted():
    """A generator work holds resources across its yield; an I/O error must reach it (at the yield) so its
    ``finally`` runs now, not whenever the generator is collected."""
    for make in (lambda io: ForeignFlushWorkqueue(workers=1, io=io), lambda io: SimulatedWorkqueue(io=io)):
        calls = []

        def failing_io(request):
            calls.append(request.target)
            raise OSError("EIO")

        wq = make(failing_io)
        held = threading.Lock()
        seen = []

        def work():
            held.acquire()
            try:
                yield WriteRequest("mapping", 8, lambda n: n)
            except OSError as exc:
                seen.append(type(exc).__name__)
                raise
            finally:
                held.release()

        assert wq.queue(WorkItem(work, name="eio"))
        _run(wq)
        assert calls == ["mapping"] and seen == ["OSError"]
        assert held.acquire(timeout=TIMEOUT), "the work's finally did not run: its lock is still held"
        held.release()
        assert wq.stats.failed == 1 and isinstance(wq.last_error, OSError)
        assert wq.stats.started == wq.stats.completed == 1 and wq.idle
        wq.shutdown(drain=False)


def test_shutdown_with_drain_called_from_inside_a_work_returns_after_running_the_rest():
    wq = ForeignFlushWorkqueue(workers=2)
    runs, result = [], {}
    returned = threading.Event()

    def closer():
        result["cancelled"] = wq.shutdown(drain=True)
        returned.set()

    gate = threading.Event()
    wq.queue(WorkItem(lambda: gate.wait(TIMEOUT), name="blocker"))
    for i in range(3):
        wq.queue(WorkItem(lambda i=i: runs.append(i), name=str(i)))
    wq.queue(WorkItem(closer, name="closer"))
    gate.set()
    assert returned.wait(TIMEOUT), "shutdown(drain=True) from inside a work waited for itself"
    assert result == {"cancelled": 0} and sorted(runs) == [0, 1, 2]
    assert wq.closed and not wq.queue(WorkItem(lambda: None))
    assert wq.join(TIMEOUT) and wq.stopped
    assert wq.stats.queued == wq.stats.completed == 5


def test_shutdown_timeout_returns_while_a_work_still_runs_and_reports_not_stopped():
    wq = ForeignFlushWorkqueue(workers=1)
    started, gate, returned = threading.Event(), threading.Event(), threading.Event()
    cancelled, result = [], []

    def slow():
        started.set()
        gate.wait(3 * TIMEOUT)       # ends long after the shutdown below must have returned

    wq.queue(WorkItem(slow, name="slow"))
    assert started.wait(TIMEOUT)
    wq.queue(WorkItem(lambda: None, name="pending", on_cancel=lambda: cancelled.append(1)))

    def closer():
        result.append(wq.shutdown(timeout=0.1))
        returned.set()

    threading.Thread(target=closer, daemon=True).start()
    try:
        assert returned.wait(TIMEOUT), "shutdown(timeout=0.1) waited for the running work"
        assert result == [1] and cancelled == [1]          # the pending instance was cancelled
        assert wq.running_count == 1 and not wq.stopped    # the running work was left to finish
        assert not wq.join(0)
    finally:
        gate.set()
    assert wq.join(TIMEOUT) and wq.stopped and wq.idle
    assert wq.stats.queued == wq.stats.completed + wq.stats.cancelled


def test_simulated_shutdown_with_drain_called_from_inside_a_work_returns_after_running_the_rest():
    wq = SimulatedWorkqueue(max_active=2, io=lambda request: request.write(request.nr_pages))
    runs, result = [], {}
    wq.queue(WorkItem(lambda: result.setdefault("cancelled", wq.shutdown(drain=True)), name="closer"))
    for i in range(3):
        wq.queue(WorkItem(lambda i=i: runs.append(i), name=str(i)))
    stepper = threading.Thread(target=wq.step, daemon=True)   # a hang becomes a failure, not a hung suite
    stepper.start()
    stepper.join(TIMEOUT)
    assert not stepper.is_alive(), "shutdown(drain=True) from inside a simulated work did not return"
    assert result == {"cancelled": 0} and sorted(runs) == [0, 1, 2]
    assert wq.closed and wq.idle and wq.stats.completed == 4


# -- a work that waits for its own queue while another work does --------------------------------------------


def _wait_until(condition, timeout: float = TIMEOUT) -> bool:
    """Poll ``condition`` until it holds or ``timeout`` passes (the outcome, not the time, is asserted)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


def _outcome(call):
    try:
        return call()
    except RuntimeError as exc:
        return str(exc)


def test_two_works_draining_their_queue_at_once_fail_fast_instead_of_waiting_for_each_other():
    # whichever drain comes second would wait for the first work while the first waits for it
    wq = ForeignFlushWorkqueue(workers=2)
    a_inside = threading.Event()
    finished = {"a": threading.Event(), "b": threading.Event()}
    results = {}

    def a():
        a_inside.set()
        results["a"] = _outcome(wq.drain)
        finished["a"].set()

    def b():
        a_inside.wait(TIMEOUT)
        results["b"] = _outcome(wq.drain)
        finished["b"].set()

    try:
        assert wq.queue(WorkItem(a, name="a")) and wq.queue(WorkItem(b, name="b"))
        assert all(e.wait(TIMEOUT) for e in finished.values()), "the two drains waited for each other"
        outcomes = sorted(results.values(), key=str)
        assert outcomes[0] is True, results
        assert "waits in a drain or shutdown: each would wait for the other forever" in outcomes[1]
        assert "from inside work" in outcomes[1] and "'foreign_flush'" in outcomes[1]
        assert wq.drain(TIMEOUT) and wq.stats.completed == 2 and wq.stats.failed == 0
    finally:
        assert wq.shutdown(drain=False, timeout=TIMEOUT) == 0
    assert wq.join(TIMEOUT) and wq.stopped


def test_a_work_shutting_down_its_queue_while_another_work_drains_it_fails_and_changes_nothing():
    wq = ForeignFlushWorkqueue(workers=2)
    closer_running, gate, finished = threading.Event(), threading.Event(), threading.Event()
    results = {}

    def closer():
        closer_running.set()
        gate.wait(TIMEOUT)
        results["shutdown"] = _outcome(lambda: wq.shutdown(drain=False))

    def drainer():
        results["drain"] = wq.drain()     # waits for the closer, which is running
        finished.set()

    try:
        assert wq.queue(WorkItem(closer, name="closer")) and closer_running.wait(TIMEOUT)
        assert wq.queue(WorkItem(drainer, name="drainer"))
        assert _wait_until(lambda: wq._work_waiters), "the drainer never waited"
        gate.set()
        assert finished.wait(TIMEOUT), "the drain and the shutdown waited for each other"
        assert results["drain"] is True
        assert "shutdown(drain=False) from inside work 'closer'" in results["shutdown"]
        assert "while work 'drainer'" in results["shutdown"]
        assert not wq.closed and wq.queue(WorkItem(lambda: None, name="after"))   # still open
        assert wq.drain(TIMEOUT)
    finally:
        wq.shutdown(drain=False, timeout=TIMEOUT)
    assert wq.join(TIMEOUT) and wq.stopped


def test_draining_from_the_only_worker_with_work_pending_fails_fast():
    wq = ForeignFlushWorkqueue(workers=1)
    runs, results = [], {}

    def work():
        assert wq.queue(WorkItem(lambda: runs.append("later"), name="later"))
        results["drain"] = _outcome(wq.drain)
        results["shutdown"] = _outcome(wq.shutdown)

    try:
        assert wq.queue(WorkItem(work, name="first"))
        assert wq.drain(TIMEOUT), "the only worker waited for work that only it could run"
        assert "on the only worker of workqueue 'foreign_flush' with 1 item(s) pending" in results["drain"]
        assert "shutdown(drain=True)" in results["shutdown"]
        assert runs == ["later"] and not wq.closed
    finally:
        wq.shutdown(drain=False, timeout=TIMEOUT)
    assert wq.join(TIMEOUT) and wq.stopped


def test_simulated_queue_refuses_a_second_draining_work_like_the_threaded_one():
    wq = SimulatedWorkqueue(max_active=2, io=lambda request: request.write(request.nr_pages))
    results = {}
    wq.queue(WorkItem(lambda: results.setdefault("a", wq.drain()), name="a"))
    wq.queue(WorkItem(lambda: results.setdefault("b", _outcome(wq.drain)), name="b"))
    stepper = threading.Thread(target=wq.step, daemon=True)   # a hang becomes a failure, not a hung suite
    stepper.start()
    stepper.join(TIMEOUT)
    assert not stepper.is_alive()
    assert results["a"] is True
    assert "drain() from inside work 'b' of workqueue 'simulated' while work 'a'" in results["b"]
    assert wq.idle and wq.stats.completed == 2 and wq.stats.failed == 0
