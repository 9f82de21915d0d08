"""The flush workqueue: the same queueing rules with real worker threads and on simulated time."""
from __future__ import annotations

import threading
import time

import pytest

from pybcache.writeback import ForeignFlushWorkqueue, SimulatedWorkqueue, WorkItem, WriteRequest
from pybcache.writeback import IOStream, WorkqueueStats, WorkState

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


def raises(call, exc: type[Exception], message: str) -> None:
    with pytest.raises(exc) as info:
        call()
    assert str(info.value) == message


class Pages:
    """A mapping with ``dirty`` pages: ``write(n)`` cleans up to ``n`` of them and records each call."""

    def __init__(self, dirty: int) -> None:
        self.dirty = dirty
        self.calls: list[int] = []

    def write(self, n: int) -> int:
        self.calls.append(n)
        done = min(n, self.dirty)
        self.dirty -= done
        return done


def instant() -> SimulatedWorkqueue:
    return SimulatedWorkqueue(max_active=2, io=lambda request: request.write(request.nr_pages))


# -- a work item ------------------------------------------------------------------------------------------------
def test_a_work_items_repr_shows_its_name_its_state_and_a_requeue_while_running():
    wq = SimulatedWorkqueue(max_active=1)
    seen = []

    def work():
        if not seen:                         # the first run queues it once more
            seen.append(repr(item))
            wq.queue(item)
            seen.append(repr(item))

    item = WorkItem(work, name="w")
    assert repr(item) == "WorkItem('w', idle)"
    wq.queue(item)
    assert repr(item) == "WorkItem('w', pending)"
    wq.step()
    assert seen == ["WorkItem('w', running)", "WorkItem('w', running, requeued)"]
    assert repr(item) == "WorkItem('w', idle)" and wq.stats.completed == 2   # the re-queue ran too


def test_a_work_item_names_a_refused_function_or_hook_and_keeps_its_name_as_text():
    raises(lambda: WorkItem(42), TypeError, "fn must be callable, got int")
    raises(lambda: WorkItem(lambda: None, on_cancel=1), TypeError, "on_cancel must be callable or None, got int")
    item = WorkItem(print, name=7)
    assert item.name == "7" and item.fn is print and item.on_cancel is None
    assert item.state is WorkState.IDLE and item.pending is False and item.running is False
    assert item.busy is False


def test_a_write_request_is_normal_io_with_no_availability_cap_by_default():
    request = WriteRequest("m", 3, int)
    assert (request.io_class, request.available) == ("normal", None)


def test_the_counters_as_a_dict_name_every_counter_with_its_value():
    stats = WorkqueueStats(queued=5, duplicates=1, rejected_closed=2, started=4, completed=3, cancelled=1, failed=1,
                           pages_written=9)
    assert stats.as_dict() == {"queued": 5, "duplicates": 1, "rejected_closed": 2, "started": 4, "completed": 3,
                               "cancelled": 1, "failed": 1, "pages_written": 9}


# -- queueing and cancelling ------------------------------------------------------------------------------------
def test_queue_and_cancel_name_a_refused_item_and_change_nothing():
    wq = SimulatedWorkqueue()
    raises(lambda: wq.queue("w"), TypeError, "item must be a WorkItem, got str")
    raises(lambda: wq.cancel("w"), TypeError, "item must be a WorkItem, got str")
    assert wq.stats == WorkqueueStats() and wq.idle


def test_an_item_busy_on_one_executor_is_refused_by_another_by_name_and_not_cancelled_there():
    first, second = SimulatedWorkqueue(), SimulatedWorkqueue()
    item = WorkItem(lambda: None, name="w")
    assert first.queue(item)
    raises(lambda: second.queue(item), ValueError, "item 'w' is queued on another executor")
    assert second.cancel(item) is False
    assert item.state is WorkState.PENDING and first.pending_count == 1
    assert second.stats == WorkqueueStats()
    first.step()
    assert second.queue(item) and item.state is WorkState.PENDING   # idle again: any executor may take it


def test_each_duplicate_and_each_refusal_of_a_closed_queue_is_counted():
    wq = SimulatedWorkqueue()
    item = WorkItem(lambda: None, name="w")
    assert wq.queue(item) and not wq.queue(item) and not wq.queue(item)
    assert wq.stats.duplicates == 2
    wq.shutdown()
    assert not wq.queue(item) and not wq.queue(WorkItem(lambda: None))
    assert wq.stats.rejected_closed == 2 and wq.stats.queued == 1


