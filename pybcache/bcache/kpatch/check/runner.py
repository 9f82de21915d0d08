"""``check-patch``: the battery a kernel patch runs through before it is posted (DESIGN §5).

>>> from pybcache.bcache.kpatch.check.runner import check_patch
>>> r = check_patch("examples/patches/v3_proposal.c")
>>> [(c.name, c.passed, c.figure) for c in r.checks]

Every check runs in a child process of its own (this interpreter with ``-c``), so that a patch that
crashes (SIGSEGV, ``BUG_ON``'s SIGABRT), hangs or trips a sanitizer fails that check, named, and the other
checks still run. The child loads the compiled patch (the cache makes that free), runs the check and
prints one JSON object on stdout; a heartbeat file says which tracker call each of its threads is in, so
that a child killed at the wall bound is reported as hung *in that call*. A ``WARN_ON`` that fired fails
the check that ran it; a context report (might-sleep, inconsistent lock state, bad unlock) fails
``context``, whose workload exercises every path (allocation with failures, the overflow wait, ends in
hard-irq context on threads of their own).

``explore`` and ``race`` drive the cached-device model with the patch as its tracker (the driver vtable,
csrc/pyb_ops.h): :func:`pybcache.explore` and :func:`pybcache.race` with ``sync=`` the loaded patch.
"""
from __future__ import annotations

import dataclasses
import json
import os
import random
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable

__all__ = ["check_patch", "CheckPatchResult", "CheckResult", "CHECKS", "PatchLoadError"]

#: The checks, in the order they run and print.
CHECKS = ("semantics", "explore", "race", "overflow", "balance", "context", "memory")

MiB, GiB, TiB = 1 << 20, 1 << 30, 1 << 40
CHUNK = 32 * MiB                          # the reference model's chunk: the design's 32 MiB
#: The semantics device: three 64 GiB tracking pages (five 32 GiB ones), the last one partial, and a
#: last chunk of 12 MiB + 512 bytes, so that ranges cross page boundaries and end on a partial chunk.
SEMANTICS_DEVICE = 129 * GiB + 12 * MiB + 512
#: The stress device of balance and context: 33 pages of 32 GiB (17 of 64 GiB), so that pages come and go
#: (and allocations fail) while writes run; the last chunk partial.
STRESS_DEVICE = 1 * TiB + 12 * MiB + 512
#: Writes in flight on chunk 0 at the overflow check's peak: a u16 counter's 65,536 and more.
OVERFLOW_WRITES = (1 << 16) + 16
#: Starts past a lower counter maximum (one the patch waits at) before the overflow submitter stops.
OVERFLOW_PAST = 17
#: Seconds any patch call may block before the shim abandons it as hung (the child's hung_timeout).
HUNG_TIMEOUT = 5.0
#: Seconds the overflow submitter must stay blocked in one start, with fewer than 65,535 writes in flight,
#: for the completer to take that number as the patch's counter maximum and start ending writes (well
#: past a scheduling stall, well inside :data:`HUNG_TIMEOUT`).
OVERFLOW_WAIT_S = 1.0
#: The memory check's device sizes.
MEMORY_SIZES = (1 * TiB, 10 * TiB, 100 * TiB)
#: Kinds of kernel report that fail ``context`` (DESIGN §5: might_sleep, lockdep, bad unlocks).
CONTEXT_KINDS = ("might_sleep", "inconsistent_lock_state", "unlock_not_held", "double_unlock",
                 "spin_recursion", "lock_held_at_return", "suspicious_rcu_usage", "bad_free", "lock_not_held")
#: Standard explorer scenarios and race fault probabilities.
EXPLORE_SCENARIOS = ((1, 1), (2, 1), (1, 2))
#: Wall seconds explore may spend on its fault_at sweep before it fails as incomplete (inside its 600 s
#: wall bound); the sweep itself goes on until a run injects no fault.
EXPLORE_BUDGET_S = 420.0
RACE_FAULT_PROBABILITIES = (0.0, 0.3)
#: Replays the semantics check spends shrinking a counterexample at most (a count: machine-independent).
SHRINK_TRIALS = 5000
#: Lines of a dead child's stderr kept in its failure.
STDERR_LINES = 6

Progress = Callable[[str, int, int], None]


class PatchLoadError(ValueError):
    """The patch compiled but cannot be loaded (no ``PYBCACHE_PATCH``, a required operation missing)."""


@dataclasses.dataclass
class CheckResult:
    """One check's verdict. ``figure`` is the check's headline number(s) as text; ``counterexample``
    the shortest failing sequence found (one line per step) or None."""
    name: str
    passed: bool
    figure: str
    detail: str
    counterexample: list[str] | None = None
    wall_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "passed": self.passed, "figure": self.figure, "detail": self.detail,
                "counterexample": self.counterexample, "wall_s": round(self.wall_s, 3)}


@dataclasses.dataclass
class CheckPatchResult:
    """The battery's result: ``patch`` (the path checked), ``name`` (its ``ops.name``), ``checks`` (in
    :data:`CHECKS` order), ``memory`` (rows of the memory check, ``[]`` if it failed), ``wall_s``."""
    patch: str
    name: str | None
    checks: list[CheckResult]
    memory: list[dict[str, Any]]
    tsan: bool = False
    seconds: float = 2.0
    wall_s: float = 0.0

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    def to_json(self) -> dict[str, Any]:
        return {"patch": self.patch, "name": self.name, "passed": self.passed,
                "checks": [c.to_json() for c in self.checks], "memory": self.memory, "tsan": self.tsan,
                "seconds": self.seconds, "wall_s": round(self.wall_s, 3)}


# == the parent: one child per check ================================================================

