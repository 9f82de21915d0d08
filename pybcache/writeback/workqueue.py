"""The dedicated foreign-flush workqueue: real worker threads, and a simulated-time executor with the same interface.

A :class:`WorkItem` is preallocated by its owner (the series keeps one per dev_t slot, so tracking and queueing
never allocate). Queueing follows the kernel's ``queue_work`` rules:

* an item that is already pending is not queued again (``queue`` returns False);
* an item that is running may be queued once more; it runs again after the current run ends, never
  concurrently with itself;
* ``cancel`` removes a pending instance and calls the item's ``on_cancel`` hook exactly once for it, so an
  owner that took a reference when queueing can drop it.

A work function returns None or a generator. A generator yields :class:`WriteRequest` objects and receives the
number of pages written for each: the threaded queue performs each request at once in the worker thread,
the simulated executor turns it into an :class:`IOStream` that advances only as the simulated device grants
bandwidth. The same work code therefore runs under both executors. If performing a request raises, the
exception is thrown into the generator at its ``yield`` (so its ``finally`` blocks release what it holds at
once), and the work counts as failed unless it handles the error and goes on.
"""
from __future__ import annotations

import enum
import threading
import time
from collections import deque
from dataclasses import dataclass
from types import GeneratorType
from typing import Callable, Generator, Optional, Protocol

from ..validate import check_callable, check_instance, check_int, check_number

__all__ = ["WorkItem", "WorkState", "WriteRequest", "IOStream", "WorkqueueStats", "ForeignFlushWorkqueue",
           "SimulatedWorkqueue", "WorkFunction", "FlushExecutor"]

WorkResult = Optional[Generator["WriteRequest", int, None]]
WorkFunction = Callable[[], WorkResult]


class FlushExecutor(Protocol):
    """What the model needs from a flush workqueue; both executors here provide it."""

    stats: "WorkqueueStats"

    def queue(self, item: "WorkItem") -> bool: ...

    def cancel(self, item: "WorkItem") -> bool: ...

    def drain(self, timeout: float | None = None) -> bool: ...

    def shutdown(self, *, drain: bool = True, timeout: float | None = None) -> int: ...

    @property
    def idle(self) -> bool: ...


class WorkState(enum.Enum):
    """Where a :class:`WorkItem` is: idle, waiting for a worker, or running."""

    IDLE = "idle"
    PENDING = "pending"
    RUNNING = "running"


class WorkItem:
    """A reusable unit of work, queued on at most one executor.

    Invariant: an item is in at most one executor's pending list at most once, and never runs on two workers
    at the same time.

    :param fn: the work; returns None or a generator of :class:`WriteRequest`.
    :param name: a label for reports.
    :param on_cancel: called once for every queued instance that is cancelled before it ran.
    """

    __slots__ = ("fn", "name", "on_cancel", "_state", "_requeue", "_owner")

    def __init__(self, fn: WorkFunction, *, name: str = "", on_cancel: Callable[[], None] | None = None) -> None:
        check_callable(fn, "fn")
        check_callable(on_cancel, "on_cancel", allow_none=True)
        self.fn = fn
        self.name = str(name)
        self.on_cancel = on_cancel
        self._state = WorkState.IDLE
        self._requeue = False
        self._owner: object | None = None

    @property
    def state(self) -> WorkState:
        """The item's state (a snapshot)."""
        return self._state

    @property
    def pending(self) -> bool:
        """True while an instance waits for a worker (including a re-queue of a running item)."""
        return self._state is WorkState.PENDING or self._requeue

    @property
    def running(self) -> bool:
        """True while a worker executes the item."""
        return self._state is WorkState.RUNNING

    @property
    def busy(self) -> bool:
        """True if pending or running."""
        return self._state is not WorkState.IDLE

    def __repr__(self) -> str:
        return f"WorkItem({self.name!r}, {self._state.value}{', requeued' if self._requeue else ''})"


