"""The child side of ``check-patch``: what every check shares (its constants, the loaded patch wrapped so
that each call is recorded in the heartbeat file, the stop that carries a failure and its counterexample)
and the text of positions and sizes in a counterexample."""
from __future__ import annotations

import struct
import threading
from typing import Any, Callable

from ....units import GiB, MiB, TiB

#: The checks, in the order they run and print.
CHECKS = ("semantics", "explore", "race", "overflow", "balance", "context", "memory")

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
#: Kinds of kernel report that fail ``context`` (docs/design.md, "check-patch": might_sleep, lockdep, bad unlocks).
CONTEXT_KINDS = ("might_sleep", "inconsistent_lock_state", "unlock_not_held", "double_unlock",
                 "spin_recursion", "lock_held_at_return", "suspicious_rcu_usage", "bad_free", "lock_not_held",
                 "recursive_locking", "bad_unlock_balance", "mutex_wrong_owner", "preemptible_cpu_access")
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
