"""Hostile argument values for the fuzz tests (Hypothesis strategies): anything a caller could pass where an
integer is expected, and what the API takes as an integer."""
from __future__ import annotations

import math
from typing import Any

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

BIG_INTS = st.sampled_from([2**31, 2**32, 2**62, 2**62 + 1, 2**63 - 1, 2**63, 2**64 - 1, 2**64, 2**100, -2**63,
                            -2**63 - 1, -2**64, -1, 0, 1])
SCALAR_DTYPES = hnp.scalar_dtypes() | hnp.unicode_string_dtypes() | hnp.byte_string_dtypes()


class _Weird:
    """An object that is almost an int: __index__ and __int__ but not an int subclass."""

    def __index__(self) -> int:
        return 4096

    def __int__(self) -> int:
        return 4096


class _IntSub(int):
    pass


def numpy_arrays() -> st.SearchStrategy[np.ndarray]:
    """numpy arrays of every dtype and shape (0-d to 3-d, empty included), plus views and odd layouts."""
    base = hnp.arrays(SCALAR_DTYPES, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5))
    ints = hnp.arrays(hnp.integer_dtypes(endianness="=") | hnp.unsigned_integer_dtypes(endianness="="),
                      st.integers(0, 6), elements=st.integers(0, 127))
    odd = st.one_of(
        ints.map(lambda a: a[::-1]),                                     # negative strides
        ints.map(lambda a: np.repeat(a, 2)[::2]),                        # a strided view
        ints.map(lambda a: a.astype(a.dtype.newbyteorder())),            # non-native byte order
        ints.map(lambda a: a.astype(object)),                            # object dtype holding ints
        st.just(np.zeros(3, dtype=[("a", "i8"), ("b", "i8")])),          # structured
        st.just(np.ma.masked_array([1, 2, 3], mask=[0, 1, 0])),          # masked
        st.just(np.array([2**63, 1], dtype=np.uint64)),
        st.just(np.array([-1, 0], dtype=np.int8)),
        st.just(np.array([4096] * 3, dtype=np.float64)),
    )
    return st.one_of(base, ints, odd)


def hostile() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.none(), st.booleans(), st.integers(), BIG_INTS,
        st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([math.nan, math.inf, -math.inf, 4096.0]),
        st.text(max_size=6), st.binary(max_size=6), st.sampled_from(["", "4096", "0x1000", " 1", "\x00", "1e3"]),
        st.lists(st.integers(-5, 5000), max_size=4), st.tuples(st.integers(), st.integers()),
        st.builds(complex, st.floats(allow_nan=False), st.floats(allow_nan=False)),
        st.builds(_Weird), st.builds(_IntSub, st.integers(-10, 10**6)), st.just(object()), st.just({}),
        hnp.from_dtype(np.dtype("int64")).map(np.int64), SCALAR_DTYPES.flatmap(hnp.from_dtype).filter(
            lambda x: isinstance(x, np.generic)),
        numpy_arrays(),
    )


def is_int(v: Any) -> bool:
    """What the API takes as an integer: an int (subclasses too) or a numpy integer of kind i/u; never a
    bool or an np.timedelta64 (a numpy integer subclass whose NaT makes ``int()`` raise)."""
    if isinstance(v, (bool, np.bool_)):
        return False
    return isinstance(v, int) or (isinstance(v, np.integer) and v.dtype.kind in "iu")
