"""``pybcache kernel build|race|stress|diff``: Linux 6.12's own bcache driver as the lab's judge, under
User-Mode Linux (pybcache/kernel/; docs/kernel.md)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from .._console import format_table, status_bar
from ._util import UsageError, emit_json, int_arg

ACTIONS = ("build", "race", "stress", "diff", "compare")
# option -> the actions it applies to (the others refuse it)
_ONLY = {"no_debug": ("build", "race", "stress", "compare"), "jobs": ("build", "race", "stress", "compare"),
         "patch": ("build", "race", "stress"), "tries": ("race", "compare"), "write_delay": ("race", "stress"),
         "fail_alloc": ("race",), "writes": ("race",), "cache_write_fail": ("race",),
         "seconds": ("stress", "compare"), "writers": ("stress",), "readers": ("stress",),
         "keep": ("race", "stress"), "only": ("compare",)}
_DEFAULTS: dict[str, Any] = {"no_debug": False, "jobs": 2, "patch": None, "tries": 5,
                             "write_delay": {"race": "3s", "stress": "1s"}, "fail_alloc": None, "writes": "bypass",
                             "cache_write_fail": None, "seconds": 20,
                             "writers": 2, "readers": 2, "keep": False, "only": None}


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("kernel", help="build Linux 6.12 under User-Mode Linux and race its real bcache driver",
                       description="build: unpack /usr/src/linux-source-6.12.tar.xz once, configure (tinyconfig + "
                                   "the lab's fragments; debug: PREEMPT, PROVE_LOCKING, DEBUG_ATOMIC_SLEEP, KASAN, "
                                   "failslab, fail_make_request), apply the patches and build out of tree, reusing the "
                                   "objects. race: boot it confined, run the bypass-write/read-miss reproducer "
                                   "(or, with --writes writethrough --cache-write-fail, the writethrough "
                                   "fallback's), the balance check and the teardown; any lockdep, might_sleep, "
                                   "KASAN, WARNING or BUG report fails. "
                                   "stress: writers and readers of versioned blocks in the guest. diff NAME: print a "
                                   "patch the lab generates (v1, v3, v3-*). compare: every configuration (unpatched, "
                                   "v1, v3 and its placements and mutants) on the model, check-patch and the real "
                                   "driver, side by side. Exit 0 passed (compare: the lab and the kernel agree on "
                                   "every row), 1 failed, 2 usage or build error. "
                                   "Cache: $PYBCACHE_KERNEL_CACHE (default ~/.cache/pybcache/kernel).")
    p.add_argument("action", choices=ACTIONS, help="what to do")
    p.add_argument("name", nargs="?", default=None,
                   help="diff: the generated patch to print (v1, v3, a v3 placement: v3-check-at-entry, "
                        "v3-track-writethrough, or a v3 mutant: v3-gfp-kernel-under-lock, "
                        "v3-untracked-fallback, v3-end-one-chunk-too-many, v3-orig-bio-end)")
    p.add_argument("--patch", action="append", metavar="DIFF", default=None,
                   help="a unified diff against the 6.12 tree, applied with patch -p1 (repeatable, in order); "
                        "a generated one as gen:NAME (gen:v1, gen:v3, ...)")
    p.add_argument("--no-debug", action="store_true",
                   help="build without the debug fragment (no lockdep, KASAN, failslab)")
    p.add_argument("--jobs", type=int_arg(1, 64), default=None, metavar="N", help="make -j (default 2)")
    p.add_argument("--tries", type=int_arg(1, 1000), default=None, metavar="N",
                   help="race, compare: reproducer tries, each on a fresh block, up to 10 at a time (default 5; "
                        "compare: at most 100)")
    p.add_argument("--write-delay", default=None, metavar="TIME",
                   help="race, stress: dm-delay's delay of the backing device's writes, e.g. 3s, 500ms, 0 (whole ms, "
                        "at most 10s; default 3s for race, 1s for stress)")
    p.add_argument("--fail-alloc", default=None, metavar="SYMBOL",
                   help="race: failslab fails every slab allocation made under SYMBOL (require-start/end from "
                        "/proc/kallsyms, ignore-gfp-wait N) during the tries")
    p.add_argument("--writes", choices=("bypass", "writethrough"), default=None,
                   help="race: the tries' writes are bypass writes (cache_mode writearound, the default) or "
                        "writethrough writes (the data written to the cache too)")
    p.add_argument("--cache-write-fail", choices=("completion", "submission"), default=None,
                   help="race, with --writes writethrough: each try's cache write fails (fail_make_request on the "
                        "cache disk; debug build). completion: the error reaches bcache after its submission, as a "
                        "device's does, and bcache invalidates the range while the backing write is in flight "
                        "(the writethrough fallback); submission: the error completes inside the submission")
    p.add_argument("--seconds", type=int_arg(0, 600), default=None, metavar="S",
                   help="stress, compare: how long the writers and readers run (default 20; compare: 0 = no "
                        "stress)")
    p.add_argument("--writers", type=int_arg(1, 16), default=None, metavar="N", help="stress: writers (default 2)")
    p.add_argument("--readers", type=int_arg(1, 16), default=None, metavar="N", help="stress: readers (default 2)")
    p.add_argument("--only", action="append", metavar="CONFIG", default=None,
                   help="compare: only this configuration (repeatable; the names are the table's first column)")
    p.add_argument("--keep", action="store_true", help="race, stress: keep the run's work dir (images, logs)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def _check_options(args: argparse.Namespace) -> None:
    for opt, actions in _ONLY.items():
        value = getattr(args, opt)
        if args.action not in actions and value not in (None, False):
            raise UsageError(f"--{opt.replace('_', '-')} does not apply to `kernel {args.action}` "
                             f"(only to {', '.join(actions)})")
        if value is None or value is False:
            default = _DEFAULTS[opt]
            setattr(args, opt, default.get(args.action) if isinstance(default, dict) else default)
    if args.write_delay is not None:
        from ..units import parse_duration
        try:
            ns = parse_duration(args.write_delay, name="--write-delay")
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        if ns % 10 ** 6:
            raise UsageError(f"--write-delay: dm-delay counts whole milliseconds, got {args.write_delay!r}")
        args.write_delay_ms = ns // 10 ** 6
    if args.action == "stress" and args.seconds == 0:
        raise UsageError("--seconds: expected an integer in [1, 600] for kernel stress, got 0")
    if args.action == "compare":
        from ..kernel.compare import CONFIGS
        names = [c.name for c in CONFIGS]
        for n in args.only or []:
            if n not in names:
                raise UsageError(f"--only: no configuration {n!r} (known: {', '.join(names)})")
        if args.tries > 100:
            raise UsageError(f"--tries: expected an integer in [1, 100] for kernel compare, got {args.tries}")
        chosen = [c for c in CONFIGS if not args.only or c.name in args.only]
        if args.no_debug and any(c.fail_alloc or c.cache_write_fail for c in chosen):
            raise UsageError("--no-debug: the configurations with failing allocations or cache writes need the "
                             "debug build (failslab, fail_make_request); pick others with --only")
    if args.action == "diff":
        if not args.name:
            raise UsageError("kernel diff: name the generated patch (v1, v3, v3-...)")
    elif args.name is not None:
        raise UsageError(f"unrecognized arguments: {args.name} (only `kernel diff` takes a NAME)")
    if args.fail_alloc is not None:
        import re
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]{0,127}", args.fail_alloc):
            raise UsageError(f"--fail-alloc: expected a kernel symbol name, got {args.fail_alloc!r}")
        if args.no_debug:
            raise UsageError("--fail-alloc needs the debug build (failslab): drop --no-debug")
    if args.cache_write_fail:
        if args.writes != "writethrough":
            raise UsageError("--cache-write-fail needs --writes writethrough (a bypass write writes nothing to "
                             "the cache)")
        if args.no_debug:
            raise UsageError("--cache-write-fail needs the debug build (fail_make_request): drop --no-debug")


def _patches(args: argparse.Namespace) -> list[Path]:
    from ..kernel.generate import GENERATED, generated_patch
    out = []
    for item in args.patch or []:
        if item.startswith("gen:"):
            name = item[4:]
            if name not in GENERATED:
                raise UsageError(f"--patch {item}: no generated patch {name!r} (known: {', '.join(GENERATED)})")
            out.append(generated_patch(name))
            continue
        path = Path(item)
        if not path.is_file():
            raise UsageError(f"--patch {item}: no such file")
        out.append(path)
    return out


def _build(args: argparse.Namespace) -> Any:
    from ..kernel.build import KernelBuildError, build_kernel
    from ..kernel.generate import GenerateError
    try:
        patches = _patches(args)
    except GenerateError as exc:
        raise UsageError(str(exc)) from None
    with status_bar("kernel build", quiet=args.json) as bar:
        def progress(step: str, done: int, total: Any) -> None:
            if total and bar.total != total:
                bar.total = total
                bar.refresh()
            bar.n = done
            bar.set_postfix_str(step[:60])

        try:
            return build_kernel(patches, debug=not args.no_debug, jobs=args.jobs, progress=progress)
        except KernelBuildError as exc:
            sys.stderr.write(f"pybcache kernel {args.action}: error: {exc}\n")
            return None


def _print_reports(reports: list[dict]) -> None:
    for r in reports:
        print(f"\n--- kernel report ({r['kind']}) ---\n{r['text']}")


def run(args: argparse.Namespace) -> int:
    _check_options(args)
    if args.action == "diff":
        from ..kernel.generate import GENERATED, GenerateError, generated_patch
        if args.name not in GENERATED:
            raise UsageError(f"kernel diff: no generated patch {args.name!r} (known: {', '.join(GENERATED)})")
        try:
            sys.stdout.write(generated_patch(args.name).read_text())
        except GenerateError as exc:
            sys.stderr.write(f"pybcache kernel diff: error: {exc}\n")
            return 2
        return 0
    if args.action == "compare":
        return _compare(args)
    built = _build(args)
    if built is None:
        return 2
    if args.action == "build":
        if args.json:
            emit_json(built.to_json())
        else:
            how = "built" if built.built else "already in the cache"
            print(f"linux {built.version} (um{', debug' if built.debug else ''}"
                  f"{', ' + str(len(built.patches)) + ' patch(es)' if built.patches else ''}) {how} in "
                  f"{built.seconds:.0f} s")
            print(f"kernel: {built.kernel}")
        return 0
    if args.action == "race":
        return _race(args, built)
    return _stress(args, built)


def _race(args: argparse.Namespace, built: Any) -> int:
    from ..kernel.race import COUNTERS, GuestSetupError, run_race
    with status_bar(f"kernel race ({args.tries} tries)", quiet=args.json) as bar:
        try:
            result = run_race(built, tries=args.tries, write_delay_ms=args.write_delay_ms, fail_alloc=args.fail_alloc,
                              writes=args.writes, cache_write_fail=args.cache_write_fail,
                              keep=args.keep, progress=lambda text: bar.set_postfix_str(text))
        except (GuestSetupError, RuntimeError) as exc:
            sys.stderr.write(f"pybcache kernel race: error: {exc}\n")
            return 2
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    if args.json:
        emit_json(result.to_json())
        return 0 if result.passed else 1
    print(f"kernel race: linux {result.version}{' + ' + ', '.join(result.patches) if result.patches else ''}")
    garbage = f"; garbage tries (neither version read back): {result.garbage}" if result.garbage else ""
    print(f"stale tries: {result.stale} / {result.tries}{garbage} ({result.writes} writes, write delay "
          f"{args.write_delay_ms} ms, read at 500 ms)")
    print(format_table(["try", "block", "read during write", "bcache0 after", "backing after", "stale"],
                       [[t["try"], t["block"], _v(t.get("read_during_write")), _v(t.get("bcache_after")),
                         _v(t.get("backing_after")),
                         "STALE" if t.get("stale") else "GARBAGE" if t.get("garbage") else "-"]
                        for t in result.per_try]))
    b = result.balance
    print(f"balance: {b['verdict']}" + (f" ({b['meaning']})" if "meaning" in b else ""))
    if result.fail_alloc:
        f = result.fail_alloc
        print(f"failslab under {f['symbol']} [{f['start']}, {f['end']}): {f['failures']} allocation(s) failed")
    if result.cache_write_fail:
        c = result.cache_write_fail
        errs = ", ".join(f"{n} on {what}" for what, n in sorted(c["io_errors"].items())) or "none"
        print(f"cache writes failed at {c['when']}: {_v(c['failures'])} of {c['armed']} armed (bcache's IO errors: "
              f"{errs}): {c['meaning']}")
        if not c["fired"]:
            print("NOT MEASURED: the fault did not fail every try's data write alone"
                  + (f" (the cache set failed: {', '.join(c['cache_set_errors'])})" if c["cache_set_errors"] else "")
                  + "; the run fails")
    print("counters (stats_total): " + ", ".join(f"{k} {result.counters[k]}" for k in COUNTERS
                                                    if k in result.counters))
    print(f"reports: {len(result.reports)}; {result.seconds:.1f} s; {result.preload}")
    print("\n--- guest kernel log ---")
    print(result.log.rstrip())
    _print_reports(result.reports)
    print(f"\nkernel race: {'PASSED' if result.passed else 'FAILED'}")
    return 0 if result.passed else 1


def _v(value: Any) -> str:
    return "?" if value is None else str(value)


def _stress(args: argparse.Namespace, built: Any) -> int:
    from ..kernel.race import GuestSetupError
    from ..kernel.stress import run_stress
    with status_bar(f"kernel stress ({args.seconds} s)", quiet=args.json) as bar:
        try:
            result = run_stress(built, seconds=args.seconds, writers=args.writers, readers=args.readers,
                                write_delay_ms=args.write_delay_ms,
                                keep=args.keep, progress=lambda text: bar.set_postfix_str(text))
        except (GuestSetupError, RuntimeError) as exc:
            sys.stderr.write(f"pybcache kernel stress: error: {exc}\n")
            return 2
    if args.json:
        emit_json(result.to_json())
        return 0 if result.passed else 1
    print(f"kernel stress: linux {result.version}{' + ' + ', '.join(result.patches) if result.patches else ''}: "
          f"{result.writers} writers, {result.readers} readers, {result.seconds_run} s")
    print(f"writes {result.writes}, reads {result.reads}, stale reads {result.stale_reads}, "
          f"stale blocks at quiescence {result.stale_final}")
    print(f"reports: {len(result.reports)}; {result.seconds:.1f} s")
    _print_reports(result.reports)
    print(f"\nkernel stress: {'PASSED' if result.passed else 'FAILED'}")
    return 0 if result.passed else 1


def _compare(args: argparse.Namespace) -> int:
    from ..kernel.build import KernelBuildError
    from ..kernel.compare import CompareError, compare_table, run_compare
    from ..kernel.generate import GenerateError
    from ..kernel.race import GuestSetupError
    with status_bar("kernel compare", total=1, quiet=args.json) as bar:
        def progress(text: str, done: int, total: int) -> None:
            if bar.total != total:
                bar.total = total
            bar.n = done
            bar.set_postfix_str(text[:60])

        try:
            result = run_compare(only=args.only, tries=args.tries, stress_seconds=args.seconds,
                                 debug=not args.no_debug, jobs=args.jobs, progress=progress)
        except (KernelBuildError, GenerateError, GuestSetupError, CompareError, RuntimeError) as exc:
            sys.stderr.write(f"pybcache kernel compare: error: {exc}\n")
            return 2
    ok = not result["disagreements"]
    if args.json:
        emit_json(result)
        return 0 if ok else 1
    print(f"kernel compare: linux {result['kernel']}{' (debug)' if result['debug'] else ''}, "
          f"{result['tries']} tries per race, stress {result['stress_seconds']} s; {result['seconds']:.0f} s")
    print(format_table(*compare_table(result)))
    for row in result["rows"]:
        for r in row["kernel"]["race"]["reports"] + (row["kernel"]["stress"] or {}).get("reports", []):
            print(f"  {row['config']}: {r['kind']}: {r['head']}")
    if ok:
        print("\nkernel compare: the lab and the kernel agree on every row")
    else:
        print(f"\nkernel compare: DISAGREE on {', '.join(result['disagreements'])} (each a finding: docs/kernel.md, "
              "\"The lab held against the kernel\")")
    return 0 if ok else 1