def _tsan_runtime() -> str:
    preloaded = os.environ.get("LD_PRELOAD", "")
    if "libasan" in preloaded or "libhwasan" in preloaded or "libmsan" in preloaded:
        # ThreadSanitizer cannot share a process with another sanitizer's runtime: the children would abort
        raise PatchLoadError(f"tsan: another sanitizer's runtime is preloaded (LD_PRELOAD={preloaded}), which "
                             "ThreadSanitizer cannot share a process with; run without --tsan or outside that build")
    cc = os.environ.get("CC") or "cc"
    try:
        out = subprocess.run([*cc.split(), "-print-file-name=libtsan.so"], capture_output=True, text=True,
                             timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    if not out or not os.path.isabs(out) or not os.path.exists(out):
        raise PatchLoadError("tsan: the C compiler has no ThreadSanitizer runtime (libtsan.so); "
                             "install it (Debian: libgcc-12-dev) or run without --tsan")
    return out


def check_patch(path: str | os.PathLike, *, seconds: float = 2.0, tsan: bool = False,
                checks: tuple[str, ...] | list[str] | None = None, timeout: float | None = None,
                progress: Progress | None = None) -> CheckPatchResult:
    """Run the battery on the patch at ``path``, each check in a child process.

    :param seconds: stress time of ``balance`` and ``race`` (each fault probability), in (0, 600].
        Default 2.0.
    :param tsan: run the children with the ThreadSanitizer flavour of the patch and the TSan runtime
        preloaded; a TSan report fails the check that produced it. Default False.
    :param checks: a subset of :data:`CHECKS` to run (default all), in :data:`CHECKS` order; a str is
        one check's name; an empty list is a ValueError.
    :param timeout: wall seconds a check's child may run before it is killed and the check fails as
        hung, in (0, 3600]; default None: 40 s per check plus its stress time (five times that with
        ``tsan``; ``explore`` 600 s), well past the shim's own hung bound of :data:`HUNG_TIMEOUT`.
    :param progress: called ``progress(check, index, total)`` before each check.
    :raises PatchCompileError: (a ValueError) the compiler's first lines.
    :raises PatchLoadError: (a ValueError) the module does not load.
    """
    from ..load import compile_patch
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError(f"seconds must be a number in (0, 600], got {type(seconds).__name__}")
    if not 0 < seconds <= 600:
        raise ValueError(f"seconds must be in (0, 600], got {seconds!r}")
    if not isinstance(tsan, bool):
        raise TypeError(f"tsan must be a bool, got {type(tsan).__name__}")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                or not 0 < timeout <= 3600):
        raise ValueError(f"timeout must be None or a number of seconds in (0, 3600], got {timeout!r}")
    if isinstance(checks, str):
        checks = [checks]               # one check by name
    if checks is not None and not isinstance(checks, (list, tuple)):
        raise TypeError(f"checks must be None, a check name or a list of them, got {type(checks).__name__}")
    names = list(CHECKS) if checks is None else list(checks)
    if not names:
        raise ValueError(f"checks must name at least one check (allowed: {', '.join(CHECKS)}), got none")
    for n in names:
        if n not in CHECKS:
            raise ValueError(f"checks: unknown check {n!r} (allowed: {', '.join(CHECKS)})")
    names = [n for n in CHECKS if n in names]
    t0 = time.perf_counter()
    flavour = "tsan" if tsan else "plain"
    library, _warnings = compile_patch(path, flavour=flavour)
    env = dict(os.environ)
    env.pop("PYTHONFAULTHANDLER", None)  # the child's own Python traceback on a patch's crash is noise here
    if tsan:
        env["LD_PRELOAD"] = _tsan_runtime() + (" " + env["LD_PRELOAD"] if env.get("LD_PRELOAD") else "")
        env["TSAN_OPTIONS"] = "exitcode=66 report_signal_unsafe=0 " + env.get("TSAN_OPTIONS", "")
    results: list[CheckResult] = []
    memory: list[dict[str, Any]] = []
    name = None
    for i, check in enumerate(names):
        if progress is not None:
            progress(check, i, len(names))
        bound = _wall_bound(check, seconds, tsan) if timeout is None else float(timeout)
        res, extra = _run_child(check, Path(path).resolve(), library, seconds, env, bound)
        if extra.get("load_error"):
            raise PatchLoadError(extra["load_error"])
        name = extra.get("name") or name
        if check == "memory" and res.passed:
            memory = extra.get("rows", [])
        results.append(res)
    return CheckPatchResult(patch=str(path), name=name, checks=results, memory=memory, tsan=tsan,
                            seconds=float(seconds), wall_s=time.perf_counter() - t0)


def _wall_bound(check: str, seconds: float, tsan: bool) -> float:
    """Wall seconds a check's child may take before it is killed as hung (generous: a loaded machine)."""
    base = {"balance": 40 + seconds, "race": 40 + 2 * seconds * len(RACE_FAULT_PROBABILITIES),
            "explore": 600.0}.get(check, 40.0)
    return base * (5 if tsan else 1)


def _run_child(check: str, path: Path, library: Path, seconds: float, env: dict[str, str],
               bound: float) -> tuple[CheckResult, dict[str, Any]]:
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="pybcache-check-") as tmp:
        heartbeat = Path(tmp, "heartbeat")
        code = ("import sys; from pybcache.bcache.kpatch.check.runner import _child_main; "
                "sys.exit(_child_main(sys.argv[1:]))")
        cmd = [sys.executable, "-c", code, check, str(path), str(library), repr(float(seconds)), str(heartbeat)]
        # Output goes to files, not pipes: a process the patch forked keeps a pipe open after the child
        # ended, and reading to EOF would wait for it. The child leads a process group of its own (its
        # session), which is killed when it ends or at the wall bound: nothing the patch started outlives
        # the check.
        out_path, err_path = Path(tmp, "stdout"), Path(tmp, "stderr")
        with open(out_path, "wb") as fo, open(err_path, "wb") as fe:
            proc = subprocess.Popen(cmd, stdout=fo, stderr=fe, env=env, cwd=tempfile.gettempdir(),
                                    start_new_session=True)
        try:
            timed_out = not _wait_unreaped(proc, bound)
        finally:                        # also on Ctrl-C: the child is in a session of its own
            _kill_group(proc)
        out = out_path.read_text(errors="replace")
        err = err_path.read_text(errors="replace")
        where = _read_heartbeat(heartbeat)
    wall = time.perf_counter() - t0
    err_lines = [x for x in err.splitlines() if x.strip()]
    payload: dict[str, Any] | None = None
    for line in reversed(out.splitlines()):
        if line.startswith("{"):
            try:
                payload = json.loads(line)
            except ValueError:
                payload = None
            break
    extra = dict(payload.get("extra", {})) if payload else {}
    if timed_out:
        stuck = where or "no tracker call (the patch's init, or the check itself)"
        res = CheckResult(check, False, "hung", f"FAILED: hung in {stuck}: killed after {bound:g} s "
                          f"(wall bound)", _tail(err_lines), wall)
        return res, extra
    if proc.returncode < 0:
        sig = _signal_name(-proc.returncode)
        doing = f" in {where}" if where else ""
        return CheckResult(check, False, f"killed by {sig}", f"FAILED: killed by {sig}{doing}",
                           _tail(err_lines), wall), extra
    tsan_report = _tsan_report(err_lines)
    if payload is None:
        what = f"exit status {proc.returncode}"
        if tsan_report:
            return CheckResult(check, False, "ThreadSanitizer", f"FAILED: {tsan_report[0]} ({what})",
                               tsan_report, wall), extra
        return CheckResult(check, False, what, f"FAILED: the check's process ended with {what} and no "
                           f"result", _tail(err_lines), wall), extra
    res = CheckResult(check, bool(payload["passed"]), payload["figure"], payload["detail"],
                      payload.get("counterexample"), wall)
    if tsan_report:
        res = CheckResult(check, False, "ThreadSanitizer", f"FAILED: {tsan_report[0]}", tsan_report, wall)
    return res, extra


