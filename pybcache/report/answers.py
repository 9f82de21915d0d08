"""Design answers: one paragraph per open question, each from figures measured earlier in this run.

A paragraph whose experiments did not run says so in one line (``answers.not_run``); a figure missing from an
experiment that did run is a KeyError, never a 0.
"""
from __future__ import annotations

import os
import threading
from typing import Any, Callable

import numpy as np

from ..units import GiB, TiB, format_bytes
from ._common import ReportContext, find, fmt_ns
from ._template import render

__all__ = ["answers", "overflow_demo", "sustained_rows"]

#: Result keys -> the section that stores them (for the "not run" line).
_SECTION_OF = {"bench": "bench", "race": "race and explore", "explore": "race and explore", "fio": "fio",
               "fio_granularity": "fio", "counts_heatmap": "fio", "memory": "memory", "writeback": "writeback",
               "churn": "writeback", "sustained": "design answers"}
#: A policy is called clean under sustained load when, at every failure count measured, it lost no write,
#: stalled the writer no whole mempool round and bypassed at most this many times the clean run's reads.
_SUSTAINED_CLEAN_RATIO = 1.5
#: Spin-then-yield is called better (worse) when it gives at least (at most) this throughput ratio for each lock.
_YIELD_HELPS, _YIELD_HURTS = 1.1, 0.9
_COLLAPSE = 0.75  # as the oversubscription note: a lock collapsed below this share of its 2-thread throughput


def overflow_demo() -> dict[str, Any]:
    """What a u16 counter does at 65,535 concurrent writes on one chunk, under each policy (measured now)."""
    from ..bcache._tracker import BypassWriteTracker
    n = 65_536
    offs = np.zeros(n, dtype=np.int64)
    out: dict[str, Any] = {}
    t = BypassWriteTracker(GiB, sync="page", overflow="wrap")
    t.start_many(offs, 4096)
    out["wrap"] = {"count": t.count(0), "is_active": t.is_active(0, 4096), "wraps": t.stats()["overflow_wraps"]}
    t = BypassWriteTracker(GiB, sync="page", overflow="clamp")
    t.start_many(offs, 4096)
    t.end_many(offs[: n - 1], 4096)
    out["clamp"] = {"count_after_all_but_one_end": t.count(0), "is_active": t.is_active(0, 4096),
                    "clamps": t.stats()["overflow_clamps"]}
    t = BypassWriteTracker(GiB, sync="page", overflow="wait")
    t.start_many(offs[: n - 1], 4096)
    blocked = threading.Thread(target=t.start, args=(0, 4096), daemon=True)
    blocked.start()
    blocked.join(0.05)
    waited = blocked.is_alive()
    t.end(0, 4096)
    blocked.join(60.0)  # released at once; the bound is for a stalled machine, not the model
    out["wait"] = {"blocked_at_max": waited, "released_by_end": not blocked.is_alive(), "count": t.count(0),
                   "waits": t.stats()["overflow_waits"]}
    return out


def sustained_rows() -> dict[str, Any]:
    """Every allocation-failure policy under the sustained load (one run, measured now: about a second)."""
    from ..bcache.experiments.sustained import KERNEL_ROUND_S, sustained_table
    ops = 200_000
    return {"ops": ops, "round_s": KERNEL_ROUND_S, "rows": sustained_table(ops=ops, round_s=KERNEL_ROUND_S)}


def _repo_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class _Figures:
    """Lookups into ``ctx.results`` that raise (naming what is missing) instead of defaulting."""

    def __init__(self, res: dict[str, Any]) -> None:
        self.res = res

    def scaling(self, variant: str, threads: int) -> dict[str, Any]:
        return find(self.res["bench"]["scaling"]["variants"][variant], f"scaling {variant}", threads=threads)

    def memory(self, variant: str, key: str) -> int:
        return int(find(self.res["memory"]["rows"], "memory", size_bytes=TiB, variant=variant)[key])

    def fio_row(self, label: str, variant: str) -> dict[str, Any]:
        return find(self.res["fio"][label]["rows"], f"fio {label}", variant=variant)

    def fio_ratio(self, label: str, variant: str) -> str:
        ratio = self.fio_row(label, variant)["ns_per_io_vs_none"]
        return "—" if ratio is None else f"{ratio:.2f}x"

    def race(self, label: str) -> dict[str, Any]:
        return find(self.res["race"], "race", label=label)

    def explore(self, label: str) -> dict[str, Any]:
        return find(self.res["explore"], "explore", label=label)


