"""``pybcache kernel race``: the v1 reproducer against the real bcache driver, in a UML guest.

Each try writes a new version of a fresh block through /dev/bcache0 (writearound: a bypass write, held
``write_delay_ms`` by dm-delay under the backing device) and, ``read_at_ms`` later, reads the same block
through bcache0: a read miss, which returns the old version from the backing device and inserts it into the
cache. Once the write completes the block is read again through bcache0 and straight from the backing device
(O_DIRECT both): the try is *stale* when bcache0 returns the old version while the backing device has the new
one. In 6.12 the bypass write's backing bio is submitted (drivers/md/bcache/request.c:1027) before the cache
invalidation (bch_data_insert, :1061) which runs at once and asynchronously, so a miss that reads the backing
device after the invalidation and before the write lands caches the old data for good.

With ``writes="writethrough"`` the tries' writes are writethrough writes (cache_mode writethrough): the backing
bio is submitted first (:1057) and the data is then written to the cache and indexed (:1061). Alone they open no
window. With ``cache_write_fail`` each try's cache write fails (the kernel's fail_make_request on the cache disk,
armed for as many failures as the wave has writes):

* ``"completion"``: bcache's cache device is dm-linear over the disk, so the failure reaches bcache after its
  submission returned, as a device error does, and bcache turns the write's keys into invalidations
  (``bch_data_insert_error``, :139-166) while the backing write is still held: the writethrough fallback, on a
  write that never took the bypass branch;
* ``"submission"``: the disk is the cache device and the failure (its stack filter set to
  ``bch_data_insert_start``) completes the bio inside the submission, before ``bch_data_insert_start``'s own
  ``continue_at(cl, bch_data_insert_keys, ...)`` (:252), which replaces the error path the endio set: the keys are
  inserted with their pointers to sectors never written.

A try whose read after the write returns neither version (``"?"``: sectors never written) is *garbage*, and
fails the run as a stale one does.

Then, at quiescence, the balance check: a block never written, in the chunk of try 1's block, is read
through bcache0 and overwritten behind bcache's back (on the ubd disk under dm-delay); a re-read through
bcache0 that returns the old version shows the miss was cached, i.e. the chunk that took a write caches
misses again (*held*). The device is then stopped and the cache set unregistered, so that teardown warnings
reach the log; any kernel report (lockdep, might_sleep, KASAN, WARNING, BUG, panic) fails the run.
"""
from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

from ._paths import cache_dir, host_env, kernel_file
from .build import BuildResult
from .guest import boot, console_tail, parse_reports

__all__ = ["RaceResult", "run_race", "prepare_images", "GuestSetupError", "COUNTERS", "run_guest_scenario"]

BLOCK = 4096
STRIDE = 256               # blocks between two tries' blocks: 1 MiB, a chunk of its own for chunks <= 1 MiB
BASE_BLOCK = 1024          # the first try's block is BASE_BLOCK + STRIDE
WAVE = 10                  # tries run concurrently, at most this many at a time
CACHE_IMAGE = 160 << 20    # 1,280 buckets of 128 KiB (make-bcache wants >= 1,024)
COUNTERS = ("cache_hits", "cache_misses", "cache_bypass_hits", "cache_bypass_misses", "cache_miss_collisions",
            "cache_hit_ratio", "cache_readaheads", "bypassed")


class GuestSetupError(RuntimeError):
    """The guest could not set up the devices (not a verdict on the kernel): the message says which step."""