def _wait_unreaped(proc: subprocess.Popen, bound: float) -> bool:
    """Wait up to ``bound`` seconds for the child to end, without reaping it: while it is a zombie its
    pid, which is its group's id, cannot be reused, so :func:`_kill_group` hits only its group."""
    deadline = time.monotonic() + bound
    while os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the child's process group (the child and whatever it forked), then reap the child."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)     # our own child's group: its pid is the group id
    except (ProcessLookupError, PermissionError):
        pass                                    # the group is gone already
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:           # pragma: no cover - SIGKILL is not ignorable
        pass


def _signal_name(n: int) -> str:
    """``SIGSEGV`` for a named signal; ``signal 37`` for one Python has no name for (a real-time one)."""
    try:
        return signal.Signals(n).name
    except ValueError:
        return f"signal {n}"


def _tail(lines: list[str]) -> list[str] | None:
    """The child's last stderr lines; from the kernel's own BUG line on, when there is one (whatever a runtime
    printed after it - a sanitizer, Python's fault handler - must not push it out)."""
    lines = [x for x in lines if not x.startswith("{")]
    for i, line in enumerate(lines):
        if "kernel BUG at" in line:
            return lines[i:i + STDERR_LINES]
    return lines[-STDERR_LINES:] or None


def _tsan_report(lines: list[str]) -> list[str] | None:
    """The first ThreadSanitizer report's first lines, or None."""
    for i, line in enumerate(lines):
        if "WARNING: ThreadSanitizer:" in line:
            return [x.strip() for x in lines[i:i + 8]]
    return None


def _read_heartbeat(path: Path) -> str | None:
    try:
        data = path.read_bytes()
    except OSError:
        return None
    return _Heartbeat.describe(data)


# == the child ======================================================================================

class _Stop(Exception):
    """A check's verdict reached early: failed, with a counterexample."""

    def __init__(self, detail: str, counterexample: list[str] | None = None, figure: str = ""):
        super().__init__(detail)
        self.detail, self.counterexample, self.figure = detail, counterexample, figure


class _Heartbeat:
    """Which tracker call each thread of the child is in, in a file the child maps shared: what a thread
    stores there is in the page cache the moment it is stored, so the parent reads it after the child
    was killed by a signal or at the wall bound. One slot of :data:`_SLOT` bytes per thread: the call
    (an index into :data:`_CALLS`, 0 = none), its offset and length, the thread's name."""

    _SLOT, _SLOTS, _NAME = 64, 64, 40

    def __init__(self, path: str):
        import mmap
        with open(path, "wb") as f:
            f.write(bytes(self._SLOT * self._SLOTS))
        self._file = open(path, "r+b")
        self._map = mmap.mmap(self._file.fileno(), self._SLOT * self._SLOTS)
        self._local = threading.local()
        self._next = 0
        self._lock = threading.Lock()
        #: the first call that raised, described (its slot is cleared when it returns)
        self.failed: str | None = None

    def _slot(self) -> int:
        try:
            return self._local.slot
        except AttributeError:
            with self._lock:
                slot, self._next = self._next % self._SLOTS, self._next + 1
            name = threading.current_thread().name.encode()[:self._NAME]
            self._map[slot * self._SLOT + 24:(slot + 1) * self._SLOT] = name.ljust(self._SLOT - 24, b"\0")
            self._local.slot = slot
            return slot

    def set(self, call: int, off: int = 0, ln: int = 0) -> None:
        _PACK(self._map, self._slot() * self._SLOT, call, off, ln)

    def record_failure(self) -> None:
        """Remember this thread's call in progress as the first one that raised (before its slot is
        cleared)."""
        if self.failed is None:
            base = self._slot() * self._SLOT
            self.failed = self.describe(bytes(self._map[base:base + self._SLOT]))

    def where(self) -> str:
        return self.describe(bytes(self._map)) or self.failed or "a tracker call"

    @classmethod
    def describe(cls, data: bytes) -> str | None:
        """The calls in progress in a heartbeat file's bytes, as ``write_start(0, 4 KiB) [submitter]``."""
        out = []
        for slot in range(len(data) // cls._SLOT):
            base = slot * cls._SLOT
            call, off, ln = struct.unpack_from("<QQQ", data, base)
            if call:
                name = data[base + 24:base + cls._SLOT].rstrip(b"\0").decode(errors="replace")
                op = _CALLS[call] if call < len(_CALLS) else "?"
                args = f"({_fmt_bytes(off)}, {_fmt_bytes(ln)})" if call <= 3 else ""
                out.append(f"{op}{args} [{name}]")
        return "; ".join(out) or None


_PACK = struct.Struct("<QQQ").pack_into
#: What a heartbeat slot's call index means (0: no call in progress).
_CALLS = ("", "write_start", "write_end", "read_bypass", "rcu_barrier", "close (the patch's exit)",
          "init (the patch's init)")


class _Traced:
    """A PatchTracker whose calls are recorded in the heartbeat (per thread) while they run."""

    def __init__(self, tracker: Any, heartbeat: _Heartbeat):
        self.t = tracker
        self._hb = heartbeat

    def _call(self, call: int, fn: Callable[..., Any], off: int = 0, ln: int = 0) -> Any:
        # The slot is cleared however the call ends; a call that raised is remembered (the first one),
        # so that a hung bound's TimeoutError still names it.
        self._hb.set(call, off, ln)
        try:
            return fn(off, ln) if call <= 3 else fn()
        except BaseException:
            self._hb.record_failure()
            raise
        finally:
            self._hb.set(0)

    def start(self, off: int, ln: int) -> bool:
        return self._call(1, self.t.start, off, ln)

    def end(self, off: int, ln: int) -> None:
        self._call(2, self.t.end, off, ln)

    def is_active(self, off: int, ln: int) -> bool:
        return self._call(3, self.t.is_active, off, ln)

    def rcu_barrier(self) -> int:
        return self._call(4, self.t.rcu_barrier)

    def close(self) -> dict:
        return self._call(5, self.t.close)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.t, name)


class _Context:
    """What a check gets: the loaded patch, tracker factory, stress seconds."""

    def __init__(self, path: str, library: str, seconds: float, heartbeat: _Heartbeat):
        from .._kpatch import PatchModule
        from ..load import KernelPatch
        self.path, self.seconds, self.heartbeat = path, seconds, heartbeat
        module = PatchModule(library)
        # A KernelPatch around the module this child was given (plain or tsan flavour): the drivers
        # take it like one from load_patch.
        patch = KernelPatch.__new__(KernelPatch)
        patch._module, patch.path, patch.library, patch.name, patch.warnings = (
            module, path, str(library), module.name, "")
        self.patch = patch
        self.trackers: list[Any] = []

    def tracker(self, device_size: int, fault: Any = None) -> _Traced:
        self.heartbeat.set(6)
        t = self.patch.tracker(device_size, fault=fault, hung_timeout=HUNG_TIMEOUT)
        self.heartbeat.set(0)
        traced = _Traced(t, self.heartbeat)
        self.trackers.append(traced)
        return traced

    def reports(self) -> list[dict[str, Any]]:
        out = []
        for t in self.trackers:
            if not t.closed:
                out.extend(t.kernel_reports())
        return out


