"""``pybcache kernel stress``: writers and readers of versioned blocks through /dev/bcache0 in the UML guest.

Writer k owns ``STRESS_BLOCKS`` blocks and rewrites them, pass after pass, each block carrying its number and
the pass's version (O_DIRECT, through bcache0: writearound, so every write is a bypass write held by
dm-delay); after each complete pass it publishes the version as complete. Readers read every writer's blocks
through bcache0 (O_DIRECT): a read whose version is older than the version its writer had published before
the read started is a stale read, the oracle of ``kernel race`` in a loop. At quiescence every block is
compared through bcache0 and on the backing device. Any kernel report fails the run, as in race.
"""
from __future__ import annotations

import dataclasses
import shutil
import time
from pathlib import Path
from typing import Callable, Optional

from .build import BuildResult
from .race import BASE_BLOCK, BLOCK, STRIDE, GuestSetupError, _read, parse_counters, run_guest_scenario

__all__ = ["StressResult", "run_stress", "parse_stress"]

STRESS_BLOCKS = 8


@dataclasses.dataclass
class StressResult:
    kernel: str
    version: str
    patches: list[str]
    writers: int
    readers: int
    seconds_run: int
    writes: int
    reads: int
    stale_reads: int
    stale_examples: list[str]
    stale_final: int
    counters: dict
    reports: list[dict]
    log: str
    seconds: float

    @property
    def passed(self) -> bool:
        return self.stale_reads == 0 and self.stale_final == 0 and not self.reports and self.writes > 0

    def to_json(self) -> dict:
        return {"kernel": self.kernel, "version": self.version, "patches": self.patches, "writers": self.writers,
                "readers": self.readers, "seconds_run": self.seconds_run, "writes": self.writes,
                "reads": self.reads, "stale_reads": self.stale_reads, "stale_examples": self.stale_examples,
                "stale_final": self.stale_final, "counters": self.counters, "reports": self.reports,
                "seconds": round(self.seconds, 1), "log": self.log, "passed": self.passed}


def parse_stress(work: Path, writers: int, readers: int) -> dict:
    """The writers' and readers' files in the work dir -> counts."""
    writes = reads = stale = 0
    examples: list[str] = []
    for k in range(writers):
        for line in (_read(work / f"stress.w{k}") or "").splitlines():
            f = line.split()
            if f[:1] == ["writes"] and len(f) >= 2 and f[1].isdigit():
                writes += int(f[1])
    for r in range(readers):
        for line in (_read(work / f"stress.r{r}") or "").splitlines():
            f = line.split()
            if f[:1] == ["reads"] and len(f) >= 4 and f[1].isdigit() and f[3].isdigit():
                reads += int(f[1])
                stale += int(f[3])
            elif f[:1] == ["stale"] and len(examples) < 10:
                examples.append(line.strip())
    final = 0
    for line in (_read(work / "stress.final") or "").splitlines():
        f = line.split()
        if len(f) == 3 and f[1] != f[2]:
            final += 1
    return {"writes": writes, "reads": reads, "stale_reads": stale, "stale_examples": examples, "stale_final": final}


def run_stress(built: BuildResult, *, seconds: int = 20, writers: int = 2, readers: int = 2,
               write_delay_ms: int = 1000, keep: bool = False, wait_counters: bool = True,
               progress: Optional[Callable[[str], None]] = None) -> StressResult:
    if not 1 <= writers <= 16 or not 1 <= readers <= 16 or not 1 <= seconds <= 600:
        raise ValueError("writers and readers must be in [1, 16], seconds in [1, 600]")
    started = time.monotonic()
    blocks = [BASE_BLOCK + k * STRIDE + off for k in range(writers) for off in range(STRESS_BLOCKS)]
    backing_bytes = max(64 << 20, (BASE_BLOCK + (writers + 1) * STRIDE) * BLOCK + (1 << 20))
    params = {"MODE": "stress", "WRITERS": writers, "READERS": readers, "STRESS_SECONDS": seconds,
              "STRESS_BLOCKS": STRESS_BLOCKS, "STRIDE": STRIDE, "BASE_BLOCK": BASE_BLOCK,
              "WRITE_DELAY_MS": write_delay_ms, "WAIT_COUNTERS": int(wait_counters)}
    # the last pass may start just before the end and take STRESS_BLOCKS delayed writes; then the final check
    wall = 90 + seconds + 2 * STRESS_BLOCKS * (write_delay_ms / 1000 + 1) + 20
    work, out = run_guest_scenario(built, params, blocks, backing_bytes=backing_bytes, wall=wall, keep=keep,
                                   progress=progress)
    try:
        if out.error and not any(r["kind"] != "died" for r in out.reports):
            raise GuestSetupError(f"the guest's setup failed: {out.error}")
        counts = parse_stress(work, writers, readers)
        return StressResult(kernel=str(built.kernel), version=built.version,
                            patches=[p["path"] for p in built.patches], writers=writers, readers=readers,
                            seconds_run=seconds, counters=parse_counters(_read(work / "counters")),
                            reports=out.reports, log=out.log, seconds=time.monotonic() - started, **counts)
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