def _variant(f: _Figures) -> str:
    from ..bcache.experiments.bench import OVERSUBSCRIBED_CPUS
    single = {r["variant"]: r for r in f.res["bench"]["results"]}
    top = max(r["threads"] for rows in f.res["bench"]["scaling"]["variants"].values() for r in rows)
    return render(
        "answers.variant", title=render("answers.title_variant"),
        batch=", ".join(f"{v} {r['batch_pair_ns']:.1f} ns ({r['batch_pair_vs_floor']:.2f}x its floor)"
                        for v, r in single.items()),
        fio_ratios=", ".join(f"{v} {f.fio_ratio('10 GiB', v)}" for v in single),
        two_threads=", ".join(f"{v} {_speedup(f.scaling(v, 2))}" for v in single),
        top=top, cpus=OVERSUBSCRIBED_CPUS,
        top_threads=", ".join(f"{v} {_speedup(f.scaling(v, top))}" for v in single),
        distinct=", ".join(f"{v} {r['scaling_2_over_1']:.2f}x" for v, r in single.items()),
        atomic_idle=format_bytes(f.memory("atomic", "idle_bytes")),
        page_idle=format_bytes(f.memory("page", "idle_bytes")),
        atomic_peak=format_bytes(f.memory("atomic", "peak_bytes")),
        page_peak=format_bytes(f.memory("page", "peak_bytes")))


def _spin(f: _Figures) -> str:
    from ..bcache.experiments.bench import OVERSUBSCRIBED_CPUS, TARGET_P99_NS
    sc = f.res["bench"]["scaling"]["variants"]
    cpus = OVERSUBSCRIBED_CPUS
    top = max(r["threads"] for rows in sc.values() for r in rows)
    two, top_row, atomic = f.scaling("page", cpus), f.scaling("page", top), f.scaling("atomic", top)
    figures = dict(keep=top_row["ops_per_s"] / two["ops_per_s"], cpu=top_row["cpu_ns_per_op"] / two["cpu_ns_per_op"],
                   slowest=top_row["slowest_thread_share"], longest=fmt_ns(top_row["max_ns"]),
                   atomic_slowest=atomic["slowest_thread_share"], atomic_longest=fmt_ns(atomic["max_ns"]))
    collapsed = top_row["ops_per_s"] < _COLLAPSE * two["ops_per_s"]
    collapse = render("answers.spin_collapsed" if collapsed else "answers.spin_held", **figures)
    pairs = [(v, f"{v}+yield") for v in ("global", "page") if v in sc and f"{v}+yield" in sc]
    if pairs:
        ratios = {v: f.scaling(y, top)["ops_per_s"] / f.scaling(v, top)["ops_per_s"] for v, y in pairs}
        verdict = ("answers.spin_yield_helps" if all(r >= _YIELD_HELPS for r in ratios.values()) else
                   "answers.spin_yield_hurts" if all(r <= _YIELD_HURTS for r in ratios.values()) else
                   "answers.spin_yield_mixed")
        yields = render("answers.spin_yield", top=top, verdict=render(verdict), comparisons=", ".join(
            render("answers.spin_yield_one", variant=v, ratio=ratios[v],
                   yield_slowest=f.scaling(y, top)["slowest_thread_share"],
                   slowest=f.scaling(v, top)["slowest_thread_share"]) for v, y in pairs))
    else:
        yields = render("answers.spin_yield_not_run")
    return render("answers.spin", title=render("answers.title_spin"), top=top, cpus=cpus,
                  p99_global=fmt_ns(f.scaling("global", top)["p99_ns"]), p99_page=fmt_ns(top_row["p99_ns"]),
                  p99_atomic=fmt_ns(atomic["p99_ns"]), target=f"{TARGET_P99_NS // 1000} µs", collapse=collapse,
                  yields=yields)


