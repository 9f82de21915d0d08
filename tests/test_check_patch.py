"""check-patch: the battery on the shipped examples, on single-point mutants of the proposal (each must
fail on the check that exists to catch it), and on patches that crash or hang in the child process."""
from __future__ import annotations

import json

import pytest

from clirun import run_pybcache
from kpatch_util import BAD, EXAMPLES
from kpatches.mutants.table import MUTANTS, generate

from pybcache.checkpatch import CHECKS, PatchLoadError, check_patch



@pytest.fixture(autouse=True)
def cache_dir(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("PYBCACHE_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "kpatch-cache"))


@pytest.fixture(scope="module")
def mutants(tmp_path_factory):
    return generate(tmp_path_factory.mktemp("mutants"))


def _by_name(result):
    return {c.name: c for c in result.checks}


@pytest.mark.parametrize("example", ["v3_proposal", "v3_atomic"])
def test_the_proposals_pass_every_check(example):
    result = check_patch(EXAMPLES / f"{example}.c", seconds=1.0)
    failed = {c.name: c.detail for c in result.checks if not c.passed}
    assert failed == {}
    assert [c.name for c in result.checks] == list(CHECKS)
    assert [r["size_bytes"] >> 40 for r in result.memory] == [1, 10, 100]


def test_v2_fails_overflow_with_the_u16_wrap_as_counterexample():
    c = _by_name(check_patch(EXAMPLES / "v2_posted.c", checks=["overflow"]))["overflow"]
    assert not c.passed
    assert "65,536 writes in flight" in c.detail
    assert "u16 overflow" in c.counterexample[-1]


def test_v2_fails_semantics_on_a_write_left_untracked_by_an_allocation_failure():
    c = _by_name(check_patch(EXAMPLES / "v2_posted.c", checks=["semantics"]))["semantics"]
    assert not c.passed
    assert "an allocation failed in its start" in c.counterexample[-1]
    assert "does NOT bypass" in c.counterexample[-1]


def test_v2_fails_explore_with_old_data_cached_behind_the_write_its_failed_allocation_left_untracked():
    c = _by_name(check_patch(EXAMPLES / "v2_posted.c", checks=["explore"]))["explore"]
    assert not c.passed and "violate the oracle" in c.detail and "fault_at=1" in c.detail
    assert "page allocation failed, write left UNTRACKED" in c.counterexample[0]
    assert "STALE" in c.counterexample[-1]


@pytest.mark.parametrize("mutant", [m for m in MUTANTS if not m.tsan], ids=lambda m: m.name)
def test_each_mutant_fails_on_the_check_that_catches_it(mutant, mutants):
    c = _by_name(check_patch(mutants[mutant.name], seconds=1.0, checks=[mutant.caught_by]))[mutant.caught_by]
    assert not c.passed, c.detail
    assert c.detail.startswith("FAILED: ")


@pytest.mark.parametrize("mutant", [m for m in MUTANTS if m.tsan], ids=lambda m: m.name)
def test_a_data_race_mutant_fails_under_tsan(mutant, mutants):
    c = _by_name(check_patch(mutants[mutant.name], seconds=1.0, tsan=True,
                             checks=[mutant.caught_by]))[mutant.caught_by]
    assert not c.passed and c.figure == "ThreadSanitizer"
    assert "ThreadSanitizer: data race" in c.detail


def test_the_proposal_passes_balance_under_tsan():
    c = _by_name(check_patch(EXAMPLES / "v3_proposal.c", seconds=1.0, tsan=True, checks=["balance"]))["balance"]
    assert c.passed, c.detail


def test_mutants_follow_the_proposal_and_each_changes_it(mutants):
    source = (EXAMPLES / "v3_proposal.c").read_text()
    texts = {name: path.read_text() for name, path in mutants.items()}
    assert len(MUTANTS) >= 6 and len(set(texts.values())) == len(MUTANTS)
    assert all(t != source for t in texts.values())


def test_a_bug_on_kills_the_check_that_ran_it_naming_the_call_and_the_next_check_still_runs():
    c = _by_name(check_patch(BAD / "crasher.c", checks=["overflow", "memory"]))
    assert c["overflow"].detail.startswith("FAILED: killed by SIGABRT in write_start(0, 4 KiB) [submitter]")
    assert any("kernel BUG at" in line for line in c["overflow"].counterexample)
    assert c["memory"].detail.startswith("FAILED: killed by SIGABRT in write_start(0, 1 TiB) [MainThread]")


def test_a_wait_that_never_wakes_fails_as_hung_naming_the_call():
    c = _by_name(check_patch(BAD / "hangs.c", checks=["overflow"]))["overflow"]
    assert not c.passed
    assert c.detail.startswith("FAILED: hung in write_start(0, 4 KiB) [submitter]")
    assert "wait_event" in c.detail


def test_a_child_past_its_wall_bound_is_killed_and_its_call_named(tmp_path):
    spins = tmp_path / "spins.c"
    spins.write_text((BAD / "hangs.c").read_text().replace(
        "wait_event(never, READ_ONCE(never_true));", "while (!READ_ONCE(never_true))\n                cpu_relax();"))
    # 10 s: time enough for the child to start and reach the loop on a loaded machine
    c = _by_name(check_patch(spins, checks=["overflow"], timeout=10.0))["overflow"]
    assert not c.passed
    assert c.detail.startswith("FAILED: hung in write_start(0, 4 KiB) [submitter]: killed after 10 s")


def test_cli_exit_status_and_json_shape():
    proc = run_pybcache("check-patch", str(EXAMPLES / "v2_posted.c"), "--json", "--seconds", "0.5")
    assert proc.returncode == 1, proc.stderr
    out = json.loads(proc.stdout)
    assert set(out) >= {"patch", "checks", "memory"}
    assert [c["name"] for c in out["checks"]] == list(CHECKS)
    assert all(set(c) >= {"name", "passed", "figure", "detail", "counterexample"} for c in out["checks"])
    assert {c["name"]: c["passed"] for c in out["checks"]}["overflow"] is False


def test_cli_compile_error_exits_2_with_the_compilers_lines():
    proc = run_pybcache("check-patch", str(BAD / "syntax_error.c"))
    assert proc.returncode == 2
    assert "error: expected" in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stdout == ""


@pytest.mark.parametrize("args", [["missing.c"], ["x.c", "--seconds", "0"], ["x.c", "--seconds", "nan"]])
def test_cli_bad_input_exits_2_with_one_line(args):
    proc = run_pybcache("check-patch", *args)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_a_patch_without_a_required_operation_is_a_usage_error(tmp_path):
    patch = tmp_path / "no_read.c"
    patch.write_text((BAD / "hangs.c").read_text().replace(", .read_bypass = none_read", ""))
    with pytest.raises(PatchLoadError, match="read_bypass"):
        check_patch(patch, checks=["memory"])
    proc = run_pybcache("check-patch", str(patch))
    assert proc.returncode == 2 and "read_bypass" in proc.stderr and "Traceback" not in proc.stderr


def test_bad_arguments_raise_naming_the_argument():
    with pytest.raises(ValueError, match="seconds"):
        check_patch(EXAMPLES / "v3_proposal.c", seconds=0)
    with pytest.raises(ValueError, match="checks"):
        check_patch(EXAMPLES / "v3_proposal.c", checks=["nope"])
    with pytest.raises(TypeError, match="path"):
        check_patch(3)


def test_report_section_has_a_table_per_shipped_example(tmp_path):
    from pybcache.report import PATCH_EXAMPLES, ReportContext, _check_patch
    ctx = ReportContext(out_dir=str(tmp_path), quick=True)
    text = _check_patch(ctx)
    assert text.startswith("## check-patch: the shipped example patches")
    for name in PATCH_EXAMPLES:
        assert f"**{name}.c**" in text
        assert [c["name"] for c in ctx.results["check_patch"][name]["checks"]] == list(CHECKS)
    assert "u16 overflow" in text


def test_the_untracked_fallback_mutant_also_fails_explore(mutants):
    c = _by_name(check_patch(mutants["untracked-fallback"], checks=["explore"]))["explore"]
    assert not c.passed and "violate the oracle" in c.detail