def test_each_start_is_counted_and_a_running_item_says_so():
    wq = instant()
    seen = []
    items = [WorkItem(lambda: seen.append((items[0].running, items[0].state)), name=str(i)) for i in range(3)]
    for item in items:
        wq.queue(item)
    wq.drain()
    assert seen[0] == (True, WorkState.RUNNING) and wq.stats.started == wq.stats.completed == 3


def test_a_requeue_of_a_running_item_is_pending_once_its_run_ends_and_neither_after_the_rerun():
    wq = SimulatedWorkqueue(max_active=1)
    mapping = Pages(100)
    item = WorkItem(lambda: (yield WriteRequest("m", 2, mapping.write)), name="w")
    wq.queue(item)
    wq.step()
    assert item.running and wq.queue(item)          # running: re-queued
    wq.streams()[0].deliver(2)
    wq.reap()                                       # the run ends: the re-queue waits for a place
    assert item.state is WorkState.PENDING and item.pending is True and repr(item) == "WorkItem('w', pending)"
    assert wq.step() == 1
    wq.streams()[0].deliver(2)
    wq.reap()
    assert item.state is WorkState.IDLE and item.pending is False and wq.stats.completed == 2


def test_a_requeue_pending_after_its_run_can_be_cancelled_and_then_is_not_pending():
    wq = SimulatedWorkqueue(max_active=1)
    item = WorkItem(lambda: (yield WriteRequest("m", 2, Pages(100).write)), name="w")
    wq.queue(item)
    wq.step()
    assert wq.queue(item)
    wq.streams()[0].deliver(2)
    wq.reap()
    assert item.state is WorkState.PENDING and wq.cancel(item)
    assert item.state is WorkState.IDLE and item.pending is False and wq.idle and wq.stats.cancelled == 1


def test_cancelling_an_item_that_was_never_queued_cancels_nothing():
    wq = SimulatedWorkqueue()
    hooks = []
    item = WorkItem(lambda: None, on_cancel=lambda: hooks.append(1))
    assert wq.cancel(item) is False
    assert hooks == [] and wq.stats.cancelled == 0


def test_each_cancel_is_counted_and_leaves_the_item_idle_and_not_pending():
    wq = SimulatedWorkqueue(max_active=1)
    items = [WorkItem(lambda: None, name=str(i)) for i in range(3)]
    for item in items:
        assert wq.queue(item)
    for item in items:
        assert wq.cancel(item)
        assert item.state is WorkState.IDLE and item.pending is False and not item.busy
    assert wq.stats.cancelled == 3 and wq.idle and wq.pending_count == 0


def test_cancelling_the_requeue_of_a_running_item_leaves_it_running_and_not_pending():
    wq = SimulatedWorkqueue(max_active=1)
    seen = []

    def work():
        assert wq.queue(item)
        seen.append((wq.pending_count, item.pending))
        assert wq.cancel(item)
        seen.append((wq.pending_count, item.pending, item.state))

    item = WorkItem(work, name="self")
    wq.queue(item)
    wq.step()
    assert seen == [(1, True), (0, False, WorkState.RUNNING)]
    assert item.state is WorkState.IDLE and wq.stats.cancelled == 1 and wq.stats.completed == 1


def test_each_failed_work_is_counted_and_the_last_error_kept():
    wq = instant()
    for i in range(3):
        wq.queue(WorkItem(lambda i=i: 1 / 0 if i < 2 else int("x"), name=str(i)))
    wq.drain()
    assert wq.stats.failed == 3 and isinstance(wq.last_error, ValueError)


def _raise_chained():
    """A work that fails with a cause raised outside any handler (so it has no context), whose cause has a
    context of its own."""
    try:
        try:
            raise KeyError("inner")
        except KeyError:
            raise OSError("cause")
    except OSError as exc:
        cause = exc
    raise RuntimeError("work") from cause


