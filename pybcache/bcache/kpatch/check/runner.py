"""``check-patch``: the battery a kernel patch runs through before it is posted (docs/design.md,
"check-patch").

>>> from pybcache.bcache.kpatch.check import check_patch
>>> r = check_patch("examples/patches/v3_proposal.c")
>>> [(c.name, c.passed, c.figure) for c in r.checks]

Every check runs in a child process of its own (this interpreter with ``-c``), so that a patch that
crashes (SIGSEGV, ``BUG_ON``'s SIGABRT), hangs or trips a sanitizer fails that check, named, and the other
checks still run. The child loads the compiled patch (the cache makes that free), runs the check and
prints one JSON object on stdout; a heartbeat file says which tracker call each of its threads is in, so
that a child killed at the wall bound is reported as hung *in that call*. A ``WARN_ON`` that fired fails
the check that ran it; a context report (might-sleep, lockdep, bad unlock, gfp on the submission path)
fails ``context``, whose workload exercises every path (allocation with failures, the overflow wait, ends
in each context the kernel may run them in: hard-irq, soft-irq, a worker, inline on the submitter).

``explore`` and ``race`` drive the cached-device model with the patch as its tracker (the driver vtable,
csrc/pyb_ops.h): :func:`pybcache.explore` and :func:`pybcache.race` with ``sync=`` the loaded patch.
"""
from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from .context import (CHECKS, FAIL_ALLOC_ENV, FAIL_ALLOC_TEXT, RACE_FAULT_PROBABILITIES, STDERR_LINES, _Heartbeat)

__all__ = ["check_patch", "CheckPatchResult", "CheckResult", "CHECKS", "PatchLoadError"]

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
    #: the patch's pr_* output during a failed check (its first lines), None when it passed or printed nothing
    log: list[str] | None = None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "passed": self.passed, "figure": self.figure, "detail": self.detail,
                "counterexample": self.counterexample, "wall_s": round(self.wall_s, 3), "log": self.log}


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
    asan: bool = False
    wall_s: float = 0.0
    #: the compiler's warning lines on the patch (``-Wall``; file:line: warning: ...), [] when it had none
    warnings: list[str] = dataclasses.field(default_factory=list)
    #: the bio write_end was handed: "consumed" (as cached_dev_write_complete sees it) or "intact"
    end_bio: str = "consumed"
    #: which allocations fault injection could fail: "can-fail" (the kernel's rules) or "all"
    fail_alloc: str = "can-fail"

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    def to_json(self) -> dict[str, Any]:
        return {"patch": self.patch, "name": self.name, "passed": self.passed,
                "checks": [c.to_json() for c in self.checks], "memory": self.memory, "tsan": self.tsan,
                "seconds": self.seconds, "wall_s": round(self.wall_s, 3), "warnings": self.warnings,
                "end_bio": self.end_bio, "asan": self.asan, "fail_alloc": self.fail_alloc}

# == the parent: one child per check ================================================================

