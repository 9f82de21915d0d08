"""load_patch: compiling, caching, compile errors, argument checks, the shared injector, crashes and hangs."""
from __future__ import annotations

import os
import shutil
import signal
import textwrap

import pytest
from helpers.clirun import run_python

import pybcache
from pybcache.bcache.kpatch.load import PatchCompileError, compile_patch
from helpers.kpatch_util import BAD, EXAMPLES

pytestmark = [pytest.mark.native, pytest.mark.e2e]

GiB = pybcache.GiB


@pytest.fixture(autouse=True)
def cache_dir(tmp_path_factory, monkeypatch):
    d = tmp_path_factory.getbasetemp() / "kpatch-cache"
    monkeypatch.setenv("PYBCACHE_CACHE_DIR", str(d))
    return d


def test_get_include_holds_the_shim_and_every_forwarding_header():
    inc = pybcache.get_include()
    assert os.path.isfile(os.path.join(inc, "pybcache", "kpatch.h"))
    for name in ("types", "kernel", "slab", "spinlock", "atomic", "errno", "wait", "bio", "printk", "compiler",
                 "bitops", "log2", "math", "rcupdate"):
        with open(os.path.join(inc, "linux", f"{name}.h")) as f:
            assert "#include <pybcache/kpatch.h>" in f.read()


def test_a_second_load_reuses_the_cached_module_and_a_changed_source_does_not(tmp_path):
    src = tmp_path / "p.c"
    shutil.copy(EXAMPLES / "v2_posted.c", src)
    first, _ = compile_patch(src)
    again, warnings = compile_patch(src)
    assert again == first and warnings == ""
    src.write_text(src.read_text() + "\n/* changed */\n")
    changed, _ = compile_patch(src)
    assert changed != first and changed.exists()


def test_a_compile_error_is_a_value_error_with_the_compilers_first_lines():
    with pytest.raises(ValueError) as e:
        pybcache.load_patch(BAD / "syntax_error.c")
    assert isinstance(e.value, PatchCompileError)
    assert "syntax_error.c:8" in e.value.output and "error" in e.value.output
    assert len(e.value.output.splitlines()) <= 21


def test_a_patch_without_pybcache_patch_fails_to_link_and_says_why():
    with pytest.raises(PatchCompileError, match=r"PYBCACHE_PATCH\(ops\)"):
        pybcache.load_patch(BAD / "no_ops.c")


def test_a_missing_compiler_is_a_compile_error(monkeypatch, tmp_path):
    monkeypatch.setenv("CC", "/nonexistent/cc")
    monkeypatch.setenv("PYBCACHE_CACHE_DIR", str(tmp_path))
    with pytest.raises(PatchCompileError, match="no C compiler"):
        pybcache.load_patch(EXAMPLES / "v2_posted.c")


@pytest.mark.parametrize("path, exc", [(42, TypeError), ("/nonexistent/patch.c", ValueError)])
def test_bad_paths_are_refused(path, exc):
    with pytest.raises(exc, match="path"):
        pybcache.load_patch(path)


def test_an_unknown_flavour_is_refused():
    with pytest.raises(ValueError, match="flavour must be one of"):
        compile_patch(EXAMPLES / "v2_posted.c", flavour="msan")


def test_the_tsan_flavour_compiles_to_a_separate_module():
    plain, _ = compile_patch(EXAMPLES / "v3_atomic.c")
    tsan, _ = compile_patch(EXAMPLES / "v3_atomic.c", flavour="tsan")
    assert tsan != plain and tsan.exists()


BAD_CALLS = [
    ("start", (-1, 4096)), ("start", (0, 0)), ("start", (0, -5)), ("start", (GiB, 1)), ("start", (GiB - 10, 11)),
    ("end", (1.5, 4096)), ("is_active", (0, "4096")), ("is_active", (True, 1)),
]


@pytest.mark.parametrize("method, args", BAD_CALLS)
def test_bad_ranges_raise_what_bypass_write_tracker_raises(method, args):
    ours = pybcache.load_patch(EXAMPLES / "v3_proposal.c").tracker(GiB)
    reference = pybcache.BypassWriteTracker(GiB)
    with pytest.raises((TypeError, ValueError)) as expected:
        getattr(reference, method)(*args)
    with pytest.raises(type(expected.value)) as got:
        getattr(ours, method)(*args)
    assert str(got.value) == str(expected.value)
    assert ours.stats()["starts"] == ours.stats()["ends"] == ours.stats()["checks"] == 0


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(device_size=0), ValueError, "device_size"), (dict(device_size=1.0), TypeError, "device_size"),
    (dict(device_size=GiB, fault=0.5), TypeError, "fault"),
    (dict(device_size=GiB, hung_timeout=0), ValueError, "hung_timeout"),
])
def test_bad_tracker_arguments_name_the_argument(kwargs, exc, match):
    p = pybcache.load_patch(EXAMPLES / "v3_proposal.c")
    size = kwargs.pop("device_size")
    with pytest.raises(exc, match=match):
        p.tracker(size, **kwargs)