def test_the_kept_error_drops_the_tracebacks_of_its_cause_and_context_chain():
    wq = instant()
    wq.queue(WorkItem(_raise_chained, name="chain"))
    wq.drain()
    error = wq.last_error
    assert isinstance(error, RuntimeError) and error.__context__ is None
    cause = error.__cause__
    assert isinstance(cause, OSError) and isinstance(cause.__context__, KeyError)
    assert (error.__traceback__, cause.__traceback__, cause.__context__.__traceback__) == (None, None, None)


def test_the_kept_error_of_an_exception_chain_that_loops_is_stripped_once_round():
    def work():
        a, b = OSError("a"), OSError("b")
        try:
            raise b
        except OSError:
            pass
        a.__context__, b.__context__ = b, a     # a loop: each is the other's context
        raise a

    wq = instant()
    wq.queue(WorkItem(work, name="loop"))
    done = threading.Thread(target=wq.drain, daemon=True)   # a loop that never ends fails, not hangs
    done.start()
    done.join(TIMEOUT)
    assert not done.is_alive(), "stripping a looping chain never ended"
    error = wq.last_error
    assert str(error) == "a" and error.__traceback__ is None and error.__context__.__traceback__ is None


# -- pages written ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("executor", ["threads", "simulated"])
def test_the_pages_written_add_up_over_every_request_of_every_work(executor):
    wq = ForeignFlushWorkqueue(workers=1) if executor == "threads" else instant()
    mapping = Pages(100)
    got = []

    def work(sizes):
        for n in sizes:
            got.append((yield WriteRequest("m", n, mapping.write)))

    try:
        assert wq.queue(WorkItem(lambda: work([5, 7]), name="a"))
        assert wq.queue(WorkItem(lambda: work([11]), name="b"))
        assert wq.drain(TIMEOUT)
        assert got == [5, 7, 11] and wq.stats.pages_written == 23
    finally:
        wq.shutdown(drain=False, timeout=TIMEOUT)


def test_the_threaded_queues_own_io_writes_nothing_for_a_request_of_no_pages_and_every_page_of_one():
    wq = ForeignFlushWorkqueue(workers=1)
    mapping = Pages(100)
    got = []

    def work():
        for n in (0, -3, 1, 2):
            got.append((yield WriteRequest("m", n, mapping.write)))

    try:
        assert wq.queue(WorkItem(work, name="w")) and wq.drain(TIMEOUT)
        assert got == [0, 0, 1, 2] and mapping.calls == [1, 2] and wq.stats.pages_written == 3
    finally:
        wq.shutdown(drain=False, timeout=TIMEOUT)


# -- an I/O stream ----------------------------------------------------------------------------------------------
def test_a_stream_of_no_pages_is_done_at_once_and_never_writes():
    mapping = Pages(10)
    stream = IOStream(WriteRequest("m", 0, mapping.write))
    assert stream.done is True and stream.demand_pages() == 0
    assert stream.deliver(5) == 0 and mapping.calls == []
    assert IOStream(WriteRequest("m", 1, mapping.write)).done is False


def test_a_streams_demand_is_what_is_left_of_its_request_then_nothing_once_done():
    mapping = Pages(100)
    stream = IOStream(WriteRequest("m", 10, mapping.write))
    assert stream.demand_pages() == 10
    assert stream.deliver(4) == 4 and stream.demand_pages() == 6 and stream.done is False
    assert stream.deliver(0) == 0 and mapping.calls == [4]      # no pages granted: nothing written
    assert stream.deliver(100) == 6 and mapping.calls == [4, 6]  # asks only for what is left
    assert stream.done is True and stream.demand_pages() == 0
    assert stream.deliver(5) == 0 and mapping.calls == [4, 6]   # done: takes no more pages


def test_a_stream_granted_one_page_writes_it():
    mapping = Pages(100)
    stream = IOStream(WriteRequest("m", 3, mapping.write))
    assert stream.deliver(1) == 1 and mapping.calls == [1] and stream.written == 1


def test_a_stream_is_done_when_its_write_falls_short_or_reaches_the_request():
    short = IOStream(WriteRequest("m", 10, Pages(3).write))
    assert short.deliver(5) == 3 and short.done is True            # fewer than asked: nothing left to write
    exact = IOStream(WriteRequest("m", 4, Pages(10).write))
    assert exact.deliver(4) == 4 and exact.done is True            # the whole request written


