"""Building Linux 6.12's User-Mode Linux kernel with the bcache driver, patched or not.

The cache (:func:`pybcache.kernel._paths.cache_dir`) holds:

* ``src/<srckey>/linux-source-6.12``: Debian's tarball unpacked once, never written again (the pristine
  tree); ``srckey`` names the tarball (its size and mtime) and ``src/<srckey>/version`` its kernel version;
* ``work-<cfgkey>/``: one work source tree per configuration, hard links into the pristine tree except for
  the files a patch touches, which are separate files; ``.pybcache-patched.json`` lists them;
* ``obj-<cfgkey>/``: the out-of-tree object tree of that configuration (``make ARCH=um O=...``);
* ``kernels/<key>/linux``: each kernel built, keyed by source, configuration and the patches' contents, with
  ``build.json`` (what it is) and ``config`` (its .config).

A build with other patches rewrites, in the work tree, only the files whose patched content changes (a new
file, so a new mtime: the hard link to the pristine tree is broken, never written through), and every other
file keeps its mtime: make recompiles what the patch touches and relinks. A file a previous build patched and
this one does not is rewritten with its pristine content and a new mtime, so it is recompiled too.
"""
from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence

from ._paths import cache_dir, host_env, kernel_file, source_tarball

__all__ = ["KernelBuildError", "BuildResult", "build_kernel", "fragment_options", "fragments",
           "patch_paths", "check_config", "merge_config", "first_errors", "INSTALL_HINT"]

INSTALL_HINT = "apt-get install linux-source-6.12"
SOURCE_DIR_NAME = "linux-source-6.12"
# wall bounds of each step (seconds): a step past its bound is killed with its process group
UNTAR_TIMEOUT = 900
COPY_TIMEOUT = 900
CONFIG_TIMEOUT = 600
PATCH_TIMEOUT = 120
MAKE_TIMEOUT = 3 * 3600
LOCK_TIMEOUT = 3 * 3600

Progress = Callable[[str, int, Optional[int]], None]   # (step text, steps done, total or None)


class KernelBuildError(Exception):
    """The kernel could not be built: the message says why (the tool's own first lines included)."""


@dataclasses.dataclass
class BuildResult:
    kernel: Path               # the UML binary, kernels/<key>/linux
    key: str
    version: str
    debug: bool
    patches: list[dict]        # [{"path", "sha256"}]
    built: bool                # False: an identical kernel was in the cache already
    seconds: float
    config: Path
    log: Optional[Path]

    def to_json(self) -> dict:
        return {"kernel": str(self.kernel), "key": self.key, "version": self.version, "debug": self.debug,
                "patches": self.patches, "built": self.built, "seconds": round(self.seconds, 1),
                "config": str(self.config), "log": str(self.log) if self.log else None}


# ---------------------------------------------------------------------------------------------- helpers
def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def _run(cmd: Sequence[str], *, cwd: Optional[Path] = None, timeout: float, what: str,
         env: Optional[dict] = None) -> subprocess.CompletedProcess:
    """Run ``cmd`` to completion within ``timeout`` s (its whole process group killed past it); output
    captured. Raises KernelBuildError when the command cannot start or times out (not on a non-zero exit)."""
    try:
        proc = subprocess.Popen(list(cmd), cwd=cwd, env=env if env is not None else host_env(),
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                errors="replace", start_new_session=True)
    except OSError as exc:
        raise KernelBuildError(f"{what}: cannot run {cmd[0]}: {exc}") from None
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        raise KernelBuildError(f"{what}: no result within {timeout:.0f} s, killed") from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, None)


def _stream(cmd: Sequence[str], *, cwd: Path, timeout: float, log: Path, on_line: Callable[[str], None],
            env: Optional[dict] = None) -> int:
    """Run ``cmd`` with its output appended to ``log`` and each line passed to ``on_line``; the process group
    is killed past ``timeout`` s (KernelBuildError). Returns the exit status."""
    with open(log, "w", encoding="utf-8", errors="replace") as sink:
        try:
            proc = subprocess.Popen(list(cmd), cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, errors="replace",
                                    start_new_session=True)
        except OSError as exc:
            raise KernelBuildError(f"cannot run {cmd[0]}: {exc}") from None

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                sink.write(line)
                with contextlib.suppress(Exception):
                    on_line(line)

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            reader.join(timeout=10)
            raise KernelBuildError(f"{' '.join(cmd[:3])}: no result within {timeout:.0f} s, killed "
                                   f"(log: {log})") from None
        except BaseException:   # Ctrl-C: never leave a make behind
            _kill_group(proc)
            raise
        reader.join(timeout=30)
    return rc


