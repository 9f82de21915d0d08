"""``pybcache fio --engine nbd``: the seed's fio job, run by real fio (its ``nbd`` engine) against the
served cached-device model, one server per variant (DESIGN 6).

fio's own figures (IOPS, mean and p99 latencies) come from its JSON output; the model's counters come
from the server at quiescence. Optionally the same job runs against nbdkit's own ``memory`` plugin
(with nbdkit's ``delay`` filter adding the same write delay), the ceiling the served model is measured
against.
"""
from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from .serve import MODEL_KEYS, SYNCS, Server, require_tools

__all__ = ["FIO_KEYS", "fio_nbd", "run_fio"]

#: fio's figures in each row's ``fio`` object (DESIGN 6)
FIO_KEYS = ("read_iops", "write_iops", "read_lat_mean_ms", "read_lat_p99_ms", "write_lat_mean_ms",
            "write_lat_p99_ms")
READ_SIZE = 4096
WRITE_SIZE = 128 * 1024
IODEPTH = 32

Progress = Callable[[Iterable[Any], int], Iterable[Any]]


def _fio_command(uri: str, *, jobs: int, seconds: float, size: int, out: str) -> list[str]:
    """The seed's job: rw=randrw, 4 KiB reads, 128 KiB writes, iodepth 32, ``jobs`` jobs."""
    return ["fio", "--name=seed", "--ioengine=nbd", f"--uri={uri}", "--rw=randrw",
            f"--bs={READ_SIZE},{WRITE_SIZE}", f"--iodepth={IODEPTH}", f"--numjobs={jobs}", f"--size={size}",
            "--time_based", f"--runtime={max(1, round(seconds * 1000))}ms", "--group_reporting",
            "--lat_percentiles=1", "--output-format=json", f"--output={out}"]


def _figures(job: dict[str, Any]) -> dict[str, float]:
    def side(name: str) -> tuple[float, float, float]:
        d = job[name]
        lat = d["lat_ns"]
        p99 = lat.get("percentile", {}).get("99.000000", 0)
        return float(d["iops"]), lat["mean"] / 1e6, p99 / 1e6

    r, w = side("read"), side("write")
    return {"read_iops": r[0], "write_iops": w[0], "read_lat_mean_ms": r[1], "read_lat_p99_ms": r[2],
            "write_lat_mean_ms": w[1], "write_lat_p99_ms": w[2]}


def run_fio(uri: str, *, jobs: int, seconds: float, size: int) -> dict[str, float]:
    """Run the seed's job against ``uri`` and return fio's figures (``FIO_KEYS``).

    :raises RuntimeError: fio failed or overran its bound (``seconds`` + 60 s); the message has its
        last lines.
    """
    with tempfile.TemporaryDirectory(prefix="pybcache-fio-") as tmp:
        out = os.path.join(tmp, "fio.json")
        cmd = _fio_command(uri, jobs=jobs, seconds=seconds, size=size, out=out)
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60, check=False)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"fio did not finish within {seconds + 60:g} s") from None
        if res.returncode != 0 or not os.path.exists(out):
            tail = " | ".join((res.stderr or res.stdout).strip().splitlines()[-3:])
            raise RuntimeError(f"fio exited with status {res.returncode}: {tail}")
        with open(out) as f:
            data = json.load(f)
    job = data["jobs"][0]
    if job.get("error"):
        raise RuntimeError(f"fio reported error {job['error']} against {uri}")
    return _figures(job)


def _memory_baseline(*, size: int, write_delay_ns: int, jobs: int, seconds: float, threads: int) -> dict[str, float]:
    """The same job against nbdkit's ``memory`` plugin (plus its ``delay`` filter for the write delay)."""
    with tempfile.TemporaryDirectory(prefix="pybcache-nbd-") as tmp:
        sock, pidfile = os.path.join(tmp, "nbd.sock"), os.path.join(tmp, "pid")
        cmd = ["nbdkit", "--foreground", "--exit-with-parent", "-U", sock, "-P", pidfile, "--threads", str(threads)]
        if write_delay_ns:
            cmd += ["--filter=delay"]
        cmd += ["memory", str(size)]
        if write_delay_ns:
            cmd += [f"wdelay={write_delay_ns / 1e6:g}ms"]
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                start_new_session=True)
        try:
            deadline = time.monotonic() + 20
            while not os.path.exists(pidfile):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("nbdkit memory did not start: "
                                       + (proc.stderr.read().decode(errors="replace").strip() if proc.stderr and
                                          proc.poll() is not None else "timeout"))
                time.sleep(0.02)
            return run_fio(f"nbd+unix:///?socket={sock}", jobs=jobs, seconds=seconds, size=size)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)
            if proc.stderr:
                proc.stderr.close()


