"""What every report section shares: the context it runs in, table and time formatting, the machine's facts."""
from __future__ import annotations

import os
import platform
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from ..units import format_bytes

__all__ = ["ReportContext", "fmt_ns", "table", "find", "cpu_model", "mem_total", "loadavg", "version_of"]


@dataclass
class ReportContext:
    """What a section needs: where to write plots, how long to run, and the collected results."""

    out_dir: str
    quick: bool = False
    seed: int = 0
    kernel: bool = False        # run pybcache kernel compare (minutes) instead of showing the saved one
    results: dict[str, Any] = field(default_factory=dict)
    plots: list[tuple[str, str]] = field(default_factory=list)
    note: Callable[[str], None] = field(default=lambda label: None)

    def plot(self, name: str, title: str) -> str:
        """The path of a new plot file ``name`` (recorded with its title for the report's plot list)."""
        self.plots.append((name, title))
        return os.path.join(self.out_dir, name)


def fmt_ns(ns: float) -> str:
    """A latency with a unit that keeps two or three significant digits (``110 ns``, ``1.5 µs``, ``70 µs``)."""
    if ns >= 1e6:
        return f"{ns / 1e6:.1f} ms"
    if ns >= 1e4:
        return f"{ns / 1e3:.0f} µs"
    if ns >= 1e3:
        return f"{ns / 1e3:.1f} µs"
    return f"{ns:.0f} ns"


def table(headers: list[str], rows: list[list[Any]]) -> str:
    """A Markdown table."""
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def find(rows: Iterable[dict[str, Any]], what: str, **match: Any) -> dict[str, Any]:
    """The first row whose items equal ``match``; KeyError naming ``what`` and ``match`` if there is none
    (a figure the report needs is missing: never a 0 in its place)."""
    for row in rows:
        if all(row.get(k) == v for k, v in match.items()):
            return row
    raise KeyError(f"report: no {what} row with {match}")


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def mem_total() -> str:
    try:
        return format_bytes(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return "unknown"


def loadavg() -> str:
    try:
        return ", ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def version_of(module: str) -> str:
    try:
        return __import__(module).__version__
    except Exception:  # noqa: BLE001 - optional, only reported
        return "not installed"
