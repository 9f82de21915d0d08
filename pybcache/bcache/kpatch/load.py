"""Bring your own patch: compile a kernel-style tracker patch against the shim and run it as a tracker.

>>> p = pybcache.load_patch("examples/patches/v3_proposal.c")
>>> t = p.tracker(10 * pybcache.GiB, fault=pybcache.FaultInjection(probability=0.1, seed=1))
>>> t.start(0, 128 * pybcache.KiB); t.is_active(0, 4096); t.end(0, 128 * pybcache.KiB)

The patch is compiled with the system C compiler (``$CC``, default ``cc``) together with the shim
runtime, once per content: the shared object is cached under ``$PYBCACHE_CACHE_DIR``, else
``$XDG_CACHE_HOME/pybcache``, else ``~/.cache/pybcache``. A build is reused only while every file the
compiler read for it is unchanged (its ``-MD`` dependency list: the patch, each header it includes from its
own tree or an ``-I`` folder, the shim's headers and runtime, the system headers) and the command is the
same (the compiler, the flags, the include folders, the patch's path). docs/check-patch.md is the guide.
"""
from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from ._kpatch import PatchModule, PatchTracker
from ..._csrc import csrc_dir, csrc_path

__all__ = ["load_patch", "get_include", "KernelPatch", "PatchTracker", "PatchCompileError", "render_report"]

_INCLUDE = csrc_dir() / "kpatch" / "include"
_RUNTIME = csrc_path("kpatch/kpatch_rt.c")

#: Flags of every patch module. gnu11: kernel code uses statement expressions and __typeof__, as the
#: kernel itself is built. -z defs: a patch without PYBCACHE_PATCH(ops) fails at link time, not at load.
CFLAGS = ("-std=gnu11", "-O2", "-g", "-fPIC", "-pthread", "-Wall", "-Wextra", "-Wno-unused-function")
LDFLAGS = ("-shared", "-pthread", "-Wl,-z,defs")
#: Extra flags per flavour; "tsan" modules need the ThreadSanitizer runtime loaded first (the later
#: check-patch --tsan runs them in a child process started with it).
FLAVOURS = {"plain": (), "tsan": ("-fsanitize=thread",),
            "asan": ("-fsanitize=address", "-fno-omit-frame-pointer")}
#: Compiler output kept in a compile error: the first lines are the ones that matter.
ERROR_LINES = 20
#: Seconds one compiler run may take before it is killed and the compile fails (a PatchCompileError).
COMPILE_TIMEOUT = 120.0
#: Age in seconds past which a leftover ``.build-*`` folder in the cache is removed at the next compile.
STALE_BUILD_S = 3600.0


def get_include() -> str:
    """The folder to pass as ``-I`` when compiling a patch: it holds ``pybcache/kpatch.h`` and the
    forwarding ``linux/*.h`` headers."""
    return str(_INCLUDE)


class PatchCompileError(ValueError):
    """The C compiler rejected a patch (or there is none). ``output`` holds the compiler's first lines."""

    def __init__(self, message: str, output: str = ""):
        super().__init__(message + (f"\n{output}" if output else ""))
        self.output = output


def _cache_dir() -> Path:
    """The cache folder, absolute (a relative setting is taken from the current directory now: the
    check-patch children run elsewhere and are handed the library's path)."""
    if os.environ.get("PYBCACHE_CACHE_DIR"):
        return Path(os.path.abspath(os.path.expanduser(os.environ["PYBCACHE_CACHE_DIR"])))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(os.path.abspath(base)) / "pybcache"


def _compiler() -> list[str]:
    return shlex.split(os.environ.get("CC") or "cc")


def _key(path: Path, cc: list[str], flags: tuple[str, ...], include_dirs: tuple[str, ...] = ()) -> str:
    """The compile command's key: the patch's path, the compiler, the flags, the include folders. What the
    compiler read is checked apart (:func:`_deps_unchanged`)."""
    h = hashlib.sha256()
    # the compiler's and the flags' words as JSON lists: ["cc", "-m64"] (cc with a flag) is not ["cc -m64"]
    # (a program of that name)
    for part in (b"pybcache-kpatch-3", str(path).encode(), json.dumps(list(cc)).encode(),
                 json.dumps(list(flags)).encode(), json.dumps(list(include_dirs)).encode(),
                 str(_INCLUDE).encode(), str(_RUNTIME).encode()):
        h.update(len(part).to_bytes(8, "little") + part)
    return h.hexdigest()[:24]


