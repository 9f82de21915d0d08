"""Instructions per batch start+end pair, per variant, counted by callgrind (issue 15).

``python benchmarks/callgrind_pairs.py --callgrind [variant ...] [--pairs N]`` runs this script under
valgrind's callgrind once per variant (default: global page atomic), collecting only inside the Cython
wrappers of ``start_many`` and ``end_many`` (argument checks and copies included, the interpreter's call
overhead not), and prints the instructions per pair split into the C loops (every function in csrc/,
``pyb_tracker_start_many`` / ``end_many`` with what they inline, plus the pthread spinlock calls), the
memcpy of the offsets, and the Python side (the rest: argument checks, numpy's maximum, the result array).

The toggles name the two wrappers exactly (found with ``nm``): a glob such as ``*start_many*`` also
matches the inner implementation and C loop, and every match toggles collection, so the Python side was
switched off again inside the wrapper. By hand, with the names ``nm`` gives::

    valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.out --collect-atstart=no \\
        --toggle-collect=__pyx_pw_..._17start_many --toggle-collect=__pyx_pw_..._19end_many \\
        python benchmarks/callgrind_pairs.py atomic 20000
    callgrind_annotate /tmp/cg.out | head -20     # each count / 20000 = instructions per pair

The workload is bench's batch one: 128 KiB writes at random offsets of a 10 GiB device (one tracking
page), with one write held in flight so that the page stays resident, offsets passed as int64.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

GiB = 1 << 30
WRITE = 128 * 1024
VARIANTS = ("global", "page", "atomic")


def workload(sync: str, n: int) -> None:
    """One batch of n starts and n ends, the measured calls."""
    import pybcache
    size = 10 * GiB
    rng = np.random.default_rng(0)
    offs = (rng.integers(0, (size - WRITE) // 4096, n) * 4096).astype(np.int64)
    t = pybcache.BypassWriteTracker(size, sync=sync)
    t.start(size - 4096, 4096)
    t.start_many(offs, WRITE)
    t.end_many(offs, WRITE)
    t.end(size - 4096, 4096)


def _wrappers() -> list[str]:
    """The exact symbols of the Cython wrappers of start_many and end_many (a glob in --toggle-collect
    that also matches the inner implementation would switch collection off again inside it)."""
    import pybcache.bcache._tracker as mod
    syms = subprocess.run(["nm", mod.__file__], check=True, capture_output=True, text=True).stdout
    names = [line.split()[-1] for line in syms.splitlines()
             if re.search(r"__pyx_pw_\w*BypassWriteTracker_\d+(start|end)_many$", line)]
    if len(names) != 2:
        raise SystemExit(f"expected the start_many and end_many wrappers in {mod.__file__}, found {names}")
    return names


def _exclusive(out_file: str) -> dict[str, int]:
    """Each function's own instruction count in a callgrind output file."""
    text = subprocess.run(["callgrind_annotate", "--auto=no", "--threshold=100", out_file],
                          check=True, capture_output=True, text=True).stdout
    found: dict[str, int] = {}
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+) \(\s*[\d.]+%\)\s+(\S+)", line)
        if m and "PROGRAM TOTALS" not in line:
            found[m.group(2)] = found.get(m.group(2), 0) + int(m.group(1).replace(",", ""))
    return found


def callgrind(script: str, toggles: list[str], args: list[str]) -> dict[str, int]:
    """Run ``script args`` under callgrind collecting only inside the functions named by ``toggles`` (exact
    symbols), and return each function's own instruction count (:func:`_exclusive`)."""
    with tempfile.TemporaryDirectory() as tmp:
        out_file = os.path.join(tmp, "cg.out")
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out_file}", "--collect-atstart=no",
                        *(f"--toggle-collect={t}" for t in toggles), sys.executable, os.path.abspath(script),
                        *args], check=True, capture_output=True)
        return _exclusive(out_file)


def count(sync: str, n: int) -> dict[str, float]:
    """Instructions per pair for one variant: total, C loops, memcpy, Python side (each per pair).

    *C loops*: ``pyb_tracker_start_many``/``end_many`` and what they call (the lock included). *memcpy*:
    the copy of the offsets; glibc copies large blocks with ``rep movsb``, which callgrind counts once
    per byte, so this figure is bytes copied, not what the copy costs a CPU. *Python side*: the rest
    (argument checks, numpy's maximum, the result array, the calls' own code).
    """
    fns = callgrind(__file__, _wrappers(), [sync, str(n)])
    total = sum(fns.values()) / n
    c_start = sum(v for k, v in fns.items() if "csrc/" in k and "start_many" in k) / n
    c_end = sum(v for k, v in fns.items() if "csrc/" in k and "end_many" in k) / n
    lock = sum(v for k, v in fns.items() if "pthread_spin" in k) / n
    memcpy = sum(v for k, v in fns.items() if "memcpy" in k or "memmove" in k) / n
    c_loops = sum(v for k, v in fns.items() if "csrc/" in k) / n + lock
    return {"total": total, "c_loops": c_loops, "c_start": c_start, "c_end": c_end, "lock": lock,
            "memcpy": memcpy, "python_side": total - c_loops - memcpy}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--callgrind":
        ap = argparse.ArgumentParser(prog="callgrind_pairs.py --callgrind")
        ap.add_argument("variants", nargs="*", help="global, page and/or atomic (default: all three)")
        ap.add_argument("--pairs", type=int, default=20_000)
        args = ap.parse_args(sys.argv[2:])
        bad = set(args.variants) - set(VARIANTS)
        if bad:
            ap.error(f"variants must be among {', '.join(VARIANTS)}, got {', '.join(sorted(bad))}")
        print(f"instructions per batch start+end pair ({args.pairs} pairs, callgrind)")
        print(f"{'variant':8} {'total':>8} {'C loops':>8} {'(start':>8} {'+ end':>8} {'+ lock)':>8} "
              f"{'memcpy':>8} {'Python':>8}")
        for v in args.variants or VARIANTS:
            r = count(v, args.pairs)
            print(f"{v:8} {r['total']:8.1f} {r['c_loops']:8.1f} {r['c_start']:8.1f} {r['c_end']:8.1f} "
                  f"{r['lock']:8.1f} {r['memcpy']:8.1f} {r['python_side']:8.1f}")
        print("C loops: pyb_tracker_start_many + end_many (their inlined code) + the pthread spinlock calls; "
              "memcpy: bytes\ncopied (rep movsb, counted by callgrind once per byte); Python: the rest of "
              "start_many + end_many.")
        return
    sync = sys.argv[1] if len(sys.argv) > 1 else "atomic"
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 20_000
    workload(sync, n)


if __name__ == "__main__":
    main()
