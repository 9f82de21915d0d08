"""Run the installed ``pybcache`` command as a user would: the console script that pip put beside this
interpreter, from a scratch directory, so that neither the source tree nor its working directory can stand
in for what was installed."""
from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def pybcache_executable() -> str:
    beside = Path(sys.executable).with_name("pybcache")
    found = str(beside) if beside.exists() else shutil.which("pybcache")
    if not found:
        raise RuntimeError("the pybcache console script is not installed beside this Python "
                           f"({sys.executable}) nor on PATH: install the package first")
    return found


def run_pybcache(*args: str, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    """``pybcache ARGS...`` with text output captured; raises subprocess.TimeoutExpired past ``timeout``."""
    kwargs.setdefault("cwd", tempfile.gettempdir())
    return subprocess.run([pybcache_executable(), *args], capture_output=True, text=True, timeout=timeout,
                          **kwargs)


def run_python(code: str, *, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    """``python -c CODE`` with this interpreter, from a scratch directory: ``-c`` puts the working
    directory first on sys.path, and from the source tree that would shadow the installed package."""
    kwargs.setdefault("cwd", tempfile.gettempdir())
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, **kwargs)