@dataclass
class WriteRequest:
    """A write-back request a work yields: write up to ``nr_pages`` of ``target``.

    :param target: what is written (a label for reports).
    :param nr_pages: the most pages this request may write (>= 0).
    :param write: ``write(n)`` writes up to ``n`` pages now and returns how many it wrote; fewer than asked
        means nothing is left to write.
    :param io_class: ``"normal"`` or ``"background"``: the write-throttling class the device model uses.
    :param available: optional ``available()``: how many pages could be written right now (caps demand).
    """

    target: str
    nr_pages: int
    write: Callable[[int], int]
    io_class: str = "normal"
    available: Callable[[], int] | None = None


@dataclass
class WorkqueueStats:
    """Counters of one executor. At quiescence: ``queued == completed + cancelled`` and
    ``started == completed``."""

    queued: int = 0
    duplicates: int = 0
    rejected_closed: int = 0
    started: int = 0
    completed: int = 0
    cancelled: int = 0
    failed: int = 0
    pages_written: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


def _perform_now(request: WriteRequest) -> int:
    """Perform a request at once (the threaded queue's default I/O)."""
    return int(request.write(request.nr_pages)) if request.nr_pages > 0 else 0


def _without_traceback(exc: BaseException) -> BaseException:
    """``exc`` with its traceback, and those of its cause and context, dropped."""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        link.__traceback__ = None
        link = link.__cause__ or link.__context__
    return exc


class _Drive:
    """Runs a generator work against an I/O function: the pages each request wrote are sent back; an I/O
    error is thrown in at the ``yield``; the generator is always closed, so its cleanup never waits for the
    garbage collector. ``written`` counts pages even when the work fails part-way."""

    __slots__ = ("gen", "written")

    def __init__(self, gen: Generator[WriteRequest, int, None]) -> None:
        self.gen = gen
        self.written = 0

    def resume(self, io: Callable[[WriteRequest], int], request: WriteRequest) -> WriteRequest:
        """Perform ``request`` and resume the work; returns its next request (StopIteration at its end)."""
        try:
            pages = int(io(request))
        except BaseException as exc:
            return self.gen.throw(exc)
        self.written += pages
        return self.gen.send(pages)

    def run(self, io: Callable[[WriteRequest], int]) -> None:
        """Run the work to its end (returns) or failure (raises), closing it either way."""
        try:
            request = next(self.gen)
            while True:
                request = self.resume(io, request)
        except StopIteration:
            return
        finally:
            self.gen.close()