def _child_main(argv: list[str]) -> int:
    check, path, library, seconds, heartbeat_path = argv
    hb = _Heartbeat(heartbeat_path)
    try:
        try:
            ctx = _Context(path, library, float(seconds), hb)
        except ValueError as e:
            print(json.dumps({"passed": False, "figure": "", "detail": str(e), "extra": {"load_error": str(e)}}))
            return 0
        out = _run_check(check, ctx)
        out.setdefault("extra", {})["name"] = ctx.patch.name
        sys.stdout.flush()
        print(json.dumps(out))
        return 0
    finally:
        sys.stdout.flush()


def _run_check(check: str, ctx: _Context) -> dict[str, Any]:
    fn = _CHECK_FUNCTIONS[check]
    extra: dict[str, Any] = {}
    try:
        figure, detail, extra = fn(ctx)
        passed, counterexample = True, None
    except _Stop as s:
        passed, figure, detail, counterexample = False, s.figure, f"FAILED: {s.detail}", s.counterexample
    except NotImplementedError as e:
        passed, figure, detail, counterexample = False, "-", f"FAILED: {e}", None
    except TimeoutError as e:
        where = _where(ctx)
        passed, figure, detail, counterexample = False, "hung", f"FAILED: hung in {where}: {e}", None
    except RuntimeError as e:
        passed, figure, detail, counterexample = False, "broken", f"FAILED: {e}", None
    except Exception as e:  # an error of the check itself: say so rather than pass
        tb = traceback.format_exception(type(e), e, e.__traceback__)
        passed, figure, detail, counterexample = (False, "error", f"FAILED: internal error of the check: "
                                                  f"{type(e).__name__}: {e}", [x.rstrip() for x in tb[-3:]])
    reports = []
    try:
        reports = ctx.reports()
    except RuntimeError:
        pass
    warnings = [r for r in reports if r["kind"] == "warning"]
    if passed and warnings:
        passed, figure = False, "WARN_ON"
        detail = f"FAILED: WARN_ON fired ({len(warnings)} site(s))"
        counterexample = [r["message"] for r in warnings]
    elif reports and check != "context":
        others = sorted({r["kind"] for r in reports if r["kind"] != "warning"})
        if others:
            detail += f" (also reported, judged by context: {', '.join(others)})"
    return {"passed": passed, "figure": figure, "detail": detail, "counterexample": counterexample,
            "extra": extra}


def _where(ctx: _Context) -> str:
    return ctx.heartbeat.where()


# -- formatting -------------------------------------------------------------------------------------

def _fmt_bytes(x: int) -> str:
    """A byte offset or length in the largest unit that keeps it exact, plus a remainder: ``32 MiB``,
    ``64 GiB + 512``."""
    for unit, size in (("TiB", TiB), ("GiB", GiB), ("MiB", MiB), ("KiB", 1024)):
        if x >= size:
            q, r = divmod(x, size)
            if r == 0:
                return f"{q} {unit}"
            if x > 4 * size:
                if 2 * r <= size:
                    return f"{q} {unit} + {_fmt_bytes(r)}"
                # the rest is subtracted whole, so its own terms change sign: "64 GiB - 15 KiB - 512"
                rest = " ".join({"+": "-", "-": "+"}.get(w, w) for w in _fmt_bytes(size - r).split(" "))
                return f"{q + 1} {unit} - {rest}"
    return f"{x}" if x < 1024 else f"{x:,}"


def _fmt_range(off: int, ln: int) -> str:
    first, last = off // CHUNK, (off + ln - 1) // CHUNK
    chunks = f"chunk {first}" if first == last else f"chunks {first}-{last}"
    return f"[{_fmt_bytes(off)}, {_fmt_bytes(off + ln)}) ({chunks})"


# == semantics ======================================================================================

# An operation: ("start", wid, off, len), ("end", wid) or ("read", off, len).
Op = tuple