def _asan_runtime() -> str:
    """The AddressSanitizer runtime the children preload (Python is not built with it)."""
    preloaded = os.environ.get("LD_PRELOAD", "")
    if "libtsan" in preloaded or "libhwasan" in preloaded or "libmsan" in preloaded:
        raise PatchLoadError(f"asan: another sanitizer's runtime is preloaded (LD_PRELOAD={preloaded}); run "
                             "without --asan or outside that build")
    cc = os.environ.get("CC") or "cc"
    try:
        out = subprocess.run([*cc.split(), "-print-file-name=libasan.so"], capture_output=True, text=True,
                             timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    if not out or not os.path.isabs(out) or not os.path.exists(out):
        raise PatchLoadError("asan: the C compiler has no AddressSanitizer runtime (libasan.so); "
                             "install it (Debian: libgcc-12-dev) or run without --asan")
    return out


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
                progress: Progress | None = None,
                include_dirs: tuple[str | os.PathLike, ...] | list[str | os.PathLike] = (),
                end_bio: str = "consumed", asan: bool = False, fail_alloc: str = "can-fail") -> CheckPatchResult:
    """Run the battery on the patch at ``path``, each check in a child process.

    :param seconds: stress time of ``balance`` and ``race`` (each fault probability), in (0, 600].
        Default 2.0.
    :param tsan: run the children with the ThreadSanitizer flavour of the patch and the TSan runtime
        preloaded; a TSan report fails the check that produced it. Default False.
    :param checks: a subset of :data:`CHECKS` to run (default all), in :data:`CHECKS` order; a str is
        one check's name; an empty list is a ValueError.
    :param timeout: wall seconds a check's child may run before it is killed and the check fails as
        hung, in (0, 3600]; default None: 40 s per check plus its stress time (five times that with
        ``tsan``; ``explore`` 600 s), well past the shim's own hung bound of :data:`HUNG_TIMEOUT`. It
        counts from the moment the child is up (its heartbeat file exists); the child's start is bounded
        apart by :data:`STARTUP_BOUND_S`.
    :param progress: called ``progress(check, index, total)`` before each check.
    :param include_dirs: folders the patch's ``#include`` may find headers in (``-I``). Default none.
    :param end_bio: the bio every check hands ``write_end``: ``"consumed"`` (default; as bcache's
        ``cached_dev_write_complete`` sees a bypass write's ``s->orig_bio`` after ``bch_data_invalidate``:
        ``bi_size`` 0, ``bi_sector`` at the write's end) or ``"intact"`` (a call site that saved an
        unconsumed copy).
    :param asan: run the children with the AddressSanitizer flavour of the patch and the ASan runtime
        preloaded (leak detection off: the interpreter's own allocations would be reported); an ASan report
        fails the check that produced it, with the report's first lines. Not with ``tsan``. Default False.
    :param fail_alloc: which allocations the checks' fault injection may fail: ``"can-fail"`` (default: only
        those the kernel can fail, docs/check-patch.md) or ``"all"`` (every one but ``__GFP_NOFAIL``).
    :raises PatchCompileError: (a ValueError) the compiler's first lines.
    :raises PatchLoadError: (a ValueError) the module does not load.
    """
    from ..load import _check_end_bio, compile_patch
    _check_end_bio(end_bio)
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError(f"seconds must be a number in (0, 600], got {type(seconds).__name__}")
    if not 0 < seconds <= 600:
        raise ValueError(f"seconds must be in (0, 600], got {seconds!r}")
    if not isinstance(tsan, bool):
        raise TypeError(f"tsan must be a bool, got {type(tsan).__name__}")
    if not isinstance(asan, bool):
        raise TypeError(f"asan must be a bool, got {type(asan).__name__}")
    if asan and tsan:
        raise ValueError("asan and tsan cannot both be set: their runtimes cannot share a process")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                or not 0 < timeout <= 3600):
        raise ValueError(f"timeout must be None or a number of seconds in (0, 3600], got {timeout!r}")
    if not isinstance(fail_alloc, str) or fail_alloc not in FAIL_ALLOC_TEXT:
        raise ValueError(f"fail_alloc must be one of {', '.join(FAIL_ALLOC_TEXT)}, got {fail_alloc!r}")
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
    flavour = "tsan" if tsan else ("asan" if asan else "plain")
    # the TSan runtime first: a refusal (another sanitizer preloaded) must not depend on a compile, nor on
    # the compile cache
    tsan_runtime = _tsan_runtime() if tsan else ""
    asan_runtime = _asan_runtime() if asan else ""
    library, compiler_output = compile_patch(path, flavour=flavour, include_dirs=include_dirs)
    env = dict(os.environ)
    if "explore" in names:              # the patch-level explorer's module (issue 26), built here: -I folders
        from ..interleave import compile_interleave
        from .patch_level import LIBRARY_ENV
        env[LIBRARY_ENV] = str(compile_interleave(path, include_dirs=tuple(include_dirs)))
    env.pop("PYTHONFAULTHANDLER", None)  # the child's own Python traceback on a patch's crash is noise here
    if flavour == "plain":
        env["PYBCACHE_KPATCH_SYMBOLISE"] = "1"   # a crash writes the patch's frames for _symbolise
    if asan:
        env["LD_PRELOAD"] = asan_runtime + (" " + env["LD_PRELOAD"] if env.get("LD_PRELOAD") else "")
        env["ASAN_OPTIONS"] = "detect_leaks=0:exitcode=67:" + env.get("ASAN_OPTIONS", "")
    env[FAIL_ALLOC_ENV] = fail_alloc
    if tsan:
        env["LD_PRELOAD"] = tsan_runtime + (" " + env["LD_PRELOAD"] if env.get("LD_PRELOAD") else "")
        env["TSAN_OPTIONS"] = "exitcode=66 report_signal_unsafe=0 " + env.get("TSAN_OPTIONS", "")
    results: list[CheckResult] = []
    memory: list[dict[str, Any]] = []
    name = None
    for i, check in enumerate(names):
        if progress is not None:
            progress(check, i, len(names))
        bound = _wall_bound(check, seconds, tsan or asan) if timeout is None else float(timeout)
        res, extra = _run_child(check, Path(path).resolve(), library, seconds, env, bound, end_bio)
        if extra.get("load_error"):
            raise PatchLoadError(extra["load_error"])
        name = extra.get("name") or name
        if check == "memory" and res.passed:
            memory = extra.get("rows", [])
        results.append(res)
    warnings = [line for line in compiler_output.splitlines() if ": warning: " in line]
    return CheckPatchResult(patch=str(path), name=name, checks=results, memory=memory, tsan=tsan,
                            seconds=float(seconds), wall_s=time.perf_counter() - t0, warnings=warnings,
                            end_bio=end_bio, asan=asan, fail_alloc=fail_alloc)


