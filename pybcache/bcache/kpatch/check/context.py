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
                 "circular_locking", "recursive_locking", "irq_lock_order", "irq_lock_inversion",
                 "irqs_enabled_in_irq", "gfp_io_on_submission", "blocking_in_wait_condition",
                 "bad_unlock_balance", "mutex_wrong_owner", "preemptible_cpu_access")
#: Standard explorer scenarios and race fault probabilities.
EXPLORE_SCENARIOS = ((1, 1), (2, 1), (1, 2))
#: Wall seconds explore may spend on its fault_at sweep before it fails as incomplete (inside its 600 s
#: wall bound); the sweep itself goes on until a run injects no fault.
EXPLORE_BUDGET_S = 420.0
RACE_FAULT_PROBABILITIES = (0.0, 0.3)
#: Replays the semantics check spends shrinking a counterexample at most (a count: machine-independent).
SHRINK_TRIALS = 5000
#: printk records of a check's closed trackers kept for its failure (the semantics check closes thousands).
LOG_KEPT = 200
#: Lines of a dead child's stderr kept in its failure.
STDERR_LINES = 6
#: The environment variable that carries check-patch's ``fail_alloc`` to the child (internal).
FAIL_ALLOC_ENV = "PYBCACHE_CHECK_FAIL_ALLOC"
#: How a verdict names each fault-injection mode.
FAIL_ALLOC_TEXT = {"can-fail": "only allocations the kernel can fail (a mask that cannot sleep, __GFP_NORETRY, "
                               "__GFP_RETRY_MAYFAIL or over 32 KiB)",
                   "all": "every allocation but __GFP_NOFAIL (--fail-alloc all)"}

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

    def __init__(self, tracker: Any, heartbeat: _Heartbeat, log_sink: list[dict[str, Any]] | None = None,
                 log_dropped: list[int] | None = None):
        self.t = tracker
        self._hb = heartbeat
        self._log_sink = log_sink       # where the patch's printk records go when the tracker closes (at most
        self._log_dropped = log_dropped  # LOG_KEPT of them; the others counted in log_dropped[0])

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

    def end(self, off: int, ln: int, context: str | None = None) -> None:
        if context is None:
            self._call(2, self.t.end, off, ln)
        else:
            self._call(2, lambda o, n: self.t.end(o, n, context=context), off, ln)

    def is_active(self, off: int, ln: int) -> bool:
        return self._call(3, self.t.is_active, off, ln)

    def rcu_barrier(self) -> int:
        return self._call(4, self.t.rcu_barrier)

    def close(self) -> dict:
        if self._log_sink is not None and self._log_dropped is not None and not self.t.closed:
            try:
                logs = self.t.kernel_log()
            except RuntimeError:
                logs = []
            room = max(0, LOG_KEPT - len(self._log_sink))
            self._log_sink.extend(logs[:room])
            self._log_dropped[0] += max(0, len(logs) - room)
        return self._call(5, self.t.close)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.t, name)


