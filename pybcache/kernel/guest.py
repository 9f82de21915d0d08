"""Booting the User-Mode Linux guest, confined, bounded in time, and reading its kernel log into reports.

Confinement: the guest's root is the host's ``/`` through hostfs (so the host's dd, dmsetup and make-bcache run
in it), and the guest runs as host root. It is started under ``unshare --mount --propagation private`` by
``csrc/kernel/confine.sh``, which remounts every mount of that private namespace read-only, then bind-mounts
the run's work dir back read-write and mounts a private tmpfs for UML's memory file. Through hostfs the guest
can write nothing on the host but the work dir; block devices it opens are its own (ubd, dm, bcache), never
the host's: hostfs gives the guest's kernel the device numbers, not the host's devices.

Wall bound: the guest (UML forks a host process per guest process, all in one new session) is killed with
its whole process group at the bound, and any process left in its session after that is killed too; a hung
guest is reported with its last console lines.

Host quirk: on a host whose XSAVE area is larger than UML's built-in 2,696 bytes (AMX), UML dies at its first
process with "ptrace set fp regs failed, errno = 14"; :func:`xstate_preload` builds and preloads
csrc/kernel/uml_xstate_preload.c there (and only there).
"""
from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import hashlib
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Optional, Sequence

from ._paths import cache_dir, host_env, kernel_file

__all__ = ["GuestRun", "boot", "parse_reports", "xstate_preload", "host_xstate_size", "uml_fp_size",
           "REPORT_KINDS", "console_tail"]

UML_DEFAULT_FP_BYTES = 2696


# --------------------------------------------------------------------------------------- the host quirk
def _compile_preload() -> Path:
    src = kernel_file("uml_xstate_preload.c")
    digest = hashlib.sha256(src.read_bytes()).hexdigest()[:16]
    out = cache_dir() / "tools" / digest / "libpyb_uml_xstate.so"
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}")
    cc = os.environ.get("CC") or "gcc"
    try:
        res = subprocess.run([cc, "-O2", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", "-o", str(tmp), str(src),
                              "-ldl"], capture_output=True, text=True, timeout=120, env=host_env())
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeError(f"cannot compile {src}: {exc}") from None
    if res.returncode != 0:
        raise RuntimeError(f"cannot compile {src}:\n{res.stderr.strip()}")
    os.replace(tmp, out)
    return out


def host_xstate_size(preload: Optional[Path] = None) -> int:
    """The host's XSAVE area size in bytes for the features its kernel enabled (CPUID 0xD.0 EBX), read
    through the preload library's own helper; 0 where CPUID has no leaf 0xD."""
    lib = ctypes.CDLL(str(preload or _compile_preload()))
    fn = lib.pyb_uml_host_xstate_size
    fn.restype = ctypes.c_uint
    return int(fn())


def uml_fp_size(kernel: Path) -> int:
    """UML's FP state size in bytes (HOST_FP_SIZE longs, from the build's generated user_constants.h kept
    beside the kernel); 2,696 when unknown."""
    consts = kernel.parent / "user_constants.h"
    with contextlib.suppress(OSError):
        m = re.search(r"#define\s+HOST_FP_SIZE\s+(\d+)", consts.read_text())
        if m:
            return int(m.group(1)) * 8
    return UML_DEFAULT_FP_BYTES


def xstate_preload(kernel: Path) -> tuple[Optional[Path], str]:
    """(the preload library to use, or None; why). ``$PYBCACHE_UML_XSTATE`` = ``on`` / ``off`` forces it;
    by default it is used when the host's XSAVE area is larger than UML's FP state."""
    mode = (os.environ.get("PYBCACHE_UML_XSTATE") or "auto").lower()
    if mode == "off":
        return None, "ptrace wrapper off (PYBCACHE_UML_XSTATE=off)"
    lib = _compile_preload()
    if mode == "on":
        return lib, "ptrace wrapper on (PYBCACHE_UML_XSTATE=on)"
    host, uml = host_xstate_size(lib), uml_fp_size(kernel)
    if host > uml:
        return lib, f"host XSAVE area {host} B > UML's {uml} B: ptrace wrapper preloaded"
    return None, f"host XSAVE area {host} B <= UML's {uml} B: no ptrace wrapper needed"


# ------------------------------------------------------------------------------------------------ reports
# (kind, pattern of the line a report starts with); the first that matches wins, so the specific come first
REPORT_KINDS: list[tuple[str, re.Pattern]] = [
    ("lockdep", re.compile(r"WARNING: (possible (circular|recursive) locking|possible irq lock inversion|"
                           r"inconsistent lock state|.*lock order detected|bad unlock balance|held lock freed|"
                           r"lock held when returning to user space|suspicious RCU usage|"
                           r"possible .*locking dependency|.*-safe -> .*-unsafe)")),
    ("lockdep", re.compile(r"BUG: (held lock freed|lock held|looking up invalid subclass|key .* has not been "
                           r"registered|MAX_LOCKDEP)")),
    ("might_sleep", re.compile(r"BUG: (sleeping function called from invalid context|scheduling while atomic)")),
    ("kasan", re.compile(r"BUG: KASAN: ")),
    ("warning", re.compile(r"WARNING: CPU: \d+ PID: \d+ at ")),
    ("bug", re.compile(r"(BUG: |kernel BUG at |Oops: |general protection fault)")),
    ("hung_task", re.compile(r"INFO: task .* blocked for more than \d+ seconds")),
    ("panic", re.compile(r"Kernel panic - not syncing")),
]
_TIMESTAMP = re.compile(r"^\s*\[\s*\d+\.\d+\]\s?")
_END = re.compile(r"---\[ end (trace|Kernel panic)")
_SEPARATOR = re.compile(r"^={20,}\s*$|^-{20,}\s*$")
MAX_REPORT_LINES = 120


