# Argument checks shared by the Cython modules (inline: compiled into each module that cimports them).
# The Python layer is pybcache/validate.py; messages here keep its shape, "{name} must be <allowed>, got
# <type name (TypeError) | repr(value) (ValueError)>", with the same rules (bool, whole floats and
# timedelta64/NaT are not ints; NaN is out of every range). tests/package/test_validate.py compares the two.
from libc.stdint cimport int64_t, uint64_t

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


cdef inline int _check_byte_range(object offset, object length, uint64_t device_size, uint64_t *off,
                                  uint64_t *ln) except -1:
    """[offset, offset + length) as a validated byte range of a device of ``device_size`` bytes, with the
    errors BypassWriteTracker gives; nothing is stored unless it is valid."""
    cdef int64_t o = _as_int(offset, "offset")
    cdef int64_t n = _as_int(length, "length")
    if o < 0 or <uint64_t>o >= device_size:
        raise ValueError(f"offset must be in [0, {device_size}) (device_size), got {offset!r}")
    if n <= 0:
        raise ValueError(f"length must be > 0, got {length!r}")
    if <uint64_t>n > device_size - <uint64_t>o:
        raise ValueError(f"range [offset, offset + length) = [{offset}, {int(offset) + int(length)}) ends past "
                         f"device_size {device_size}")
    off[0] = <uint64_t>o
    ln[0] = <uint64_t>n
    return 0


cdef inline object _check_wait_timeout(object value):
    """A ``wait_timeout`` argument as seconds (a float in (0, 1e6]) or None (no bound): the one check of
    it (the tracker's and the native drivers'). int, float or a numpy integer or float; not bool or
    timedelta64 (whose number is not seconds). TypeError or ValueError naming it."""
    if value is None:
        return None
    if isinstance(value, bool) or not (isinstance(value, (int, float, cnp.floating)) or
                                       (isinstance(value, cnp.integer) and value.dtype.kind in "iu")):
        raise TypeError(f"wait_timeout must be a number of seconds in (0, 1e+06] or None, got {_typename(value)}")
    cdef double v = float(value)
    if not (0.0 < v <= 1e6):  # NaN fails too; 1e6 s keeps the nanosecond arithmetic far from overflow
        raise ValueError(f"wait_timeout must be in (0, 1e+06] seconds or None, got {value!r}")
    return v