class _Context:
    """What a check gets: the loaded patch, tracker factory, stress seconds."""

    def __init__(self, path: str, library: str, seconds: float, heartbeat: _Heartbeat,
                 end_bio: str = "consumed", fail_alloc: str | None = None):
        from .._kpatch import PatchModule
        from ..load import KernelPatch
        import os
        self.path, self.seconds, self.heartbeat = path, seconds, heartbeat
        #: which allocations the checks' fault injection may fail (check_patch's fail_alloc; None: the
        #: child's environment, default "can-fail")
        self.fail_alloc = fail_alloc if fail_alloc is not None else os.environ.get(FAIL_ALLOC_ENV, "can-fail")
        module = PatchModule(library)
        # A KernelPatch around the module this child was given (plain or tsan flavour): the drivers
        # take it like one from load_patch.
        patch = KernelPatch.__new__(KernelPatch)
        patch._module, patch.path, patch.library, patch.name, patch.warnings = (
            module, path, str(library), module.name, "")
        patch.end_bio = self.end_bio = end_bio
        patch.bypass_granularity = module.bypass_granularity
        self.patch = patch
        self.trackers: list[Any] = []
        self.closed_logs: list[dict[str, Any]] = []
        self.log_dropped = [0]          # printk records of closed trackers past LOG_KEPT

    def tracker(self, device_size: int, fault: Any = None, end_bio: str | None = None) -> _Traced:
        self.heartbeat.set(6)
        t = self.patch.tracker(device_size, fault=fault, hung_timeout=HUNG_TIMEOUT, end_bio=end_bio,
                               end_contexts="all", fail_alloc=self.fail_alloc)
        self.heartbeat.set(0)
        traced = _Traced(t, self.heartbeat, self.closed_logs, self.log_dropped)
        self.trackers.append(traced)
        return traced

    def logs(self) -> list[dict[str, Any]]:
        """The patch's printk records of every tracker of this check (closed ones' kept at their close)."""
        out = list(self.closed_logs)
        for t in self.trackers:
            if not t.closed:
                try:
                    out.extend(t.kernel_log())
                except RuntimeError:
                    pass
        return out

    def reports(self) -> list[dict[str, Any]]:
        out = []
        for t in self.trackers:
            if not t.closed:
                out.extend(t.kernel_reports())
        return out


def _consumed_end_bio_leaks(ctx: _Context) -> list[str] | None:
    """With the consumed end bio (the default): does one write of [0, 4 KiB) leave chunk 0 active, when the
    same write with an intact bio does not? Then the patch reads its range from the bio in write_end (which
    at bcache's cached_dev_write_complete has 0 sectors left) and the steps that show it are returned."""
    if ctx.end_bio != "consumed":
        return None
    one = (0, 4096)

    def leaks(end_bio: str) -> bool:
        t = ctx.tracker(SEMANTICS_DEVICE, end_bio=end_bio)
        try:
            t.start(*one)
            t.end(*one)
            t.rcu_barrier()
            return bool(t.is_active(*one))
        finally:
            t.close()
            ctx.trackers.remove(t)

    if not leaks("consumed") or leaks("intact"):
        return None
    return ["write [0, 4 KiB) (sectors 0-7, chunk 0) starts",
            "the write completes: write_end is handed the bio as bcache's cached_dev_write_complete sees "
            "s->orig_bio of a bypass write, its iterator consumed by bch_data_invalidate: bi_sector 8, bi_size 0 "
            "(0 sectors)",
            "read [0, 4 KiB) (chunk 0): still bypasses: the end saw 0 sectors and dropped no count",
            "the same three steps with the bio intact (--end-bio intact): the read does not bypass. Record the "
            "write's range at start, in the per-write private area (.write_private_size, "
            "pyb_write_private(bio)), as the fix does in struct search; or pass --end-bio intact if your "
            "call site saves an unconsumed copy of the bio"]


# -- formatting -------------------------------------------------------------------------------------

#: How a verdict says where write_end ran, by context.
_ENDS_WHERE = {"hardirq": "in hard-irq", "softirq": "in soft-irq", "worker": "on a worker (process context)",
               "inline": "inline on the submitter"}


def _fmt_ends(counts: dict[str, int]) -> str:
    """Ends by context as a verdict says it: ``12 in hard-irq, 12 in soft-irq, ...``."""
    return ", ".join(f"{counts[c]:,} {where}" for c, where in _ENDS_WHERE.items())

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
    """A byte range, then the 512-byte sectors the patch's bio covers (rounded outward, as the shim does) and
    the reference's 32 MiB chunks: ``[32 MiB, 32 MiB + 1) (sector 65536, chunk 1)``."""
    first, last = off // CHUNK, (off + ln - 1) // CHUNK
    s0, s1 = off >> 9, (off + ln - 1) >> 9
    sectors = f"sector {s0:,}" if s0 == s1 else f"sectors {s0:,}-{s1:,}"
    chunks = f"chunk {first}" if first == last else f"chunks {first}-{last}"
    return f"[{_fmt_bytes(off)}, {_fmt_bytes(off + ln)}) ({sectors}, {chunks})"
