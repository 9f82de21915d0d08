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
    so that a command can refuse it with a patch; the default is the model's, mempool)."""
    parser.add_argument("--sync", type=sync_arg(syncs), default="page", metavar="VARIANT|PATCH.c",
                        help=f"tracking variant ({', '.join(syncs)}; none = unpatched), or a kernel patch's .c "
                             f"file, which is compiled and loaded (default page)")
    from ..bcache.cachedev import ALLOC_FAILURES, CHECKS, DEFAULT_ALLOC_FAILURE
    parser.add_argument("--check", choices=CHECKS, default="after",
                        help="where a read consults the tracker: at request entry, in the miss path before the "
                             "check key, after the check key, or after the backing read (read-done) "
                             "(default after; before = entry, its old name)")
    parser.add_argument("--alloc-failure", choices=ALLOC_FAILURES, default=None,
                        help=f"tracker policy on page-allocation failure (default {DEFAULT_ALLOC_FAILURE}, "
                             f"with a one-page reserve)")
    parser.add_argument("--unhijack", choices=("at-end", "on-decay"), default=None,
                        help="when a hijacked tracker page reverts: at the end that drains it (default at-end) or "
                             "on md's daemon decay, after two reclaims find it drained (on-decay)")


def add_write_arguments(parser: argparse.ArgumentParser, probability: bool) -> None:
    """What the writes are, which writes the tracker counts, how often a writethrough write's cache
    allocation fails (a probability for the race, the K-th allocation for the explorer), and when a bypass
    write invalidates. The tracker, a lab variant or a patch, is called where the model decides, so they
    apply to both."""
    parser.add_argument("--writes", dest="write_kind", choices=("bypass", "writethrough", "mixed", "discard"),
                        default="bypass",
                        help="the writes: bypass (default), writethrough (inserted into the cache, or invalidated "
                             "when the cache allocation fails: the writethrough fallback), mixed (odd-numbered "
                             "bypass, even-numbered writethrough) or discard (the bypass branch, counted as bypass)")
    if probability:
        from ._util import float_arg
        parser.add_argument("--cache-alloc-fail", type=float_arg(0.0, 1.0), default=0.0, metavar="P",
                            help="chance that a writethrough write's cache allocation fails, 0..1 (default 0)")
    else:
        from ._util import int_arg
        parser.add_argument("--cache-alloc-fail", type=int_arg(0, 1 << 62), default=0, metavar="K",
                            help="the K-th writethrough cache allocation of every schedule fails (default 0 = none)")
    parser.add_argument("--track", choices=("bypass", "invalidations", "all"), default="bypass",
                        help="which writes the tracker counts: bypass writes only (default, the v2 patch), also "
                             "writethrough writes whose insert falls back (invalidations), or all")
    parser.add_argument("--invalidate", choices=("at-submit", "after-write"), default="at-submit",
                        help="when a bypass write invalidates its cached range: at submission, while its data is "
                             "in flight (default: Linux 6.12, request.c:1027 and :1061, and the v2 patch), or "
                             "after its backing write has completed (the v1 approach; writethrough writes and "
                             "their fallback keep the 6.12 order)")


def write_options(args: argparse.Namespace) -> dict[str, Any]:
    """add_write_arguments' options that are not at their defaults, as keyword arguments (a namespace
    built without them has them all at their defaults)."""
    given = {"write_kind": (getattr(args, "write_kind", "bypass"), "bypass"),
             "cache_alloc_fail": (getattr(args, "cache_alloc_fail", 0), 0),
             "track": (getattr(args, "track", "bypass"), "bypass"),
             "invalidate": (getattr(args, "invalidate", "at-submit"), "at-submit")}
    return {name: value for name, (value, default) in given.items() if value != default}


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
