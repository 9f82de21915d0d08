"""Extension definitions only; metadata lives in pyproject.toml.

PYBCACHE_DEBUG=1 builds with -O0 -g3 and C assertions; PYBCACHE_WERROR=1 (set by CI) turns C warnings
into errors; PYBCACHE_SANITIZE=address,undefined adds -fsanitize flags.
"""
import os

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

DEBUG = os.environ.get("PYBCACHE_DEBUG") == "1"
WERROR = os.environ.get("PYBCACHE_WERROR") == "1"
SANITIZE = os.environ.get("PYBCACHE_SANITIZE", "")

cflags = ["-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Wno-unused-function", "-pthread"]
ldflags = ["-pthread"]
macros = [("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")]
if DEBUG:
    cflags += ["-O0", "-g3", "-UNDEBUG"]
    macros.append(("PYB_DEBUG", "1"))
else:
    cflags += ["-O2"]
    macros.append(("NDEBUG", "1"))
if SANITIZE:
    cflags += [f"-fsanitize={SANITIZE}", "-fno-omit-frame-pointer", "-g"]
    ldflags += [f"-fsanitize={SANITIZE}"]
# Warnings in our C are errors in CI; Cython's generated C is compiled with -Werror too except for the
# unused-parameter/sign-compare noise it emits by design.
if WERROR:
    cflags += ["-Werror", "-Wno-error=unused-parameter", "-Wno-error=sign-compare",
               "-Wno-error=missing-field-initializers"]

CORE = ["csrc/pyb_atomic.c", "csrc/pyb_fault.c", "csrc/pyb_tracker.c", "csrc/pyb_driver.c", "csrc/pyb_stress.c",
        "csrc/pyb_floor.c"]


def ext(name, pyx, extra_sources=()):
    return Extension(
        f"pybcache.{name}",
        sources=[pyx, *CORE, *extra_sources],
        include_dirs=["csrc", "pybcache", numpy.get_include()],
        define_macros=macros,
        extra_compile_args=cflags,
        extra_link_args=ldflags,
    )


extensions = [
    ext("_tracker", "pybcache/_tracker.pyx"),
    ext("_cachedev", "pybcache/_cachedev.pyx", ["csrc/pyb_cachedev.c", "csrc/pyb_workload.c", "csrc/pyb_explore.c"]),
]

setup(
    ext_modules=cythonize(
        extensions,
        compiler_directives={"language_level": "3", "embedsignature": True},
        include_path=["pybcache"],
    ),
)
