"""Extension definitions only; metadata lives in pyproject.toml.

PYBCACHE_DEBUG=1 builds with -O0 -g3 and C assertions; PYBCACHE_WERROR=1 (set by CI) turns C warnings
into errors; PYBCACHE_SANITIZE=address,undefined adds -fsanitize flags.
"""
import os
import runpy

import numpy
from Cython.Build import cythonize
from setuptools import Extension, find_packages, setup

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



# The one list of C sources (csrc/sources.mk), read by the package's own parser: pybcache/_csrc.py is run as a
# file, since the package cannot be imported before its extensions are built.
SOURCES = runpy.run_path(os.path.join("pybcache", "_csrc.py"))["read_sources_mk"](os.path.join("csrc", "sources.mk"))
CORE = [os.path.join("csrc", src) for src in SOURCES["PYB_CORE_SRC"]]
KPATCH = [os.path.join("csrc", src) for src in SOURCES["PYB_KPATCH_SRC"]]
MODEL = [os.path.join("csrc", src) for src in SOURCES["PYB_MODEL_SRC"]] + KPATCH


def ext(name, extra_sources=()):
    pyx = os.path.join(*name.split(".")) + ".pyx"
    return Extension(
        name,
        sources=[pyx, *CORE, *extra_sources],
        include_dirs=["csrc", "pybcache/bcache", numpy.get_include()],
        define_macros=macros,
        extra_compile_args=cflags,
        extra_link_args=ldflags,
    )


extensions = [
    ext("pybcache.bcache._tracker"),
    ext("pybcache.bcache._cachedev", MODEL),
    ext("pybcache.bcache.kpatch._kpatch", KPATCH),   # loads patches: dlopen (libc)
]

# The wheel holds what runs plus what a user builds or type-checks against: modules, extensions, the .pxd
# declarations, the .pyi stubs and py.typed, the report's prose (report/templates/*.md, read at run time),
# and the C compiled on the user's machine at run time (the kernel-patch shim and its runtime, the nbdkit
# plugin with the model's sources): csrc/ and examples/patches/ are mapped into the package as
# pybcache/csrc and pybcache/examples, straight from the source tree (pybcache/_csrc.py finds them either
# way). Never the Cython sources, the C that Cython generated (_*.c), the bindings' private header
# (_pyint.h), the C test programs, the Relacy model or the C build files.
NOT_SHIPPED_C = ("tests", "relacy")
SHIPPED_C_DIRS = sorted(os.path.relpath(d, "csrc") for d, _, _ in os.walk("csrc")
                        if os.path.relpath(d, "csrc").split(os.sep)[0] not in NOT_SHIPPED_C)
C_PACKAGES = {"pybcache.csrc" + ("" if d == "." else "." + d.replace(os.sep, ".")): d for d in SHIPPED_C_DIRS}
PACKAGES = find_packages(include=["pybcache", "pybcache.*"]) + list(C_PACKAGES) + ["pybcache.examples.patches"]
PACKAGE_DATA = {
    "pybcache": ["py.typed", "report/templates/*.md"],
    "pybcache.bcache": ["*.pyi", "*.pxd", "includes/*.pxd"],
    "pybcache.bcache.kpatch": ["*.pyi", "*.pxd"],
    "pybcache.examples.patches": ["*.c"],
    **{name: ["*.c", "*.h", "*.mk", "*.cocci", "*.config", "*.sh"] for name in C_PACKAGES},
}
EXCLUDE_DATA = {"pybcache.bcache": ["_*.c", "*.pyx", "_pyint.h"], "pybcache.bcache.kpatch": ["_*.c", "*.pyx"],
                "pybcache.csrc": ["Makefile", *(f"{d}/*" for d in NOT_SHIPPED_C)]}

setup(
    packages=PACKAGES,
    package_dir={"pybcache.csrc": "csrc", "pybcache.examples.patches": "examples/patches"},
    package_data=PACKAGE_DATA,
    exclude_package_data=EXCLUDE_DATA,
    ext_modules=cythonize(
        extensions,
        compiler_directives={"language_level": "3", "embedsignature": True},
        include_path=["."],
    ),
)