@contextlib.contextmanager
def _locked(cache: Path, timeout: float = LOCK_TIMEOUT) -> Iterator[None]:
    """One build at a time per cache (other processes wait, bounded)."""
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as fh:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise KernelBuildError(f"another build holds {cache / '.lock'} for over {timeout:.0f} s")
                time.sleep(1.0)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


# ------------------------------------------------------------------------------------------------ source
def _source_key(tarball: Path) -> str:
    st = tarball.stat()
    return _sha256(f"{tarball.resolve()}:{st.st_size}:{st.st_mtime_ns}".encode())[:16]


def _read_version(tree: Path) -> str:
    fields = {}
    for line in (tree / "Makefile").read_text(errors="replace").splitlines()[:12]:
        m = re.match(r"^(VERSION|PATCHLEVEL|SUBLEVEL|EXTRAVERSION)\s*=\s*(\S*)", line)
        if m:
            fields[m.group(1)] = m.group(2)
    return f"{fields.get('VERSION', '?')}.{fields.get('PATCHLEVEL', '?')}.{fields.get('SUBLEVEL', '?')}" \
           f"{fields.get('EXTRAVERSION', '')}"


def ensure_source(cache: Path, progress: Progress) -> tuple[str, str, Path]:
    """Unpack the tarball once. Returns (srckey, version, pristine tree)."""
    tarball = source_tarball()
    if not tarball.is_file():
        raise KernelBuildError(f"{tarball} is missing: {INSTALL_HINT}")
    key = _source_key(tarball)
    top = cache / "src" / key
    tree = top / SOURCE_DIR_NAME
    if not (top / "version").is_file():
        progress(f"unpacking {tarball.name}", 0, None)
        (cache / "src").mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=cache / "src"))
        res = _run(["tar", "-xJf", str(tarball), "-C", str(tmp)], timeout=UNTAR_TIMEOUT, what="unpacking the source")
        if res.returncode != 0 or not (tmp / SOURCE_DIR_NAME / "Makefile").is_file():
            shutil.rmtree(tmp, ignore_errors=True)
            raise KernelBuildError(f"unpacking {tarball} failed: {res.stdout.strip()[-2000:]}")
        (tmp / "version").write_text(_read_version(tmp / SOURCE_DIR_NAME) + "\n")
        if top.exists():
            shutil.rmtree(top)
        os.rename(tmp, top)
    return key, (top / "version").read_text().strip(), tree


# ------------------------------------------------------------------------------------------------ config
def fragments(debug: bool) -> list[Path]:
    """The lab's configuration fragments, in merge order."""
    return [kernel_file("base.config")] + ([kernel_file("debug.config")] if debug else [])


_OPT = re.compile(r"^(CONFIG_[A-Za-z0-9_]+)=(.*)$")
_UNSET = re.compile(r"^# (CONFIG_[A-Za-z0-9_]+) is not set$")


def fragment_options(text: str) -> dict[str, Optional[str]]:
    """The options a fragment sets: name -> value (``"y"``, ``"m"``, a string or number as written), or
    None for ``# CONFIG_X is not set``. Other comments and blank lines are ignored."""
    opts: dict[str, Optional[str]] = {}
    for raw in text.splitlines():
        line = raw.strip()
        m = _OPT.match(line)
        if m:
            opts[m.group(1)] = m.group(2)
            continue
        m = _UNSET.match(line)
        if m:
            opts[m.group(1)] = None
    return opts


def merge_config(config: str, options: dict[str, Optional[str]]) -> str:
    """``config`` (a .config's text) with each of ``options`` set as the fragment says (replacing the line
    that set or unset it, else appended): what merge_config.sh -m does, before olddefconfig resolves it."""
    out, seen = [], set()
    for line in config.splitlines():
        m = _OPT.match(line) or _UNSET.match(line)
        if m and m.group(1) in options:
            name = m.group(1)
            if name in seen:
                continue
            seen.add(name)
            value = options[name]
            out.append(f"{name}={value}" if value is not None else f"# {name} is not set")
        else:
            out.append(line)
    for name, value in options.items():
        if name not in seen:
            out.append(f"{name}={value}" if value is not None else f"# {name} is not set")
    return "\n".join(out) + "\n"


