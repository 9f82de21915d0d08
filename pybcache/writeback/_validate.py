"""Argument checks shared by the writeback model's public constructors and functions.

Every check raises before anything is changed, with a message that names the argument and the allowed
range, so a caller's mistake never leaves a half-updated model behind.
"""
from __future__ import annotations

import math
import numbers
from typing import Any, Iterable

__all__ = ["check_int", "check_number", "check_choice", "check_bool", "check_instance"]


def check_int(name: str, value: Any, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """Return ``value`` as an ``int`` if it is an integer inside ``[minimum, maximum]``.

    :param name: the argument's name, quoted in the error.
    :param value: the value to check; ``bool`` is refused even though it is an ``int`` subclass.
    :param minimum: the smallest allowed value, or None for no lower bound.
    :param maximum: the largest allowed value, or None for no upper bound.
    :raises TypeError: if ``value`` is not an integer.
    :raises ValueError: if ``value`` is outside the range.
    """
    if type(value) is int and (minimum is None or value >= minimum) and (maximum is None or value <= maximum):
        return value  # the common case, without the slower abstract-class checks
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or _is_duration(value):
        raise TypeError(f"{name} must be an int{_range_text(minimum, maximum)}, got {type(value).__name__}")
    value = int(value)
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise ValueError(f"{name} must be an int{_range_text(minimum, maximum)}, got {value}")
    return value


def _is_duration(value: Any) -> bool:
    """numpy.timedelta64 registers as an Integral (so a Real) but is a duration, not a count; float()
    of its NaT even fails with a message naming no argument."""
    return type(value).__name__ == "timedelta64"


def check_number(name: str, value: Any, *, minimum: float | None = None, maximum: float | None = None,
                 exclusive_minimum: bool = False) -> float:
    """Return ``value`` as a finite ``float`` inside the range.

    :param name: the argument's name, quoted in the error.
    :param value: an int or float (not bool, not NaN, not infinite).
    :param minimum: the lower bound, or None.
    :param maximum: the upper bound, or None.
    :param exclusive_minimum: if True the lower bound itself is refused (``> minimum``).
    :raises TypeError: if ``value`` is not a real number.
    :raises ValueError: if ``value`` is not finite or outside the range.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or _is_duration(value):
        raise TypeError(f"{name} must be a number{_range_text(minimum, maximum, exclusive_minimum)}, "
                        f"got {type(value).__name__}")
    value = float(value)
    bad = not math.isfinite(value)
    if minimum is not None:
        bad = bad or (value <= minimum if exclusive_minimum else value < minimum)
    if maximum is not None:
        bad = bad or value > maximum
    if bad:
        raise ValueError(f"{name} must be a finite number{_range_text(minimum, maximum, exclusive_minimum)}, "
                         f"got {value!r}")
    return value


def check_choice(name: str, value: Any, allowed: Iterable[str]) -> str:
    """Return ``value`` if it is one of the ``allowed`` strings.

    :raises TypeError: if ``value`` is not a string.
    :raises ValueError: if it is not one of ``allowed``.
    """
    allowed = tuple(allowed)
    if not isinstance(value, str):
        raise TypeError(f"{name} must be one of {', '.join(map(repr, allowed))}, got {type(value).__name__}")
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, allowed))}, got {value!r}")
    return value


def check_bool(name: str, value: Any) -> bool:
    """Return ``value`` if it is a ``bool``.

    :raises TypeError: otherwise.
    """
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__}")
    return value


def check_instance(name: str, value: Any, kind: type | tuple[type, ...], what: str) -> Any:
    """Return ``value`` if it is an instance of ``kind``.

    :param what: how to describe the expected type in the error (``"a Memcg"``).
    :raises TypeError: otherwise.
    """
    if not isinstance(value, kind):
        raise TypeError(f"{name} must be {what}, got {type(value).__name__}")
    return value


def _range_text(minimum: float | None, maximum: float | None, exclusive_minimum: bool = False) -> str:
    if minimum is not None and maximum is not None:
        return f" in {'(' if exclusive_minimum else '['}{minimum}, {maximum}]"
    if minimum is not None:
        return f" {'>' if exclusive_minimum else '>='} {minimum}"
    if maximum is not None:
        return f" <= {maximum}"
    return ""
