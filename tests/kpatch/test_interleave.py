"""The patch-level explorer (issue 26): GCC's ThreadSanitizer hooks defined by the lab, a controlled
scheduler, source-DPOR against sleep sets and a brute-force run, KCSAN-style data races, and the mutants
that only it catches deterministically."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from helpers.kpatch_util import mutant_table

from pybcache.bcache.kpatch.check.runner import check_patch
from pybcache.bcache.kpatch.interleave import SCENARIOS, explore_patch

pytestmark = [pytest.mark.native, pytest.mark.xdist_group("native-threads")]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "patches"
TINY = ROOT / "tests" / "data" / "tiny_counter.c"
SHIPPED = sorted(EXAMPLES.glob("*.c"))


@pytest.fixture(scope="module")
def mutants(tmp_path_factory):
    return mutant_table().generate(tmp_path_factory.mktemp("mutants"))


def test_gcc_calls_the_tsan_hooks_of_a_counter_increment_and_a_program_defining_them_links(tmp_path):
    cc = shutil.which("gcc") or shutil.which("cc")
    assert cc
    (tmp_path / "ctr.c").write_text("int counter;\nvoid inc(void) { counter++; }\n")
    subprocess.run([cc, "-O2", "-fsanitize=thread", "-c", "ctr.c", "-o", "ctr.o"], cwd=tmp_path, check=True)
    undefined = subprocess.run(["nm", "-u", "ctr.o"], cwd=tmp_path, capture_output=True, text=True).stdout
    assert "__tsan_read4" in undefined and "__tsan_write4" in undefined
    (tmp_path / "main.c").write_text(
        "#include <stdio.h>\nvoid inc(void); extern int counter; int r, w;\n"
        "void __tsan_read4(void *p) { r += p == &counter; }\nvoid __tsan_write4(void *p) { w += p == &counter; }\n"
        "void __tsan_func_entry(void *pc) { (void)pc; }\nvoid __tsan_func_exit(void) {}\nvoid __tsan_init(void) {}\n"
        "int main(void) { inc(); printf(\"%d %d %d\\n\", r, w, counter); return 0; }\n")
    subprocess.run([cc, "-O2", "main.c", "ctr.o", "-o", "t"], cwd=tmp_path, check=True)
    out = subprocess.run([str(tmp_path / "t")], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["1", "1", "1"]          # both hooks called once, on the counter; no libtsan


# the counter under a spinlock, then (tests/kpatch/test_interleave_locks.py's patches) under an rwlock and a mutex
@pytest.mark.parametrize("patch, scenario, brute, classes", [
    (TINY, "1w1r", 3177, 12), (TINY, "2w", 26946, 6),
    (TINY.with_name("rw_counter.c"), "1w1r", 3177, 12), (TINY.with_name("rw_counter.c"), "2w", 26946, 6),
    (TINY.with_name("mutex_counter.c"), "1w1r", 3334, 12), (TINY.with_name("mutex_counter.c"), "2w", 6380, 4)],
    ids=lambda x: x.stem if isinstance(x, Path) else str(x))
def test_dpor_explores_one_execution_per_equivalence_class_counted_by_brute_force(patch, scenario, brute, classes):
    every = explore_patch(patch, scenario, mode="exhaustive", count_classes=True)
    assert every["complete"] and not every["failures"]
    assert (every["executions"], every["classes"]) == (brute, classes)
    for mode in ("sleep", "dpor", "optimal"):
        r = explore_patch(patch, scenario, mode=mode, count_classes=True)
        assert r["complete"] and not r["failures"]
        assert r["classes"] == classes == r["executions"], mode      # every class, each once
    assert explore_patch(patch, scenario)["blocked"] <= explore_patch(patch, scenario, mode="sleep")["blocked"]


@pytest.mark.parametrize("patch, scenario, classes, source_blocked", [
    (TINY, "2w1r", 446, 10), (EXAMPLES / "v3_proposal.c", "2w1r", 1586, 13),
    (ROOT / "tests" / "data" / "mutex_counter.c", "1w2r", 188, 6)])
def test_optimal_dpor_runs_each_class_once_and_never_cuts_a_sleep_set_blocked_run(patch, scenario, classes,
                                                                                  source_blocked):
    # source-DPOR with sleep sets starts runs that end with every enabled thread asleep; the wake-up trees
    # of optimal DPOR (Algorithm 2) never do, and the classes are the same ones
    source = explore_patch(patch, scenario, count_classes=True)
    assert (source["executions"], source["classes"], source["blocked"]) == (classes, classes, source_blocked)
    r = explore_patch(patch, scenario, mode="optimal", count_classes=True)
    assert r["complete"] and not r["failures"] and r["diverged"] == 0
    assert (r["executions"], r["classes"], r["blocked"]) == (classes, classes, 0)
    again = explore_patch(patch, scenario, mode="optimal", count_classes=True)
    assert (again["executions"], again["events"], again["wut_peak"]) == (r["executions"], r["events"],
                                                                         r["wut_peak"])   # deterministic


def test_optimal_dpor_says_incomplete_when_a_wake_up_branch_cannot_be_followed():
    # v3_atomic frees its pages with kfree_rcu: which thread's operation end runs the callback depends on
    # the readers' RCU sections, which the dependence does not relate to that end (no point there), so a
    # reordered branch can find the thread finished instead of freeing; the search then says so
    r = explore_patch(EXAMPLES / "v3_atomic.c", "1w2r", mode="optimal", count_classes=True)
    assert r["diverged"] > 0 and not r["complete"]
    assert r["executions"] == r["classes"]


@pytest.mark.parametrize("scenario", ["2w1r", "2w1r-page"])
def test_the_proposal_is_explored_completely_with_far_fewer_runs_than_sleep_sets_alone(scenario):
    sleep = explore_patch(EXAMPLES / "v3_proposal.c", scenario, mode="sleep", count_classes=True)
    dpor = explore_patch(EXAMPLES / "v3_proposal.c", scenario, count_classes=True)
    assert sleep["complete"] and dpor["complete"] and not sleep["failures"] and not dpor["failures"]
    assert dpor["executions"] == dpor["classes"] == sleep["classes"]     # ratio 1, no class missed
    assert (dpor["executions"] + dpor["blocked"]) * 5 < sleep["executions"] + sleep["blocked"]
    again = explore_patch(EXAMPLES / "v3_proposal.c", scenario)
    assert (again["executions"], again["blocked"], again["events"]) == (dpor["executions"], dpor["blocked"],
                                                                        dpor["events"])   # deterministic


@pytest.mark.parametrize("patch", [p for p in SHIPPED if p.name != "v2_posted.c"] + [TINY], ids=lambda p: p.name)
@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if s != "2w"])
def test_shipped_patches_pass_every_scenario_and_every_allocation_failure(patch, scenario):
    k = 0
    while True:
        r = explore_patch(patch, scenario, fault_at=k)
        assert r["complete"] and r["error"] is None and not r["failures"], (k, r["failures"])
        if k and not r["faults_injected"]:
            break
        k += 1
        assert k < 16


def test_v2_leaves_a_write_untracked_when_its_allocation_fails_and_a_read_misses_it():
    r = explore_patch(EXAMPLES / "v2_posted.c", "1w1r", fault_at=1)
    assert explore_patch(EXAMPLES / "v2_posted.c", "1w1r")["failures"] == []
    [f] = r["failures"]
    assert f["kind"] == "missed bypass" and "W1's write was in flight" in f["message"]
    assert "FAILS (injected)" in f["steps"][0] and "start returned" in f["steps"][0]
    assert f["steps"][1].startswith("R1: read begins") and f["steps"][1].endswith("read returned (not active)")


def test_inc_outside_lock_is_a_kcsan_data_race_and_a_lost_count(mutants):
    path = mutants["inc-outside-lock"]
    src = path.read_text().splitlines()
    r = explore_patch(path, "1w1r")
    race = next(f for f in r["failures"] if f["kind"] == "data race")
    assert race["message"].startswith("BUG: KCSAN: data-race in bypass_write_start / bypass_read_bypass")
    (fa, la), (fb, lb) = [s.split(":") for s in race["sites"]]
    assert fa == fb == path.name
    assert "++" in src[int(la) - 1] and "counters[" in src[int(la) - 1]      # segment_inc's unlocked increment
    assert "counters[" in src[int(lb) - 1] and "> 0" in src[int(lb) - 1]     # read_bypass's read
    assert any(s.startswith("R1: read begins") for s in race["steps"])
    r2 = explore_patch(path, "2w1r")
    oracle = [f for f in r2["failures"] if f["kind"] != "data race"]
    assert oracle and "write_end" in oracle[0]["message"]                    # the count was gone at the end
    assert (r2["executions"], len(r2["failures"])) == (explore_patch(path, "2w1r")["executions"], 2)


def test_no_recheck_after_alloc_overwrites_the_first_writers_page(mutants):
    r = explore_patch(mutants["no-recheck-after-alloc"], "2w1r")
    [f] = r["failures"]
    assert "write_end" in f["message"] and "memory not back: 4,096 bytes" in f["message"]
    # both writers allocated before either installed: the contended first allocation
    assert [s.split(":")[0] for s in f["steps"][:2]] == ["W1", "W2"]
    assert ", alloc " in f["steps"][0] and ", alloc " in f["steps"][1]
    p = explore_patch(mutants["no-recheck-after-alloc"], "2w1r-page")
    assert p["failures"] and "memory not back" in p["failures"][0]["message"]


def test_check_patch_explore_fails_both_mutants_with_a_counterexample_and_passes_the_proposal(mutants):
    race = check_patch(mutants["inc-outside-lock"], checks=["explore"]).checks[0]
    assert not race.passed and race.figure == "data race"
    assert "BUG: KCSAN: data-race in bypass_write_start" in race.detail
    assert any(line.startswith("  W1:") for line in race.counterexample)
    lost = check_patch(mutants["no-recheck-after-alloc"], checks=["explore"]).checks[0]
    assert not lost.passed and lost.figure == "lost count" and "2w1r" in lost.detail
    ok = check_patch(EXAMPLES / "v3_proposal.c", checks=["explore"]).checks[0]
    assert ok.passed and "patch-level executions" in ok.figure, ok.detail


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="scenario must be one of"):
        explore_patch(TINY, "3w")
    with pytest.raises(ValueError, match="mode must be one of"):
        explore_patch(TINY, "1w1r", mode="random")
    with pytest.raises(ValueError, match=r"fault_at must be in \[0, 64\]"):
        explore_patch(TINY, "1w1r", fault_at=-1)
    with pytest.raises(TypeError, match="patch must be a path"):
        explore_patch(3, "1w1r")


def test_cli_explore_patch_level_prints_the_race_and_refuses_a_lab_variant(mutants):
    import json

    from helpers.clirun import run_pybcache
    out = run_pybcache("explore", "--sync", str(mutants["inc-outside-lock"]), "--patch-level", "--scenario", "1w1r")
    assert out.returncode == 0, out.stderr
    assert "BUG: KCSAN: data-race in bypass_write_start / bypass_read_bypass" in out.stdout
    assert "   1. W1: " in out.stdout
    ok = run_pybcache("explore", "--sync", str(EXAMPLES / "v2_posted.c"), "--patch-level", "--fault-at", "1",
                      "--scenario", "1w1r", "--json")
    doc = json.loads(ok.stdout)
    assert doc["patch_level"] and doc["failures"][0]["kind"] == "missed bypass"
    bad = run_pybcache("explore", "--sync", "page", "--patch-level")
    assert bad.returncode == 2 and "--patch-level: applies to a kernel patch" in bad.stderr
    assert "Traceback" not in bad.stderr
    bad = run_pybcache("explore", "--sync", str(TINY), "--patch-level", "--scenario", "3w1r")
    assert bad.returncode == 2 and "with --patch-level one of" in bad.stderr