#: Seconds a check's child may take to start (its interpreter and the package), before its wall bound
#: begins: generous, for a loaded machine.
STARTUP_BOUND_S = 120.0


def _wall_bound(check: str, seconds: float, tsan: bool) -> float:
    """Wall seconds a check's child may take before it is killed as hung (generous: a loaded machine)."""
    base = {"balance": 40 + seconds, "race": 40 + 2 * seconds * len(RACE_FAULT_PROBABILITIES),
            "explore": 600.0}.get(check, 40.0)
    return base * (5 if tsan else 1)


def _run_child(check: str, path: Path, library: Path, seconds: float, env: dict[str, str],
               bound: float, end_bio: str = "consumed") -> tuple[CheckResult, dict[str, Any]]:
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="pybcache-check-") as tmp:
        heartbeat = Path(tmp, "heartbeat")
        code = ("import sys; from pybcache.bcache.kpatch.check.checks import _child_main; "
                "sys.exit(_child_main(sys.argv[1:]))")
        cmd = [sys.executable, "-c", code, check, str(path), str(library), repr(float(seconds)), str(heartbeat),
               end_bio]
        # Output goes to files, not pipes: a process the patch forked keeps a pipe open after the child
        # ended, and reading to EOF would wait for it. The child leads a process group of its own (its
        # session), which is killed when it ends or at the wall bound: nothing the patch started outlives
        # the check.
        out_path, err_path = Path(tmp, "stdout"), Path(tmp, "stderr")
        with open(out_path, "wb") as fo, open(err_path, "wb") as fe:
            proc = subprocess.Popen(cmd, stdout=fo, stderr=fe, env=env, cwd=tempfile.gettempdir(),
                                    start_new_session=True)
        try:
            timed_out = not _wait_unreaped(proc, bound, heartbeat)
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
        frames = _symbolise(library, err_lines, path)
        at = f" at {frames[0]}" if frames else ""
        tail = _tail(err_lines) or []
        if frames:
            tail = [f"the patch's frames, innermost first: {' <- '.join(frames)}"] + tail
        return CheckResult(check, False, f"killed by {sig}", f"FAILED: killed by {sig}{doing}{at}",
                           tail or None, wall), extra
    tsan_report = _tsan_report(err_lines)
    asan_report = _asan_report(err_lines)
    if asan_report:
        return CheckResult(check, False, "AddressSanitizer", f"FAILED: {_asan_headline(asan_report)}", asan_report,
                           wall), extra
    if payload is None:
        what = f"exit status {proc.returncode}"
        if tsan_report:
            return CheckResult(check, False, "ThreadSanitizer", f"FAILED: {tsan_report[0]} ({what})",
                               tsan_report, wall), extra
        return CheckResult(check, False, what, f"FAILED: the check's process ended with {what} and no "
                           f"result", _tail(err_lines), wall), extra
    res = CheckResult(check, bool(payload["passed"]), payload["figure"], payload["detail"],
                      payload.get("counterexample"), wall, payload.get("log") or None)
    if tsan_report:
        res = CheckResult(check, False, "ThreadSanitizer", f"FAILED: {tsan_report[0]}", tsan_report, wall)
    return res, extra


