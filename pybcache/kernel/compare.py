"""``pybcache kernel compare``: the lab held against the real driver, one configuration per row.

For each configuration (unpatched 6.12; the v1 approach; the v3 proposal with its read check in the miss path
and at request entry, with and without failing allocations; each kernel mutant; the writethrough fallback
unpatched, under v3 and under v3 counting writethrough writes) it puts side by side:

* the **model**: ``pybcache explore`` (every interleaving of 1w1r, 2w1r, 1w2r) and ``pybcache race`` (threads
  on the cached-device model) with the same design: the same tracker (the lab's proposal, or its mutant making
  the kernel mutant's mistake), the same check placement, the same allocation failures;
* ``pybcache check-patch``'s default battery on that tracker;
* the **real driver**: ``pybcache kernel race`` (stale tries, the balance at quiescence, the kernel's reports)
  and, for the rows that ask for it, ``pybcache kernel stress`` (stale reads out of reads).

The model's and check-patch's verdicts come from running those commands (``--json``, in a child process each,
as a user would run them); the kernel's from booting the built kernels. Two agreements are computed per row:
*stale* (the model finds a stale read iff the kernel serves one) and *caught* (the lab's tools fail the design
iff the kernel does: a stale try, a broken balance or a kernel report). A disagreement is a finding, explained
in docs/kernel.md ("The lab held against the kernel").
"""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Optional

from ._paths import cache_dir

__all__ = ["CONFIGS", "Config", "run_compare", "saved_compare", "agreement", "compare_table", "CompareError"]


class CompareError(RuntimeError):
    """A part of the comparison could not run (a lab command failed without a verdict)."""


@dataclasses.dataclass(frozen=True)
class Config:
    name: str
    what: str
    patches: tuple[str, ...]               # generated patch names (pybcache kernel diff NAME)
    model: tuple[str, ...]                 # explore/race options of the design (besides --sync)
    sync: str                              # "none", "v3" (the proposal) or a mutant of the proposal
    fail_alloc: Optional[str] = None       # kernel: failslab under this function; model: every allocation fails
    stress: bool = False                   # also run kernel stress (and set the model's race rate beside it)
    writes: str = "bypass"                 # kernel race: the tries' writes (bypass or writethrough)
    cache_write_fail: Optional[str] = None  # kernel race: the cache writes fail (completion: the fallback)


# the v3 hooks place the read's check in cached_dev_cache_miss before the check key: --check miss
CONFIGS: tuple[Config, ...] = (
    Config("unpatched", "Linux 6.12.118 as shipped", (), (), "none", stress=True),
    Config("v1", "the v1 approach: invalidate after the backing write", ("v1",), ("--invalidate", "after-write"),
           "none", stress=True),
    Config("v3", "the v3 proposal, read check in the miss path", ("v3",), ("--check", "miss"), "v3", stress=True),
    Config("v3, allocations fail", "v3 with every tracker page allocation failing (hijack)", ("v3",),
           ("--check", "miss"), "v3", fail_alloc="bch_bypass_page_alloc"),
    Config("v3, check at entry", "v3 with the read check at request entry", ("v3-check-at-entry",),
           ("--check", "entry"), "v3"),
    Config("v3-gfp-kernel-under-lock", "a GFP_KERNEL page allocation under the page's spinlock",
           ("v3-gfp-kernel-under-lock",), ("--check", "miss"), "gfp-kernel-under-lock"),
    Config("v3-untracked-fallback", "a failed allocation leaves the write uncounted (allocations fail)",
           ("v3-untracked-fallback",), ("--check", "miss"), "untracked-fallback",
           fail_alloc="bch_bypass_page_alloc"),
    Config("v3-end-one-chunk-too-many", "the end decrements one chunk past its range",
           ("v3-end-one-chunk-too-many",), ("--check", "miss"), "end-one-chunk-too-many"),
    # check-patch hands write_end the bio consumed, as cached_dev_write_complete sees s->orig_bio: the twin is the
    # proposal's mutant that reads its range there
    Config("v3-orig-bio-end", "the end takes its range from the consumed s->orig_bio", ("v3-orig-bio-end",),
           ("--check", "miss"), "end-reads-consumed-bio"),
    # the writethrough fallback: the model fails the insert's cache allocation (explore: the first; race: every
    # one), the kernel fails the insert's cache write on the disk; either way bcache invalidates the range
    # while the backing write is in flight (request.c:264-272, :139-166)
    Config("writethrough fallback", "writethrough writes whose insert falls back to an invalidation", (),
           ("--writes", "writethrough", "--cache-alloc-fail", "1"), "none",
           writes="writethrough", cache_write_fail="completion"),
    Config("v3, writethrough fallback", "v3 (counts bypass writes only) under the writethrough fallback", ("v3",),
           ("--check", "miss", "--writes", "writethrough", "--cache-alloc-fail", "1", "--track", "bypass"), "v3",
           writes="writethrough", cache_write_fail="completion"),
    Config("v3-track-writethrough", "v3 also counting writethrough writes, under the writethrough fallback",
           ("v3-track-writethrough",),
           ("--check", "miss", "--writes", "writethrough", "--cache-alloc-fail", "1", "--track", "all"), "v3",
           writes="writethrough", cache_write_fail="completion"),
)