def _same_chunk(f: _Figures) -> str:
    from ..bcache.experiments.bench import TARGET_SAME_CHUNK_VS_FLOOR
    same = {r["variant"]: r for r in f.res["bench"]["same_chunk"]}
    low = [v for v, r in same.items() if r["met"] is None and not r.get("not_measured")]
    return render(
        "answers.same_chunk", title=render("answers.title_same_chunk"),
        ratios=", ".join(f"{v} {r['not_measured']}" if r.get("not_measured") else
                         f"{v} {r['vs_floor']:.2f}x (overlap {r['overlap']:.2f})" for v, r in same.items()),
        floor_ns=next(iter(same.values()))["floor_ns"], target=TARGET_SAME_CHUNK_VS_FLOOR,
        verdicts=", ".join(f"{v} {r.get('not_measured') or _same_verdict(r['met'])}" for v, r in same.items()),
        low_note=render("answers.same_chunk_low", variants=", ".join(low)) if low else "")


def _speedup(row: dict[str, Any]) -> str:
    """A scaling row's throughput over one thread's, or why it was not measured."""
    return row.get("speedup_not_measured") or f"{row['speedup_vs_1']:.2f}x"


def _same_verdict(met: bool | None) -> str:
    return "inconclusive" if met is None else "met" if met else "missed"


def _policy_name(policy: str, pool_pages: int, gfp: str) -> str:
    if policy == "mempool":
        return f"`mempool` min_nr {pool_pages}" + (" (GFP_NOWAIT)" if gfp == "nowait" else "")
    return f"`pool` ({pool_pages} page)" if policy == "pool" else f"`{policy}`"


def _sustained(f: _Figures) -> dict[str, Any]:
    """Question 1's sustained-load figures: each policy's rows by failure count, and the clean policies."""
    from ..bcache.cachedev import DEFAULT_ALLOC_FAILURE, DEFAULT_POOL_PAGES
    sus = f.res["sustained"]
    rows = sus["rows"]
    counts = sorted({r["failures"] for r in rows})
    if counts[:2] != [1, 2]:
        raise KeyError(f"sustained: the rows need failure counts 1 and 2, got {counts}")

    def row(policy: str, pool_pages: int, gfp: str, failures: int) -> dict[str, Any]:
        return find(rows, "sustained", policy=policy, pool_pages=pool_pages, gfp=gfp, failures=failures)

    policies = list(dict.fromkeys((r["policy"], r["pool_pages"], r["gfp"]) for r in rows))
    clean = [p for p in policies if all(
        r["writes_lost"] == 0 and r["stall_rounds"] == 0
        # no bypass without the fault (ratio None): clean only if the fault added none either
        and (r["ratio"] <= _SUSTAINED_CLEAN_RATIO if r["ratio"] is not None else r["extra_bypasses"] == 0)
        for r in (row(*p, n) for n in counts))]
    default = (DEFAULT_ALLOC_FAILURE, DEFAULT_POOL_PAGES, "noio")
    last = counts[-1]
    return dict(
        ops=sus["ops"], round_s=sus["round_s"], last=last, limit=_SUSTAINED_CLEAN_RATIO,
        u1=row("untracked", 0, "noio", 1), h1=row("hijack", 0, "noio", 1), p1=row("pool", 1, "noio", 1),
        m0=row("mempool", 0, "noio", 1), m1=row("mempool", 1, "noio", 1), m8=row("mempool", 8, "noio", 1),
        m0_2=row("mempool", 0, "noio", 2), m0_n=row("mempool", 0, "noio", last),
        m1_n=row("mempool", 1, "noio", last), m8_n=row("mempool", 8, "noio", last),
        n0=row("mempool", 0, "nowait", 1), n1=row("mempool", 1, "nowait", 1), n1_n=row("mempool", 1, "nowait", last),
        clean=", ".join(_policy_name(*p) for p in clean) or "none",
        default=_policy_name(*default), default_clean=default in clean)


