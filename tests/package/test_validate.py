"""pybcache.validate, the one Python validation layer, and the Cython layer's messages against it.

Every message has the shape ``{name} must be <allowed>, got <type name | repr(value)>``. The tests feed the
same bad values to an entry point validated in Python (:func:`pybcache.race`, through pybcache.validate)
and one validated in Cython (``BypassWriteTracker``/``FaultInjection``, through ``_argcheck.pxd``), and
compare the exception class and the message's shape.
"""
from __future__ import annotations

import math
import re

import numpy as np
import pytest

import pybcache
from pybcache import validate
from pybcache.bcache import cachedev

pytestmark = pytest.mark.native

SHAPE = re.compile(r"^(?P<name>[A-Za-z_]+) must be (?P<allowed>.+), got (?P<got>.+)$")

# values that are not ints: a bool, whole floats, strings, durations (NaT included), a numpy bool
NOT_INTS = [True, False, 8.0, np.float64(8.0), "8", np.timedelta64(8, "s"), np.timedelta64("NaT"),
            np.datetime64("NaT"), np.bool_(True), [8]]
# ints outside [0, 1 << 20] (pool_pages' range on both sides)
OUT_OF_RANGE_INTS = [-1, (1 << 20) + 1, np.int64(-5), 2**64, -(2**70)]
NOT_NUMBERS = [True, "0.5", None, np.timedelta64(1, "s"), np.datetime64("NaT"), np.bool_(False), 0.5j]
OUT_OF_RANGE_NUMBERS = [math.nan, np.float64("nan"), -0.1, 1.5, math.inf, -math.inf, np.int64(2)]


def _message(exc_type, fn):
    with pytest.raises(exc_type) as info:
        fn()
    return str(info.value)


def _parts(message: str, name: str) -> dict[str, str]:
    m = SHAPE.match(message)
    assert m, f"message does not have the shape '{{name}} must be ..., got ...': {message!r}"
    assert m["name"] == name, message
    return m.groupdict()


@pytest.mark.parametrize("value", NOT_INTS, ids=repr)
def test_python_and_cython_refuse_the_same_non_ints_with_a_typeerror_of_one_shape(value):
    py = _parts(_message(TypeError, lambda: pybcache.race(pool_pages=value)), "pool_pages")
    cy = _parts(_message(TypeError, lambda: pybcache.BypassWriteTracker(pybcache.GiB, pool_pages=value)),
                "pool_pages")
    assert py["got"] == cy["got"] == type(value).__name__
    assert py["allowed"].startswith("an int") and cy["allowed"].startswith("an int")


@pytest.mark.parametrize("value", OUT_OF_RANGE_INTS, ids=repr)
def test_python_and_cython_refuse_the_same_out_of_range_ints_with_a_valueerror_of_one_shape(value):
    py = _parts(_message(ValueError, lambda: pybcache.race(pool_pages=value)), "pool_pages")
    cy = _parts(_message(ValueError, lambda: pybcache.BypassWriteTracker(pybcache.GiB, pool_pages=value)),
                "pool_pages")
    assert py["got"] == cy["got"] == repr(value)
    if abs(int(value)) < 2**62:  # inside int64, both state the argument's own range
        assert py["allowed"] == cy["allowed"] == "in [0, 1048576]"


@pytest.mark.parametrize("value", NOT_NUMBERS, ids=repr)
def test_python_and_cython_refuse_the_same_non_numbers_with_a_typeerror_of_one_shape(value):
    py = _parts(_message(TypeError, lambda: pybcache.race(fault_probability=value)), "fault_probability")
    cy = _parts(_message(TypeError, lambda: pybcache.FaultInjection(probability=value)), "probability")
    assert py["got"] == cy["got"] == type(value).__name__
    assert py["allowed"] == "a number in [0.0, 1.0]" and cy["allowed"] == "a number in [0, 1]"


@pytest.mark.parametrize("value", OUT_OF_RANGE_NUMBERS, ids=repr)
def test_python_and_cython_refuse_nan_and_out_of_range_numbers_with_a_valueerror_of_one_shape(value):
    py = _parts(_message(ValueError, lambda: pybcache.race(fault_probability=value)), "fault_probability")
    cy = _parts(_message(ValueError, lambda: pybcache.FaultInjection(probability=value)), "probability")
    assert py["got"] == cy["got"] == repr(value)
    assert py["allowed"] == "in [0.0, 1.0]" and cy["allowed"] == "in [0, 1]"


@pytest.mark.parametrize("value", ["spin", 3, None], ids=repr)
def test_python_and_cython_refuse_a_bad_choice_with_the_same_message(value):
    exc = ValueError if isinstance(value, str) else TypeError
    py = _parts(_message(exc, lambda: pybcache.race(sync=value)), "sync")
    cy = _parts(_message(exc, lambda: pybcache.BypassWriteTracker(pybcache.GiB, sync=value)), "sync")
    assert py["got"] == cy["got"] == (repr(value) if exc is ValueError else type(value).__name__)
    # race() also offers "none" (unpatched), the tracker does not: the same words, each its own list
    prefix = "one of (" if exc is ValueError else "a str, one of ("
    assert py["allowed"].startswith(prefix) and cy["allowed"].startswith(prefix)


