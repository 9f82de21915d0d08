"""``pybcache check-patch``: run a kernel patch through the lab's battery, each check in a child process."""
from __future__ import annotations

import argparse
import sys

from ._util import UsageError, emit_json, float_arg
from .._console import format_table, status_bar


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("check-patch", help="run a kernel-C tracker patch through the battery of checks",
                       description="Compile FILE.c against the kernel-API shim and run the battery (semantics, "
                                   "explore, race, overflow, balance, context, memory), each check in a child "
                                   "process: a crash, hang, WARN_ON or sanitizer report fails that check only. "
                                   "Exit status 0 when every check passes, 1 when one fails, 2 for a usage or "
                                   "compile error.")
    p.add_argument("file", metavar="FILE.c", help="the patch: one C file ending in PYBCACHE_PATCH(ops)")
    p.add_argument("-I", dest="include_dirs", action="append", default=[], metavar="DIR",
                   help="a folder the patch's #include may find headers in (repeatable; default none)")
    p.add_argument("--check", dest="checks", action="append", default=None, metavar="NAME",
                   help="run only this check (repeatable; default every check: semantics, explore, race, "
                        "overflow, balance, context, memory)")
    p.add_argument("--seconds", type=float_arg(0.0, 600.0, open_low=True), default=2.0, metavar="S",
                   help="stress time of balance and race, per fault probability (default 2)")
    p.add_argument("--tsan", action="store_true",
                   help="run the checks with a ThreadSanitizer build of the patch; a report fails the check")
    p.add_argument("--asan", action="store_true",
                   help="run the checks with an AddressSanitizer build of the patch; a report fails the check, "
                        "with its first lines")
    p.add_argument("--end-bio", choices=("consumed", "intact"), default="consumed",
                   help="the bio write_end gets: consumed (default: as bcache's cached_dev_write_complete sees a "
                        "bypass write, bi_size 0 and bi_sector at its end, so a tracker records its range at "
                        "start) or intact (a call site that saves an unconsumed copy)")
    p.add_argument("--fail-alloc", choices=("can-fail", "all"), default="can-fail",
                   help="which allocations fault injection may fail: can-fail (default: only those the kernel "
                        "can fail: a mask that cannot sleep, __GFP_NORETRY/__GFP_RETRY_MAYFAIL, over 32 KiB) or "
                        "all (every allocation but __GFP_NOFAIL, adversarial)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


#: The header's words for each --fail-alloc mode.
_FAIL_ALLOC_WORDS = {"all": "every allocation but __GFP_NOFAIL (--fail-alloc all)",
                     "can-fail": "only allocations the kernel can fail (--fail-alloc can-fail)"}


def _counterexample_lines(lines: list[str]) -> list[str]:
    return [f"    {i:2d}. {line}" for i, line in enumerate(lines, 1)]


def _is_diff(path: str) -> bool:
    """A unified diff (what `pybcache kernel` takes) rather than a tracker's C file."""
    if path.endswith((".diff", ".patch")):
        return True
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            head = f.read(4096)
    except OSError:
        return False
    return head.startswith(("diff --git ", "--- ", "From ")) and "\n+++ " in head


def run(args: argparse.Namespace) -> int:
    from ..bcache.kpatch.check.runner import CHECKS, PatchLoadError, check_patch
    from ..bcache.kpatch.load import PatchCompileError

    if _is_diff(args.file):
        raise UsageError(f"{args.file} is a diff against the kernel tree: check-patch takes a tracker's .c file "
                         "written against the shim (docs/check-patch.md); a diff runs on the real driver: "
                         f"pybcache kernel race --patch {args.file}")
    for name in args.checks or ():
        if name not in CHECKS:
            raise UsageError(f"--check: unknown check {name!r} (allowed: {', '.join(CHECKS)})")
    checks = [c for c in CHECKS if c in args.checks] if args.checks else list(CHECKS)

    with status_bar(f"check-patch {args.file}", total=len(checks), quiet=args.json) as bar:
        def progress(check: str, index: int, total: int) -> None:
            bar.n = index
            bar.set_postfix_str(check)

        try:
            result = check_patch(args.file, seconds=args.seconds, tsan=args.tsan, progress=progress, checks=checks,
                                 include_dirs=args.include_dirs, end_bio=args.end_bio, asan=args.asan,
                                 fail_alloc=args.fail_alloc)
        except PatchCompileError as exc:
            # the compiler's own first lines, as they came: that is what the author needs to read
            sys.stderr.write(f"pybcache check-patch: error: {exc}\n")
            return 2
        except PatchLoadError as exc:
            raise UsageError(str(exc)) from None
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    if args.json:
        emit_json(result.to_json())
        return 0 if result.passed else 1
    under = " under ThreadSanitizer" if result.tsan else (" under AddressSanitizer" if getattr(result, "asan", False)
                                                          else "")
    print(f"check-patch {result.patch} ({result.name}){under}: "
          f"{sum(c.passed for c in result.checks)} of {len(result.checks)} checks passed, "
          f"{result.wall_s:.1f} s; compiler warnings (-Wall -Wextra): {len(result.warnings)}; allocation "
          f"failures injected into {_FAIL_ALLOC_WORDS[result.fail_alloc]}"
          f"{'; write_end handed the bio intact (--end-bio intact)' if result.end_bio == 'intact' else ''}")
    for line in result.warnings[:10]:
        print(f"  {line}")
    print(format_table(["check", "result", "figure", "s"],
                       [[c.name, "passed" if c.passed else "FAILED", c.figure, f"{c.wall_s:.1f}"]
                        for c in result.checks]))
    for c in result.checks:
        print(f"\n{c.name}: {c.detail}")
        if c.counterexample:
            print("  counterexample:" if not c.passed else "  notes:")
            print("\n".join(_counterexample_lines(c.counterexample)))
        log = getattr(c, "log", None)
        if not c.passed and log:
            print("  the patch's log (pr_*):")
            print("\n".join(f"    {line}" for line in log))
    if result.memory:
        from ..units import format_bytes
        print("\nmemory (bytes the patch allocated, beside the v2 cover letter's table)")
        print(format_table(
            ["backing size", "idle", "peak", "posted page lock idle / peak", "posted atomic idle / peak"],
            [[f"{r['size_bytes'] >> 40}T", format_bytes(r["idle_bytes"]), format_bytes(r["peak_bytes"]),
              " / ".join(r["posted"].get("page", ["-", "-"])), " / ".join(r["posted"].get("atomic", ["-", "-"]))]
             for r in result.memory]))
    return 0 if result.passed else 1
