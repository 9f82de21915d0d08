"""Issue 25, parts 2 and 4: writes that complete on their own schedule (a patch that waits for a page to come back
is not a hang), hang reports that say what could still wake the waiter, and write_end handed the bio as bcache's
cached_dev_write_complete sees it (0 sectors left), with the per-write private area and ``end_bio="intact"``."""
from __future__ import annotations

import json
import random
import threading
import time

import pytest
from helpers.clirun import run_pybcache
from helpers.kpatch_util import BAD, EXAMPLES, write_mutant

import pybcache
from pybcache.bcache.kpatch.check import checks as cpchk
from pybcache.bcache.kpatch.check import context as cpctx
from pybcache.bcache.kpatch.check import semantics as cpsem
from pybcache.bcache.kpatch.check.runner import check_patch
from pybcache.bcache.kpatch.load import compile_patch

pytestmark = [pytest.mark.native, pytest.mark.e2e, pytest.mark.xdist_group("native-threads")]

RESERVE = BAD / "reserve_wait.c"


@pytest.fixture(autouse=True)
def cache_dir(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("PYBCACHE_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "kpatch-cache"))


def _context(tmp_path, path, end_bio="consumed"):
    """The checks' context with every allocation failable (fail_alloc="all"): these tests make every allocation
    fail, which the default ("can-fail") would not do to the patches' GFP_NOIO pages."""
    library, _ = compile_patch(path)
    return cpctx._Context(str(path), str(library), 1.0, cpctx._Heartbeat(str(tmp_path / "heartbeat")), end_bio,
                          fail_alloc="all")


# == part 2: completions that do not wait for the submitter ===========================================

def test_semantics_ends_writes_in_the_background_while_a_start_waits_for_its_reserve(tmp_path):
    """Every allocation fails, so each page comes from the patch's two-page reserve: the sequence's third page
    in flight makes a start wait (single-threaded: before, it hung with nothing to end its writes). The
    oldest writes in flight now complete in the background until the start goes on, and the run is right."""
    ctx = _context(tmp_path, RESERVE)
    ops = cpsem._semantics_ops(random.Random(1), cpctx.SEMANTICS_DEVICE, 300)
    replay = cpsem._Replay(ctx, cpctx.SEMANTICS_DEVICE, 1.0, 1)
    assert replay.run(ops, count=True) is None
    assert replay.waits > 0 and replay.background_ends > 0
    bg = [op for op in replay.realized if op[0] == "end" and len(op) == 3]
    assert len(bg) == replay.background_ends
    # the same sequence again ends the same writes in the background: it depends on the patch, not on timing
    again = cpsem._Replay(ctx, cpctx.SEMANTICS_DEVICE, 1.0, 1)
    assert again.run(ops, count=True) is None
    assert [op for op in again.realized if op[0] == "end" and len(op) == 3] == bg
    # and the rendering says so
    lines = cpsem._render_ops(replay.realized, "done")
    assert any("completed in the background while the next start waited" in line for line in lines)


def test_the_stress_completes_writes_whatever_the_submitters_do(tmp_path):
    """All three submitters can be asleep in the patch's wait (every allocation fails: only the reserve's two
    pages): the completion threads still end the writes in flight about 1 ms after their start, so the run
    finishes and quiesces."""
    ctx = _context(tmp_path, RESERVE)
    t = ctx.tracker(cpctx.STRESS_DEVICE, fault=pybcache.FaultInjection(probability=1.0))
    counts = cpchk._stress(ctx, t, 0.5, seed=1)
    assert counts["writes"] > 0
    st = t.stats()
    assert st["writes_in_flight"] == 0 and st["write_ends"] == counts["writes"]
    assert cpchk._sweep(t, cpctx.STRESS_DEVICE) == []


def test_a_tracker_with_a_two_page_reserve_that_waits_passes_balance_and_context():
    """Before the completions were made independent, `context` failed it as "hung in write_start ... wait_event"
    (twice in two runs); now it passes, and the details count the waits taken."""
    result = check_patch(RESERVE, checks=["semantics", "balance", "context"], fail_alloc="all")
    assert result.passed, [c.detail for c in result.checks]
    by = {c.name: c for c in result.checks}
    assert "waits taken" in by["balance"].detail and "waits taken" in by["context"].detail
    assert "writes completed in the background" in by["semantics"].detail


def test_a_start_that_nothing_can_wake_fails_quickly_and_says_so():
    t0 = time.monotonic()
    result = check_patch(BAD / "hangs.c", checks=["semantics", "balance"])
    wall = time.monotonic() - t0
    assert not result.passed and all(c.figure == "hung" for c in result.checks)
    for c in result.checks:
        assert "0 write(s) in flight" in c.detail and "nothing left could wake it" in c.detail, c.detail
    assert wall < 60, wall


def test_a_hang_report_names_the_writes_in_flight_that_did_not_wake_the_waiter():
    p = pybcache.load_patch(BAD / "end_hangs.c")
    t = p.tracker(1 << 30, hung_timeout=0.5)
    t.start(0, 4096)
    t.start(8192, 4096)
    with pytest.raises(TimeoutError) as e:
        t.end(0, 4096)
    msg = str(e.value)
    assert "1 write(s) in flight" in msg and "0 ended during the wait" in msg
    assert "what could still wake it did not within the bound" in msg
    hung = [r for r in t.kernel_reports() if r["kind"] == "hung_task"]
    assert hung and hung[0]["wake"]["inflight"] == 1


def test_stats_count_the_waits_and_the_sleeper_and_a_background_end_wakes_it():
    p = pybcache.load_patch(RESERVE)
    t = p.tracker(cpctx.SEMANTICS_DEVICE, fault=pybcache.FaultInjection(probability=1.0), hung_timeout=10.0)
    t.start(0, 4096)                          # page 0 from the reserve
    t.start(32 * pybcache.GiB, 4096)          # page 1: the reserve is empty
    done = threading.Event()
    th = threading.Thread(target=lambda: (t.start(64 * pybcache.GiB, 4096), done.set()))
    th.start()
    deadline = time.monotonic() + 10
    while t.stats()["sleeping"] == 0 and time.monotonic() < deadline:
        time.sleep(0.001)
    st = t.stats()
    assert st["sleeping"] == 1 and st["waits"] == 1 and st["writes_in_flight"] == 2
    assert not done.is_set()
    t.end(0, 4096)                            # page 0 goes back to the reserve and wakes the start
    th.join(10)
    assert done.is_set()
    assert t.stats()["writes_in_flight"] == 2 and t.stats()["sleeping"] == 0


# == part 4: the bio as the kernel hands it ===========================================================

def test_write_end_gets_the_consumed_bio_by_default_and_the_private_area_of_its_write():
    p = pybcache.load_patch(BAD / "end_bio_probe.c")
    assert p.end_bio == "consumed"
    t = p.tracker(1 << 30)
    t.start(4096, 8192)                       # sectors 8..23, numbered 1
    t.start(4096, 8192)                       # the same range again, numbered 2
    t.end(4096, 8192)
    t.end(4096, 8192)
    assert not t.is_active(0, 4096)           # a read has no private area
    logs = [r["message"] for r in t.kernel_log()]
    assert logs == ["end sector=24 size=0 seq=1 start_sector=8", "end sector=24 size=0 seq=2 start_sector=8"]
    t.close()
    t = p.tracker(1 << 30, end_bio="intact")
    t.start(4096, 8192)
    t.end(4096, 8192)
    assert t.kernel_log()[0]["message"].startswith("end sector=8 size=8192 ")
    t.close()
    with pytest.raises(ValueError, match="end_bio must be 'consumed' or 'intact'"):
        p.tracker(1 << 30, end_bio="copied")
    with pytest.raises(TypeError, match="end_bio"):
        pybcache.load_patch(BAD / "end_bio_probe.c", end_bio=1)


@pytest.fixture(scope="module")
def reads_end_bio(tmp_path_factory):
    """The proposal whose write_end reads its range from the bio it is handed (the mutant end-reads-consumed-bio
    of pybcache/bcache/kpatch/mutants.py, generated from the proposal now)."""
    return write_mutant("end-reads-consumed-bio", tmp_path_factory.mktemp("mutant"))


def test_a_tracker_that_reads_its_range_from_the_end_bio_fails_balance_by_default_and_passes_intact(reads_end_bio):
    # balance fails on the counts leaked at quiescence, or on the start that waits for ever at a counter maximum
    # the leaks filled (which of the two depends on how many writes the stress made): the figure is the same
    consumed = check_patch(reads_end_bio, checks=["semantics", "balance"])
    for c in consumed.checks:
        assert not c.passed and c.figure == "end saw 0 sectors", c.detail
        assert any("bi_size 0 (0 sectors)" in line for line in c.counterexample)
    assert consumed.end_bio == "consumed" and consumed.to_json()["end_bio"] == "consumed"
    intact = check_patch(reads_end_bio, checks=["semantics", "balance"], end_bio="intact")
    assert intact.passed, [c.detail for c in intact.checks]
    assert "bio intact" in intact.checks[1].detail


def test_the_shipped_examples_record_their_range_at_start_and_keep_their_balance():
    for name in ("v3_proposal.c", "v3_atomic.c", "v2_posted.c"):
        (c,) = check_patch(EXAMPLES / name, checks=["balance"], seconds=0.5).checks
        assert c.passed, (name, c.detail)


def test_the_patch_level_explorer_hands_write_end_the_bio_check_patch_was_told(reads_end_bio):
    from pybcache.bcache.kpatch.interleave import explore_patch
    consumed = explore_patch(reads_end_bio, "1w1r")
    assert [f["kind"] for f in consumed["failures"]] == ["count leaked"], consumed["failures"]
    intact = explore_patch(reads_end_bio, "1w1r", end_bio="intact")
    assert intact["complete"] and intact["failures"] == [] and intact["executions"] > 0
    with pytest.raises(ValueError, match="end_bio must be 'consumed' or 'intact'"):
        explore_patch(reads_end_bio, "1w1r", end_bio="copied")


def test_the_cli_takes_end_bio_intact_and_refuses_other_values(reads_end_bio):
    r = run_pybcache("check-patch", str(reads_end_bio), "--check", "balance", "--seconds", "0.5",
                     "--end-bio", "intact", "--json", timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["end_bio"] == "intact"
    r = run_pybcache("check-patch", str(reads_end_bio), "--end-bio", "copied")
    assert r.returncode == 2 and "--end-bio" in r.stderr and "Traceback" not in r.stderr


# == part 6: the patch's pr_* output is kept and shown on failure ======================================

def test_a_failed_check_shows_the_patchs_printk_lines():
    (c,) = check_patch(EXAMPLES / "v2_posted.c", checks=["semantics"], fail_alloc="all").checks
    assert not c.passed
    assert c.log and c.log[0].startswith("warn v2_posted.c:")
    assert "write left untracked" in c.log[0]
    assert c.to_json()["log"] == c.log
    (ok,) = check_patch(EXAMPLES / "v3_proposal.c", checks=["memory"]).checks
    assert ok.passed and ok.log is None


# == part 6: a bypass coarser than the reference's chunks fails unless declared ========================

def test_a_bypass_coarser_than_the_chunks_fails_semantics_unless_the_patch_declares_it(tmp_path):
    (c,) = check_patch(BAD / "coarse_bypass.c", checks=["semantics"]).checks
    assert not c.passed and c.figure == "coarser bypass"
    assert len(c.counterexample) == 2
    assert c.counterexample[0].startswith("write A starts [0, ")
    assert "(sector 65,536" in c.counterexample[1] or "(sectors 65,536-" in c.counterexample[1]
    assert "chunk 1): bypasses, but no write in flight lies in its chunks" in c.counterexample[1]
    declared = tmp_path / "coarse_declared.c"
    declared.write_text((BAD / "coarse_bypass.c").read_text().replace(
        "        .write_private_size = sizeof(struct cb_write),\n",
        "        .write_private_size = sizeof(struct cb_write),\n        .bypass_granularity = 64 << 20,\n"))
    (ok,) = check_patch(declared, checks=["semantics"]).checks
    assert ok.passed and "declared .bypass_granularity of 64 MiB" in ok.detail
    bad = tmp_path / "coarse_bad_value.c"
    bad.write_text(declared.read_text().replace("64 << 20", "(64 << 20) + 512"))
    with pytest.raises(ValueError, match="bypass_granularity must be 0 or a multiple of 32 MiB"):
        pybcache.load_patch(bad)


def test_the_proposal_declares_its_half_page_granularity_and_passes_semantics():
    p = pybcache.load_patch(EXAMPLES / "v3_proposal.c")
    assert p.bypass_granularity == 32 << 30
    (c,) = check_patch(EXAMPLES / "v3_proposal.c", checks=["semantics"]).checks
    assert c.passed and "declared .bypass_granularity of 32 GiB" in c.detail


# == part 6: a crash names the patch's file:line ======================================================

def test_a_crash_in_the_patch_is_symbolised_to_its_file_and_line(tmp_path):
    import os
    import signal
    import subprocess
    import sys

    from pybcache.bcache.kpatch.check import runner
    library, _ = compile_patch(BAD / "crasher.c")
    code = ("import pybcache; t = pybcache.load_patch(%r).tracker(1 << 30); t.start(4096, 4096)"
            % str(BAD / "crasher.c"))
    env = dict(os.environ, PYBCACHE_KPATCH_SYMBOLISE="1")
    env.pop("PYTHONFAULTHANDLER", None)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env,
                          cwd=tmp_path)
    assert proc.returncode == -signal.SIGSEGV
    frames = runner._symbolise(library, proc.stderr.splitlines(), BAD / "crasher.c")
    assert frames and frames[0].startswith("start (") and frames[0].endswith("crasher.c:13)"), frames
    # the BUG_ON path through check-patch: the detail names the line
    (c,) = check_patch(BAD / "crasher.c", checks=["overflow"]).checks
    assert c.detail.startswith("FAILED: killed by SIGABRT in write_start(0, 4 KiB) [submitter] at start (")
    assert c.detail.endswith("crasher.c:11)")
    assert c.counterexample[0].startswith("the patch's frames, innermost first: start (")


# == part 6: --asan ======================================================================================

def test_asan_reports_a_use_after_free_the_plain_build_misses():
    plain = check_patch(BAD / "use_after_free.c", checks=["balance"], seconds=0.5)
    assert plain.passed
    result = check_patch(BAD / "use_after_free.c", checks=["balance"], seconds=0.5, asan=True)
    (c,) = result.checks
    assert not c.passed and c.figure == "AddressSanitizer"
    assert c.detail.startswith("FAILED: AddressSanitizer: heap-use-after-free in start at ")
    assert c.detail.endswith("use_after_free.c:19")
    assert any("READ of size 4" in line for line in c.counterexample)
    assert result.to_json()["asan"] is True
    with pytest.raises(ValueError, match="asan and tsan cannot both be set"):
        check_patch(BAD / "use_after_free.c", asan=True, tsan=True)
