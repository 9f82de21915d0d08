"""Extension definitions only; metadata lives in pyproject.toml.

PYBCACHE_DEBUG=1 builds with -O0 -g3 and C assertions; PYBCACHE_WERROR=1 (set by CI) turns C warnings
into errors; PYBCACHE_SANITIZE=address,undefined adds -fsanitize flags.
"""
import os

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_py import build_py

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



def c_sources(variable):
    """The files named by ``variable`` in csrc/sources.mk (the list the Makefiles use too)."""
    with open(os.path.join("csrc", "sources.mk")) as f:
        for line in f:
            name, sep, value = line.partition("=")
            if sep and name.strip() == variable:
                return [os.path.join("csrc", src) for src in value.split()]
    raise RuntimeError(f"csrc/sources.mk does not define {variable}")


CORE = c_sources("PYB_CORE_SRC")
MODEL = c_sources("PYB_MODEL_SRC")


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
    ext("_cachedev", "pybcache/_cachedev.pyx", MODEL),
    ext("_kpatch", "pybcache/_kpatch.pyx", ["csrc/pyb_kpatch.c"]),   # loads patches: dlopen (libc)
]

# C that a user's machine compiles at run time, kept in csrc/ and copied into the package by build_py
# (the same table as pybcache/_shipped.py: installed path -> source-tree path).
SHIPPED = {"kpatch_rt/kpatch_rt.c": "kpatch/kpatch_rt.c", "_nbdkit/pyb_nbdkit.c": "nbdkit/pyb_nbdkit.c"}


class build_py_with_model_sources(build_py):
    """Also copy the C compiled on the user's machine into the build: the shim runtime and the nbdkit plugin
    (SHIPPED), and the model's C sources (the files sources.mk lists, their headers and sources.mk) into
    pybcache/_nbdkit/csrc/, so that load_patch and `pybcache serve` work from an installed wheel."""

    def run(self):
        super().run()
        for installed, tree in SHIPPED.items():
            target = os.path.join(self.build_lib, "pybcache", installed)
            self.mkpath(os.path.dirname(target))
            self.copy_file(os.path.join("csrc", tree), target)
        # The example patches (examples/patches/), so that `pybcache check-patch` and the report's check-patch
        # section find them in an installed wheel (pybcache._shipped.example_patch).
        examples = os.path.join(self.build_lib, "pybcache", "examples", "patches")
        self.mkpath(examples)
        for name in sorted(os.listdir(os.path.join("examples", "patches"))):
            if name.endswith(".c"):
                self.copy_file(os.path.join("examples", "patches", name), os.path.join(examples, name))
        # The kernel lab's own files (csrc/kernel/: config fragments, the guest's scripts, the ptrace wrapper,
        # the semantic patches), found at run time by pybcache/kernel/_paths.py in pybcache/csrc/kernel/.
        kernel = os.path.join(self.build_lib, "pybcache", "csrc", "kernel")
        self.mkpath(kernel)
        for name in sorted(os.listdir(os.path.join("csrc", "kernel"))):
            if name.endswith((".config", ".sh", ".c", ".cocci")):
                self.copy_file(os.path.join("csrc", "kernel", name), os.path.join(kernel, name))
        dest = os.path.join(self.build_lib, "pybcache", "_nbdkit", "csrc")
        self.mkpath(dest)
        names = ["sources.mk"] + [os.path.basename(p) for p in CORE + MODEL]
        names += sorted(f for f in os.listdir("csrc") if f.endswith(".h"))
        for name in names:
            self.copy_file(os.path.join("csrc", name), os.path.join(dest, name))


setup(
    cmdclass={"build_py": build_py_with_model_sources},
    ext_modules=cythonize(
        extensions,
        compiler_directives={"language_level": "3", "embedsignature": True},
        include_path=["pybcache"],
    ),
)
