"""The report's real-fio section (``pybcache report``): the v2 cover letter's table from real fio against the served
model, beside nbdkit's memory plugin, when fio and nbdkit are installed; a line saying what to install
when they are not. Registered in :data:`pybcache.report.SECTIONS`.
"""
from __future__ import annotations

from typing import Any

from ..bcache.variants import SYNCS
from ..units import GiB

_RAN = """## fio over NBD: the v2 cover letter's table from real fio

Real fio (its `nbd` engine) runs the v2 cover letter's job (rw=randrw, 4 KiB reads, 128 KiB writes, iodepth 32,
{jobs} jobs, {size_gib:g} GiB) against `pybcache serve` for each variant and against nbdkit's own `memory`
plugin, every server up at once and the job run in rotating rounds ({rounds}), {seconds:g} s per server in
all, write delay {delay_ms:g} ms. IOPS and latencies are fio's; the counters are the served model's at
quiescence. The tracked variants' total IOPS relative to the unpatched model: {vs_none}; the served
model's relative to nbdkit-memory: {vs_memory}.

```
{table}
```
"""

_SKIPPED = """## fio over NBD: the v2 cover letter's table from real fio

Not run on this machine: {reason}. See docs/serve.md.
"""


def section(ctx: Any) -> str:
    """Run ``pybcache fio --engine nbd --memory-baseline`` (shorter with ``ctx.quick``) into the report."""
    from ..bcache.nbd.fio import fio_nbd, fio_table
    from ..bcache.nbd.server import ToolMissing, build_plugin, require_tools

    try:
        require_tools("fio", "nbdkit")
        build_plugin()
    except ToolMissing as exc:
        ctx.results["fio_nbd"] = {"skipped": str(exc)}
        return _SKIPPED.format(reason=exc)
    ctx.note("fio over NBD")
    size, seconds = (1 * GiB, 1.0) if ctx.quick else (10 * GiB, 10.0)
    res = fio_nbd(size=size, seconds=seconds, memory_baseline=True)
    ctx.results["fio_nbd"] = res

    def total(f: dict[str, float]) -> float:
        return f["read_iops"] + f["write_iops"]

    rows = {r["variant"]: r for r in res["rows"]}
    base = total(rows["none"]["fio"])
    mem = total(res["baseline"]["fio"])
    cfg = res["config"]
    return _RAN.format(
        jobs=cfg["jobs"], size_gib=cfg["size"] / GiB, rounds=cfg["rounds"], seconds=cfg["seconds"],
        delay_ms=cfg["write_delay_ns"] / 1e6,
        vs_none=", ".join(f"{v} {total(rows[v]['fio']) / base:.3f}x" for v in SYNCS),
        vs_memory=", ".join(f"{v} {total(r['fio']) / mem:.2f}x" for v, r in rows.items()),
        table=fio_table(res))
