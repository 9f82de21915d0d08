"""Patch-level exploration (issue 26): every interleaving of a patch's own steps, reduced by DPOR, with
data races reported as KCSAN reports them.

>>> res = explore_patch("examples/patches/v3_proposal.c", "2w1r")
>>> res["executions"], res["complete"], res["failures"]

The patch is compiled with GCC's ``-fsanitize=thread`` instrumentation (compile only) and linked with
the shim runtime and ``csrc/kpatch/kpatch_dpor.c``, which defines the ``__tsan_*`` hooks itself (no
libtsan): every shim lock, unlock, trylock (spinlocks, rwlocks, mutexes), sequence count begin and write,
allocation, free, wait, wake, RCU call, barrier, atomic and every plain load and store of memory outside
the thread's own stack is a scheduling point (a blocking lock is granted only once it can be taken, a
read_seqcount_begin only at an even count). Patch threads are real threads; only the one the explorer
picks runs between two points. The search is stateless (a fresh instance of the patch per execution,
replayed along a prefix of choices) and one of ``"exhaustive"`` (every interleaving), ``"sleep"``
(sleep sets only), ``"dpor"`` (source-DPOR with sleep sets, the default) or ``"optimal"`` (optimal DPOR:
wake-up trees, no sleep-set blocked execution; incomplete where a branch cannot be followed). docs/check-patch.md
("Patch-level exploration") is the guide.

Each complete execution is judged by an oracle: a read (``read_bypass``) that returns "not active"
while an overlapping write's start had returned before the read began and its end had not begun when
the read returned is a missed bypass; a kernel report (a WARN_ON: a count decremented past zero, a
write ended on a page that is gone); a range still active once every write has ended (a count
leaked); memory the patch did not give back after its exit; a deadlock. Independently, a data race
(two accesses to one location from different threads, at least one a write, not both marked,
unordered by happens-before) is reported with both accesses' ``file:line``.
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from ..._csrc import csrc_path
from .load import (_INCLUDE, _RUNTIME, CFLAGS, LDFLAGS, _cache_dir, _compiler, _deps_unchanged,
                   _digest, _read_deps, _remove_stale_builds, _run)
from .load import _KINDS as _LOAD_KINDS

__all__ = ["explore_patch", "compile_interleave", "SCENARIOS", "MODES", "render_failure"]

_DPOR_RT = csrc_path("kpatch/kpatch_dpor.c")

CHUNK = 32 << 20        #: the shipped patches' chunk (BYPASS_CHUNK_SHIFT 16 sectors); scenarios are placed by it
WRITE = 4096            #: bytes per explored write and read

#: name -> threads, each a list of (operation, offset) with "start"/"end" pairs for a writer and "check"
#: for a reader. "2w1r-page": two writers on two chunks of one counter page, both finding it absent (the
#: page's first allocation contended), the reader on the second writer's chunk.
SCENARIOS: dict[str, tuple[tuple[tuple[str, int], ...], ...]] = {
    "1w1r": ((("start", 0), ("end", 0)), (("check", 0),)),
    "2w1r": ((("start", 0), ("end", 0)), (("start", 0), ("end", 0)), (("check", 0),)),
    "1w2r": ((("start", 0), ("end", 0)), (("check", 0),), (("check", 0),)),
    "2w1r-page": ((("start", 0), ("end", 0)), (("start", CHUNK), ("end", CHUNK)), (("check", CHUNK),)),
    "2w": ((("start", 0), ("end", 0)), (("start", 0), ("end", 0))),
}
MODES = {"exhaustive": 0, "sleep": 1, "dpor": 2, "optimal": 3}
_OPS = {"start": 1, "end": 2, "check": 3}
_OP_NAMES = {0: None, 1: "write_start", 2: "write_end", 3: "read_bypass"}
_KINDS = {1: "access", 2: "spin_lock", 3: "spin_trylock", 4: "spin_unlock", 5: "alloc", 6: "kfree", 7: "wait",
          8: "wake_up", 9: "rcu_read_lock", 10: "rcu_read_unlock", 11: "synchronize_rcu", 12: "barrier",
          13: "marker", 14: "wait_enter", 15: "wait_leave", 16: "read_lock", 17: "read_trylock", 18: "read_unlock",
          19: "read_seqcount_begin", 20: "write_seqcount_end", 21: "mutex_lock", 22: "mutex_trylock",
          23: "mutex_unlock"}
_ROLES = {1: "start returned", 2: "end begins", 3: "read begins", 4: "read returned"}
_ERRORS = {1: "an execution exceeded the explorer's event bound (a loop that spins on shared memory?)",
           2: "the patch did not behave the same when replayed along the same schedule (nondeterministic)",
           3: "the patch instance could not be created",
           4: "an execution did not end within 60 s (the patch blocked outside the explorer's points)",
           5: "the wake-up trees outgrew their pool (optimal DPOR: 2**20 nodes)"}
#: the report kinds of kpatch_abi.h (one table: load._KINDS; load.render_report renders them in full)
_REPORT_KINDS = _LOAD_KINDS

_MAX_THREADS = 6
_MAX_OPS = 4


class _Config(ctypes.Structure):
    _fields_ = [("mode", ctypes.c_int), ("nthreads", ctypes.c_int), ("fault_at", ctypes.c_int),
                ("stop_on_failure", ctypes.c_int), ("count_classes", ctypes.c_int),
                ("max_executions", ctypes.c_uint64), ("device_size", ctypes.c_uint64),
                ("nops", ctypes.c_int * _MAX_THREADS), ("op", (ctypes.c_int * _MAX_OPS) * _MAX_THREADS),
                ("off", (ctypes.c_uint64 * _MAX_OPS) * _MAX_THREADS),
                ("len", (ctypes.c_uint64 * _MAX_OPS) * _MAX_THREADS), ("fail_mode", ctypes.c_int),
                ("end_bio_intact", ctypes.c_int)]


class _Result(ctypes.Structure):
    _fields_ = [("executions", ctypes.c_uint64), ("blocked", ctypes.c_uint64), ("classes", ctypes.c_uint64),
                ("events", ctypes.c_uint64), ("max_allocations", ctypes.c_uint64),
                ("faults_injected", ctypes.c_uint64), ("complete", ctypes.c_int), ("error", ctypes.c_int),
                ("json", ctypes.c_void_p), ("diverged", ctypes.c_uint64), ("wut_peak", ctypes.c_uint64)]


#: Flags of the instrumented patch object (the runtime and the explorer are compiled with CFLAGS alone).
TSAN_FLAGS = ("-fsanitize=thread", "-Wno-tsan")


def compile_interleave(path: str | os.PathLike, *, include_dirs: tuple[str | os.PathLike, ...] = ()) -> Path:
    """Build (or reuse from the cache, while every file the compiler read is unchanged) the patch's
    explorer module: the patch instrumented, the shim runtime and the explorer plain. Returns its path.

    :raises pybcache.PatchCompileError: the compiler's first lines.
    """
    src = Path(path).resolve()
    try:
        src.read_bytes()
    except OSError as e:
        raise ValueError(f"path: cannot read the patch {str(path)!r}: {e.strerror}") from None
    incs = [os.path.abspath(d) for d in include_dirs]
    cc = _compiler()
    h = hashlib.sha256()
    for part in ("pybcache-interleave-2", str(src), json.dumps(cc), json.dumps(CFLAGS + TSAN_FLAGS + LDFLAGS),
                 json.dumps(incs), str(_INCLUDE), str(_RUNTIME), str(_DPOR_RT)):
        h.update(len(part).to_bytes(8, "little") + part.encode())
    key = h.hexdigest()[:24]
    cache = _cache_dir() / "kpatch"
    manifest = cache / f"{src.stem}-interleave-{key}.json"
    hit = _deps_unchanged(manifest)
    if hit is not None:
        return hit[0]
    cache.mkdir(parents=True, exist_ok=True)
    _remove_stale_builds(cache)
    with tempfile.TemporaryDirectory(dir=cache, prefix=".build-") as tmp:
        t = Path(tmp)
        objs, deps_files = [], []
        for name, source, extra, inc in (("rt", _RUNTIME, (), ("-iquote", str(_INCLUDE))),
                                         ("dpor", _DPOR_RT, (), ("-iquote", str(_INCLUDE))),
                                         ("patch", src, TSAN_FLAGS,
                                          ("-I", str(_INCLUDE), *(w for d in incs for w in ("-I", d))))):
            o, d = t / f"{name}.o", t / f"{name}.d"
            _run([*cc, *CFLAGS, *extra, "-MD", "-MF", str(d), *inc, "-c", str(source), "-o", str(o)],
                 str(path) if name == "patch" else f"the explorer runtime ({source.name})")
            objs.append(str(o))
            deps_files.append(d)
        so = t / "patch.so"
        # -Bsymbolic: the module's own __tsan_* hooks even when a ThreadSanitizer runtime is preloaded
        _run([*cc, *CFLAGS, *LDFLAGS, "-Wl,-Bsymbolic", *objs, "-ldl", "-o", str(so)], f"{path} (link)")
        read: list[str] = []
        for d in deps_files:
            read += _read_deps(d.read_text())
        deps = {f: _digest(f) for f in dict.fromkeys([str(src), str(_RUNTIME), str(_DPOR_RT), *read])}
        content = hashlib.sha256(json.dumps(sorted(deps.items())).encode()).hexdigest()[:16]
        out = cache / f"{src.stem}-interleave-{key}-{content}.so"
        os.replace(so, out)
        record = t / "manifest.json"
        record.write_text(json.dumps({"library": out.name, "deps": deps, "warnings": ""}))
        os.replace(record, manifest)
    return out


def _load(so: Path) -> ctypes.CDLL:
    """A private copy of the module, loaded for one exploration: a patch's statics (a WARN_ON_ONCE's flag)
    start fresh for each, so that an exploration's verdict does not depend on the ones before it in the
    process. The copy is unlinked at once (the mapping stays); modules are never unloaded."""
    fd, tmp = tempfile.mkstemp(prefix=".interleave-", suffix=".so", dir=so.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(so.read_bytes())
        # RTLD_LOCAL: each copy's __tsan_* hooks and shim runtime stay its own
        lib = ctypes.CDLL(tmp, mode=os.RTLD_NOW | os.RTLD_LOCAL)
    finally:
        os.unlink(tmp)
    lib.pyb_dpor_explore.argtypes = [ctypes.POINTER(_Config), ctypes.POINTER(_Result)]
    lib.pyb_dpor_explore.restype = ctypes.c_int
    lib.pyb_dpor_free.argtypes = [ctypes.c_void_p]
    lib.pyb_dpor_free.restype = None
    return lib


def _symbolise(so: Path, pcs: set[int]) -> dict[int, tuple[str, str]]:
    """pc (offset in the module) -> (function, file:line), by addr2line on the module (inlined frames: the
    innermost function and line, then the function it was inlined into)."""
    pcs = {p for p in pcs if p}
    if not pcs:
        return {}
    order = sorted(pcs)
    # a return address points past the call: look up the call itself (pc - 1). With -i an address may
    # print several (function, file:line) frames (inlining); a lookup of 0x0 after each separates them.
    res: dict[int, tuple[str, str]] = {}
    try:
        out = subprocess.run(["addr2line", "-f", "-i", "-e", str(so)],
                             input="".join(f"{hex(p - 1)}\n0x0\n" for p in order), capture_output=True, text=True,
                             timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {p: ("?", "?") for p in order}
    blocks: list[list[tuple[str, str]]] = []
    lines = out.splitlines()
    cur: list[tuple[str, str]] = []
    i = 0
    while i + 1 < len(lines):
        fn, loc = lines[i], lines[i + 1]
        i += 2
        if fn == "??" and loc.startswith("??:"):
            blocks.append(cur)
            cur = []
            continue
        loc = loc.split(" (discriminator")[0]
        cur.append((fn, f"{os.path.basename(loc.rsplit(':', 1)[0])}:{loc.rsplit(':', 1)[1]}" if ":" in loc else loc))
    for p, frames in zip(order, blocks):
        if not frames:
            res[p] = ("?", "?")
            continue
        # the innermost file:line; the outermost function (the patch's operation the code was inlined into)
        res[p] = (frames[-1][0], frames[0][1])
    return res


def _thread_names(scenario: tuple) -> list[str]:
    names, w, r = [], 0, 0
    for ops in scenario:
        if ops[0][0] == "check":
            r += 1
            names.append(f"R{r}")
        else:
            w += 1
            names.append(f"W{w}")
    return names


def _render_events(events: list, names: list[str], sym: dict) -> list[str]:
    """The execution as steps: one line per run of one thread's events."""
    steps: list[str] = []
    run: list[str] = []
    cur = -1
    for tid, kind, op, flags, role, pc, file, line, arg in events:
        if kind == 13:
            what = _ROLES.get(role, "marker") + (f" ({'active' if arg else 'not active'})" if role == 4 else "")
        elif kind == 1:
            fn, loc = sym.get(pc, ("?", "?"))
            what = f"{'atomic ' if flags & 2 else ''}{'write' if flags & 1 else 'read'} {loc}"
        else:
            where = f" {os.path.basename(file)}:{line}" if file else ""
            name = _KINDS.get(kind, "?")
            if kind in (16, 17, 18) and flags & 1:
                name = name.replace("read_", "write_")             # the rwlock's writer side
            elif kind == 20 and arg:
                name = "write_seqcount_begin"
            what = f"{name}{where}"
            if kind == 5 and arg:
                what += " FAILS (injected)"
        if tid != cur:
            if run:
                steps.append(f"{names[cur]}: " + ", ".join(_squeeze(run)))
            run, cur = [], tid
        run.append(what)
    if run:
        steps.append(f"{names[cur]}: " + ", ".join(_squeeze(run)))
    return steps