@dataclasses.dataclass
class RaceResult:
    kernel: str
    version: str
    patches: list[str]
    tries: int
    stale: int
    per_try: list[dict]
    balance: dict
    counters: dict
    reports: list[dict]
    fail_alloc: Optional[dict]
    log: str
    seconds: float
    preload: str
    writes: str = "bypass"
    cache_write_fail: Optional[dict] = None

    @property
    def garbage(self) -> int:
        """Tries whose read through bcache0 after the write returned neither version."""
        return sum(1 for t in self.per_try if t.get("garbage"))

    @property
    def passed(self) -> bool:
        """No stale try, every try ran with its write done, the balance held, no kernel report; with
        ``cache_write_fail``, the fault fired on every try's data write and nowhere else."""
        complete = all(t.get("ran") and t.get("write_ok") for t in self.per_try)
        if self.cache_write_fail is not None and not self.cache_write_fail["fired"]:
            return False
        return (self.stale == 0 and self.garbage == 0 and complete and self.balance.get("verdict") == "held"
                and not self.reports)

    def to_json(self) -> dict:
        return {"kernel": self.kernel, "version": self.version, "patches": self.patches, "tries": self.tries,
                "stale": self.stale, "garbage": self.garbage, "per_try": self.per_try, "balance": self.balance,
                "counters": self.counters,
                "reports": self.reports, "fail_alloc": self.fail_alloc, "writes": self.writes,
                "cache_write_fail": self.cache_write_fail, "seconds": round(self.seconds, 1),
                "preload": self.preload, "log": self.log, "passed": self.passed}


def _tool(name: str, package: str) -> str:
    path = shutil.which(name) or next((p for p in (f"/usr/sbin/{name}", f"/sbin/{name}") if os.path.exists(p)),
                                      None)
    if not path:
        raise GuestSetupError(f"{name} not found: apt-get install {package}")
    return path


def _data_offset_sectors(backing: Path) -> int:
    try:
        res = subprocess.run([_tool("bcache-super-show", "bcache-tools"), str(backing)], capture_output=True,
                             text=True, timeout=30, env=host_env())
    except subprocess.TimeoutExpired:
        raise GuestSetupError("bcache-super-show took over 30 s") from None
    m = re.search(r"dev\.data\.first_sector\s+(\d+)", res.stdout)
    if res.returncode != 0 or not m:
        raise GuestSetupError(f"bcache-super-show {backing} gave no data offset: {res.stdout}{res.stderr}")
    return int(m.group(1))


def block_bytes(label: int, version: int) -> bytes:
    """The content of one of the lab's blocks: its label and version on one line, then zeros."""
    head = f"pybcache blk={label} ver={version}\n".encode()
    return head + bytes(BLOCK - len(head))


def prepare_images(work: Path, blocks: Sequence[int], *, backing_bytes: int) -> int:
    """Create backing.img and cache.img with make-bcache (4 KiB blocks, 128 KiB buckets) and write version 0
    of each of ``blocks`` into the backing image's data area. Returns the data offset in 4 KiB blocks."""
    backing, cache = work / "backing.img", work / "cache.img"
    for path, size in ((backing, backing_bytes), (cache, CACHE_IMAGE)):
        with open(path, "wb") as fh:
            fh.truncate(size)
    try:
        res = subprocess.run([_tool("make-bcache", "bcache-tools"), "-B", str(backing), "-C", str(cache),
                              "--block", "4k", "--bucket", "128k"], capture_output=True, text=True, timeout=60,
                             stdin=subprocess.DEVNULL, env=host_env())
    except subprocess.TimeoutExpired:
        raise GuestSetupError("make-bcache took over 60 s") from None
    if res.returncode != 0:
        raise GuestSetupError(f"make-bcache failed: {(res.stdout + res.stderr).strip()}")
    first = _data_offset_sectors(backing)
    if (first * 512) % BLOCK:
        raise GuestSetupError(f"backing data offset {first} sectors is not a multiple of 4 KiB")
    offset = first * 512 // BLOCK
    with open(backing, "r+b") as fh:
        for b in blocks:
            fh.seek((offset + b) * BLOCK)
            fh.write(block_bytes(b, 0))
    return offset


def symbol_range(kernel: Path, symbol: str) -> tuple[str, str]:
    """[start, end) of the text symbol ``symbol`` in the UML binary (``nm -n``: the addresses the guest's
    /proc/kallsyms shows, UML being linked at a fixed address), as 0x-prefixed hex."""
    nm = shutil.which("nm")
    if nm is None:
        raise GuestSetupError("nm not found: apt-get install binutils")
    try:
        res = subprocess.run([nm, "-n", "--defined-only", str(kernel)], capture_output=True, text=True, timeout=120,
                             env=host_env())
    except subprocess.TimeoutExpired:
        raise GuestSetupError("nm took over 120 s") from None
    if res.returncode != 0:
        raise GuestSetupError(f"nm {kernel} failed: {res.stderr.strip()}")
    start = None
    for line in res.stdout.splitlines():
        parts = line.split()
        if len(parts) != 3:
            continue
        addr = int(parts[0], 16)
        if start is None:
            if parts[2] == symbol and parts[1] in "tT":
                start = addr
        elif addr > start:
            return f"0x{start:016x}", f"0x{addr:016x}"
    if start is None:
        raise ValueError(f"--fail-alloc: no function {symbol!r} in {kernel}")
    raise GuestSetupError(f"no symbol after {symbol} in {kernel}")


