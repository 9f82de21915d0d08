"""Instructions per batch start+end pair, per variant, counted by callgrind (issue 15).

``python benchmarks/callgrind_pairs.py --callgrind [variant ...] [--pairs N]`` runs this script under
valgrind's callgrind once per variant (default: global page atomic) and prints, per pair, the
instructions of ``start_many`` + ``end_many`` as Python calls them (argument checks and copies included,
the interpreter's call overhead not), split into the C loops (``pyb_tracker_start_many`` /
``pyb_tracker_end_many`` with everything they call, the lock included) and the rest: the Python side
(the Cython methods' argument checks, numpy's min/max and uint64 copies, the result array).

The counts are the *inclusive* costs callgrind gives each function, read with ``callgrind_annotate
--inclusive=yes``. (Collecting with ``--toggle-collect`` on a pattern such as ``*start_many*`` misses the
Python side: every function whose name matches toggles collection, so the Cython wrapper switches it on
and its inner implementation switches it off again.) By hand::

    valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.out python benchmarks/callgrind_pairs.py atomic 20000
    callgrind_annotate --inclusive=yes --auto=no /tmp/cg.out | grep many

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


def _inclusive(out_file: str) -> dict[str, int]:
    """Inclusive instruction counts of the batch functions in a callgrind output file."""
    text = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--auto=no", "--threshold=100", out_file],
                          check=True, capture_output=True, text=True).stdout
    names = {"pyb_tracker_start_many": "c_start", "pyb_tracker_end_many": "c_end",
             "BypassWriteTracker_17start_many": "py_start", "BypassWriteTracker_19end_many": "py_end"}
    found: dict[str, int] = {}
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+) \(\s*[\d.]+%\)\s+\S*?:(\S+)", line)
        if not m:
            continue
        for name, key in names.items():
            if m.group(2).endswith(name) and (key.startswith("c_") or m.group(2).startswith("__pyx_pw_")):
                found[key] = max(found.get(key, 0), int(m.group(1).replace(",", "")))
    missing = set(names.values()) - set(found)
    if missing:
        raise SystemExit(f"callgrind output {out_file} lacks {sorted(missing)}")
    return found


def count(sync: str, n: int) -> dict[str, float]:
    """Instructions per pair for one variant: total, C loops, Python side (each per start+end pair)."""
    with tempfile.TemporaryDirectory() as tmp:
        out_file = os.path.join(tmp, "cg.out")
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out_file}", sys.executable,
                        os.path.abspath(__file__), sync, str(n)], check=True, capture_output=True)
        c = _inclusive(out_file)
    total = (c["py_start"] + c["py_end"]) / n
    c_loops = (c["c_start"] + c["c_end"]) / n
    return {"total": total, "c_start": c["c_start"] / n, "c_end": c["c_end"] / n, "c_loops": c_loops,
            "python_side": total - c_loops}


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
        print(f"{'variant':8} {'total':>8} {'C loops':>8} {'(start':>8} {'+ end)':>8} {'Python':>8}")
        for v in args.variants or VARIANTS:
            r = count(v, args.pairs)
            print(f"{v:8} {r['total']:8.1f} {r['c_loops']:8.1f} {r['c_start']:8.1f} {r['c_end']:8.1f} "
                  f"{r['python_side']:8.1f}")
        return
    sync = sys.argv[1] if len(sys.argv) > 1 else "atomic"
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 20_000
    workload(sync, n)


if __name__ == "__main__":
    main()
