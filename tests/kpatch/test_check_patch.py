"""check-patch: the battery on the shipped examples, on single-point mutants of the proposal (each must
fail on the check that exists to catch it), and on patches that crash or hang in the child process."""
from __future__ import annotations

import json
import os
import threading
import time

import pytest

from helpers.clirun import run_pybcache
from helpers.kpatch_util import BAD, EXAMPLES, mutant_table

from pybcache.bcache.kpatch.check import checks as cpchk
from pybcache.bcache.kpatch.check import context as cpctx
from pybcache.bcache.kpatch.check import semantics as cpsem
from pybcache.bcache.kpatch.check.runner import CHECKS, PatchLoadError, check_patch

pytestmark = [pytest.mark.native, pytest.mark.e2e]

MUTANTS, generate = mutant_table().MUTANTS, mutant_table().generate

#: `make sanitize` runs the suite with ASan preloaded, which ThreadSanitizer cannot share a process with
#: (check_patch(tsan=True) then refuses: tested below); the --tsan runs are part of the plain suite.
UNDER_ASAN = "libasan" in os.environ.get("LD_PRELOAD", "")
needs_tsan = pytest.mark.skipif(UNDER_ASAN, reason="ASan is preloaded (make sanitize): TSan cannot run beside it")



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


# v2's page allocation is GFP_NOIO of one page, which the kernel does not fail (docs/check-patch.md, "Allocation
# failures"): its untracked write is found under adversarial injection, --fail-alloc all.
def test_v2_fails_semantics_on_a_write_left_untracked_by_an_allocation_failure():
    c = _by_name(check_patch(EXAMPLES / "v2_posted.c", checks=["semantics"], fail_alloc="all"))["semantics"]
    assert not c.passed
    assert "an allocation failed in its start" in c.counterexample[-1]
    assert "does NOT bypass" in c.counterexample[-1]


def test_v2_fails_explore_with_old_data_cached_behind_the_write_its_failed_allocation_left_untracked():
    c = _by_name(check_patch(EXAMPLES / "v2_posted.c", checks=["explore"], fail_alloc="all"))["explore"]
    assert not c.passed and "violate the oracle" in c.detail and "fault_at=1" in c.detail
    assert "page allocation failed, write left UNTRACKED" in c.counterexample[0]
    assert "STALE" in c.counterexample[-1]


@pytest.mark.parametrize("mutant", [m for m in MUTANTS if not m.tsan], ids=lambda m: m.name)
def test_each_mutant_fails_on_the_check_that_catches_it(mutant, mutants):
    # the mutants are judged under adversarial injection (their allocations are GFP_NOIO of one page)
    c = _by_name(check_patch(mutants[mutant.name], seconds=1.0, checks=[mutant.caught_by],
                             fail_alloc="all"))[mutant.caught_by]
    assert not c.passed, c.detail
    assert c.detail.startswith("FAILED: ")
    assert mutant.figure in c.figure, (c.figure, c.detail)


@needs_tsan
@pytest.mark.parametrize("mutant", [m for m in MUTANTS if m.tsan], ids=lambda m: m.name)
def test_a_data_race_mutant_fails_under_tsan(mutant, mutants):
    c = _by_name(check_patch(mutants[mutant.name], seconds=1.0, tsan=True,
                             checks=[mutant.caught_by]))[mutant.caught_by]
    assert not c.passed and c.figure == mutant.figure == "ThreadSanitizer"
    assert "ThreadSanitizer: data race" in c.detail


@needs_tsan
def test_the_proposal_passes_balance_under_tsan():
    c = _by_name(check_patch(EXAMPLES / "v3_proposal.c", seconds=1.0, tsan=True, checks=["balance"]))["balance"]
    assert c.passed, c.detail


