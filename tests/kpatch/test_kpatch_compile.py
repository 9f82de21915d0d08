"""The patch loader (``pybcache/bcache/kpatch/load.py``): the cache key, the compiler and the cache folder, running
the compiler, stale build folders, ``compile_patch`` with a stand-in compiler, ``load_patch`` and the reports in
the kernel's words. The compiler is a stand-in ``Popen`` or ``_run`` (two tests run the real one); the cache and
shim folders are temporary ones; clocks are fake."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

import pybcache
from pybcache.bcache.kpatch import load as kpatch
from pybcache.bcache.kpatch.load import PatchCompileError


ARGS = (Path("/p/a.c"), ["cc"], ("-O2", "-g"), ("/inc",))


def test_the_command_key_is_24_hex_digits_and_the_same_for_the_same_command():
    key = kpatch._key(*ARGS)
    assert len(key) == 24 and int(key, 16) >= 0
    assert kpatch._key(*ARGS) == key


@pytest.mark.parametrize("index, other", [
    (0, Path("/p/b.c")), (1, ["gcc"]), (2, ("-O2",)), (3, ("/inc", "/more")),
])
def test_the_command_key_changes_with_the_path_the_compiler_the_flags_and_the_include_folders(index, other):
    args = list(ARGS)
    args[index] = other
    assert kpatch._key(*args) != kpatch._key(*ARGS)


def test_the_command_key_tells_the_compiler_and_flag_words_apart_from_one_word_holding_a_space():
    # JSON lists: cc with a flag is not a program named "cc -m64"
    assert kpatch._key(Path("/a.c"), ["cc", "-m64"], ()) != kpatch._key(Path("/a.c"), ["cc -m64"], ())
    assert kpatch._key(Path("/a.c"), ["cc"], ("-O2", "-g")) != kpatch._key(Path("/a.c"), ["cc"], ("-O2 -g",))
    assert kpatch._key(Path("/a.c"), ["cc", "-m64"], ()) == kpatch._key(Path("/a.c"), ("cc", "-m64"), ())


def test_a_dependency_list_is_read_as_make_writes_it():
    text = "patch.o: /src/p.c /inc/a\\ b.h \\\n /usr/include/stdio.h /src/p.c\n"
    assert kpatch._read_deps(text) == ["/src/p.c", "/inc/a b.h", "/usr/include/stdio.h"]
    assert kpatch._read_deps("") == []


@pytest.mark.parametrize("cc, words", [
    (None, ["cc"]), ("", ["cc"]), ("gcc", ["gcc"]), ("ccache gcc -m64", ["ccache", "gcc", "-m64"]),
    ("'/opt/my cc/gcc' -DX=\"a b\"", ["/opt/my cc/gcc", "-DX=a b"]),
])
def test_the_compiler_is_cc_split_as_a_shell_would_else_cc(monkeypatch, cc, words):
    if cc is None:
        monkeypatch.delenv("CC", raising=False)
    else:
        monkeypatch.setenv("CC", cc)
    assert kpatch._compiler() == words


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    for name in ("PYBCACHE_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


@pytest.mark.parametrize("pyb, xdg, expected", [
    ("/c/pyb", "/c/xdg", "/c/pyb"),                     # PYBCACHE_CACHE_DIR first, taken as is
    ("~/mine", None, "home/mine"),                      # ... with ~ expanded
    ("rel/dir", None, "rel/dir"),                       # ... relative: from the current folder
    ("", "/c/xdg", "/c/xdg/pybcache"),                  # empty: not set
    (None, "/c/xdg", "/c/xdg/pybcache"),                # then $XDG_CACHE_HOME/pybcache
    (None, "relx", "relx/pybcache"),                    # ... relative: from the current folder
    (None, "", "home/.cache/pybcache"),                 # empty: not set
    (None, None, "home/.cache/pybcache"),               # else ~/.cache/pybcache
])
def test_the_cache_folder_is_pybcache_cache_dir_else_xdg_cache_home_else_home_cache(home, monkeypatch, pyb,
                                                                                   xdg, expected):
    if pyb is not None:
        monkeypatch.setenv("PYBCACHE_CACHE_DIR", pyb)
    if xdg is not None:
        monkeypatch.setenv("XDG_CACHE_HOME", xdg)
    got = kpatch._cache_dir()
    assert isinstance(got, Path) and got.is_absolute()
    assert got == home / expected


def test_get_include_is_the_shims_include_folder():
    from pybcache._csrc import csrc_dir
    assert pybcache.get_include() == str(csrc_dir() / "kpatch" / "include")
    assert (Path(pybcache.get_include()) / "pybcache" / "kpatch.h").is_file()


class _Popen:
    """A stand-in compiler process: ``communicate`` answers ``err`` with ``returncode``, or raises the
    exceptions queued in ``raises`` (one per call). Every instance and call is recorded on the class."""

    returncode = 0
    err = ""
    raises: list = []
    made: list = []

    def __init__(self, cmd, **kw):
        self.cmd, self.kw, self.pid, self.calls = cmd, kw, 4242, []
        _Popen.made.append(self)

    def communicate(self, timeout=None):
        self.calls.append(timeout)
        if _Popen.raises:
            raise _Popen.raises.pop(0)
        return "", _Popen.err


@pytest.fixture
def popen(monkeypatch):
    _Popen.returncode, _Popen.err, _Popen.raises, _Popen.made = 0, "", [], []
    monkeypatch.setattr(kpatch.subprocess, "Popen", _Popen)
    killed = []
    monkeypatch.setattr(kpatch.os, "killpg", lambda pid, sig: killed.append((pid, sig)))
    _Popen.killed = killed
    return _Popen


def test_a_compiler_run_that_succeeds_answers_its_warnings_from_a_session_of_its_own(popen):
    popen.err = "a.c:1: warning: unused\n"
    assert kpatch._run(["cc", "-c", "a.c"], "a.c") == "a.c:1: warning: unused\n"
    (p,) = popen.made
    assert p.cmd == ["cc", "-c", "a.c"]
    assert p.kw == dict(stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    assert p.calls == [kpatch.COMPILE_TIMEOUT] and kpatch.COMPILE_TIMEOUT == 120.0
    assert popen.killed == []


def test_a_compiler_failure_keeps_the_first_20_lines_of_its_output_and_names_what_failed(popen):
    popen.returncode = 1
    popen.err = "".join(f"line {i}\n" for i in range(1, 31))
    with pytest.raises(PatchCompileError) as e:
        kpatch._run(["cc"], "my.c (link)")
    assert isinstance(e.value, ValueError)
    assert e.value.output == "\n".join(f"line {i}" for i in range(1, 21))
    assert str(e.value) == "my.c (link): the C compiler failed\n" + e.value.output


def test_a_link_failure_for_want_of_the_ops_says_to_declare_them(popen):
    popen.returncode = 1
    popen.err = "ld: undefined reference to `pybcache_patch_ops_ptr'\n"
    with pytest.raises(PatchCompileError) as e:
        kpatch._run(["cc"], "p.c (link)")
    assert e.value.output == ("ld: undefined reference to `pybcache_patch_ops_ptr'\n"
                              "(the patch must declare its operations once with PYBCACHE_PATCH(ops))")


def test_a_failure_without_output_is_the_message_alone(popen):
    popen.returncode = 2
    with pytest.raises(PatchCompileError) as e:
        kpatch._run(["cc"], "p.c")
    assert str(e.value) == "p.c: the C compiler failed" and e.value.output == ""


def test_a_missing_compiler_is_a_compile_error_naming_it_and_cc(monkeypatch):
    def missing(cmd, **kw):
        raise FileNotFoundError(2, "No such file", cmd[0])
    monkeypatch.setattr(kpatch.subprocess, "Popen", missing)
    with pytest.raises(PatchCompileError) as e:
        kpatch._run(["/no/cc", "-c"], "p.c")
    assert str(e.value) == "no C compiler: '/no/cc' was not found (set CC)" and e.value.output == ""
    assert e.value.__suppress_context__


def test_a_compiler_past_the_time_limit_has_its_group_killed_and_is_a_compile_error(popen):
    popen.raises = [subprocess.TimeoutExpired("cc", 120.0)]
    with pytest.raises(PatchCompileError) as e:
        kpatch._run(["cc"], "p.c")
    assert str(e.value) == ("p.c: the C compiler did not finish within 120 s "
                            "(killed; an #include of a pipe or device?)")
    assert e.value.__suppress_context__
    assert popen.killed == [(4242, kpatch.signal.SIGKILL)]
    assert popen.made[0].calls == [120.0, 30]       # the kill is reaped, bounded too


def test_an_interrupted_compile_kills_the_compilers_group_and_passes_the_interrupt_on(popen):
    popen.raises = [KeyboardInterrupt()]
    with pytest.raises(KeyboardInterrupt):
        kpatch._run(["cc"], "p.c")
    assert popen.killed == [(4242, kpatch.signal.SIGKILL)]


@pytest.mark.parametrize("error", [ProcessLookupError, PermissionError])
def test_killing_a_group_that_is_gone_or_not_ours_still_reaps_the_compiler(popen, monkeypatch, error):
    def killpg(pid, sig):
        raise error()
    monkeypatch.setattr(kpatch.os, "killpg", killpg)
    proc = _Popen(["cc"])
    kpatch._kill_group(proc)
    assert proc.calls == [30]


def test_a_kill_whose_reap_times_out_is_left_there(monkeypatch):
    killed, waited = [], []
    monkeypatch.setattr(kpatch.os, "killpg", lambda pid, sig: killed.append((pid, sig)))

    class Stuck:
        pid = 4242

        def communicate(self, timeout=None):
            waited.append(timeout)
            raise subprocess.TimeoutExpired("cc", timeout)
    kpatch._kill_group(Stuck())  # returns: the TimeoutExpired is not raised to the caller
    assert killed == [(4242, kpatch.signal.SIGKILL)] and waited == [30]


def test_the_time_limit_of_a_real_compiler_run_kills_it(monkeypatch):
    monkeypatch.setattr(kpatch, "COMPILE_TIMEOUT", 0.2)
    with pytest.raises(PatchCompileError, match="did not finish within 0.2 s"):
        kpatch._run(["sh", "-c", "sleep 30 & sleep 30; wait"], "p.c")


NOW = 1_000_000.0


def _aged(path: Path, age: float, *, folder=True) -> Path:
    path.mkdir() if folder else path.write_text("x")
    os.utime(path, (NOW - age, NOW - age))
    return path


def test_only_build_folders_older_than_an_hour_are_removed(tmp_path, monkeypatch):
    monkeypatch.setattr(kpatch.time, "time", lambda: NOW)
    old = _aged(tmp_path / ".build-old", 3601)
    (old / "rt.o").write_text("x")
    os.utime(old, (NOW - 3601, NOW - 3601))         # the file's creation touched the folder
    edge = _aged(tmp_path / ".build-edge", kpatch.STALE_BUILD_S)
    fresh = _aged(tmp_path / ".build-fresh", 10)
    other = _aged(tmp_path / "other-old", 7200)
    so = _aged(tmp_path / "p-plain-0123.so", 7200, folder=False)
    (tmp_path / ".build-gone").symlink_to(tmp_path / "nowhere")     # stat fails: skipped
    kpatch._remove_stale_builds(tmp_path)
    assert kpatch.STALE_BUILD_S == 3600.0
    assert not old.exists()
    assert edge.exists() and fresh.exists() and other.exists() and so.exists()


def test_a_stale_build_with_a_file_that_cannot_be_removed_loses_every_other_file(tmp_path, monkeypatch):
    monkeypatch.setattr(kpatch.time, "time", lambda: NOW)
    old = _aged(tmp_path / ".build-old", 7200)
    for name in ("locked", *(f"f{i:02}" for i in range(20))):
        (old / name).write_text("x")
    os.utime(old, (NOW - 7200, NOW - 7200))
    unlink = os.unlink

    def refusing_unlink(path, *args, **kwargs):
        if os.fspath(path).endswith("locked"):
            raise PermissionError(1, "Operation not permitted", os.fspath(path))
        return unlink(path, *args, **kwargs)
    monkeypatch.setattr(os, "unlink", refusing_unlink)
    kpatch._remove_stale_builds(tmp_path)
    monkeypatch.undo()
    assert sorted(p.name for p in old.iterdir()) == ["locked"]


def test_a_stale_build_that_is_a_file_is_left_without_an_error(tmp_path, monkeypatch):
    monkeypatch.setattr(kpatch.time, "time", lambda: NOW)
    f = _aged(tmp_path / ".build-file", 7200, folder=False)
    later = _aged(tmp_path / ".build-zz", 7200)
    kpatch._remove_stale_builds(tmp_path)
    assert f.exists() and not later.exists()


@pytest.fixture
def fake_cc(tmp_path, monkeypatch):
    """compile_patch with ``_run`` stood in: it records (cmd, what) and writes the ``-o`` file."""
    runs = []

    def run(cmd, what):
        runs.append((cmd, what))
        Path(cmd[cmd.index("-o") + 1]).write_text("obj")
        if "-MF" in cmd:        # the compiler read its source and, for the patch, the header beside it
            source = cmd[cmd.index("-c") + 1]
            read = [source] + ([str(header)] if source == str(src) else [])
            Path(cmd[cmd.index("-MF") + 1]).write_text("x.o: " + " ".join(read) + "\n")
        return f"warnings of {what}"
    monkeypatch.setattr(kpatch, "_run", run)
    monkeypatch.setenv("PYBCACHE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CC", "ccache gcc")
    src = tmp_path / "src" / "my_patch.c"
    src.parent.mkdir()
    src.write_text('#include "tree.h"\nint patch;\n')
    header = src.parent / "tree.h"
    header.write_text("int tree;\n")
    return runs, src


def test_a_compile_runs_the_runtime_the_patch_and_the_link_and_caches_the_module_by_key(fake_cc, tmp_path):
    runs, src = fake_cc
    out, warnings = kpatch.compile_patch(str(src))
    cc, flags, inc = ["ccache", "gcc"], list(kpatch.CFLAGS), str(kpatch._INCLUDE)
    key = kpatch._key(src, cc, kpatch.CFLAGS + kpatch.LDFLAGS)
    assert out.parent == tmp_path / "cache" / "kpatch" and out.name.startswith(f"my_patch-plain-{key}-")
    assert out.read_text() == "obj" and warnings == f"warnings of {src}"
    (rt, rt_what), (pc, pc_what), (link, link_what) = runs
    build = Path(rt[-1]).parent
    assert build.parent == out.parent and build.name.startswith(".build-") and not build.exists()
    assert rt == [*cc, *flags, "-MD", "-MF", str(build / "rt.d"), "-iquote", inc, "-c", str(kpatch._RUNTIME),
                  "-o", str(build / "rt.o")]
    assert pc == [*cc, *flags, "-MD", "-MF", str(build / "patch.d"), "-I", inc, "-c", str(src), "-o",
                  str(build / "patch.o")]
    assert link == [*cc, *flags, *kpatch.LDFLAGS, str(build / "patch.o"), str(build / "rt.o"), "-o",
                    str(build / "patch.so")]
    assert (rt_what, pc_what, link_what) == ("the shim runtime", str(src), f"{src} (link)")


def test_a_second_compile_of_the_same_patch_reuses_the_module_and_its_warnings_without_the_compiler(fake_cc):
    runs, src = fake_cc
    out, _ = kpatch.compile_patch(src)
    again, warnings = kpatch.compile_patch(src)
    assert again == out and warnings == f"warnings of {src}" and len(runs) == 3


@pytest.mark.parametrize("change", ["source", "included header", "shim runtime"])
def test_a_change_to_any_file_the_compiler_read_rebuilds(fake_cc, tmp_path, monkeypatch, change):
    # the wrong pass of the old cache: a patch whose included tree file broke still loaded its old build
    runs, src = fake_cc
    runtime = tmp_path / "kpatch_rt.c"
    runtime.write_text("int rt;\n")
    monkeypatch.setattr(kpatch, "_RUNTIME", runtime)
    first, _ = kpatch.compile_patch(src)
    changed = {"source": src, "included header": src.parent / "tree.h", "shim runtime": runtime}[change]
    changed.write_text(changed.read_text() + "/* changed */\n")
    second, _ = kpatch.compile_patch(src)
    assert len(runs) == 6 and second != first
    assert kpatch.compile_patch(src)[0] == second and len(runs) == 6       # and reuses the new build


def test_an_include_folder_is_passed_as_I_and_is_part_of_the_key(fake_cc, tmp_path):
    runs, src = fake_cc
    inc = tmp_path / "tree-include"
    inc.mkdir()
    plain, _ = kpatch.compile_patch(src)
    with_inc, _ = kpatch.compile_patch(src, include_dirs=[inc])
    assert with_inc != plain and runs[4][0][runs[4][0].index(str(inc)) - 1] == "-I"
    with pytest.raises(ValueError, match="include_dirs: .* is not a folder"):
        kpatch.compile_patch(src, include_dirs=[tmp_path / "nope"])
    with pytest.raises(TypeError, match="include_dirs must be a list of folders, got str"):
        kpatch.compile_patch(src, include_dirs=str(inc))


def test_the_tsan_flavour_adds_its_flag_to_every_step_and_is_cached_apart(fake_cc):
    runs, src = fake_cc
    plain, _ = kpatch.compile_patch(src)
    tsan, _ = kpatch.compile_patch(src, flavour="tsan")
    key = kpatch._key(src, ["ccache", "gcc"], kpatch.CFLAGS + ("-fsanitize=thread",) + kpatch.LDFLAGS)
    assert tsan.name.startswith(f"my_patch-tsan-{key}-") and tsan != plain
    assert [("-fsanitize=thread" in cmd) for cmd, _ in runs] == [False] * 3 + [True] * 3
    assert kpatch.FLAVOURS == {"plain": (), "tsan": ("-fsanitize=thread",),
                               "asan": ("-fsanitize=address", "-fno-omit-frame-pointer")}


def test_the_path_in_the_key_is_the_resolved_one(fake_cc, monkeypatch):
    runs, src = fake_cc
    monkeypatch.chdir(src.parent)
    out, _ = kpatch.compile_patch("my_patch.c")
    assert out.name.startswith("my_patch-plain-" + kpatch._key(src, ["ccache", "gcc"],
                                                                kpatch.CFLAGS + kpatch.LDFLAGS) + "-")
    assert runs[1][0][-3] == str(src) and runs[1][1] == "my_patch.c"


def test_a_compile_removes_stale_builds_left_in_the_cache(fake_cc, tmp_path, monkeypatch):
    runs, src = fake_cc
    stale = tmp_path / "cache" / "kpatch" / ".build-killed"
    stale.mkdir(parents=True)
    os.utime(stale, (1.0, 1.0))
    kpatch.compile_patch(src)
    assert not stale.exists()


def test_a_failed_compile_leaves_no_build_folder_and_no_module(tmp_path, monkeypatch):
    def run(cmd, what):
        raise PatchCompileError(f"{what}: the C compiler failed", "boom")
    monkeypatch.setattr(kpatch, "_run", run)
    monkeypatch.setenv("PYBCACHE_CACHE_DIR", str(tmp_path / "cache"))
    src = tmp_path / "p.c"
    src.write_text("x")
    with pytest.raises(PatchCompileError, match="the shim runtime: the C compiler failed"):
        kpatch.compile_patch(src)
    assert list((tmp_path / "cache" / "kpatch").iterdir()) == []


@pytest.mark.parametrize("kwargs, exc, message", [
    (dict(path=42), TypeError, "path must be a str or os.PathLike, got int"),
    (dict(path="p.c", flavour=1), TypeError, "flavour must be a str, one of ('plain', 'tsan', 'asan'), got int"),
    (dict(path="p.c", flavour="msan"), ValueError, "flavour must be one of ('plain', 'tsan', 'asan'), got 'msan'"),
])
def test_bad_compile_arguments_are_refused_naming_the_argument(fake_cc, kwargs, exc, message):
    runs, _ = fake_cc
    with pytest.raises(exc) as e:
        kpatch.compile_patch(**kwargs)
    assert str(e.value) == message and runs == []


def test_an_unreadable_patch_is_a_value_error_naming_the_path_and_why(fake_cc, tmp_path):
    runs, _ = fake_cc
    with pytest.raises(ValueError) as e:
        kpatch.compile_patch(tmp_path / "none.c")
    assert str(e.value) == f"path: cannot read the patch {str(tmp_path / 'none.c')!r}: No such file or directory"
    assert e.value.__suppress_context__ and runs == []
    assert not (tmp_path / "cache").exists()


def test_load_patch_compiles_loads_and_names_the_patch_and_builds_trackers(monkeypatch, tmp_path):
    made = []

    class Module:
        def __init__(self, library):
            self.library, self.name, self.bypass_granularity = library, "my_ops", 0

    def tracker(*args):
        made.append(args)
        return "tracker"
    monkeypatch.setattr(kpatch, "compile_patch", lambda path, include_dirs: (tmp_path / "lib.so", "w: unused"))
    monkeypatch.setattr(kpatch, "PatchModule", Module)
    monkeypatch.setattr(kpatch, "PatchTracker", tracker)
    monkeypatch.chdir(tmp_path)
    p = kpatch.load_patch("p.c")
    assert isinstance(p, kpatch.KernelPatch)
    assert (p.name, p.path, p.library, p.warnings) == ("my_ops", str(tmp_path / "p.c"), str(tmp_path / "lib.so"),
                                                     "w: unused")
    assert p._module.library == tmp_path / "lib.so"
    assert repr(p) == f"KernelPatch(name='my_ops', path={str(tmp_path / 'p.c')!r})"
    assert p.tracker(4096) == "tracker"
    p.tracker(8192, fault="f", hung_timeout=2.5)
    assert made == [(p._module, p, 4096, None, 10.0, "consumed", "hardirq", "all"),
                    (p._module, p, 8192, "f", 2.5, "consumed", "hardirq", "all")]
    assert p.end_bio == "consumed" and p.bypass_granularity == 0


def test_a_compile_error_carries_its_output_and_is_a_value_error():
    e = PatchCompileError("p.c: failed", "line 1")
    assert isinstance(e, ValueError) and str(e) == "p.c: failed\nline 1" and e.output == "line 1"
    bare = PatchCompileError("p.c: failed")
    assert str(bare) == "p.c: failed" and bare.output == ""


def _raw(kind, detail=0, *, op=3, lock="", file="p.c", line=12, other_file="p.c", other_line=7, locks_held=0,
         hardirq=0, irqs_disabled=0, rcu_depth=0):
    return dict(kind=kind, op=op, detail=detail, lock=lock, file=file, line=line, other_file=other_file,
                other_line=other_line, locks_held=locks_held, hardirq=hardirq, irqs_disabled=irqs_disabled,
                rcu_depth=rcu_depth, count=1)


@pytest.mark.parametrize("raw, kind, op, message", [
    (_raw(1, 0, locks_held=1, lock="d->lock"), "might_sleep", "write_start",
     "BUG: sleeping function called from invalid context at p.c:12: a sleeping allocation with in_atomic(): 1, "
     "irqs_disabled(): 0, in hard-irq: 0, rcu_read_lock depth 0; d->lock held since p.c:7"),
    (_raw(1, 1, op=4, hardirq=1, irqs_disabled=1), "might_sleep", "write_end",
     "BUG: sleeping function called from invalid context at p.c:12: wait_event with in_atomic(): 1, "
     "irqs_disabled(): 1, in hard-irq: 1, rcu_read_lock depth 0"),
    (_raw(1, 2, op=5, rcu_depth=2), "might_sleep", "read_bypass",
     "BUG: sleeping function called from invalid context at p.c:12: synchronize_rcu with in_atomic(): 1, "
     "irqs_disabled(): 0, in hard-irq: 0, rcu_read_lock depth 2"),
    (_raw(1, 2, op=5, rcu_depth=1), "might_sleep", "read_bypass",
     "BUG: sleeping function called from invalid context at p.c:12: synchronize_rcu with in_atomic(): 1, "
     "irqs_disabled(): 0, in hard-irq: 0, rcu_read_lock depth 1"),
    (_raw(1, 3, op=1, irqs_disabled=1), "might_sleep", "init",
     "BUG: sleeping function called from invalid context at p.c:12: might_sleep with in_atomic(): 0, "
     "irqs_disabled(): 1, in hard-irq: 0, rcu_read_lock depth 0"),
    (_raw(2, 0, lock="d->lock", other_line=3), "inconsistent_lock_state", "write_start",
     "WARNING: inconsistent lock state: inconsistent {IN-HARDIRQ-W} -> {HARDIRQ-ON-W} usage. d->lock taken at "
     "p.c:12 (HARDIRQ-ON-W); IN-HARDIRQ-W first at p.c:3"),
    (_raw(2, 1, op=6, lock="l"), "inconsistent_lock_state", "rcu_callback",
     "WARNING: inconsistent lock state: inconsistent {HARDIRQ-ON-W} -> {IN-HARDIRQ-W} usage. l taken at p.c:12 "
     "(IN-HARDIRQ-W); HARDIRQ-ON-W first at p.c:7"),
    (_raw(3, lock="l"), "unlock_not_held", "write_start",
     "BUG: spinlock wrong owner: l released at p.c:12 by a thread that does not hold it"),
    (_raw(4, lock="l", op=2), "double_unlock", "exit",
     "BUG: spinlock already unlocked: l released at p.c:12 while nobody held it"),
    (_raw(5, lock="l"), "spin_recursion", "write_start",
     "BUG: spinlock recursion: l taken at p.c:12 by the thread that already holds it"),
    (_raw(6, lock="l"), "lockup", "write_start",
     "BUG: spinlock lockup suspected: l not acquired at p.c:12 within the hung bound"),
    (_raw(7, 1), "hung_task", "write_start", "INFO: task blocked for more than the hung bound in wait_event at p.c:12"),
    (_raw(8, op=0, file=None), "warning", None, "WARNING: at ? (None)"),
    (_raw(8, op=4, file=""), "warning", "write_end", "WARNING: at ? (write_end)"),
    (_raw(9, 0, lock="d->lock"), "lock_held_at_return", "write_start",
     "BUG: write_start returned with a spinlock held (d->lock taken at p.c:12)"),
    (_raw(9, 1, op=4), "lock_held_at_return", "write_end", "BUG: write_end returned with interrupts disabled"),
    (_raw(9, 2, op=5), "lock_held_at_return", "read_bypass",
     "BUG: read_bypass returned with an RCU read-side section open"),
    (_raw(10), "suspicious_rcu_usage", "write_start",
     "WARNING: suspicious RCU usage at p.c:12: rcu_dereference outside rcu_read_lock"),
    (_raw(11, 0), "bad_free", "write_start", "BUG: kfree at p.c:12 of a pointer the allocator never returned"),
    (_raw(11, 1), "bad_free", "write_start", "BUG: kfree at p.c:12 of an object already freed"),
    (_raw(12, lock="l", line=99), "lock_not_held", "write_start", "WARNING: lock not held at p.c:99: l"),
    # the second API group (pybcache/kpatch_ext.h): kinds 18-21, rwlock usages 4-7 (after the soft-irq ones)
    (_raw(1, 4, op=4, hardirq=1, irqs_disabled=1), "might_sleep", "write_end",
     "BUG: sleeping function called from invalid context at p.c:12: mutex_lock with in_atomic(): 1, "
     "irqs_disabled(): 1, in hard-irq: 1, rcu_read_lock depth 0"),
    (_raw(1, 7, locks_held=1), "might_sleep", "write_start",
     "BUG: scheduling while atomic at p.c:12: schedule_timeout with in_atomic(): 1, "
     "irqs_disabled(): 0, in hard-irq: 0, rcu_read_lock depth 0"),
    (_raw(2, 5, op=4, lock="rw"), "inconsistent_lock_state", "write_end",
     "WARNING: inconsistent lock state: inconsistent {HARDIRQ-ON-W} -> {IN-HARDIRQ-R} usage. rw taken at p.c:12 "
     "(IN-HARDIRQ-R); HARDIRQ-ON-W first at p.c:7"),
    (_raw(3, 1, lock="rw"), "unlock_not_held", "write_start",
     "BUG: rwlock wrong owner: rw released at p.c:12 by a thread that does not hold it"),
    (_raw(9, 3, lock="m"), "lock_held_at_return", "write_start",
     "BUG: write_start returned with a mutex held (m taken at p.c:12)"),
    (_raw(9, 4), "lock_held_at_return", "write_start", "BUG: write_start returned with preemption disabled"),
    (_raw(18, 0, lock="m"), "recursive_locking", "write_start",
     "WARNING: possible recursive locking detected: m taken at p.c:12 by the thread that already holds it"),
    (_raw(18, 1, lock="rw"), "recursive_locking", "write_start",
     "BUG: rwlock recursion: rw taken at p.c:12 by the thread that already holds it"),
    (_raw(19, lock="m", op=4), "bad_unlock_balance", "write_end",
     "WARNING: bad unlock balance detected! m released at p.c:12 while nobody held it"),
    (_raw(20, lock="m", op=4), "mutex_wrong_owner", "write_end",
     "WARNING: DEBUG_LOCKS_WARN_ON(__owner_task(owner) != current): m released at p.c:12 by a thread that "
     "does not hold it"),
    (_raw(21, 0, lock="smp_processor_id"), "preemptible_cpu_access", "write_start",
     "BUG: using smp_processor_id() in preemptible [00000000] code at p.c:12"),
    (_raw(21, 1, lock="add"), "preemptible_cpu_access", "write_start",
     "BUG: using __this_cpu_add() in preemptible [00000000] code at p.c:12"),
])
def test_a_report_is_named_and_worded_as_the_kernel_words_it(raw, kind, op, message):
    raw, before = dict(raw), dict(raw)      # render_report changes its argument: keep the parameter intact
    out = kpatch.render_report(raw)
    assert out is raw
    assert (out["kind"], out["operation"], out["message"]) == (kind, op, message)
    assert "op" not in out and "detail" not in out
    rest = {k: v for k, v in before.items() if k not in ("kind", "op", "detail")}
    assert {k: out[k] for k in rest} == rest


def test_a_report_with_a_lock_held_names_where_it_was_taken_and_without_one_says_nothing():
    held = kpatch.render_report(_raw(1, 0, lock="a", other_file=None))["message"]
    assert held.endswith("rcu_read_lock depth 0; a held since ?")
    assert kpatch.render_report(_raw(1, 0))["message"].endswith("rcu_read_lock depth 0")


def test_a_site_is_file_colon_line_or_a_question_mark_without_a_file():
    assert kpatch._site("a.c", 3) == "a.c:3"
    assert kpatch._site("", 3) == "?" and kpatch._site(None, 0) == "?"


def test_every_kind_and_operation_has_its_name():
    assert kpatch._KINDS == {1: "might_sleep", 2: "inconsistent_lock_state", 3: "unlock_not_held",
                             4: "double_unlock", 5: "spin_recursion", 6: "lockup", 7: "hung_task", 8: "warning",
                             9: "lock_held_at_return", 10: "suspicious_rcu_usage", 11: "bad_free",
                             12: "lock_not_held", 13: "circular_locking", 14: "irq_lock_order",
                             15: "irqs_enabled_in_irq", 16: "gfp_io_on_submission",
                             17: "blocking_in_wait_condition", 18: "recursive_locking", 19: "bad_unlock_balance",
                             20: "mutex_wrong_owner", 21: "preemptible_cpu_access"}
    # one kind is told apart by its detail, as lockdep words it (recursive_locking is also kind 18's name)
    assert set(kpatch._TEXT) == set(kpatch._KINDS.values()) | {"irq_lock_inversion"}
    assert kpatch._OPS == {0: None, 1: "init", 2: "exit", 3: "write_start", 4: "write_end", 5: "read_bypass",
                           6: "rcu_callback"}