def _squeeze(items: list[str]) -> list[str]:
    out: list[str] = []
    for x in items:
        if out and out[-1].split(" x")[0] == x:
            base, _, n = out[-1].partition(" x")
            out[-1] = f"{base} x{int(n or 1) + 1}"
        else:
            out.append(x)
    return out


def render_failure(f: dict) -> str:
    """One line for a failure of :func:`explore_patch`."""
    return f["message"]


def _int(v: Any, name: str, lo: int, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{name} must be an int in [{lo}, {hi}], got {type(v).__name__}")
    if not lo <= v <= hi:
        raise ValueError(f"{name} must be in [{lo}, {hi}], got {v}")
    return v


def explore_patch(patch: Any, scenario: str = "2w1r", *, mode: str = "dpor", fault_at: int = 0,
                  max_executions: int = 200_000, count_classes: bool = False, stop_on_failure: bool = True,
                  include_dirs: tuple[str | os.PathLike, ...] = (),
                  library: str | os.PathLike | None = None, fail_alloc: str = "all",
                  end_bio: str = "consumed") -> dict[str, Any]:
    """Explore the interleavings of ``scenario``'s threads at the patch's own scheduling points.

    :param patch: the patch's ``.c`` path, or a :class:`pybcache.KernelPatch` (its path and include folders).
    :param scenario: one of :data:`SCENARIOS` (default ``"2w1r"``).
    :param mode: ``"dpor"`` (default: source-DPOR with sleep sets), ``"optimal"`` (optimal DPOR: wake-up
        trees with sleep sets), ``"sleep"`` (sleep sets only) or ``"exhaustive"`` (every interleaving).
    :param fault_at: if K > 0, the K-th allocation of every execution fails (init excluded). In [0, 64].
        Only the allocations ``fail_alloc`` lets fail are counted.
    :param fail_alloc: ``"all"`` (default: every allocation but ``__GFP_NOFAIL``, as the other Python APIs) or
        ``"can-fail"`` (only those the kernel can fail; check-patch's default, docs/check-patch.md).
    :param end_bio: ``"consumed"`` (default: ``write_end`` gets the bio as bcache's
        ``cached_dev_write_complete`` sees it, its iterator at the end) or ``"intact"`` (untouched), as check-patch's
        ``--end-bio``.
    :param max_executions: stop after this many executions (complete or cut), in [1, 10**8]; ``complete``
        is then False. Default 200,000.
    :param count_classes: count the distinct Mazurkiewicz traces (equivalence classes) of the complete
        executions. Default False.
    :param library: the module :func:`compile_interleave` built for ``patch`` (default: build or reuse it now).
    :param stop_on_failure: stop at the first execution the oracle fails (a data race alone does not
        stop the search). Default True.
    :returns: ``executions`` (complete ones), ``blocked`` (cut by sleep sets), ``classes``, ``events``,
        ``max_allocations``, ``faults_injected``, ``complete``, ``failures`` (each with ``kind``,
        ``message`` and ``steps``: the counterexample at the patch's own steps), ``scenario``, ``mode``;
        ``diverged`` (``"optimal"``: wake-up tree branches that could not be followed; then ``complete`` is
        False) and ``wut_peak`` (``"optimal"``: the most wake-up tree nodes held at once; 0 otherwise).
    """
    if not isinstance(scenario, str) or scenario not in SCENARIOS:
        raise ValueError(f"scenario must be one of {tuple(SCENARIOS)}, got {scenario!r}")
    if not isinstance(mode, str) or mode not in MODES:
        raise ValueError(f"mode must be one of {tuple(MODES)}, got {mode!r}")
    fault_at = _int(fault_at, "fault_at", 0, 64)
    from ._kpatch import FAIL_ALLOC_MODES
    if not isinstance(fail_alloc, str) or fail_alloc not in FAIL_ALLOC_MODES:
        raise ValueError(f"fail_alloc must be one of {FAIL_ALLOC_MODES}, got {fail_alloc!r}")
    max_executions = _int(max_executions, "max_executions", 1, 10**8)
    if not isinstance(end_bio, str) or end_bio not in ("consumed", "intact"):
        raise ValueError(f"end_bio must be 'consumed' or 'intact', got {end_bio!r}")
    if hasattr(patch, "path") and hasattr(patch, "library"):
        path, include_dirs = patch.path, tuple(getattr(patch, "include_dirs", ()))
    elif isinstance(patch, (str, os.PathLike)):
        path = os.fspath(patch)
    else:
        raise TypeError(f"patch must be a path or a KernelPatch, got {type(patch).__name__}")
    so = Path(library) if library is not None else compile_interleave(path, include_dirs=include_dirs)
    lib = _load(so)
    threads = SCENARIOS[scenario]
    cfg = _Config()
    cfg.mode = MODES[mode]
    cfg.nthreads = len(threads)
    cfg.fault_at = fault_at
    cfg.fail_mode = FAIL_ALLOC_MODES.index(fail_alloc)
    cfg.end_bio_intact = int(end_bio == "intact")
    cfg.stop_on_failure = int(bool(stop_on_failure))
    cfg.count_classes = int(bool(count_classes))
    cfg.max_executions = max_executions
    cfg.device_size = 4 * CHUNK
    for t, ops in enumerate(threads):
        cfg.nops[t] = len(ops)
        for k, (op, off) in enumerate(ops):
            cfg.op[t][k] = _OPS[op]
            cfg.off[t][k] = off
            cfg.len[t][k] = WRITE
    res = _Result()
    if lib.pyb_dpor_explore(ctypes.byref(cfg), ctypes.byref(res)) != 0:
        raise ValueError(f"scenario {scenario!r}: the explorer refused the configuration")
    raw: dict[str, Any] = {"failures": []}
    if res.json:
        try:
            raw = json.loads(ctypes.string_at(res.json).decode())
        finally:
            lib.pyb_dpor_free(res.json)
    names = _thread_names(threads)
    pcs: set[int] = set()
    for f in raw["failures"]:
        pcs.update(e[5] for e in f.get("events", []))
        for side in ("a", "b"):
            if side in f:
                pcs.add(f[side]["pc"])
    sym = _symbolise(so, pcs)
    failures = [_failure(f, names, sym) for f in raw["failures"]]
    return {"scenario": scenario, "mode": mode, "fault_at": fault_at, "executions": res.executions,
            "blocked": res.blocked, "classes": res.classes if count_classes else None, "events": res.events,
            "max_allocations": res.max_allocations, "faults_injected": res.faults_injected,
            "complete": bool(res.complete), "error": _ERRORS.get(res.error) if res.error else None,
            "diverged": res.diverged, "wut_peak": res.wut_peak,
            "failures": failures}


def _failure(f: dict, names: list[str], sym: dict) -> dict:
    steps = _render_events(f.get("events", []), names, sym)
    if f["kind"] == "data race":
        a, b = f["a"], f["b"]
        fa, la = sym.get(a["pc"], ("?", "?"))
        fb, lb = sym.get(b["pc"], ("?", "?"))

        def desc(x: dict, loc: str) -> str:
            return (f"{'marked ' if x['marked'] else ''}{'write' if x['write'] else 'read'} to {x['size']} bytes at "
                    f"{loc} by {names[x['thread']]} ({_OP_NAMES.get(x['op']) or 'between operations'})")
        msg = (f"BUG: KCSAN: data-race in {fa} / {fb}: {desc(a, la)} and {desc(b, lb)}, unordered by "
               f"happens-before (found in execution {f['execution'] + 1:,})")
        return {"kind": "data race", "message": msg, "functions": [fa, fb], "sites": [la, lb], "steps": steps}
    parts = []
    kinds = []
    for x in f["failures"]:
        k = x["kind"]
        if k == "missed bypass":
            parts.append(f"missed bypass: {names[x['reader']]}'s read_bypass returned not active while "
                         f"{names[x['writer']]}'s write was in flight (its start had returned, its end had not begun)")
        elif k == "report":
            kind = _REPORT_KINDS.get(x["report"], "report")
            where = f"{os.path.basename(x['file'])}:{x['line']}" if x["file"] else "?"
            what = "WARNING: at" if kind == "warning" else f"{kind} at"
            parts.append(f"{what} {where} ({_OP_NAMES.get({3: 1, 4: 2, 5: 3}.get(x['op'], 0)) or 'op'})")
            k = kind
        elif k == "count leaked":
            parts.append("count leaked: a written range still reads active after every write ended")
        elif k == "memory not back":
            parts.append(f"memory not back: {x['bytes']:,} bytes in {x['allocations']} allocations after exit")
        elif k == "deadlock":
            parts.append("deadlock: no thread can run and not every thread has finished")
        kinds.append(k)
    msg = "; ".join(parts) + f" (execution {f['execution'] + 1:,})"
    return {"kind": kinds[0] if kinds else "oracle", "kinds": kinds, "message": msg, "steps": steps}


def lost_count_failure(failures: list[dict]) -> bool:
    """Does one of ``failures`` show a lost count (a missed bypass, a count decremented past zero, a
    count leaked)?"""
    return any(k in ("missed bypass", "warning", "count leaked") for f in failures for k in f.get("kinds", []))


__all__.append("lost_count_failure")
