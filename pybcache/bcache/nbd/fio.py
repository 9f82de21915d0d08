"""``pybcache fio --engine nbd``: the v2 cover letter's fio job, run by real fio (its ``nbd`` engine) against the
served cached-device model, one server per variant (docs/design.md, "Serving over NBD").

fio's own figures (IOPS, mean and p99 latencies) come from its JSON output; the model's counters come
from the server at quiescence. Optionally the same job runs against nbdkit's own ``memory`` plugin
(with nbdkit's ``delay`` filter adding the same write delay), the ceiling the served model is measured
against.
"""
from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from ..variants import LABELS, VARIANTS
from .server import MODEL_KEYS, Server, require_tools
from ..._console import format_table
from ...units import GiB, KiB, TiB
from ...validate import check_choice, check_int, check_number

__all__ = ["FIO_KEYS", "fio_nbd", "run_fio"]

#: fio's figures in each row's ``fio`` object (docs/serve.md)
FIO_KEYS = ("read_iops", "write_iops", "read_lat_mean_ms", "read_lat_p99_ms", "write_lat_mean_ms",
            "write_lat_p99_ms")
READ_SIZE = 4096
WRITE_SIZE = 128 * KiB
IODEPTH = 32

Progress = Callable[[Iterable[Any], int], Iterable[Any]]


def _fio_command(uri: str, *, jobs: int, seconds: float, size: int, out: str, seed: int) -> list[str]:
    """The v2 cover letter's job: rw=randrw, 4 KiB reads, 128 KiB writes, iodepth 32, ``jobs`` jobs; fio's random
    offsets from ``seed`` (fio repeats one sequence by default, so rounds need their own)."""
    return ["fio", "--name=posted", "--ioengine=nbd", f"--uri={uri}", "--rw=randrw",
            f"--bs={READ_SIZE},{WRITE_SIZE}", f"--iodepth={IODEPTH}", f"--numjobs={jobs}", f"--size={size}",
            "--time_based", f"--runtime={max(1, round(seconds * 1000))}ms", "--group_reporting",
            "--lat_percentiles=1", f"--randseed={seed}", "--output-format=json", f"--output={out}"]


def _figures(job: dict[str, Any]) -> dict[str, float]:
    def side(name: str) -> tuple[float, float, float]:
        d = job[name]
        lat = d["lat_ns"]
        p99 = lat.get("percentile", {}).get("99.000000", 0)
        return float(d["iops"]), lat["mean"] / 1e6, p99 / 1e6

    r, w = side("read"), side("write")
    return {"read_iops": r[0], "write_iops": w[0], "read_lat_mean_ms": r[1], "read_lat_p99_ms": r[2],
            "write_lat_mean_ms": w[1], "write_lat_p99_ms": w[2]}


def run_fio(uri: str, *, jobs: int, seconds: float, size: int, seed: int = 1) -> dict[str, float]:
    """Run the v2 cover letter's job against ``uri`` and return fio's figures (``FIO_KEYS``); ``seed`` seeds fio's
    random offsets.

    :raises RuntimeError: fio failed or overran its bound (``seconds`` + 60 s); the message has its
        last lines.
    """
    with tempfile.TemporaryDirectory(prefix="pybcache-fio-") as tmp:
        out = os.path.join(tmp, "fio.json")
        cmd = _fio_command(uri, jobs=jobs, seconds=seconds, size=size, out=out, seed=seed)
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


@contextlib.contextmanager
def _memory_server(*, size: int, write_delay_ns: int, threads: int) -> Iterator[str]:
    """nbdkit's ``memory`` plugin (plus its ``delay`` filter for the write delay); yields its URI."""
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
            yield f"nbd+unix:///?socket={sock}"
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)
            if proc.stderr:
                proc.stderr.close()


def _memory_baseline(*, size: int, write_delay_ns: int, jobs: int, seconds: float, threads: int) -> dict[str, float]:
    """The v2 cover letter's job once against nbdkit's ``memory`` plugin."""
    with _memory_server(size=size, write_delay_ns=write_delay_ns, threads=threads) as uri:
        return run_fio(uri, jobs=jobs, seconds=seconds, size=size)