class _ExecutorBase:
    """Queueing rules shared by both executors; subclasses provide the lock and the wake-up."""

    _lock: threading.Condition

    def __init__(self) -> None:
        self._pending: deque[WorkItem] = deque()
        self._running = 0
        self._closed = False
        self.stats = WorkqueueStats()
        # the last exception a work raised, its traceback dropped so that it does not keep the failed work's
        # frames (and the devices and memcgs they reference) alive
        self.last_error: BaseException | None = None

    # -- queueing -------------------------------------------------------------------------------
    def queue(self, item: WorkItem) -> bool:
        """Queue ``item``; False if it is already pending or the executor is shut down.

        :raises TypeError: if ``item`` is not a :class:`WorkItem`.
        :raises ValueError: if ``item`` is queued on another executor.
        """
        check_instance(item, "item", WorkItem, "a WorkItem")
        with self._lock:
            if item._owner is not None and item._owner is not self and item.busy:
                raise ValueError(f"item {item.name!r} is queued on another executor")
            if self._closed:
                self.stats.rejected_closed += 1
                return False
            if item._state is WorkState.PENDING or item._requeue:
                self.stats.duplicates += 1
                return False
            item._owner = self
            self.stats.queued += 1
            if item._state is WorkState.RUNNING:
                item._requeue = True
            else:
                item._state = WorkState.PENDING
                self._pending.append(item)
                self._wake()
            return True

    def cancel(self, item: WorkItem) -> bool:
        """Cancel a pending instance of ``item`` (a running one is left to finish). True if one was cancelled."""
        check_instance(item, "item", WorkItem, "a WorkItem")
        with self._lock:
            if item._owner is not self:
                return False
            if item._state is WorkState.PENDING:
                self._pending.remove(item)
                item._state = WorkState.IDLE
            elif item._requeue:
                item._requeue = False
            else:
                return False
            self.stats.cancelled += 1
            hook = item.on_cancel
            self._lock.notify_all()
        if hook is not None:
            hook()
        return True

    def _cancel_all_pending(self) -> int:
        hooks: list[Callable[[], None]] = []
        with self._lock:
            items = list(self._pending)
            self._pending.clear()
            for item in items:
                item._state = WorkState.IDLE
                if item.on_cancel is not None:
                    hooks.append(item.on_cancel)
            cancelled = len(items)
            # a running item's re-queue is cancelled too
            for item in self._running_items():
                if item._requeue:
                    item._requeue = False
                    cancelled += 1
                    if item.on_cancel is not None:
                        hooks.append(item.on_cancel)
            self.stats.cancelled += cancelled
            self._lock.notify_all()
        for hook in hooks:
            hook()
        return cancelled

    def _running_items(self) -> list[WorkItem]:  # pragma: no cover - overridden
        return []

    def _record_failure(self, exc: BaseException) -> None:
        """Count a failed work (lock held) and keep its exception without tracebacks."""
        self.stats.failed += 1
        self.last_error = _without_traceback(exc)

    def _wake(self) -> None:  # pragma: no cover - overridden
        pass

    # -- state --------------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        """True once :meth:`shutdown` has begun; nothing can be queued any more."""
        return self._closed

    @property
    def pending_count(self) -> int:
        """Instances waiting for a worker."""
        with self._lock:
            return len(self._pending) + sum(1 for item in self._running_items() if item._requeue)

    @property
    def running_count(self) -> int:
        """Items being executed now."""
        with self._lock:
            return self._running

    @property
    def idle(self) -> bool:
        """True if nothing is pending or running."""
        with self._lock:
            return not self._pending and self._running == 0

    def _begin(self, item: WorkItem) -> None:
        """Move a popped item to RUNNING (lock held)."""
        item._state = WorkState.RUNNING
        self._running += 1
        self.stats.started += 1

    def _end(self, item: WorkItem) -> None:
        """Finish a run (lock held): requeue if asked while running, else back to IDLE."""
        self._running -= 1
        self.stats.completed += 1
        if item._requeue:
            item._requeue = False
            item._state = WorkState.PENDING
            self._pending.append(item)
            self._wake()
        else:
            item._requeue = False
            item._state = WorkState.IDLE
        self._lock.notify_all()