def test_a_streams_demand_is_capped_by_what_is_available_and_ends_it_at_none():
    mapping = Pages(100)
    avail = {"n": 3}
    stream = IOStream(WriteRequest("m", 10, mapping.write, available=lambda: avail["n"]))
    assert stream.demand_pages() == 3 and stream.done is False
    avail["n"] = 1
    assert stream.demand_pages() == 1 and stream.done is False
    avail["n"] = -5                                                 # never a negative demand
    assert stream.demand_pages() == 0 and stream.done is True


# -- the simulated executor -------------------------------------------------------------------------------------
def test_step_starts_at_most_max_active_items_and_says_how_many():
    wq = SimulatedWorkqueue(max_active=2)
    for i in range(3):
        wq.queue(WorkItem(lambda: (yield WriteRequest("m", 1, int)), name=str(i)))
    assert wq.step() == 2 and wq.running_count == 2 and wq.pending_count == 1
    assert wq.step() == 0


def test_a_finished_stream_leaves_the_streams_before_it_is_reaped():
    wq = SimulatedWorkqueue(max_active=2)
    mapping = Pages(100)
    for n in (3, 5):
        wq.queue(WorkItem(lambda n=n: (yield WriteRequest("m", n, mapping.write)), name=str(n)))
    wq.step()
    first, second = wq.streams()
    first.deliver(3)
    assert wq.streams() == [second]


def test_reap_resumes_every_finished_stream_adds_their_pages_and_says_how_many():
    wq = SimulatedWorkqueue(max_active=3)
    mapping = Pages(100)
    got = []

    def work(n):
        got.append((yield WriteRequest("m", n, mapping.write)))

    for n in (3, 5, 7):
        wq.queue(WorkItem(lambda n=n: work(n), name=str(n)))
    wq.step()
    a, b, c = wq.streams()
    a.deliver(3)
    b.deliver(5)
    assert wq.reap() == 2 and sorted(got) == [3, 5] and wq.stats.pages_written == 8
    c.deliver(7)
    assert wq.reap() == 1 and wq.stats.pages_written == 15 and wq.idle


def test_a_stream_whose_pages_are_no_longer_available_is_reaped_at_once_with_what_it_wrote():
    wq = SimulatedWorkqueue(max_active=1)
    mapping = Pages(100)
    avail = {"n": 10}
    got = []

    def work():
        got.append((yield WriteRequest("m", 10, mapping.write, available=lambda: avail["n"])))

    wq.queue(WorkItem(work, name="w"))
    wq.step()
    (stream,) = wq.streams()
    stream.deliver(4)
    avail["n"] = 0                 # someone else cleaned the rest
    assert wq.reap() == 1 and got == [4] and wq.idle


def test_a_simulated_work_can_drain_its_queue_after_its_io_was_served():
    wq = SimulatedWorkqueue(max_active=2)
    mapping = Pages(100)
    results = {}

    def drainer():
        results["wrote"] = yield WriteRequest("m", 2, mapping.write)
        results["drain"] = wq.drain()

    def other():
        results["other"] = yield WriteRequest("m", 3, mapping.write)

    wq.queue(WorkItem(drainer, name="drainer"))
    wq.queue(WorkItem(other, name="other"))
    wq.step()
    mine, _ = wq.streams()
    mine.deliver(2)
    assert wq.reap() == 1
    assert results == {"wrote": 2, "drain": True, "other": 3}
    assert wq.idle and wq.stats.failed == 0 and wq.stats.pages_written == 5


# -- the threaded queue: bounded waits ----------------------------------------------------------------------------
def test_a_threaded_drain_with_a_timeout_gives_up_while_a_work_runs():
    wq = ForeignFlushWorkqueue(workers=1)
    started, gate = threading.Event(), threading.Event()

    def blocker():
        started.set()
        gate.wait(TIMEOUT)

    try:
        wq.queue(WorkItem(blocker, name="blocker"))
        assert started.wait(TIMEOUT)
        assert wq.drain(timeout=0) is False
        raises(lambda: wq.drain(timeout=-1), ValueError, "timeout must be in [0, inf), got -1")
    finally:
        gate.set()
    assert wq.drain(TIMEOUT) and wq.shutdown(timeout=TIMEOUT) == 0 and wq.stopped


