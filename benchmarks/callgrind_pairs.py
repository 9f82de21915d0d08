"""Instructions per batch start+end pair, per variant, counted by callgrind (issue 15).

Run under valgrind; only the batch calls are collected (``--toggle-collect`` on the Cython methods), so
the count includes the argument checks and the C loop, not the interpreter around them::

    valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.%p --collect-atstart=no \\
        --toggle-collect='*start_many*' --toggle-collect='*end_many*' \\
        python benchmarks/callgrind_pairs.py atomic 20000
    callgrind_annotate /tmp/cg.<pid> | head      # total Ir / 20000 = instructions per pair

The workload is bench's batch one: 128 KiB writes at random offsets of a 10 GiB device (one tracking
page), with one write held in flight so that the page stays resident.
"""
from __future__ import annotations

import sys

import numpy as np

import pybcache

GiB = 1 << 30
WRITE = 128 * 1024


def main() -> None:
    sync = sys.argv[1] if len(sys.argv) > 1 else "atomic"
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 20_000
    size = 10 * GiB
    rng = np.random.default_rng(0)
    offs = (rng.integers(0, (size - WRITE) // 4096, n) * 4096).astype(np.int64)
    t = pybcache.BypassWriteTracker(size, sync=sync)
    t.start(size - 4096, 4096)
    t.start_many(offs, WRITE)
    t.end_many(offs, WRITE)
    t.end(size - 4096, 4096)


if __name__ == "__main__":
    main()
