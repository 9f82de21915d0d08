"""Fast tests of the kernel lab (pybcache/kernel/): the kernel-report parser on log snippets written for these
tests, the configuration fragments and their merge and check, the patch-to-work-tree sync, the guest's result
lines, the wall bound and the confinement (a stand-in "kernel" script), and the command's argument errors.
No kernel is built here: tests/kernel/test_kernel_uml.py does that."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from pybcache.commands import main
from pybcache.kernel import build as kbuild
from pybcache.kernel import guest as kguest
from pybcache.kernel import race as krace
from pybcache.kernel._paths import kernel_file

# ---------------------------------------------------------------------------------------------------- reports
LOCKDEP = """\
[   12.340000]
[   12.340000] ======================================================
[   12.340000] WARNING: possible circular locking dependency detected
[   12.340000] 6.12.118 #1 Not tainted
[   12.340000] ------------------------------------------------------
[   12.340000] kworker/0:1/42 is trying to acquire lock:
[   12.340000] 00000000deadbeef (&b->write_lock){+.+.}-{3:3}, at: bch_btree_node_write+0x10/0x20
[   12.340000]
[   12.340000] but task is already holding lock:
[   12.340000] 00000000cafef00d (&c->bucket_lock){+.+.}-{3:3}, at: bch_alloc+0x30/0x40
[   12.340000] stack backtrace:
[   12.340000] CPU: 0 UID: 0 PID: 42 Comm: kworker/0:1 Not tainted 6.12.118 #1
"""
INCONSISTENT = """\
[    3.000000] ================================
[    3.000000] WARNING: inconsistent lock state
[    3.000000] 6.12.118 #1 Not tainted
[    3.000000] --------------------------------
[    3.000000] inconsistent {SOFTIRQ-ON-W} -> {IN-SOFTIRQ-W} usage.
"""
MIGHT_SLEEP = """\
[    5.100000] BUG: sleeping function called from invalid context at mm/slub.c:4104
[    5.100000] in_atomic(): 1, irqs_disabled(): 0, non_block: 0, pid: 7, name: kworker/u2:0
[    5.100000] preempt_count: 1, expected: 0
[    5.100000] Call Trace:
[    5.100000]  __might_resched+0x1/0x2
"""
KASAN = """\
[    7.000000] ==================================================================
[    7.000000] BUG: KASAN: slab-use-after-free in bch_data_insert+0x12/0x34
[    7.000000] Read of size 8 at addr 000000006abc1234 by task kworker/0:2/55
[    7.000000]
[    7.000000] Freed by task 55:
[    7.000000] ==================================================================
[    7.010000] Disabling lock debugging due to kernel taint
"""
WARNING = """\
[    9.000000] ------------[ cut here ]------------
[    9.000000] WARNING: CPU: 0 PID: 1 at drivers/md/bcache/request.c:123 cached_dev_write+0x1/0x2
[    9.000000] Modules linked in:
[    9.000000] CPU: 0 UID: 0 PID: 1 Comm: sh Not tainted 6.12.118 #1
[    9.000000] ---[ end trace 0000000000000000 ]---
[    9.010000] bcache: bcache_device_free() bcache0 stopped
"""
PANIC = """\
[   20.000000] Kernel panic - not syncing: Attempted to kill init! exitcode=0x00000100
[   20.000000] CPU: 0 UID: 0 PID: 1 Comm: init.sh Not tainted 6.12.118 #1
[   20.000000] ---[ end Kernel panic - not syncing: Attempted to kill init! exitcode=0x00000100 ]---
"""
CLEAN = """\
[    0.380000] Run /tmp/init.sh as init process
[    1.160000] bcache: run_cache_set() invalidating existing data
[    1.170000] bcache: register_cache() registered cache device ubdb
PYB: bcache0 ready
[   10.250000] bcache: bcache_device_free() bcache0 stopped
[   10.260000] FAULT_INJECTION: forcing a failure.
[   10.260000] name failslab, interval 1, probability 100, space 0, times 999
"""


@pytest.mark.parametrize("log, kind, first, last", [
    (LOCKDEP, "lockdep", "=====", "CPU: 0 UID: 0 PID: 42"),
    (INCONSISTENT, "lockdep", "=====", "inconsistent {SOFTIRQ-ON-W}"),
    (MIGHT_SLEEP, "might_sleep", "BUG: sleeping function called from invalid context", "__might_resched"),
    (KASAN, "kasan", "=====", "====="),
    (WARNING, "warning", "WARNING: CPU: 0 PID: 1 at drivers/md/bcache/request.c:123", "---[ end trace"),
    (PANIC, "panic", "Kernel panic - not syncing: Attempted to kill init!", "---[ end Kernel panic"),
])
def test_each_kind_of_report_is_found_whole_in_the_kernels_words(log, kind, first, last):
    reports = kguest.parse_reports(CLEAN + log)
    assert [r["kind"] for r in reports] == [kind]
    lines = reports[0]["text"].splitlines()
    assert first in lines[0] and last in lines[-1]
    assert all(line in log for line in lines)   # as printed, timestamps and all


def test_a_clean_log_with_failslab_chatter_has_no_report():
    assert kguest.parse_reports(CLEAN) == []


def test_the_kasan_report_ends_at_its_closing_rule():
    text = kguest.parse_reports(KASAN)[0]["text"]
    assert "Disabling lock debugging" not in text and text.count("=" * 60) == 2


def test_reports_back_to_back_are_each_their_own_and_a_guest_line_ends_one():
    log = MIGHT_SLEEP + WARNING + "PYB: teardown\n" + LOCKDEP + "PYB: finished: ok\n" + PANIC
    reports = kguest.parse_reports(log)
    assert [r["kind"] for r in reports] == ["might_sleep", "warning", "lockdep", "panic"]
    assert "WARNING: CPU" not in reports[0]["text"]
    assert all("PYB:" not in r["text"] for r in reports)


def test_a_report_without_timestamps_and_a_plain_bug_are_found():
    log = "BUG: unable to handle page fault for address: 0000000000000010\nOops: 0000 [#1] PREEMPT\n" \
          "kernel BUG at drivers/md/bcache/btree.c:1234!\nINFO: task kworker/0:1:12 blocked for more than 120 " \
          "seconds.\n"
    kinds = [r["kind"] for r in kguest.parse_reports(log)]
    assert kinds == ["bug", "bug", "bug", "hung_task"]


def test_a_runaway_report_is_cut_at_120_lines():
    log = "WARNING: CPU: 0 PID: 1 at x.c:1 f+0x0/0x0\n" + "".join(f" frame {i}\n" for i in range(500))
    (report,) = kguest.parse_reports(log)
    assert len(report["text"].splitlines()) == kguest.MAX_REPORT_LINES


# ----------------------------------------------------------------------------------------------------- config
# the options the lab's fragments must set (the task's base list and the debug list)
BASE = ["64BIT", "HOSTFS", "BLK_DEV_UBD", "MD", "BCACHE", "BLK_DEV_DM", "DM_DELAY", "PROC_FS", "SYSFS", "DEVTMPFS",
        "TTY", "STDERR_CONSOLE", "NULL_CHAN", "PTY_CHAN", "TTY_CHAN", "PRINTK", "FUTEX", "SHMEM", "TMPFS", "EPOLL",
        "SIGNALFD", "TIMERFD", "EVENTFD", "POSIX_TIMERS", "FILE_LOCKING", "BINFMT_ELF", "BINFMT_SCRIPT", "MULTIUSER",
        "BUG", "KALLSYMS"]
DEBUG = ["PREEMPT", "PROVE_LOCKING", "DEBUG_ATOMIC_SLEEP", "KASAN", "KASAN_GENERIC", "KASAN_OUTLINE", "SLUB",
         "FAULT_INJECTION", "FAILSLAB", "FAULT_INJECTION_DEBUG_FS", "FAULT_INJECTION_STACKTRACE_FILTER",
         "FRAME_POINTER", "DEBUG_FS"]


def test_the_fragments_set_every_option_the_lab_relies_on():
    base = kbuild.fragment_options(kernel_file("base.config").read_text())
    debug = kbuild.fragment_options(kernel_file("debug.config").read_text())
    assert all(base.get(f"CONFIG_{o}") == "y" for o in BASE), [o for o in BASE if base.get(f"CONFIG_{o}") != "y"]
    assert all(debug.get(f"CONFIG_{o}") == "y" for o in DEBUG), [o for o in DEBUG if debug.get(f"CONFIG_{o}") != "y"]
    assert "CONFIG_NET" in base and base["CONFIG_NET"] is None      # no network
    assert debug["CONFIG_SLUB_TINY"] is None                        # KASAN needs the full SLUB
    assert kbuild.fragments(True)[-1].name == "debug.config" and len(kbuild.fragments(False)) == 1


def test_merge_replaces_set_and_unset_lines_and_appends_the_rest():
    config = "CONFIG_A=y\n# CONFIG_B is not set\nCONFIG_C=m\nCONFIG_A=n\n"
    merged = kbuild.merge_config(config, {"CONFIG_A": None, "CONFIG_B": "y", "CONFIG_D": '"x"'})
    assert merged == '# CONFIG_A is not set\nCONFIG_B=y\nCONFIG_C=m\nCONFIG_D="x"\n'


def test_the_check_names_each_option_that_did_not_end_in_the_config():
    config = "CONFIG_A=y\n# CONFIG_B is not set\nCONFIG_E=y\n"
    wrong = kbuild.check_config(config, {"CONFIG_A": "y", "CONFIG_B": "y", "CONFIG_C": "y", "CONFIG_D": None,
                                         "CONFIG_E": None})
    assert wrong == ["CONFIG_B=y (got: not set)", "CONFIG_C=y (got: not set)", "CONFIG_E unset (got: y)"]


# ---------------------------------------------------------------------------------------------------- patches
DIFF = """\
some mail header
--- a/drivers/md/bcache/request.c\t2024-01-01
+++ b/drivers/md/bcache/request.c\t2024-01-02
@@ -1,3 +1,3 @@
 one
