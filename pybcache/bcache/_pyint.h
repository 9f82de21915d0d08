/*
 * _pyint.h - exact Python int -> int64 conversion for the bindings' hot path (Python headers allowed
 * here: this file belongs to the Cython layer, not to csrc/).
 *
 * pyb_int_as_i64 stores the value of an exact int in *out and returns 0; an int outside int64 is
 * reported as *out = -1 (negative) or INT64_MAX (positive), both out of any device's range, so the
 * caller's range check names it. It never leaves a Python exception set for an exact int, which
 * spares the caller a try/except (and its exception-state save) on every call.
 */
#ifndef PYB_PYINT_H
#define PYB_PYINT_H

#include <Python.h>
#include <stdint.h>

static inline void pyb_int_as_i64(PyObject *x, int64_t *out)
{
#if PY_VERSION_HEX < 0x030C0000 && !defined(PYPY_VERSION)
    /* CPython <= 3.11: ob_size is the signed digit count; two 30-bit digits cover 60 bits. */
    const Py_ssize_t size = Py_SIZE(x);
    const digit *d = ((PyLongObject *)x)->ob_digit;
    switch (size) {
    case 0: *out = 0; return;
    case 1: *out = (int64_t)d[0]; return;
    case 2: *out = (int64_t)d[0] | ((int64_t)d[1] << PyLong_SHIFT); return;
    case -1: *out = -(int64_t)d[0]; return;
    default: break;
    }
#endif
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(x, &overflow);
    if (overflow)
        *out = overflow < 0 ? -1 : INT64_MAX;
    else
        *out = (int64_t)v;
}

#endif /* PYB_PYINT_H */
