"""``pybcache writeback``: the v6 cover letter's table, baseline (owner-wb flushes) against the series
(bdev-mapping flushes), on simulated time; optionally the dev_t-reuse churn comparison, or (``--sensitivity``)
the table's change under each perturbation of the experiment."""
from __future__ import annotations

import argparse
import time
from typing import Any

from ..units import MiB
from ._util import emit_json, int_arg
from .._console import format_table, progress

MAX_RUNS = 1000
MAX_SEED = (1 << 48) - 1
DEFAULT_RUNS = 3
DEFAULT_SENSITIVITY_RUNS = 1


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("writeback", help="the v6 memcg foreign-bdev writeback table, baseline vs patched",
                       description="Simulate the v6 cover letter's experiment (200 MiB/s disk, a background "
                                   "job rewriting a 256 MiB file, a foreground direct writer, four memcgs "
                                   "dirtying metadata) with the kernel's owner-wb foreign flushes and with the "
                                   "series' bdev-mapping flushes, and print the v6 cover letter's four-row table.")
    p.add_argument("--runs", type=int_arg(1, MAX_RUNS), default=None, metavar="N",
                   help=f"runs per mechanism, 1..{MAX_RUNS} (default {DEFAULT_RUNS}; {DEFAULT_SENSITIVITY_RUNS} "
                        "per perturbation with --sensitivity)")
    p.add_argument("--seed", type=int_arg(0, MAX_SEED), default=0, metavar="N",
                   help="base seed, >= 0 (default 0); the same seed gives the same table")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--churn", action="store_true",
                      help="also compare dev_t records with reference-holding records under dev_t reuse")
    mode.add_argument("--sensitivity", action="store_true",
                      help="instead of the table, rerun it under each perturbation (device bandwidth, iodepth, wbt "
                           "depth, dirty expiry, memory.max and op rate, the background job's memcg, number of "
                           "memcgs) and print the change per row")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def _fmt_change(value: float) -> str:
    return f"{value:+.1f}%"


def _rows(result: Any) -> list[list[str]]:
    from ..writeback import METRICS, POSTED_TABLE
    base, pat, change = result.baseline, result.patched, result.change_percent
    digits = {"background_write_gib": 3, "foreground_bandwidth_mib_s": 2, "foreground_completion_s": 3,
              "foreground_mean_latency_ms": 2}
    rows = []
    for key, label in METRICS:
        d = digits[key]
        rows.append([label, f"{base[key]:.{d}f}", f"{pat[key]:.{d}f}", _fmt_change(change[key]),
                     _fmt_change(POSTED_TABLE["change_percent"][key])])
    return rows


def _flush_rows(flushes: dict[str, Any]) -> list[list[str]]:
    from ..writeback import PAGE_SIZE

    b, p = flushes["baseline"], flushes["patched"]
    labels = sorted(set(b["pages_by_target_per_run"]) | set(p["pages_by_target_per_run"]))
    page_mib = PAGE_SIZE / MiB
    rows = [
        ["Foreign flushes issued", f"{b['foreign_flushes_per_run']:.1f}", f"{p['foreign_flushes_per_run']:.1f}"],
        ["Pages written by them", f"{b['pages_written_per_run']:.0f}", f"{p['pages_written_per_run']:.0f}"],
        ["Pages per flush", f"{b['pages_per_flush']:.0f}", f"{p['pages_per_flush']:.0f}"],
        ["MiB per flush", f"{b['mib_per_flush']:.1f}", f"{p['mib_per_flush']:.1f}"],
    ]
    for label in labels:
        rows.append([f"  of which {label} (MiB)",
                     f"{b['pages_by_target_per_run'].get(label, 0) * page_mib:.0f}",
                     f"{p['pages_by_target_per_run'].get(label, 0) * page_mib:.0f}"])
    key = "background_file_gib_by_writer_per_run"
    writers = sorted(set(b[key]) | set(p[key]))
    names = {"foreign_flush": "owner-wb foreign flushes", "periodic": "periodic writeback",
             "background": "background writeback", "sync": "the final sync"}
    for writer in writers:
        rows.append([f"Background file GiB written by {names.get(writer, writer)}",
                     f"{b[key].get(writer, 0.0):.3f}", f"{p[key].get(writer, 0.0):.3f}"])
    rows.append(["Throttled balance_dirty_pages calls", f"{b['throttle_events_per_run']:.0f}",
                 f"{p['throttle_events_per_run']:.0f}"])
    rows.append(["Flush works skipped, open_mutex busy", f"{b['bdev_skipped_busy_per_run']:.1f}",
                 f"{p['bdev_skipped_busy_per_run']:.1f}"])
    return rows


