"""Serving the cached-device model to real NBD clients through nbdkit (docs/design.md, "Serving over NBD").

The model runs inside nbdkit as a C plugin (``csrc/nbdkit/pyb_nbdkit.c``), compiled on first use
with the user's C compiler against ``nbdkit-plugin.h`` (Debian ``nbdkit-plugin-dev``) and the model's
own C sources shipped in the package, and cached by the hash of everything that goes into it under
``$PYBCACHE_CACHE_DIR`` or ``~/.cache/pybcache``. ``docs/serve.md`` says why C rather than nbdkit's
Python plugin, with the figures.

Safety: a server listens only on a Unix socket (the default) or on 127.0.0.1, is started with
``--exit-with-parent`` (it cannot outlive the Python process that started it), and every wait for it is
bounded.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..._csrc import csrc_dir, csrc_path, sources as csrc_sources
from ..variants import VARIANTS

__all__ = ["MODEL_KEYS", "Server", "ToolMissing", "build_plugin", "require_tools"]

#: the model's counters a server reports at quiescence (docs/serve.md, the ``model`` object)
MODEL_KEYS = ("reads", "writes", "read_bypasses", "cache_inserts", "stale_reads", "stale_cached_blocks")
BLOCK = 4096
MAX_SIZE = 1 << 40          # the model keeps 24 bytes per 4 KiB block in memory
MAX_WRITE_DELAY_NS = 10 ** 10

# tool -> the Debian package that provides it
_PACKAGES = {"nbdkit": "nbdkit", "fio": "fio", "nbdkit-plugin.h": "nbdkit-plugin-dev", "nbdcopy": "libnbd-bin"}
_PYTHON_PLUGIN = Path(__file__).resolve().parent / "nbdkit_plugin.py"
_CFLAGS = ["-std=c11", "-D_GNU_SOURCE", "-O2", "-fPIC", "-shared", "-pthread", "-DNDEBUG"]
_READY_TIMEOUT_S = 20.0
_STOP_TIMEOUT_S = 30.0


class ToolMissing(RuntimeError):
    """A system tool the command needs is not installed; the message names the Debian packages."""


def _install_line(missing: Sequence[str]) -> str:
    pkgs = sorted({_PACKAGES[m] for m in missing})
    return (f"{', '.join(missing)} not found: install the Debian package{'s' if len(pkgs) > 1 else ''} "
            f"with `sudo apt-get install {' '.join(pkgs)}`")


def require_tools(*tools: str) -> None:
    """Raise :class:`ToolMissing` naming the Debian packages for every tool in ``tools`` not on PATH
    (``nbdkit-plugin.h`` is looked for by compiling against it, in :func:`build_plugin`)."""
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        raise ToolMissing(_install_line(missing))


# -- the plugin ------------------------------------------------------------------------------------

def _model_sources() -> tuple[Path, list[Path]]:
    """The directory of the model's C sources and the files to compile, as csrc/sources.mk lists them."""
    try:
        return csrc_dir(), csrc_sources("PYB_CORE_SRC", "PYB_MODEL_SRC", "PYB_KPATCH_SRC")
    except (FileNotFoundError, KeyError) as exc:
        raise ToolMissing(f"the model's C sources are missing from this installation of pybcache ({exc}): "
                          "reinstall it from a wheel or the source tree") from None