def _lab(args: list[str], timeout: float) -> dict:
    """``python -m pybcache ARGS --json`` in a child; its JSON (exit 0 or 1), else CompareError."""
    cmd = [sys.executable, "-m", "pybcache", *args, "--json"]
    try:
        # from a scratch directory: `-m` puts the working directory first on sys.path, and a source tree there
        # (no built extensions) would shadow the installed package
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                             cwd=tempfile.gettempdir())
    except subprocess.TimeoutExpired:
        raise CompareError(f"`pybcache {' '.join(args)}` took over {timeout:.0f} s") from None
    if res.returncode not in (0, 1):
        tail = (res.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise CompareError(f"`pybcache {' '.join(args)}` exited {res.returncode}: {tail}")
    try:
        return json.loads(res.stdout)
    except json.JSONDecodeError:
        raise CompareError(f"`pybcache {' '.join(args)}` printed no JSON") from None


def _tracker_file(sync: str, folder: Path) -> Optional[str]:
    """The .c file of the design's tracker (None for no tracker)."""
    if sync == "none":
        return None
    from ..bcache.kpatch.mutants import apply, mutant, proposal
    if sync == "v3":
        return str(proposal())
    path = folder / f"{sync.replace('-', '_')}.c"
    if not path.exists():
        path.write_text(apply(mutant(sync), proposal().read_text()))
    return str(path)


def model_row(cfg: Config, folder: Path, *, race_seconds: float = 2.0, check_patch: bool = True) -> dict:
    """The model's verdicts on ``cfg``: explore, race and (for a tracker) check-patch."""
    tracker = _tracker_file(cfg.sync, folder)
    sync = ["--sync", tracker or "none"]
    fault_explore = ["--fault-at", "1"] if cfg.fail_alloc else []
    fault_race = ["--fault-probability", "1"] if cfg.fail_alloc else []
    ex = _lab(["explore", *sync, *cfg.model, *fault_explore], timeout=600)
    rc = _lab(["race", *sync, *cfg.model, *fault_race, "--seconds", f"{race_seconds:g}"], timeout=120)
    row: dict[str, Any] = {
        "tracker": Path(tracker).name if tracker else None,
        "explore": {"violations": ex["violations"], "schedules": ex["schedules"],
                    "kernel_report_schedules": ex.get("kernel_report_schedules", 0),
                    "counterexample": ex.get("counterexample")},
        "race": {"stale_reads": rc["stale_reads"], "reads": rc["reads"],
                 "stale_cached_blocks": rc.get("stale_cached_blocks", 0)},
        "check_patch": None,
    }
    if tracker and check_patch:
        cp = _lab(["check-patch", tracker], timeout=300)
        row["check_patch"] = {"passed": cp["passed"],
                              "failed": [{"check": c["name"], "figure": c.get("figure")}
                                         for c in cp["checks"] if not c["passed"]],
                              "wall_s": cp.get("wall_s")}
    return row


def kernel_row(cfg: Config, *, tries: int, stress_seconds: int, debug: bool = True, jobs: int = 2,
               say: Callable[[str], None] = lambda text: None) -> dict:
    """The real driver's verdicts on ``cfg``: build, race, and stress if the row asks for it."""
    from .build import build_kernel
    from .generate import generated_patch
    from .race import run_race
    from .stress import run_stress
    t0 = time.monotonic()
    say(f"{cfg.name}: build")
    built = build_kernel([generated_patch(n) for n in cfg.patches], debug=debug, jobs=jobs)
    build_s = time.monotonic() - t0
    say(f"{cfg.name}: race")
    race = run_race(built, tries=tries, fail_alloc=cfg.fail_alloc, writes=cfg.writes,
                    cache_write_fail=cfg.cache_write_fail, wait_counters=False,
                    progress=lambda text: say(f"{cfg.name}: race, {text}"))
    row: dict[str, Any] = {
        "version": built.version, "build_s": round(build_s, 1), "built": built.built,
        "race": {"stale": race.stale, "garbage": race.garbage, "tries": race.tries,
                 "balance": race.balance.get("verdict"), "writes": race.writes,
                 "cache_write_fail": race.cache_write_fail,
                 "reports": [_report_head(r) for r in race.reports],
                 "fail_alloc": race.fail_alloc, "seconds": round(race.seconds, 1), "passed": race.passed},
        "stress": None,
    }
    if cfg.stress and stress_seconds:
        say(f"{cfg.name}: stress")
        st = run_stress(built, seconds=stress_seconds, wait_counters=False,
                        progress=lambda text: say(f"{cfg.name}: stress, {text}"))
        row["stress"] = {"reads": st.reads, "stale_reads": st.stale_reads, "writes": st.writes,
                         "stale_final": st.stale_final, "reports": [_report_head(r) for r in st.reports],
                         "seconds": round(st.seconds, 1)}
    return row


def _report_head(report: dict) -> dict:
    """A kernel report's kind and its first line that says what happened (the kernel's words)."""
    lines = [ln.strip() for ln in report.get("text", "").splitlines() if ln.strip()]
    head = next((ln for ln in lines if any(k in ln for k in ("BUG", "WARNING", "bcache:", "possible", "inconsistent",
                                                                "KASAN", "hung", "panic", "guest"))),
                lines[0] if lines else "")
    return {"kind": report.get("kind"), "head": head[:200]}


def agreement(model: dict, kernel: dict) -> dict:
    """Whether the lab and the kernel agree on ``stale`` (a stale read is possible) and ``caught`` (the design
    fails), each ``True``/``False``; with the two sides' verdicts."""
    model_stale = model["explore"]["violations"] > 0 or model["race"]["stale_reads"] > 0
    kernel_stale = (kernel["race"]["stale"] > 0 or kernel["race"].get("garbage", 0) > 0
                    or bool(kernel["stress"] and kernel["stress"]["stale_reads"] > 0))
    cwf = kernel["race"].get("cache_write_fail")
    if cwf is not None and not cwf["fired"]:
        # the fault the row is about did not fire as asked: the kernel's side measured something else
        return {"model_stale": model_stale, "kernel_stale": None, "stale": False, "model_caught": None,
                "kernel_caught": None, "caught": False, "not_measured": "the cache-write fault did not fire on "
                                                                        "every try's data write alone"}
    cp = model.get("check_patch")
    model_caught = model_stale or model["explore"]["kernel_report_schedules"] > 0 or bool(cp and not cp["passed"])
    kernel_caught = kernel_stale or kernel["race"]["balance"] != "held" or bool(kernel["race"]["reports"]) or \
        bool(kernel["stress"] and kernel["stress"]["reports"])
    return {"model_stale": model_stale, "kernel_stale": kernel_stale, "stale": model_stale == kernel_stale,
            "model_caught": model_caught, "kernel_caught": kernel_caught, "caught": model_caught == kernel_caught}


def _saved_path() -> Path:
    return cache_dir() / "compare" / "latest.json"


def saved_compare() -> Optional[dict]:
    """The last ``kernel compare`` run's result (None when there is none or it is unreadable)."""
    try:
        return json.loads(_saved_path().read_text())
    except (OSError, ValueError):
        return None


def run_compare(*, only: Optional[list[str]] = None, tries: int = 5, stress_seconds: int = 20,
                race_seconds: float = 2.0, debug: bool = True, jobs: int = 2, save: bool = True,
                progress: Optional[Callable[[str, int, int], None]] = None) -> dict:
    """Every configuration (or those named in ``only``) on the model, check-patch and the real driver."""
    names = [c.name for c in CONFIGS]
    for n in only or []:
        if n not in names:
            raise ValueError(f"only: no configuration {n!r} (known: {', '.join(names)})")
    if not 1 <= tries <= 100:
        raise ValueError(f"tries must be in [1, 100], got {tries}")
    if not 0 <= stress_seconds <= 600:
        raise ValueError(f"stress_seconds must be in [0, 600], got {stress_seconds}")
    configs = [c for c in CONFIGS if not only or c.name in only]
    if not debug and any(c.fail_alloc or c.cache_write_fail for c in configs):
        raise ValueError("the configurations with failing allocations or cache writes need the debug build "
                         "(failslab, fail_make_request)")
    started = time.monotonic()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="pybcache-compare-") as tmp:
        for i, cfg in enumerate(configs):
            def say(text: str, i: int = i) -> None:
                if progress:
                    progress(text, i, len(configs))
            say(f"{cfg.name}: model")
            model = model_row(cfg, Path(tmp), race_seconds=race_seconds)
            kernel = kernel_row(cfg, tries=tries, stress_seconds=stress_seconds, debug=debug, jobs=jobs, say=say)
            rows.append({"config": cfg.name, "what": cfg.what, "patches": [f"gen:{p}" for p in cfg.patches],
                         "fail_alloc": cfg.fail_alloc, "model": model, "kernel": kernel,
                         "agree": agreement(model, kernel)})
    result: dict[str, Any] = {"kernel": rows[0]["kernel"]["version"] if rows else None, "debug": debug, "tries": tries,
              "stress_seconds": stress_seconds,
              "rows": rows, "seconds": round(time.monotonic() - started, 1),
              "measured": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
              "disagreements": [r["config"] for r in rows if not (r["agree"]["stale"] and r["agree"]["caught"])]}
    if save and not only:
        path = _saved_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        tmpf = path.with_name(f".{path.name}.{os.getpid()}")
        tmpf.write_text(json.dumps(result, indent=1))
        os.replace(tmpf, path)
    return result


