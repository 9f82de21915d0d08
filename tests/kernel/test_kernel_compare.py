"""``pybcache kernel compare`` without a kernel: the model's side of each configuration (the explorer is
exhaustive, so its verdicts are deterministic), the agreement rule, the table, and the report's section with and
without a saved comparison. The kernel's side runs in tests/kernel/test_kernel_uml.py."""
from __future__ import annotations

import copy
import json

import pytest

from pybcache.bcache.kpatch import mutants
from pybcache.kernel import compare as kcompare
from pybcache.kernel import generate as kgen
from pybcache.report import ReportContext
from pybcache.report.kernel import kernel as kernel_section


def _model(violations=0, reports=0, stale_reads=0, check_patch=None) -> dict:
    return {"tracker": None, "explore": {"violations": violations, "schedules": 18, "kernel_report_schedules": reports,
                                         "counterexample": None},
            "race": {"stale_reads": stale_reads, "reads": 1000, "stale_cached_blocks": 0}, "check_patch": check_patch}


def _kernel(stale=0, balance="held", reports=(), stress_stale=None) -> dict:
    return {"version": "6.12.118", "build_s": 1.0, "built": False,
            "race": {"stale": stale, "tries": 5, "balance": balance,
                     "reports": [{"kind": k, "head": f"{k} here"} for k in reports], "fail_alloc": None,
                     "seconds": 9.0, "passed": not stale and balance == "held" and not reports},
            "stress": None if stress_stale is None else {"reads": 100, "stale_reads": stress_stale, "writes": 50,
                                                         "stale_final": 0, "reports": [], "seconds": 30.0}}


@pytest.mark.parametrize("model, kernel, stale, caught", [
    (_model(violations=3), _kernel(stale=5), True, True),                         # unpatched: both stale
    (_model(), _kernel(), True, True),                                            # v1, v3: both clean
    (_model(violations=2), _kernel(), False, False),                              # check at entry: a timing
    (_model(), _kernel(stress_stale=1), False, False),                            # only the stress saw one
    (_model(check_patch={"passed": False, "failed": [{"check": "context", "figure": "might_sleep"}]}),
     _kernel(reports=["might_sleep"]), True, True),                               # both catch a non-stale bug
    (_model(check_patch={"passed": True, "failed": []}), _kernel(balance="broken"), True, False),  # a shim gap
    (_model(reports=1), _kernel(reports=["warning"]), True, True),                # explore's kernel reports count
])
def test_agreement_compares_stale_reads_and_any_failure_separately(model, kernel, stale, caught):
    a = kcompare.agreement(model, kernel)
    assert (a["stale"], a["caught"]) == (stale, caught), a


def _result(*rows: tuple[str, dict, dict]) -> dict:
    out = []
    for name, m, k in rows:
        out.append({"config": name, "what": name, "patches": [], "fail_alloc": None, "model": m, "kernel": k,
                    "agree": kcompare.agreement(m, k)})
    return {"kernel": "6.12.118", "debug": True, "tries": 5, "stress_seconds": 20, "rows": out, "seconds": 300.0,
            "measured": "2026-12-06 06:00:00 UTC",
            "disagreements": [r["config"] for r in out if not (r["agree"]["stale"] and r["agree"]["caught"])]}


def test_the_table_shows_each_side_and_names_what_disagrees():
    res = _result(("unpatched", _model(violations=714), _kernel(stale=5, stress_stale=2)),
                  ("v3, check at entry", _model(violations=852), _kernel()))
    headers, rows = kcompare.compare_table(res)
    assert headers[0] == "configuration" and headers[-1] == "agree"
    assert rows[0][1] == "714 / 18 stale" and rows[0][4] == "5 / 5 stale" and rows[0][7] == "2 / 100 stale"
    assert rows[0][-1] == "yes" and rows[1][-1] == "NO: stale, caught"


def test_every_configuration_names_generated_patches_and_an_existing_tracker(tmp_path):
    assert [c.name for c in kcompare.CONFIGS][:3] == ["unpatched", "v1", "v3"]
    for cfg in kcompare.CONFIGS:
        assert all(p in kgen.GENERATED for p in cfg.patches), cfg
        if cfg.sync not in ("none", "v3"):
            mutants.mutant(cfg.sync)                      # the kernel mutant's twin exists
    for kernel_name, lab_name in mutants.KERNEL_PAIRS.items():
        assert kernel_name in kgen.V3_MUTANTS and any(c.sync == lab_name for c in kcompare.CONFIGS)


def test_run_compare_refuses_bad_arguments_before_running_anything():
    with pytest.raises(ValueError, match="only: no configuration 'x'"):
        kcompare.run_compare(only=["x"])
    with pytest.raises(ValueError, match=r"tries must be in \[1, 100\]"):
        kcompare.run_compare(tries=0)
    with pytest.raises(ValueError, match="need the debug build"):
        kcompare.run_compare(only=["v3-untracked-fallback"], debug=False)


@pytest.mark.native
@pytest.mark.parametrize("name, stale", [("unpatched", True), ("v3", False), ("v3, check at entry", True),
                                         ("v3-untracked-fallback", True), ("v3, allocations fail", False)])
def test_the_models_side_of_a_configuration_is_the_explorers_verdict(name, stale, tmp_path):
    cfg = next(c for c in kcompare.CONFIGS if c.name == name)
    row = kcompare.model_row(cfg, tmp_path, race_seconds=0.2, check_patch=False)
    assert (row["explore"]["violations"] > 0) == stale, row["explore"]
    assert row["explore"]["schedules"] > 0 and row["race"]["reads"] > 0
    if not stale:   # no interleaving of the explored scenarios is stale, so no run of the threads can be
        assert row["race"]["stale_reads"] == 0


def test_the_report_section_shows_the_saved_comparison_or_says_how_to_get_one(tmp_path, monkeypatch):
    monkeypatch.setenv("PYBCACHE_KERNEL_CACHE", str(tmp_path / "cache"))
    ctx = ReportContext(out_dir=str(tmp_path))
    text = kernel_section(ctx)
    assert "No comparison yet: `pybcache report --kernel`" in text and ctx.results["kernel"] is None
    res = _result(("unpatched", _model(violations=714), _kernel(stale=5, reports=["warning"])),
                  ("v3, check at entry", _model(violations=852), _kernel()))
    saved = tmp_path / "cache" / "compare" / "latest.json"
    saved.parent.mkdir(parents=True)
    saved.write_text(json.dumps(res))
    ctx = ReportContext(out_dir=str(tmp_path))
    text = kernel_section(ctx)
    assert "measured 2026-12-06 06:00:00 UTC" in text and "| v3, check at entry |" in text
    assert "- unpatched: warning: `warning here`" in text and "They disagree on: v3, check at entry." in text
    assert ctx.results["kernel"] == res
    broken = copy.deepcopy(res)
    saved.write_text(json.dumps(broken)[:-10])          # unreadable: treated as none, never a traceback
    assert "No comparison yet" in kernel_section(ReportContext(out_dir=str(tmp_path)))
