"""Binary size units: the constants, the parsers of sizes and durations as typed, and the printed forms.

The one home of these (the API, the command line, the report, the benchmarks and the plots import them
from here). Every unit is binary: ``K`` and ``KiB`` are both 1024 bytes, as in the v2 cover letter's tables, whose
"1 TB" is 1 TiB.
"""
from __future__ import annotations

import re

__all__ = ["KiB", "MiB", "GiB", "TiB", "PiB", "parse_size", "parse_duration", "format_bytes", "bytes_label"]

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
TiB = 1 << 40
PiB = 1 << 50

_MULTIPLIERS = {"": 1, "K": KiB, "M": MiB, "G": GiB, "T": TiB, "P": PiB}
# at most 30 digits: enough for any size, and int() refuses strings past 4300 digits with a ValueError
_SIZE_RE = re.compile(r"^\s*(\d{1,30})\s*([KMGTP]?)(?:i?B)?\s*$", re.IGNORECASE)
_FORMAT_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")
_LABEL_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def parse_size(text: object, *, name: str = "size") -> int:
    """Parse ``512``, ``4K``, ``32M``, ``10G``, ``1T``, ``1P`` (binary units; ``4KiB`` and ``4kb`` too) into
    bytes.

    :param text: the size as typed (anything whose ``str()`` is such a size).
    :param name: the argument's name, quoted in the error message. Default ``"size"``.
    :returns: the size in bytes, > 0.
    :raises ValueError: naming ``name`` if the text is not a positive size.
    """
    m = _SIZE_RE.match(str(text))
    if not m:
        raise ValueError(f"{name}: {text!r} is not a size (use e.g. 512, 4K, 32M, 10G, 1T)")
    value = int(m.group(1)) * _MULTIPLIERS[m.group(2).upper()]
    if value <= 0:
        raise ValueError(f"{name}: size must be > 0, got {text!r}")
    return value


def parse_duration(text: object, *, name: str = "duration", max_ns: int = 10 ** 10) -> int:
    """``5ms``, ``250us``, ``1s``, ``0`` or ``1500ns`` as nanoseconds (a bare number is seconds).

    :param text: the duration as typed.
    :param name: the argument's name, quoted in the error message. Default ``"duration"``.
    :param max_ns: the largest duration taken. Default 10 s.
    :raises ValueError: naming ``name`` if the text is not a duration in [0, ``max_ns``].
    """
    m = re.fullmatch(r"\s*(\d{1,12}(?:\.\d{0,9})?)\s*(ns|us|ms|s)?\s*", str(text))
    if not m:
        raise ValueError(f"{name}: {text!r} is not a duration (use e.g. 0, 500us, 5ms, 1s)")
    scale = {"ns": 1, "us": 10 ** 3, "ms": 10 ** 6, "s": 10 ** 9, None: 10 ** 9}[m.group(2)]
    ns = round(float(m.group(1)) * scale)
    if ns > max_ns:
        raise ValueError(f"{name}: must be in [0, {max_ns / 10 ** 9:g}s], got {text!r}")
    return ns


def format_bytes(n: float) -> str:
    """A size for tables, in the style of the v2 cover letter's (``256 B``, ``64.25 KiB``, ``2.51 MiB``): at most two
    decimals, trailing zeros dropped, TiB the largest unit."""
    n = float(n)
    *smaller, unit = _FORMAT_UNITS  # the largest unit unless a smaller one holds the size
    for u in smaller:
        if n < 1024:
            unit = u
            break
        n /= 1024
    if unit == "B":
        return f"{int(n)} B"
    return f"{n:.2f}".rstrip("0").rstrip(".") + f" {unit}"


def bytes_label(x: float) -> str:
    """A size for a plot's tick or axis label: ``%g`` of the value in the largest unit it reaches
    (``32 MiB``, ``1.5 GiB``, ``-4 KiB``), PiB the largest unit."""
    *smaller, largest = _LABEL_UNITS
    for unit in smaller:
        if abs(x) < 1024:
            return f"{x:g} {unit}"
        x /= 1024
    return f"{x:g} {largest}"