def _digest(path: str) -> str | None:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def _read_deps(text: str) -> list[str]:
    """The files of a make rule that ``cc -MD`` wrote (``target: dep dep \\`` lines; a space in a name is
    written ``\\ ``), in order, without repeats."""
    body = text.replace("\\\n", " ").split(":", 1)[1] if ":" in text else ""
    names, word, i = [], "", 0
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body) and body[i + 1] == " ":
            word += " "
            i += 2
            continue
        if ch.isspace():
            if word:
                names.append(word)
            word = ""
        else:
            word += ch
        i += 1
    if word:
        names.append(word)
    return list(dict.fromkeys(os.path.abspath(n) for n in names))


def _deps_unchanged(manifest: Path) -> tuple[Path, str] | None:
    """The cached build of ``manifest`` and its warnings, if it exists and every file its compile read still
    has the content it had; else None."""
    try:
        record = json.loads(manifest.read_text())
        library = manifest.with_name(record["library"])
        deps, warnings = dict(record["deps"]), str(record["warnings"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not library.is_file() or not deps:
        return None
    return (library, warnings) if all(_digest(f) == d for f, d in deps.items()) else None


def _run(cmd: list[str], what: str) -> str:
    # The compiler leads a process group of its own, killed as a whole at the time limit: the driver's
    # own children (cc1, as, ld) hold its pipes and would otherwise keep the read going.
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
    except FileNotFoundError:
        raise PatchCompileError(f"no C compiler: {cmd[0]!r} was not found (set CC)") from None
    try:
        _out, err = proc.communicate(timeout=COMPILE_TIMEOUT)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        raise PatchCompileError(f"{what}: the C compiler did not finish within {COMPILE_TIMEOUT:g} s "
                                f"(killed; an #include of a pipe or device?)") from None
    except BaseException:               # Ctrl-C
        _kill_group(proc)
        raise
    if proc.returncode != 0:
        out = "\n".join(err.splitlines()[:ERROR_LINES])
        if "pybcache_patch_ops_ptr" in err:
            out += "\n(the patch must declare its operations once with PYBCACHE_PATCH(ops))"
        raise PatchCompileError(f"{what}: the C compiler failed", out)
    return err


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)     # our own compiler's group: its pid is the group id
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:           # pragma: no cover - SIGKILL is not ignorable
        pass


def _remove_stale_builds(cache: Path) -> None:
    """Remove build folders older than :data:`STALE_BUILD_S` that a killed compile left behind (a
    finished or failed one removes its own)."""
    now = time.time()
    for d in cache.glob(".build-*"):
        try:
            if now - d.stat().st_mtime > STALE_BUILD_S:
                shutil.rmtree(d, ignore_errors=True)
        except OSError:
            pass


def compile_patch(path: str | os.PathLike, *, flavour: str = "plain",
                  include_dirs: tuple[str | os.PathLike, ...] | list[str | os.PathLike] = ()) -> tuple[Path, str]:
    """Compile the patch at ``path`` into a patch module (or reuse the cached one: same command, and every
    file the compiler read for it unchanged).

    :param flavour: ``"plain"``, ``"tsan"`` (ThreadSanitizer-instrumented, for a child process
        that preloads the TSan runtime) or ``"asan"`` (AddressSanitizer, likewise with the ASan runtime).
        Default ``"plain"``.
    :param include_dirs: folders the patch's ``#include`` may find headers in (``-I``), each an existing
        folder. Default none: the patch's own folder and the shim.
    :returns: the shared object's path and the compiler's warnings on the patch (kept with a cached build).
    :raises PatchCompileError: (a ValueError) with the compiler's first lines.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    if not isinstance(flavour, str):
        raise TypeError(f"flavour must be a str, one of {tuple(FLAVOURS)}, got {type(flavour).__name__}")
    if flavour not in FLAVOURS:
        raise ValueError(f"flavour must be one of {tuple(FLAVOURS)}, got {flavour!r}")
    if isinstance(include_dirs, (str, os.PathLike)) or not isinstance(include_dirs, (tuple, list)):
        raise TypeError(f"include_dirs must be a list of folders, got {type(include_dirs).__name__}")
    incs: list[str] = []
    for d in include_dirs:
        if not isinstance(d, (str, os.PathLike)):
            raise TypeError(f"include_dirs: each must be a str or os.PathLike, got {type(d).__name__}")
        if not os.path.isdir(d):
            raise ValueError(f"include_dirs: {os.fspath(d)!r} is not a folder")
        incs.append(os.path.abspath(d))
    src = Path(path).resolve()
    try:
        src.read_bytes()
    except OSError as e:
        raise ValueError(f"path: cannot read the patch {str(path)!r}: {e.strerror}") from None
    cc = _compiler()
    flags = CFLAGS + FLAVOURS[flavour]
    key = _key(src, cc, flags + LDFLAGS, tuple(incs))
    cache = _cache_dir() / "kpatch"
    manifest = cache / f"{src.stem}-{flavour}-{key}.json"
    hit = _deps_unchanged(manifest)
    if hit is not None:
        return hit
    cache.mkdir(parents=True, exist_ok=True)
    _remove_stale_builds(cache)
    with tempfile.TemporaryDirectory(dir=cache, prefix=".build-") as tmp:
        rt_o, patch_o, so = Path(tmp, "rt.o"), Path(tmp, "patch.o"), Path(tmp, "patch.so")
        rt_d, patch_d = Path(tmp, "rt.d"), Path(tmp, "patch.d")
        # The runtime sees the shim folder for quoted includes only (-iquote), so that the C library's
        # own <linux/...> includes never meet the forwarding headers.
        _run([*cc, *flags, "-MD", "-MF", str(rt_d), "-iquote", str(_INCLUDE), "-c", str(_RUNTIME),
              "-o", str(rt_o)], "the shim runtime")
        warnings = _run([*cc, *flags, "-MD", "-MF", str(patch_d), "-I", str(_INCLUDE),
                         *(w for d in incs for w in ("-I", d)), "-c", str(src), "-o", str(patch_o)], str(path))
        _run([*cc, *flags, *LDFLAGS, str(patch_o), str(rt_o), "-o", str(so)], f"{path} (link)")
        read = _read_deps(rt_d.read_text()) + _read_deps(patch_d.read_text())
        deps = {f: _digest(f) for f in dict.fromkeys([str(src), str(_RUNTIME), *read])}
        content = hashlib.sha256(json.dumps(sorted(deps.items())).encode()).hexdigest()[:16]
        out = cache / f"{src.stem}-{flavour}-{key}-{content}.so"
        os.replace(so, out)             # atomic: a concurrent compile of the same files is harmless
        record = Path(tmp, "manifest.json")
        record.write_text(json.dumps({"library": out.name, "deps": deps, "warnings": warnings}))
        os.replace(record, manifest)
    return out, warnings

class KernelPatch:
    """A compiled and loaded patch. Build trackers from it with :meth:`tracker`.

    :ivar name: the patch's ``ops.name``.
    :ivar path: the patch source.
    :ivar library: the compiled module (in the cache).
    :ivar warnings: the compiler's warnings on the patch (kept with a cached build).
    :ivar include_dirs: the ``-I`` folders it was compiled with.
    :ivar end_bio: the bio its trackers' ``write_end`` gets by default: ``"consumed"`` (as bcache's
        ``cached_dev_write_complete`` sees a bypass write's ``s->orig_bio``: ``bi_size`` 0, ``bi_sector`` at
        the write's end) or ``"intact"`` (a call site that saved an unconsumed copy).
    """

    def __init__(self, path: str | os.PathLike, include_dirs: tuple[str | os.PathLike, ...] = (),
                 end_bio: str = "consumed"):
        _check_end_bio(end_bio)
        self.end_bio = end_bio
        library, self.warnings = compile_patch(path, include_dirs=include_dirs)
        self.include_dirs = tuple(os.path.abspath(d) for d in include_dirs)
        self._module = PatchModule(library)
        self.path = str(Path(path).resolve())
        self.library = str(library)
        self.name = self._module.name
        #: the patch's declared bypass granularity in bytes (``ops.bypass_granularity``; 0: none, the
        #: reference's 32 MiB chunks)
        self.bypass_granularity = self._module.bypass_granularity

    def __repr__(self) -> str:
        return f"KernelPatch(name={self.name!r}, path={self.path!r})"

    def tracker(self, device_size: int, *, fault=None, hung_timeout: float = 10.0,
                end_bio: str | None = None, end_contexts="hardirq", fail_alloc: str = "all") -> PatchTracker:
        """A new instance of the patch as a tracker of a ``device_size``-byte backing device.

        The patch's ``init`` runs now, in process context and without fault injection.

        :param device_size: bytes, in [1, 2**62]; the patch sees ``DIV_ROUND_UP(device_size, 512)``
            sectors.
        :param fault: a :class:`pybcache.FaultInjection` applied to every allocation of the patch's
            operations (never to ``__GFP_NOFAIL`` ones, never during init and exit), shared with the
            caller (its ``injected`` counts these failures). Default None.
        :param hung_timeout: seconds any wait or spinlock acquisition may last before the operation
            is abandoned as hung (TimeoutError; the tracker is then broken). Default 10.0.
        :param end_bio: ``"consumed"`` or ``"intact"`` (see :attr:`end_bio`); default the patch's.
        :param end_contexts: where ``end`` runs ``write_end``: ``"hardirq"`` (default), ``"softirq"``,
            ``"worker"`` (process context, interrupts on), or several of them (an iterable, or ``"all"``),
            which ends then take in turn (the module's n-th end the n-th of them; ``"inline"`` only
            through ``end(..., context="inline")`` on the submitting thread, or the explorer).
        :param fail_alloc: ``"all"`` (default: ``fault`` may fail any allocation but ``__GFP_NOFAIL``)
            or ``"can-fail"`` (only those the kernel can fail: docs/check-patch.md).
        """
        if end_bio is None:
            end_bio = self.end_bio
        _check_end_bio(end_bio)
        return PatchTracker(self._module, self, device_size, fault, hung_timeout, end_bio, end_contexts,
                            fail_alloc)


END_BIO_MODES = ("consumed", "intact")


def _check_end_bio(end_bio) -> None:
    if not isinstance(end_bio, str):
        raise TypeError(f"end_bio must be 'consumed' or 'intact', got {type(end_bio).__name__}")
    if end_bio not in END_BIO_MODES:
        raise ValueError(f"end_bio must be 'consumed' or 'intact', got {end_bio!r}")


def load_patch(path: str | os.PathLike, *, include_dirs: tuple[str | os.PathLike, ...] = (),
               end_bio: str = "consumed") -> KernelPatch:
    """Compile (cached while every file the compiler read is unchanged) and load the patch file at ``path``.

    :param include_dirs: folders its ``#include`` may find headers in (``-I``). Default none.
    :param end_bio: the bio its trackers' ``write_end`` gets: ``"consumed"`` (default: as bcache's
        ``cached_dev_write_complete`` sees it, ``bi_size`` 0) or ``"intact"``.
    :raises PatchCompileError: a ValueError carrying the compiler's first lines.
    """
    return KernelPatch(path, tuple(include_dirs), end_bio)


# -- reports in the kernel's words -------------------------------------------------------------------

_KINDS = {1: "might_sleep", 2: "inconsistent_lock_state", 3: "unlock_not_held", 4: "double_unlock",
          5: "spin_recursion", 6: "lockup", 7: "hung_task", 8: "warning", 9: "lock_held_at_return",
          10: "suspicious_rcu_usage", 11: "bad_free", 12: "lock_not_held", 13: "circular_locking",
          14: "irq_lock_order", 15: "irqs_enabled_in_irq", 16: "gfp_io_on_submission",
          17: "blocking_in_wait_condition",
          # the second API group (kpatch_ext.h), numbered after the context rules
          18: "recursive_locking", 19: "bad_unlock_balance", 20: "mutex_wrong_owner", 21: "preemptible_cpu_access"}
# (18, recursive_locking: a mutex or rwlock taken again by its holder; lockdep's recursive locking of a second
# lock of a held class arrives as circular_locking with detail 1 and is named recursive_locking too)
_OPS = {0: None, 1: "init", 2: "exit", 3: "write_start", 4: "write_end", 5: "read_bypass", 6: "rcu_callback"}
_SLEEPERS = {0: "a sleeping allocation", 1: "wait_event", 2: "synchronize_rcu", 3: "might_sleep", 4: "mutex_lock",
             5: "mempool_alloc", 6: "wait_event_timeout", 7: "schedule_timeout"}
#: the sleeper whose kernel report is the scheduler's, not might_sleep's
_SCHEDULE_SLEEPER = 7
_USAGE = {0: ("IN-HARDIRQ-W", "HARDIRQ-ON-W"), 1: ("HARDIRQ-ON-W", "IN-HARDIRQ-W"),
          2: ("IN-SOFTIRQ-W", "SOFTIRQ-ON-W"), 3: ("SOFTIRQ-ON-W", "IN-SOFTIRQ-W"),
          4: ("IN-HARDIRQ-R", "HARDIRQ-ON-W"), 5: ("HARDIRQ-ON-W", "IN-HARDIRQ-R"),
          6: ("IN-HARDIRQ-W", "HARDIRQ-ON-R"), 7: ("HARDIRQ-ON-R", "IN-HARDIRQ-W")}
_CONTEXT_WORDS = {"hardirq": "hard-irq", "softirq": "soft-irq", "worker": "a worker (process context)",
                  "inline": "inline on the submitter (process context)"}
_AT_RETURN = {0: "a spinlock held", 1: "interrupts disabled", 2: "an RCU read-side section open", 3: "a mutex held",
              4: "preemption disabled", 5: "bottom halves disabled", 6: "an rwlock held"}

# One template per kind: the kernel's headline first (what a kernel developer searches for), then
# what the lab adds. Fields come from the record; a missing field raises.
_TEXT = {
    "might_sleep": "BUG: sleeping function called from invalid context at {site}: {sleeper} with "
                   "in_atomic(): {in_atomic}, irqs_disabled(): {irqs}, in hard-irq: {hardirq}, "
                   "rcu_read_lock depth {rcu_depth}{held}{ctx}",
    "circular_locking": "WARNING: possible circular locking dependency detected: {lock} taken at {site} while "
                        "holding {other_lock}, and the reverse order {other_lock} after {lock} was recorded "
                        "at {other}{ctx}",
    # lockdep's recursive locking: a second lock of a held class (circular_locking, detail 1), or a mutex or
    # rwlock taken again by its holder (raw kind 18; "BUG: rwlock recursion" for an rwlock)
    "recursive_locking": "{recursion}: {lock} taken at {site} {tail}{ctx}",
    "irq_lock_order": "WARNING: {irq}-safe -> {irq}-unsafe lock order detected: {other_lock} ({irq}-safe: "
                      "taken in {irqword} at {other}) held while taking {lock} at {site}, which is taken with "
                      "{irqword}s enabled elsewhere{ctx}",
    "irq_lock_inversion": "WARNING: possible irq lock inversion dependency detected: {lock} at {site} and "
                          "{other_lock} (at {other}) are ordered so that a {irqword} can take the "
                          "{irq}-safe lock while the {irq}-unsafe one a waiter behind it needs is held{ctx}",
    "irqs_enabled_in_irq": "WARNING: irq handler enabled interrupts: interrupts enabled at {site} in hard-irq "
                           "context (lockdep: DEBUG_LOCKS_WARN_ON(current->hardirq_context)); spin_lock_irq/"
                           "spin_unlock_irq or local_irq_enable in an interrupt",
    "gfp_io_on_submission": "WARNING: allocation with {gfp} at {site} on the block I/O submission path ({op}"
                            "{ctx}): reclaim may recurse into I/O on this device and deadlock; use GFP_NOIO "
                            "(as md-bitmap does for the same allocation) or memalloc_noio_save()",
    "blocking_in_wait_condition": "WARNING: do not call blocking ops when !TASK_RUNNING: {sleeper} at {site} "
                                  "inside a wait_event condition (the task's state is already set to sleep)",
    "inconsistent_lock_state": "WARNING: inconsistent lock state: inconsistent {{{first}}} -> {{{second}}} "
                               "usage. {lock} taken at {site}{ctx} ({second}); {first} first at {other}",
    "unlock_not_held": "BUG: {lockkind} wrong owner: {lock} released at {site} by a thread that does not hold it",
    "double_unlock": "BUG: {lockkind} already unlocked: {lock} released at {site} while nobody held it",
    "spin_recursion": "BUG: spinlock recursion: {lock} taken at {site} by the thread that already holds it",
    "lockup": "{lockup}",
    "hung_task": "INFO: task blocked for more than the hung bound in {sleeper} at {site}{wake}",
    "warning": "WARNING: at {site} ({op})",
    "lock_held_at_return": "BUG: {op} returned with {what}{held}",
    "suspicious_rcu_usage": "WARNING: suspicious RCU usage at {site}: rcu_dereference outside rcu_read_lock",
    "bad_free": "BUG: kfree at {site} of {what}",
    "lock_not_held": "WARNING: lock not held at {site}: {lock}",
    "bad_unlock_balance": "WARNING: bad unlock balance detected! {lock} released at {site} while nobody held it",
    "mutex_wrong_owner": "WARNING: DEBUG_LOCKS_WARN_ON(__owner_task(owner) != current): {lock} released at {site} "
                         "by a thread that does not hold it",
    "preemptible_cpu_access": "BUG: using {cpu_op}() in preemptible [00000000] code at {site}",
}


def _wake_text(w: dict) -> str:
    """What could still have woken a hung waiter, from the runtime's counts at the report."""
    n, ended, others, rcu = w["inflight"], w["ends_during"], w["others_running"], w["rcu_queued"]
    facts = (f"{n:,} write(s) in flight (started, not ended), {ended:,} ended during the wait, "
             f"{others:,} other operation(s) of the tracker running outside a wait, {rcu:,} RCU callback(s) pending")
    if not (n or others or rcu):
        return facts + ": nothing left could wake it"
    return facts + ": what could still wake it did not within the bound"


