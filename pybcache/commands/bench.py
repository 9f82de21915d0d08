"""``pybcache bench``: tracker hot paths against the machine's own floors, as ratios."""
from __future__ import annotations

import argparse
import sys

from .._cliutil import emit_json, format_table
from ..bench import run_bench


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="tracker hot paths against floors measured in the same run",
                       description="Measure a bare C atomic pair, a bare spinlock pair and an empty Cython "
                                   "method pair, then each variant's start+end and is_active costs, and print "
                                   "the ratios.")
    p.add_argument("--quick", action="store_true", help="fewer iterations (noisier)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    def note(label: str) -> None:
        if not args.json and sys.stderr.isatty():
            sys.stderr.write(f"\rbench: {label:<10}")
            sys.stderr.flush()

    res = run_bench(quick=args.quick, progress=note)
    if not args.json and sys.stderr.isatty():
        sys.stderr.write("\r" + " " * 20 + "\r")
    if args.json:
        emit_json(res)
        return 0
    fl = res["floors"]
    print("Floors (measured now): "
          f"atomic pair {fl['atomic_pair_ns']:.1f} ns, spinlock pair {fl['spinlock_pair_ns']:.1f} ns, "
          f"empty Cython method pair {fl['cython_empty_pair_ns']:.1f} ns, "
          f"2-thread shared-counter pair {fl['shared_atomic_pair_ns']:.1f} ns")
    rows = []
    for r in res["results"]:
        rows.append([r["variant"], f"{r['batch_pair_ns']:.1f}", f"{r['batch_pair_vs_floor']:.2f}x",
                     f"{r['single_pair_ns']:.1f}", f"{r['single_pair_vs_empty_call']:.2f}x",
                     f"{r['speedup_vs_reference']:.0f}x", f"{r['batch_check_ns']:.1f}",
                     f"{r['scaling_2_over_1']:.2f}x", f"{r['scaling_2_over_1_adjacent_slots']:.2f}x",
                     f"{r['single_pair_cold_ns']:.0f}"])
    print(format_table(["variant", "batch pair ns", "vs floor", "call pair ns", "vs empty call",
                        "vs reference", "batch check ns", "2thr/1thr", "adjacent", "cold pair ns"], rows))
    print("Pairs are start+end of a 128 KiB write with the tracking page resident (one write held in flight);\n"
          "cold = the page is allocated and freed by every pair. floor: atomic pair for 'atomic', spinlock pair\n"
          "for the lock variants. 2thr/1thr: native stress throughput, threads on pages whose slots sit on\n"
          "different cache lines; adjacent: on neighbouring pages (their 16-byte slots share a line).")
    return 0