def _q1(f: _Figures) -> str:
    unt, hij = f.race("page, untracked, 30% alloc faults"), f.race("page, hijack, 30% alloc faults")
    pool, mp = f.race("page, pool, 30% alloc faults"), f.race("page, mempool, 30% alloc faults")
    e1, eh = f.explore("page, untracked, 1st alloc fails"), f.explore("page, hijack, 1st alloc fails")
    ep, em = f.explore("page, pool, 1st alloc fails"), f.explore("page, mempool, 1st alloc fails")
    em0 = f.explore("page, mempool without a reserve, 1st alloc fails")
    unt_bad = unt["stale_reads"] > 0 or e1["violations"] > 0
    safe = (hij["stale_reads"] == 0 and pool["stale_reads"] == 0 and mp["stale_reads"] == 0
            and eh["violations"] == 0 and ep["violations"] == 0 and em["violations"] == 0 and em0["violations"] == 0)
    s = _sustained(f)
    return render("answers.q1", title=render("answers.title_q1"),
                  verdict=render("answers.q1_unsafe" if unt_bad else "answers.q1_no_evidence"),
                  unt=unt, hij=hij, pool=pool, mp=mp, e1=e1, eh=eh, ep=ep, em=em, em0=em0,
                  closing=render("answers.q1_safe" if safe else "answers.q1_investigate"),
                  sustained=render("answers.q1_sustained", **s), gfp=render("answers.q1_gfp", **s),
                  default=render("answers.q1_default_clean" if s["default_clean"] else "answers.q1_default_not_clean",
                                 **s))


def _q2(f: _Figures) -> str:
    ov = f.res["overflow_demo"]
    works = ov["wait"]["blocked_at_max"] and ov["wait"]["released_by_end"]
    return render("answers.q2", title=render("answers.title_q2"), wrap=ov["wrap"], clamp=ov["clamp"],
                  blocked="yes" if ov["wait"]["blocked_at_max"] else "no",
                  released="released" if ov["wait"]["released_by_end"] else "NOT released",
                  u16_peak=format_bytes(f.memory("page", "peak_bytes")),
                  u32_peak=format_bytes(f.res["memory"]["page_u32_1tib_peak_bytes"]),
                  u16_idle=format_bytes(f.memory("page", "idle_bytes")),
                  max_count=f.res["counts_heatmap"]["max_count"],
                  closing=render("answers.q2_wait_works" if works else "answers.q2_wait_broken"))


def _placement(f: _Figures) -> str:
    return render("answers.placement", title=render("answers.title_placement"),
                  after=f.explore("page (posted)"), entry=f.explore("page, check at request entry"),
                  miss=f.explore("page, check in the miss path"),
                  miss_no_restart=f.explore("page, miss path without the -EINTR restart"),
                  none=f.explore("none (unpatched)"), race_entry=f.race("page, check at request entry"),
                  race_miss=f.race("page, check in the miss path"), race_after=f.race("page (posted)"))


#: kernel compare's rows for the writethrough fallback: (row, what the answer calls it)
_WRITETHROUGH_ROWS = (("writethrough fallback", "unpatched"), ("v3, writethrough fallback", "v3"),
                      ("v3-track-writethrough", "v3 counting writethrough writes"))


def _writethrough(f: _Figures) -> str:
    bypass = f.explore("page, writethrough fallback, bypass writes counted (v2)")
    inval = f.explore("page, writethrough fallback, fallbacks counted")
    every = f.explore("page, writethrough fallback, every write counted")
    compare = f.res.get("kernel")
    rows = {r["config"]: r for r in (compare or {}).get("rows", [])}
    if compare and all(name in rows for name, _ in _WRITETHROUGH_ROWS):
        kernel = render("answers.writethrough_kernel", measured=compare["measured"], rows="; ".join(
            f"{label}: {rows[name]['kernel']['race']['stale']} of {rows[name]['kernel']['race']['tries']} tries "
            f"stale" for name, label in _WRITETHROUGH_ROWS),
            agree="agree" if all(rows[n]["agree"]["stale"] for n, _ in _WRITETHROUGH_ROWS) else "DISAGREE")
    else:
        kernel = render("answers.writethrough_kernel_none")
    open_ = bypass["violations"] > 0 and inval["violations"] == 0 and every["violations"] == 0
    return render("answers.writethrough", title=render("answers.title_writethrough"), bypass=bypass, inval=inval,
                  every=every, kernel=kernel,
                  closing=render("answers.writethrough_open" if open_ else "answers.writethrough_unexpected"))


