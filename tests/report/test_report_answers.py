"""The report's design answers (``pybcache/report/answers.py``): each paragraph follows the figures it is
handed.

The experiments the section runs are stood in for (``monkeypatch``); the tests check the Markdown it writes
(figures formatted as stated, verdicts that follow the figures), the results it stores, the plots it asks for
(the data handed to the plot function and the file named, not pixels) and what it hands on to the experiments.
Fast: no experiment, no real plot, no subprocess."""
from __future__ import annotations

import json
import os

import pytest

import pybcache
from pybcache.report import answers as ans, race as rrace
from pybcache.units import TiB

from helpers.report_stand_ins import _bench_result, _churn, _ctx, _fio_run, _layout, _metrics, _scaling_row


def _answer_results():
    bench = _bench_result()
    bench["scaling"]["variants"]["global+yield"] = [_scaling_row(2, 10, 200, 150), _scaling_row(8, 7.5, 300, 900,
                                                                                                0.5)]
    bench["scaling"]["variants"]["page+yield"] = [_scaling_row(2, 12, 200, 150), _scaling_row(8, 13.2, 190, 800,
                                                                                              0.95)]
    race = [{"label": lb, "stale_reads": 0, "underflows": 0, "tracker_checks": 10, "reads": 20}
            for lb, _ in rrace.RACE_CONFIGS]
    race[0]["stale_reads"] = 100
    race[6].update(stale_reads=12, underflows=3)
    explore = [{"label": lb, "violations": 0, "schedules": 100 + i} for i, (lb, _) in enumerate(rrace.EXPLORE_CONFIGS)]
    explore[0]["violations"] = 9
    explore[1]["violations"] = 4
    mem_rows = [{"size_bytes": TiB, "variant": v, "idle_bytes": b, "peak_bytes": 257 * b}
                for v, b in (("global", 256), ("page", 256), ("atomic", 1024))]
    mem_rows.append({"size_bytes": 10 * TiB, "variant": "page", "idle_bytes": 1, "peak_bytes": 1})
    return {
        "bench": bench, "race": race, "explore": explore,
        "fio": {"10 GiB": _fio_run(1.0), "320 GiB": _fio_run(1.1, chunks=10240)},
        "fio_granularity": {"rows": [{"variant": "none", "bypass_fraction": 0.0, "insert_fraction": 0.99},
                                     {"variant": "page", "bypass_fraction": 0.9876, "insert_fraction": 0.0054}]},
        "counts_heatmap": {"max_count": 6},
        "memory": {"rows": mem_rows, "page_u32_1tib_peak_bytes": 131584},
        "writeback": {"change_percent": _metrics(-72.93, 18.76, -15.8, -15.77)},
        "churn": {"bdev-devt": _churn().doc, "bdev-ref": _churn(stale_flushes=0, release_delayed=86,
                                                                 still_pinned_at_end=5,
                                                                 pinned_device_seconds=444.36).doc},
    }


def _sustained_rows():
    """A stand-in sustained-load run: every policy of the experiment at 1, 2 and 3 failures, each figure
    distinct enough to show where the paragraph took it from."""
    from pybcache.bcache.experiments.sustained import GFP_POLICIES
    rows = []
    for failures in (1, 2, 3):
        for policy, pp, gfp in GFP_POLICIES:
            lost = failures if policy == "untracked" or (policy == "mempool" and gfp == "nowait" and pp == 0) else 0
            stall = failures - 1 if (policy, pp, gfp) == ("mempool", 0, "noio") else 0
            with_fault = 19_000 + failures if policy == "hijack" else 1_500
            rows.append({"policy": policy, "pool_pages": pp, "gfp": gfp, "failures": failures, "checks": 20_000,
                         "bypasses_without_fault": 1_500, "bypasses_with_fault": with_fault,
                         "ratio": with_fault / 1_500, "writes_lost": lost, "underflows": lost,
                         "stall_rounds": stall, "stall_s": 5.0 * stall})
    return {"ops": 20_000, "round_s": 5.0, "rows": rows}


_OVERFLOW = {"wrap": {"count": 0, "is_active": False, "wraps": 1},
             "clamp": {"count_after_all_but_one_end": 0, "is_active": False, "clamps": 1},
             "wait": {"blocked_at_max": True, "released_by_end": True, "count": 65535, "waits": 1}}