class ForeignFlushWorkqueue(_ExecutorBase):
    """A workqueue with real worker threads (the series' dedicated flush workqueue).

    Invariant: every queued instance either runs exactly once or is cancelled exactly once (its
    ``on_cancel`` hook called). Idle workers and :meth:`drain` waiters wait on two conditions of one lock,
    so a wake-up meant for a worker is never taken by a drain waiter. Exactly one :meth:`shutdown` call runs
    the shutdown; later and concurrent calls wait for it instead. At most one work at a time waits for the
    rest of the queue (in :meth:`drain` or :meth:`shutdown`): a second one would wait for the first while
    the first waits for it, so its call raises RuntimeError instead (the kernel's lockdep warns on a
    flush_workqueue() from a work of the same workqueue).

    :param name: the queue's name (thread names derive from it).
    :param workers: worker threads, 1..256; default 4 (one per vCPU of the v6 cover letter's VM).
    :param io: performs a :class:`WriteRequest` and returns pages written; default: at once, in the worker.
    """

    def __init__(self, name: str = "foreign_flush", *, workers: int = 4,
                 io: Callable[[WriteRequest], int] | None = None) -> None:
        workers = check_int(workers, "workers", 1, 256)
        check_callable(io, "io", allow_none=True)
        super().__init__()
        self.name = str(name)
        mutex = threading.Lock()
        # Every field below is protected by ``mutex``. ``_lock`` is signalled when an item ends or is
        # cancelled (drain and shutdown wait there); ``_work_ready`` when an item is pending or the workers
        # must stop (only idle workers wait there).
        self._lock = threading.Condition(mutex)
        self._work_ready = threading.Condition(mutex)
        self._io = io or _perform_now
        self._stopping = False                      # workers exit once nothing is pending
        self._current: dict[int, WorkItem] = {}     # worker thread ident -> the item it runs
        # worker ident -> its item, while that work waits for the rest of the queue (in drain or shutdown)
        self._work_waiters: dict[int, WorkItem] = {}
        self._shutdown_done = threading.Event()     # set when the shutdown call that ran the path returns
        self._threads = [threading.Thread(target=self._worker, name=f"{self.name}/{i}", daemon=True)
                         for i in range(workers)]
        for thread in self._threads:
            thread.start()

    def _wake(self) -> None:
        self._work_ready.notify()

    def _running_items(self) -> list[WorkItem]:
        return list(self._current.values())

    def _worker(self) -> None:
        ident = threading.get_ident()
        while True:
            with self._lock:
                while not self._pending and not self._stopping:
                    self._work_ready.wait()
                if not self._pending:
                    return
                item = self._pending.popleft()
                self._begin(item)
                self._current[ident] = item
            drive: _Drive | None = None
            try:
                result = item.fn()
                if isinstance(result, GeneratorType):
                    drive = _Drive(result)
                    drive.run(self._io)
            except BaseException as exc:  # a failing work must not kill the worker
                with self._lock:
                    self._record_failure(exc)
            finally:
                with self._lock:
                    self.stats.pages_written += drive.written if drive is not None else 0
                    del self._current[ident]
                    self._end(item)
                drive = result = None   # drop the finished work before waiting for the next

    # -- waiting ----------------------------------------------------------------------------------
    def _in_work(self) -> bool:
        """True if the calling thread is a worker running an item (lock held)."""
        return threading.get_ident() in self._current

    def _refuse_hopeless_work_wait(self, what: str, *, waits_for_pending: bool) -> None:
        """Raise (lock held) if the calling work's drain or shutdown could never end: another work of this
        queue already waits for the rest of the queue in drain() or shutdown() (each would wait for the
        other), or, when the call waits for pending items, the caller is the only worker and items are
        pending (no worker is left to run them). The kernel's lockdep likewise warns on a
        flush_workqueue() from a work of the same workqueue."""
        item = self._current.get(threading.get_ident())
        if item is None:
            return
        other = next(iter(self._work_waiters.values()), None)
        if other is not None:
            raise _mutual_wait_error(what, item, other, self.name)
        if waits_for_pending and self._pending and len(self._threads) == 1:
            raise RuntimeError(
                f"{what} from inside work {item.name!r} on the only worker of workqueue {self.name!r} with "
                f"{len(self._pending)} item(s) pending: no worker is left to run them")

    def _wait_idle(self, deadline: float | None) -> bool:
        """Wait (lock held) until nothing is pending and nothing runs but the caller's own item."""
        own = 1 if self._in_work() else 0
        return self._lock.wait_for(lambda: not self._pending and self._running == own, _remaining(deadline))

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until nothing is pending or running (works queued meanwhile are waited for too). Called from
        inside a work, it waits for everything but that work.

        :param timeout: seconds to wait at most, or None for no limit.
        :returns: True if the queue became idle.
        :raises RuntimeError: called from inside a work while another work of this queue waits in
            :meth:`drain` or :meth:`shutdown` (they would wait for each other forever), or from the only
            worker while items are pending; nothing is changed.
        """
        deadline = _deadline(timeout)
        ident = threading.get_ident()
        with self._lock:
            self._refuse_hopeless_work_wait("drain()", waits_for_pending=True)
            own = self._current.get(ident)
            if own is not None:
                self._work_waiters[ident] = own
            try:
                return self._wait_idle(deadline)
            finally:
                self._work_waiters.pop(ident, None)

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the worker threads to exit (they do once :meth:`shutdown` has stopped them and their
        current items have ended); a worker calling this does not wait for itself.

        :param timeout: seconds to wait at most, or None for no limit.
        :returns: True if every worker thread has exited (:attr:`stopped`).
        """
        deadline = _deadline(timeout)
        me = threading.current_thread()
        for thread in self._threads:
            if thread is not me:
                thread.join(_remaining(deadline))
        return self.stopped

    @property
    def stopped(self) -> bool:
        """True once every worker thread has exited."""
        return not any(thread.is_alive() for thread in self._threads)

    def shutdown(self, *, drain: bool = True, timeout: float | None = None) -> int:
        """Stop accepting work, then drain (run everything pending) or cancel what is pending, and wait for
        the workers to exit. Running items always finish; they are never interrupted.

        ``timeout`` bounds the whole call: when it passes, what is still pending is cancelled and the call
        returns although a running item may not have ended (:attr:`stopped` is then False; the workers exit
        after their items, and :meth:`join` waits for that). Called from inside a work, it drains everything
        else and returns without waiting for that work. Only the first call runs the shutdown; a later or
        concurrent call waits (within its own timeout) for that one and the workers, then returns 0 (from
        inside a work it returns 0 at once, since the first call may be waiting for that work).

        :param drain: run pending items first (True) or cancel them (False).
        :param timeout: seconds the call may take at most, or None for no limit.
        :returns: how many pending instances this call cancelled.
        :raises RuntimeError: for the first call from inside a work while another work of this queue waits
            in :meth:`drain` (this call would wait for that work's thread while it waits for this work),
            or, with ``drain=True``, as :meth:`drain`; the queue is then left open and unchanged.
        """
        deadline = _deadline(timeout)
        ident = threading.get_ident()
        with self._lock:
            first = not self._closed
            if first:
                self._refuse_hopeless_work_wait(f"shutdown(drain={drain})", waits_for_pending=drain)
            self._closed = True
            own = self._current.get(ident)
            if first and own is not None:
                self._work_waiters[ident] = own   # it waits for the other workers' threads below
        if not first:
            if own is None and self._shutdown_done.wait(_remaining(deadline)):
                self.join(_remaining(deadline))
            return 0
        try:
            try:
                if drain:
                    with self._lock:
                        self._wait_idle(deadline)
                cancelled = self._cancel_all_pending()
                with self._lock:
                    self._stopping = True
                    self._work_ready.notify_all()
            finally:
                self._shutdown_done.set()
            self.join(_remaining(deadline))
        finally:
            if own is not None:
                with self._lock:
                    del self._work_waiters[ident]
        return cancelled

    def __enter__(self) -> "ForeignFlushWorkqueue":
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown(drain=True)