def _fio(f: _Figures) -> str:
    from .fio import POSTED_FIO
    cpu10, cpu320 = POSTED_FIO["10 GiB"]["kernel_cpu"], POSTED_FIO["320 GiB"]["kernel_cpu"]
    return render("answers.fio", title=render("answers.title_fio"),
                  bypass_10=100 * f.fio_row("10 GiB", "page")["bypass_fraction"],
                  ratio_10=f.fio_ratio("10 GiB", "page"), posted_page_10=cpu10["page"], posted_none_10=cpu10["none"],
                  posted_ratio_10=cpu10["page"] / cpu10["none"],
                  bypass_320=100 * f.fio_row("320 GiB", "page")["bypass_fraction"],
                  ratio_320=f.fio_ratio("320 GiB", "page"), posted_ratio_320=cpu320["page"] / cpu320["none"],
                  insert_320=100 * f.fio_row("320 GiB", "page")["insert_fraction"])


def _granularity(f: _Figures) -> str:
    page_row = find(f.res["fio_granularity"]["rows"], "fio page-granular", variant="page")
    chunk_row = f.fio_row("320 GiB", "page")
    return render("answers.granularity", title=render("answers.title_granularity"),
                  chunk_bypass=100 * chunk_row["bypass_fraction"], chunk_insert=100 * chunk_row["insert_fraction"],
                  page_bypass=100 * page_row["bypass_fraction"], page_insert=100 * page_row["insert_fraction"],
                  chunks=f.res["fio"]["320 GiB"]["config"]["chunks"])


def _memcg(f: _Figures) -> str:
    from ..writeback import POSTED_TABLE as WB_POSTED
    d, r = f.res["churn"]["bdev-devt"], f.res["churn"]["bdev-ref"]
    supports = r["still_pinned_at_end"] > 0 and d["release_delayed"] == 0
    return render("answers.memcg", title=render("answers.title_memcg"),
                  change=f.res["writeback"]["change_percent"], posted=WB_POSTED["change_percent"], devt=d, ref=r,
                  closing=render("answers.memcg_supports" if supports else "answers.memcg_plain"))


#: (title block, result keys it needs, paragraph) in report order.
_QUESTIONS: list[tuple[str, tuple[str, ...], Callable[[_Figures], str]]] = [
    ("title_variant", ("bench", "fio", "memory"), _variant),
    ("title_spin", ("bench",), _spin),
    ("title_same_chunk", ("bench",), _same_chunk),
    ("title_q1", ("race", "explore", "sustained"), _q1),
    ("title_q2", ("memory", "counts_heatmap"), _q2),
    ("title_placement", ("race", "explore"), _placement),
    ("title_writethrough", ("explore",), _writethrough),
    ("title_fio", ("fio",), _fio),
    ("title_granularity", ("fio", "fio_granularity"), _granularity),
    ("title_memcg", ("writeback", "churn"), _memcg),
]


def answers(ctx: ReportContext) -> str:
    res = ctx.results
    ctx.note("design answers: overflow")
    res["overflow_demo"] = overflow_demo()
    ctx.note("design answers: sustained load")
    res["sustained"] = sustained_rows()
    src = "docs/design-answers.md" if os.path.exists(os.path.join(_repo_root(), "docs", "design-answers.md")) \
        else "docs/concepts.md"
    paras = [render("answers.intro", source=src), ""]
    figures = _Figures(res)
    for title, needs, paragraph in _QUESTIONS:
        missing = sorted({_SECTION_OF[k] for k in needs if k not in res})
        if missing:
            paras.append(render("answers.not_run", question=render(f"answers.{title}"),
                                missing=", ".join(f"`{m}`" for m in missing)))
        else:
            paras.append(paragraph(figures))
        paras.append("")
    return "\n".join(paras) + "\n"
