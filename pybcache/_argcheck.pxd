# Argument checks shared by the Cython modules (inline: compiled into each module that cimports them).
from libc.stdint cimport int64_t

cimport numpy as cnp


cdef inline str _typename(object x):
    return type(x).__name__


cdef inline int64_t _as_int(object value, str name) except? -1:
    """An exact integer (int or numpy integer; not bool, float or timedelta) as int64, else TypeError;
    ValueError if it does not fit."""
    if type(value) is int:
        try:
            return <int64_t>value
        except OverflowError:
            raise ValueError(f"{name} must be an integer in [0, 2**62), got {value!r}") from None
    # numpy integers count, but not timedelta64 (a numpy integer subclass of kind "m")
    if isinstance(value, bool) or not (isinstance(value, int) or
                                       (isinstance(value, cnp.integer) and value.dtype.kind in "iu")):
        raise TypeError(f"{name} must be an int, got {_typename(value)}")
    try:
        return <int64_t>int(value)
    except OverflowError:
        raise ValueError(f"{name} must be an integer in [0, 2**62), got {value!r}") from None


cdef inline str _choice(object value, str name, tuple allowed):
    """``value`` if it is one of the strings in ``allowed``; TypeError or ValueError naming ``name``."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, one of {allowed}, got {_typename(value)}")
    if value not in allowed:
        raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
    return value