def _wait_unreaped(proc: subprocess.Popen, bound: float, started: Path | None = None) -> bool:
    """Wait for the child to end, without reaping it: while it is a zombie its pid, which is its group's
    id, cannot be reused, so :func:`_kill_group` hits only its group. False once ``bound`` seconds have
    passed since ``started`` appeared (the child's heartbeat file: its interpreter is up and the check
    begins), or since the call if ``started`` is None; the child's start before that is bounded by
    :data:`STARTUP_BOUND_S`, so a loaded machine's slow interpreter start does not eat a check's bound."""
    now = time.monotonic()
    deadline = now + bound if started is None else None
    startup_deadline = now + STARTUP_BOUND_S
    while os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        now = time.monotonic()
        if deadline is None:
            if started is not None and started.exists():
                deadline = now + bound
            elif now > startup_deadline:
                return False
        elif now > deadline:
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


_FRAME = "pybcache-kpatch-frame 0x"


def _symbolise(library: Path, lines: list[str], patch: Path) -> list[str]:
    """The frames a crashed child's patch module wrote (``pybcache-kpatch-frame 0xOFFSET``, see kpatch_rt.c),
    as ``function (file:line)`` by ``addr2line`` on the module, innermost first, the patch's own source only
    (the shim's frames are left out). [] when there are none or addr2line is missing."""
    import shutil
    offsets = [int(x[len(_FRAME):], 16) for x in lines if x.startswith(_FRAME)]
    tool = shutil.which("addr2line")
    if not offsets or not tool:
        return []
    # a caller's frame holds a return address: the call is the byte before it
    addrs = [hex(off if i == 0 else off - 1) for i, off in enumerate(offsets)]
    try:
        out = subprocess.run([tool, "-e", str(library), "-f", "-C", *addrs], capture_output=True, text=True,
                             timeout=30).stdout.splitlines()
    except (OSError, subprocess.TimeoutExpired):
        return []
    frames = []
    for func, where in zip(out[0::2], out[1::2]):
        file, _, line = where.rpartition(":")
        line = line.split(" ")[0]
        if not file or file == "??" or os.path.basename(file) != patch.name:
            continue
        frames.append(f"{func} ({file}:{line})")
    return frames


def _tail(lines: list[str]) -> list[str] | None:
    """The child's last stderr lines; from the kernel's own BUG line on, when there is one (whatever a runtime
    printed after it - a sanitizer, Python's fault handler - must not push it out)."""
    lines = [x for x in lines if not x.startswith("{") and not x.startswith(_FRAME)]
    for i, line in enumerate(lines):
        if "kernel BUG at" in line:
            return lines[i:i + STDERR_LINES]
    return lines[-STDERR_LINES:] or None


def _asan_report(lines: list[str]) -> list[str] | None:
    """The first AddressSanitizer report's first lines (its headline, the access, the first frames), or None."""
    for i, line in enumerate(lines):
        if "ERROR: AddressSanitizer:" in line:
            return [x.strip() for x in lines[i:i + 8]]
    return None


def _asan_headline(report: list[str]) -> str:
    """``AddressSanitizer: heap-use-after-free in start at FILE:LINE`` from a report's first lines."""
    import re
    m = re.search(r"AddressSanitizer: (\S+)", report[0])
    head = f"AddressSanitizer: {m.group(1) if m else 'error'}"
    for line in report[1:]:
        f = re.match(r"#\d+ 0x[0-9a-f]+ in (\S+) (\S+:\d+)", line)
        if f:
            return f"{head} in {f.group(1)} at {f.group(2)}"
    return head


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
