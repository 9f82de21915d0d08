"""The v2 cover letter's fio job (real fio, nbd engine) against nbdkit's own memory plugin, the served model's C plugin
and nbdkit's Python plugin calling the model, in one run: the figures docs/serve.md quotes for the choice
of the C plugin and for the served model's IOPS as a ratio of nbdkit-memory's.

    python benchmarks/nbd_plugins.py [--size 10G] [--seconds 5] [--rounds 3] [--jobs N] [--write-delay 0]

A script rather than a pytest-benchmark suite: fio measures, not the benchmark timer. Configurations run
in rotating order, ``--rounds`` times each; each figure is the median over rounds, and every ratio is
against nbdkit-memory measured in the same run. Needs fio, nbdkit, nbdkit-plugin-dev and (for the Python
plugin) nbdkit-plugin-python.
"""
from __future__ import annotations

import argparse
import os
import statistics

from pybcache.commands._util import format_table, parse_size
from pybcache.bcache.nbd.fio import _memory_baseline, run_fio
from pybcache.bcache.nbd.server import Server
from pybcache.units import parse_duration


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="10G")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=min(16, os.cpu_count() or 1))
    ap.add_argument("--write-delay", default="0")
    ap.add_argument("--no-python", action="store_true", help="skip nbdkit's Python plugin")
    args = ap.parse_args()
    size, delay = parse_size(args.size, name="--size"), parse_duration(args.write_delay, name="--write-delay")

    configs = [("nbdkit memory", None, None), ("C plugin, none", "c", "none"), ("C plugin, page", "c", "page"),
               ("C plugin, global", "c", "global"), ("C plugin, atomic", "c", "atomic")]
    if not args.no_python:
        configs += [("Python plugin, none", "python", "none"), ("Python plugin, page", "python", "page")]
    iops: dict[str, list[float]] = {c[0]: [] for c in configs}
    for k in range(args.rounds):
        for j in range(len(configs)):
            label, plugin, sync = configs[(j + k) % len(configs)]
            if plugin is None:
                f = _memory_baseline(size=size, write_delay_ns=delay, jobs=args.jobs, seconds=args.seconds, threads=64)
            else:
                with Server(sync=sync, size=size, write_delay_ns=delay, plugin=plugin) as server:
                    f = run_fio(server.uri, jobs=args.jobs, seconds=args.seconds, size=size)
            iops[label].append(f["read_iops"] + f["write_iops"])
            print(f"round {k + 1}: {label}: {iops[label][-1]:,.0f} IOPS", flush=True)
    med = {label: statistics.median(v) for label, v in iops.items()}
    ref = med["nbdkit memory"]
    print(f"\nfio randrw 4k/128k iodepth 32, {args.jobs} jobs, {size / (1 << 30):g} GiB, {args.seconds:g} s x "
          f"{args.rounds} rounds, write delay {delay / 1e6:g} ms (median total IOPS)")
    print(format_table(["Server", "Total IOPS", "vs nbdkit memory", "rounds"],
                       [[label, f"{m:,.0f}", f"{m / ref:.2f}x", " ".join(f"{x:,.0f}" for x in iops[label])]
                        for label, m in med.items()]))


if __name__ == "__main__":
    main()