def test_fault_injection_is_shared_with_the_callers_injector():
    fault = pybcache.FaultInjection(probability=1.0, times=2)
    t = pybcache.load_patch(EXAMPLES / "v2_posted.c").tracker(GiB, fault=fault)
    assert t.start(0, 4096) is False and t.start(0, 4096) is False and t.start(0, 4096) is True
    assert fault.injected == 2 == t.stats()["alloc_failures"]


def _run_child(code):
    env = dict(os.environ)
    if "ASAN_OPTIONS" in env:
        # Under `make sanitize-python` (libasan preloaded): the child crashes on purpose, and the test is
        # about the signal the lab sees, so ASan must leave SIGSEGV to the kernel instead of reporting it.
        env["ASAN_OPTIONS"] += ":handle_segv=0"
    return run_python(textwrap.dedent(code), env=env)


@pytest.mark.parametrize("offset, sig, stderr", [(0, signal.SIGABRT, "kernel BUG at"), (4096, signal.SIGSEGV, "")])
def test_a_crashing_patch_kills_its_child_process_with_a_named_signal(offset, sig, stderr):
    proc = _run_child(f"""
        import pybcache
        t = pybcache.load_patch({str(BAD / 'crasher.c')!r}).tracker(pybcache.GiB)
        t.start({offset}, 4096)
        print("survived")
    """)
    assert proc.returncode == -sig
    assert "survived" not in proc.stdout
    assert stderr in proc.stderr
    if stderr:
        assert "crasher.c:" in proc.stderr


def test_a_wait_that_never_ends_is_abandoned_after_the_hung_bound_and_breaks_the_tracker():
    t = pybcache.load_patch(BAD / "hangs.c").tracker(GiB, hung_timeout=0.3)
    with pytest.raises(TimeoutError, match="hung_timeout=0.3 s.*INFO: task blocked.*wait_event at .*hangs.c"):
        t.start(0, 4096)
    with pytest.raises(RuntimeError, match="broken"):
        t.is_active(0, 4096)
    assert [r["kind"] for r in t.kernel_reports()] == ["hung_task"]


def test_a_closed_tracker_refuses_operations_and_close_reports_no_leak():
    t = pybcache.load_patch(EXAMPLES / "v3_proposal.c").tracker(GiB)
    t.start(0, 4096)
    t.end(0, 4096)
    assert t.close() == {"leaked_bytes": 0, "leaked_allocations": 0}
    assert t.closed
    with pytest.raises(RuntimeError, match="closed"):
        t.start(0, 4096)


def test_a_patch_is_recompiled_when_a_tree_file_it_includes_changes(tmp_path):
    # the wrong pass of a cache keyed on the named file alone: the tree file broke, the old build still loaded
    tree = tmp_path / "tree.h"
    tree.write_text("#define TREE_OK 1\n")
    patch = tmp_path / "with_tree.c"
    patch.write_text('#include "tree.h"\n' + (EXAMPLES / "v3_proposal.c").read_text())
    assert pybcache.load_patch(patch).name
    tree.write_text("#error the tree file broke\n")
    with pytest.raises(PatchCompileError, match="the tree file broke"):
        pybcache.load_patch(patch)
    tree.write_text("#define TREE_OK 1\n")
    assert pybcache.load_patch(patch).name         # and the first build is good again


def test_an_include_folder_reaches_the_patchs_angle_includes(tmp_path):
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "mytree.h").write_text("#define MY_TREE 1\n")
    patch = tmp_path / "angle.c"
    patch.write_text("#include <mytree.h>\n" + (EXAMPLES / "v3_proposal.c").read_text())
    with pytest.raises(PatchCompileError, match="mytree.h"):
        pybcache.load_patch(patch)
    p = pybcache.load_patch(patch, include_dirs=[inc])
    assert p.include_dirs == (str(inc),) and p.warnings == ""


def test_the_compilers_warnings_on_the_patch_are_kept_with_a_cached_build(tmp_path):
    patch = tmp_path / "warns.c"
    patch.write_text("static int unused_but_set(void) { int x = 1; x = 2; return 0; }\n"
                     "int f(int a, int b) { return a; }\n" + (EXAMPLES / "v3_proposal.c").read_text())
    first = compile_patch(patch)[1]
    assert "unused parameter" in first             # -Wextra
    assert compile_patch(patch)[1] == first