def _semantics_ops(rng: random.Random, device: int, n: int) -> list[Op]:
    """A random sequence of starts, ends and reads that dwells on the ranges where trackers go wrong:
    chunk and page boundaries, multi-chunk and page-crossing ranges, ranges that end exactly on a chunk
    boundary, the device's last partial chunk, and writes that overlap writes in flight."""
    boundaries = [0, CHUNK, 2 * CHUNK, 32 * GiB, 64 * GiB, 96 * GiB, 128 * GiB, device // CHUNK * CHUNK]
    active: dict[int, tuple[int, int]] = {}
    ops: list[Op] = []
    next_id = 0

    def clip(off: int, ln: int) -> tuple[int, int]:
        off = max(0, min(off, device - 1))
        return off, max(1, min(ln, device - off))

    def some_range() -> tuple[int, int]:
        b = rng.choice(boundaries)
        form = rng.randrange(7)
        if form == 0:                                   # small, inside a chunk near a boundary
            return clip(b + rng.randrange(-4, 4) * 4096, rng.choice((512, 4096, 128 * 1024)))
        if form == 1:                                   # multi-chunk, crossing the boundary
            return clip(b - rng.randrange(1, 3 * CHUNK), rng.randrange(CHUNK, 4 * CHUNK))
        if form == 2:                                   # ends exactly on a chunk boundary
            end = max(CHUNK, b + rng.randrange(-2, 3) * CHUNK)
            ln = rng.choice((512, 4096, CHUNK, CHUNK + 512, 2 * CHUNK))
            return clip(max(0, end - ln), min(ln, end))
        if form == 3:                                   # starts exactly on a chunk boundary
            return clip(b + rng.randrange(-1, 2) * CHUNK, rng.choice((1, 512, 4096, CHUNK)))
        if form == 4:                                   # the last partial chunk, up to the device end
            off = device - rng.choice((1, 512, 4096, device % CHUNK, device % CHUNK + CHUNK))
            return clip(off, device - off)
        if form == 5 and active:                        # overlapping a write in flight
            off, ln = rng.choice(list(active.values()))
            a = off + rng.randrange(0, ln)
            return clip(a - rng.randrange(0, 2 * CHUNK), rng.randrange(1, 3 * CHUNK))
        # one byte either side of a boundary
        return clip(b + rng.choice((-1, 0)), rng.choice((1, 2)))

    for _ in range(n):
        r = rng.random()
        if r < 0.35 and len(active) < 24:
            off, ln = some_range()
            active[next_id] = (off, ln)
            ops.append(("start", next_id, off, ln))
            next_id += 1
        elif r < 0.6 and active:
            wid = rng.choice(list(active))
            del active[wid]
            ops.append(("end", wid))
        else:
            if active and rng.random() < 0.5:           # a read at the edge of a write in flight
                off, ln = rng.choice(list(active.values()))
                edge = rng.choice((off, off + ln - 1))
                ops.append(("read", *clip(edge - rng.randrange(0, 2), rng.randrange(1, 3))))
            else:
                ops.append(("read", *some_range()))
    return ops


def _render_ops(ops: list[Op], failure: str) -> list[str]:
    starts = {op[1]: (op[2], op[3]) for op in ops if op[0] == "start"}
    names: dict[int, str] = {}
    lines = []
    for op in ops:
        if op[0] == "start":
            names[op[1]] = chr(ord("A") + len(names)) if len(names) < 26 else f"W{op[1]}"
            lines.append(f"write {names[op[1]]} starts {_fmt_range(op[2], op[3])}")
        elif op[0] == "end":
            # a WARN_ON's counterexample is the last operations of a sequence: a write may have started before them
            span = _fmt_range(*starts[op[1]]) if op[1] in starts else "(started before these operations)"
            lines.append(f"write {names.get(op[1], f'W{op[1]}')} ends {span}")
        else:
            lines.append(f"read {_fmt_range(op[1], op[2])}")
    lines[-1] += f": {failure}"
    return lines


class _Replay:
    """Runs an op sequence on a fresh patch tracker beside the reference model; finds the first op
    where the patch is wrong."""

    def __init__(self, ctx: _Context, device: int, fault_probability: float, seed: int, *,
                 first_fails: bool = False):
        self.ctx, self.device, self.fp, self.seed = ctx, device, fault_probability, seed
        self.first_fails = first_fails      # instead: the first allocation of the sequence fails, no other
        self.reads = self.must = self.false_bypasses = self.coarse = 0
        #: the first WARN_ON of these runs: (the ops up to it, its index, the message). WARN_ON_ONCE fires
        #: once per process, so a warning is recorded, not replayed.
        self.first_warning: tuple[list[Op], int, str] | None = None

    def run(self, ops: list[Op], *, count: bool = False) -> tuple[int, str] | None:
        """(index of the first read that did not bypass a write in flight, what it saw) or None.
        ``count`` adds to the figures."""
        from .... import FaultInjection
        from ...reference import BypassWriteTracker as Reference
        fault: FaultInjection | None
        if self.first_fails:
            fault = FaultInjection(probability=1.0, times=1)
        else:
            fault = FaultInjection(probability=self.fp, seed=self.seed) if self.fp else None
        t = self.ctx.tracker(self.device, fault=fault)
        ref = Reference(self.device, chunk_size=CHUNK, sync="page", counter_bits=64, overflow="wrap")
        active: dict[int, tuple[int, int]] = {}
        untracked: set[int] = set()
        try:
            for i, op in enumerate(ops):
                if op[0] == "start":
                    if not t.start(op[2], op[3]):
                        untracked.add(op[1])
                    ref.start(op[2], op[3])
                    active[op[1]] = (op[2], op[3])
                elif op[0] == "end":
                    off, ln = active.pop(op[1])
                    t.end(off, ln)
                    ref.end(off, ln)
                else:
                    off, ln = op[1], op[2]
                    got = t.is_active(off, ln)
                    overlap = [(wid, w) for wid, w in active.items() if w[0] < off + ln and off < w[0] + w[1]]
                    chunk_level = ref.is_active(off, ln)
                    if count:
                        self.reads += 1
                        self.must += bool(overlap)
                        self.false_bypasses += got and not overlap
                        self.coarse += got and not chunk_level
                    if overlap and not got:
                        wid, w = overlap[0]
                        failed = " (an allocation failed in its start)" if wid in untracked else ""
                        return i, (f"does NOT bypass, but a write of {_fmt_range(*w)} is in flight{failed}: a "
                                   f"miss here caches data that write is about to replace")
                if self.first_warning is None and t.stats()["warnings"]:
                    msgs = [r["message"] for r in t.kernel_reports() if r["kind"] == "warning"]
                    self.first_warning = (ops[max(0, i - 11):i + 1], i, f"WARN_ON fired: {msgs[-1] if msgs else '?'}")
            return None
        finally:
            t.close()
            self.ctx.trackers.remove(t)


def _overlapping_starts(ops: list[Op]) -> list[Op]:
    """The starts of the writes still in flight at the last op (a read) that overlap it, in order."""
    active: dict[int, Op] = {}
    for op in ops[:-1]:
        if op[0] == "start":
            active[op[1]] = op
        elif op[0] == "end":
            active.pop(op[1], None)
    off, ln = ops[-1][1], ops[-1][2]
    return [op for op in active.values() if op[2] < off + ln and off < op[2] + op[3]]


def _shrink(replay: _Replay, ops: list[Op], idx: int, trials: int) -> tuple[list[Op], str]:
    """The failing prefix with every op removed that the failure does not need (a start takes its end
    along), one op at a time until none can go or ``trials`` replays were spent: a count, not a time,
    so that the counterexample is the same on any machine."""
    ops = ops[:idx + 1]
    found = replay.run(ops)
    assert found is not None
    ops, failure = ops[:found[0] + 1], found[1]
    changed = True
    while changed and trials > 0:
        changed = False
        i = len(ops) - 2
        while i >= 0 and trials > 0:
            trials -= 1
            op = ops[i]
            drop = {i} | ({j for j, o in enumerate(ops) if o[0] == "end" and o[1] == op[1]}
                          if op[0] == "start" else set())
            trial = [o for j, o in enumerate(ops) if j not in drop]
            got = replay.run(trial) if trial else None
            if got is not None:
                ops, failure, changed = trial[:got[0] + 1], got[1], True
            i = min(i - 1, len(ops) - 2)
    return ops, failure


def _check_semantics(ctx: _Context) -> tuple[str, str, dict]:
    """Seeded random single-threaded sequences, without and with allocation failures (p = 0.3),
    against the reference model: a read that overlaps a write in flight must bypass."""
    runs = [(0.0, seed) for seed in range(12)] + [(0.3, seed) for seed in range(12)]
    n_ops = 0
    reads = must = false_bypasses = coarse = 0
    warning = None
    for fp, seed in runs:
        replay = _Replay(ctx, SEMANTICS_DEVICE, fp, seed)
        ops = _semantics_ops(random.Random(seed * 7919 + int(fp * 10)), SEMANTICS_DEVICE, 300)
        found = replay.run(ops, count=True)
        reads, must = reads + replay.reads, must + replay.must
        false_bypasses, coarse = false_bypasses + replay.false_bypasses, coarse + replay.coarse
        if warning is None and replay.first_warning is not None:
            warning = (seed, fp, *replay.first_warning)
        if found is not None:
            small, failure = _shrink(replay, ops, found[0], SHRINK_TRIALS)
            faults = f"fault probability {fp}"
            if fp:
                # Random faults move when operations are removed, which keeps unneeded ones in the
                # sequence. Try the read with only the writes it overlaps, the first allocation failing.
                core = _overlapping_starts(small) + [small[-1]]
                first = _Replay(ctx, SEMANTICS_DEVICE, 0.0, 0, first_fails=True)
                again = first.run(core) if len(core) < len(small) else None
                if again is not None:
                    small, failure = core[:again[0] + 1], again[1]
                    faults = "only the first allocation failing"
            also = f"; also, in seed {warning[0]}: {warning[4]}" if warning else ""
            raise _Stop(f"a read overlapping an active write did not bypass (seed {seed}, fault probability "
                        f"{fp}; shrunk from {found[0] + 1} to {len(small)} operations, {faults}){also}",
                        _render_ops(small, failure), "missed bypass")
        n_ops += len(ops)
    if warning is not None:
        seed, fp, shown, index, message = warning
        lines = _render_ops(shown, message)
        if index >= len(shown):
            lines.insert(0, f"(the {index + 1 - len(shown)} earlier operations of seed {seed} omitted)")
        raise _Stop(f"op {index + 1} of seed {seed}, fault probability {fp}: {message}", lines, "WARN_ON")
    figure = f"{false_bypasses}/{reads} false bypasses"
    detail = (f"{len(runs)} sequences ({n_ops} operations; 12 without and 12 with allocation failures "
              f"at p = 0.3): all {must} reads overlapping a write in flight bypassed; {false_bypasses} of "
              f"{reads} reads bypassed without overlapping one, {coarse} of them coarser than 32 MiB chunks")
    return figure, detail, {}


# == overflow =======================================================================================

def _overflow_run(ctx: _Context, t: _Traced, writes: int, judge: bool = True) -> dict[str, Any]:
    """A submitter starts ``writes`` writes on chunk 0 while a completion thread ends them. The
    completer holds back until 65,535 are in flight and the submitter is blocked in a start (or done),
    so that the counter's maximum is reached whatever the scheduling; after every start and every end
    that leaves writes in flight, a read of chunk 0 must bypass. A patch that waits at a lower maximum
    is found so: the submitter stays blocked in one start for :data:`OVERFLOW_WAIT_S` with fewer in
    flight; that number becomes the level at which the completer ends writes (``state["level"]``), one
    write each time the submitter is blocked again. The time is only a hint (a submitter descheduled for
    that long looks the same), so the level is checked by what follows: a start that returns with more
    than ``level + 1`` in flight (the one is an end the completer made but has not counted yet) proves
    the patch does not wait there, and the level is retracted (``state["retracted"]``) - the run goes on
    towards the u16 maximum as if it had never been taken - and no level is taken below the highest
    number in flight seen so far less one (``state["peak"]``). Raises :class:`_Stop` on a lost count."""
    one = (0, 4096)
    state: dict[str, Any] = {"started": 0, "ended": 0, "in_start_since": 0.0, "done": False, "error": None,
                             "lost": None, "level": None, "retracted": 0, "peak": 0}
    lock = threading.Lock()
    full = (1 << 16) - 1
    bound = time.monotonic() + HUNG_TIMEOUT * 4 + 60

    def submitter() -> None:
        try:
            for _ in range(writes):
                level = state["level"]
                if level is not None and state["started"] >= level + OVERFLOW_PAST:
                    break                   # a lower maximum, passed as often as the u16 one would be
                state["in_start_since"] = time.monotonic()
                t.start(*one)
                state["in_start_since"] = 0.0
                with lock:
                    state["started"] += 1
                    s, e = state["started"], state["ended"]
                    state["peak"] = max(state["peak"], s - e)
                    if state["level"] is not None and s - e > state["level"] + 1:
                        state["level"] = None           # it did not wait there: not its maximum
                        state["retracted"] += 1
                if state["lost"] is None and not t.is_active(*one):
                    state["lost"] = (s, e, "after a start")
        except BaseException as exc:   # noqa: BLE001 - reported by the caller
            state["error"] = exc
        finally:
            state["done"] = True

    def completer() -> None:
        try:
            while state["ended"] < writes and time.monotonic() < bound:
                since = state["in_start_since"]
                blocked_for = time.monotonic() - since if since else 0.0
                with lock:
                    inflight = state["started"] - state["ended"]
                    level = state["level"]
                    if (level is None and inflight and blocked_for > OVERFLOW_WAIT_S
                            and inflight + 1 >= state["peak"]):
                        level = state["level"] = inflight   # the patch seems to wait at this maximum
                if level is not None:
                    # keep it there: one end each time the submitter is blocked at it again
                    ready = inflight >= level and blocked_for > 0.05
                else:
                    ready = inflight >= full and blocked_for > 0.05
                if inflight and (state["done"] or ready):
                    t.end(*one)
                    with lock:
                        state["ended"] += 1
                        s, e = state["started"], state["ended"]
                    if s > e and state["lost"] is None and not t.is_active(*one):
                        state["lost"] = (s, e, "after an end")
                elif state["done"] and not inflight:
                    return
                else:
                    time.sleep(0.002)
        except BaseException as exc:   # noqa: BLE001
            state["error"] = state["error"] or exc

    threads = [threading.Thread(target=submitter, name="submitter"),
               threading.Thread(target=completer, name="completion")]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if state["error"] is not None:
        raise state["error"]
    if state["lost"] is not None and judge:
        s, e, when = state["lost"]
        inflight = s - e
        u16 = " = 2^16: a u16 counter wrapped there (u16 overflow)" if inflight % (1 << 16) == 0 else ""
        raise _Stop(f"a count was lost at the counter maximum: {inflight:,} writes in flight on chunk 0 and "
                    f"a read of chunk 0 does not bypass",
                    [f"{s:,} writes start on chunk 0 [0, 4096) (submitter thread)",
                     f"{e:,} of them end (completion thread)",
                     f"read [0, 4096) (chunk 0) {when}: does NOT bypass with {inflight:,} writes in flight"
                     f"{u16}"], "count lost")
    return state


def _check_overflow(ctx: _Context) -> tuple[str, str, dict]:
    t = ctx.tracker(SEMANTICS_DEVICE)
    st = _overflow_run(ctx, t, OVERFLOW_WRITES)
    expected = OVERFLOW_WRITES if st["level"] is None else st["level"] + OVERFLOW_PAST
    if st["ended"] != expected or st["started"] != expected:
        raise _Stop(f"{st['started']:,} writes started and the completion thread ended {st['ended']:,} of "
                    f"them within the bound ({expected:,} expected)", None, "incomplete")
    if t.is_active(0, 4096):
        raise _Stop(f"every one of the {expected:,} writes ended and chunk 0 is still active: an end "
                    f"was lost", [f"{OVERFLOW_WRITES:,} writes start and end on chunk 0 [0, 4096)",
                                  "read [0, 4096) (chunk 0): still bypasses (a count leaked)"], "count leaked")
    s = t.stats()
    if s["starts"] != s["ends"]:
        raise _Stop(f"the shim saw {s['starts']:,} starts and {s['ends']:,} ends", None, "unbalanced")
    if st["level"] is not None:
        return (f"waits at {st['level']:,} in flight, 0 lost",
                f"{expected:,} writes on chunk 0; the patch's start waited with {st['level']:,} in flight (its "
                f"counter maximum, below 65,535) and ends on a completion thread let it go on, "
                f"{OVERFLOW_PAST} past it: every read during them bypassed, none afterwards; nothing hung "
                f"(hung bound {HUNG_TIMEOUT:g} s)", {})
    return (f"{OVERFLOW_WRITES:,} in flight, 0 lost",
            f"{OVERFLOW_WRITES:,} writes on chunk 0 ({OVERFLOW_WRITES - (1 << 16) + 1} past 65,535), ends on a "
            f"completion thread: every read during them bypassed, none afterwards; nothing hung "
            f"(hung bound {HUNG_TIMEOUT:g} s)", {})


# == balance ========================================================================================

def _stress(ctx: _Context, t: _Traced, seconds: float, seed: int, submitters: int = 3) -> dict[str, int]:
    """``submitters`` threads start writes of random ranges (small ones near boundaries, multi-chunk,
    page-crossing, up to the device end) and hand them to a completion thread, which ends them in
    random order; for ``seconds``, then everything drains."""
    import queue
    device = STRESS_DEVICE
    inflight: "queue.Queue[tuple[int, int] | None]" = queue.Queue(maxsize=4096)
    stop = time.monotonic() + seconds
    # one count per submitter (each written by its own thread only), summed after the join
    writes, reads = [0] * submitters, [0] * submitters
    errors: list[BaseException] = []
    barrier = threading.Barrier(submitters + 1)

    def put(item: tuple[int, int] | None) -> bool:
        """Hand ``item`` to the completion thread; False (item dropped) once a thread has failed: a
        completion thread that died takes nothing more, and a put that waits for it must not block."""
        while not errors:
            try:
                inflight.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def submit(k: int) -> None:
        rng = random.Random(seed * 31 + k)
        barrier.wait()
        try:
            while time.monotonic() < stop and not errors:
                for _ in range(64):
                    off, ln = _semantics_ops_range(rng, device)
                    t.start(off, ln)
                    if not put((off, ln)):
                        return
                    writes[k] += 1
                    t.is_active(*_semantics_ops_range(rng, device))
                    reads[k] += 1
        except BaseException as e:   # noqa: BLE001
            errors.append(e)

    def complete() -> None:
        rng = random.Random(seed)
        held: list[tuple[int, int]] = []
        barrier.wait()
        done = 0
        try:
            while True:
                try:
                    item = inflight.get(timeout=0.05)
                except queue.Empty:
                    if errors:          # a submitter failed: its closing None may never come
                        return
                    continue
                if item is None:
                    done += 1
                    if done == submitters:
                        break
                    continue
                held.append(item)
                while len(held) > 8 or (held and rng.random() < 0.3):
                    t.end(*held.pop(rng.randrange(len(held))))
            for item in held:
                t.end(*item)
        except BaseException as e:   # noqa: BLE001
            errors.append(e)

    def submit_then_close(k: int) -> None:
        submit(k)
        put(None)

    ths = [threading.Thread(target=submit_then_close, args=(k,), name=f"submitter-{k}") for k in range(submitters)]
    ths.append(threading.Thread(target=complete, name="completion"))
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    if errors:
        raise errors[0]
    return {"writes": sum(writes), "reads": sum(reads)}


def _semantics_ops_range(rng: random.Random, device: int) -> tuple[int, int]:
    """One range of the kinds :func:`_semantics_ops` draws (boundaries, multi-chunk, device end)."""
    b = rng.choice((0, CHUNK, rng.randrange(0, device // (32 * GiB) + 1) * 32 * GiB, device - 1))
    form = rng.randrange(4)
    if form == 0:
        off, ln = b + rng.randrange(-8, 8) * 4096, rng.choice((4096, 128 * 1024))
    elif form == 1:
        off, ln = b - rng.randrange(0, 2 * CHUNK), rng.randrange(1, 3 * CHUNK)
    elif form == 2:
        off, ln = b - CHUNK, CHUNK
    else:
        off, ln = device - rng.randrange(1, 2 * CHUNK), 2 * CHUNK
    off = max(0, min(off, device - 1))
    return off, max(1, min(ln, device - off))


def _sweep(t: _Traced, device: int) -> list[int]:
    """Chunks of the device where a read bypasses (there should be none at quiescence)."""
    return [c for c in range((device + CHUNK - 1) // CHUNK)
            if t.is_active(c * CHUNK, min(CHUNK, device - c * CHUNK))]


def _check_balance(ctx: _Context) -> tuple[str, str, dict]:
    from .... import FaultInjection
    fault = FaultInjection(probability=0.1, seed=7)
    t = ctx.tracker(STRESS_DEVICE, fault=fault)
    idle = t.memory()["total_bytes"]
    counts = _stress(ctx, t, ctx.seconds, seed=1)
    t.rcu_barrier()
    active = _sweep(t, STRESS_DEVICE)
    mem = t.memory()
    if active:
        shown = ", ".join(str(c) for c in active[:8]) + (" ..." if len(active) > 8 else "")
        raise _Stop(f"at quiescence {len(active)} chunk(s) still make reads bypass: counts leaked",
                    [f"{counts['writes']:,} writes started and ended by 3 submitters and a completion thread "
                     f"(allocation failures p = 0.1, {fault.injected:,} injected)",
                     f"read sweep at quiescence: chunks {shown} bypass"], f"{len(active)} chunks leaked")
    if mem["total_bytes"] != idle:
        raise _Stop(f"at quiescence the patch holds {mem['total_bytes']:,} B, not its idle {idle:,} B "
                    f"({mem['pages']} allocation(s) of operations still live)",
                    [f"{counts['writes']:,} writes started and ended, rcu_barrier() done",
                     f"memory: {mem['total_bytes']:,} B held, idle was {idle:,} B"], "memory not back")
    s = t.stats()
    return (f"{counts['writes']:,} writes, 0 leaked",
            f"{counts['writes']:,} writes and {counts['reads']:,} reads from 3 submitters, ends on a completion "
            f"thread, {ctx.seconds:g} s, allocation failures p = 0.1 ({fault.injected:,} injected): at "
            f"quiescence no chunk of {(STRESS_DEVICE + CHUNK - 1) // CHUNK:,} bypasses and memory is back to "
            f"{idle:,} B (peak {mem['peak_bytes']:,} B, {s['allocations']:,} allocations)", {})


# == context ========================================================================================

def _check_context(ctx: _Context) -> tuple[str, str, dict]:
    from .... import FaultInjection
    fault = FaultInjection(probability=0.3, seed=3)
    t = ctx.tracker(STRESS_DEVICE, fault=fault)
    counts = _stress(ctx, t, min(1.0, ctx.seconds), seed=2)
    # the overflow path too (a wait at the counter maximum), on a tracker of its own
    t2 = ctx.tracker(SEMANTICS_DEVICE)
    _overflow_run(ctx, t2, (1 << 16) + 2, judge=False)     # lost counts are overflow's verdict
    reports = [r for r in ctx.reports() if r["kind"] in CONTEXT_KINDS]
    if reports:
        kinds = sorted({r["kind"] for r in reports})
        raise _Stop(f"{len(reports)} context report(s): {', '.join(kinds)}",
                    [f"{r['message']} (in {r['operation']}, {r['count']}x)" for r in reports],
                    ", ".join(kinds))
    return ("0 reports", f"{counts['writes']:,} writes with allocation failures at p = 0.3 "
            f"({fault.injected:,} injected), ends in hard-irq context on a completion thread, and 65,538 writes "
            f"on one chunk through its maximum: no might-sleep, lock-state or unlock report", {})


# == memory =========================================================================================

def _check_memory(ctx: _Context) -> tuple[str, str, dict]:
    from ....units import format_bytes
    from ...experiments.memory import SEED_TABLE
    rows = []
    for size in MEMORY_SIZES:
        t = ctx.tracker(size)
        idle = t.memory()["total_bytes"]
        t.start(0, size)                  # one write over the whole device: every page allocated
        peak = t.memory()["peak_bytes"]
        t.end(0, size)
        t.rcu_barrier()
        label = f"{size // TiB}T"
        seed = SEED_TABLE.get(label, {})
        rows.append({"size_bytes": size, "idle_bytes": idle, "peak_bytes": peak,
                     "seed": {v: list(seed[v]) for v in seed}})
        t.close()
        ctx.trackers.remove(t)
    figure = ", ".join(f"{r['size_bytes'] // TiB}T {format_bytes(r['idle_bytes'])} / "
                       f"{format_bytes(r['peak_bytes'])}" for r in rows)
    return (figure, "idle / peak bytes the patch allocated (init; one write over the whole device), beside "
            "the seed's page-lock and atomic figures", {"rows": rows})


# == explore and race (through the driver vtable) ===================================================

def _check_explore(ctx: _Context) -> tuple[str, str, dict]:
    """Every interleaving of the standard scenarios, with an allocation failure injected at each
    allocation in turn (fault_at = 1, 2, ... until a run injects nothing). Fails as incomplete if that
    takes more than :data:`EXPLORE_BUDGET_S`, rather than claim every k."""
    from ...cachedev import explore, render_step
    schedules = runs = 0
    deadline = time.monotonic() + EXPLORE_BUDGET_S
    for w, r in EXPLORE_SCENARIOS:
        k = 0
        while True:
            if time.monotonic() > deadline:
                raise _Stop(f"the fault_at sweep was not finished within {EXPLORE_BUDGET_S:g} s: scenario "
                            f"{w}w{r}r still injects at fault_at={k - 1} ({runs} explorations, {schedules:,} "
                            f"schedules, 0 violations so far); allocations past it were never failed",
                            None, "incomplete")
            res = explore(sync=ctx.patch, writes=w, reads=r, fault_at=k)
            schedules += res["schedules"]
            runs += 1
            if res["violations"]:
                cfg = res["config"]
                steps = [render_step(x, check=cfg["check"], granularity=cfg["granularity"],
                                     chunk_size=cfg["chunk_size"], max_restarts=cfg["max_restarts"])
                         for x in res["counterexample_steps"]]
                raise _Stop(f"{res['violations']:,} of {res['schedules']:,} schedules of {w}w{r}r with "
                            f"fault_at={k} violate the oracle", steps, f"{res['violations']:,} violations")
            if res.get("report_schedules"):
                # DESIGN §5: a WARN_ON fails the check that ran it. The explorer counts schedules with a
                # report but not their kinds, so any report fails explore (a context report fails
                # context as well).
                raise _Stop(f"{res['report_schedules']:,} of {res['schedules']:,} schedules of {w}w{r}r with "
                            f"fault_at={k} made a kernel report (a WARN_ON or a context report: the explorer "
                            f"does not tell which)", None, "kernel report")
            if k > 0 and not res["faults_injected"]:
                break
            k += 1
    return (f"{schedules:,} schedules, 0 violations",
            f"scenarios {', '.join(f'{w}w{r}r' for w, r in EXPLORE_SCENARIOS)}, each with no fault and with "
            f"the k-th allocation failing for every k that injects ({runs} explorations), no kernel report", {})


def _check_race(ctx: _Context) -> tuple[str, str, dict]:
    """Native reader and writer threads on the cached-device model, allocation faults at p = 0 and 0.3."""
    from ...cachedev import race
    parts = []
    context_seen: set[str] = set()
    for p in RACE_FAULT_PROBABILITIES:
        res = race(sync=ctx.patch, threads=4, seconds=ctx.seconds, fault_probability=p,
                   seed=1)
        parts.append(res)
        if res["stale_reads"] or res["stale_cached_blocks"]:
            raise _Stop(f"fault probability {p}: {res['stale_reads']:,} stale reads, "
                        f"{res['stale_cached_blocks']:,} stale cached blocks in {res['ops']:,} operations",
                        None, f"{res['stale_reads']:,} stale reads")
        reports = res.get("kernel_reports") or {}
        # DESIGN §5: a WARN_ON (or a hang's report) fails the check that ran it; context reports are
        # context's verdict, shown here only
        failing = {k: n for k, n in reports.items() if k not in CONTEXT_KINDS}
        if failing:
            kinds = ", ".join(f"{k} {n:,}x" for k, n in sorted(failing.items()))
            raise _Stop(f"fault probability {p}: the patch made kernel reports in {res['ops']:,} operations: "
                        f"{kinds}", None, "WARN_ON" if "warning" in failing else ", ".join(sorted(failing)))
        context_seen.update(k for k in reports if k in CONTEXT_KINDS)
    ops = sum(x["ops"] for x in parts)
    return (f"{ops:,} ops, 0 stale", "; ".join(
        f"p = {p}: {x['reads']:,} reads ({x['read_bypasses']:,} bypassed), {x['writes']:,} writes, 0 stale "
        f"reads, 0 stale cached blocks, no WARN_ON" for p, x in zip(RACE_FAULT_PROBABILITIES, parts))
        + (f" (also reported, judged by context: {', '.join(sorted(context_seen))})" if context_seen else ""), {})


_CHECK_FUNCTIONS: dict[str, Callable[[_Context], tuple[str, str, dict]]] = {
    "semantics": _check_semantics, "explore": _check_explore, "race": _check_race,
    "overflow": _check_overflow, "balance": _check_balance, "context": _check_context,
    "memory": _check_memory,
}