def _combine(parts: list[dict[str, float]]) -> dict[str, float]:
    """fio's figures over equal-length slices: IOPS averaged, mean latencies weighted by each slice's
    IOPS, p99 latencies the median of the slices' (percentiles do not add up)."""
    out: dict[str, float] = {}
    for side in ("read", "write"):
        iops = [p[f"{side}_iops"] for p in parts]
        total = sum(iops)
        out[f"{side}_iops"] = total / len(parts)
        out[f"{side}_lat_mean_ms"] = (sum(p[f"{side}_lat_mean_ms"] * n for p, n in zip(parts, iops)) / total
                                      if total else 0.0)
        out[f"{side}_lat_p99_ms"] = statistics.median(p[f"{side}_lat_p99_ms"] for p in parts)
    return {k: out[k] for k in FIO_KEYS}


def fio_nbd(*, size: int = 10 * GiB, jobs: int | None = None, seconds: float = 3.0,
            variants: Sequence[str] = VARIANTS, write_delay_ns: int = 5_000_000, threads: int = 64,
            memory_baseline: bool = False, rounds: int | None = None,
            progress: Progress | None = None) -> dict[str, Any]:
    """Run the v2 cover letter's fio job with real fio against a fresh served model per variant.

    :param size: device size and fio's working set, bytes, a multiple of 128 KiB up to 1 TiB. Default 10 GiB.
    :param jobs: fio jobs (``numjobs``, one NBD connection each), in [1, 256]; default
        ``min(16, os.cpu_count())``.
    :param seconds: fio's run time per variant over all rounds, in (0, 3600]. Default 3.
    :param variants: a non-empty subset of ``("none", "global", "page", "atomic")``, no repeats.
    :param write_delay_ns: the served model's write delay, in [0, 10**10] ns. Default 5 ms (as serve).
    :param threads: nbdkit request threads per connection, in [1, 1024]. Default 64.
    :param memory_baseline: also run the job against nbdkit's ``memory`` plugin (same write delay
        through nbdkit's ``delay`` filter) and report it under ``baseline``.
    :param rounds: every server runs the job this many times, ``seconds / rounds`` each, in rotating
        order (all servers stay up meanwhile), in [1, 100]; default ``seconds // 2`` clamped to [1, 5].
        IOPS are averaged over rounds, mean latencies weighted by IOPS, p99 latencies the median of
        the rounds'. The model's counters cover every round.
    :param progress: optional ``(iterable, total) -> iterable`` wrapper (a progress bar).
    :returns: ``{"rows": [{"variant", "fio": {FIO_KEYS}, "model": {MODEL_KEYS...}}], "baseline":
        {"fio": {...}} or None, "config": {...}}``.
    :raises pybcache.bcache.nbd.server.ToolMissing: fio or nbdkit (or the plugin's build requirements) missing.
    """
    if isinstance(variants, str):
        variants = [v.strip() for v in variants.split(",") if v.strip()]
    if not isinstance(variants, (list, tuple)) or not variants:
        raise TypeError(f"variants must be a non-empty list from {VARIANTS}")
    for v in variants:
        check_choice(v, "variants", VARIANTS)
    if len(set(variants)) != len(variants):
        raise ValueError(f"variants must not repeat, got {list(variants)}")
    size = check_int(size, "size", WRITE_SIZE, TiB)
    if size % WRITE_SIZE:
        raise ValueError(f"size must be a multiple of {WRITE_SIZE} in [{WRITE_SIZE}, {TiB}], got {size!r}")
    jb = check_int(min(16, os.cpu_count() or 1) if jobs is None else jobs, "jobs", 1, 256)
    check_number(seconds, "seconds", 0, 3600, open_low=True)
    rnds = check_int(max(1, min(5, int(seconds // 2))) if rounds is None else rounds, "rounds", 1, 100)
    write_delay_ns = check_int(write_delay_ns, "write_delay_ns", 0, 10 ** 10)
    require_tools("fio", "nbdkit")

    slice_s = seconds / rnds
    names: list[str] = list(variants) + (["memory"] if memory_baseline else [])
    parts: dict[str, list[dict[str, float]]] = {n: [] for n in names}
    servers: dict[str, Server] = {}
    with contextlib.ExitStack() as stack:
        uris = {}
        for v in variants:
            servers[v] = stack.enter_context(Server(sync=v, size=size, write_delay_ns=write_delay_ns, threads=threads))
            uris[v] = servers[v].uri
        if memory_baseline:
            uris["memory"] = stack.enter_context(_memory_server(size=size, write_delay_ns=write_delay_ns,
                                                                threads=threads))
        # Every server runs the job once per round, the order rotating, so that a change in the
        # machine's load falls on every variant alike.
        order = [(k, names[(j + k) % len(names)]) for k in range(rnds) for j in range(len(names))]
        it: Iterable[tuple[int, str]] = progress(order, len(order)) if progress else order
        for k, name in it:  # one random sequence per round, the same for every server in it
            parts[name].append(run_fio(uris[name], jobs=jb, seconds=slice_s, size=size, seed=1 + k))
    rows: list[dict[str, Any]] = []
    for v in variants:
        stats = servers[v].stats  # written at quiescence, when the ExitStack stopped the server
        if stats is None:
            raise RuntimeError(f"the {v} server wrote no counters")
        model = {k: stats[k] for k in MODEL_KEYS}
        model.update({k: stats[k] for k in ("read_hits", "miss_collisions")})
        rows.append({"variant": v, "fio": _combine(parts[v]), "model": model})
    baseline = {"fio": _combine(parts["memory"])} if memory_baseline else None
    return {"rows": rows, "baseline": baseline,
            "config": {"engine": "nbd", "size": size, "jobs": jb, "seconds": seconds, "iodepth": IODEPTH,
                       "read_size": READ_SIZE, "write_size": WRITE_SIZE, "rw": "randrw",
                       "write_delay_ns": write_delay_ns, "threads": threads, "variants": list(variants),
                       "rounds": rnds}}




def fio_table(res: dict[str, Any]) -> str:
    """The v2 cover letter's table layout: fio's figures, then the lab's counters, one column per variant (and
    nbdkit's memory plugin last when it was measured)."""
    rows = res["rows"]
    base = res.get("baseline")
    cols = [r["fio"] for r in rows] + ([base["fio"]] if base else [])
    pad = [""] if base else []
    none = next((r for r in rows if r["variant"] == "none"), None)

    def total(f: dict[str, float]) -> float:
        return f["read_iops"] + f["write_iops"]

    def vs(f: dict[str, float], ref: dict[str, float] | None) -> str:
        return f"{total(f) / total(ref):.3f}x" if ref and total(ref) else "-"

    def model(key: str, fmt: Any = "{:,}".format) -> list[str]:
        return [fmt(r["model"][key]) for r in rows] + pad

    def inserts(r: dict[str, Any]) -> str:
        reads = r["model"]["reads"]
        share = f" ({100 * r['model']['cache_inserts'] / reads:.1f}%)" if reads else ""
        return f"{r['model']['cache_inserts']:,}{share}"

    body = [
        ["Read IOPS"] + [f"{f['read_iops']:,.0f}" for f in cols],
        ["Write IOPS"] + [f"{f['write_iops']:,.0f}" for f in cols],
        ["Total IOPS"] + [f"{total(f):,.0f}" for f in cols],
        ["  vs unpatched"] + [vs(f, none["fio"] if none else None) for f in cols],
        ["Avg R Lat"] + [f"{f['read_lat_mean_ms']:.2f} ms" for f in cols],
        ["p99 R Lat"] + [f"{f['read_lat_p99_ms']:.2f} ms" for f in cols],
        ["Avg W Lat"] + [f"{f['write_lat_mean_ms']:.2f} ms" for f in cols],
        ["p99 W Lat"] + [f"{f['write_lat_p99_ms']:.2f} ms" for f in cols],
    ]
    if base:
        body.append(["  vs nbdkit memory"] + [vs(f, base["fio"]) for f in cols])
    body += [
        ["Read bypasses"] + model("read_bypasses"),
        ["Cache inserts"] + [inserts(r) for r in rows] + pad,
        ["Stale reads"] + model("stale_reads"),
        ["Stale cached blocks"] + model("stale_cached_blocks"),
    ]
    headers = ["Metric"] + [LABELS[r["variant"]] for r in rows] + (["nbdkit memory"] if base else [])
    return format_table(headers, body)