_GFP_BITS = ((0x01, "__GFP_DIRECT_RECLAIM"), (0x02, "__GFP_KSWAPD_RECLAIM"), (0x04, "__GFP_IO"),
             (0x08, "__GFP_FS"), (0x10, "__GFP_HIGH"), (0x20, "__GFP_NOWARN"), (0x40, "__GFP_NOFAIL"),
             (0x80, "__GFP_ZERO"), (0x100, "__GFP_NORETRY"), (0x200, "__GFP_RETRY_MAYFAIL"),
             (0x400, "__GFP_NOMEMALLOC"), (0x800, "__GFP_ACCOUNT"))


def _gfp_name(gfp: int) -> str:
    """A shim gfp mask in the kernel's names: GFP_KERNEL or GFP_NOFS plus what else is set."""
    base, rest = "", gfp
    for name, mask in (("GFP_KERNEL", 0x0f), ("GFP_NOFS", 0x07)):
        if gfp & mask == mask:
            base, rest = name, gfp & ~mask
            break
    names = ([base] if base else []) + [n for b, n in _GFP_BITS if rest & b]
    return " | ".join(names) or "0"


def _site(file, line) -> str:
    return f"{file}:{line}" if file else "?"


def render_report(r: dict) -> dict:
    """Name a raw report record (from the shim runtime) and add its ``message`` in the kernel's words.

    Keys: ``kind`` (e.g. ``"might_sleep"``, ``"inconsistent_lock_state"``, ``"double_unlock"``,
    ``"warning"``), ``operation`` (``"write_start"``, ``"write_end"``, ...), ``file``, ``line``,
    ``lock``, ``other_file``, ``other_line``, ``hardirq``, ``irqs_disabled``, ``locks_held``,
    ``rcu_depth``, ``count`` (identical reports merged) and ``message``.
    """
    kind = _KINDS[r["kind"]]
    op = _OPS[r.pop("op")]
    detail = r.pop("detail")
    has_wake = "inflight" in r          # records from the runtime carry them (ABI 2 and later)
    wake = {k: r.pop(k, 0) for k in ("inflight", "ends_during", "others_running", "rcu_queued")}
    held = f"; {r['lock']} held since {_site(r['other_file'], r['other_line'])}" if r["lock"] else ""
    ec = r.get("end_context")
    fields = dict(site=_site(r["file"], r["line"]), lock=r["lock"], op=op, other_lock=r.get("other_lock"),
                  ctx=f" [write_end in {_CONTEXT_WORDS[ec]}]" if ec else "", irq=None, irqword=None, gfp=None,
                  other=_site(r["other_file"], r["other_line"]), held=held,
                  in_atomic=int(r["locks_held"] > 0 or r["hardirq"] or r["rcu_depth"] > 0),
                  irqs=int(r["irqs_disabled"]), hardirq=int(r["hardirq"]), rcu_depth=r["rcu_depth"],
                  sleeper=_SLEEPERS.get(detail), first=None, second=None, what=None, wake="",
                  lockkind="rwlock" if detail == 1 else "spinlock", cpu_op=None,
                  recursion="BUG: rwlock recursion" if detail == 1 else "WARNING: possible recursive locking detected",
                  tail="")
    if kind == "hung_task" and has_wake:
        r["wake"] = wake
        fields["wake"] = "; " + _wake_text(wake)
    if kind == "inconsistent_lock_state":
        fields["first"], fields["second"] = _USAGE[detail]
    elif kind == "circular_locking" and detail == 1:
        kind = "recursive_locking"
        fields["recursion"] = "WARNING: possible recursive locking detected"
        fields["tail"] = f"while holding {r.get('other_lock')} of the same class (taken at {fields['other']})"
    elif kind == "recursive_locking":
        fields["tail"] = "by the thread that already holds it"
    elif kind == "irq_lock_order":
        fields["irq"], fields["irqword"] = ("SOFTIRQ", "soft-irq") if detail & 1 else ("HARDIRQ", "hard-irq")
        if detail & 2:
            kind = "irq_lock_inversion"
    elif kind == "gfp_io_on_submission":
        fields["gfp"] = _gfp_name(detail)
    elif kind == "lock_held_at_return":
        fields["what"] = _AT_RETURN[detail]
        fields["held"] = f" ({r['lock']} taken at {fields['site']})" if r["lock"] else ""
    elif kind == "lockup":     # detail 0 a spinlock, 1 an rwlock, 2 a sequence count's reader
        fields["lockup"] = (f"watchdog: BUG: soft lockup: a reader of {r['lock']} spun at {fields['site']} past "
                            "the hung bound (the count stayed odd)" if detail == 2 else
                            f"BUG: {fields['lockkind']} lockup suspected: {r['lock']} not acquired at "
                            f"{fields['site']} within the hung bound")
    elif kind == "bad_free":
        fields["what"] = "an object already freed" if detail else "a pointer the allocator never returned"
    elif kind == "preemptible_cpu_access":
        # the runtime hands the operation in `lock` (no lock is involved): smp_processor_id, or __this_cpu_'s op
        fields["cpu_op"] = "smp_processor_id" if detail == 0 else f"__this_cpu_{r['lock']}"
    message = _TEXT[kind].format(**fields)
    if kind == "might_sleep" and detail == _SCHEDULE_SLEEPER:     # schedule()'s own check, not might_sleep's
        message = "BUG: scheduling while atomic" + message[len("BUG: sleeping function called from invalid context"):]
    r.update(kind=kind, operation=op, message=message)
    return r