def check_config(config: str, options: dict[str, Optional[str]]) -> list[str]:
    """The options of the fragment that the final .config does not have as asked, each as
    ``CONFIG_X=y (got: ...)``: Kconfig drops an option whose dependencies are not met."""
    have = fragment_options(config)
    wrong = []
    for name, want in options.items():
        got = have.get(name)
        if want is None:
            if got not in (None, "n"):
                wrong.append(f"{name} unset (got: {got})")
        elif got != want:
            wrong.append(f"{name}={want} (got: {'not set' if got is None else got})")
    return wrong


def _config_key(srckey: str, frags: Sequence[Path]) -> str:
    return _sha256(("um\0" + srckey + "\0" + "\0".join(f.read_text() for f in frags)).encode())[:16]


def _make_base(work: Path, obj: Path, jobs: int = 1) -> list[str]:
    return ["nice", "-n", "10", "make", "ARCH=um", f"O={obj}", "-C", str(work), f"-j{jobs}"]


def _make_env() -> dict:
    env = host_env(LC_ALL="C", LANG="C")
    for var in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "ARCH", "CROSS_COMPILE", "KBUILD_OUTPUT", "KCONFIG_CONFIG"):
        env.pop(var, None)
    return env


def ensure_config(work: Path, obj: Path, cfgkey: str, frags: Sequence[Path], progress: Progress) -> str:
    """tinyconfig + the fragments + olddefconfig, once per configuration; every option checked."""
    stamp = obj / ".pybcache-config-key"
    config = obj / ".config"
    options: dict[str, Optional[str]] = {}
    for frag in frags:
        options.update(fragment_options(frag.read_text()))
    if not (stamp.is_file() and stamp.read_text().strip() == cfgkey and config.is_file()):
        obj.mkdir(parents=True, exist_ok=True)
        progress("make ARCH=um tinyconfig + the lab's fragments", 0, None)
        res = _run(_make_base(work, obj) + ["tinyconfig"], timeout=CONFIG_TIMEOUT, what="make tinyconfig",
                   env=_make_env())
        if res.returncode != 0:
            raise KernelBuildError(f"make ARCH=um tinyconfig failed:\n{res.stdout.strip()[-3000:]}")
        config.write_text(merge_config(config.read_text(), options))
        res = _run(_make_base(work, obj) + ["olddefconfig"], timeout=CONFIG_TIMEOUT, what="make olddefconfig",
                   env=_make_env())
        if res.returncode != 0:
            raise KernelBuildError(f"make ARCH=um olddefconfig failed:\n{res.stdout.strip()[-3000:]}")
        stamp.write_text(cfgkey + "\n")
    text = config.read_text()
    wrong = check_config(text, options)
    if wrong:
        stamp.unlink(missing_ok=True)
        raise KernelBuildError(f"{len(wrong)} option(s) of {', '.join(f.name for f in frags)} did not end in "
                               f"{config} (unmet dependencies on um?): {'; '.join(wrong)}")
    return text


# ----------------------------------------------------------------------------------------------- patches
_DIFF_PATH = re.compile(r"^(?:---|\+\+\+) (\S+)")


