"""Kernel patches the lab generates at build time, so the repository holds no kernel text.

Each generated patch is a Coccinelle semantic patch of ours (csrc/kernel/*.cocci, GPL-2.0-only) applied by
``spatch`` to the installed 6.12 source; the diff is written into the cache
(``generated/<key>/<name>.diff``, keyed by the semantic patch and the source) with ``a/`` and ``b/`` paths for
``patch -p1``. ``pybcache kernel diff NAME`` prints it; ``--patch gen:NAME`` builds with it.

* ``v1``: invalidate a bypass write's range in the cache only once its backing write has completed
  (csrc/kernel/v1-invalidate-after-write.cocci).
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from ._paths import cache_dir, host_env, kernel_file
from .build import KernelBuildError, _locked, ensure_source

__all__ = ["GENERATED", "GenerateError", "generated_patch"]

# name -> (semantic patch in csrc/kernel, the files of the tree it applies to)
GENERATED: dict[str, tuple[str, tuple[str, ...]]] = {
    "v1": ("v1-invalidate-after-write.cocci", ("drivers/md/bcache/request.c",)),
}
SPATCH_TIMEOUT = 300


class GenerateError(Exception):
    """A generated patch could not be made (no spatch, no source, a semantic patch that matched nothing)."""


def _tidy(text: str) -> str:
    """spatch prints an added function's opening brace on its header line: put it on its own line."""
    return re.sub(r"^(static [^\n;]*\))\{$", r"\1\n{", text, flags=re.M)


def generated_patch(name: str) -> Path:
    """The path of the generated diff ``name`` (made on first use)."""
    if name not in GENERATED:
        raise GenerateError(f"no generated patch {name!r} (known: {', '.join(GENERATED)})")
    cocci_name, files = GENERATED[name]
    cocci = kernel_file(cocci_name)
    spatch = shutil.which("spatch")
    if spatch is None:
        raise GenerateError("spatch not found: apt-get install coccinelle")
    cache = cache_dir()
    try:
        with _locked(cache):
            srckey, version, tree = ensure_source(cache, lambda *a: None)
    except KernelBuildError as exc:
        raise GenerateError(str(exc)) from None
    key = hashlib.sha256(cocci.read_bytes() + srckey.encode()).hexdigest()[:16]
    out = cache / "generated" / key / f"{name}.diff"
    if out.is_file():
        return out
    pieces = []
    with tempfile.TemporaryDirectory(prefix="pybcache-spatch-") as tmp:
        for rel in files:
            src = tree / rel
            new = Path(tmp) / Path(rel).name
            try:
                res = subprocess.run([spatch, "--very-quiet", "--sp-file", str(cocci), str(src), "-o", str(new)],
                                     capture_output=True, text=True, timeout=SPATCH_TIMEOUT, cwd=tmp,
                                     env=host_env())
            except subprocess.TimeoutExpired:
                raise GenerateError(f"spatch on {rel} took over {SPATCH_TIMEOUT} s") from None
            if res.returncode != 0 or not new.is_file():
                raise GenerateError(f"spatch {cocci.name} on {rel} failed:\n{(res.stdout + res.stderr).strip()}")
            new.write_text(_tidy(new.read_text()))
            diff = subprocess.run(["diff", "-u", "--label", f"a/{rel}", "--label", f"b/{rel}", str(src), str(new)],
                                  capture_output=True, text=True, timeout=60, env=host_env())
            if diff.returncode == 1:
                pieces.append(diff.stdout)
            elif diff.returncode != 0:
                raise GenerateError(f"diff failed: {diff.stderr.strip()}")
    if not pieces:
        raise GenerateError(f"{cocci.name} matched nothing in linux {version} ({', '.join(files)})")
    header = (f"pybcache generated patch {name}: {cocci.name} applied by spatch to linux {version}\n"
              f"(pybcache kernel diff {name}; the semantic patch is GPL-2.0-only)\n\n")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmpf = out.with_name(f".{out.name}.{os.getpid()}")
    tmpf.write_text(header + "".join(pieces))
    os.replace(tmpf, out)
    return out
