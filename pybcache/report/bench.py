"""Hot paths against this machine's floors: one thread, 1-8 threads on 2 cores, and 2 threads on one chunk."""
from __future__ import annotations

from typing import Any

from ._common import ReportContext, find, fmt_ns, table
from ._template import render

__all__ = ["bench", "oversubscription_note"]


def bench(ctx: ReportContext) -> str:
    from ..bcache.experiments.bench import OVERSUBSCRIBED_CPUS, TARGET_P99_NS, TARGET_SAME_CHUNK_VS_FLOOR, run_bench
    res = run_bench(quick=ctx.quick, progress=lambda label: ctx.note(f"bench: {label}"))
    ctx.results["bench"] = res
    fl = res["floors"]
    sc = res["scaling"]
    p = sc["params"]
    single_table = table(
        ["variant", "batch pair ns", "vs floor", "call pair ns", "vs empty call", "vs Python reference",
         "batch check ns", "cold call pair ns"],
        [[r["variant"], f"{r['batch_pair_ns']:.1f}", _batch_ratio(r),
          f"{r['single_pair_ns']:.1f}", f"{r['single_pair_vs_empty_call']:.2f}x",
          f"{r['speedup_vs_reference']:.0f}x faster", f"{r['batch_check_ns']:.1f}",
          f"{r['single_pair_cold_ns']:.0f}"] for r in res["results"]])
    scaling_table = table(
        ["variant", "threads", "Mops/s", "vs 1 thread", "CPU ns/op", "vs floor", "p50", "p99", "p99 worst",
         "p99.9", "max", "slowest thread", f"p99 ≤ {TARGET_P99_NS // 1000} µs"],
        [[v, r["threads"], f"{r['ops_per_s'] / 1e6:.2f}",
          r.get("speedup_not_measured") or _fig(r["speedup_vs_1"], ".2f", "x"),
          f"{r['cpu_ns_per_op']:.0f}", f"{r['cpu_ns_vs_floor']:.1f}x", fmt_ns(r["p50_ns"]),
          fmt_ns(r["p99_ns"]), fmt_ns(r["p99_worst_ns"]), fmt_ns(r["p999_ns"]), fmt_ns(r["max_ns"]),
          f"{r['slowest_thread_share']:.2f}",
          ("met" if r["p99_ns"] <= TARGET_P99_NS else "**missed**") if r["threads"] > p["cpus"] else "—"]
         for v, rows in sc["variants"].items() for r in rows])
    same_table = table(
        ["variant", "pair ns (CPU)", "pair ns (wall)", "overlap", "floor ns", "vs floor", "driver floor ns",
         "vs driver floor", "target"],
        [[r["variant"], _fig(r["pair_cpu_ns"], ".1f"), _fig(r["pair_ns"], ".1f"), f"{r['overlap']:.2f}",
          f"{r['floor_ns']:.1f}", _fig(r["vs_floor"], ".2f", "x"), _fig(r["driver_floor_ns"], ".1f"),
          _fig(r["vs_driver_floor"], ".2f", "x"),
          f"≤ {r['target']}x: " + (r.get("not_measured") or ("inconclusive" if r["met"] is None
                                                               else "met" if r["met"] else "**missed**"))]
         for r in res["same_chunk"]])
    from .plots import plot_scaling
    plot_scaling(sc, ctx.plot("scaling.png", "ns/op, throughput and p50/p99 per variant and thread count"),
                 target_ns=TARGET_P99_NS)
    return render(
        "bench.main", repeats=res["params"]["repeats"], atomic_pair_ns=fl["atomic_pair_ns"],
        spinlock_pair_ns=fl["spinlock_pair_ns"], cython_empty_pair_ns=fl["cython_empty_pair_ns"],
        shared_atomic_pair_ns=fl["shared_atomic_pair_ns"],
        load_before=", ".join(map(str, res["load"]["before"])), load_after=", ".join(map(str, res["load"]["after"])),
        single_table=single_table, batch_rounds=res["params"]["batch_rounds"],
        cpus=p["cpus"], sample_every=p["sample_every"], scaling_repeats=p["repeats"],
        seconds=p["seconds"], scaling_table=scaling_table,
        distinct=", ".join(render("bench.distinct", variant=r["variant"], scaling=r["scaling_2_over_1"],
                                  adjacent=r["scaling_2_over_1_adjacent_slots"]) for r in res["results"]),
        machine=", ".join(render("bench.machine", variant=r["variant"], scaling=r["machine_2_over_1"])
                          for r in res["results"]),
        target=TARGET_SAME_CHUNK_VS_FLOOR, runs=res["same_chunk"][0]["runs"], same_table=same_table,
        same_seconds=f"{res['same_chunk'][0]['seconds']:g}",
        oversubscription=oversubscription_note(res, OVERSUBSCRIBED_CPUS)) + "\n\n"


