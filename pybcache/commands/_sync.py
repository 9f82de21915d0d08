"""``--sync PATCH.c`` for the cached-device commands (race, explore, fio): a tracking variant's name or
a kernel patch's source file, which is compiled and loaded (:func:`pybcache.load_patch`) and then runs
in the command's driver instead of the lab's tracker."""
from __future__ import annotations

import argparse
import os
import re
from typing import Any, Callable, Sequence

from ._util import UsageError

LAB_ONLY = "applies to the lab's trackers, not to a patch"


def sync_arg(syncs: Sequence[str]) -> Callable[[str], str]:
    """An argparse ``type=``: a variant of ``syncs``, a value ending in ``.c``, or an existing file."""
    def parse(text: str) -> str:
        if text in syncs or text.endswith(".c") or os.path.isfile(text):
            return text
        if not syncs:  # fio: the variants come from --variants, --sync only adds a patch
            raise argparse.ArgumentTypeError(f"expected a kernel patch's .c file, got {text!r}")
        raise argparse.ArgumentTypeError(f"invalid choice: {text!r} (choose from {', '.join(syncs)}, "
                                         f"or a kernel patch's .c file)")
    return parse


def add_tracking_arguments(parser: argparse.ArgumentParser, syncs: Sequence[str]) -> None:
    """The cached-device commands' tracker options: ``--sync`` (a variant, or a kernel patch's ``.c``
    file: pybcache/commands/_sync.py loads it), ``--check``, ``--alloc-failure`` (None when not given,
    so that a command can refuse it with a patch; the default is hijack)."""
    parser.add_argument("--sync", type=sync_arg(syncs), default="page", metavar="VARIANT|PATCH.c",
                        help=f"tracking variant ({', '.join(syncs)}; none = unpatched), or a kernel patch's .c "
                             f"file, which is compiled and loaded (default page)")
    from ..bcache.cachedev import CHECKS
    parser.add_argument("--check", choices=CHECKS, default="after",
                        help="where a read consults the tracker: at request entry, in the miss path before the "
                             "check key, after the check key, or after the backing read (read-done) "
                             "(default after; before = entry, its old name)")
    parser.add_argument("--alloc-failure", choices=("untracked", "hijack", "pool"), default=None,
                        help="tracker policy on page-allocation failure (default hijack)")


def load_sync(value: str, syncs: Sequence[str]) -> Any:
    """The variant name, or the loaded KernelPatch. A compile error is a UsageError (exit 2) carrying the
    compiler's first line; a missing or unreadable file likewise."""
    if value in syncs:
        return value
    from ..bcache.kpatch.load import PatchCompileError, load_patch
    try:
        return load_patch(value)
    except PatchCompileError as exc:
        lines = [line for line in str(exc).splitlines() if line.strip()]
        # the compiler's first error line (file:line:col: error: ...), else its first line
        first = next((line for line in lines[1:] if re.search(r":\d+(:\d+)?: (fatal )?error:", line)),
                     lines[1] if len(lines) > 1 else "")
        raise UsageError(f"--sync {value}: {lines[0]}" + (f": {first.strip()}" if first else "")) from None
    except ValueError as exc:
        raise UsageError(f"--sync {value}: {exc}") from None


def refuse_lab_options(patch: Any, given: dict[str, bool]) -> None:
    """With a patch, the first lab-only option that was given is a UsageError naming it."""
    if patch is None or isinstance(patch, str):
        return
    for option, was_given in given.items():
        if was_given:
            raise UsageError(f"{option}: {LAB_ONLY} (--sync is the patch {patch.name!r})")


def sync_label(sync: Any) -> str:
    """What outputs call the tracker: the variant, or ``"<patch name> (<path>)"``."""
    return sync if isinstance(sync, str) else f"{sync.name} ({sync.path})"


def reports_text(counts: dict[str, int]) -> str:
    """A patch's kernel reports (a count per kind) in one line."""
    if not counts:
        return "kernel reports: none"
    return "kernel reports: " + ", ".join(f"{kind} x{n}" for kind, n in sorted(counts.items()))