def _answers(tmp_path, monkeypatch, results, overflow=_OVERFLOW, sustained=None):
    monkeypatch.setattr(ans, "overflow_demo", lambda: json.loads(json.dumps(overflow)))
    sustained = sustained or _sustained_rows()
    monkeypatch.setattr(ans, "sustained_rows", lambda: json.loads(json.dumps(sustained)))
    ctx, notes = _ctx(tmp_path)
    ctx.results.update(results)
    text = ans.answers(ctx)
    assert notes == ["design answers: overflow", "design answers: sustained load"]
    assert ctx.results["overflow_demo"] == overflow and ctx.results["sustained"] == sustained
    return text, text.replace("\n", " ")


def _paragraph(text, title):
    start = text.index(f"**{title}**")
    end = text.find("\n\n", start)
    return text[start:end].replace("\n", " ")


def test_the_design_answers_cite_this_runs_figures_in_every_paragraph(tmp_path, monkeypatch):
    text, flat = _answers(tmp_path, monkeypatch, _answer_results())
    assert text.startswith("## Design answers\n") and text.endswith("\n\n") and "Not answered" not in text
    _layout(text, "answers")
    v = _paragraph(text, "Which synchronisation variant?")
    assert ("costs global 14.8 ns (2.01x its floor), page 15.8 ns (1.91x its floor), atomic 16.8 ns (1.81x its "
            "floor);") in v
    assert "tracking costs global 1.01x, page 1.06x, atomic 0.97x of the unpatched" in v
    assert "reach global 1.00x, page 1.20x, atomic 3.00x of one thread's throughput, and 8 threads on 2 cores " \
           "global 0.50x, page 1.10x, atomic 2.90x." in v
    assert "distinct pages: global 1.39x, page 2.39x, atomic 3.39x)" in v
    assert "(1 TiB idle: 1 KiB against 256 B; peak 257 KiB against 64.25 KiB)" in v
    s = _paragraph(text, "Spinlocks under oversubscription (spin-then-yield?).")
    assert "With 8 threads on 2 cores the p99 per-op latency is 25 µs (global), 20 µs (page) and 110 ns " \
           "(atomic) against the 20 µs target." in s
    assert "The page lock did not collapse in this run: it keeps 0.92x of its 2-thread throughput, its CPU per op " \
           "changes 1.1x, the slowest thread gets 0.80 of a fair share and the longest sampled op took 2.0 ms " \
           "(atomic: 0.90 and 2.0 ms)." in s
    # 7.5 / 5 = 1.50 and 13.2 / 11 = 1.20: both at least 1.1
    assert "At 8 threads its throughput over the pthread spinlock's is `global` 1.50x (slowest thread 0.50 against " \
           "0.10), `page` 1.20x (slowest thread 0.95 against 0.80): spin-then-yield is the better lock" in s
    c = _paragraph(text, "Same-chunk contention.")
    assert "pay global 33.60x (overlap 1.00), page 1.20x (overlap 0.30), atomic 1.44x (overlap 0.90) the 2-thread " \
           "bounce floor (10.2 ns per pair)" in c
    assert "against the ≤ 1.5x target: global missed, page inconclusive, atomic met." in c
    assert "(page: the two threads rarely ran at the same time" in c
    res = _answer_results()
    wt = {r["label"]: r for r in res["explore"]}
    wt["page, writethrough fallback, bypass writes counted (v2)"]["violations"] = 5
    res["kernel"] = {"measured": "2026-12-06 09:00:00 UTC", "rows": [
        {"config": name, "kernel": {"race": {"stale": stale, "tries": 5}}, "agree": {"stale": True}}
        for name, stale in (("writethrough fallback", 5), ("v3, writethrough fallback", 5),
                            ("v3-track-writethrough", 0))]}
    text, _ = _answers(tmp_path, monkeypatch, res)
    w = _paragraph(text, "A question for the series: the writethrough fallback")
    assert "(`pybcache kernel compare`, measured 2026-12-06 09:00:00 UTC): unpatched: 5 of 5 tries stale; v3: 5 of 5 " \
           "tries stale; v3 counting writethrough writes: 0 of 5 tries stale; the model and the kernel agree" in w
    assert "The v2 placement leaves this window open." in w
    res = _answer_results()
    res["bench"]["same_chunk"][2]["met"] = None
    text, _ = _answers(tmp_path, monkeypatch, res)
    assert "(page, atomic: the two threads rarely ran" in _paragraph(text, "Same-chunk contention.")
    q1 = _paragraph(text, "Question 1: is the untracked fallback enough when the page allocation fails?")
    assert q1.startswith("**Question 1: is the untracked fallback enough when the page allocation fails?** No. ")
    assert "`untracked` served 12 stale reads (3 underflows" in q1 and "`hijack` 0, `pool` 0 and `mempool` 0;" in q1
    assert "finds 0 violating interleavings of 107" in q1
    assert "(hijack, pool, mempool) closed it in every run here. Stale reads are not the only cost." in q1
    # the sustained-load figures, every policy's, from the same (stand-in) run
    assert "for 20,000 writes, the first allocation failing), `untracked` lost 1 write(s) (never counted; 1 " \
           "underflow(s)); `hijack` bypassed 19,001 reads of 20,000 against 1,500 without the fault (12.67x)" in q1
    assert "`pool` (1 page) bypassed 1.00x and `mempool` 1.00x / 1.00x / 1.00x with min_nr 0 / 1 / 8" in q1
    assert "`mempool` min_nr 0 stalled the writer 1 whole round(s), 5 s at the kernel's 5 s a round" in q1
    assert "with 3 failures 2 (10 s); min_nr 1 and 8 stalled 0 and 0." in q1
    # conditional on the GFP flags, with the GFP_NOWAIT figures
    assert "conditional on them (the v2 cover letter says only `kzalloc`; the lab's rendering assumes `GFP_NOIO`). " \
           "With `GFP_NOIO` the counter page is an order-0 request the page allocator retries until it succeeds" in q1
    assert "without a reserve it returns NULL and lost 1 write(s), as `untracked` does; with one reserve page it " \
           "lost 0 and bypassed 1.00x (3 failures: 0 lost, 1.00x)." in q1
    assert q1.endswith("at every failure count here: `pool` (1 page), `mempool` min_nr 1, `mempool` min_nr 8, "
                       "`mempool` min_nr 1 (GFP_NOWAIT). The lab's default, `mempool` min_nr 1, is one of them.")
    q2 = _paragraph(text, "Question 2: u16 wrap, clamp, or u32?")
    assert "`wrap` reads a count of 0 (is_active False" in q2 and "blocked the 65,536th start (yes) until an end " \
           "made room (released)" in q2
    assert "(1 TiB page variant peak 64.25 KiB with u16, 128.5 KiB with u32; idle 256 B either way)" in q2
    assert "highest counter was 6 of 65,535" in q2 and q2.endswith("not clamp, which silently reopens the race.")
    p = _paragraph(text, "Where does the read-side check go?")
    assert "finds 4 violations in 101 schedules with the check at request entry" in p
    assert "0 in 102 in the miss path, 0 in 105 after the check key, and 9 without tracking" in p
    assert "finds 0 violations in 103 schedules." in p and "served 0 / 0 / 0 stale reads" in p
    w = _paragraph(text, "A question for the series: the writethrough fallback")
    # the stand-ins find nothing anywhere: not the pattern that answers the question, and no kernel run
    assert "finds 0 violations in 116 schedules when only bypass writes are counted (the v2 placement), 0 in 117 " \
           "when the fallbacks are counted too, and 0 in 118 when every write is." in w
    assert "was not run for this report" in w and "do not show the expected pattern" in w
    f = _paragraph(text, "Does tracking pay for itself (the v2 cover letter's fio claims)?")
    assert "At 10 GiB 38.1 % of reads bypass the cache under `page` and the tracking costs 1.06x the unpatched CPU " \
           "per I/O (posted: 72.88 / 63.02 = 1.16x kernel CPU); at 320 GiB only 38.1 % bypass and it costs 1.17x " \
           "(posted: 0.86x," in f
    assert "the model inserts 62.0 % of reads there." in f
    g = _paragraph(text, "A question for the series: what does the read-side check cover?")
    assert "over 10,240 chunks make only 38.1 % of reads bypass (the model inserts 62.0 % of reads)" in g
    assert "bypasses 98.76 % of reads and inserts 0.54 %" in g
    m = _paragraph(text, "memcg: dev_t records or device references?")
    assert "(background file write I/O -72.9 %, foreground bandwidth +18.8 %, completion -15.8 %; posted -72.7 %, " \
           "+23.0 %, -18.8 %)" in m
    assert "dev_t records made 8 stale flushes (36 pages)" in m and "references delayed 86 releases and left 5 " \
           "removed devices pinned (444 device-seconds) behind an idle memcg: a few small stale flushes" in m