def _fig(value: float | None, spec: str, unit: str = "") -> str:
    """A figure formatted with ``spec``, or "—" when it was not measured (None: a run of 0 operations)."""
    return "—" if value is None else f"{value:{spec}}{unit}"


def _batch_ratio(r: dict[str, Any]) -> str:
    """The batch pair's median ratio to its floor with the range of its rounds."""
    sp = r["batch_pair_vs_floor_spread"]
    return f"{r['batch_pair_vs_floor']:.2f}x ({sp['min']:.2f}–{sp['max']:.2f})"


def oversubscription_note(res: dict[str, Any], cpus: int) -> str:
    """What the oversubscribed runs show, from the figures (no fixed numbers, no fixed verdict)."""
    from ..bcache.experiments.bench import TARGET_P99_NS
    sc = res["scaling"]["variants"]

    def at(v: str, n: int) -> dict[str, Any]:
        return find(sc[v], f"scaling {v}", threads=n)

    parts = []
    for v in sc:
        two, top_row = at(v, cpus), at(v, max(r["threads"] for r in sc[v]))
        parts.append(render("bench.oversub_variant", variant=v, keep=top_row["ops_per_s"] / two["ops_per_s"],
                            cpus=cpus, threads=top_row["threads"],
                            cpu=top_row["cpu_ns_per_op"] / two["cpu_ns_per_op"],
                            slowest=top_row["slowest_thread_share"], longest=fmt_ns(top_row["max_ns"])))
    top = max(r["threads"] for rows in sc.values() for r in rows)
    locks = [v for v in sc if v in ("global", "page")]
    p99_low = all(at(v, top)["p99_ns"] <= TARGET_P99_NS for v in locks)
    collapsed = [v for v in locks if at(v, top)["ops_per_s"] < 0.75 * at(v, cpus)["ops_per_s"]]
    if collapsed:
        cpu_grew = all(at(v, top)["cpu_ns_per_op"] > at(v, cpus)["cpu_ns_per_op"] for v in collapsed)
        collapse = (render("bench.oversub_collapsed", variants=", ".join(f"`{v}`" for v in collapsed),
                           and_cpu=render("bench.oversub_and_cpu") if cpu_grew else "")
                    + render("bench.oversub_p99_low" if p99_low else "bench.oversub_p99_high"))
    else:
        collapse = render("bench.oversub_none_collapsed")
    yields = [(v, f"{v}+yield") for v in ("global", "page") if v in sc and f"{v}+yield" in sc]
    yield_text = ""
    if yields:
        yield_text = render("bench.oversub_yield", top=top, comparisons="; ".join(
            render("bench.oversub_yield_one", yielding=y, variant=v, yield_mops=at(y, top)["ops_per_s"] / 1e6,
                   mops=at(v, top)["ops_per_s"] / 1e6, ratio=at(y, top)["ops_per_s"] / at(v, top)["ops_per_s"],
                   yield_cpu=at(y, top)["cpu_ns_per_op"], cpu=at(v, top)["cpu_ns_per_op"],
                   yield_slowest=at(y, top)["slowest_thread_share"], slowest=at(v, top)["slowest_thread_share"])
            for v, y in yields))
    return render("bench.oversubscription", variants="; ".join(parts), collapse=collapse, yields=yield_text)
