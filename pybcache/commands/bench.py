"""``pybcache bench``: tracker hot paths against the machine's own floors, as ratios."""
from __future__ import annotations

import argparse

from ._util import emit_json
from .._console import format_table, status_bar
from ..bcache.experiments.bench import run_bench


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="tracker hot paths against floors measured in the same run",
                       description="Measure a bare C atomic pair, a bare spinlock pair and an empty Cython "
                                   "method pair, then each variant's start+end and is_active costs, and print "
                                   "the ratios.")
    p.add_argument("--quick", action="store_true", help="fewer iterations (noisier)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    with status_bar("bench", quiet=args.json) as bar:
        res = run_bench(quick=args.quick, progress=bar.set_postfix_str)
    if args.json:
        emit_json(res)
        return 0
    fl = res["floors"]
    print("Floors (measured now): "
          f"atomic pair {fl['atomic_pair_ns']:.1f} ns, spinlock pair {fl['spinlock_pair_ns']:.1f} ns, "
          f"empty Cython method pair {fl['cython_empty_pair_ns']:.1f} ns, "
          f"2-thread shared-counter pair {fl['shared_atomic_pair_ns']:.1f} ns")
    sp = fl["shared_atomic_pair_spread_ns"]
    print(f"2-thread floor over {sp['runs']} runs: min {sp['min']:.1f} / median {sp['median']:.1f} / "
          f"max {sp['max']:.1f} ns, "
          + ("its threads pinned to 2 distinct CPUs" if fl["shared_pinned"]
             else f"NOT pinned (this process may use {fl['cpus']} CPU(s))")
          + f"; load average before/after {res['load']['before']} / {res['load']['after']}")
    rows = []
    for r in res["results"]:
        rows.append([r["variant"], f"{r['batch_pair_ns']:.1f}", f"{r['batch_pair_vs_floor']:.2f}x",
                     f"{r['single_pair_ns']:.1f}", f"{r['single_pair_vs_empty_call']:.2f}x",
                     f"{r['speedup_vs_reference']:.0f}x", f"{r['batch_check_ns']:.1f}",
                     f"{r['scaling_2_over_1']:.2f}x", f"{r['scaling_2_over_1_adjacent_slots']:.2f}x",
                     f"{r['machine_2_over_1']:.2f}x", f"{r['single_pair_cold_ns']:.0f}"])
    print(format_table(["variant", "batch pair ns", "vs floor", "call pair ns", "vs empty call",
                        "vs reference", "batch check ns", "2thr/1thr", "adjacent", "machine", "cold pair ns"],
                       rows))
    print("Pairs are start+end of a 128 KiB write with the tracking page resident (one write held in flight);\n"
          "cold = the page is allocated and freed by every pair. floor: atomic pair for 'atomic', spinlock pair\n"
          "for the lock variants. 2thr/1thr: native stress throughput, threads on pages whose slots sit on\n"
          "different cache lines; adjacent: on neighbouring pages (their 16-byte slots share a line); machine:\n"
          "two independent trackers at once (what this machine gives 2 threads that share nothing).")
    print()
    print(format_targets(res))
    print()
    print(format_same_chunk(res))
    print()
    print(format_scaling(res))
    return 0


def _verdict(met: bool | None) -> str:
    return "inconclusive" if met is None else ("met" if met else "MISSED")


def _fig(value: float | None, spec: str, unit: str = "") -> str:
    """A figure formatted with ``spec``, or "-" when it was not measured (None)."""
    return "-" if value is None else f"{value:{spec}}{unit}"


def format_targets(res: dict) -> str:
    """Issue 15's targets per variant: batch pair vs its floor, and a single writer on an idle page (pages
    kept with free="deferred") vs the warm pair, with the page allocations per 1,000 writes."""
    rows = [[r["variant"], f"{r['batch_pair_vs_floor']:.2f}x", f"{r['batch_pair_vs_floor_spread']['min']:.2f}-"
             f"{r['batch_pair_vs_floor_spread']['max']:.2f}x", f"<= {r['batch_pair_target']:.1f}x: "
             + _verdict(r["batch_pair_met"]), f"{r['idle_pair_eager_vs_warm']:.2f}x",
             f"{r['allocations_per_1000_writes_eager']:.0f}", f"{r['idle_pair_deferred_vs_warm']:.2f}x",
             f"{r['allocations_per_1000_writes_deferred']:.2f}",
             f"<= {r['idle_pair_target']:.1f}x: " + _verdict(r["idle_pair_deferred_met"])] for r in res["results"]]
    rounds = res["params"]["batch_rounds"]
    return ("Targets (issue 15), ratios measured in this run (batch vs floor: the median of "
            f"{rounds} interleaved rounds,\nfloor then pair on the same elements in this thread's CPU time, "
            "and the range of the rounds):\n"
            + format_table(["variant", "batch vs floor", "rounds", "target", "idle page (eager) vs warm", "allocs/1000",
                            "idle page (deferred) vs warm", "allocs/1000", "target"], rows))


def format_same_chunk(res: dict) -> str:
    """The same-chunk contention table of a :func:`~pybcache.bcache.experiments.bench.run_bench` result, as
    text (with the lock options' rows when the result has them)."""
    same = res["same_chunk"] + res.get("same_chunk_lock_options", [])
    rows = [[r["variant"], _fig(r["pair_cpu_ns"], ".1f"), _fig(r["pair_ns"], ".1f"), f"{r['overlap']:.2f}",
             f"{r['floor_ns']:.1f}", _fig(r["vs_floor"], ".2f", "x"), _fig(r["driver_floor_ns"], ".1f"),
             _fig(r["vs_driver_floor"], ".2f", "x"),
             f"<= {r['target']:.1f}x: {r.get('not_measured') or _verdict(r['met'])}"] for r in same]
    where = [f"  {r['variant']}: 2-thread lock floor {r['lock_floor_ns']:.1f} ns = {r['lock_floor_vs_floor']:.2f}x "
             f"the atomic floor; lock and counter on one line: {r['colocated_vs_separate']:.2f}x of two lines; "
             f"pair {_fig(r['vs_lock_floor'], '.2f', 'x')} the lock floor"
             + (f"; its own ({r['lock']}) lock floor {r['own_lock_floor_ns']:.1f} ns = "
                f"{r['own_lock_floor_vs_floor']:.2f}x the atomic floor, "
                f"pair {_fig(r['vs_own_lock_floor'], '.2f', 'x')} it"
                if r.get("lock", "pthread") != "pthread" else "")
             for r in same if "lock_floor_ns" in r]
    drv_unmeasured = next((r["driver_floor_not_measured"] for r in same if r.get("driver_floor_not_measured")), None)
    return ("Same chunk, 2 threads (start+end pairs on one counter) vs the 2-thread cache-line bounce floor\n"
            "(the run where both threads overlapped most; overlap 1.00 = both on a CPU at the same time throughout,\n"
            "< 0.50 = inconclusive):\n"
            + format_table(["variant", "pair ns (CPU)", "pair ns (wall)", "overlap", "floor ns", "vs floor",
                            "drv floor ns", "vs drv floor", "target"], rows)
            + "\ndrv floor: the same loop, threads and CPUs on a do-nothing tracker (one shared relaxed add and\n"
              "subtract per pair); over the floor it is the driver's cost, the pair over it the tracker's own work."
            + (f"\ndrv floor: {drv_unmeasured}." if drv_unmeasured else "")
            + ("\nWhere a lock variant's pair goes (floors of a pthread spinlock bounced by 2 pinned threads):\n"
               + "\n".join(where) if where else ""))


def format_scaling(res: dict) -> str:
    """The scaling / oversubscription table of a :func:`~pybcache.bcache.experiments.bench.run_bench` result,
    as text."""
    sc = res["scaling"]
    p = sc["params"]
    target = res["targets"]["p99_ns"]
    rows = []
    for variant, entries in sc["variants"].items():
        for r in entries:
            verdict = ""
            if r["threads"] > p["cpus"]:
                verdict = "met" if r["p99_ns"] <= target else "MISSED"
            rows.append([variant, r["threads"], f"{r['ops_per_s'] / 1e6:.2f}", _fig(r["speedup_vs_1"], ".2f", "x"),
                         f"{r['cpu_ns_per_op']:.0f}", f"{r['cpu_ns_vs_floor']:.1f}x", f"{r['p50_ns']:,}",
                         f"{r['p99_ns']:,}", f"{r['p99_worst_ns']:,}", f"{r['p999_ns']:,}",
                         f"{r['max_ns'] / 1e3:,.0f}", f"{r['slowest_thread_share']:.2f}", verdict])
    return (f"Threads on {p['cpus']} CPUs, the v2 cover letter's 10 GiB workload (one tracking page shared by all "
            f"threads), "
            f"best of {p['repeats']} x {p['seconds']:g} s; 1 op in {p['sample_every']} timed:\n"
            + format_table(["variant", "threads", "Mops/s", "vs 1 thr", "CPU ns/op", "vs floor", "p50 ns",
                            "p99 ns", "p99 worst", "p99.9 ns", "max us", "slowest thr", f"p99<={target // 1000}us"],
                           rows)
            + "\nslowest thr: the slowest thread's ops over a fair share (1.00 = fair, 0.00 = starved)."
            + "".join(f"\nvs 1 thr of {v}: {entries[0]['speedup_not_measured']}."
                      for v, entries in sc["variants"].items() if entries and entries[0].get("speedup_not_measured")))
