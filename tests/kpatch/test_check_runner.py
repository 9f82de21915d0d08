"""check-patch's parent side (``pybcache/bcache/kpatch/check/runner.py``): a check's result JSON and the battery's,
each check's wall bound, the name and tail a dead child leaves.
No compiled patch, no child process: the parts that are pure, on inputs chosen here."""
from __future__ import annotations

from pybcache.bcache.kpatch.check import runner as cp


KiB = 1024


def test_a_checks_json_has_every_field_and_its_wall_time_rounded_to_milliseconds():
    r = cp.CheckResult("semantics", False, "missed bypass", "FAILED: x", ["write A starts"], 1.23456)
    assert r.to_json() == {"name": "semantics", "passed": False, "figure": "missed bypass", "detail": "FAILED: x",
                           "counterexample": ["write A starts"], "wall_s": 1.235, "log": None}
    assert cp.CheckResult("race", True, "0", "ok").to_json()["counterexample"] is None


def test_the_battery_passes_only_if_every_check_passed_and_its_json_says_so():
    ok, bad = cp.CheckResult("a", True, "1", "d"), cp.CheckResult("b", False, "2", "e", wall_s=0.5)
    assert cp.CheckPatchResult("p.c", "n", [ok, ok], []).passed is True
    assert cp.CheckPatchResult("p.c", "n", [ok, bad], []).passed is False
    assert cp.CheckPatchResult("p.c", "n", [bad, ok], []).passed is False
    r = cp.CheckPatchResult("p.c", "v3", [ok, bad], [{"device": 1}], tsan=True, seconds=3.0, wall_s=9.87654)
    assert r.to_json() == {"patch": "p.c", "name": "v3", "passed": False, "checks": [ok.to_json(), bad.to_json()],
                           "memory": [{"device": 1}], "tsan": True, "seconds": 3.0, "wall_s": 9.877,
                           "warnings": [], "end_bio": "consumed", "asan": False, "fail_alloc": "can-fail"}
    plain = cp.CheckPatchResult("p.c", None, [ok], []).to_json()
    assert plain["passed"] is True and plain["tsan"] is False and plain["seconds"] == 2.0 and plain["wall_s"] == 0


def test_each_checks_wall_bound_grows_with_its_seconds_and_five_fold_under_tsan():
    assert cp._wall_bound("balance", 2.0, False) == 42.0
    assert cp._wall_bound("race", 3.0, False) == 40 + 2 * 3.0 * 2    # two fault probabilities
    assert cp._wall_bound("explore", 2.0, False) == 600.0
    for check in ("semantics", "overflow", "context", "memory"):
        assert cp._wall_bound(check, 7.0, False) == 40.0
    assert cp._wall_bound("balance", 3.0, True) == 215.0
    assert cp._wall_bound("memory", 3.0, True) == 200.0


def test_a_signal_is_named_by_its_name_else_by_its_number():
    assert cp._signal_name(11) == "SIGSEGV"
    assert cp._signal_name(6) == "SIGABRT"
    assert cp._signal_name(37) == "signal 37"


def test_a_dead_childs_tail_is_its_last_six_lines_without_json():
    lines = [f"line {i}" for i in range(10)] + ['{"passed": true}']
    assert cp._tail(lines) == [f"line {i}" for i in range(4, 10)]
    assert cp._tail(["only"]) == ["only"]
    assert cp._tail([]) is None
    assert cp._tail(['{"a": 1}']) is None


def test_a_dead_childs_tail_starts_at_the_kernel_bug_line_however_much_followed_it():
    lines = ["before"] + ["kernel BUG at pyb.c:12!"] + [f"after {i}" for i in range(9)]
    assert cp._tail(lines) == ["kernel BUG at pyb.c:12!"] + [f"after {i}" for i in range(5)]
    near_end = ["a", "b", "c", "d", "e", "f", "g", "kernel BUG at x.c:1!", "h"]
    assert cp._tail(near_end) == ["kernel BUG at x.c:1!", "h"]


def test_the_tsan_report_is_the_first_reports_first_eight_lines_stripped():
    lines = ["noise", "  WARNING: ThreadSanitizer: data race (pid=1)  "] + [f"  frame {i}" for i in range(9)]
    lines += ["WARNING: ThreadSanitizer: second"]
    assert cp._tsan_report(lines) == ["WARNING: ThreadSanitizer: data race (pid=1)"] + [f"frame {i}" for i in range(7)]
    assert cp._tsan_report(["WARNING: ThreadSanitizer: x"]) == ["WARNING: ThreadSanitizer: x"]
    assert cp._tsan_report(["ThreadSanitizer", "WARNING: AddressSanitizer"]) is None


def test_a_missing_heartbeat_file_reads_as_nothing(tmp_path):
    assert cp._read_heartbeat(tmp_path / "absent") is None