@needs_tsan
def test_the_lockless_proposal_passes_race_under_tsan_the_write_handover_being_visible():
    # v3_atomic's relaxed atomic_inc in write_start is ordered before the kfree that may follow its end only by
    # the write's hand-over to its completion thread, which happens in the lab's uninstrumented driver: the
    # shim runtime makes that edge visible to TSan (kpatch_rt.c, kp_handoff); without it TSan reports a race
    # between the counter's increment and the page's free.
    c = _by_name(check_patch(EXAMPLES / "v3_atomic.c", seconds=1.0, tsan=True, checks=["race"]))["race"]
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
    # the bound counts from the child's heartbeat (its interpreter is up), so 5 s is time enough to load
    # the patch and reach the loop however long a loaded machine took to start the child
    c = _by_name(check_patch(spins, checks=["overflow"], timeout=5.0))["overflow"]
    assert not c.passed
    assert c.detail.startswith("FAILED: hung in write_start(0, 4 KiB) [submitter]: killed after 5 s")


def test_the_wall_bound_counts_from_the_childs_heartbeat_and_its_start_is_bounded_apart(tmp_path, monkeypatch):
    import subprocess
    import sys as _sys

    from pybcache.bcache.kpatch.check import runner
    started = tmp_path / "heartbeat"
    proc = subprocess.Popen([_sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        monkeypatch.setattr(runner, "STARTUP_BOUND_S", 0.3)
        t0 = time.monotonic()
        assert runner._wait_unreaped(proc, 3600.0, started) is False     # never up: the start bound
        assert time.monotonic() - t0 < 30
        monkeypatch.setattr(runner, "STARTUP_BOUND_S", 3600.0)
        started.write_bytes(b"")
        t0 = time.monotonic()
        assert runner._wait_unreaped(proc, 0.3, started) is False        # up: the check's own bound
        assert time.monotonic() - t0 >= 0.3
    finally:
        runner._kill_group(proc)
    quick = subprocess.Popen([_sys.executable, "-c", "pass"], start_new_session=True)
    try:
        assert runner._wait_unreaped(quick, 3600.0, tmp_path / "never") is True   # an ending child: True
    finally:
        runner._kill_group(quick)


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


def test_an_empty_check_list_is_rejected_and_a_str_is_one_check_name():
    with pytest.raises(ValueError, match="checks must name at least one check"):
        check_patch(EXAMPLES / "v3_proposal.c", checks=[])
    with pytest.raises(TypeError, match="checks"):
        check_patch(EXAMPLES / "v3_proposal.c", checks={"memory"})
    result = check_patch(EXAMPLES / "v3_proposal.c", checks="memory")
    assert [c.name for c in result.checks] == ["memory"]


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
    c = _by_name(check_patch(mutants["untracked-fallback"], checks=["explore"], fail_alloc="all"))["explore"]
    assert not c.passed and "violate the oracle" in c.detail


# -- regressions of the review findings (issue #12) --------------------------------------------------

def _with_warn_on_in_write_end(tmp_path):
    source = (EXAMPLES / "v3_proposal.c").read_text()
    anchor = "        bool wake = false;\n\n        if (!w->counted)"
    assert source.count(anchor) == 1
    patch = tmp_path / "warn_end.c"
    patch.write_text(source.replace(anchor, "        bool wake = false;\n\n        WARN_ON(1);\n"
                                            "        if (!w->counted)"))
    return patch


def test_a_warn_on_in_write_end_fails_explore_and_race(tmp_path):
    c = _by_name(check_patch(_with_warn_on_in_write_end(tmp_path), seconds=0.5, checks=["explore", "race"]))
    assert not c["explore"].passed and "made a kernel report" in c["explore"].detail
    assert not c["race"].passed and c["race"].figure == "WARN_ON" and "warning" in c["race"].detail


def test_a_process_the_patch_forked_neither_hangs_the_check_nor_fails_it():
    # the grandchild sleeps 60 s holding the child's stdout and stderr; 30 s is the test's wall bound
    t0 = time.monotonic()
    c = _by_name(check_patch(BAD / "forker.c", checks=["memory"], timeout=20.0))["memory"]
    assert c.passed, c.detail
    assert time.monotonic() - t0 < 30


def test_a_child_killed_by_a_real_time_signal_fails_naming_its_number():
    c = _by_name(check_patch(BAD / "rt_signal.c", checks=["memory"]))["memory"]
    assert not c.passed
    assert c.detail.startswith("FAILED: killed by signal ") and "in write_start(0, 1 TiB)" in c.detail
    proc = run_pybcache("check-patch", str(BAD / "rt_signal.c"), "--json", "--seconds", "0.1")
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_completion_thread_that_hangs_fails_balance_as_hung_in_write_end_not_at_the_wall_bound():
    c = _by_name(check_patch(BAD / "end_hangs.c", seconds=0.5, checks=["balance"]))["balance"]
    assert not c.passed and c.figure == "hung"
    assert c.detail.startswith("FAILED: hung in write_end(")
    assert "did not finish within hung_timeout" in c.detail and "wall bound" not in c.detail


def test_explore_fails_an_allocation_failure_past_the_sixteenth():
    c = _by_name(check_patch(BAD / "deep_alloc.c", checks=["explore"], fail_alloc="all"))["explore"]
    assert not c.passed
    assert "fault_at=17" in c.detail and "violate the oracle" in c.detail


def test_explore_that_cannot_finish_its_sweep_fails_as_incomplete(monkeypatch):
    from pybcache.bcache.kpatch.load import load_patch
    ctx = type("Ctx", (), {"patch": load_patch(BAD / "deep_alloc.c")})()
    monkeypatch.setattr(cpchk, "EXPLORE_BUDGET_S", 0.0)
    with pytest.raises(cpctx._Stop, match="not finished") as e:
        cpchk._check_explore(ctx)
    assert e.value.figure == "incomplete"


def test_a_patch_that_waits_at_a_lower_counter_maximum_passes_overflow(tmp_path):
    source = (EXAMPLES / "v3_proposal.c").read_text()
    assert source.count("== U16_MAX") == 3
    patch = tmp_path / "u8max_wait.c"
    patch.write_text(source.replace("== U16_MAX", "== 255"))
    c = _by_name(check_patch(patch, checks=["overflow"]))["overflow"]
    assert c.passed, c.detail
    assert c.figure == "waits at 255 in flight, 0 lost"


class _DescheduledOnce:
    """A patch tracker whose 10th start stalls, as a submitter descheduled inside a start would, until the
    completion thread ends a write: it looks like a patch waiting at 9 in flight, and it is not one."""

    def __init__(self, tracker):
        self.t, self.calls, self.ended = tracker, 0, threading.Event()

    def start(self, off, length):
        self.calls += 1
        if self.calls == 10:
            assert self.ended.wait(30), "the completion thread never took the stall for a wait"
        return self.t.start(off, length)

    def end(self, off, length):
        self.t.end(off, length)
        self.ended.set()

    def is_active(self, off, length):
        return self.t.is_active(off, length)


def test_overflow_retracts_a_maximum_taken_from_a_stall_and_still_finds_the_u16_wrap(monkeypatch):
    from pybcache.bcache.kpatch.load import load_patch
    monkeypatch.setattr(cpchk, "OVERFLOW_WAIT_S", 0.1)
    t = _DescheduledOnce(load_patch(EXAMPLES / "v2_posted.c").tracker(1 << 30, hung_timeout=5))
    st = cpchk._overflow_run(None, t, cpctx.OVERFLOW_WRITES, judge=False)
    assert st["lost"] is not None, "the stall hid v2's u16 wrap"
    s, e, _ = st["lost"]
    assert (s - e) % (1 << 16) == 0
    assert st.get("retracted", 0) >= 1 and st["level"] is None


def test_a_patch_that_clamps_at_a_lower_counter_maximum_still_fails_overflow(tmp_path, mutants):
    patch = tmp_path / "u8_clamp.c"
    patch.write_text(mutants["clamp-not-wait"].read_text().replace("== U16_MAX", "== 255"))
    c = _by_name(check_patch(patch, checks=["overflow"]))["overflow"]
    assert not c.passed and c.figure == "count lost"


def test_a_relative_cache_dir_works(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYBCACHE_CACHE_DIR", "relative-cache")
    c = _by_name(check_patch(EXAMPLES / "v3_proposal.c", checks=["memory"]))["memory"]
    assert c.passed, c.detail
    assert any((tmp_path / "relative-cache" / "kpatch").glob("v3_proposal-plain-*.so"))


def test_a_compile_that_never_ends_is_killed_as_a_compile_error_and_leaves_no_build_folder(tmp_path, monkeypatch):
    import pybcache.bcache.kpatch.load as kp
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    patch = tmp_path / "inc_fifo.c"
    patch.write_text(f'#include "{fifo}"\n')
    cache = tmp_path / "cache"
    monkeypatch.setenv("PYBCACHE_CACHE_DIR", str(cache))
    monkeypatch.setattr(kp, "COMPILE_TIMEOUT", 2.0)
    with pytest.raises(kp.PatchCompileError, match="did not finish within 2 s"):
        check_patch(patch, checks=["memory"])
    assert list((cache / "kpatch").glob(".build-*")) == []


def test_a_stale_build_folder_is_removed_at_the_next_compile(tmp_path, monkeypatch):
    import pybcache.bcache.kpatch.load as kp
    cache = tmp_path / "cache"
    monkeypatch.setenv("PYBCACHE_CACHE_DIR", str(cache))
    stale, fresh = cache / "kpatch" / ".build-stale", cache / "kpatch" / ".build-fresh"
    stale.mkdir(parents=True)
    fresh.mkdir()
    old = time.time() - 2 * kp.STALE_BUILD_S
    os.utime(stale, (old, old))
    kp.compile_patch(EXAMPLES / "v3_proposal.c")
    assert not stale.exists() and fresh.exists()


def test_a_call_that_raises_clears_its_heartbeat_slot_and_is_remembered(tmp_path):
    from pybcache.bcache.kpatch.check.context import _Heartbeat, _Traced

    class Raises:
        def start(self, off, ln):
            raise TimeoutError("stuck")

    hb = _Heartbeat(str(tmp_path / "hb"))
    with pytest.raises(TimeoutError):
        _Traced(Raises(), hb).start(0, 4096)
    assert _Heartbeat.describe(bytes(hb._map)) is None
    assert hb.where() == "write_start(0, 4 KiB) [MainThread]"


def test_the_semantics_counterexample_does_not_depend_on_machine_speed(tmp_path, mutants, monkeypatch):
    # in process: a clock that runs 100 s per reading (a very slow machine) must not cut the shrink short
    import types

    import pybcache.bcache.kpatch.check.runner as cp
    from pybcache.bcache.kpatch.load import compile_patch
    library, _ = compile_patch(mutants["read-first-chunk-only"])
    ctx = cpctx._Context(str(mutants["read-first-chunk-only"]), str(library), 1.0,
                         cpctx._Heartbeat(str(tmp_path / "hb")))
    clock = iter(range(0, 10**9, 100))
    monkeypatch.setattr(cp, "time", types.SimpleNamespace(monotonic=lambda: float(next(clock)),
                                                          perf_counter=time.perf_counter, sleep=time.sleep))
    with pytest.raises(cpctx._Stop) as e:
        cpsem._check_semantics(ctx)
    assert "shrunk from 61 to 2 operations" in e.value.detail
    assert len(e.value.counterexample) == 2


def test_tsan_is_refused_with_one_clear_error_when_another_sanitizer_is_preloaded(monkeypatch):
    monkeypatch.setenv("LD_PRELOAD", "/usr/lib/x86_64-linux-gnu/libasan.so.8")
    with pytest.raises(PatchLoadError, match=r"^tsan: another sanitizer's runtime is preloaded"):
        check_patch(EXAMPLES / "v3_proposal.c", tsan=True, checks=["memory"])