def _read(path: Path) -> Optional[str]:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return None


def _version(text: str) -> Optional[int]:
    return int(text) if text.isdigit() else None


def parse_try(line: str) -> dict:
    """One try's line from the guest: ``i block read_during_write bcache_after backing_after write_rc``."""
    f = line.split()
    i, block, r1, r2, r3, wrc = (f + ["?"] * 6)[:6]
    during, after, backing = _version(r1), _version(r2), _version(r3)
    return {"try": int(i), "block": int(block), "read_during_write": during, "bcache_after": after,
            "backing_after": backing, "write_ok": wrc == "0", "ran": True,
            "stale": after == 0 and backing == 1,
            # neither version: what bcache0 returned was never written (sectors indexed without their data)
            "garbage": after is None and backing == 1}


def parse_balance(line: Optional[str]) -> dict:
    """The balance check's line: ``block first_read backing_after_overwrite reread`` -> verdict."""
    if not line:
        return {"verdict": "not run"}
    f = (line.split() + ["?"] * 4)[:4]
    block, first, backing, reread = f[0], _version(f[1]), _version(f[2]), _version(f[3])
    if first != 0 or backing != 7:
        verdict = "inconclusive"
    elif reread == 0:
        verdict = "held"
    else:
        verdict = "broken"
    return {"verdict": verdict, "block": int(block) if block.isdigit() else None, "first_read": first,
            "backing_after_overwrite": backing, "reread": reread,
            "meaning": {"held": "the read miss was cached: the chunk that took a write caches misses again",
                        "broken": "the read miss was not cached: the chunk that took a write no longer caches "
                                  "misses (an unbalanced count of active writes?)",
                        "inconclusive": "the block did not read back as expected before the check",
                        }[verdict]}


def parse_counters(text: Optional[str]) -> dict:
    out: dict = {}
    for line in (text or "").splitlines():
        parts = line.split(None, 1)
        if len(parts) == 2:
            value = parts[1].strip()
            out[parts[0]] = int(value) if value.lstrip("-").isdigit() else value
    return out


def _params(values: dict) -> str:
    lines = ["# written by pybcache (pybcache/kernel/race.py), sourced by the guest's init"]
    for k, v in values.items():
        text = str(v)
        if not re.fullmatch(r"[A-Za-z0-9_.:/+-]*", text):
            raise ValueError(f"parameter {k}={text!r} has characters the guest's shell would interpret")
        lines.append(f"{k}={text}")
    return "\n".join(lines) + "\n"


def run_guest_scenario(built: BuildResult, params: dict, blocks: Sequence[int], *, backing_bytes: int,
                       wall: float, keep: bool = False,
                       progress: Optional[Callable[[str], None]] = None) -> tuple[Path, "GuestOutcome"]:
    """Make the images, write params.sh, boot the guest with the lab's init; returns the work dir and what
    came back (the caller removes the work dir unless ``keep``)."""
    say = progress or (lambda text: None)
    runs = cache_dir() / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=time.strftime("%Y%m%d-%H%M%S-"), dir=runs))
    say("making the images")
    offset = prepare_images(work, blocks, backing_bytes=backing_bytes)
    (work / "params.sh").write_text(_params({**params, "DATA_OFFSET_BLOCKS": offset}))
    init = work / "init.sh"
    shutil.copyfile(kernel_file("guest-init.sh"), init)
    init.chmod(0o755)
    say("booting the guest")
    guest = boot(built.kernel, work, disks=[work / "backing.img", work / "cache.img"], init=init, wall=wall)
    return work, GuestOutcome(work, guest)