def _mutual_wait_error(what: str, item: WorkItem, other: WorkItem, queue: str) -> RuntimeError:
    """The error for a work that waits for its queue while another work of it already does."""
    return RuntimeError(f"{what} from inside work {item.name!r} of workqueue {queue!r} while work {other.name!r} "
                        f"of the same queue waits in a drain or shutdown: each would wait for the other forever")


def _deadline(timeout: float | None) -> float | None:
    """The monotonic time at which ``timeout`` seconds from now end (None: never)."""
    if timeout is None:
        return None
    return time.monotonic() + check_number(timeout, "timeout", 0)


def _remaining(deadline: float | None) -> float | None:
    """Seconds left until ``deadline`` (never negative), or None for no deadline."""
    return None if deadline is None else max(0.0, deadline - time.monotonic())


class IOStream:
    """A :class:`WriteRequest` in progress on the simulated device.

    Invariant: ``written <= request.nr_pages``; once ``done`` the stream takes no more pages.
    """

    __slots__ = ("request", "written", "done", "carry", "weight")

    def __init__(self, request: WriteRequest) -> None:
        self.request = request
        self.written = 0
        self.done = request.nr_pages <= 0
        self.carry = 0.0
        self.weight = 0.0

    @property
    def io_class(self) -> str:
        return self.request.io_class

    def demand_pages(self) -> int:
        """Pages this stream could write now."""
        if self.done:
            return 0
        left = self.request.nr_pages - self.written
        if self.request.available is not None:
            left = min(left, max(0, int(self.request.available())))
            if left == 0:
                self.done = True
        return left

    def deliver(self, pages: int) -> int:
        """Write up to ``pages`` now; returns the pages written."""
        if self.done or pages <= 0:
            return 0
        asked = min(pages, self.request.nr_pages - self.written)
        written = int(self.request.write(asked))
        self.written += written
        if written < asked or self.written >= self.request.nr_pages:
            self.done = True
        return written