--- two
+three
--- /dev/null
+++ b/drivers/md/bcache/new.c
@@ -0,0 +1 @@
+new
"""


def test_patch_paths_reads_the_file_headers_only():
    assert kbuild.patch_paths(DIFF) == ["drivers/md/bcache/request.c", "drivers/md/bcache/new.c"]
    assert kbuild.patch_paths("no diff here\n") == []


@pytest.mark.parametrize("path", ["a/../etc/passwd", "a//etc/passwd", "request.c"])
def test_a_patch_path_that_leaves_the_tree_or_cannot_be_stripped_is_refused(path):
    with pytest.raises(kbuild.KernelBuildError):
        kbuild.patch_paths(f"--- {path}\n+++ {path}\n@@ -1 +1 @@\n-a\n+b\n")


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    pristine = tmp_path / "pristine"
    (pristine / "d").mkdir(parents=True)
    (pristine / "d" / "f.c").write_text("one\ntwo\nthree\n")
    (pristine / "d" / "g.c").write_text("alpha\n")
    (pristine / "Makefile").write_text("all:\n")
    old = time.time() - 3600
    for f in pristine.rglob("*"):
        os.utime(f, (old, old))
    work = tmp_path / "work"
    subprocess.run(["cp", "-al", str(pristine), str(work)], check=True, timeout=30)
    return pristine, work


def _diff(tmp_path: Path, name: str, old: str, new: str, path: str = "d/f.c") -> Path:
    lines = [f"--- a/{path}", f"+++ b/{path}", "@@ -1,3 +1,3 @@", " one", f"-{old}", f"+{new}", " three", ""]
    p = tmp_path / name
    p.write_text("\n".join(lines))
    return p


def _load(*paths: Path) -> list[tuple[Path, bytes]]:
    return [(p, p.read_bytes()) for p in paths]


def test_a_patch_rewrites_only_the_file_it_touches_and_never_the_pristine_one(tmp_path):
    pristine, work = _tree(tmp_path)
    g_inode, g_mtime = (work / "d" / "g.c").stat().st_ino, (work / "d" / "g.c").stat().st_mtime
    changed = kbuild._sync_worktree(pristine, work, _load(_diff(tmp_path, "p1.diff", "two", "TWO")))
    assert changed == ["d/f.c"]
    assert (work / "d" / "f.c").read_text() == "one\nTWO\nthree\n"
    assert (pristine / "d" / "f.c").read_text() == "one\ntwo\nthree\n"         # the hard link was broken
    assert (work / "d" / "g.c").stat().st_ino == g_inode and (work / "d" / "g.c").stat().st_mtime == g_mtime
    assert (work / "d" / "f.c").stat().st_mtime > time.time() - 60             # make sees it as new
    # the same patch again: nothing to rewrite
    assert kbuild._sync_worktree(pristine, work, _load(tmp_path / "p1.diff")) == []


def test_another_patch_or_none_restores_the_file_with_a_new_mtime(tmp_path):
    pristine, work = _tree(tmp_path)
    kbuild._sync_worktree(pristine, work, _load(_diff(tmp_path, "p1.diff", "two", "TWO")))
    assert kbuild._sync_worktree(pristine, work, _load(_diff(tmp_path, "p2.diff", "two", "2"))) == ["d/f.c"]
    assert (work / "d" / "f.c").read_text() == "one\n2\nthree\n"
    os.utime(work / "d" / "f.c", (0, 0))
    assert kbuild._sync_worktree(pristine, work, []) == ["d/f.c"]
    assert (work / "d" / "f.c").read_text() == "one\ntwo\nthree\n"
    assert (work / "d" / "f.c").stat().st_mtime > 0                             # newer than its objects
    assert json.loads((work / ".pybcache-patched.json").read_text()) == {"paths": []}


def test_a_patch_that_does_not_apply_fails_with_patchs_own_words_and_changes_nothing(tmp_path):
    pristine, work = _tree(tmp_path)
    bad = _diff(tmp_path, "bad.diff", "no such line", "x")
    with pytest.raises(kbuild.KernelBuildError) as exc:
        kbuild._sync_worktree(pristine, work, _load(bad))
    assert "does not apply" in str(exc.value) and "FAILED" in str(exc.value)    # patch's "Hunk #1 FAILED"
    assert (work / "d" / "f.c").read_text() == "one\ntwo\nthree\n"


def test_first_errors_picks_the_compilers_error_lines():
    log = "  CC      a.o\n  CC      drivers/md/bcache/request.o\ndrivers/md/bcache/request.c: In function 'f':\n" \
          "drivers/md/bcache/request.c:10:5: error: 'x' undeclared\n   10 |     x = 1;\nmake[4]: *** Error 1\n"
    text = kbuild.first_errors(log)
    assert "request.c:10:5: error: 'x' undeclared" in text and "In function 'f'" in text


# -------------------------------------------------------------------------------------- the guest's findings
def test_a_try_is_stale_when_bcache_has_the_old_version_and_the_backing_device_the_new():
    assert krace.parse_try("1 1280 0 0 1 0") == {"try": 1, "block": 1280, "read_during_write": 0,
                                                 "bcache_after": 0, "backing_after": 1, "write_ok": True,
                                                 "ran": True, "stale": True, "garbage": False}
    assert not krace.parse_try("2 1536 0 1 1 0")["stale"]
    assert not krace.parse_try("3 1792 ? ? 1 1")["stale"]      # unreadable: not counted as stale
    # neither version while the backing device has the new one: sectors indexed without their data
    assert krace.parse_try("4 2048 ? ? 1 0")["garbage"] and not krace.parse_try("4 2048 0 0 1 0")["garbage"]
    assert krace.parse_try("3 1792 ? ? 1 1")["write_ok"] is False


@pytest.mark.parametrize("line, verdict", [("1281 0 7 0", "held"), ("1281 0 7 7", "broken"),
                                           ("1281 ? 7 0", "inconclusive"), ("1281 0 0 0", "inconclusive"),
                                           (None, "not run")])
def test_the_balance_verdict(line, verdict):
    assert krace.parse_balance(line)["verdict"] == verdict


def test_counters_are_numbers_where_they_are_numbers():
    assert krace.parse_counters("cache_hits 6\ncache_misses 7\nbypassed 20.0k\n\n") == \
        {"cache_hits": 6, "cache_misses": 7, "bypassed": "20.0k"}


def test_block_content_and_guest_parameters():
    block = krace.block_bytes(1280, 3)
    assert len(block) == 4096 and block.startswith(b"pybcache blk=1280 ver=3\n") and block.endswith(b"\0")
    assert "TRIES=5\n" in krace._params({"TRIES": 5, "READ_AT_S": "0.500"})
    with pytest.raises(ValueError):
        krace._params({"FAIL_SYMBOL": "x; rm -rf /"})


def test_the_result_passes_only_without_stale_tries_with_balance_held_and_no_report():
    r = krace.RaceResult(kernel="k", version="6.12.118", patches=[], tries=1, stale=0,
                         per_try=[krace.parse_try("1 1280 0 1 1 0")],
                         balance={"verdict": "held"}, counters={}, reports=[], fail_alloc=None, log="", seconds=1.0,
                         preload="")
    assert r.passed and r.to_json()["passed"]
    assert set(r.to_json()) >= {"kernel", "patches", "tries", "stale", "per_try", "balance", "counters", "reports",
                                "passed"}
    r.reports = [{"kind": "warning", "text": "WARNING: CPU: 0 PID: 1 at x"}]
    assert not r.passed
    r.reports, r.balance = [], {"verdict": "broken"}
    assert not r.passed
    r.balance = {"verdict": "held"}
    r.per_try = [{"try": 1, "block": 1280, "stale": False, "ran": False}]    # a try that left no line
    assert not r.passed
    r.per_try = [krace.parse_try("1 1280 0 1 1 1")]                          # its write failed
    assert not r.passed


# ------------------------------------------------------------------------------- wall bound and confinement
needs_root = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                                reason="the guest's confinement (unshare --mount) runs as root")


def _fake_kernel(tmp_path: Path, body: str) -> Path:
    k = tmp_path / "kernels" / "fake" / "linux"
    k.parent.mkdir(parents=True)
    k.write_text("#!/bin/sh\n" + body)
    k.chmod(0o755)
    return k


@needs_root
def test_the_guest_sees_a_read_only_host_but_its_work_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("PYBCACHE_KERNEL_CACHE", str(tmp_path / "cache"))
    work = tmp_path / "work"
    work.mkdir()
    outside = tmp_path / "outside"
    kernel = _fake_kernel(tmp_path, f"""