def test_the_design_answers_verdicts_follow_the_figures(tmp_path, monkeypatch):
    res = _answer_results()
    sc = res["bench"]["scaling"]["variants"]
    sc["page"][2]["ops_per_s"] = 8.9e6            # below 0.75 x 12 Mops/s: collapsed
    sc["page+yield"][1]["ops_per_s"] = 0.8 * 8.9e6  # yield hurts page; global's 1.50x helps: mixed
    res["race"][6].update(stale_reads=0)            # untracked: no stale read, no violation
    res["race"][7]["stale_reads"] = 1               # hijack served one: investigate
    res["churn"]["bdev-ref"]["still_pinned_at_end"] = 0
    for r in res["bench"]["same_chunk"]:
        r["met"] = bool(r["met"])
    overflow = json.loads(json.dumps(_OVERFLOW))
    overflow["wait"]["released_by_end"] = False
    text, _ = _answers(tmp_path, monkeypatch, res, overflow)
    s = _paragraph(text, "Spinlocks under oversubscription (spin-then-yield?).")
    assert "But the locks collapse in a way a per-op percentile hides: page's throughput falls to 0.74x of 2 " \
           "threads, its CPU per op grows 1.1x" in s
    assert "spin-then-yield helps one lock and not the other" in s
    assert _paragraph(text, "Same-chunk contention.").endswith("the atomic pair bounces only the counter.")
    q1 = _paragraph(text, "Question 1: is the untracked fallback enough when the page allocation fails?")
    assert "This run found no stale read with it, but that proves little:" in q1
    assert "**Hijack, pool or mempool also served stale data in this run: investigate.**" in q1
    q2 = _paragraph(text, "Question 2: u16 wrap, clamp, or u32?")
    assert "until an end made room (NOT released)" in q2 and "did not block and release as it should" in q2
    m = _paragraph(text, "memcg: dev_t records or device references?")
    assert m.endswith("behind an idle memcg.")