def test_a_work_that_drained_its_queue_does_not_stop_a_later_work_from_draining_it():
    wq = ForeignFlushWorkqueue(workers=2)
    results = []
    try:
        for name in ("first", "second"):
            assert wq.queue(WorkItem(lambda: results.append(wq.drain(TIMEOUT)), name=name))
            assert wq.drain(TIMEOUT)
        assert results == [True, True] and wq.stats.failed == 0
    finally:
        wq.shutdown(drain=False, timeout=TIMEOUT)


def test_a_drain_refused_on_the_only_worker_says_which_call_work_queue_and_how_many_wait():
    wq = ForeignFlushWorkqueue("wbq", workers=1)
    messages = []

    def work():
        wq.queue(WorkItem(lambda: None, name="later"))
        try:
            wq.drain()
        except RuntimeError as exc:
            messages.append(str(exc))

    try:
        assert wq.queue(WorkItem(work, name="first")) and wq.drain(TIMEOUT)
        assert messages == ["drain() from inside work 'first' on the only worker of workqueue 'wbq' with 1 item(s) "
                            "pending: no worker is left to run them"]
    finally:
        wq.shutdown(drain=False, timeout=TIMEOUT)


class _RecordingQueue(ForeignFlushWorkqueue):
    def shutdown(self, **kwargs):
        self.asked = kwargs
        return super().shutdown(**kwargs)


def test_leaving_a_with_block_shuts_the_queue_down_draining_it():
    runs = []
    with _RecordingQueue(workers=1) as wq:
        wq.queue(WorkItem(lambda: runs.append(1), name="w"))
    assert wq.asked == {"drain": True}
    assert runs == [1] and wq.closed and wq.join(TIMEOUT)


def test_a_simulated_shutdown_drains_by_default():
    wq = instant()
    runs = []
    for i in range(3):
        wq.queue(WorkItem(lambda i=i: runs.append(i), name=str(i)))
    assert wq.shutdown() == 0 and runs == [0, 1, 2] and wq.closed and wq.idle


def test_a_simulated_work_shutting_its_queue_down_and_one_draining_it_refuse_each_other_by_call():
    wq = instant()
    results = {}
    wq.queue(WorkItem(lambda: results.setdefault("a", wq.drain()), name="a"))
    wq.queue(WorkItem(lambda: results.setdefault("b", _outcome(lambda: wq.shutdown(drain=False))), name="b"))
    wq.step()
    assert results == {"a": True, "b": "shutdown(drain=False) from inside work 'b' of workqueue 'simulated' while "
                                        "work 'a' of the same queue waits in a drain or shutdown: each would wait "
                                        "for the other forever"}
    assert not wq.closed

    wq = instant()
    results = {}
    wq.queue(WorkItem(lambda: results.setdefault("a", wq.shutdown(drain=True)), name="a"))
    wq.queue(WorkItem(lambda: results.setdefault("b", _outcome(wq.drain)), name="b"))
    wq.step()
    assert results["a"] == 0 and results["b"].startswith("drain() from inside work 'b' of workqueue 'simulated' "
                                                         "while work 'a'")
    assert wq.closed and wq.idle


def _wait_bounded(condition) -> bool:
    """Wait on ``condition`` (bounded by TIMEOUT): the outcome, not the time, is asserted."""
    gate = threading.Event()
    for _ in range(int(TIMEOUT * 1000)):
        if condition():
            return True
        gate.wait(0.001)
    return condition()


# -- the threaded queue: its construction, timeouts and shutdown -------------------------------------------------
def test_a_threaded_queue_names_a_refused_worker_count_or_io_function():
    raises(lambda: ForeignFlushWorkqueue(workers=257), ValueError, "workers must be in [1, 256], got 257")
    raises(lambda: ForeignFlushWorkqueue(io=1), TypeError, "io must be callable or None, got int")


def test_a_threaded_queue_has_four_daemon_workers_named_after_it_by_default():
    wq = ForeignFlushWorkqueue("wbq")
    try:
        assert [t.name for t in wq._threads] == ["wbq/0", "wbq/1", "wbq/2", "wbq/3"]
        assert all(t.daemon for t in wq._threads)      # a stuck work never keeps the interpreter alive
    finally:
        wq.shutdown(timeout=TIMEOUT)


