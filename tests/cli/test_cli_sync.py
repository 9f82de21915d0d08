"""``--sync VARIANT|PATCH.c`` of the cached-device commands (``pybcache.commands._sync``), function by function:
what is taken as a variant or a patch, how a patch that does not compile or cannot be read becomes one usage
line, the lab-only options refused with a patch, and how outputs name the tracker and a patch's reports. (The
commands run with real patches in tests/test_check_patch.py and tests/test_kpatch_*.py.)"""
from __future__ import annotations

import argparse
from types import SimpleNamespace

import pytest

from pybcache.commands._sync import LAB_ONLY, load_sync, refuse_lab_options, reports_text, sync_arg, sync_label
from pybcache.commands._util import UsageError

SYNCS = ("global", "page", "atomic")


def test_sync_arg_takes_a_variant_a_c_file_name_or_an_existing_file(tmp_path):
    parse = sync_arg(SYNCS)
    existing = tmp_path / "patch.txt"
    existing.write_text("")
    assert parse("page") == "page"
    assert parse("missing.c") == "missing.c"  # a .c name is a patch even before it exists: load_sync says why
    assert parse(str(existing)) == str(existing)


@pytest.mark.parametrize("text", ["bogus", "Page", "", "patch.C", "patch.c.txt"])
def test_sync_arg_refuses_anything_else_naming_the_choices(text):
    with pytest.raises(argparse.ArgumentTypeError) as err:
        sync_arg(SYNCS)(text)
    assert str(err.value) == (f"invalid choice: {text!r} (choose from global, page, atomic, "
                              "or a kernel patch's .c file)")


def test_load_sync_returns_a_variant_as_it_is():
    assert load_sync("atomic", SYNCS) == "atomic"


def test_a_patch_that_does_not_compile_is_one_usage_line_with_the_compilers_first_error(tmp_path):
    src = tmp_path / "broken.c"
    src.write_text("int x = ;\n")
    with pytest.raises(UsageError) as err:
        load_sync(str(src), SYNCS)
    text = str(err.value)
    assert text.startswith(f"--sync {src}: {src}: the C compiler failed: ")
    # (the quotes around the token depend on the locale: not compared)
    assert f": {src}:1:9: error: expected expression before " in text and text.endswith(" token")
    assert "\n" not in text


def test_a_patch_that_cannot_be_read_is_one_usage_line_naming_the_file(tmp_path):
    missing = tmp_path / "missing.c"
    with pytest.raises(UsageError) as err:
        load_sync(str(missing), SYNCS)
    assert str(err.value) == (f"--sync {missing}: path: cannot read the patch '{missing}': "
                              "No such file or directory")


def test_only_the_first_given_lab_option_is_refused_with_a_patch():
    patch = SimpleNamespace(name="v3")
    with pytest.raises(UsageError) as err:
        refuse_lab_options(patch, {"--chunk-size": False, "--alloc-failure": True, "--overflow": True})
    assert str(err.value) == f"--alloc-failure: {LAB_ONLY} (--sync is the patch 'v3')"
    refuse_lab_options(patch, {"--chunk-size": False})  # none given: nothing refused


@pytest.mark.parametrize("sync", [None, "page"])
def test_lab_options_are_free_without_a_patch(sync):
    refuse_lab_options(sync, {"--chunk-size": True, "--alloc-failure": True})


def test_outputs_name_a_variant_or_a_patch_with_its_path():
    assert sync_label("page") == "page"
    assert sync_label(SimpleNamespace(name="v3", path="/p/v3.c")) == "v3 (/p/v3.c)"


def test_a_patchs_reports_are_one_line_sorted_by_kind():
    assert reports_text({}) == "kernel reports: none"
    assert reports_text({"warning": 2, "might_sleep": 1}) == "kernel reports: might_sleep x1, warning x2"


@pytest.mark.parametrize("output, line", [
    # the error on the compiler's first line
    ("p.c: the C compiler failed\np.c:2:5: error: unknown type name 'u17'\np.c:9:1: error: later",
     "--sync p.c: p.c: the C compiler failed: p.c:2:5: error: unknown type name 'u17'"),
    # a fatal error after the compiler's other lines (an include's note)
    ("p.c: the C compiler failed\nIn file included from p.c:1:\nnote: here\nh.h:3: fatal error: x.h: No such file",
     "--sync p.c: p.c: the C compiler failed: h.h:3: fatal error: x.h: No such file"),
    # no error line: the compiler's first line
    ("p.c: the C compiler failed\ncc1: out of memory", "--sync p.c: p.c: the C compiler failed: cc1: out of memory"),
    # no compiler output at all: the message alone
    ("p.c: the C compiler failed", "--sync p.c: p.c: the C compiler failed"),
])
def test_a_compile_failure_names_the_compilers_first_error_line_else_its_first_line(monkeypatch, output, line):
    import pybcache.bcache.kpatch.load as kpatch

    def failing(path):
        raise kpatch.PatchCompileError(output)
    monkeypatch.setattr(kpatch, "load_patch", failing)
    with pytest.raises(UsageError) as err:
        load_sync("p.c", SYNCS)
    assert str(err.value) == line