def test_a_same_chunk_variant_of_0_operations_is_answered_as_not_measured(tmp_path, monkeypatch):
    res = _answer_results()
    res["bench"]["same_chunk"][1].update(pair_cpu_ns=None, vs_floor=None, met=None,
                                         not_measured="not measured: 0 operations in the run")
    text, _ = _answers(tmp_path, monkeypatch, res)
    c = _paragraph(text, "Same-chunk contention.")
    assert "pay global 33.60x (overlap 1.00), page not measured: 0 operations in the run, atomic 1.44x" in c
    assert "target: global missed, page not measured: 0 operations in the run, atomic met." in c
    assert "rarely ran at the same time" not in c       # not an overlap verdict: the run made no pair


def test_a_speed_up_over_one_thread_of_0_operations_is_answered_as_not_measured(tmp_path, monkeypatch):
    res = _answer_results()
    for r in res["bench"]["scaling"]["variants"]["page"]:
        r.update(speedup_vs_1=None, speedup_not_measured="not measured: 0 operations in the run")
    text, _ = _answers(tmp_path, monkeypatch, res)
    v = _paragraph(text, "Which synchronisation variant?")
    assert "reach global 1.00x, page not measured: 0 operations in the run, atomic 3.00x of one thread's " \
           "throughput, and 8 threads on 2 cores global 0.50x, page not measured: 0 operations in the run, " \
           "atomic 2.90x." in v


