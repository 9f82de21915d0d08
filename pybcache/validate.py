"""Argument checks of the Python API: the one layer every public function calls before it changes anything.

Every check returns the value in its canonical type or raises, with a message of one shape::

    {name} must be <what is allowed>, got <the type name (TypeError) or the value's repr (ValueError)>

so that a caller's mistake names the argument and the allowed range. The Cython modules check with the
inline helpers of ``pybcache/bcache/_argcheck.pxd`` (no Python call on the hot path); their messages have the same
shape (``tests/package/test_validate.py`` feeds the same bad values to both and compares them).

What counts as what:

* an **int** is an ``int`` or a numpy integer; not a ``bool`` (an ``int`` subclass that is never a count),
  not a whole float such as ``8.0``, not a ``numpy.timedelta64`` (a numpy integer whose number is a
  duration in some unit, NaT included);
* a **number** is an int (as above) or a ``float``/numpy float; NaN, infinities and values outside the
  range are refused (a range with no upper bound, ``hi=None``, is ``[lo, inf)``: infinity is not in it).

A ``numpy.timedelta64`` is a duration, not a count or a number, in every check: numpy makes it a signed
integer (and registers it as ``numbers.Integral``), so without the dtype test it would pass as an int and
``int()``/``float()`` of its ``NaT`` would fail with a message naming no argument.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

__all__ = ["check_int", "check_number", "check_choice", "check_pow2", "check_bool", "check_instance", "check_callable",
           "range_text"]


def range_text(lo: float, hi: float | None, *, open_low: bool = False) -> str:
    """``[lo, hi]``, or ``(lo, hi]`` with ``open_low``, or ``[lo, inf)`` when ``hi`` is None (no upper
    bound): the allowed range as the messages print it."""
    return f"{'(' if open_low else '['}{lo}, {'inf)' if hi is None else f'{hi}]'}"


def _as_exact_int(value: Any) -> int | None:
    """``value`` as an ``int`` if it is an exact integer (int or numpy integer, not bool or timedelta64),
    else None."""
    if type(value) is int:
        return value
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return int(value)
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy is a dependency
        return None
    if isinstance(value, np.integer) and value.dtype.kind in "iu":
        return int(value)
    return None


def check_int(value: Any, name: str, lo: int, hi: int | None = None) -> int:
    """Return ``value`` as an ``int`` if it is an integer in [lo, hi].

    :param value: an ``int`` or numpy integer (not bool, float or timedelta64).
    :param name: the argument's name, quoted in the error.
    :param lo: the smallest allowed value.
    :param hi: the largest allowed value; None for no upper bound (the range prints as ``[lo, inf)``).
    :raises TypeError: ``{name} must be an int in [lo, hi], got {type}``.
    :raises ValueError: ``{name} must be in [lo, hi], got {value!r}``.
    """
    v = _as_exact_int(value)
    if v is None:
        raise TypeError(f"{name} must be an int in {range_text(lo, hi)}, got {type(value).__name__}")
    if v < lo or (hi is not None and v > hi):
        raise ValueError(f"{name} must be in {range_text(lo, hi)}, got {value!r}")
    return v


def check_number(value: Any, name: str, lo: float, hi: float | None = None, *, open_low: bool = False) -> float:
    """Return ``value`` as a ``float`` if it is a number in [lo, hi] (or (lo, hi] with ``open_low``).

    :param value: an int, float or numpy integer/float (not bool or timedelta64); not NaN, not infinite.
    :param name: the argument's name, quoted in the error.
    :param lo: the lower bound.
    :param hi: the upper bound; None for none but infinity itself (the range prints as ``[lo, inf)``).
    :param open_low: refuse ``lo`` itself. Default False.
    :raises TypeError: ``{name} must be a number in [lo, hi], got {type}``.
    :raises ValueError: ``{name} must be in [lo, hi], got {value!r}`` (NaN included).
    """
    if isinstance(value, float):
        v = float(value)                # np.float64 is a float subclass: return the plain float
    else:
        exact = _as_exact_int(value)
        if exact is None and not _is_float(value):
            raise TypeError(f"{name} must be a number in {range_text(lo, hi, open_low=open_low)}, "
                            f"got {type(value).__name__}")
        v = float(value)
    if not math.isfinite(v) or (v <= lo if open_low else v < lo) or (hi is not None and v > hi):
        raise ValueError(f"{name} must be in {range_text(lo, hi, open_low=open_low)}, got {value!r}")
    return v


def _is_float(value: Any) -> bool:
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy is a dependency
        return False
    return isinstance(value, np.floating)


def check_choice(value: Any, name: str, allowed: Sequence[str]) -> str:
    """Return ``value`` if it is one of the strings in ``allowed``.

    :raises TypeError: ``{name} must be a str, one of (...), got {type}``.
    :raises ValueError: ``{name} must be one of (...), got {value!r}``.
    """
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, one of {tuple(allowed)}, got {type(value).__name__}")
    if value not in allowed:
        raise ValueError(f"{name} must be one of {tuple(allowed)}, got {value!r}")
    return value


def check_pow2(value: Any, name: str, lo: int, hi: int) -> int:
    """Return ``value`` as an ``int`` if it is a power of two in [lo, hi] (errors as :func:`check_int`;
    ``{name} must be a power of two in [lo, hi], got {value!r}`` for any other int in range)."""
    v = check_int(value, name, lo, hi)
    if v <= 0 or v & (v - 1):  # 0 & -1 is 0 too
        raise ValueError(f"{name} must be a power of two in {range_text(lo, hi)}, got {value!r}")
    return v


def check_bool(value: Any, name: str) -> bool:
    """Return ``value`` if it is a ``bool`` (``True``/``False`` only: not 0/1, not a numpy bool, as the
    Cython modules' checks).

    :raises TypeError: ``{name} must be a bool, got {type}``.
    """
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    return value


def check_instance(value: Any, name: str, kind: type | tuple[type, ...], what: str) -> Any:
    """Return ``value`` if it is an instance of ``kind`` (for the arguments that are objects of the
    model: a clock, a memcg, a scenario).

    :param what: the expected type as the message says it (``"a Memcg"``, ``"a WbCompletion or None"``).
    :raises TypeError: ``{name} must be {what}, got {type}``.
    """
    if not isinstance(value, kind):
        raise TypeError(f"{name} must be {what}, got {type(value).__name__}")
    return value


def check_callable(value: Any, name: str, *, allow_none: bool = False) -> Any:
    """Return ``value`` if it is callable (or None, with ``allow_none``): for callbacks and factories.

    :raises TypeError: ``{name} must be callable[ or None], got {type}``.
    """
    if not callable(value) and not (allow_none and value is None):
        raise TypeError(f"{name} must be callable{' or None' if allow_none else ''}, got {type(value).__name__}")
    return value