def patch_paths(diff: str) -> list[str]:
    """The files a unified diff touches, relative to the tree's top (``patch -p1``), in order of first
    mention; ``/dev/null`` is skipped. Raises KernelBuildError for a path that leaves the tree."""
    seen: dict[str, None] = {}
    lines = diff.splitlines()
    for i, line in enumerate(lines):
        if not (line.startswith("--- ") or line.startswith("+++ ")):
            continue
        # a file header is a ---/+++ pair (a removed line starting with "-- " inside a hunk is not)
        pair = (line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ ")) or \
               (line.startswith("+++ ") and i > 0 and lines[i - 1].startswith("--- "))
        if not pair:
            continue
        m = _DIFF_PATH.match(line)
        if not m or m.group(1) == "/dev/null":
            continue
        path = m.group(1).split("\t")[0]
        parts = path.split("/", 1)
        if len(parts) < 2 or not parts[1]:
            raise KernelBuildError(f"cannot strip one leading component (patch -p1) from {path!r}")
        rel = parts[1]
        if rel.startswith("/") or ".." in rel.split("/"):
            raise KernelBuildError(f"a patch path leaves the source tree: {path!r}")
        seen.setdefault(rel, None)
    return list(seen)


def _patched_files(pristine: Path, patches: Sequence[tuple[Path, bytes]], extra: Sequence[str],
                   scratch: Path) -> tuple[dict[str, Optional[bytes]], list[str]]:
    """Apply the patches in order to copies of the files they touch (and ``extra``, left pristine) in
    ``scratch``. Returns ({path: content, or None when the file does not exist after the patches}, the
    paths the patches touch)."""
    touched: list[str] = []
    for _, data in patches:
        for p in patch_paths(data.decode("utf-8", errors="replace")):
            if p not in touched:
                touched.append(p)
    union = list(dict.fromkeys(list(touched) + list(extra)))
    for rel in union:
        src = pristine / rel
        if src.is_file():
            dst = scratch / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
    for path, data in patches:
        res = _run(["patch", "-p1", "--batch", "--no-backup-if-mismatch", "-d", str(scratch), "-i", str(path)],
                   timeout=PATCH_TIMEOUT, what=f"patch -p1 < {path}")
        if res.returncode != 0:
            raise KernelBuildError(f"{path} does not apply to linux {_read_version(pristine)} "
                                   f"(patch -p1 says):\n{res.stdout.rstrip()}")
    files: dict[str, Optional[bytes]] = {}
    for rel in union:
        f = scratch / rel
        files[rel] = f.read_bytes() if f.is_file() else None
    return files, touched


def _sync_worktree(pristine: Path, work: Path, patches: Sequence[tuple[Path, bytes]]) -> list[str]:
    """Make ``work`` = pristine + patches, rewriting only the files whose content changes. Returns the
    files rewritten or removed."""
    state_file = work / ".pybcache-patched.json"
    previous: list[str] = []
    if state_file.is_file():
        with contextlib.suppress(ValueError, OSError):
            previous = list(json.loads(state_file.read_text()).get("paths", []))
    with tempfile.TemporaryDirectory(prefix="pybcache-patch-") as tmp:
        files, touched = _patched_files(pristine, patches, previous, Path(tmp))
        # until the work tree is synced, it may differ from the pristine tree in any of these
        state_file.write_text(json.dumps({"paths": sorted(files)}))
        changed = []
        for rel, content in files.items():
            dst = work / rel
            if content is None:
                if dst.exists() or dst.is_symlink():
                    dst.unlink()
                    changed.append(rel)
                continue
            if dst.is_file() and not dst.is_symlink() and dst.read_bytes() == content:
                continue
            dst.parent.mkdir(parents=True, exist_ok=True)
            tmpf = dst.with_name(f".{dst.name}.pybcache-new")
            tmpf.write_bytes(content)
            src = pristine / rel
            if src.is_file():
                os.chmod(tmpf, src.stat().st_mode & 0o777)
            os.replace(tmpf, dst)   # a new inode: the pristine file behind a hard link is never written
            changed.append(rel)
        state_file.write_text(json.dumps({"paths": sorted(touched)}))
    return changed


def _ensure_worktree(pristine: Path, work: Path, progress: Progress) -> None:
    if (work / "Makefile").is_file():
        return
    progress("linking the work tree", 0, None)
    tmp = work.with_name(work.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    res = _run(["cp", "-al", str(pristine), str(tmp)], timeout=COPY_TIMEOUT, what="linking the work tree")
    if res.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise KernelBuildError(f"cp -al {pristine} failed: {res.stdout.strip()[-2000:]}")
    os.rename(tmp, work)


# --------------------------------------------------------------------------------------------------- make
_ERROR = re.compile(r"(error:|Error \d+|undefined reference|fatal error|No rule to make target)")
_STEP = re.compile(r"^  ([A-Z][A-Z0-9_-]{1,8})\s+(\S+)")


def first_errors(log_text: str, *, context: int = 3, limit: int = 25) -> str:
    """The compiler's first error lines (with a little context before each) from a make log."""
    lines = log_text.splitlines()
    picked: list[int] = []
    for i, line in enumerate(lines):
        if _ERROR.search(line):
            for j in range(max(0, i - context), i + 1):
                if j not in picked:
                    picked.append(j)
            if len(picked) >= limit:
                break
    if not picked:
        return "\n".join(lines[-limit:])
    return "\n".join(lines[j] for j in picked[:limit])


def _make(work: Path, obj: Path, jobs: int, progress: Progress) -> Path:
    log = obj / "pybcache-build.log"
    steps_file = obj / ".pybcache-steps"
    full = not (obj / "linux").is_file()
    total: Optional[int] = None
    if full:
        with contextlib.suppress(ValueError, OSError):
            total = int(steps_file.read_text())
    count = [0]

    def on_line(line: str) -> None:
        m = _STEP.match(line)
        if m:
            count[0] += 1
            progress(f"{m.group(1)} {m.group(2)}", count[0], total)

    rc = _stream(_make_base(work, obj, jobs) + ["linux"], cwd=work, timeout=MAKE_TIMEOUT, log=log,
                 on_line=on_line, env=_make_env())
    if rc != 0:
        raise KernelBuildError(f"make ARCH=um failed (exit {rc}; full log: {log}):\n"
                               f"{first_errors(log.read_text(errors='replace'))}")
    if full:
        steps_file.write_text(f"{count[0]}\n")
    if not (obj / "linux").is_file():
        raise KernelBuildError(f"make succeeded but {obj / 'linux'} is missing (log: {log})")
    return log


# ---------------------------------------------------------------------------------------------- the build
def build_kernel(patches: Sequence[os.PathLike | str] = (), *, debug: bool = True, jobs: int = 2,
                 progress: Optional[Progress] = None) -> BuildResult:
    """Build (or find in the cache) the UML kernel with ``patches`` applied in order.

    :raises KernelBuildError: tarball missing, a patch that does not apply, an option that did not end in
        the .config, a compile error (the first error lines in the message).
    """
    report: Progress = progress or (lambda step, done, total: None)
    started = time.monotonic()
    loaded: list[tuple[Path, bytes]] = []
    for p in patches:
        path = Path(p).resolve()
        try:
            loaded.append((path, path.read_bytes()))
        except OSError as exc:
            raise KernelBuildError(f"cannot read patch {p}: {exc.strerror}") from None
        if not patch_paths(loaded[-1][1].decode("utf-8", errors="replace")):
            raise KernelBuildError(f"{p} is not a unified diff (no ---/+++ file headers)")
    if not source_tarball().is_file():
        raise KernelBuildError(f"{source_tarball()} is missing: {INSTALL_HINT}")
    cache = cache_dir()
    frags = fragments(debug)
    srckey = _source_key(source_tarball())
    cfgkey = _config_key(srckey, frags)
    patch_meta = [{"path": str(path), "sha256": _sha256(data)} for path, data in loaded]
    key = _sha256(json.dumps({"src": srckey, "config": cfgkey,
                              "patches": [m["sha256"] for m in patch_meta]}).encode())[:16]
    out = cache / "kernels" / key

    def cached() -> Optional[BuildResult]:
        if not ((out / "linux").is_file() and (out / "build.json").is_file()):
            return None
        version = json.loads((out / "build.json").read_text()).get("version", "?")
        return BuildResult(kernel=out / "linux", key=key, version=version, debug=debug, patches=patch_meta,
                           built=False, seconds=time.monotonic() - started, config=out / "config", log=None)

    # a kernel in the cache is used without waiting for another process's build (kernels/<key> appears whole)
    found = cached()
    if found:
        return found
    with _locked(cache):
        found = cached()
        if found:
            return found
        srckey, version, pristine = ensure_source(cache, report)
        work = cache / f"work-{cfgkey}"
        obj = cache / f"obj-{cfgkey}"
        _ensure_worktree(pristine, work, report)
        report("applying patches", 0, None)
        _sync_worktree(pristine, work, loaded)
        ensure_config(work, obj, cfgkey, frags, report)
        log = _make(work, obj, jobs, report)
        tmp = cache / "kernels" / f".{key}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        shutil.copy2(obj / "linux", tmp / "linux")
        shutil.copyfile(obj / ".config", tmp / "config")
        fp = obj / "include" / "generated" / "user_constants.h"
        if fp.is_file():
            shutil.copyfile(fp, tmp / "user_constants.h")
        (tmp / "build.json").write_text(json.dumps({"key": key, "version": version, "debug": debug,
                                                    "config_key": cfgkey, "patches": patch_meta}, indent=2))
        shutil.rmtree(out, ignore_errors=True)
        os.rename(tmp, out)
    return BuildResult(kernel=out / "linux", key=key, version=version, debug=debug, patches=patch_meta, built=True,
                       seconds=time.monotonic() - started, config=out / "config", log=log)