def _cache_dir() -> Path:
    root = os.environ.get("PYBCACHE_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "pybcache")
    return Path(root) / "nbdkit"


def build_plugin(*, cc: str | None = None) -> Path:
    """Compile the nbdkit plugin (once: cached by the hash of its sources, the model's sources and
    headers, the flags and the compiler's version) and return the path of the shared object.

    :param cc: the C compiler; default ``$CC`` or ``cc``.
    :raises ToolMissing: no compiler, or no ``nbdkit-plugin.h`` (Debian ``nbdkit-plugin-dev``).
    :raises RuntimeError: any other compile error, with the compiler's first lines.
    """
    cc = cc or os.environ.get("CC") or "cc"
    if shutil.which(cc) is None:
        raise ToolMissing(f"no C compiler ({cc}) found: install one, e.g. `sudo apt-get install gcc`")
    src_dir, sources = _model_sources()
    plugin = csrc_path("nbdkit/pyb_nbdkit.c")
    version = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30,
                             check=False).stdout.split("\n")[0]
    h = hashlib.sha256()
    for part in [version, " ".join(_CFLAGS)]:
        h.update(part.encode() + b"\0")
    abi = src_dir / "kpatch" / "include" / "pybcache" / "kpatch_abi.h"  # pyb_kpatch.h includes it
    for f in [plugin, *sources, *sorted(src_dir.glob("*.h")), abi]:
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    out = _cache_dir() / f"pyb-nbdkit-{h.hexdigest()[:20]}.so"
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f"{out.name}.{os.getpid()}.tmp")
    cmd = [cc, *_CFLAGS, f"-I{src_dir}", str(plugin), *map(str, sources), "-o", str(tmp)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    if res.returncode != 0:
        tmp.unlink(missing_ok=True)
        if "nbdkit-plugin.h" in res.stderr:
            raise ToolMissing(_install_line(["nbdkit-plugin.h"]))
        raise RuntimeError("compiling the nbdkit plugin failed: " + " | ".join(res.stderr.strip().splitlines()[:3]))
    os.replace(tmp, out)
    return out


# -- a server --------------------------------------------------------------------------------------

class Server:
    """One nbdkit process serving a fresh cached-device model. Use as a context manager, or call
    :meth:`start` and then :meth:`stop` (which returns the model's counters at quiescence).

    :param sync: ``"none"`` (the unpatched kernel), ``"global"``, ``"page"`` (default) or ``"atomic"``,
        or a kernel patch: a :class:`pybcache.KernelPatch` or the path of its ``.c`` file, compiled
        (:func:`pybcache.bcache.kpatch.load.compile_patch`) and loaded by the plugin as the model's tracker (one
        instance for the server's life; its write_start on the request thread, its write_end on the
        completion thread; ``chunk_size`` then does not apply). A patch operation that fails answers
        EIO from then on, and the counters carry ``tracker_error`` and ``patch_reports``.
    :param hung_timeout: with a patch, its bound in seconds on any wait or spinlock (default 10).
    :param size: device size in bytes, a positive multiple of 4096 up to 1 TiB. Default 10 GiB.
    :param write_delay_ns: time a bypass write's data takes to land after its invalidation, in
        [0, 10**10]. Default 5 ms.
    :param socket: Unix socket path; default a fresh one in a private temporary directory.
    :param port: if given, listen on 127.0.0.1:``port`` (TCP) instead of a Unix socket.
    :param threads: nbdkit request threads per connection, in [1, 1024]. Default 64 (more than fio's
        iodepth 32, so a write waiting for its delay never holds a read back).
    :param chunk_size: tracker chunk, a power of two >= 512. Default 32 MiB.
    :param plugin: ``"c"`` (default) or ``"python"`` (nbdkit's Python plugin calling
        :class:`pybcache.CachedDevice`: kept only to measure against, docs/serve.md).
    """

    def __init__(self, *, sync: str = "page", size: int = 10 << 30, write_delay_ns: int = 5_000_000,
                 socket: str | os.PathLike[str] | None = None, port: int | None = None, threads: int = 64,
                 chunk_size: int = 32 << 20, plugin: str = "c", hung_timeout: float | None = None) -> None:
        self.patch: Any = None
        if not (isinstance(sync, str) and sync in VARIANTS):
            from .._cachedev import _as_patch
            self.patch = _as_patch(sync)
            if self.patch is None:
                raise ValueError(f"sync must be one of {', '.join(VARIANTS)}, a KernelPatch or a patch's .c file, "
                                 f"got {sync!r}")
            if chunk_size != 32 << 20:
                raise ValueError("sync (a patch) and chunk_size are mutually exclusive: chunk_size applies to the "
                                 "lab's trackers, not to a patch")
            if plugin != "c":
                raise ValueError("sync (a patch) needs plugin='c'")
        if hung_timeout is not None:
            if self.patch is None:
                raise ValueError("hung_timeout applies to a patch (sync=KernelPatch or a .c path), not to the "
                                 "lab's trackers")
            if isinstance(hung_timeout, bool) or not isinstance(hung_timeout, (int, float)) \
                    or not 0 < hung_timeout <= 3600:
                raise ValueError(f"hung_timeout must be a number of seconds in (0, 3600], got {hung_timeout!r}")
        self.hung_timeout = hung_timeout
        for name, value in (("size", size), ("write_delay_ns", write_delay_ns), ("threads", threads),
                            ("chunk_size", chunk_size)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        if not 0 < size <= MAX_SIZE or size % BLOCK:
            raise ValueError(f"size must be a positive multiple of {BLOCK} up to {MAX_SIZE} (1 TiB), got {size}")
        if not 0 <= write_delay_ns <= MAX_WRITE_DELAY_NS:
            raise ValueError(f"write_delay_ns must be in [0, {MAX_WRITE_DELAY_NS}], got {write_delay_ns}")
        if not 1 <= threads <= 1024:
            raise ValueError(f"threads must be in [1, 1024], got {threads}")
        if chunk_size < 512 or chunk_size & (chunk_size - 1):
            raise ValueError(f"chunk_size must be a power of two >= 512, got {chunk_size}")
        if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535):
            raise ValueError(f"port must be an int in [1, 65535], got {port!r}")
        if socket is not None and port is not None:
            raise ValueError("socket and port are exclusive: a server listens on one of them")
        if plugin not in ("c", "python"):
            raise ValueError(f"plugin must be 'c' or 'python', got {plugin!r}")
        self.sync = sync if self.patch is None else f"{self.patch.name} ({self.patch.path})"
        self.size, self.write_delay_ns = size, write_delay_ns
        self.threads, self.chunk_size, self.plugin, self.port = threads, chunk_size, plugin, port
        self._socket = os.fspath(socket) if socket is not None else None
        self._tmp: str | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: Any = None
        self.stats: dict[str, int] | None = None

    @property
    def uri(self) -> str:
        """The NBD URI clients connect to."""
        if self.port is not None:
            return f"nbd://127.0.0.1:{self.port}/"
        return f"nbd+unix:///?socket={self.socket}"

    @property
    def socket(self) -> str | None:
        return self._socket

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def _command(self, stats: str, pidfile: str) -> list[str]:
        cmd = ["nbdkit", "--foreground", "--exit-with-parent", "-P", pidfile, "--threads", str(self.threads)]
        if self.port is not None:
            cmd += ["-i", "127.0.0.1", "-p", str(self.port)]
        else:
            cmd += ["-U", str(self._socket)]
        if self.patch is not None:
            params = [f"size={self.size}", f"patch={self.patch.library}", f"write_delay_ns={self.write_delay_ns}",
                      f"stats={stats}"]
            if self.hung_timeout is not None:
                params.append(f"hung_ns={max(1, int(self.hung_timeout * 1e9))}")
            if getattr(self.patch, "end_bio", "consumed") == "intact":
                params.append("end_bio_intact=1")
            return cmd + [str(build_plugin()), *params]
        params = [f"size={self.size}", f"sync={self.sync}", f"write_delay_ns={self.write_delay_ns}",
                  f"chunk_size={self.chunk_size}", f"stats={stats}"]
        if self.plugin == "c":
            return cmd + [str(build_plugin()), *params]
        return cmd + ["python", str(_PYTHON_PLUGIN), *params]

    def start(self) -> Server:
        """Start nbdkit and return once it accepts connections (bounded wait).

        :raises ToolMissing: nbdkit (or the plugin's build requirements) missing.
        :raises RuntimeError: nbdkit exited or did not become ready; the message carries its stderr.
        """
        if self._proc is not None:
            raise RuntimeError("server already started")
        require_tools("nbdkit")
        self._tmp = tempfile.mkdtemp(prefix="pybcache-nbd-")
        if self._socket is None and self.port is None:
            self._socket = os.path.join(self._tmp, "nbd.sock")
        pidfile = os.path.join(self._tmp, "nbdkit.pid")
        env = dict(os.environ)
        if self.plugin == "python":
            # nbdkit embeds its own interpreter: lend it this installation's package and site paths.
            import site
            paths = [str(Path(__file__).resolve().parents[3]), *site.getsitepackages()]
            env["PYBCACHE_SYS_PATH"] = os.pathsep.join(paths)
        try:
            cmd = self._command(os.path.join(self._tmp, "stats.json"), pidfile)  # may compile the plugin
            self._stderr = open(os.path.join(self._tmp, "nbdkit.err"), "w+b")
            self._proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self._stderr,
                                          stderr=self._stderr, env=env, start_new_session=True)
        except BaseException:
            self._cleanup()
            raise
        deadline = time.monotonic() + _READY_TIMEOUT_S
        while not os.path.exists(pidfile):
            status = self._proc.poll()
            if status is not None:
                err = self._error_text()
                self._cleanup()
                raise RuntimeError(f"nbdkit exited with status {status}: {err}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"nbdkit was not ready after {_READY_TIMEOUT_S:g} s")
            time.sleep(0.02)
        return self

    def _error_text(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        return " | ".join(self._stderr.read().decode(errors="replace").strip().splitlines()[-3:])

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self) -> dict[str, int] | None:
        """Stop the server (SIGTERM; SIGKILL after a bounded wait) and return the model's counters
        written at quiescence (``None`` if nbdkit could not write them)."""
        if self._proc is None:
            return self.stats
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(timeout=_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=_STOP_TIMEOUT_S)
        if self._socket is not None and self._tmp is not None and os.path.exists(self._socket):
            os.unlink(self._socket)  # nbdkit leaves its socket behind; it made it, so it is ours to remove
        stats_path = os.path.join(self._tmp, "stats.json") if self._tmp else None
        if stats_path and os.path.exists(stats_path):
            with open(stats_path) as f:
                self.stats = json.load(f)
        self._cleanup()
        return self.stats

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait for nbdkit to exit by itself; its exit status, or None on timeout."""
        if self._proc is None:
            return None
        try:
            return self._proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def _cleanup(self) -> None:
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
        self._proc = None

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
