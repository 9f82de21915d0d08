"""Kernel patches the lab generates at build time, so the repository holds no kernel text.

Each generated patch is a Coccinelle semantic patch of ours (csrc/kernel/*.cocci, GPL-2.0-only) applied by
``spatch`` to the installed 6.12 source; the diff is written into the cache
(``generated/<key>/<name>.diff``, keyed by the semantic patch and the source) with ``a/`` and ``b/`` paths for
``patch -p1``. ``pybcache kernel diff NAME`` prints it; ``--patch gen:NAME`` builds with it.

* ``v1``: invalidate a bypass write's range in the cache only once its backing write has completed
  (csrc/kernel/v1-invalidate-after-write.cocci).
* ``v3``: the lab's v3 proposal, the bypass-write tracker of csrc/kernel/bcache-bypass-tracker.{c,h} (GPL-2.0-only)
  added to drivers/md/bcache/ with a Makefile line, and hooked into bcache.h, request.c and super.c by the
  anchored edits of :data:`V3_HOOKS` (each anchor must occur exactly once in its scope, or generation fails).
* ``v3-*``: single-point mutants of v3 (:data:`V3_MUTANTS`), each one textual change to the tracker or a hook,
  so that the lab can check that the real kernel catches each kind of mistake.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Optional

from ._paths import cache_dir, host_env, kernel_file
from .build import KernelBuildError, _locked, ensure_source

__all__ = ["GENERATED", "COCCI", "V3_HOOKS", "V3_PLACEMENTS", "V3_MUTANTS", "GenerateError", "generated_patch",
           "v3_files"]

# name -> (semantic patch in csrc/kernel, the files of the tree it applies to)
COCCI: dict[str, tuple[str, tuple[str, ...]]] = {
    "v1": ("v1-invalidate-after-write.cocci", ("drivers/md/bcache/request.c",)),
}

BCACHE = "drivers/md/bcache"
TRACKER_C = "bcache-bypass-tracker.c"
TRACKER_H = "bcache-bypass-tracker.h"


@dataclasses.dataclass(frozen=True)
class Hook:
    """One anchored edit: in ``file``, inside the scope opened by the line matching ``scope`` (a regular
    expression; the scope ends at the next line that is ``}`` or ``};`` at column 0; empty: the whole file),
    the one line whose stripped text is ``anchor`` gets ``text`` inserted before or after it, or is replaced by
    it (``where``). ``text``'s lines are indented as the anchor line, plus their own leading tabs."""
    file: str
    scope: str
    anchor: str
    where: str
    text: str


V3_HOOKS: tuple[Hook, ...] = (
    Hook(f"{BCACHE}/Makefile", "", "util.o writeback.o features.o", "after",
         f"bcache-y\t\t+= {TRACKER_C[:-2]}.o"),
    Hook(f"{BCACHE}/bcache.h", "", "#include <linux/types.h>", "after", f'#include "{TRACKER_H}"'),
    Hook(f"{BCACHE}/bcache.h", r"^struct cached_dev \{", "struct file\t\t*bdev_file;", "after",
         "/* bypass writes in flight, per chunk (bcache-bypass-tracker.c) */\n"
         "struct bch_bypass_tracker\t*bypass;"),
    Hook(f"{BCACHE}/request.c", r"^struct search \{", "unsigned long\t\tstart_time;", "after",
         "/* the range a bypass write counted in dc->bypass, 0 sectors when none */\n"
         "sector_t\t\tbypass_sector;\n"
         "unsigned int\t\tbypass_sectors;"),
    Hook(f"{BCACHE}/request.c", r"search_alloc\(", "s->cache_missed\t\t= 0;", "after",
         "s->bypass_sectors\t= 0;"),
    Hook(f"{BCACHE}/request.c", r"^static int cached_dev_cache_miss\(", "if (s->cache_miss || s->iop.bypass) {",
         "replace",
         "if (s->cache_miss || s->iop.bypass ||\n"
         "    bch_bypass_read_active(dc->bypass, bio->bi_iter.bi_sector, bio_sectors(bio))) {"),
    Hook(f"{BCACHE}/request.c", r"^static CLOSURE_CALLBACK\(cached_dev_write_complete\)",
         "struct cached_dev *dc = container_of(s->d, struct cached_dev, disk);", "after",
         "\n/* the range recorded at the start: bch_data_invalidate() has consumed s->orig_bio's */\n"
         "if (s->bypass_sectors)\n"
         "\tbch_bypass_write_end(dc->bypass, s->bypass_sector, s->bypass_sectors);"),
    Hook(f"{BCACHE}/request.c", r"^static void cached_dev_write\(", "if (s->iop.bypass) {", "after",
         "\t/* counted until cached_dev_write_complete(): read misses on its chunks bypass the cache */\n"
         "\ts->bypass_sector = bio->bi_iter.bi_sector;\n"
         "\ts->bypass_sectors = bio_sectors(bio);\n"
         "\tbch_bypass_write_start(dc->bypass, s->bypass_sector, s->bypass_sectors);\n"),
    # before bcache_device_init(): a failed allocation leaves by the route that function's own failure takes
    Hook(f"{BCACHE}/super.c", r"^static int cached_dev_init\(", "ret = bcache_device_init(&dc->disk, block_size,",
         "before",
         "dc->bypass = bch_bypass_tracker_alloc(bdev_nr_sectors(dc->bdev));\n"
         "if (!dc->bypass)\n"
         "\treturn -ENOMEM;\n"),
    Hook(f"{BCACHE}/super.c", r"^static CLOSURE_CALLBACK\(cached_dev_free\)", "wake_up(&unregister_wait);",
         "before", "bch_bypass_tracker_free(dc->bypass);\n"),
)