class GuestOutcome:
    """What the guest left in the work dir, read once."""

    def __init__(self, work: Path, guest) -> None:
        self.guest = guest
        self.finished = (_read(work / "finished") or "").strip()
        self.error = (_read(work / "error.txt") or "").strip()
        dmesg = _read(work / "dmesg.txt")
        # dmesg is the whole kernel log; when the guest died before saving it, the console has what was printed
        self.log = dmesg if dmesg else guest.console
        reports = parse_reports(self.log)
        if dmesg:
            # a report printed after dmesg was saved (teardown is before; poweroff is after) is on the console
            tail_reports = parse_reports(guest.console)
            known = {r["text"].splitlines()[0][-80:] for r in reports if r["text"]}
            reports += [r for r in tail_reports if r["text"] and r["text"].splitlines()[0][-80:] not in known]
        if guest.timed_out:
            reports.append({"kind": "hang", "text": f"the guest did not finish within {guest.seconds:.0f} s; "
                                                    f"its last console lines:\n{console_tail(guest.console)}"})
        elif not self.finished:
            reports.append({"kind": "died", "text": f"the guest stopped (exit {guest.returncode}) before "
                                                    f"finishing; its last console lines:\n"
                                                    f"{console_tail(guest.console)}"})
        teardown = (_read(work / "teardown_error") or "").strip()
        if teardown:
            reports.append({"kind": "teardown", "text": f"teardown failed: {teardown}\n"
                                                        f"{console_tail(guest.console)}"})
        self.reports = reports


#: the kernel's message for a failed write to the cache device (drivers/md/bcache/io.c, bch_count_io_errors):
#: "IO error on writing data to cache." for an insert's data, other words for the btree
_CACHE_IO_ERROR = re.compile(r"IO error on (writing [a-z ]+?)\.?$", re.M)
#: bch_cache_set_error's message (a failed journal or priority write, or too many errors): the cache set is gone
_CACHE_SET_ERROR = re.compile(r"bcache: bch_cache_set_error\(\) error on [^:]*: (.*?), disabling caching", re.M)
WRITES = ("bypass", "writethrough")
CACHE_WRITE_FAIL = ("completion", "submission")