def test_a_deadline_that_passed_leaves_no_time_and_no_deadline_leaves_no_limit():
    from pybcache.writeback import workqueue
    now = workqueue.time.monotonic()
    assert workqueue._remaining(now - 5) == 0.0 and workqueue._remaining(None) is None
    assert 0 < workqueue._remaining(now + 100) <= 100
    assert workqueue._deadline(None) is None
    raises(lambda: workqueue._deadline(-0.5), ValueError, "timeout must be in [0, inf), got -0.5")


def test_a_plain_function_work_writes_no_pages_on_the_threaded_queue():
    wq = ForeignFlushWorkqueue(workers=1)
    try:
        assert wq.queue(WorkItem(lambda: None, name="plain")) and wq.drain(TIMEOUT)
        assert wq.stats.pages_written == 0 and wq.stats.completed == 1
    finally:
        wq.shutdown(drain=False, timeout=TIMEOUT)


def test_a_work_shutting_its_threaded_queue_down_refuses_a_drain_from_another_work():
    wq = ForeignFlushWorkqueue(workers=2)
    results = {}
    closer_in = threading.Event()

    def closer():
        closer_in.set()
        results["closer"] = wq.shutdown(drain=True, timeout=TIMEOUT)

    def drainer():
        closer_in.wait(TIMEOUT)
        _wait_bounded(lambda: wq.closed)
        results["drainer"] = _outcome(lambda: wq.drain(TIMEOUT))

    try:
        assert wq.queue(WorkItem(drainer, name="drainer")) and wq.queue(WorkItem(closer, name="closer"))
        assert _wait_bounded(lambda: len(results) == 2)
        assert results["closer"] == 0
        assert results["drainer"] == ("drain() from inside work 'drainer' of workqueue 'foreign_flush' while work "
                                      "'closer' of the same queue waits in a drain or shutdown: each would wait for "
                                      "the other forever")
    finally:
        wq.shutdown(drain=False, timeout=TIMEOUT)
    assert wq.join(TIMEOUT) and wq.stopped


def test_a_second_shutdown_from_inside_a_work_returns_at_once_and_blocks_no_later_drain():
    wq = ForeignFlushWorkqueue(workers=2)
    results = {}
    x_done = threading.Event()

    def x():
        _wait_bounded(lambda: wq.closed)              # the first shutdown has begun (and drains)
        results["x"] = wq.shutdown()
        x_done.set()

    def y():
        x_done.wait(TIMEOUT)
        results["y"] = _outcome(lambda: wq.drain(TIMEOUT))

    assert wq.queue(WorkItem(x, name="x")) and wq.queue(WorkItem(y, name="y"))
    assert wq.shutdown(drain=True, timeout=TIMEOUT) == 0
    assert results == {"x": 0, "y": True} and wq.stopped


def test_a_second_shutdown_waits_for_the_first_and_its_workers_but_only_within_its_own_timeout():
    wq = ForeignFlushWorkqueue(workers=1)
    started, gate = threading.Event(), threading.Event()
    results = {}

    def blocker():
        started.set()
        gate.wait(TIMEOUT)

    def first():
        results["first"] = wq.shutdown(drain=True, timeout=TIMEOUT)

    def second():
        results["second"] = wq.shutdown()
        results["stopped when the second returned"] = wq.stopped

    wq.queue(WorkItem(blocker, name="blocker"))
    assert started.wait(TIMEOUT)
    threads = [threading.Thread(target=first, daemon=True)]
    threads[0].start()
    try:
        assert _wait_bounded(lambda: wq.closed)
        assert wq.shutdown(timeout=0) == 0
        assert wq.running_count == 1                # it did not wait for the first (nor for the blocker)
        threads.append(threading.Thread(target=second, daemon=True))
        threads[1].start()
    finally:
        gate.set()
    for t in threads:
        t.join(TIMEOUT)
    assert results == {"first": 0, "second": 0, "stopped when the second returned": True}


def test_after_a_first_shutdown_timed_out_a_second_with_a_timeout_does_not_wait_for_the_running_work():
    wq = ForeignFlushWorkqueue(workers=1)
    started, gate = threading.Event(), threading.Event()

    def blocker():
        started.set()
        gate.wait(TIMEOUT)

    wq.queue(WorkItem(blocker, name="blocker"))
    try:
        assert started.wait(TIMEOUT)
        assert wq.shutdown(timeout=0) == 0 and not wq.stopped
        assert wq.shutdown(timeout=0) == 0
        assert wq.running_count == 1 and not wq.stopped
    finally:
        gate.set()
    assert wq.join(TIMEOUT) and wq.stopped