def fio_nbd(*, size: int = 10 << 30, jobs: int | None = None, seconds: float = 3.0,
            variants: Sequence[str] = SYNCS, write_delay_ns: int = 0, threads: int = 64,
            memory_baseline: bool = False, progress: Progress | None = None) -> dict[str, Any]:
    """Run the seed's fio job with real fio against a fresh served model per variant.

    :param size: device size and fio's working set, bytes, a multiple of 128 KiB up to 1 TiB. Default 10 GiB.
    :param jobs: fio jobs (``numjobs``, one NBD connection each), in [1, 256]; default
        ``min(16, os.cpu_count())``.
    :param seconds: fio's run time per variant, in (0, 3600]. Default 3.
    :param variants: a non-empty subset of ``("none", "global", "page", "atomic")``, no repeats.
    :param write_delay_ns: the served model's write delay, in [0, 10**10]. Default 0.
    :param threads: nbdkit request threads per connection, in [1, 1024]. Default 64.
    :param memory_baseline: also run the job against nbdkit's ``memory`` plugin (same write delay
        through nbdkit's ``delay`` filter) and report it under ``baseline``.
    :param progress: optional ``(iterable, total) -> iterable`` wrapper (a progress bar).
    :returns: ``{"rows": [{"variant", "fio": {FIO_KEYS}, "model": {MODEL_KEYS...}}], "baseline":
        {"fio": {...}} or None, "config": {...}}``.
    :raises pybcache.serve.ToolMissing: fio or nbdkit (or the plugin's build requirements) missing.
    """
    if isinstance(variants, str):
        variants = [v.strip() for v in variants.split(",") if v.strip()]
    if not isinstance(variants, (list, tuple)) or not variants:
        raise TypeError(f"variants must be a non-empty list from {SYNCS}")
    for v in variants:
        if v not in SYNCS:
            raise ValueError(f"variants: unknown value {v!r} (allowed: {', '.join(SYNCS)})")
    if len(set(variants)) != len(variants):
        raise ValueError(f"variants must not repeat, got {list(variants)}")
    if isinstance(size, bool) or not isinstance(size, int) or not 0 < size <= 1 << 40 or size % WRITE_SIZE:
        raise ValueError(f"size must be a positive multiple of {WRITE_SIZE} up to 1 TiB, got {size!r}")
    jb = min(16, os.cpu_count() or 1) if jobs is None else jobs
    if isinstance(jb, bool) or not isinstance(jb, int) or not 1 <= jb <= 256:
        raise ValueError(f"jobs must be an int in [1, 256], got {jobs!r}")
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds <= 3600:
        raise ValueError(f"seconds must be in (0, 3600], got {seconds!r}")
    require_tools("fio", "nbdkit")

    steps: list[str] = (["memory"] if memory_baseline else []) + list(variants)
    it: Iterable[str] = progress(steps, len(steps)) if progress else steps
    rows: list[dict[str, Any]] = []
    baseline = None
    for step in it:
        if step == "memory":
            baseline = {"fio": _memory_baseline(size=size, write_delay_ns=write_delay_ns, jobs=jb,
                                                seconds=seconds, threads=threads)}
            continue
        server = Server(sync=step, size=size, write_delay_ns=write_delay_ns, threads=threads)
        with server:
            figures = run_fio(server.uri, jobs=jb, seconds=seconds, size=size)
        stats = server.stats
        if stats is None:
            raise RuntimeError(f"the {step} server wrote no counters")
        model = {k: stats[k] for k in MODEL_KEYS}
        model.update({k: stats[k] for k in ("read_hits", "miss_collisions")})
        rows.append({"variant": step, "fio": figures, "model": model})
    return {"rows": rows, "baseline": baseline,
            "config": {"engine": "nbd", "size": size, "jobs": jb, "seconds": seconds, "iodepth": IODEPTH,
                       "read_size": READ_SIZE, "write_size": WRITE_SIZE, "rw": "randrw",
                       "write_delay_ns": write_delay_ns, "threads": threads, "variants": list(variants)}}