class _SimRun:
    __slots__ = ("item", "drive", "stream")

    def __init__(self, item: WorkItem) -> None:
        self.item = item
        self.drive: _Drive | None = None
        self.stream: IOStream | None = None


class SimulatedWorkqueue(_ExecutorBase):
    """The same queueing interface on simulated time, deterministic and single-threaded.

    :meth:`step` starts pending items (at most ``max_active`` run at once, in FIFO order); a running item's
    I/O appears in :meth:`streams` for the simulation to serve, and :meth:`reap` resumes items whose I/O is done.
    With ``io`` given, requests are performed at once inside :meth:`step` instead (zero simulated time).

    :param max_active: items running at once, 1..256; default 4 (the v6 cover letter's 4 vCPUs).
    :param io: optional instant I/O: performs a request and returns pages written.
    """

    def __init__(self, *, max_active: int = 4, io: Callable[[WriteRequest], int] | None = None) -> None:
        max_active = check_int(max_active, "max_active", 1, 256)
        check_callable(io, "io", allow_none=True)
        super().__init__()
        self._lock = threading.Condition(threading.RLock())
        self.max_active = max_active
        self._io = io
        self._runs: list[_SimRun] = []
        self._executing: list[_SimRun] = []   # runs whose work code is on the stack now (re-entrant calls)
        self._work_waiters: list[_SimRun] = []  # runs on the stack inside drain() or shutdown()

    def _running_items(self) -> list[WorkItem]:
        return [run.item for run in self._runs]

    def step(self) -> int:
        """Start pending items while fewer than ``max_active`` run; returns how many were started."""
        started = 0
        with self._lock:
            while self._pending and len(self._runs) < self.max_active:
                item = self._pending.popleft()
                self._begin(item)
                run = _SimRun(item)
                self._runs.append(run)
                started += 1
                self._start(run)
        return started

    def _start(self, run: _SimRun) -> None:
        self._executing.append(run)
        try:
            result = run.item.fn()
        except BaseException as exc:
            self._fail(run, exc)
            return
        finally:
            self._executing.remove(run)
        if isinstance(result, GeneratorType):
            run.drive = _Drive(result)
            self._advance(run, None)
        else:
            self._finish(run)

    def _advance(self, run: _SimRun, written: int | None) -> None:
        """Resume ``run`` with the pages its last request wrote, until it needs the device or ends."""
        drive = run.drive
        assert drive is not None
        self._executing.append(run)
        try:
            request = next(drive.gen) if written is None else drive.gen.send(written)
            while self._io is not None:
                before = drive.written
                try:
                    request = drive.resume(self._io, request)
                finally:
                    self.stats.pages_written += drive.written - before
        except StopIteration:
            self._finish(run)
            return
        except BaseException as exc:
            self._fail(run, exc)
            return
        finally:
            self._executing.remove(run)
        run.stream = IOStream(request)

    def _fail(self, run: _SimRun, exc: BaseException) -> None:
        self._record_failure(exc)
        self._finish(run)

    def _finish(self, run: _SimRun) -> None:
        if run.drive is not None:
            run.drive.gen.close()     # a failed work's cleanup runs now
            run.drive = None
        self._runs.remove(run)
        self._end(run.item)

    def streams(self) -> list[IOStream]:
        """The I/O of running items that still wants the device."""
        return [run.stream for run in self._runs if run.stream is not None and not run.stream.done]

    def reap(self) -> int:
        """Resume every item whose I/O is done; returns how many were resumed."""
        resumed = 0
        with self._lock:
            for run in list(self._runs):
                stream = run.stream
                if stream is not None and (stream.done or stream.demand_pages() == 0):
                    run.stream = None
                    self.stats.pages_written += stream.written
                    resumed += 1
                    self._advance(run, stream.written)
        return resumed

    def _enter_work_wait(self, what: str) -> _SimRun | None:
        """Refuse (lock held) a wait from inside a work while another work on the stack waits in drain()
        or shutdown(), as the threaded queue does (there each would wait for the other forever), so that
        work code behaves the same under both; returns the calling work's run, registered as waiting."""
        run = self._executing[-1] if self._executing else None
        if run is None:
            return None
        if self._work_waiters:
            raise _mutual_wait_error(what, run.item, self._work_waiters[-1].item, "simulated")
        self._work_waiters.append(run)
        return run

    def drain(self, timeout: float | None = None) -> bool:
        """Run everything pending and running to completion at once, performing outstanding I/O instantly
        (zero simulated time). Called from inside a work, it runs everything but the works on the stack
        (and what cannot start while they hold all ``max_active`` places). Always returns True.

        :param timeout: accepted for interface compatibility; ignored.
        :raises RuntimeError: called from inside a work while another work waits in :meth:`drain` or
            :meth:`shutdown`, as :meth:`ForeignFlushWorkqueue.drain`; nothing is changed.
        """
        with self._lock:
            run = self._enter_work_wait("drain()")
            try:
                self._run_all()
            finally:
                if run is not None:
                    self._work_waiters.remove(run)
        return True

    def _run_all(self) -> None:
        """Run everything that can run to completion (lock held); see :meth:`drain`."""
        while self._pending or any(run not in self._executing for run in self._runs):
            for run in self._runs:
                stream = run.stream
                if stream is not None and not stream.done:
                    want = stream.request.nr_pages - stream.written
                    if stream.deliver(want) < want:
                        stream.done = True
            if not self.reap() and not self.step():
                # only works on the stack are left (and, if they fill max_active, pending ones that
                # the next step() starts): they end when the caller returns
                break

    def shutdown(self, *, drain: bool = True, timeout: float | None = None) -> int:
        """Stop accepting work; drain (see :meth:`drain`) or cancel what is pending. Running items finish
        at once. Calling it again (or from inside a work) does nothing more; a concurrent call waits for
        the first.

        :returns: how many pending instances were cancelled.
        :raises RuntimeError: for the first call from inside a work while another work waits in
            :meth:`drain` or :meth:`shutdown`, as :meth:`ForeignFlushWorkqueue.shutdown`; nothing is changed.
        """
        with self._lock:
            if self._closed:
                return 0
            run = self._enter_work_wait(f"shutdown(drain={drain})")
            try:
                self._closed = True
                cancelled = 0
                if not drain:
                    cancelled = self._cancel_all_pending()
                self._run_all()
            finally:
                if run is not None:
                    self._work_waiters.remove(run)
            return cancelled