def _churn_rows(churn: dict[str, Any]) -> list[list[str]]:
    d, r = churn["bdev-devt"], churn["bdev-ref"]
    spec = [
        ("Device incarnations (dev_t reused)", "device_incarnations", "d"),
        ("Flush works run", "flushes", "d"),
        ("Stale flushes (hit the new device)", "stale_flushes", "d"),
        ("Pages written by stale flushes", "stale_pages", "d"),
        ("Skipped: dev_t absent", "skipped_absent", "d"),
        ("Skipped: pinned device removed", "skipped_removed", "d"),
        ("Skipped: closed / open_mutex busy", None, "closed_busy"),
        ("Removed devices released late", "release_delayed", "d"),
        ("Release delay mean / max of released (s)", None, "delay"),
        ("Removed devices still pinned at end", "still_pinned_at_end", "d"),
        ("Pinned device-seconds", "pinned_device_seconds", ".1f"),
        ("Reference drops deferred off the record path", "deferred_puts", "d"),
    ]
    rows = []
    for label, key, fmt in spec:
        if fmt == "closed_busy":
            cells = [f"{x['skipped_closed']} / {x['skipped_busy']}" for x in (d, r)]
        elif fmt == "delay":
            cells = [f"{x['release_delay_mean_s']:.2f} / {x['release_delay_max_s']:.2f}" for x in (d, r)]
        else:
            assert key is not None
            cells = [format(x[key], fmt) for x in (d, r)]
        rows.append([label] + cells)
    return rows


def _sensitivity_rows(rows: list[dict[str, Any]]) -> list[list[str]]:
    out = []
    for row in rows:
        ch, base, pat = row["change_percent"], row["baseline"], row["patched"]
        out.append([row["name"], f"{base['background_write_gib']:.2f} / {pat['background_write_gib']:.2f}",
                    _fmt_change(ch["background_write_gib"]),
                    f"{base['foreground_bandwidth_mib_s']:.1f} / {pat['foreground_bandwidth_mib_s']:.1f}",
                    _fmt_change(ch["foreground_bandwidth_mib_s"]), _fmt_change(ch["foreground_completion_s"]),
                    _fmt_change(ch["foreground_mean_latency_ms"]), row["verdict"]])
    return out


def run_sensitivity_command(args: argparse.Namespace) -> int:
    from ..writeback import SENSITIVITY, run_sensitivity, summary_text

    runs = DEFAULT_SENSITIVITY_RUNS if args.runs is None else args.runs
    wall0 = time.perf_counter()
    result = run_sensitivity(runs, args.seed, wrap=lambda it: progress(it, total=len(SENSITIVITY),
                                                                       desc="sensitivity", quiet=args.json))
    doc = result.as_dict()
    doc["wall_seconds"] = time.perf_counter() - wall0
    if args.json:
        emit_json(doc)
        return 0
    print(f"memcg foreign-bdev writeback (v6) sensitivity: {runs} simulated run(s) per kernel and row, "
          f"seed {args.seed}; change = patched vs baseline")
    print()
    print(format_table(["Perturbation", "Background GiB base / patched", "Change", "Foreground MiB/s base / patched",
                        "Change", "Completion", "Latency", "Effect"], _sensitivity_rows(doc["rows"])))
    print()
    print(summary_text(result))
    print()
    print(f"wall time {doc['wall_seconds']:.1f} s")
    return 0


def run(args: argparse.Namespace) -> int:
    from ..writeback import compare_churn, run_experiment

    if args.sensitivity:
        return run_sensitivity_command(args)
    runs = DEFAULT_RUNS if args.runs is None else args.runs
    wall0 = time.perf_counter()
    result = run_experiment(runs, args.seed,
                            wrap=lambda it: progress(it, total=runs, desc="writeback runs", quiet=args.json))
    doc = result.as_dict()
    churn = None
    if args.churn:
        churn = {name: res.as_dict() for name, res in compare_churn(seed=args.seed).items()}
        doc["churn"] = churn
    doc["wall_seconds"] = time.perf_counter() - wall0
    if args.json:
        emit_json(doc)
        return 0
    print(f"memcg foreign-bdev writeback (v6): mean of {runs} simulated run(s) per kernel, seed {args.seed}")
    print("baseline = owner-wb foreign flushes (today), patched = bdev-mapping flushes (the series)")
    print()
    print(format_table(["Metric", "Baseline", "Patched", "Change", "Posted change"], _rows(result)))
    print()
    print(format_table(["Foreign flushes (per run)", "Baseline", "Patched"], _flush_rows(doc["flushes"])))
    if churn is not None:
        print()
        print("dev_t reuse churn (devices removed and re-created with the same dev_t):")
        print(format_table(["Churn", "dev_t records (series)", "device references (reviewer)"],
                           _churn_rows(churn)))
    print()
    print(f"wall time {doc['wall_seconds']:.1f} s")
    return 0
