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
FLAVOURS = {"plain": (), "tsan": ("-fsanitize=thread",)}
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

    :param flavour: ``"plain"`` or ``"tsan"`` (ThreadSanitizer-instrumented, for a child process
        that preloads the TSan runtime). Default ``"plain"``.
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
    """

    def __init__(self, path: str | os.PathLike, include_dirs: tuple[str | os.PathLike, ...] = ()):
        library, self.warnings = compile_patch(path, include_dirs=include_dirs)
        self.include_dirs = tuple(os.path.abspath(d) for d in include_dirs)
        self._module = PatchModule(library)
        self.path = str(Path(path).resolve())
        self.library = str(library)
        self.name = self._module.name

    def __repr__(self) -> str:
        return f"KernelPatch(name={self.name!r}, path={self.path!r})"

    def tracker(self, device_size: int, *, fault=None, hung_timeout: float = 10.0) -> PatchTracker:
        """A new instance of the patch as a tracker of a ``device_size``-byte backing device.

        The patch's ``init`` runs now, in process context and without fault injection.

        :param device_size: bytes, in [1, 2**62]; the patch sees ``DIV_ROUND_UP(device_size, 512)``
            sectors.
        :param fault: a :class:`pybcache.FaultInjection` applied to every allocation of the patch's
            operations (never to ``__GFP_NOFAIL`` ones, never during init and exit), shared with the
            caller (its ``injected`` counts these failures). Default None.
        :param hung_timeout: seconds any wait or spinlock acquisition may last before the operation
            is abandoned as hung (TimeoutError; the tracker is then broken). Default 10.0.
        """
        return PatchTracker(self._module, self, device_size, fault, hung_timeout)


def load_patch(path: str | os.PathLike, *, include_dirs: tuple[str | os.PathLike, ...] = ()) -> KernelPatch:
    """Compile (cached while every file the compiler read is unchanged) and load the patch file at ``path``.

    :param include_dirs: folders its ``#include`` may find headers in (``-I``). Default none.
    :raises PatchCompileError: a ValueError carrying the compiler's first lines.
    """
    return KernelPatch(path, tuple(include_dirs))


# -- reports in the kernel's words -------------------------------------------------------------------

_KINDS = {1: "might_sleep", 2: "inconsistent_lock_state", 3: "unlock_not_held", 4: "double_unlock",
          5: "spin_recursion", 6: "lockup", 7: "hung_task", 8: "warning", 9: "lock_held_at_return",
          10: "suspicious_rcu_usage", 11: "bad_free", 12: "lock_not_held", 13: "recursive_locking",
          14: "bad_unlock_balance", 15: "mutex_wrong_owner", 16: "preemptible_cpu_access"}
_OPS = {0: None, 1: "init", 2: "exit", 3: "write_start", 4: "write_end", 5: "read_bypass", 6: "rcu_callback"}
_SLEEPERS = {0: "a sleeping allocation", 1: "wait_event", 2: "synchronize_rcu", 3: "might_sleep", 4: "mutex_lock",
             5: "mempool_alloc", 6: "wait_event_timeout", 7: "schedule_timeout"}
#: the sleeper whose kernel report is the scheduler's, not might_sleep's
_SCHEDULE_SLEEPER = 7
_USAGE = {0: ("IN-HARDIRQ-W", "HARDIRQ-ON-W"), 1: ("HARDIRQ-ON-W", "IN-HARDIRQ-W"),
          2: ("IN-HARDIRQ-R", "HARDIRQ-ON-W"), 3: ("HARDIRQ-ON-W", "IN-HARDIRQ-R"),
          4: ("IN-HARDIRQ-W", "HARDIRQ-ON-R"), 5: ("HARDIRQ-ON-R", "IN-HARDIRQ-W")}
_AT_RETURN = {0: "a spinlock held", 1: "interrupts disabled", 2: "an RCU read-side section open", 3: "a mutex held",
              4: "preemption disabled", 5: "bottom halves disabled", 6: "an rwlock held"}

# One template per kind: the kernel's headline first (what a kernel developer searches for), then
# what the lab adds. Fields come from the record; a missing field raises.
_TEXT = {
    "might_sleep": "BUG: sleeping function called from invalid context at {site}: {sleeper} with "
                   "in_atomic(): {in_atomic}, irqs_disabled(): {irqs}, in hard-irq: {hardirq}, "
                   "rcu_read_lock depth {rcu_depth}{held}",
    "inconsistent_lock_state": "WARNING: inconsistent lock state: inconsistent {{{first}}} -> {{{second}}} "
                               "usage. {lock} taken at {site} ({second}); {first} first at {other}",
    "unlock_not_held": "BUG: {lockkind} wrong owner: {lock} released at {site} by a thread that does not hold it",
    "double_unlock": "BUG: {lockkind} already unlocked: {lock} released at {site} while nobody held it",
    "spin_recursion": "BUG: spinlock recursion: {lock} taken at {site} by the thread that already holds it",
    "lockup": "{lockup}",
    "hung_task": "INFO: task blocked for more than the hung bound in {sleeper} at {site}",
    "warning": "WARNING: at {site} ({op})",
    "lock_held_at_return": "BUG: {op} returned with {what}{held}",
    "suspicious_rcu_usage": "WARNING: suspicious RCU usage at {site}: rcu_dereference outside rcu_read_lock",
    "bad_free": "BUG: kfree at {site} of {what}",
    "lock_not_held": "WARNING: lock not held at {site}: {lock}",
    "recursive_locking": "{recursion}: {lock} taken at {site} by the thread that already holds it",
    "bad_unlock_balance": "WARNING: bad unlock balance detected! {lock} released at {site} while nobody held it",
    "mutex_wrong_owner": "WARNING: DEBUG_LOCKS_WARN_ON(__owner_task(owner) != current): {lock} released at {site} "
                         "by a thread that does not hold it",
    "preemptible_cpu_access": "BUG: using {cpu_op}() in preemptible [00000000] code at {site}",
}


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
    held = f"; {r['lock']} held since {_site(r['other_file'], r['other_line'])}" if r["lock"] else ""
    fields = dict(site=_site(r["file"], r["line"]), lock=r["lock"], op=op,
                  other=_site(r["other_file"], r["other_line"]), held=held,
                  in_atomic=int(r["locks_held"] > 0 or r["hardirq"] or r["rcu_depth"] > 0),
                  irqs=int(r["irqs_disabled"]), hardirq=int(r["hardirq"]), rcu_depth=r["rcu_depth"],
                  sleeper=_SLEEPERS.get(detail), first=None, second=None, what=None,
                  lockkind="rwlock" if detail == 1 else "spinlock", cpu_op=None,
                  recursion="BUG: rwlock recursion" if detail == 1 else "WARNING: possible recursive locking detected")
    if kind == "inconsistent_lock_state":
        fields["first"], fields["second"] = _USAGE[detail]
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