# placement variants of v3: a different hook list (the check moved), the tracker unchanged
_MISS_CHECK = next(h for h in V3_HOOKS if h.scope.startswith(r"^static int cached_dev_cache_miss"))
V3_PLACEMENTS: dict[str, tuple[Hook, ...]] = {
    # the read's check at request entry (cached_dev_submit_bio, before cached_dev_read) instead of in the miss
    # path: an overlapping read is marked bypass (s->iop.bypass), so its miss is read and not inserted
    "v3-check-at-entry": tuple(h for h in V3_HOOKS if h is not _MISS_CHECK) + (
        Hook(f"{BCACHE}/request.c", r"^void cached_dev_submit_bio\(", "if (rw)", "before",
             "/* the read's check at request entry */\n"
             "if (!rw && bch_bypass_read_active(dc->bypass, bio->bi_iter.bi_sector, bio_sectors(bio)))\n"
             "\ts->iop.bypass = true;\n"),),
    # writethrough writes counted too, from before their backing bio is submitted: their insert can fall back to
    # an invalidation (a cache allocation or a cache write that fails, request.c:139-166, :264-272) which is
    # only known inside bch_data_insert_start, so the count cannot wait for it (the model's track="all" for
    # writethrough writes); the end in cached_dev_write_complete is keyed on the recorded range, not on
    # s->iop.bypass
    "v3-track-writethrough": V3_HOOKS + (
        Hook(f"{BCACHE}/request.c", r"^static void cached_dev_write\(",
             "s->iop.bio = bio_alloc_clone(bio->bi_bdev, bio, GFP_NOIO,", "before",
             "/* counted until cached_dev_write_complete(): its insert may still invalidate */\n"
             "s->bypass_sector = bio->bi_iter.bi_sector;\n"
             "s->bypass_sectors = bio_sectors(bio);\n"
             "bch_bypass_write_start(dc->bypass, s->bypass_sector, s->bypass_sectors);\n"),),
}

# mutant -> ((file, the text replaced, exactly once, in the file as v3 makes it, its replacement), ...)
V3_MUTANTS: dict[str, tuple[tuple[str, str, str], ...]] = {
    # allocating with GFP_KERNEL under the page's spinlock, interrupts off
    "v3-gfp-kernel-under-lock": ((f"{BCACHE}/{TRACKER_C}",
                                  "\t\t\tspin_unlock_irq(&pg->lock);\n"
                                  "\t\t\tpage = bch_bypass_page_alloc();\n"
                                  "\t\t\tspin_lock_irq(&pg->lock);\n",
                                  "\t\t\tpage = kzalloc(PAGE_SIZE, GFP_KERNEL);\n"),),
    # the allocation failed: the write goes on uncounted on that page
    "v3-untracked-fallback": ((f"{BCACHE}/{TRACKER_C}",
                               "\t\t\telse\n\t\t\t\tpg->hijacked = true;\t/* no memory: count in the slot itself */\n",
                               "\t\t\telse {\n\t\t\t\tspin_unlock_irq(&pg->lock);\n"
                               "\t\t\t\tchunk = seg + 1;\n\t\t\t\tcontinue;\n\t\t\t}\n"),),
    # the end decrements one chunk past the range it counted
    "v3-end-one-chunk-too-many": ((f"{BCACHE}/{TRACKER_C}",
                                   "\t\tcount_down(t, first, last);\n",
                                   "\t\tcount_down(t, first, last + 1);\n"),),
    # the end reads s->orig_bio's iterator, which bch_data_invalidate() has advanced to the end: 0 sectors
    "v3-orig-bio-end": ((f"{BCACHE}/request.c",
                         "bch_bypass_write_end(dc->bypass, s->bypass_sector, s->bypass_sectors);",
                         "bch_bypass_write_end(dc->bypass, s->orig_bio->bi_iter.bi_sector, "
                         "bio_sectors(s->orig_bio));"),),
}

# every generated name, for the command line
GENERATED: tuple[str, ...] = tuple(COCCI) + ("v3",) + tuple(V3_PLACEMENTS) + tuple(V3_MUTANTS)
SPATCH_TIMEOUT = 300


class GenerateError(Exception):
    """A generated patch could not be made (no spatch, no source, a semantic patch that matched nothing)."""


def _tidy(text: str) -> str:
    """spatch prints an added function's opening brace on its header line: put it on its own line."""
    return re.sub(r"^(static [^\n;]*\))\{$", r"\1\n{", text, flags=re.M)