def test_cachedev_helpers_are_the_validation_layers():
    assert cachedev._int is validate.check_int
    assert cachedev._number is validate.check_number
    assert cachedev._choice is validate.check_choice
    assert cachedev._pow2 is validate.check_pow2


@pytest.mark.parametrize("value, expected", [(7, 7), (np.int32(7), 7), (np.uint64(0), 0), (1 << 20, 1 << 20)])
def test_check_int_returns_a_plain_int(value, expected):
    out = validate.check_int(value, "n", 0, 1 << 20)
    assert out == expected and type(out) is int


@pytest.mark.parametrize("value, expected", [(1, 1.0), (0.25, 0.25), (np.float32(0.5), 0.5), (np.int8(1), 1.0)])
def test_check_number_returns_a_float(value, expected):
    out = validate.check_number(value, "x", 0, 1)
    assert out == expected and type(out) is float


def test_check_number_open_low_refuses_the_bound_itself_and_says_so():
    with pytest.raises(ValueError, match=r"^seconds must be in \(0, 10\], got 0$"):
        validate.check_number(0, "seconds", 0, 10, open_low=True)
    assert validate.check_number(10, "seconds", 0, 10, open_low=True) == 10.0


@pytest.mark.parametrize("value", [3, 768, 0])
def test_check_pow2_refuses_an_in_range_non_power_of_two(value):
    with pytest.raises(ValueError, match=r"^block_size must be (a power of two )?in \[0, 4096\]"):
        validate.check_pow2(value, "block_size", 0, 4096)


@pytest.mark.parametrize("value", [1, 0, np.bool_(True), "True", None])
def test_check_bool_accepts_only_true_and_false(value):
    with pytest.raises(TypeError, match=f"^flag must be a bool, got {type(value).__name__}$"):
        validate.check_bool(value, "flag")
    assert validate.check_bool(False, "flag") is False


def test_check_int_with_no_upper_bound_takes_any_large_int_and_prints_the_range_as_up_to_inf():
    assert validate.check_int(1 << 70, "pages", 0) == 1 << 70
    with pytest.raises(ValueError, match=r"^pages must be in \[0, inf\), got -1$"):
        validate.check_int(-1, "pages", 0)
    with pytest.raises(TypeError, match=r"^pages must be an int in \[0, inf\), got timedelta64$"):
        validate.check_int(np.timedelta64(5, "s"), "pages", 0)


@pytest.mark.parametrize("value", [math.inf, np.float64("inf"), math.nan, -math.inf])
def test_check_number_with_no_upper_bound_still_refuses_infinity_and_nan(value):
    with pytest.raises(ValueError, match=r"^rate must be in \(0, inf\), got "):
        validate.check_number(value, "rate", 0, open_low=True)
    assert validate.check_number(1e300, "rate", 0, open_low=True) == 1e300


@pytest.mark.parametrize("value", [np.timedelta64(5, "s"), np.timedelta64("NaT")], ids=repr)
def test_a_duration_is_not_a_number_and_the_message_names_the_argument(value):
    with pytest.raises(TypeError, match=r"^timeout must be a number in \[0, inf\), got timedelta64$"):
        validate.check_number(value, "timeout", 0)


def test_check_instance_names_the_argument_and_the_expected_type():
    assert validate.check_instance(3, "n", int, "an int") == 3
    with pytest.raises(TypeError, match=r"^clock must be a Clock, got str$"):
        validate.check_instance("x", "clock", (int, float), "a Clock")


def test_the_writeback_model_checks_through_this_layer():
    from pybcache.writeback import Scenario, WritebackModel

    with pytest.raises(ValueError, match=r"^cpus must be in \[1, 256\], got 0$"):
        Scenario(cpus=0)
    with pytest.raises(TypeError, match=r"^clock must be a Clock, got int$"):
        WritebackModel(clock=3)


def test_check_callable_refuses_a_non_callable_and_none_only_when_not_allowed():
    assert validate.check_callable(print, "fn") is print
    assert validate.check_callable(None, "wrap", allow_none=True) is None
    with pytest.raises(TypeError, match=r"^fn must be callable, got NoneType$"):
        validate.check_callable(None, "fn")
    with pytest.raises(TypeError, match=r"^wrap must be callable or None, got int$"):
        validate.check_callable(3, "wrap", allow_none=True)


def test_check_int_takes_an_int_subclass_as_the_plain_int_it_stands_for():
    import enum

    class Level(enum.IntEnum):
        HIGH = 7

    out = validate.check_int(Level.HIGH, "level", 0, 10)
    assert out == 7 and type(out) is int
    assert type(validate.check_number(Level.HIGH, "level", 0, 10)) is float


@pytest.mark.parametrize("value", [1, 2, 4, 1 << 40])
def test_check_pow2_takes_every_power_of_two_in_range_one_included(value):
    out = validate.check_pow2(value, "ways", 1, 1 << 40)
    assert out == value and type(out) is int