def compare_table(result: dict) -> tuple[list[str], list[list[str]]]:
    """The compare result as (headers, rows) of text, for the terminal and the report."""
    headers = ["configuration", "model explore", "model race", "check-patch", "kernel race", "balance",
               "kernel reports", "kernel stress", "agree"]
    rows = []
    for r in result["rows"]:
        m, k, a = r["model"], r["kernel"], r["agree"]
        ex = m["explore"]
        explore = f"{ex['violations']:,} / {ex['schedules']:,} stale"
        if ex["kernel_report_schedules"]:
            explore += f", {ex['kernel_report_schedules']:,} reports"
        race = f"{m['race']['stale_reads']:,} / {m['race']['reads']:,} stale"
        cp = m["check_patch"]
        cpt = "-" if cp is None else "passed" if cp["passed"] else \
            f"failed {len(cp['failed'])}: {cp['failed'][0]['check']} ({cp['failed'][0]['figure']})" + \
            (", ..." if len(cp["failed"]) > 1 else "")
        kinds = sorted({x["kind"] for x in k["race"]["reports"]})
        stress = "-" if not k["stress"] else f"{k['stress']['stale_reads']} / {k['stress']['reads']} stale"
        agree = "yes" if a["stale"] and a["caught"] else f"NO: {a['not_measured']}" if a.get("not_measured") else \
            "NO: " + ", ".join(w for w, ok in (("stale", a["stale"]), ("caught", a["caught"])) if not ok)
        kr = f"{k['race']['stale']} / {k['race']['tries']} stale"
        if k["race"].get("garbage"):
            kr += f", {k['race']['garbage']} garbage"
        rows.append([r["config"], explore, race, cpt, kr,
                     k["race"]["balance"], ", ".join(kinds) or "none", stress, agree])
    return headers, rows