def _scope(lines: list[str], scope: str, what: str) -> tuple[int, int]:
    if not scope:
        return 0, len(lines)
    starts = [i for i, line in enumerate(lines) if re.search(scope, line) and not line.rstrip().endswith(";")]
    if len(starts) != 1:
        raise GenerateError(f"{what}: {len(starts)} lines open the scope /{scope}/ (expected 1)")
    for j in range(starts[0] + 1, len(lines)):
        if lines[j] in ("}", "};"):
            return starts[0], j
    raise GenerateError(f"{what}: the scope /{scope}/ never closes")


def apply_hook(text: str, hook: Hook) -> str:
    """``text`` with ``hook`` applied; GenerateError when its scope or anchor is not found exactly once."""
    what = f"{hook.file}: {hook.anchor!r}"
    lines = text.split("\n")
    lo, hi = _scope(lines, hook.scope, what)
    at = [i for i in range(lo, hi) if lines[i].strip() == hook.anchor]
    if len(at) != 1:
        raise GenerateError(f"{what}: found {len(at)} times in its scope (expected once)")
    i = at[0]
    indent = lines[i][:len(lines[i]) - len(lines[i].lstrip(" \t"))]
    new = [indent + ln if ln else "" for ln in hook.text.split("\n")]
    if hook.where == "after":
        lines[i + 1:i + 1] = new
    elif hook.where == "before":
        lines[i:i] = new
    else:
        lines[i:i + 1] = new
    return "\n".join(lines)


def v3_files(tree: Path, name: str = "v3") -> dict[str, tuple[Optional[str], str]]:
    """The files v3 (or its placement variant or mutant ``name``) changes or adds: {path in the tree: (pristine
    text or None for a new file, new text)}."""
    files: dict[str, tuple[Optional[str], str]] = {}
    for hook in V3_PLACEMENTS.get(name, V3_HOOKS):
        if hook.file not in files:
            src = tree / hook.file
            if not src.is_file():
                raise GenerateError(f"{src} is missing from the source tree")
            text = src.read_text()
            files[hook.file] = (text, text)
        old, new = files[hook.file]
        files[hook.file] = (old, apply_hook(new, hook))
    for fname in (TRACKER_H, TRACKER_C):
        files[f"{BCACHE}/{fname}"] = (None, kernel_file(fname).read_text())
    for rel, before, after in V3_MUTANTS.get(name, ()):
        old, new = files[rel]
        if new.count(before) != 1:
            raise GenerateError(f"mutant {name}: its change to {rel} is found {new.count(before)} times "
                                "(expected once)")
        files[rel] = (old, new.replace(before, after))
    return files


def _v3_patch(name: str, tree: Path, version: str, srckey: str, cache: Path) -> Path:
    inputs = [Path(__file__).read_bytes(), kernel_file(TRACKER_C).read_bytes(), kernel_file(TRACKER_H).read_bytes()]
    key = hashlib.sha256(b"".join(inputs) + name.encode() + srckey.encode()).hexdigest()[:16]
    out = cache / "generated" / key / f"{name}.diff"
    if out.is_file():
        return out
    pieces = []
    with tempfile.TemporaryDirectory(prefix="pybcache-v3-") as tmp:
        for i, (rel, (old, new)) in enumerate(v3_files(tree, name).items()):
            a, b = Path(tmp) / f"{i}.a", Path(tmp) / f"{i}.b"
            a.write_text(old or "")
            b.write_text(new)
            labels = ["--label", "/dev/null" if old is None else f"a/{rel}", "--label", f"b/{rel}"]
            diff = subprocess.run(["diff", "-u", "-p", *labels, str(a), str(b)], capture_output=True, text=True,
                                  timeout=60, env=host_env())
            if diff.returncode == 1:
                pieces.append(diff.stdout)
            elif diff.returncode != 0:
                raise GenerateError(f"diff failed: {diff.stderr.strip()}")
    what = ("v3" if name == "v3" else f"v3 placed as {name}" if name in V3_PLACEMENTS
            else f"v3 with the mutation {name}")
    header = (f"pybcache generated patch {name}: {what}, csrc/kernel/{TRACKER_C} and {TRACKER_H} added to "
              f"{BCACHE}/ and hooked by pybcache/kernel/generate.py into linux {version}\n"
              f"(pybcache kernel diff {name}; the kernel-side code is GPL-2.0-only)\n\n")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmpf = out.with_name(f".{out.name}.{os.getpid()}")
    tmpf.write_text(header + "".join(pieces))
    os.replace(tmpf, out)
    return out


def generated_patch(name: str) -> Path:
    """The path of the generated diff ``name`` (made on first use)."""
    if name not in GENERATED:
        raise GenerateError(f"no generated patch {name!r} (known: {', '.join(GENERATED)})")
    if name not in COCCI:
        cache = cache_dir()
        try:
            with _locked(cache):
                srckey, version, tree = ensure_source(cache, lambda *a: None)
        except KernelBuildError as exc:
            raise GenerateError(str(exc)) from None
        return _v3_patch(name, tree, version, srckey, cache)
    cocci_name, files = COCCI[name]
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