def _kind(body: str) -> Optional[str]:
    if _END.search(body):
        return None
    for kind, pattern in REPORT_KINDS:
        if pattern.search(body):
            return kind
    return None


def parse_reports(log: str) -> list[dict]:
    """The kernel's reports in ``log`` (a console capture or dmesg), each ``{"kind", "text"}`` with its whole
    block as the kernel printed it: from the line that names it (with the ``=====`` rule before it, for
    lockdep and KASAN) to its end marker (``---[ end trace``, KASAN's closing rule), the next report, a
    ``PYB:`` line of the guest's script, or 120 lines. Kinds: lockdep, might_sleep, kasan, warning, bug,
    hung_task, panic."""
    lines = log.splitlines()
    bodies = [_TIMESTAMP.sub("", line) for line in lines]
    reports: list[dict] = []
    i = 0
    while i < len(lines):
        kind = _kind(bodies[i])
        if kind is None or bodies[i].startswith("PYB:"):
            i += 1
            continue
        start = i
        if start > 0 and _SEPARATOR.match(bodies[start - 1]):
            start -= 1
        end = i + 1
        while end < len(lines) and end - start < MAX_REPORT_LINES:
            body = bodies[end]
            if body.startswith("PYB:") or _kind(body) is not None:
                break
            if _END.search(body):
                end += 1
                break
            if kind == "kasan" and _SEPARATOR.match(body):
                end += 1
                break
            end += 1
        # a separator that opens the next report is not part of this one
        if end < len(lines) and end - 1 > i and _SEPARATOR.match(bodies[end - 1]) and \
                end < len(lines) and _kind(bodies[end]) is not None and kind != "kasan":
            end -= 1
        reports.append({"kind": kind, "text": "\n".join(lines[start:end]).rstrip()})
        i = end
    return reports


def console_tail(text: str, n: int = 25) -> str:
    return "\n".join(text.rstrip().splitlines()[-n:])


# ------------------------------------------------------------------------------------------------ booting
@dataclasses.dataclass
class GuestRun:
    returncode: Optional[int]
    timed_out: bool
    seconds: float
    console: str
    preload: str            # what was decided about the ptrace wrapper, and why


def _session_members(sid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = Path(f"/proc/{entry}/stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[3]) == sid and fields[0] != "Z":    # field 6 of stat: the session id; not zombies
                pids.append(int(entry))
    return pids


def _kill_session(proc: subprocess.Popen) -> None:
    """SIGKILL the guest's process group, then anything left in its session, and reap."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        left = [p for p in _session_members(proc.pid) if p != os.getpid()]
        if not left:
            break
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def boot(kernel: Path, work: Path, *, disks: Sequence[Path], init: Path, params: Sequence[str] = (),
         wall: float = 120.0, mem: str = "512M") -> GuestRun:
    """Boot ``kernel`` confined to ``work`` (see the module's docstring) with ``disks`` as ubd0, ubd1, ...
    and ``init`` as its first process; kill it at ``wall`` seconds. The console goes to work/console.log."""
    work = work.resolve()
    if any(c.isspace() for c in str(work)):
        raise RuntimeError(f"the work dir's path must have no white space (a kernel parameter): {work}")
    for tool in ("unshare", "mount"):
        if shutil.which(tool) is None:
            raise RuntimeError(f"{tool} not found (util-linux, mount)")
    preload, why = xstate_preload(kernel)
    cmdline = [str(kernel), f"mem={mem}", "root=/dev/root", "rootfstype=hostfs", "rootflags=/", "rw",
               *(f"ubd{i}={d.resolve()}" for i, d in enumerate(disks)), f"init={init.resolve()}",
               "con=null", "con0=fd:0,fd:1", f"uml_dir={work}/uml", f"pybwork={work}", *params]
    unshare = ["unshare", "--mount", "--propagation", "private"]
    if os.geteuid() != 0:
        unshare[1:1] = ["--user", "--map-root-user"]
    cmd = unshare + ["--", "/bin/sh", str(kernel_file("confine.sh")), str(work), "--"] + cmdline
    env = {k: v for k, v in os.environ.items() if not k.startswith("LD_")}
    if preload:
        env["PYB_LD_PRELOAD"] = str(preload)   # set by confine.sh right before exec, for UML alone
    console = work / "console.log"
    started = time.monotonic()
    with open(console, "wb") as out:
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True, cwd=work)
        timed_out = False
        try:
            proc.wait(timeout=wall)
        except subprocess.TimeoutExpired:
            timed_out = True
        except BaseException:
            _kill_session(proc)
            raise
        finally:
            _kill_session(proc)
            with contextlib.suppress(OSError):
                if proc.stdin:
                    proc.stdin.close()
    return GuestRun(returncode=None if timed_out else proc.returncode, timed_out=timed_out,
                    seconds=time.monotonic() - started,
                    console=console.read_text(errors="replace"), preload=why)