@pytest.mark.parametrize("yield_mops, verdict", [
    ({"global": 9.0, "page": 8.5}, "spin-then-yield does not help here"),
    ({"global": 11.0, "page": 11.0}, "spin-then-yield is the better lock"),     # exactly 1.1: better
    ({"global": 9.1, "page": 9.0}, "helps one lock and not the other"),         # 0.91 is not at most 0.9
    ({"global": 10.9, "page": 15.0}, "helps one lock and not the other"),       # 1.09 is not at least 1.1
])
def test_spin_then_yield_is_called_better_or_worse_only_when_both_locks_agree(tmp_path, monkeypatch, yield_mops,
                                                                              verdict):
    res = _answer_results()
    sc = res["bench"]["scaling"]["variants"]
    for v, mops in yield_mops.items():
        sc[v][2]["ops_per_s"] = 10e6                 # ratios of whole numbers: 11 / 10 is the float 1.1 exactly
        sc[f"{v}+yield"][1]["ops_per_s"] = mops * 1e6
    text, _ = _answers(tmp_path, monkeypatch, res)
    assert verdict in _paragraph(text, "Spinlocks under oversubscription (spin-then-yield?).")


@pytest.mark.parametrize("where, key, value, unsafe, safe", [
    ("race", "page, untracked, 30% alloc faults", 1, True, True),      # one stale read is evidence
    ("explore", "page, untracked, 1st alloc fails", 1, True, True),    # so is one violating schedule
    ("race", "page, pool, 30% alloc faults", 1, False, False),
    ("explore", "page, hijack, 1st alloc fails", 1, False, False),
    ("explore", "page, pool, 1st alloc fails", 1, False, False),
    ("race", "page, hijack, 30% alloc faults", 1, False, False),
    ("race", "page, mempool, 30% alloc faults", 1, False, False),
    ("explore", "page, mempool, 1st alloc fails", 1, False, False),
    ("explore", "page, mempool without a reserve, 1st alloc fails", 1, False, False),
])
def test_question_1s_verdicts_follow_each_race_and_explorer_figure(tmp_path, monkeypatch, where, key, value, unsafe,
                                                                  safe):
    res = _answer_results()
    res["race"][6].update(stale_reads=0, underflows=0)
    field = "stale_reads" if where == "race" else "violations"
    next(r for r in res[where] if r["label"] == key)[field] = value
    text, _ = _answers(tmp_path, monkeypatch, res)
    q1 = _paragraph(text, "Question 1: is the untracked fallback enough when the page allocation fails?")
    assert ("** No. " in q1) is unsafe and ("This run found no stale read with it" in q1) is not unsafe
    assert ("closed it in every run here." in q1) is safe
    assert ("investigate.**" in q1) is not safe


@pytest.mark.parametrize("blocked, released, works", [(True, True, True), (False, True, False), (True, False, False)])
def test_question_2_says_wait_works_only_if_it_blocked_and_was_released(tmp_path, monkeypatch, blocked, released,
                                                                       works):
    overflow = json.loads(json.dumps(_OVERFLOW))
    overflow["wait"].update(blocked_at_max=blocked, released_by_end=released)
    text, _ = _answers(tmp_path, monkeypatch, _answer_results(), overflow)
    q2 = _paragraph(text, "Question 2: u16 wrap, clamp, or u32?")
    assert f"blocked the 65,536th start ({'yes' if blocked else 'no'})" in q2
    assert q2.endswith("reopens the race.") is works and ("did not block and release" in q2) is not works


@pytest.mark.parametrize("pinned, delayed, supports", [(1, 0, True), (0, 0, False), (5, 1, False)])
def test_the_memcg_answer_supports_dev_t_records_only_if_references_pinned_and_records_delayed_nothing(
        tmp_path, monkeypatch, pinned, delayed, supports):
    res = _answer_results()
    res["churn"]["bdev-ref"]["still_pinned_at_end"] = pinned
    res["churn"]["bdev-devt"]["release_delayed"] = delayed
    text, _ = _answers(tmp_path, monkeypatch, res)
    m = _paragraph(text, "memcg: dev_t records or device references?")
    assert m.endswith("best-effort dev_t records.") is supports and m.endswith("idle memcg.") is not supports