touch {outside} 2>/dev/null && echo OUTSIDE-WRITTEN || echo outside-refused
touch {work}/inside && echo inside-written
echo "tmpdir=$TMPDIR"
""")
    run = kguest.boot(kernel, work, disks=[], init=kernel, wall=30)
    assert not run.timed_out and run.returncode == 0, run.console
    assert "outside-refused" in run.console and not outside.exists()
    assert "inside-written" in run.console and (work / "inside").exists()
    assert f"tmpdir={work.resolve()}/shm" in run.console


@needs_root
def test_a_hung_guest_is_killed_at_the_wall_bound_with_every_process_it_forked(tmp_path, monkeypatch):
    monkeypatch.setenv("PYBCACHE_KERNEL_CACHE", str(tmp_path / "cache"))
    work = tmp_path / "work"
    work.mkdir()
    kernel = _fake_kernel(tmp_path, f"""
echo "last words"
sleep 300 &
echo $! > {work}/child.pid
sh -c 'sleep 300' &
wait
""")
    started = time.monotonic()
    run = kguest.boot(kernel, work, disks=[], init=kernel, wall=2)
    assert run.timed_out and run.returncode is None and time.monotonic() - started < 15
    assert "last words" in kguest.console_tail(run.console)
    child = int((work / "child.pid").read_text())
    assert not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]


def test_the_ptrace_wrapper_compiles_and_measures_the_hosts_xsave_area(tmp_path, monkeypatch):
    monkeypatch.setenv("PYBCACHE_KERNEL_CACHE", str(tmp_path))
    if shutil.which(os.environ.get("CC") or "gcc") is None:
        pytest.skip("no C compiler")
    size = kguest.host_xstate_size()
    assert size == 0 or 512 + 64 <= size <= 64 * 1024
    fake = tmp_path / "k" / "linux"
    fake.parent.mkdir()
    (fake.parent / "user_constants.h").write_text("#define HOST_FP_SIZE 337 /* 2696 / sizeof(long) */\n")
    assert kguest.uml_fp_size(fake) == 2696
    lib, why = kguest.xstate_preload(fake)
    assert (lib is not None) == (size > 2696), why
    monkeypatch.setenv("PYBCACHE_UML_XSTATE", "off")
    assert kguest.xstate_preload(fake)[0] is None


# ------------------------------------------------------------------------------------------------ the command
def _main(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_a_missing_source_tarball_exits_2_naming_the_package(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("PYBCACHE_KERNEL_SOURCE", str(tmp_path / "linux-source-6.12.tar.xz"))
    monkeypatch.setenv("PYBCACHE_KERNEL_CACHE", str(tmp_path / "cache"))
    for action in ("build", "race"):
        status, out, err = _main(capsys, "kernel", action)
        assert status == 2 and out == ""
        assert "apt-get install linux-source-6.12" in err and len(err.splitlines()) == 1, err
    with pytest.raises(kbuild.KernelBuildError, match="apt-get install linux-source-6.12"):
        kbuild.build_kernel()


@pytest.mark.parametrize("argv, says", [
    (["build", "--tries", "3"], "--tries does not apply"),
    (["diff"], "name the generated patch"),
    (["diff", "v9"], "no generated patch 'v9'"),
    (["race", "extra"], "unrecognized arguments: extra"),
    (["race", "--write-delay", "1.5ms"], "whole milliseconds"),
    (["race", "--fail-alloc", "a;b"], "kernel symbol name"),
    (["race", "--patch", "/nonexistent.diff"], "no such file"),
    (["race", "--patch", "gen:v9"], "no generated patch"),
    (["compare", "--only", "v9"], "--only: no configuration 'v9'"),
    (["compare", "--tries", "101"], "[1, 100] for kernel compare"),
    (["compare", "--no-debug"], "need the debug build"),
    (["compare", "--patch", "gen:v3"], "--patch does not apply to `kernel compare`"),
    (["race", "--only", "v3"], "--only does not apply"),
    (["stress", "--seconds", "0"], "[1, 600] for kernel stress"),
])
def test_argument_errors_exit_2_in_one_line(capsys, argv, says):
    status, out, err = _main(capsys, "kernel", *argv)
    assert status == 2 and out == "" and says in err and len(err.splitlines()) == 1, err


def test_a_patch_that_is_not_a_diff_is_refused_before_anything_is_built(tmp_path, monkeypatch):
    monkeypatch.setenv("PYBCACHE_KERNEL_CACHE", str(tmp_path / "cache"))
    p = tmp_path / "x.diff"
    p.write_text("not a diff\n")
    with pytest.raises(kbuild.KernelBuildError, match="not a unified diff"):
        kbuild.build_kernel([p])
    assert not (tmp_path / "cache").exists()


def test_kernel_files_are_found_and_a_missing_one_is_named():
    for name in ("base.config", "debug.config", "guest-init.sh", "confine.sh", "uml_xstate_preload.c",
                 "v1-invalidate-after-write.cocci"):
        assert kernel_file(name).is_file()
    with pytest.raises(FileNotFoundError, match="csrc/kernel/nope"):
        kernel_file("nope")


def test_our_kernel_side_files_carry_their_licence():
    assert "SPDX-License-Identifier: GPL-2.0-only" in kernel_file("v1-invalidate-after-write.cocci").read_text()
    for name in ("guest-init.sh", "confine.sh", "uml_xstate_preload.c"):
        assert "SPDX-License-Identifier: MIT" in kernel_file(name).read_text()


def _outcome(tmp_path: Path, files: dict, *, timed_out=False, console="PYB: init up\n") -> krace.GuestOutcome:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    run = kguest.GuestRun(returncode=None if timed_out else 0, timed_out=timed_out, seconds=1.0, console=console,
                          preload="")
    return krace.GuestOutcome(tmp_path, run)


def test_what_the_guest_left_becomes_reports(tmp_path):
    (tmp_path / "a").mkdir()
    clean = _outcome(tmp_path / "a", {"finished": "ok\n", "dmesg.txt": CLEAN})
    assert clean.reports == [] and clean.finished == "ok"
    (tmp_path / "b").mkdir()
    hung = _outcome(tmp_path / "b", {}, timed_out=True, console="PYB: tries 1-5 of 5\n")
    assert [r["kind"] for r in hung.reports] == ["hang"] and "PYB: tries 1-5 of 5" in hung.reports[0]["text"]
    (tmp_path / "c").mkdir()
    died = _outcome(tmp_path / "c", {}, console=PANIC)
    assert [r["kind"] for r in died.reports] == ["panic", "died"]
    (tmp_path / "d").mkdir()
    torn = _outcome(tmp_path / "d", {"finished": "teardown-failed\n", "dmesg.txt": WARNING,
                                     "teardown_error": "bcache0 still there 10 s after stop\n"})
    assert [r["kind"] for r in torn.reports] == ["warning", "teardown"]
    assert "bcache0 still there" in torn.reports[1]["text"]


def test_a_writethrough_row_agrees_only_when_the_cache_write_fault_fired():
    from pybcache.kernel.compare import agreement
    model = {"explore": {"violations": 0, "kernel_report_schedules": 0}, "race": {"stale_reads": 0},
             "check_patch": None}
    kernel = {"race": {"stale": 0, "garbage": 0, "balance": "held", "reports": [],
                       "cache_write_fail": {"fired": True}}, "stress": None}
    assert agreement(model, kernel)["stale"] and agreement(model, kernel)["caught"]
    kernel["race"]["cache_write_fail"]["fired"] = False       # 0/5 stale because the fault never fired
    a = agreement(model, kernel)
    assert not a["stale"] and not a["caught"] and "did not fire" in a["not_measured"]


def test_the_cache_sets_own_error_is_read_from_the_log():
    log = ("[ 1.63] bcache: bch_cache_set_error() error on 10596fa1-2ece: accessing priorities, disabling caching\n"
           "[ 1.63] bcache: bch_count_io_errors() dm-1: IO error on writing data to cache.\n")
    assert krace._CACHE_SET_ERROR.findall(log) == ["accessing priorities"]
    assert krace._CACHE_IO_ERROR.findall(log) == ["writing data to cache"]
