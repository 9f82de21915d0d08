"""``pybcache check-patch`` (``pybcache/commands/check_patch.py``): counterexample lines, what it prints and its exit
status. The experiment it starts is stood in for (no subprocess, no C model): these tests state what the command
hands on, prints, writes as JSON and returns for given arguments and results."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from pybcache import commands
from pybcache.commands import check_patch
from pybcache._console import format_table


def test_counterexample_lines_are_numbered_from_1_indented_and_aligned():
    lines = [f"step {i}" for i in range(10)]
    out = check_patch._counterexample_lines(lines)
    assert out[0] == "     1. step 0"
    assert out[9] == "    10. step 9"
    assert check_patch._counterexample_lines([]) == []


def _check(name, passed, counterexample=()):
    return SimpleNamespace(name=name, passed=passed, figure=f"{name} fig", wall_s=1.25, detail=f"{name} detail",
                           counterexample=list(counterexample))


def _patch_result(checks, memory_rows=(), tsan=False, warnings=(), end_bio="consumed"):
    return SimpleNamespace(patch="fix.c", name="v3", tsan=tsan, checks=checks, wall_s=12.34, warnings=list(warnings),
                           end_bio=end_bio,
                           fail_alloc="can-fail",
                           memory=list(memory_rows), passed=all(c.passed for c in checks),
                           to_json=lambda: {"passed": all(c.passed for c in checks), "name": "v3"})


def _fake_check_patch(monkeypatch, result=None, exc=None):
    import pybcache.bcache.kpatch.check.runner

    seen = {}

    def fake(path, *, seconds, tsan, progress, checks, include_dirs, end_bio="consumed", asan=False,
             fail_alloc="can-fail"):
        seen.update(path=path, seconds=seconds, tsan=tsan)
        assert end_bio == "consumed" and asan is False
        assert fail_alloc == "can-fail"
        assert checks == ["semantics", "explore", "race", "overflow", "balance", "context", "memory"]
        assert include_dirs == []
        progress("semantics", 1, 7)
        if exc is not None:
            raise exc
        return result
    monkeypatch.setattr(pybcache.bcache.kpatch.check.runner, "check_patch", fake)
    return seen


def _cp_args(json=False, tsan=False):
    return SimpleNamespace(file="fix.c", seconds=2.0, tsan=tsan, json=json, include_dirs=[], checks=None,
                           end_bio="consumed", asan=False, fail_alloc="can-fail")


def test_check_patch_prints_each_check_and_exits_0_when_all_pass(monkeypatch, capsys):
    seen = _fake_check_patch(monkeypatch, _patch_result([_check("semantics", True, ["note one"]),
                                                         _check("race", True)]))
    assert check_patch.run(_cp_args(tsan=True)) == 0
    assert seen == {"path": "fix.c", "seconds": 2.0, "tsan": True}
    assert capsys.readouterr().out == (
        "check-patch fix.c (v3): 2 of 2 checks passed, 12.3 s; compiler warnings (-Wall -Wextra): 0; allocation "
        "failures injected into only allocations the kernel can fail (--fail-alloc can-fail)\n"
        + format_table(["check", "result", "figure", "s"], [["semantics", "passed", "semantics fig", "1.2"],
                                                            ["race", "passed", "race fig", "1.2"]])
        + "\n\nsemantics: semantics detail\n  notes:\n     1. note one\n\nrace: race detail\n")


def test_check_patch_shows_a_failed_checks_counterexample_and_the_memory_table_and_exits_1(monkeypatch, capsys):
    mem = [{"size_bytes": 1 << 40, "idle_bytes": 256, "peak_bytes": 1024, "posted": {"page": ["256 B", "64 KB"]}},
           {"size_bytes": 10 << 40, "idle_bytes": 2560, "peak_bytes": 2048, "posted": {"atomic": ["1 KB", "2 KB"]}}]
    _fake_check_patch(monkeypatch, _patch_result([_check("semantics", True), _check("race", False, ["a", "b"])],
                                                 mem, tsan=True))
    assert check_patch.run(_cp_args()) == 1
    assert capsys.readouterr().out == (
        "check-patch fix.c (v3) under ThreadSanitizer: 1 of 2 checks passed, 12.3 s; compiler warnings "
        "(-Wall -Wextra): 0; allocation failures injected into only allocations the kernel can fail "
        "(--fail-alloc can-fail)\n"
        + format_table(["check", "result", "figure", "s"], [["semantics", "passed", "semantics fig", "1.2"],
                                                            ["race", "FAILED", "race fig", "1.2"]])
        + "\n\nsemantics: semantics detail\n\nrace: race detail\n  counterexample:\n     1. a\n     2. b\n"
        + "\nmemory (bytes the patch allocated, beside the v2 cover letter's table)\n"
        + format_table(["backing size", "idle", "peak", "posted page lock idle / peak", "posted atomic idle / peak"],
                       [["1T", "256 B", "1 KiB", "256 B / 64 KB", "- / -"],
                        ["10T", "2.5 KiB", "2 KiB", "- / -", "1 KB / 2 KB"]]) + "\n")


@pytest.mark.parametrize("passed, status", [(True, 0), (False, 1)])
def test_check_patch_json_is_the_results_json_and_the_status_its_verdict(monkeypatch, capsys, passed, status):
    import json
    _fake_check_patch(monkeypatch, _patch_result([_check("semantics", passed)]))
    assert check_patch.run(_cp_args(json=True)) == status
    assert json.loads(capsys.readouterr().out) == {"passed": passed, "name": "v3"}


def test_a_patch_that_does_not_compile_is_the_compilers_lines_on_stderr_and_status_2(monkeypatch, capsys):
    from pybcache.bcache.kpatch.load import PatchCompileError
    _fake_check_patch(monkeypatch, exc=PatchCompileError("fix.c: the C compiler failed", "fix.c:1: error: x"))
    assert check_patch.run(_cp_args()) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err == "pybcache check-patch: error: fix.c: the C compiler failed\nfix.c:1: error: x\n"


@pytest.mark.parametrize("exc_type", ["PatchLoadError", "ValueError"])
def test_a_patch_that_cannot_be_loaded_or_a_bad_value_is_a_usage_error(monkeypatch, exc_type):
    import pybcache.bcache.kpatch.check.runner
    exc = getattr(pybcache.bcache.kpatch.check.runner, exc_type, ValueError)("fix.c: no PYBCACHE_PATCH")
    _fake_check_patch(monkeypatch, exc=exc)
    with pytest.raises(commands.UsageError) as err:
        check_patch.run(_cp_args())
    assert str(err.value) == "fix.c: no PYBCACHE_PATCH"


@pytest.mark.parametrize("as_json", [False, True])
def test_check_patch_names_its_bar_after_the_file_counts_checks_and_keeps_quiet_with_json(monkeypatch, capsys,
                                                                                         as_json):
    import contextlib
    bar = SimpleNamespace(n=0, postfix=None)
    bar.set_postfix_str = lambda text: setattr(bar, "postfix", text)
    seen = []

    @contextlib.contextmanager
    def status_bar(desc, *, total=None, quiet=False):
        seen.append((desc, total, quiet))
        yield bar
    monkeypatch.setattr(check_patch, "status_bar", status_bar)
    _fake_check_patch(monkeypatch, _patch_result([_check("semantics", True)]))   # reports ("semantics", 1, 7)
    check_patch.run(_cp_args(json=as_json))
    assert seen == [("check-patch fix.c", 7, as_json)]
    assert (bar.n, bar.postfix) == (1, "semantics")


def test_a_diff_is_refused_in_one_line_pointing_at_the_kernel_command(tmp_path, capsys):
    diff = tmp_path / "fix.diff"
    diff.write_text("--- a/drivers/md/bcache/request.c\n+++ b/drivers/md/bcache/request.c\n@@ -1 +1 @@\n-x\n+y\n")
    assert commands.main(["check-patch", str(diff)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"pybcache kernel race --patch {diff}" in err and "a diff" in err
    named_c = tmp_path / "fix.c"                 # by its content too, whatever its name
    named_c.write_text("diff --git a/x b/x\n--- a/x\n+++ b/x\n")
    assert commands.main(["check-patch", str(named_c)]) == 2
    assert "is a diff against the kernel tree" in capsys.readouterr().err


def test_an_unknown_check_name_is_refused_naming_the_allowed_ones(capsys):
    assert commands.main(["check-patch", "p.c", "--check", "semantics", "--check", "nope"]) == 2
    err = capsys.readouterr().err
    assert "--check: unknown check 'nope' (allowed: semantics, explore, race, overflow, balance, context, memory)" \
        in err


def test_checks_and_include_folders_reach_the_battery_in_the_batterys_order(monkeypatch, tmp_path, capsys):
    seen = {}

    def fake(path, **kw):
        seen.update(kw)
        return SimpleNamespace(passed=True, to_json=lambda: {"warnings": []})
    import pybcache.bcache.kpatch.check.runner as runner
    monkeypatch.setattr(runner, "check_patch", fake)
    (tmp_path / "inc").mkdir()
    assert commands.main(["check-patch", "p.c", "--check", "memory", "--check", "semantics", "-I",
                          str(tmp_path / "inc"), "--json"]) == 0
    assert seen["checks"] == ["semantics", "memory"] and seen["include_dirs"] == [str(tmp_path / "inc")]
    assert seen["fail_alloc"] == "can-fail"
    assert commands.main(["check-patch", "p.c", "--fail-alloc", "all", "--json"]) == 0
    assert seen["fail_alloc"] == "all"


def test_check_patch_states_the_compilers_warnings_as_a_figure_and_lists_them(monkeypatch, capsys):
    result = _patch_result([_check("semantics", True)], warnings=["fix.c:3:5: warning: unused variable 'x'"])
    _fake_check_patch(monkeypatch, result=result)
    assert check_patch.run(_cp_args()) == 0
    out = capsys.readouterr().out.splitlines()
    assert "; compiler warnings (-Wall -Wextra): 1; " in out[0]
    assert out[1] == "  fix.c:3:5: warning: unused variable 'x'"