def run_race(built: BuildResult, *, tries: int = 5, write_delay_ms: int = 3000, read_at_ms: int = 500,
             fail_alloc: Optional[str] = None, fail_times: int = 1000, writes: str = "bypass",
             cache_write_fail: Optional[str] = None, keep: bool = False,
             wait_counters: bool = True, progress: Optional[Callable[[str], None]] = None) -> RaceResult:
    """Boot ``built``, run the reproducer ``tries`` times, the balance check and the teardown.

    ``writes``: "bypass" (writearound, the default) or "writethrough". ``cache_write_fail``: None, or fail the
    cache write of each try's write, the failure arriving at "completion" (the writethrough fallback) or at
    "submission" (writethrough only; needs the debug build).
    ``wait_counters``: wait (up to 18 s) for bcache's accounting tick so that the counters include the run;
    False reads them as they are (they may lag the run)."""
    if writes not in WRITES:
        raise ValueError(f"writes must be one of {', '.join(WRITES)}, got {writes!r}")
    if cache_write_fail is not None and cache_write_fail not in CACHE_WRITE_FAIL:
        raise ValueError(f"cache_write_fail must be None or one of {', '.join(CACHE_WRITE_FAIL)}, "
                         f"got {cache_write_fail!r}")
    if cache_write_fail and writes != "writethrough":
        raise ValueError("cache_write_fail needs writes='writethrough' (a bypass write writes nothing to the cache)")
    if cache_write_fail and not built.debug:
        raise ValueError("cache_write_fail needs the debug build (fail_make_request): drop --no-debug")
    if not 1 <= tries <= 1000:
        raise ValueError(f"tries must be in [1, 1000], got {tries}")
    if not 0 <= write_delay_ms <= 60000:
        raise ValueError(f"write delay must be in [0, 60000] ms, got {write_delay_ms}")
    if fail_alloc is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]*", fail_alloc):
        raise ValueError(f"--fail-alloc wants a kernel symbol name, got {fail_alloc!r}")
    started = time.monotonic()
    blocks = [BASE_BLOCK + i * STRIDE for i in range(1, tries + 1)] + [BASE_BLOCK + STRIDE + 1]
    backing_bytes = max(64 << 20, (BASE_BLOCK + (tries + 2) * STRIDE) * BLOCK + (1 << 20))
    waves = -(-tries // WAVE)
    wall = 90 + waves * (write_delay_ms / 1000 + read_at_ms / 1000 + 15)
    fail_start, fail_end = symbol_range(built.kernel, fail_alloc) if fail_alloc else ("", "")
    fmr_start, fmr_end = (symbol_range(built.kernel, "bch_data_insert_start") if cache_write_fail == "submission"
                          else ("", ""))
    params = {"MODE": "race", "TRIES": tries, "WAVE": WAVE, "STRIDE": STRIDE, "BASE_BLOCK": BASE_BLOCK,
              "WRITE_DELAY_MS": write_delay_ms, "READ_AT_S": f"{read_at_ms / 1000:.3f}",
              "FAIL_SYMBOL": fail_alloc or "", "FAIL_TIMES": fail_times,
              "FAIL_START": fail_start, "FAIL_END": fail_end, "WAIT_COUNTERS": int(wait_counters),
              "WRITES": writes, "CACHE_WRITE_FAIL": cache_write_fail or "", "FMR_START": fmr_start,
              "FMR_END": fmr_end}
    work, out = run_guest_scenario(built, params, blocks, backing_bytes=backing_bytes, wall=wall, keep=keep,
                                   progress=progress)
    try:
        if out.error and not any(r["kind"] not in ("died",) for r in out.reports):
            raise GuestSetupError(f"the guest's setup failed: {out.error}\n{console_tail(out.guest.console)}")
        per_try = []
        for i in range(1, tries + 1):
            line = _read(work / f"try.{i}")
            if line:
                per_try.append(parse_try(line))
            else:
                per_try.append({"try": i, "block": blocks[i - 1], "stale": False, "ran": False})
        fail_info = None
        if fail_alloc:
            text = _read(work / "failslab") or ""
            m = re.search(r"start (\S+) end (\S+) times (\d+)", text)
            r = re.search(r"remaining (-?\d+)", text)
            fail_info = {"symbol": fail_alloc, "start": m.group(1) if m else None, "end": m.group(2) if m else None,
                         "times": int(m.group(3)) if m else None,
                         "failures": (int(m.group(3)) - int(r.group(1))) if (m and r) else None}
        cwf_info = None
        if cache_write_fail:
            text = _read(work / "cache_write_fail") or ""
            armed = sum(int(n) for n in re.findall(r"armed (\d+)", text))
            left = sum(int(n) for n in re.findall(r"left (\d+)", text))
            errors: dict[str, int] = {}
            for what in _CACHE_IO_ERROR.findall(out.log or ""):
                errors[what] = errors.get(what, 0) + 1
            failures = armed - left if "left" in text else None
            disabled = _CACHE_SET_ERROR.findall(out.log or "")
            cwf_info = {"when": cache_write_fail, "armed": armed, "failures": failures,
                        "io_errors": errors, "cache_set_errors": disabled,
                        # the run measured the fallback only if every try's data write failed, nothing else did
                        # and the cache set stayed up; otherwise its verdict is not a measurement of it
                        "fired": (failures == tries and errors == {"writing data to cache": tries}
                                  and not disabled),
                        "meaning": {"completion": "the tries' cache writes failed on the disk under a dm-linear "
                                                  "cache device: bcache's endio ran after the insert's "
                                                  "submission and turned the keys into invalidations while the "
                                                  "backing writes were held (the writethrough fallback)",
                                    "submission": "the tries' cache writes failed inside their submission "
                                                  "(under bch_data_insert_start): the insert's continue_at "
                                                  "replaced the error path, and the keys kept their pointers "
                                                  "to sectors never written"}[cache_write_fail]}
        return RaceResult(kernel=str(built.kernel), version=built.version, patches=[p["path"] for p in built.patches],
                          tries=tries, stale=sum(1 for t in per_try if t.get("stale")), per_try=per_try,
                          balance=parse_balance(_read(work / "balance")),
                          counters=parse_counters(_read(work / "counters")), reports=out.reports,
                          fail_alloc=fail_info, log=out.log, seconds=time.monotonic() - started,
                          preload=out.guest.preload, writes=writes, cache_write_fail=cwf_info)
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