# -- more of the simulated executor: defaults, drain, shutdown without drain -------------------------------------
def test_a_simulated_queue_names_a_refused_max_active_or_io_and_runs_four_at_once_by_default():
    raises(lambda: SimulatedWorkqueue(max_active=257), ValueError, "max_active must be in [1, 256], got 257")
    raises(lambda: SimulatedWorkqueue(io=1), TypeError, "io must be callable or None, got int")
    wq = SimulatedWorkqueue()
    for i in range(5):
        wq.queue(WorkItem(lambda: (yield WriteRequest("m", 1, int)), name=str(i)))
    assert wq.step() == 4 and wq.pending_count == 1


def test_a_new_queue_and_item_are_open_without_error_and_unnamed():
    wq = SimulatedWorkqueue()
    assert wq.closed is False and wq.last_error is None and wq.idle
    assert WorkItem(print).name == ""


def test_drain_serves_outstanding_io_at_once_including_a_write_that_falls_short():
    wq = SimulatedWorkqueue(max_active=2)
    full, short = Pages(100), Pages(4)
    got = {}

    def work(name, mapping, n):
        got[name] = yield WriteRequest(name, n, mapping.write)

    wq.queue(WorkItem(lambda: work("full", full, 10), name="full"))
    wq.queue(WorkItem(lambda: work("short", short, 10), name="short"))
    wq.step()
    wq.streams()[0].deliver(3)                   # partly served before the drain
    assert wq.drain() is True
    assert got == {"full": 10, "short": 4} and wq.idle and wq.stats.pages_written == 14


def test_drain_runs_more_works_than_max_active_one_after_another():
    wq = SimulatedWorkqueue(max_active=1)
    mapping = Pages(100)
    got = []
    for n in (2, 3, 4):
        wq.queue(WorkItem(lambda n=n: got.append((yield WriteRequest("m", n, mapping.write))), name=str(n)))
    assert wq.drain() is True
    assert got == [2, 3, 4] and wq.idle and wq.stats.completed == 3


def test_shutdown_without_drain_cancels_pending_items_and_a_running_items_requeue_once_each():
    wq = SimulatedWorkqueue(max_active=1)
    hooks, runs, results = [], [], {}
    pending = [WorkItem(lambda: runs.append("never"), name=f"p{i}", on_cancel=lambda i=i: hooks.append(f"p{i}"))
               for i in range(2)]
    early = WorkItem(lambda: None, name="early", on_cancel=lambda: hooks.append("early"))

    def work():
        runs.append("self")
        assert wq.queue(item)                    # a re-queue while running
        for other in pending:
            wq.queue(other)
        results["cancelled"] = wq.shutdown(drain=False)
        results["still pending"] = item.pending

    item = WorkItem(work, name="self", on_cancel=lambda: hooks.append("self"))
    wq.queue(early)
    assert wq.cancel(early)
    wq.queue(item)
    wq.step()
    assert results == {"cancelled": 3, "still pending": False} and runs == ["self"]
    assert sorted(hooks) == ["early", "p0", "p1", "self"]
    assert wq.stats.cancelled == 4 and wq.stats.failed == 0
    assert all(i.state is WorkState.IDLE and i.pending is False for i in [item, *pending])
    assert wq.step() == 0 and wq.idle


def test_while_a_shutdown_from_outside_drains_two_works_draining_the_queue_still_refuse_each_other():
    wq = ForeignFlushWorkqueue(workers=2)
    results = {}

    def a():
        _wait_bounded(lambda: wq.closed)
        results["a"] = _outcome(lambda: wq.drain(TIMEOUT))

    def b():
        _wait_bounded(lambda: item_a in wq._work_waiters.values())    # a waits in its drain
        results["b"] = _outcome(lambda: wq.drain(TIMEOUT))

    item_a = WorkItem(a, name="a")
    assert wq.queue(item_a) and wq.queue(WorkItem(b, name="b"))
    assert wq.shutdown(drain=True, timeout=TIMEOUT) == 0
    assert results["a"] is True
    assert results["b"].startswith("drain() from inside work 'b' of workqueue 'foreign_flush' while work 'a'")
    assert wq.stopped