def test_without_yield_variants_the_spin_answer_says_spin_then_yield_was_not_measured(tmp_path, monkeypatch):
    res = _answer_results()
    del res["bench"]["scaling"]["variants"]["page+yield"], res["bench"]["scaling"]["variants"]["global+yield"]
    sc = res["bench"]["scaling"]["variants"]
    sc["page"][2]["ops_per_s"] = 0.75 * sc["page"][1]["ops_per_s"]       # exactly 0.75: held, not collapsed
    text, _ = _answers(tmp_path, monkeypatch, res)
    s = _paragraph(text, "Spinlocks under oversubscription (spin-then-yield?).")
    assert "had no `+yield` variant in this run" in s and "`global` 1.50x" not in s
    assert "The page lock did not collapse in this run: it keeps 0.75x" in s


def test_a_design_answer_whose_sections_did_not_run_says_which(tmp_path, monkeypatch):
    res = _answer_results()
    for k in ("fio", "race", "churn"):
        del res[k]
    text, flat = _answers(tmp_path, monkeypatch, res)
    assert ("**Which synchronisation variant?** Not answered in this report: `fio` did not run.") in flat
    assert "**Question 1: is the untracked fallback enough when the page allocation fails?** Not answered in this " \
           "report: `race and explore` did not run." in flat
    assert "**A question for the series: what does the read-side check cover?** Not answered in this report: `fio` " \
           "did not run." in flat
    assert "**memcg: dev_t records or device references?** Not answered in this report: `writeback` did not run." \
        in flat
    assert "**Spinlocks under oversubscription (spin-then-yield?).** With 8 threads" in flat
    assert text.count("Not answered") == 6


def test_answers_name_both_missing_sections_sorted(tmp_path, monkeypatch):
    res = _answer_results()
    del res["bench"], res["memory"]
    text, flat = _answers(tmp_path, monkeypatch, res)
    assert "**Which synchronisation variant?** Not answered in this report: `bench`, `memory` did not run." in flat


def test_the_answers_cite_the_concepts_doc_where_there_is_no_design_answers_doc(tmp_path, monkeypatch):
    monkeypatch.setattr(ans, "_repo_root", lambda: str(tmp_path))
    text, flat = _answers(tmp_path, monkeypatch, _answer_results())
    assert "the reasoning behind them is in `docs/concepts.md`" in flat
    (tmp_path / "docs").mkdir()
    text, flat = _answers(tmp_path, monkeypatch, _answer_results())
    assert "the reasoning behind them is in `docs/concepts.md`" in flat
    (tmp_path / "docs" / "design-answers.md").write_text("x")
    text, flat = _answers(tmp_path, monkeypatch, _answer_results())
    assert "`docs/design-answers.md`" in flat


def test_a_missing_figure_in_a_section_that_ran_raises_naming_it(tmp_path, monkeypatch):
    res = _answer_results()
    res["bench"]["scaling"]["variants"]["page"].pop()
    with pytest.raises(KeyError, match=r"report: no scaling page row with \{'threads': 8\}"):
        _answers(tmp_path, monkeypatch, res)
    for key, label, named in [("race", "page (posted)", r"race row with \{'label': 'page \(posted\)'\}"),
                              ("fio_granularity", None, r"fio page-granular row with \{'variant': 'page'\}"),
                              ("fio", None, r"fio 10 GiB row with \{'variant': 'global'\}")]:
        res = _answer_results()
        if key == "race":
            res["race"] = [r for r in res["race"] if r["label"] != label]
        elif key == "fio":
            res["fio"]["10 GiB"]["rows"] = [r for r in res["fio"]["10 GiB"]["rows"] if r["variant"] != "global"]
        else:
            res["fio_granularity"]["rows"] = res["fio_granularity"]["rows"][:1]
        with pytest.raises(KeyError, match="report: no " + named):
            _answers(tmp_path, monkeypatch, res)
    res = _answer_results()
    res["explore"] = [r for r in res["explore"] if r["label"] != "page (posted)"]
    with pytest.raises(KeyError, match=r"report: no explore row with \{'label': 'page \(posted\)'\}"):
        _answers(tmp_path, monkeypatch, res)
    res = _answer_results()
    res["memory"]["rows"] = [r for r in res["memory"]["rows"] if r["variant"] != "atomic"]
    with pytest.raises(KeyError, match=r"no memory row with \{'size_bytes': 1099511627776, 'variant': 'atomic'\}"):
        _answers(tmp_path, monkeypatch, res)


def test_overflow_demo_measures_wrap_clamp_and_wait_on_a_real_tracker():
    out = ans.overflow_demo()
    assert out["wrap"] == {"count": 0, "is_active": False, "wraps": 1}
    assert out["clamp"] == {"count_after_all_but_one_end": 0, "is_active": False, "clamps": 1}
    # the 65,536th start cannot finish before an end makes room: it is still running when the end comes
    assert out["wait"]["blocked_at_max"] is True
    assert out["wait"]["released_by_end"] is True and out["wait"]["count"] == 65_535
    assert out["wait"]["waits"] in (0, 1)     # 0 only if the 65,536th start ran after the end made room


def test_a_fio_ratio_is_two_decimals_and_a_dash_for_the_unpatched_row():
    f = ans._Figures(_answer_results())
    assert f.fio_ratio("10 GiB", "page") == "1.06x" and f.fio_ratio("320 GiB", "page") == "1.17x"
    assert f.fio_ratio("10 GiB", "none") == "—"


def test_the_answers_look_for_the_docs_beside_the_package():
    assert ans._repo_root() == os.path.dirname(os.path.dirname(os.path.abspath(pybcache.__file__)))


@pytest.mark.parametrize("change, clean, default_clean", [
    (None, "`pool` (1 page), `mempool` min_nr 1, `mempool` min_nr 8, `mempool` min_nr 1 (GFP_NOWAIT)", True),
    # the default stalls one round at 3 failures: no longer clean, and the paragraph says so
    ((("mempool", 1, "noio", 3), {"stall_rounds": 1, "stall_s": 5.0}),
     "`pool` (1 page), `mempool` min_nr 8, `mempool` min_nr 1 (GFP_NOWAIT)", False),
    # pool loses a write at 2 failures; mempool min_nr 8 bypasses 1.6x at 1: both drop out
    ((("pool", 1, "noio", 2), {"writes_lost": 1}), "`mempool` min_nr 1, `mempool` min_nr 8, "
     "`mempool` min_nr 1 (GFP_NOWAIT)", True),
    ((("mempool", 8, "noio", 1), {"ratio": 1.6}), "`pool` (1 page), `mempool` min_nr 1, "
     "`mempool` min_nr 1 (GFP_NOWAIT)", True),
    # no bypass without the fault (no ratio): clean while the fault added no bypass, not once it added one
    ((("pool", 1, "noio", 3), {"ratio": None, "extra_bypasses": 0}), "`pool` (1 page), `mempool` min_nr 1, "
     "`mempool` min_nr 8, `mempool` min_nr 1 (GFP_NOWAIT)", True),
    ((("pool", 1, "noio", 3), {"ratio": None, "extra_bypasses": 2}), "`mempool` min_nr 1, `mempool` min_nr 8, "
     "`mempool` min_nr 1 (GFP_NOWAIT)", True),
])
def test_question_1_names_the_clean_policies_and_whether_the_default_is_one_from_the_figures(
        tmp_path, monkeypatch, change, clean, default_clean):
    sus = _sustained_rows()
    if change:
        key, values = change
        next(r for r in sus["rows"] if (r["policy"], r["pool_pages"], r["gfp"], r["failures"]) == key).update(values)
    text, _ = _answers(tmp_path, monkeypatch, _answer_results(), sustained=sus)
    q1 = _paragraph(text, "Question 1: is the untracked fallback enough when the page allocation fails?")
    assert f"at every failure count here: {clean}. " in q1
    assert q1.endswith("is one of them.") is default_clean
    assert q1.endswith("is not one of them in this run: choose the default again.**") is not default_clean


def test_question_1_refuses_a_sustained_run_without_one_and_two_failures(tmp_path, monkeypatch):
    sus = _sustained_rows()
    sus["rows"] = [r for r in sus["rows"] if r["failures"] != 2]
    with pytest.raises(KeyError, match="failure counts 1 and 2"):
        _answers(tmp_path, monkeypatch, _answer_results(), sustained=sus)
